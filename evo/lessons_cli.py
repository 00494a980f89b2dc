"""`evo lessons build|show|export` and `evo slice plan|export-kt|race|warm-start` (parsers and
commands; evo.cli registers them).

    evo lessons build SOURCE... --store URL [--space-version V] [--surrogate auto|ridge|trees] [--exclude-class C]
    evo lessons show LESSONS [--family F] [--class C]        # LESSONS: a store URL or an export file
    evo lessons export --store URL --out FILE.json
    evo slice plan CONFIG [--costs RECORDING]                # the sub-space's size and its GPU cost
    evo slice export-kt SLICE --out CACHE.json [--class C]   # Kernel Tuner's cache format
    evo slice race SLICE --out PREFIX [--seeds 20] [--budget N] [--lessons LESSONS]
    evo slice warm-start SLICE --out PREFIX --holdout CLASS|GROUP [--seeds 10] [--budget N]
                         [--other-holdouts] [--lessons-from OTHER_SLICE]   # every class in turn; a dtype held out
                         [--prediction TEXT]
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import statistics
import sys
from pathlib import Path

COMMANDS = ("lessons", "slice")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    ls = sub.add_parser("lessons", help="lessons of recorded runs per (family, space version, GPU architecture, "
                        "shape class): build them into a store, show what is known, export them")
    lsub = ls.add_subparsers(dest="lessons_command", required=True, metavar="ACTION")
    b = lsub.add_parser("build", help="build lessons from recorded runs and append them to a store")
    b.add_argument("sources", nargs="+", metavar="SOURCE", help="run directories, `evo dump` files or store URLs "
                   "(URL#RUN_ID)")
    b.add_argument("--store", required=True, metavar="URL", help="store the lessons are appended to")
    b.add_argument("--space-version", default="", help="gene-space version of sources whose config records none")
    b.add_argument("--surrogate", default="auto", choices=("auto", "ridge", "trees"),
                   help="surrogate of the gene effects (auto: both when scikit-learn is installed, the one with "
                   "the lower cross-validated error gives the effects)")
    b.add_argument("--exclude-class", action="append", default=[], metavar="CLASS",
                   help="leave this shape class out (e.g. to measure a warm start on it)")
    b.add_argument("--seed", type=int, default=0, help="seeds the cross-validation folds and the trees")
    s = lsub.add_parser("show", help="what the lessons know, how sure, from which runs")
    s.add_argument("lessons", metavar="LESSONS", help="a store URL or an `evo lessons export` file")
    s.add_argument("--family", help="only this family")
    s.add_argument("--class", dest="shape_class", help="only this shape class")
    e = lsub.add_parser("export", help="write the newest lessons of a store as JSON ([search.lessons] source reads it)")
    e.add_argument("--store", required=True, metavar="URL", help="the store the lessons were built into")
    e.add_argument("--out", required=True, metavar="FILE.json", help="the JSON file to write")
    e.add_argument("--family", help="only this family")

    sl = sub.add_parser("slice", help="a densely recorded slice (strategy = 'grid'): plan it, export it for Kernel "
                        "Tuner, race strategies on it, measure a warm start")
    ssub = sl.add_subparsers(dest="slice_command", required=True, metavar="ACTION")
    p = ssub.add_parser("plan", help="a grid config's sub-space: size, valid genomes and GPU cost")
    p.add_argument("config", help="an experiment config with strategy = 'grid' ([search.grid])")
    p.add_argument("--costs", metavar="RECORDING", help="a recorded GPU run whose per-candidate stage seconds "
                   "estimate the cost (results/rejudge/rejudge_run.json.gz)")
    p.add_argument("--call-s", type=float, default=600.0, help="seconds of one device call (default 600)")
    p.add_argument("--startup-s", type=float, default=60.0, help="seconds a call spends before its first genome")
    k = ssub.add_parser("export-kt", help="write the slice in Kernel Tuner's cache format")
    k.add_argument("slice", metavar="SLICE", help="the slice's recording (run directory, dump or URL#RUN_ID)")
    k.add_argument("--out", required=True, metavar="CACHE.json", help="Kernel Tuner cache file to write")
    k.add_argument("--class", dest="shape_class", help="one shape class (default: the slice's objective)")
    r = ssub.add_parser("race", help="our strategies and Kernel Tuner's on the slice, equal budgets, many seeds")
    r.add_argument("slice", metavar="SLICE", help="the slice's recording (run directory, dump or URL#RUN_ID)")
    r.add_argument("--out", required=True, metavar="PREFIX", help="writes PREFIX.json, PREFIX.md and PREFIX.png")
    r.add_argument("--seeds", type=int, default=20, help="searches per strategy, one seed each (default 20)")
    r.add_argument("--budget", type=int, help="evaluations per search (default: 10 %% of the slice)")
    r.add_argument("--lessons", metavar="LESSONS", help="lessons for ga+lessons (a store URL or export file of "
                   "an earlier recording; without it ga+lessons is left out)")
    r.add_argument("--kt-rest", default=",".join(_kt_rest()), help="Kernel Tuner strategies whose best joins "
                   "the named four")
    w = ssub.add_parser("warm-start", help="lessons built without one shape class warm-start a run on it")
    w.add_argument("slice", metavar="SLICE", help="the slice's recording (run directory, dump or URL#RUN_ID)")
    w.add_argument("--out", required=True, metavar="PREFIX", help="writes PREFIX.json, PREFIX.md and PREFIX.png")
    w.add_argument("--holdout", required=True, metavar="CLASS", help="the shape class the lessons leave out and "
                   "the runs are measured on, or a group of classes named by the start they share before a '/' "
                   "(e.g. a dtype: every class of it left out, the runs' objective the geomean over them)")
    w.add_argument("--prediction", default="", metavar="TEXT", help="what was predicted before the run (a "
                   "figure, its range and why), written into PREFIX.json and PREFIX.md")
    w.add_argument("--seeds", type=int, default=10, help="cold and warm runs, one seed each (default 10)")
    w.add_argument("--budget", type=int, help="evaluations per run (default: 10 %% of the class, at least 20)")
    w.add_argument("--first-seed", type=int, default=0, help="the runs' seeds are FIRST .. FIRST + seeds - 1 "
                   "(default 0): develop a change on seeds the reported figures do not use")
    w.add_argument("--lesson-order", choices=("recorded", "model"), default="recorded", help="the warm runs' "
                   "search.lessons.order (default recorded)")
    w.add_argument("--lessons-from", metavar="SLICE", help="build the lessons from this other whole slice (same "
                   "family, space version and GPU architecture, e.g. the sub-space in another dtype) instead of the slice minus the "
                   "held-out class")
    w.add_argument("--other-holdouts", action="store_true", help="also hold out every other class in turn (same "
                   "seeds and budget) and tabulate them beside the headline class: one class's figure alone can "
                   "flatter or hide the transfer")


def _kt_rest() -> tuple[str, ...]:
    from evo.race import KT_REST

    return KT_REST


def main(args: argparse.Namespace) -> int:
    try:
        if args.command == "lessons":
            return {"build": _build, "show": _show, "export": _export}[args.lessons_command](args)
        return {"plan": _plan, "export-kt": _export_kt, "race": _race,
                "warm-start": _warm}[args.slice_command](args)
    except (ValueError, FileNotFoundError) as exc:
        from evo.config import ConfigError
        from evo.store import StoreError

        if isinstance(exc, (ConfigError, StoreError)):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2


# -- lessons -------------------------------------------------------------------------------------

def _build(args) -> int:
    from evo.lesson_build import build_lessons, read_source
    from evo.store import open_store

    sources = [read_source(s, args.space_version) for s in args.sources]
    built = build_lessons(sources, surrogate=args.surrogate, seed=args.seed, exclude_classes=args.exclude_class)
    with open_store(args.store) as store:
        for x in built:
            x = store.append_lesson(x)
            p = x.payload
            print(f"lesson {x.seq}: {x.family}/{x.space_version or '-'}/{x.arch}/{x.shape_class}: {p['evaluations']} "
                  f"evaluations ({p['verified']} verified), {len(p['failures']['signatures'])} failure signatures, "
                  f"surrogate {p['surrogate']}")
    print(f"appended {len(built)} lessons from {len(sources)} runs to {args.store}")
    return 0 if built else 1


def _show(args) -> int:
    from evo.lessons import read_lessons

    found = [x for x in read_lessons(args.lessons) if (not args.family or x.family == args.family)
             and (not args.shape_class or x.shape_class == args.shape_class)]
    if not found:
        print("no lessons" + (" matching" if args.family or args.shape_class else ""))
        return 1
    for x in found:
        print("\n".join(describe(x)))
    return 0


def describe(x) -> list[str]:
    """What one lesson knows, how sure, from which runs (evo lessons show)."""
    p = x.payload
    lines = [f"{x.family} / space {x.space_version or '-'} / {x.arch} / class {x.shape_class}  (lesson {x.seq})",
             f"  from: {', '.join(x.sources)}; devices: {', '.join(p.get('devices') or ['?'])}; judge protocols: "
             f"{', '.join(p.get('judge_protocols') or ['?'])}",
             f"  cases: {', '.join(p.get('cases') or ['(objectives only)'])}; fitness: {p.get('metric')}",
             f"  evidence: {p.get('evaluations')} evaluations, {p.get('verified')} verified; best {p.get('best')}"]
    for e in (p.get("elites") or [])[:3]:
        lines.append(f"  elite {e['key']}: {e['fitness']:.4g} ({e['source']})")
    cv = p.get("cv") or {}
    for kind, c in cv.items():
        if c.get("rmse_log") is None:
            lines.append(f"  surrogate {kind}: too few samples to cross-validate ({c.get('samples')})")
            continue
        mark = " (used)" if kind == p.get("surrogate") else ""
        lines.append(f"  surrogate {kind}{mark}: {c['folds']}-fold error of log fitness {c['rmse_log']:.3f} "
                     f"(predicting the mean: {c['baseline_rmse_log']:.3f}), rank correlation "
                     f"{c['spearman'] if c['spearman'] is None else round(c['spearman'], 3)}, {c['samples']} samples")
    fails = (p.get("failures") or {})
    counts = ", ".join(f"{k} {v}" for k, v in (fails.get("counts") or {}).items()) or "none"
    lines.append(f"  failures recorded: {counts}")
    for s in (fails.get("signatures") or [])[:5]:
        genes = " and ".join(f"{k} = {v!r}" for k, v in s["genes"].items())
        lines.append(f"  signature: {genes}: {s['category']} in {s['failed']} of {s['seen']}")
    sc = p.get("skip_check") or {}
    if sc:
        lines.append(f"  skip rule, cross-validated: {sc.get('skipped')} of {sc.get('judged')} would be skipped, "
                     f"{sc.get('caught')} of {sc.get('failed')} failures caught, {sc.get('wrong')} skipped that "
                     f"were verified ({sc.get('wrong_good')} of them at least median fitness)")
    for e in (p.get("effects") or [])[:6]:
        lines.append(f"  effect: {e['gene']} = {e['value']!r}: {100 * e['effect']:+.1f}% (seen {e['support']})")
    return lines


def _export(args) -> int:
    from evo.lessons import lesson_to_dict
    from evo.store import open_store

    with open_store(args.store) as store:
        found = store.lessons(family=args.family, latest=True)
    Path(args.out).write_text(json.dumps({"lessons": [lesson_to_dict(x) for x in found]}, indent=1))
    print(f"wrote {len(found)} lessons to {args.out}")
    return 0 if found else 1


# -- slice ---------------------------------------------------------------------------------------

def _plan(args) -> int:
    from evo.config import load_config
    from evo.strategies.grid import grid_points, grid_size, subspace
    from genomes import load_space

    cfg = load_config(args.config)
    if cfg.search.strategy != "grid":
        raise ValueError(f"{args.config}: search.strategy is {cfg.search.strategy!r}, not 'grid'")
    space = load_space(cfg.experiment.family, cfg.experiment.space_version)
    values = subspace(space, cfg.search.grid.fixed, cfg.search.grid.vary)
    valid = sum(1 for _ in grid_points(space, values))
    print(f"sub-space of {cfg.experiment.family} {cfg.experiment.space_version or '(latest)'}: "
          f"{grid_size(values)} points, {valid} valid genomes; varied: "
          + ", ".join(f"{k} ({len(v)})" for k, v in values.items() if len(v) > 1))
    if args.costs:
        est = cost_estimate(args.costs, cfg)
        per_call = max(0, math.floor((args.call_s - args.startup_s) / est["per_genome_s"]))
        print(f"cost (from {args.costs}): CHECK {est['check_s']:.2f} s ({est['check_cases']} check cases) + "
              f"BENCH {est['bench_s']:.2f} s "
              f"({est['bench_basis']}) = {est['per_genome_s']:.2f} GPU s per genome; a {args.call_s:g} s call "
              f"records about {per_call} genomes; {valid} genomes take about {math.ceil(valid / max(per_call, 1))} calls")
    return 0


def cost_estimate(recording: str, cfg) -> dict:
    """GPU seconds per genome of a grid config, from a recorded run's per-candidate stage seconds:
    its CHECK time scaled by the check cases each judges (fitness.family.credited_check_cases: a
    slice benchmarked in one dispatch group checks that group's), its BENCH time scaled by the benchmark's bytes
    (the slice's cases over the recording's) and by reps (timed launches are most of BENCH); a
    first-order estimate for planning, not a measurement."""
    from evo.lesson_build import read_source
    from fitness.family import credited_check_cases, load_family

    src = read_source(recording)
    rec_cfg = src.config
    check, bench = [], []
    for ev in src.evaluations:
        raw = ev.artifacts.get("stage_seconds")
        st = json.loads(raw) if isinstance(raw, str) else (raw or {})
        if ev.status.ok and st.get("bench") and st.get("check") and "carried_from" not in ev.artifacts:
            check.append(float(st["check"]))
            bench.append(float(st["bench"]))
    if not bench:
        raise ValueError(f"{recording}: no verified evaluation with CHECK and BENCH seconds")
    fam = load_family(cfg.experiment.family)
    rec_cases = fam.benchmark_cases((rec_cfg.get("benchmark") or {}).get("matrix", "default"))
    new_cases = fam.benchmark_cases(cfg.benchmark.matrix)
    rec_bytes = sum(fam.bytes_moved(c) for c in rec_cases)
    new_bytes = sum(fam.bytes_moved(c) for c in new_cases)
    all_checks = fam.check_cases()
    rec_checks = len(credited_check_cases(fam.dispatch_key(), rec_cases, all_checks))
    new_checks = len(credited_check_cases(fam.dispatch_key(), new_cases, all_checks))
    rec_reps = int((rec_cfg.get("evaluator") or {}).get("reps", 50))
    scale = (new_bytes / rec_bytes) * (cfg.evaluator.reps / rec_reps)
    c, b = statistics.median(check) * new_checks / max(rec_checks, 1), statistics.median(bench) * scale
    return {"check_s": c, "bench_s": b, "per_genome_s": c + b, "check_cases": new_checks,
            "bench_basis": f"{statistics.median(bench):.2f} s x bytes {new_bytes / rec_bytes:.3f} x reps "
                           f"{cfg.evaluator.reps}/{rec_reps}"}


def _export_kt(args) -> int:
    from evo.slice import load_slice

    sl = load_slice(args.slice)
    cache = sl.kt_cache(args.shape_class)
    Path(args.out).write_text(json.dumps(cache, indent=0))
    print(f"wrote {len(cache['cache'])} configurations of {sl.source.label} ({len(cache['tune_params_keys'])} tune "
          f"parameters, objective {cache['objective']}) to {args.out}")
    return 0


def _race(args) -> int:
    from evo.lessons import RunLessons, read_lessons, RunKey
    from evo.race import race
    from evo.race_report import write_race
    from evo.slice import load_slice

    sl = load_slice(args.slice)
    lessons = None
    if args.lessons:
        key = RunKey(sl.source.family, sl.source.space_version, sl.source.arch, tuple(sl.classes))
        lessons = RunLessons.select(read_lessons(args.lessons), key)
        for line in lessons.log:
            print(line, file=sys.stderr)
    result = race(sl, seeds=args.seeds, budget=args.budget, lessons=lessons,
                  lessons_label=_lessons_label(lessons) if lessons is not None else "",
                  kt_rest=[s for s in args.kt_rest.split(",") if s], progress=lambda s: print(s, file=sys.stderr))
    result["command"] = _command()
    for path in write_race(result, args.out):
        print(f"wrote {path}")
    return 0


def _lessons_label(lessons) -> str:
    """Which recordings the lessons came from (a file the race was given may be a temporary one)."""
    sources = sorted({src for x, _ in lessons.used for src in x.sources})
    classes = sorted({x.shape_class for x, _ in lessons.used})
    return f"{len(classes)} lessons ({', '.join(classes)}) built from {', '.join(sources) or 'unnamed runs'}"


def _command() -> str:
    """The command line that made a result, as a user would type it again (arguments quoted for a
    shell where they need it): `evo ...`, or `python SCRIPT ...` when a script called the CLI
    (search_efficiency.py)."""
    if not sys.argv:
        return ""
    head = Path(sys.argv[0])
    if head.suffix == ".py" and head.name != "__main__.py":
        try:
            head = head.resolve().relative_to(Path.cwd())
        except ValueError:
            pass
        return shlex.join(["python", str(head), *sys.argv[1:]])
    return shlex.join(["evo", *sys.argv[1:]])


def _warm(args) -> int:
    from evo.race import holdout_summary, warm_start
    from evo.race_report import write_warm
    from evo.slice import load_slice

    sl = load_slice(args.slice)
    origin = load_slice(args.lessons_from) if args.lessons_from else None
    result = warm_start(sl, args.holdout, seeds=args.seeds, budget=args.budget, lessons_from=origin,
                        first_seed=args.first_seed, lesson_order=args.lesson_order,
                        progress=lambda s: print(s, file=sys.stderr))
    if args.other_holdouts:
        result["holdouts"] = {args.holdout: holdout_summary(result)}
        for cls in sl.classes:
            if cls != args.holdout:
                other = warm_start(sl, cls, seeds=args.seeds, budget=args.budget, lessons_from=origin,
                                   first_seed=args.first_seed, lesson_order=args.lesson_order,
                                   progress=lambda s: print(s, file=sys.stderr))
                result["holdouts"][cls] = holdout_summary(other)
    if args.prediction:
        result["prediction"] = args.prediction
    result["command"] = _command()
    for path in write_warm(result, args.out):
        print(f"wrote {path}")
    return 0
