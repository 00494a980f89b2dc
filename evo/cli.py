"""`evo`: run, resume and inspect searches from the shell.

    evo run CONFIG [--replay TABLE] [--store URL] [--seed N] [--evaluations N] [--runs-dir DIR]
    evo resume RUN_DIR            (or URL#RUN_ID, or an `evo dump` file: the run restored here)
    evo status RUN                            # RUN: a run directory, a store URL or an `evo dump` file
    evo dump RUN --out FILE.json[.gz]         # the run's evaluations as a replay table
    evo dispatch RUN [--out FILE.json] [--playoff FILE]   # per dtype and N range, the fastest verified genome
    evo report RUN --out DIR [--playoff FILE]   # report.md + figures
    evo export RUN --out DIR [--name PKG]     # the dispatch table as a standalone pip package
    evo export RUN --with RUN2 --out DIR      # ... with a companion's table (a forward with its backward: trains)
    evo table RUN --out PREFIX [--playoff FILE]   # GPU: the dispatch table timed beside every baseline
    evo playoff RUN --out PREFIX [--margin F]  # GPU: near-tied genomes of each width judged again side by side
    evo ab RUN --out PREFIX --cases IDS --pairs A:B,...   # GPU: same-process A/B of genome pairs
    evo transcript RUN --out FILE.json        # the run's LLM exchanges, for [operators.llm] replay
    evo operators-study RECORDING... --out PREFIX   # guided vs plain mutation on recorded verdicts
    evo lessons build|show|export ...          # lessons per family, space version, GPU architecture, shape class
    evo slice plan|export-kt|race|warm-start ...   # a densely recorded slice and the searches raced on it

Bad input ends with one line per problem and exit code 2, never a traceback; a machine that cannot
judge (no GPU, no nvcc) exits 3. Ctrl-C (or SIGTERM) stops cleanly after recording everything
already evaluated; `evo resume` continues. A closed pipe (`evo status RUN | head`) ends quietly.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Sequence

from evo.config import ConfigError, load_config
from evo.store import StoreError
from fitness.toolchain import ToolchainError
from fitness.workers import NoDeviceError, WorkerPoolError

RUN_HELP = "a run directory, an `evo dump` file (.json/.json.gz) or a store URL (URL#RUN_ID)"


def _sigterm_to_interrupt(signum, frame):  # pragma: no cover - exercised by subprocess tests
    raise KeyboardInterrupt


def version() -> str:
    from importlib.metadata import PackageNotFoundError, version as _version

    try:
        return _version("ptx-kernel-factory")
    except PackageNotFoundError:       # run from a checkout that was never installed
        return "unknown (not installed)"


def _add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="experiment TOML (see experiments/)")
    p.add_argument("--replay", metavar="TABLE", help="answer from a recorded table (.csv/.json/.json.gz; a path "
                   "relative to the working directory) or URL#RUN_ID instead of the GPU")
    p.add_argument("--store", metavar="URL", help="SQLAlchemy URL of the store (default: SQLite in the run directory)")
    p.add_argument("--seed", type=int, help="override experiment.seed")
    p.add_argument("--evaluations", type=int, metavar="COUNT", help="override budget.evaluations (an Optuna stage "
                   "larger than half of it is scaled down to half, with a notice)")
    p.add_argument("--latency", type=float, metavar="S", help="replay: simulated seconds per evaluation")
    p.add_argument("--runs-dir", metavar="DIR", help="override output.runs_dir")
    _add_quiet_report(p)


def _add_quiet_report(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="no progress (bar or periodic lines)")
    p.add_argument("--no-report", action="store_true", help="do not write report.md into the run directory at the end")


def _add_run_source(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help=RUN_HELP)
    p.add_argument("--run-id", default=None, help="which run, when the store holds several")


def _first_try(repo: Path = Path(__file__).resolve().parent.parent) -> str:
    """The help's first command: the first experiment config with a recorded dump of its run in
    results/ (`<config stem>_run.json`), replayed without a GPU."""
    for cfg in sorted((repo / "experiments").glob("*.toml")):
        dump = repo / "results" / f"{cfg.stem}_run.json"
        if dump.is_file():
            return (f"First try: evo run experiments/{cfg.name} --replay results/{dump.name} "
                    "(no GPU needed).")
    return "First try: evo run CONFIG.toml --replay RUN_DUMP.json (a recorded run; no GPU needed)."


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="evo", description="PTX kernel factory: evolve, verify and time GPU kernels.",
                                 epilog=_first_try())
    ap.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_run_args(sub.add_parser("run", help="start a run from a config"))
    r = sub.add_parser("resume", help="continue a run that was stopped or killed")
    r.add_argument("run_dir", help="the run directory `evo run` made (runs/<name>-<time>-<id>), the run's store "
                                   "URL#RUN_ID to resume on another host a run whose store it reaches (PostgreSQL), "
                                   "or an `evo dump` file of it (a host that keeps nothing between sessions)")
    r.add_argument("--runs-dir", default="runs", help="with URL#RUN_ID or a dump: where this host makes the run's "
                                                      "directory (default: runs)")
    r.add_argument("--config-dir", default=".", help="with a dump: the folder of the config the run was started "
                                                     "from, for its relative paths (default: .)")
    _add_quiet_report(r)
    s = sub.add_parser("status", help="what a run has found so far (safe while it runs)")
    _add_run_source(s)
    d = sub.add_parser("dump", help="write a run's evaluations as a replay table (JSON, gzipped for .gz)")
    _add_run_source(d)
    d.add_argument("--out", required=True, help="the file to write (.json or .json.gz)")
    t = sub.add_parser("dispatch", help="dispatch table: the fastest verified genome per dispatch range")
    _add_run_source(t)
    t.add_argument("--baseline", default=None, help="baseline for the speedup column (default: the run's)")
    t.add_argument("--out", help="also write the table as JSON")
    t.add_argument("--playoff", default=None, help="a playoff file (`evo playoff`) whose winners "
                   "replace the recorded fastest of the widths it contested")
    rp = sub.add_parser("report", help="write report.md and its figures")
    _add_run_source(rp)
    rp.add_argument("--out", required=True, help="output directory")
    rp.add_argument("--playoff", default=None, help="the playoff file the dispatch table was chosen with: "
                    "the report's dispatch section takes its winners")
    ex = sub.add_parser("export", help="write the run's dispatch table as a standalone pip-installable package")
    _add_run_source(ex)
    ex.add_argument("--out", required=True, help="package directory to create")
    ex.add_argument("--name", default=None, help="package name (default ptxk_<family>)")
    ex.add_argument("--cache-dir", default=None, help="compile cache (default: the run's evaluator.cache_dir)")
    ex.add_argument("--bench", default=None, help="the final table's JSON (`evo table`) measured with this "
                    "dispatch table, for the package README")
    ex.add_argument("--force", action="store_true", help="replace a non-empty --out")
    ex.add_argument("--playoff", default=None, help="the playoff file the dispatch table was chosen with")
    ex.add_argument("--with", dest="companions", action="append", default=[], metavar="RUN",
                    help="a run of a companion family the run's family names (e.g. its backward): its table "
                         "goes into the same package, which the family's templates then wire (repeatable)")
    tb = sub.add_parser("table", help="GPU: the final table: the run's dispatch table verified and timed beside "
                        "the family's baselines in one process (`evo export --bench PREFIX.json` takes it)")
    _add_run_source(tb)
    tb.add_argument("--out", required=True, help="output prefix: writes PREFIX.json and PREFIX.md")
    tb.add_argument("--playoff", default=None, help="the playoff file the dispatch table was chosen with")
    tb.add_argument("--baselines", default="", help="comma list (default: every baseline the family offers)")
    tb.add_argument("--cases", default="", help="comma list of case ids of the matrix (default: all)")
    _add_device_args(tb, "genome")
    po = sub.add_parser("playoff", help="GPU: judge again, side by side in one process, the genomes within a margin "
                        "of each dispatch width's recorded fastest (winners for dispatch/export --playoff)")
    _add_run_source(po)
    po.add_argument("--out", required=True, help="output prefix: writes PREFIX.json (evidence and winners) and PREFIX.md")
    po.add_argument("--margin", type=float, default=0.02, help="contenders: within this fraction of the fastest")
    po.add_argument("--limit", type=int, default=3, help="at most this many contenders per width")
    po.add_argument("--repeats", type=int, default=3, help="rounds per width, the order rotated each round")
    _add_device_args(po, "width")
    ab = sub.add_parser("ab", help="GPU: same-process A/B of genome pairs on chosen cases (ratios B/A of adjacent "
                        "evaluations)")
    _add_run_source(ab)
    ab.add_argument("--out", required=True, help="output prefix: writes PREFIX.json and PREFIX.md")
    ab.add_argument("--cases", required=True, help="comma list of case ids of the matrix")
    ab.add_argument("--pairs", default="", help="A:B[,A:B...], each side a genome key (or unique prefix) of the run "
                    "with optional +gene=value changes")
    ab.add_argument("--neighbours", default="", help="SPEC[,SPEC...]: pair each with its every valid one-step neighbour")
    ab.add_argument("--repeats", type=int, default=3, help="adjacent evaluations of each pair, order alternating")
    _add_device_args(ab, "pair")
    tr = sub.add_parser("transcript", help="write a run's LLM exchanges (prompts and answers) as a transcript that "
                        "[operators.llm] replay answers from, without a server")
    _add_run_source(tr)
    tr.add_argument("--out", required=True, help="the transcript file to write (JSON)")
    st = sub.add_parser("operators-study", help="guided proposals vs plain mutation on recorded verdicts: "
                        "improvement rate and new bests per 100 children, median over seeds")
    st.add_argument("recordings", nargs="+", help="recorded runs (`evo dump` JSON) of one family and space version")
    st.add_argument("--out", required=True, help="output prefix: writes PREFIX.json, PREFIX.md and PREFIX.png")
    st.add_argument("--seeds", type=int, default=20, help="seeds (each: both operators from the same start)")
    st.add_argument("--children", type=int, default=60, help="children per operator per seed")
    st.add_argument("--max-distance", type=int, default=3, help="a child differs from its parent in at most this "
                    "many genes (both operators)")
    st.add_argument("--rules", default="", help="guided rules file (default: the family's latest)")
    from evo.lessons_cli import add_parsers as add_lessons_and_slice

    add_lessons_and_slice(sub)        # evo lessons build|show|export, evo slice plan|export-kt|race|warm-start
    return ap


def _add_device_args(p: argparse.ArgumentParser, unit: str) -> None:
    p.add_argument("--matrix", default=None, help="benchmark matrix (default: the run's benchmark.matrix)")
    p.add_argument("--max-s", type=float, default=0.0, help=f"start no new {unit} after this many seconds (0: no "
                   "limit); the files are written after every one, so a time limit keeps what is done")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:
        # a run records everything evaluated and says how to resume (evo.session); the other commands
        # (report, export, table, playoff, ab) stop here: the latter three wrote their files after every step
        print("\ninterrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`evo status RUN | head`): stop quietly, as a killed pipe writer would
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        return 141


def _main(argv: Sequence[str] | None) -> int:
    args = parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _sigterm_to_interrupt)
    try:
        if args.command == "run":
            return _cmd_run(args)
        if args.command == "resume":
            from evo.rundir import adopt_run_dir
            from evo.session import resume_run

            if "://" in args.run_dir:
                run_dir = adopt_run_dir(args.run_dir, args.runs_dir)
            elif Path(args.run_dir).is_file():
                from evo.rundir import restore_run_dir

                run_dir = restore_run_dir(args.run_dir, args.runs_dir, args.config_dir)
            else:
                run_dir = args.run_dir
            return resume_run(run_dir, quiet=args.quiet, report=not args.no_report)
        if args.command == "status":
            from evo.session import print_status

            return print_status(args.run, run_id=args.run_id)
        if args.command == "dump":
            from evo.session import dump_run

            return dump_run(args.run, args.out, run_id=args.run_id)
        if args.command == "dispatch":
            from evo.session import print_dispatch

            return print_dispatch(args.run, args.baseline, args.out, playoff=args.playoff, run_id=args.run_id)
        if args.command == "report":
            from evo.session import report_run

            return report_run(args.run, args.out, run_id=args.run_id, playoff=args.playoff)
        if args.command == "export":
            from evo.session import export_run

            return export_run(args.run, args.out, run_id=args.run_id, name=args.name, cache_dir=args.cache_dir,
                              bench=args.bench, force=args.force, playoff=args.playoff,
                              companions=args.companions)
        if args.command == "transcript":
            from evo.proposers import write_run_transcript

            return write_run_transcript(args.run, args.out, run_id=args.run_id)
        if args.command in ("lessons", "slice"):
            from evo.lessons_cli import main as lessons_main

            return lessons_main(args)
        if args.command == "operators-study":
            from evo.operator_study import main as operators_study

            return operators_study(args.recordings, args.out, seeds=args.seeds, children=args.children,
                                   max_distance=args.max_distance, rules=args.rules)
        if args.command in ("playoff", "ab", "table"):
            return _cmd_device_step(args, argv)
    except (ConfigError, StoreError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except NoDeviceError:
        from evo.session import NO_GPU

        print(f"error: {NO_GPU}", file=sys.stderr)
        return 3
    except (ToolchainError, WorkerPoolError) as exc:
        # the machine, not a candidate, is broken: nothing more can be judged here
        print(f"error: {exc}", file=sys.stderr)
        return 3
    return 2


def _cmd_device_step(args, argv: Sequence[str] | None) -> int:
    """`evo playoff` / `evo ab`: a product step judged on the GPU; its files are rewritten after every
    width or pair. Bad input (a source that is not a run, a pair that is no genome) is one line."""
    from evo.ab import ABError, run_ab
    from evo.playoff import play
    from evo.table import build_table

    command = " ".join(["evo", *(argv if argv is not None else sys.argv[1:])])
    try:
        if args.command == "table":
            text = build_table(args.run, args.out, playoff=args.playoff,
                               baselines=[b for b in args.baselines.split(",") if b] or None, matrix=args.matrix,
                               cases=args.cases.split(","), run_id=args.run_id, command=command, max_s=args.max_s)
        elif args.command == "playoff":
            text = play(args.run, args.out, margin=args.margin, limit=args.limit, repeats=args.repeats,
                        matrix=args.matrix, max_s=args.max_s, run_id=args.run_id, command=command)
        else:
            text = run_ab(args.run, args.out, cases=args.cases.split(","), pairs=args.pairs,
                          neighbours=args.neighbours, repeats=args.repeats, matrix=args.matrix, max_s=args.max_s,
                          run_id=args.run_id, command=command)
    except (ABError, ValueError) as exc:
        if isinstance(exc, (ConfigError, StoreError)):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(text)
    return 0


def _cmd_run(args) -> int:
    from evo.session import start_run

    cfg = load_config(args.config)
    overrides = {}
    if args.replay:
        overrides["evaluator.kind"] = "replay"
        overrides["evaluator.replay"] = args.replay
        if "://" not in args.replay:
            # a path given on the command line is relative to where the command runs
            path = Path(args.replay).expanduser().resolve()
            if not path.is_file():
                shown = "" if str(path) == args.replay else f" ({path}: --replay paths are relative to the working directory)"
                print(f"error: --replay {args.replay}: no such file{shown}", file=sys.stderr)
                return 2
            overrides["evaluator.replay"] = str(path)
    if args.store:
        overrides["store.url"] = args.store
    if args.seed is not None:
        overrides["experiment.seed"] = args.seed
    if args.evaluations is not None:
        overrides["budget.evaluations"] = args.evaluations
        opt = cfg.search.optuna
        if opt.enabled and args.evaluations >= 2 and opt.trials > args.evaluations // 2:
            # a first try with a small budget should run, not be refused over the second stage's share
            overrides["search.optuna.trials"] = args.evaluations // 2
            print(f"note: --evaluations {args.evaluations}: search.optuna.trials scaled from {opt.trials} to "
                  f"{args.evaluations // 2} (half of the budget)", file=sys.stderr)
    if args.latency is not None:
        overrides["evaluator.latency_s"] = args.latency
    if args.runs_dir:
        overrides["output.runs_dir"] = args.runs_dir
    if args.quiet:
        overrides["output.progress"] = False
    cfg = cfg.with_overrides(overrides)
    return start_run(cfg, report=not args.no_report)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
