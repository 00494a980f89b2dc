"""The race on a recorded slice: our strategies and Kernel Tuner's, same space, same budget.

Every strategy searches the slice's sub-space with the slice's recorded verdicts as its judge (our
Run through fitness.replay, Kernel Tuner in its simulation mode on `Slice.kt_cache()`), for the same
number of unique evaluations, over `seeds` seeds each. A failed genome costs an evaluation on both
sides: Kernel Tuner's space is every valid genome of the sub-space (the restriction it is given is
"recorded in the slice", which the grid made equal to "valid"), not only the verified ones. What is
compared is the number of evaluations until the best verified fitness reaches 99 % of the slice's
optimum (median and quartiles over seeds; a seed that never gets there counts as beyond the
budget), and the whole curve of best-so-far as a fraction of the optimum.

Ours: "ga" (the GA as configured below), "random", "ga+screen" (children screened by the ridge
model, screen = 4) and "ga+lessons" (ga+screen with lessons of an earlier recording: seeds, skipped
predicted failures, the screen's prior). Kernel Tuner's: genetic_algorithm, bayes_opt,
simulated_annealing, random_sample, and the best (lowest median) of the others run under the
same rules. Kernel Tuner draws from Python's and numpy's global generators; each of its runs
seeds both first (its choice, not ours: our runs use one seeded generator each).

The warm start (`warm_start`): lessons built from the slice without one shape class (or without a
group of classes, `Slice.classes_of`: e.g. one dtype's, the run's objective then the geomean over
them, as the race's over a whole slice), used by a run on that class alone (transfer), against the
same run without them.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from fitness.replay import ReplayEvaluator
from evo.config import from_dict
from evo.lesson_choice import CHOICE_LINE, choice_summary
from evo.lessons import RunKey, RunLessons
from evo.lesson_build import build_lessons
from evo.run import Run, new_run_info
from evo.slice import Slice
from evo.store import open_store
from fitness.objectives import geomean

TARGET = 0.99
OURS = ("ga", "random", "ga+screen", "ga+lessons")
KT_NAMED = ("genetic_algorithm", "bayes_opt", "simulated_annealing", "random_sample")
KT_REST = ("pso", "firefly_algorithm", "diff_evo", "mls", "greedy_ils", "greedy_mls", "ordered_greedy_mls",
           "dual_annealing", "basinhopping")
#: the GA every "ours" strategy but random uses (population and offspring sized for budgets of a
#: few hundred evaluations, as tests/test_search_efficiency.py)
GA = {"population": 16, "offspring": 16, "elites": 2, "tournament_size": 3}
SCREEN = 4


@dataclass(frozen=True)
class Trace:
    """One search: the fitness of each unique evaluation in the order made (None: failed)."""

    strategy: str
    side: str           # "ours" | "kernel_tuner"
    seed: int
    values: tuple[float | None, ...]
    seconds: float = 0.0
    #: what an online lesson choice decided (evo.lesson_choice), from the run's notes
    choice: tuple[str, ...] = ()


def best_so_far(values: Sequence[float | None]) -> list[float | None]:
    out, best = [], None
    for v in values:
        if v is not None and math.isfinite(v) and (best is None or v > best):
            best = v
        out.append(best)
    return out


def evals_to(values: Sequence[float | None], target: float) -> int | None:
    """Evaluations made until the best verified fitness first reaches `target` (None: never)."""
    for i, b in enumerate(best_so_far(values), 1):
        if b is not None and b >= target - 1e-12:
            return i
    return None


# -- our strategies ----------------------------------------------------------------------------

def _config(sl: Slice, strategy: str, seed: int, budget: int, lessons: bool, lesson_order: str = "recorded"):
    search: dict[str, Any] = {"strategy": "random" if strategy == "random" else "ga", "ga": dict(GA)}
    if strategy in ("ga+screen", "ga+lessons"):
        search["ga"]["screen"] = SCREEN
    if lessons:
        search["lessons"] = {"source": "given to the Run", "seeds": 8, "order": lesson_order}
    return from_dict({"experiment": {"name": "race", "family": sl.source.family,
                                     "space_version": sl.source.space_version, "seed": seed},
                      "target": {"arch": sl.source.arch},
                      "objective": {"metric": sl.metric, "baseline": sl.source.baseline},
                      "evaluator": {"kind": "replay", "replay": sl.source.label},
                      "search": search, "budget": {"evaluations": budget, "stall_rounds": 10_000},
                      "output": {"progress": False, "report": False}})


def run_ours(sl: Slice, strategy: str, seed: int, budget: int, *, evaluations: Sequence[Any] | None = None,
             lessons: RunLessons | None = None, lesson_order: str = "recorded") -> Trace:
    """One of our strategies on the slice (or on `evaluations`, e.g. one class of it), replayed."""
    table = ReplayEvaluator(evaluations if evaluations is not None else sl.evaluations, source=sl.source.label)
    cfg = _config(sl, strategy, seed, budget, lessons is not None, lesson_order)
    store = open_store("memory://")
    store.create_run(new_run_info(cfg, "race"))
    start = time.time()
    summary = Run(cfg, sl.space, store, table, "race", lessons=lessons).optimize()
    if summary.replay_ended:
        # on a whole slice every genome a strategy can ask is recorded: a trace cut short here
        # would be scored as a strategy that never got there
        raise ValueError(f"{strategy} (seed {seed}) asked a genome outside {sl.source.label}: {summary.stop_reason}")
    values = tuple(r.fitness(sl.metric) for r in store.records("race"))
    notes = store.get_run("race").notes.get("lessons") or []
    return Trace(strategy, "ours", seed, values, time.time() - start,
                 tuple(x for x in notes if x.startswith(CHOICE_LINE)))


# -- Kernel Tuner ------------------------------------------------------------------------------

def run_kernel_tuner(cache: dict[str, Any], cache_path: str, strategy: str, seed: int, budget: int) -> Trace:
    """One Kernel Tuner strategy in simulation mode on a cache written by Slice.kt_cache()."""
    import numpy as np
    import kernel_tuner

    params = cache["tune_params_keys"]
    recorded = set(cache["cache"])
    objective = cache["objective"]

    def recorded_only(p: dict) -> bool:      # the slice's sub-space: every valid genome, and only those
        return ",".join(str(p[n]) for n in params) in recorded

    random.seed(seed)
    np.random.seed(seed)
    start = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results, _ = kernel_tuner.tune_kernel(
            cache["kernel_name"], "", tuple(cache["problem_size"]), [], cache["tune_params"], cache=cache_path,
            simulation_mode=True, strategy=strategy, strategy_options={"max_fevals": budget},
            objective=objective, objective_higher_is_better=True, restrictions=recorded_only, quiet=True,
            verbose=False)
    seen: dict[str, float | None] = {}
    for r in results:
        key = ",".join(str(r[n]) for n in params)
        if key not in seen:
            v = r.get(objective)
            seen[key] = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    return Trace(f"kt:{strategy}", "kernel_tuner", seed, tuple(list(seen.values())[:budget]), time.time() - start)


# -- summaries ---------------------------------------------------------------------------------

def _quartiles(xs: Sequence[float]) -> dict[str, float | None]:
    xs = sorted(xs)
    if not xs:
        return {"median": None, "q1": None, "q3": None}
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    fin = lambda v: v if math.isfinite(v) else None  # noqa: E731
    return {"median": fin(statistics.median(xs)), "q1": fin(q[0]), "q3": fin(q[2])}


def summarize(traces: Sequence[Trace], optimum: float, budget: int, points: int = 60) -> dict[str, Any]:
    """Per strategy: evaluations to 99 % of the optimum (median, quartiles; seeds that never got
    there count as beyond the budget), the final fraction, and the curve of best-so-far as a
    fraction of the optimum at `points` evaluation counts (median and quartiles)."""
    marks = sorted({max(1, round(budget * (i / points) ** 2)) for i in range(1, points + 1)} | {budget})
    out: dict[str, Any] = {}
    for name in dict.fromkeys(t.strategy for t in traces):
        ts = [t for t in traces if t.strategy == name]
        hits = [evals_to(t.values, TARGET * optimum) for t in ts]
        curves = []
        for t in ts:
            b = best_so_far(t.values)
            b = b + [b[-1] if b else None] * (budget - len(b))       # a strategy that stopped early keeps its best
            curves.append([0.0 if v is None else v / optimum for v in b])
        out[name] = {
            "side": ts[0].side,
            "evals_to_99": {**_quartiles([h if h is not None else math.inf for h in hits]),
                            "reached": sum(h is not None for h in hits), "seeds": len(ts),
                            "values": [h for h in hits]},
            "final_fraction": _quartiles([c[-1] for c in curves]),
            "mean_evaluations_made": statistics.mean(len(t.values) for t in ts),
            "seconds": round(sum(t.seconds for t in ts), 2),
            "curve": {"evals": marks,
                      **{k: [_quartiles([c[m - 1] for c in curves])[k] for m in marks] for k in ("median", "q1", "q3")}},
        }
    return out


def _best(summary: dict[str, Any], side: str) -> str | None:
    names = [n for n, s in summary.items() if s["side"] == side]
    key = lambda n: (summary[n]["evals_to_99"]["median"] is None, summary[n]["evals_to_99"]["median"] or 0,  # noqa: E731
                     -summary[n]["evals_to_99"]["reached"], n)
    return min(names, key=key) if names else None


def race(sl: Slice, *, seeds: int = 20, budget: int | None = None, lessons: RunLessons | None = None,
         lessons_label: str = "", kt_named: Sequence[str] = KT_NAMED, kt_rest: Sequence[str] = KT_REST,
         progress: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """The whole race: results as search_efficiency.json holds them."""
    sl.require_whole()
    size = len(sl.evaluations)
    budget = budget or max(20, math.ceil(0.1 * size))
    optimum = sl.optimum()
    traces: list[Trace] = []
    reproducible: dict[str, bool] = {}
    for name in OURS:
        if name == "ga+lessons" and lessons is None:
            progress("ga+lessons skipped: no lessons given")
            continue
        run = lambda s: run_ours(sl, name, s, budget, lessons=lessons if name == "ga+lessons" else None)  # noqa: E731
        for s in range(seeds):
            traces.append(run(s))
        reproducible[name] = run(0).values == traces[-seeds].values
        progress(f"ours {name}: {seeds} seeds")
    cache = sl.kt_cache()
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "slice_cache.json")
        Path(path).write_text(json.dumps(cache))
        for name in list(kt_named) + list(kt_rest):
            for s in range(seeds):
                traces.append(run_kernel_tuner(cache, path, name, s, budget))
            reproducible[f"kt:{name}"] = run_kernel_tuner(cache, path, name, 0, budget).values == traces[-seeds].values
            progress(f"kernel tuner {name}: {seeds} seeds")
    summary = summarize(traces, optimum, budget)
    for name, same in reproducible.items():
        # seed 0 searched twice: a strategy whose second search differs (Kernel Tuner's diff_evo draws
        # from a source its seeds do not reach, session 17) gives medians that move from run to run
        summary[name]["reproducible"] = same
    rest = [f"kt:{n}" for n in kt_rest]
    best_rest = _best({n: summary[n] for n in rest}, "kernel_tuner") if rest else None
    for n in rest:
        if n != best_rest:
            summary[n]["shown"] = False
    ours, theirs = _best(summary, "ours"), _best(summary, "kernel_tuner")
    ours_m = summary[ours]["evals_to_99"]["median"] if ours else None
    kt_medians = [s["evals_to_99"]["median"] for n, s in summary.items() if s["side"] == "kernel_tuner"
                  and s.get("shown", True)]
    return {
        "slice": sl.source.label, "family": sl.source.family, "space_version": sl.source.space_version,
        "synthetic": bool(sl.evaluations and sl.evaluations[0].device == "synthetic"),
        "space_size": size, "varied_genes": sl.varied, "optimum": optimum, "objective": sl.metric,
        "budget": budget, "seeds": seeds, "target_fraction": TARGET,
        "lessons": lessons_label or None,
        "ours_best": ours, "ours_best_evals_to_99": ours_m,
        "kernel_tuner_best": theirs,
        "kernel_tuner_best_evals_to_99": summary[theirs]["evals_to_99"]["median"] if theirs else None,
        "kernel_tuner_best_of_the_rest": best_rest,
        "goal": {"ours_within_5_percent_of_space": ours_m is not None and ours_m <= 0.05 * size,
                 "ours_fewer_than_every_kernel_tuner_strategy": ours_m is not None and all(
                     m is None or ours_m < m for m in kt_medians)},
        "strategies": summary,
    }


# -- the warm start ----------------------------------------------------------------------------

def _ranks(xs: Sequence[float]) -> list[float]:
    """Average ranks (1 = smallest), ties sharing their mean rank."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    out = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Spearman's rank correlation (None with fewer than 3 pairs or a constant side)."""
    if len(a) < 3:
        return None
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    num = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    den = math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))
    return num / den if den else None


