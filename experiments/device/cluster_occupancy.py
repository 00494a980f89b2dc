"""How many clusters of each clustered RMSNorm-backward launch the H200 holds at once, beside how many
the family's grid asks for (issue 17; kernels/rmsnorm_bwd/INT21_NOTES.md "Measured (session 16)").

    python3 experiments/device/cluster_occupancy.py --out $OUT/cluster_occupancy.json
    python3 experiments/device/cluster_occupancy.py --seeds experiments/seeds/rmsnorm_bwd_v5_sched_probe.json

Why: the family sizes a clustered grid by CTAs per SM (132 x per_sm / cluster clusters: 8 clusters of
16 at 1 CTA an SM), but a cluster must sit in one GPC, and the H200's GPCs are not all whole: if only
6 or 7 clusters of 16 fit at once, a static schedule runs the rest as a second wave (session 16's
b7d1aedd: 1.41-1.53x slower than its dynamic twin d30696bb on every clustered case) and a dynamic one
runs on 96-112 of the 132 SMs (d30696bb 0.69-0.71 of the roofline where INT21 reaches 0.83-0.84).
cuOccupancyMaxActiveClusters answers it per launch. No timing, no verification: each genome's main
kernel compiled (the judge's compiler and cache), loaded, prepared as the judge prepares it, asked.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fitness.family import load_family  # noqa: E402
from genomes import load_space  # noqa: E402


def genomes_of(dispatch: Path, seeds: list[Path], space: Any, clustered_only: bool = True) -> dict[str, Any]:
    """key prefix -> genome: every (clustered) genome of the dispatch table, then the seeds files'."""
    out: dict[str, Any] = {}
    for e in json.loads(dispatch.read_text())["entries"] if dispatch.exists() else ():
        g = space.make(e["genome"])
        if int(g["cluster"]) > 1 or not clustered_only:
            out.setdefault(g.key[:8], g)
    for path in seeds:
        for e in json.loads(path.read_text())["genomes"]:
            g = space.make(e.get("genome", e))
            out.setdefault(g.key[:8], g)
    return out


def clustered_launch(family: Any, genome: Any, case: Any) -> Any:
    """The launch of the sequence whose cluster is larger than one CTA (the main kernel), or None."""
    got = family.launch(genome, case)
    if got is None:
        return None
    for one in ([got] if not isinstance(got, (list, tuple)) else got):
        if int(one.cluster[0]) * int(one.cluster[1]) * int(one.cluster[2]) > 1:
            return one
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dispatch", default=str(ROOT / "results" / "rmsnorm_bwd_dispatch.json"))
    ap.add_argument("--seeds", action="append", default=[], help="a seeds file to ask about too (repeatable)")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--matrix", default="quack")
    ap.add_argument("--cache-dir", default=str(ROOT / ".cache" / "evo-compile"))
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    from fitness.compile import Compiler  # noqa: PLC0415
    from fitness.cuda_backend import CupyBackend  # noqa: PLC0415

    base = load_family("rmsnorm_bwd")
    family = type(base)(dtypes=(args.dtype,))
    space = load_space("rmsnorm_bwd")
    genomes = genomes_of(Path(args.dispatch), [Path(s) for s in args.seeds], space)
    compiler = Compiler(Path(args.cache_dir))
    with cf.ThreadPoolExecutor(max_workers=8) as pool:
        built = dict(zip(genomes, pool.map(lambda g: compiler.compile(family.render(g), family.compile_flags(g)),
                                           genomes.values())))
    backend = CupyBackend()
    cases = family.benchmark_cases(f"{args.matrix}:{args.dtype}")
    rows: list[dict[str, Any]] = []
    for key, g in genomes.items():
        res = built[key]
        if not res.ok:
            rows.append({"genome": key, "error": "compile: " + res.log[-300:]})
            continue
        module = backend.load(res.cubin())
        for case in cases:
            one = clustered_launch(family, g, case)
            if one is None:
                continue
            kernel = backend.get_kernel(module, one.kernel)
            backend.prepare_kernel(kernel, one)
            c = int(one.cluster[0]) * int(one.cluster[1]) * int(one.cluster[2])
            asked = int(one.grid[0]) * int(one.grid[1]) * int(one.grid[2]) // c
            row = {"genome": key, "case": case.id, "cluster": c, "ctas_per_sm": int(g["ctas_per_sm"]),
                   "row_schedule": g["row_schedule"], "block": list(one.block), "shared_bytes": int(one.shared_bytes),
                   "clusters_asked": asked}
            try:
                fit = backend.max_active_clusters(kernel, one)
                # CTAs, not SMs: the driver's answer already counts what binds a CTA (registers,
                # shared memory, the GPC), which the genome's ctas_per_sm does not (session 17:
                # faac39b3 asks 2 an SM and the driver fits 30 clusters of 4, 120 CTAs)
                row.update({"clusters_at_once": fit, "ctas_at_once": fit * c, "ctas_asked": asked * c,
                            "second_wave": asked > fit})
            except Exception as exc:  # noqa: BLE001  (one refused query is a row, not the end)
                row["error"] = f"{type(exc).__name__}: {exc}"
            rows.append(row)
            print(json.dumps(row), flush=True)
    report = {"command": " ".join([sys.executable, *sys.argv]), "device": backend.describe(), "rows": rows,
              "wall_s": round(time.perf_counter() - t0, 1)}
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
