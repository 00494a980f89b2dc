"""`evo`: run, resume and inspect searches from the shell.

    evo run CONFIG [--replay TABLE] [--store URL] [--seed N] [--evaluations N] [--runs-dir DIR]
    evo resume RUN_DIR
    evo status RUN_DIR
    evo dump RUN_DIR --out FILE.json          # the run's evaluations as a replay table
    evo dispatch RUN [--out FILE.json] [--playoff FILE]   # per dtype and N range, the fastest verified genome
    evo report RUN [--run-id ID] --out DIR [--playoff FILE]   # report.md + figures (RUN: run dir, store URL or dump JSON)
    evo export RUN --out DIR [--name PKG]     # the dispatch table as a standalone pip package

Bad input ends with one line per problem and exit code 2, never a traceback. Ctrl-C (or
SIGTERM) stops cleanly after recording everything already evaluated; `evo resume` continues.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Sequence

from evo.config import ConfigError, load_config
from evo.store import StoreError
from fitness.toolchain import ToolchainError
from fitness.workers import WorkerStartupError


def _sigterm_to_interrupt(signum, frame):  # pragma: no cover - exercised by subprocess tests
    raise KeyboardInterrupt


def _add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="experiment TOML (see experiments/)")
    p.add_argument("--replay", help="answer from a recorded table (.csv/.json) or URL#RUN_ID instead of the GPU")
    p.add_argument("--store", help="SQLAlchemy URL of the store (default: SQLite in the run directory)")
    p.add_argument("--seed", type=int, help="override experiment.seed")
    p.add_argument("--evaluations", type=int, help="override budget.evaluations")
    p.add_argument("--latency", type=float, help="replay: simulated seconds per evaluation")
    p.add_argument("--runs-dir", help="override output.runs_dir")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="evo", description="PTX kernel factory: evolve, verify and time GPU kernels.")
    sub = ap.add_subparsers(dest="command", required=True)
    _add_run_args(sub.add_parser("run", help="start a run from a config"))
    r = sub.add_parser("resume", help="continue a run that was stopped or killed")
    r.add_argument("run_dir")
    r.add_argument("--quiet", action="store_true")
    s = sub.add_parser("status", help="what a run has found so far")
    s.add_argument("run_dir")
    d = sub.add_parser("dump", help="write a run's evaluations as a replay table (JSON)")
    d.add_argument("run_dir")
    d.add_argument("--out", required=True)
    t = sub.add_parser("dispatch", help="dispatch table: the fastest verified genome per dtype and N range")
    t.add_argument("run", help="run dir, store URL or `evo dump` JSON")
    t.add_argument("--run-id", default=None, help="which run, when the store holds several")
    t.add_argument("--baseline", default=None, help="baseline for the speedup column (default: the run's)")
    t.add_argument("--out", help="also write the table as JSON")
    t.add_argument("--playoff", default=None, help="a playoff file (experiments/scripts/playoff.py) whose winners "
                   "replace the recorded fastest of the widths it contested")
    rp = sub.add_parser("report", help="write report.md and its figures (RUN: run dir, store URL or dump JSON)")
    rp.add_argument("run")
    rp.add_argument("--run-id", default=None, help="which run, when the store holds several")
    rp.add_argument("--out", required=True, help="output directory")
    rp.add_argument("--playoff", default=None, help="the playoff file the dispatch table was chosen with "
                    "(experiments/scripts/playoff.py): the report's dispatch section takes its winners")
    ex = sub.add_parser("export", help="write the run's dispatch table as a standalone pip-installable package")
    ex.add_argument("run", help="run dir, store URL or `evo dump` JSON")
    ex.add_argument("--out", required=True, help="package directory to create")
    ex.add_argument("--run-id", default=None, help="which run, when the store holds several")
    ex.add_argument("--name", default=None, help="package name (default ptxk_<family>)")
    ex.add_argument("--cache-dir", default=None, help="compile cache (default: the run's evaluator.cache_dir)")
    ex.add_argument("--bench", default=None, help="benchmark JSON measured with this dispatch table (for README)")
    ex.add_argument("--force", action="store_true", help="replace a non-empty --out")
    ex.add_argument("--playoff", default=None, help="the playoff file the dispatch table was chosen with")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _sigterm_to_interrupt)
    try:
        if args.command == "run":
            return _cmd_run(args)
        if args.command == "resume":
            return _cmd_resume(args)
        if args.command == "status":
            return _cmd_status(args)
        if args.command == "dump":
            from evo.session import dump_run

            return dump_run(args.run_dir, args.out)
        if args.command == "dispatch":
            from evo.session import print_dispatch

            return print_dispatch(args.run, args.baseline, args.out, playoff=args.playoff, run_id=args.run_id)
        if args.command == "report":
            from evo.session import report_run

            return report_run(args.run, args.out, run_id=args.run_id, playoff=args.playoff)
        if args.command == "export":
            from evo.session import export_run

            return export_run(args.run, args.out, run_id=args.run_id, name=args.name, cache_dir=args.cache_dir,
                              bench=args.bench, force=args.force, playoff=args.playoff)
    except (ConfigError, StoreError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (ToolchainError, WorkerStartupError) as exc:
        # the machine, not a candidate, is broken: nothing more can be judged here
        print(f"error: {exc}", file=sys.stderr)
        return 3
    return 2


def _cmd_run(args) -> int:
    from evo.session import start_run

    cfg = load_config(args.config)
    overrides = {}
    if args.replay:
        overrides["evaluator.kind"] = "replay"
        overrides["evaluator.replay"] = args.replay
    if args.store:
        overrides["store.url"] = args.store
    if args.seed is not None:
        overrides["experiment.seed"] = args.seed
    if args.evaluations is not None:
        overrides["budget.evaluations"] = args.evaluations
    if args.latency is not None:
        overrides["evaluator.latency_s"] = args.latency
    if args.runs_dir:
        overrides["output.runs_dir"] = args.runs_dir
    if args.quiet:
        overrides["output.progress"] = False
    if args.replay and "://" not in args.replay:
        # a path given on the command line is relative to where the command runs
        from pathlib import Path

        overrides["evaluator.replay"] = str(Path(args.replay).resolve())
    cfg = cfg.with_overrides(overrides)
    return start_run(cfg)


def _cmd_resume(args) -> int:
    from evo.session import resume_run

    return resume_run(args.run_dir, quiet=args.quiet)


def _cmd_status(args) -> int:
    from evo.session import print_status

    return print_status(args.run_dir)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