def transfer_information(sl: Slice, holdout: str, target: float = TARGET,
                         source: Slice | None = None) -> dict[str, Any]:
    """How much the other classes' recorded landscapes say about the held-out one, independent of
    any search: per source class, the rank correlation of the two classes' fitness over the genomes
    verified on both, and the position, when the slice is judged in that class's order (best first,
    failures last), of the first genome within `target` of the held-out class's optimum; the same
    for the order of the sources' mean rank and of their geomean fitness (the objective's own
    aggregate: two reasonable ways to combine the sources, reported together because they can
    disagree by a hundredfold); and uniform draws' expected position (without replacement, failures
    skipped). A warm start can only be as fast as what the lessons know: where
    every source order puts the held-out class's good genomes hundreds deep, no use of those
    lessons brings them into the first few evaluations. `source`: the lessons' slice when it is
    another recording (a dtype held out: its classes against this slice's genomes, matched by
    genome key; a genome it lacks counts as failed there)."""
    src = source or sl
    held = set(sl.classes_of(holdout))
    sources = [c for c in src.classes if c not in held]
    fit = {holdout: [sl.fitness(e, holdout) for e in sl.evaluations]}
    for c in sources:
        by_key = {e.key: src.fitness(e, c) for e in src.evaluations}
        fit[c] = [by_key.get(e.key) for e in sl.evaluations]
    best = max(f for f in fit[holdout] if f is not None)
    good = [f is not None and f >= target * best - 1e-12 for f in fit[holdout]]

    def first_hit(score: Sequence[float | None]) -> int | None:
        order = sorted(range(len(score)), key=lambda i: (score[i] is None, -(score[i] or 0.0), i))
        return next((pos for pos, i in enumerate(order, 1) if good[i]), None)

    per: dict[str, Any] = {}
    for s in sources:
        both = [(a, b) for a, b in zip(fit[holdout], fit[s]) if a is not None and b is not None]
        per[s] = {"spearman": spearman([a for a, _ in both], [b for _, b in both]), "first_hit": first_hit(fit[s])}
    ranks = {s: _ranks([f if f is not None else -math.inf for f in fit[s]]) for s in sources}
    mean_rank = [statistics.fmean(ranks[s][i] for s in sources) if all(fit[s][i] is not None for s in sources)
                 else None for i in range(len(sl.evaluations))]
    geo = [geomean([fit[s][i] for s in sources]) if all(fit[s][i] is not None and fit[s][i] > 0 for s in sources)
           else None for i in range(len(sl.evaluations))]
    verified = sum(f is not None for f in fit[holdout])
    hits = sum(good)
    return {"holdout": holdout, "target_fraction": target, "genomes_within_target": hits,
            "verified": verified, "sources": per, "mean_rank_first_hit": first_hit(mean_rank),
            "geomean_first_hit": first_hit(geo),
            "uniform_expected_first_hit": (verified + 1) / (hits + 1) if hits else None}


