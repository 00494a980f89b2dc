"""Dispatch playoff on the GPU (evo/playoff.py): the near-tied genomes of each row width of a run,
judged again side by side in one process, so that the dispatch table's choice between them rests
on adjacent measurements instead of verdicts recorded at different times.

    python3 experiments/scripts/playoff.py --run /root/work/rmsnorm_fwd_h200_run.json \\
        --margin 0.02 --limit 3 --repeats 3 --out $OUT/playoff
    python3 -m evo.cli dispatch RUN_DIR --playoff $OUT/playoff.json --out rmsnorm_dispatch.json

Writes PREFIX.json (the evidence and the winners; `evo dispatch/export --playoff` read it) and
PREFIX.md, rewritten after every width. --max-s stops starting new widths after that many seconds
(the widths done are kept, the others keep the run's winner); a call killed by its time limit
leaves the file of the widths done.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fitness.records import Evaluation, read_json  # noqa: E402 - after the repo is on the path


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="a run dump (evo dump) of the run whose dispatch is chosen")
    ap.add_argument("--margin", type=float, default=0.02, help="contenders: within this fraction of the fastest")
    ap.add_argument("--limit", type=int, default=3, help="at most this many contenders per width")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--matrix", default=None, help="benchmark matrix (default: the run's)")
    ap.add_argument("--max-s", type=float, default=0.0, help="start no new width after this many seconds (0: no limit)")
    ap.add_argument("--out", required=True, help="output prefix: writes PREFIX.json and PREFIX.md")
    args = ap.parse_args(argv)
    from evo.playoff import Playoff, contenders, markdown, run_playoff
    from genomes import load_space

    run = read_json(args.run)
    cfg = run.get("config") or {}
    space = load_space(run.get("family") or "rmsnorm", (cfg.get("experiment") or {}).get("space_version") or "")
    evaluations = [Evaluation.from_dict(e) for e in run["evaluations"]]
    contests = contenders(evaluations, margin=args.margin, limit=args.limit)
    genomes = {e.key: space.make(e.genome) for e in evaluations}
    matrix = args.matrix or (cfg.get("benchmark") or {}).get("matrix") or "quack:bf16,fp16,fp32"
    print(f"{len(contests)} contested widths, {sum(len(c.contenders) for c in contests)} contenders", flush=True)
    from fitness.gpu_evaluator import GPUEvaluator

    command = " ".join(["python3", "experiments/scripts/playoff.py", *(argv if argv is not None else sys.argv[1:])])
    t0 = time.time()
    results = []

    def device_of(judge) -> str:        # the judge learns its device from the first evaluation
        return judge.describe().get("device") or "?"

    def write(device: str) -> str:      # after every width: a call's time limit keeps what is done
        playoff = Playoff(results, args.margin, args.repeats,
                          meta={"run_id": run.get("run_id"), "device": device, "command": command,
                                "seconds": round(time.time() - t0, 1), "contested": len(contests)})
        Path(args.out + ".json").write_text(json.dumps(playoff.to_dict(), indent=1))
        text = markdown(playoff)
        Path(args.out + ".md").write_text(text)
        return text

    with GPUEvaluator(run.get("family") or "rmsnorm", space, matrix=matrix, baseline="torch", baselines=["torch"],
                      timeout_s=300) as judge:
        # every contender compiled up front, in parallel (carried seeds were never compiled on this machine)
        judge.prefetch(list({k: genomes[k] for c in contests for k in c.contenders}.values()))
        for contest in contests:
            if args.max_s and time.time() - t0 > args.max_s:
                print(f"--max-s {args.max_s:.0f} reached: {len(contests) - len(results)} widths keep the run's winner")
                break
            results += run_playoff(judge.evaluate_cases, genomes, [contest], repeats=args.repeats, progress=print)
            write(device_of(judge))
        print(write(device_of(judge)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
