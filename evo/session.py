"""What `evo run`, `evo resume` and `evo status` do, as plain functions (the CLI only parses)."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from fitness.replay import ReplayEvaluator
from genomes import load_space
from evo.config import Config
from evo.evaluators import build_evaluator, check_environment, check_target_device
from evo.lessons import carried_evaluations, prior_evaluations, run_lessons, seed_evidence, seed_genomes
from evo.progress import ProgressBar
from evo.rundir import RunDir, create_run_dir, open_run_dir
from evo.run import Run, RunSummary, new_run_info
from evo.store import best_record, open_store


def execute(rd: RunDir, quiet: bool = False) -> RunSummary:
    """Run (or continue) the run in `rd` to the end of its budget."""
    return _execute(rd, quiet)[0]


def _execute(rd: RunDir, quiet: bool = False) -> tuple[RunSummary, int | None]:
    """The run's summary, and how many evaluations its replay recording holds (None: no replay).
    A machine that cannot judge (no GPU, or not the GPU of [target] gpu) leaves the run marked failed,
    with the reason, before the error goes up: `evo status` must not show it "running" forever."""
    from fitness.workers import NoDeviceError, WorkerPoolError, WrongDeviceError

    cfg = rd.config
    space = load_space(cfg.experiment.family, cfg.experiment.space_version)
    store = open_store(rd.store_url)
    try:
        try:
            store.get_run(rd.run_id)
        except KeyError:
            store.create_run(new_run_info(cfg, rd.run_id))
        evidence = seed_evidence(cfg, space)

        def failed(exc: WorkerPoolError) -> None:
            why = (NO_GPU if isinstance(exc, NoDeviceError) else str(exc) if isinstance(exc, WrongDeviceError)
                   else f"no evaluator: {exc}")
            store.update_run(rd.run_id, state="failed", notes={"stop_reason": why})

        try:
            evaluator = build_evaluator(cfg, space)
        except WorkerPoolError as exc:
            failed(exc)
            raise
        recorded = len(evaluator) if isinstance(evaluator, ReplayEvaluator) else None
        total = cfg.budget.evaluations
        if recorded is not None:
            device = evaluator.describe().get("device", "").removeprefix("replay of ")
            print(f"replaying {evaluator.source}: {recorded} evaluations recorded on {device or '?'}, "
                  f"verdict for verdict (no GPU needed)", file=sys.stderr)
            total = min(total, recorded)
        bar = ProgressBar(total, cfg.objective.metric, enabled=cfg.output.progress and not quiet)
        with evaluator:
            try:
                problem = check_target_device(cfg, evaluator)
                if problem:
                    raise WrongDeviceError(problem)
            except WorkerPoolError as exc:
                failed(exc)
                raise
            run = Run(cfg, space, store, evaluator, rd.run_id, optuna_storage=rd.optuna_storage,
                      seeds=seed_genomes(cfg, space, evidence), prior=prior_evaluations(cfg, space, evidence),
                      carried=carried_evaluations(cfg, space, evidence), on_progress=bar,
                      lessons=run_lessons(cfg, evaluator))
            try:
                return run.optimize(), recorded
            finally:
                bar.close()
    finally:
        store.close()


#: why a run on a machine without a GPU stopped: the config keys that change it, not Python arguments
NO_GPU = ('no GPU visible for [evaluator] kind = "gpu"; on a machine with one, set [evaluator] workers = N to '
          'start N workers anyway; without one, replay a recording: --replay FILE (or [evaluator] kind = '
          '"replay", replay = FILE)')


def stop_reason(reason: str, replayed: int | None = None, recorded: int | None = None) -> str:
    """A run's stop reason as a reader should take it: a replay that reached the end of its recording
    ended normally (the recorded search stopped there too), it did not fail."""
    if "recording ends here" not in reason:
        return reason
    if recorded is None:
        return "the replay reached the end of its recording"
    if replayed is not None and replayed < recorded:
        return (f"the replay asked a genome its recording has no verdict for ({replayed} of the {recorded} recorded "
                f"evaluations replayed: from here the search differs from the recorded one)")
    return f"the replay reached the end of its recording (all {recorded} recorded evaluations replayed)"


def _report(rd: RunDir, summary: RunSummary, recorded: int | None = None, report: bool = True) -> None:
    metric = rd.config.objective.metric
    reason = stop_reason(summary.stop_reason, summary.evaluations, recorded)
    print(f"run {summary.run_id}: {summary.evaluations} evaluations ({summary.new_evaluations} new), "
          f"stopped: {reason}")
    print("  by status: " + ", ".join(f"{k} {v}" for k, v in sorted(summary.by_status.items())))
    if summary.best:
        b = summary.best
        print(f"  best {metric} = {b.fitness(metric):.6g}  key {b.key}  (generation {b.generation}, {b.operator})")
        print(f"  genome: {dict(b.evaluation.genome)}")
    print(f"  run directory: {rd.path}")
    if report and rd.config.output.report and summary.evaluations:
        print(f"  report: {_write_run_report(rd)}")
    print(f"  next: evo dispatch {rd.path}  |  evo export {rd.path} --out DIR")


def _write_run_report(rd: RunDir) -> str:
    """report.md and its figures in the run directory (output.report); a failure to draw them is a
    line, not a failed run: every evaluation is recorded already."""
    from evo.analysis import load_run
    from evo.report import write_report

    try:
        return str(write_report(load_run(rd.path), rd.path / "report"))
    except Exception as exc:  # noqa: BLE001 - the run is recorded; the report can be made later
        return f"not written ({type(exc).__name__}: {exc}); evo report {rd.path} --out DIR"


def _interrupted(rd: RunDir) -> int:
    print(f"\ninterrupted; everything evaluated so far is recorded. Continue with:\n  evo resume {rd.path}",
          file=sys.stderr)
    return 130


def start_run(cfg: Config, report: bool = True) -> int:
    check_environment(cfg, cfg.store.url or None)
    rd = create_run_dir(cfg)
    print(f"run {rd.run_id} in {rd.path}", file=sys.stderr)
    try:
        summary, recorded = _execute(rd)
    except KeyboardInterrupt:
        return _interrupted(rd)
    _report(rd, summary, recorded, report=report)
    return 0


def resume_run(path: str | Path, quiet: bool = False, report: bool = True) -> int:
    rd = open_run_dir(path)
    check_environment(rd.config)
    try:
        summary, recorded = _execute(rd, quiet=quiet)
    except KeyboardInterrupt:
        return _interrupted(rd)
    _report(rd, summary, recorded, report=report)
    return 0


def print_status(source: str | Path, run_id: str | None = None) -> int:
    """`evo status` of a run directory, a store URL (URL#RUN_ID) or an `evo dump` file; safe while
    the run writes."""
    frames = _frames_or_error(source, run_id)
    if frames is None:
        return 2
    run, records, metric = frames.run, frames.records, frames.metric
    budget = (run["config"].get("budget") or {}).get("evaluations", "?")
    by_status: dict[str, int] = {}
    for r in records:
        by_status[r.status.value] = by_status.get(r.status.value, 0) + 1
    best = best_record(records, metric)
    print(f"run {run['run_id']} ({run['family']}, seed {run['seed']}): {run['state']}, "
          f"{len(records)}/{budget} evaluations, {run['elapsed_s']:.1f} s")
    if run["stop_reason"]:
        print(f"  stop reason: {stop_reason(run['stop_reason'])}")
    print("  by status: " + (", ".join(f"{k} {v}" for k, v in sorted(by_status.items())) or "none yet"))
    if records:
        last = records[-1]
        print(f"  last: generation {last.generation} of stage {last.stage}")
    if best:
        print(f"  best {metric} = {best.fitness(metric):.6g}  key {best.key}  ({best.stage}, generation {best.generation})")
        print(f"  genome: {dict(best.evaluation.genome)}")
    for line in search_aids(records, metric):
        print(f"  {line}")
    return 0


def search_aids(records, metric: str) -> list[str]:
    """What search.carry_seeds and search.ga.screen did in a run, from its records: how many
    seeds were carried, and the children kept by the screening model vs at random, with the
    median of the metric of each (failed ones count as missing). Empty when neither was used."""
    lines = []
    carried = sum(1 for r in records if "carried_from" in r.evaluation.artifacts)
    if carried:
        lines.append(f"carried seeds: {carried} (answered from their earlier verdicts, no GPU time)")
    groups: dict[str, list[float | None]] = {}
    for r in records:
        _, at, how = r.operator.rpartition("@")
        if at and how in ("model", "explore"):
            groups.setdefault(how, []).append(r.fitness(metric))
    if groups:
        parts = []
        for how in ("model", "explore"):
            vals = groups.get(how, [])
            ok = [v for v in vals if v is not None]
            med = f"median {metric} {statistics.median(ok):.4g}" if ok else "none verified"
            parts.append(f"{len(vals)} kept by {'the model' if how == 'model' else 'chance'} ({med}, "
                         f"{len(vals) - len(ok)} failed)")
        lines.append("screened children: " + "; ".join(parts))
    return lines


def dump_run(source: str | Path, out: str | Path, run_id: str | None = None) -> int:
    """The run's evaluations (with their lineage and the run's events: proposals, LLM exchanges) as
    a JSON replay table (`evo run ... --replay FILE`), gzipped when `out` ends in .gz; the source
    is a run directory, a store URL or another dump."""
    import gzip
    import json

    frames = _frames_or_error(source, run_id)
    if frames is None:
        return 2
    run, records = frames.run, frames.records
    payload = {"run_id": run["run_id"], "family": run["family"], "seed": run["seed"], "config": run["config"],
               "state": run["state"], "elapsed_s": run["elapsed_s"], "notes": run["notes"],
               "evaluations": [r.evaluation.to_dict() for r in records],
               "lineage": [{"key": r.key, "seq": r.seq, "generation": r.generation, "stage": r.stage,
                            "operator": r.operator, "parents": list(r.parents)} for r in records],
               # the store's proposals and LLM exchanges: a dump replays and reports like its run
               "events": list(run.get("events") or ())}
    text = json.dumps(payload, indent=1)
    if str(out).endswith(".gz"):
        with gzip.open(out, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        Path(out).write_text(text)
    print(f"wrote {len(records)} evaluations of {run['run_id']} to {out}")
    return 0


def _frames_or_error(source: str | Path, run_id: str | None):
    """evo.load_run, or None after a one-line error on stderr for a source that is not a run (a
    ConfigError is raised on: evo.cli reports it with the field that is wrong)."""
    from evo.analysis import load_run
    from evo.config import ConfigError

    try:
        return load_run(source, run_id=run_id)
    except ValueError as exc:          # ConfigError and StoreError end in evo.cli with exit code 2
        if isinstance(exc, ConfigError):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return None


def print_dispatch(source: str | Path, baseline: str | None = None, out: str | Path | None = None,
                   playoff: str | Path | None = None, run_id: str | None = None) -> int:
    """`evo dispatch` for a run directory, a store URL or an `evo dump` JSON file (the committed
    recordings are dumps: results/<family>_dispatch.json is rebuilt from one and its playoff). The
    table is keyed by the run's family (KernelFamily.dispatch_key(): frames.keys)."""
    import json

    from evo.dispatch import build_dispatch, markdown_rows
    from evo.playoff import read_winners

    frames = _frames_or_error(source, run_id)
    if frames is None:
        return 2
    baseline = baseline or frames.run.get("baseline") or "torch"
    try:
        entries = build_dispatch(frames.records, frames.keys, baseline=baseline,
                                 winners=read_winners(playoff, frames.keys) if playoff else None)
    except ValueError as exc:        # only the playoff can be wrong here: a file that is not one, or another run's
        print(f"error: --playoff {playoff}: {exc}", file=sys.stderr)
        return 2
    if not entries:
        print("no verified evaluation with timed cases in this run")
        return 1
    print("\n".join(markdown_rows(entries, baseline)))
    if out:
        table = {"run_id": frames.run["run_id"], "baseline": baseline, "entries": [e.to_dict() for e in entries]}
        if playoff:
            table["playoff"] = str(playoff)
        Path(out).write_text(json.dumps(table, indent=1))
    return 0


