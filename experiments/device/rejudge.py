"""Lab tooling (GPU machine): judge every genome of a dispatch table again, and what it costs.

    python3 experiments/device/rejudge.py --dispatch results/rmsnorm_dispatch.json --out $OUT/rejudge_new.json
    PYTHONPATH=/tmp/site:$PWD/.oldjudge python3 experiments/device/rejudge.py --label before ...

Each genome goes through the full judge (compile, static checks, CHECK, BENCH on the matrix,
timed beside torch) with no hopeless cut; the file gets, per genome, its verdict and message,
its GPU seconds (the sum of its jobs' worker time, as `GPUEvaluator.stats()` counts them) split
by stage, and per case the time, the speedup vs torch and the status. The second form runs an
older checkout of the judge (copied into a git-ignored folder) on the same genomes, in the same
device call, for a before/after cost on the same GPU. Written after every batch.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def write_dump(path: Path, evaluations: list, args: argparse.Namespace) -> None:
    """The evaluations as an `evo dump` file (evo dispatch / report / export read it)."""
    import tomllib

    from genomes.rmsnorm import SPACES
    config = tomllib.loads(Path(args.config).read_text())
    config.setdefault("experiment", {})["space_version"] = max(SPACES, key=lambda v: int(v[1:]))   # the latest
    config["experiment"]["name"] = "rmsnorm-fwd-h200-rejudge"
    config["experiment"]["description"] = (f"every genome of {args.dispatch} judged again by the hardened judge "
                                           f"(experiments/device/rejudge.py, label {args.label})")
    run_id = f"rmsnorm-fwd-h200-rejudge-{time.strftime('%Y%m%d')}-{args.label}"
    data = {"run_id": run_id, "family": "rmsnorm", "seed": 0, "config": config,
            "lineage": [{"key": e.key, "generation": 0, "stage": "rejudge", "operator": "rejudge", "parents": [],
                         "seq": i} for i, e in enumerate(evaluations)],
            "evaluations": [e.to_dict() for e in evaluations]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, default=str))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dispatch", required=True, help="a dispatch table (evo dispatch's JSON)")
    ap.add_argument("--matrix", default="quack", help="benchmark matrix of the family (default quack: 33 cases)")
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--label", default="hardened", help="what this judge is (recorded)")
    ap.add_argument("--limit", type=int, default=0, help="judge only the first N genomes (0: all)")
    ap.add_argument("--batch", type=int, default=4, help="genomes per evaluate() call")
    ap.add_argument("--max-s", type=float, default=0.0, help="start no batch after this many seconds (0: none)")
    ap.add_argument("--variant", action="append", default=[], metavar="GENE=VALUE",
                    help="also judge every genome with this one gene changed, where that is a valid genome "
                         "(e.g. inf_safe=true)")
    ap.add_argument("--start", type=int, default=0, help="skip the first N genomes (split over calls)")
    ap.add_argument("--keys", default="", help="comma-separated key prefixes: judge only these genomes")
    ap.add_argument("--dump", default="", help="also write the evaluations as an `evo dump` replay table")
    ap.add_argument("--config", default="experiments/rmsnorm_fwd_h200.toml",
                    help="the experiment config the dump names (its settings describe the judge)")
    ap.add_argument("--unsupported-speedup", type=float, default=None,
                    help="as [evaluator] unsupported_speedup: a specialist skips cases it cannot launch")
    args = ap.parse_args()

    import fitness
    from fitness.gpu_evaluator import GPUEvaluator
    from genomes import load_space

    table = json.loads(Path(args.dispatch).read_text())
    space = load_space("rmsnorm")
    genomes, seen = [], set()
    for e in table["entries"]:
        g = space.make(e["genome"])
        if g.key not in seen:
            seen.add(g.key)
            genomes.append(g)
    for spec in args.variant:
        gene, _, raw_value = spec.partition("=")
        value = {"true": True, "false": False}.get(raw_value.lower(), raw_value)
        for g in list(genomes):
            d = dict(g.as_dict())
            if gene not in d or d[gene] == value:
                continue
            d[gene] = value
            if space.violations(d):
                continue
            v = space.make(d)
            if v.key not in seen:
                seen.add(v.key)
                genomes.append(v)
    genomes = genomes[args.start:]
    if args.keys:
        wanted = [k.strip() for k in args.keys.split(",") if k.strip()]
        genomes = [g for g in genomes if any(g.key.startswith(k) for k in wanted)]
    if args.limit:
        genomes = genomes[:args.limit]
    evaluations = []
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {"label": args.label, "judge": str(Path(fitness.__file__).resolve().parent), "dispatch": args.dispatch,
              "matrix": args.matrix, "genomes": [], "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    t0 = time.time()
    with GPUEvaluator("rmsnorm", space, matrix=args.matrix, baseline="torch", baselines=["torch"], workers=None,
                      timeout_s=240, cache_dir="/tmp/evo-compile-" + args.label,
                      **({"unsupported_speedup": args.unsupported_speedup}
                         if args.unsupported_speedup is not None else {})) as ev:
        for i in range(0, len(genomes), args.batch):
            if args.max_s and time.time() - t0 > args.max_s:
                record["stopped"] = f"--max-s {args.max_s:g} reached after {i} genomes"
                break
            batch = genomes[i:i + args.batch]
            for g, e in zip(batch, ev.evaluate_in_full(batch)):
                evaluations.append(e)
                stages = json.loads(e.artifacts.get("stage_seconds", "{}"))
                record["genomes"].append({
                    "key": g.key, "status": e.status.value, "message": e.message,
                    "gpu_seconds": float(e.artifacts.get("gpu_seconds", 0.0)),
                    "check_seconds": stages.get("check"), "bench_seconds": stages.get("bench"),
                    "compile_seconds": stages.get("compile"),
                    "check_unsupported": json.loads(e.artifacts.get("check_unsupported", "[]")),
                    "geomean_speedup": e.objectives.get("geomean_speedup"),
                    "cases": {c.case: {"status": c.status.value, "time_us": c.time_us, "spread_us": c.spread_us,
                                       "torch_us": (c.baselines_us or {}).get("torch"),
                                       "message": c.message[:300]} for c in e.cases},
                })
                print(f"[{args.label}] {g.key[:8]} {e.status.value} gpu {record['genomes'][-1]['gpu_seconds']:.2f} s "
                      f"(check {stages.get('check', 0):.2f}, bench {stages.get('bench', 0):.2f}) {e.message[:120]}",
                      flush=True)
            record["device"] = ev.describe().get("device")
            record["stats"] = ev.stats()
            record["wall_s"] = time.time() - t0
            out.write_text(json.dumps(record, indent=1, default=str))
            if args.dump:
                write_dump(Path(args.dump), evaluations, args)
    print(f"[{args.label}] {len(record['genomes'])} genomes in {time.time() - t0:.0f} s; "
          f"stats {record.get('stats')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
