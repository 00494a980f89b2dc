"""Where the RMSNorm backward's time goes, case by case: a few genomes through the real GPU judge
(CHECK, then BENCH beside INT21's backward, torch and the add roofline) on one dtype's benchmark
matrix, each case's time printed beside the peers' and the roofline's. A probe for the template's
author between searches, not a result table (`evo table` makes that).

    python3 experiments/device/bwd_probe.py --dtype bf16 [--genome JSON ...] [--random 4] --out $OUT/probe.json
    python3 experiments/device/bwd_probe.py --dtype bf16 --random 0 --no-defaults \
        --seeds experiments/seeds/rmsnorm_bwd_v3.json --out $OUT/probe_seeds.json

A genome is judged on every case it can launch (cases it cannot are skipped, as the experiment's
unsupported_speedup does), so one case it cannot hold does not end its row of the table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--matrix", default="quack")
    ap.add_argument("--genome", action="append", default=[], help="a genome as JSON (repeatable)")
    ap.add_argument("--random", type=int, default=2, help="seeded random genomes besides DEFAULT and the extremes")
    ap.add_argument("--no-defaults", action="store_true", help="leave DEFAULT and the extremes out")
    ap.add_argument("--seeds", default="", help="a seeds file ({\"genomes\": [{\"genome\": ...}, ...]}) to probe too")
    ap.add_argument("--skip", type=int, default=0, help="leave out the seeds file's first SKIP genomes (a probe "
                    "that a call's time limit cut is finished by the next call)")
    ap.add_argument("--batch", type=int, default=4, help="genomes a judge call takes (evaluate_in_full returns when "
                    "its whole batch is judged: smaller batches keep more of a probe that a call's limit cuts)")
    ap.add_argument("--baselines", default="int21,torch,roofline")
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    from fitness.family import load_family
    from fitness.gpu_evaluator import GPUEvaluator
    from evo.lessons import read_seeds_file
    from genomes import load_space

    base = load_family("rmsnorm_bwd")
    family = type(base)(dtypes=(args.dtype,))
    fam = sys.modules["_kernels_rmsnorm_bwd_family"]
    space = load_space("rmsnorm_bwd")
    genomes = fam.sample_genomes(args.random)
    if args.no_defaults:
        genomes = genomes[1 + len(fam.EXTREMES):]
    genomes += [space.make(json.loads(g)) for g in args.genome]
    if args.seeds:
        genomes += [space.make(g) for g in read_seeds_file(args.seeds)[args.skip:]]
    baselines = [b for b in args.baselines.split(",") if b]
    out: dict = {"dtype": args.dtype, "matrix": args.matrix, "genomes": {}}
    t0 = time.time()
    with GPUEvaluator(family, space, matrix=f"{args.matrix}:{args.dtype}", baseline=baselines[0],
                      baselines=baselines, workers=None, timeout_s=600, unsupported_speedup=0.01,
                      cache_dir=ROOT / ".cache" / "evo-compile") as ev:
        step = max(1, args.batch)
        batches = (genomes[i:i + step] for i in range(0, len(genomes), step))
        judged = (pair for batch in batches for pair in zip(batch, ev.evaluate_in_full(batch)))
        for g, e in judged:
            rows = {}
            print(f"== {g.key[:8]} {e.status.value} {e.message[:160]}")
            print("   " + json.dumps(dict(g.as_dict()), sort_keys=True))
            for c in e.cases:
                b = dict(c.baselines_us or {})
                rows[c.case] = {"status": c.status.value, "us": c.time_us, "tbps": c.tbps, **{f"{k}_us": v for k, v in b.items()}}
                if c.time_us:
                    peer = b.get(baselines[0])
                    roof = b.get("roofline")
                    print(f"   {c.case:22s} {c.time_us:9.1f} us {c.tbps or 0:5.2f} TB/s | {baselines[0]} "
                          f"{peer or 0:9.1f} ({(peer or 0) / c.time_us:5.2f}x) | roofline {roof or 0:9.1f} "
                          f"({(roof or 0) / c.time_us:4.2f})")
                else:
                    print(f"   {c.case:22s} {c.status.value} {c.message[:120]}")
            out["genomes"][g.key] = {"genome": dict(g.as_dict()), "status": e.status.value, "cases": rows}
            if args.out:
                Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"{len(genomes)} genomes in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