def order_limits(sl: Slice, holdout: str, lessons: Sequence[Any], targets: Sequence[float], cold_median: float | None,
                 probe: int) -> dict[str, Any]:
    """How soon following the lessons' orders can reach each seed's target (99 % of its cold run's final
    best) on class `holdout`, no search involved: a bound on what seeding from the lessons can give.

    Orders, each of the class's genomes best first: every lesson's recorded order (its verified
    genomes valid in the space, what a run seeds from, evo.lesson_choice.lesson_order), the same
    genomes in the order of the lesson's own surrogate (the cross-validated kind its payload names,
    refitted on its samples), and the lessons' interleaved orders (a run that keeps every lesson).
    For each: the median over seeds of the position of its first genome at or above the seed's
    target, and that over the cold median (the ratio a warm start following it alone would have).
    With an online choice among two or more lessons, "after the probe": the first batch (`probe`
    genomes of every lesson, interleaved) and then the lesson's order, the best a run that chose
    that lesson can do by following it (recorded, or in its model's order: search.lessons.order), whatever
    it chose. A search can do better than any order
    (mutation finds genomes no order puts early); then the lessons are not what found them."""
    from evo.lesson_choice import allot, lesson_order, model_order

    fit = {e.key: sl.fitness(e, holdout) for e in sl.evaluations}
    space = sl.space

    def first_hits(order: Sequence[Any]) -> list[float]:
        out = []
        for t in targets:
            if t is None:
                out.append(math.inf)
                continue
            hit = next((i for i, g in enumerate(order, 1) if (fit.get(g.key) or 0.0) >= TARGET * t - 1e-12), None)
            out.append(float(hit) if hit is not None else math.inf)
        return out

    recorded = {x.shape_class: lesson_order(x, space) for x in lessons}
    orders: dict[str, list[Any]] = {}
    for x in lessons:
        orders[f"{x.shape_class} recorded"] = recorded[x.shape_class]
        orders[f"{x.shape_class} its {x.payload.get('surrogate') or 'ridge'} model"] = model_order(
            x, space, recorded[x.shape_class])
    seqs = list(recorded.values())
    if len(seqs) > 1:
        # the lessons combined without a choice: the genomes every lesson verified, by their mean rank
        # and by their geomean fitness (transfer_information's two aggregates, from the lessons' samples)
        fits = [{k: f for k, _, f in x.payload.get("samples") or [] if f is not None and f > 0} for x in lessons]
        common = [g for g in seqs[0] if all(g.key in f for f in fits)]
        ranks = [dict(zip((g.key for g in common), _ranks([-f[g.key] for g in common]))) for f in fits]
        orders["mean rank"] = sorted(common, key=lambda g: (statistics.fmean(r[g.key] for r in ranks), g.key))
        orders["geomean"] = sorted(common, key=lambda g: (-geomean([f[g.key] for f in fits]), g.key))
        orders["interleaved"] = allot(seqs, [1.0] * len(seqs), sum(len(o) for o in seqs))
        first = allot(seqs, [1.0] * len(seqs), probe * len(seqs))
        probed = {f.key for f in first}
        for x in lessons:
            rest = [g for g in recorded[x.shape_class] if g.key not in probed]
            orders[f"probe, then {x.shape_class}"] = first + rest
            orders[f"probe, then {x.shape_class} its {x.payload.get('surrogate') or 'ridge'} model"] = \
                first + model_order(x, space, rest)
    out: dict[str, Any] = {}
    for name, order in orders.items():
        med = _quartiles(first_hits(order))["median"]
        out[name] = {"evals_to_99": med,
                     "ratio": med / cold_median if med is not None and cold_median else None}
    # ties go to the order named first (a lesson's recorded order before its model's: what a run follows)
    finite = [k for k, v in out.items() if v["evals_to_99"] is not None]
    best = min(finite, key=lambda k: out[k]["evals_to_99"]) if finite else None
    return {"orders": out, "best": best, "probe": probe, "cold_median": cold_median}


