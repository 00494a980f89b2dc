"""Throughput of the GPU judge: verified RMSNorm forward candidates per GPU-minute.

Judges the default genome plus N seeded random genomes of genomes/rmsnorm.py through the full
cascade (compile, static checks, check cases, then the benchmark matrix with the torch baseline
timed beside each candidate) and prints one line per candidate and the totals.

    python experiments/scripts/throughput.py --genomes 40 --matrix quack:bf16 --out results/throughput.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> int:
    from fitness.gpu_evaluator import GPUEvaluator
    from genomes.rmsnorm import DEFAULT, SPACE

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--genomes", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--matrix", default="quack:bf16")
    ap.add_argument("--baseline", default="torch")
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    rng = random.Random(args.seed)
    genomes = [DEFAULT]
    while len(genomes) < args.genomes:
        g = SPACE.sample(rng)
        if g not in genomes:
            genomes.append(g)
    t0 = time.time()
    rows = []
    with GPUEvaluator("rmsnorm", SPACE, matrix=args.matrix, baseline=args.baseline, baselines=[args.baseline],
                      timeout_s=120, seed=args.seed) as ev:
        b = ev.batch_size
        for i in range(0, len(genomes), b):
            ev.prefetch(genomes[i + b:i + 2 * b])      # as evo run does: compile while the GPU judges
            for e in ev.evaluate(genomes[i:i + b]):
                o = e.objectives
                rows.append({"key": e.key, "status": e.status.value, "suspect": e.suspect,
                             "geomean_speedup": o.get("geomean_speedup"), "min_speedup": o.get("min_speedup"),
                             "mean_tbps": o.get("mean_tbps"), "gpu_seconds": float(e.artifacts.get("gpu_seconds", 0) or 0),
                             "message": e.message[:160], "genome": dict(e.genome)})
                print(f"{e.status.value:13s} {o.get('geomean_speedup', float('nan')):6.3f}x "
                      f"min {o.get('min_speedup', float('nan')):6.3f}x {o.get('mean_tbps', float('nan')):5.2f} TB/s "
                      f"gpu {rows[-1]['gpu_seconds']:5.2f}s  {e.message[:100]}", flush=True)
        stats = ev.stats()
        info = ev.describe()
    wall = time.time() - t0
    ok = sum(r["status"] == "OK" for r in rows)
    summary = {"command": " ".join(["python", *sys.argv]), "device": info.get("device"), "toolkit": info.get("toolkit"),
               "matrix": args.matrix, "bench_cases": info.get("bench_cases"), "candidates": len(rows), "verified_ok": ok,
               "wall_seconds": wall, "verified_per_wall_minute": ok / (wall / 60.0) if wall > 0 else None,
               "stats": stats, "rows": rows}
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=1, default=str))
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