def report_run(source: str | Path, out: str | Path, run_id: str | None = None,
               playoff: str | Path | None = None) -> int:
    """report.md and its figures for a run directory, a store URL or an `evo dump` JSON file; with a
    playoff file, its dispatch section is the one `evo dispatch --playoff` and `evo export` make."""
    from evo.playoff import read_winners
    from evo.report import write_report

    frames = _frames_or_error(source, run_id)
    if frames is None:
        return 2
    try:
        winners = read_winners(playoff, frames.keys) if playoff else None
        path = write_report(frames, out, winners=winners, playoff=playoff)
    except ValueError as exc:        # the playoff: a file that is not one, or another run's
        print(f"error: --playoff {playoff}: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path} ({len(frames.evaluations)} evaluations of {frames.run['run_id']})")
    return 0


def export_run(source: str | Path, out: str | Path, **options) -> int:
    """`evo export`: the run's dispatch table as a standalone package (evo.export); 2 when refused."""
    from evo.export import ExportError, export_run as _export

    try:
        result = _export(source, out, **options)
    except ExportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {result.package} to {result.path}: {len(result.entries)} dispatch entries, "
          f"{len(result.kernels)} kernels" + "".join(
              f", {role}: {len(c['entries'])} entries, {len(c['kernels'])} kernels" for role, c in result.companions.items())
          + f" (install with: pip install {result.path})")
    return 0