def warm_start(sl: Slice, holdout: str, *, seeds: int = 10, budget: int | None = None,
               lessons_from: Slice | None = None, first_seed: int = 0, lesson_order: str = "recorded",
               progress: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Lessons built from the slice without class `holdout` warm-start a run on that class (`holdout`
    may name a group of classes, Slice.classes_of: lessons then leave every one of them out, and the
    runs' objective is the geomean of the group's class fitnesses); with
    `lessons_from`, lessons of another whole slice of the same family, space version and GPU
    architecture (e.g. the same sub-space in another dtype: the issue's dtype held out) instead.
    The runs use seeds first_seed .. first_seed + seeds - 1 (another range than a report's: a
    change is developed on seeds its figures are not measured on). `lesson_order`: the warm runs'
    search.lessons.order."""
    sl.require_whole()
    origin = lessons_from or sl
    if lessons_from is not None:
        lessons_from.require_whole()
        # the arch too: RunLessons.select refuses another GPU's lessons, and the "warm" runs would be cold ones
        # reported as lessons of the other slice's classes
        of = lambda s: (s.source.family, s.source.space_version, s.source.arch)  # noqa: E731
        if of(lessons_from) != of(sl):
            raise ValueError(f"lessons from {lessons_from.source.label} ({' '.join(of(lessons_from))}) cannot "
                             f"warm-start {sl.source.label} ({' '.join(of(sl))})")
    held = sl.classes_of(holdout)
    built = build_lessons([origin.source], exclude_classes=held, seed=0)
    if not built:
        raise ValueError(f"slice {origin.source.label}: no lessons without class {holdout!r} (one class only?)")
    key = RunKey(sl.source.family, sl.source.space_version, sl.source.arch, held)
    lessons = RunLessons.select(built, key)
    table = sl.for_class(holdout)
    size = len(table)
    budget = budget or max(20, math.ceil(0.1 * size))
    cold, warm = [], []
    for s in range(first_seed, first_seed + seeds):
        cold.append(run_ours(sl, "ga+screen", s, budget, evaluations=table))
        warm.append(run_ours(sl, "ga+lessons", s, budget, evaluations=table, lessons=lessons,
                             lesson_order=lesson_order))
    progress(f"warm start on {holdout}: {seeds} seeds")
    cold_final = [best_so_far(t.values)[-1] for t in cold]
    cold_hits = [evals_to(t.values, TARGET * f) for t, f in zip(cold, cold_final)]
    warm_hits = [evals_to(t.values, TARGET * f) for t, f in zip(warm, cold_final)]
    inf = lambda xs: [x if x is not None else math.inf for x in xs]  # noqa: E731
    cold_m, warm_m = _quartiles(inf(cold_hits))["median"], _quartiles(inf(warm_hits))["median"]
    optimum = sl.optimum(holdout)
    # beside the goal's target (99 % of each cold run's best): the optimum itself, and how close to it the
    # warm run's best was when it reached the target (a target met by a hair says less than one met well)
    cold_opt = [evals_to(t.values, optimum) for t in cold]
    warm_opt = [evals_to(t.values, optimum) for t in warm]
    at_hit = [best_so_far(t.values)[h - 1] / optimum if h else None for t, h in zip(warm, warm_hits)]
    probe = _config(sl, "ga+lessons", 0, budget, True).search.lessons.probe
    return {
        "slice": sl.source.label, "synthetic": bool(sl.evaluations and sl.evaluations[0].device == "synthetic"),
        "holdout_class": holdout, "holdout_classes": list(held),
        "lessons_from_classes": sorted({x.shape_class for x in built}),
        "lessons_log": lessons.log + choice_summary([t.choice for t in warm]),
        "lessons_choice": choice_summary([t.choice for t in warm]), "space_size": size, "budget": budget, "seeds": seeds,
        "first_seed": first_seed, "lesson_order": lesson_order,
        "cold": "ga+screen", "warm": "ga+screen with the lessons (their elites as seeds, predicted failures skipped, the genes they "
                                     "agree on for the first population; a transferred class trains no screen; with "
                                     "search.lessons.choice = 'online', the first batch is every lesson's best genomes "
                                     "within the class's space and the lessons whose order predicts its verdicts give the "
                                     "rest of the first population, evo.lesson_choice)",
        "cold_evals_to_99": cold_m, "warm_evals_to_99": warm_m,
        "ratio": (warm_m / cold_m) if cold_m and warm_m is not None else None,
        "goal_ratio_at_most_0.3": bool(cold_m and warm_m is not None and warm_m / cold_m <= 0.3),
        "per_seed": {"cold_final": cold_final, "cold_evals_to_99": cold_hits, "warm_evals_to_99": warm_hits,
                     "cold_evals_to_optimum": cold_opt, "warm_evals_to_optimum": warm_opt,
                     "warm_fraction_of_optimum_at_target": at_hit},
        "cold_evals_to_optimum": _quartiles(inf(cold_opt))["median"],
        "warm_evals_to_optimum": _quartiles(inf(warm_opt))["median"],
        "class_optimum": optimum,
        "lessons_from_slice": origin.source.label,
        "transfer_information": transfer_information(sl, holdout, source=lessons_from),
        "order_limits": order_limits(sl, holdout, [x for x, _ in lessons.used], cold_final, cold_m, probe),
        "curves": summarize(cold + warm, optimum, budget),
    }


def holdout_summary(result: dict[str, Any]) -> dict[str, Any]:
    """One warm start's headline figures (a row of the other-holdouts table)."""
    return {k: result[k] for k in ("cold_evals_to_99", "warm_evals_to_99", "ratio", "goal_ratio_at_most_0.3",
                                   "cold_evals_to_optimum", "warm_evals_to_optimum",
                                   "holdout_classes", "lessons_from_classes", "seeds", "budget", "per_seed", "transfer_information",
                                   "order_limits", "lessons_choice") if k in result}


__all__ = ["OURS", "holdout_summary", "order_limits", "spearman", "transfer_information", "KT_NAMED", "KT_REST", "Trace", "best_so_far", "evals_to", "race", "run_kernel_tuner",
           "run_ours", "summarize", "warm_start"]
