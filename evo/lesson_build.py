"""Build lessons from recorded runs: per (family, space version, GPU architecture, shape class),
the elites with their per-case evidence, failure signatures, and gene effects from a surrogate
with its cross-validated error (what `evo lessons build` appends to a store).

Why per shape class: one genome rarely wins everywhere (short rows want a warp per row, long rows
clusters), so what a run on long rows should start from is what won on long rows. The family
says which class a case belongs to (`KernelFamily.shape_class`); a class's fitness of an
evaluation is the geometric mean of its speedups over the class's benchmark cases against the
run's baseline (every case of the class must have run; a genome that cannot launch one of them
counts as a "launch" failure for that class).

Evaluations of several runs with the same family, space version and architecture are pooled (a
genome judged in more than one of them counts once, as first given). A source whose space
version is not recorded (runs older than `[experiment] space_version`) needs one given, and a
genome the version's space rejects is left out: nothing is guessed.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from fitness.objectives import geomean
from fitness.records import Evaluation, Status
from genomes import GeneSpace, Genome
from genomes.registry import load_space, space_versions
from operators import effects as fx
from operators.failures import Verdict, backtest, category, learn
from evo.store import LessonRecord

log = logging.getLogger("evo.lessons")

#: elites kept per lesson (with their per-case evidence)
ELITES = 8
#: folds of the surrogate's and the skip rule's cross-validation
FOLDS = 5


def latest_version(family: str) -> str:
    """The name of a family's latest gene-space version (the one a run with an empty
    experiment.space_version uses); "" for a family that keeps no named versions."""
    from genomes.registry import load_space as _load

    latest = _load(family)
    for name in space_versions(family):
        if _load(family, name) is latest:
            return name
    return ""


def shape_classifier(family: str) -> Callable[[str, Mapping[str, Any]], str]:
    """(case id, case params) -> the family's shape class. A family with no kernels/<family>/
    folder (the synthetic one) has no hook to ask: each case is then its own class (logged)."""
    from fitness.family import FamilyNotFound, load_family

    try:
        fam = load_family(family)
    except FamilyNotFound:
        log.info("family %r has no kernels/%s/family.py: each benchmark case is its own shape class", family, family)
        return lambda case_id, params: str(params.get("shape_class") or case_id)
    hook = getattr(fam, "shape_class")
    return lambda case_id, params: str(hook(params))


@dataclass(frozen=True)
class Source:
    """The evaluations of one recorded run, with the key fields its lessons are filed under."""

    label: str
    family: str
    space_version: str
    arch: str
    metric: str
    baseline: str
    evaluations: tuple[Evaluation, ...] = field(repr=False)
    config: Mapping[str, Any] = field(default_factory=dict, repr=False)      # the run's config, as recorded


def read_source(source: str, space_version: str = "") -> Source:
    """A run directory, store URL (URL#RUN_ID) or `evo dump` file as a Source; ValueError (one
    line) when its space version is neither recorded nor given, or unknown to the family."""
    from evo.analysis import load_run

    frames = load_run(source)
    run = frames.run
    cfg = run.get("config") or {}
    exp = cfg.get("experiment") or {}
    family = run.get("family") or exp.get("family") or ""
    version = exp.get("space_version") or space_version
    if not space_versions(family):          # a family with one unnamed space (genomes/<family>.py SPACE)
        version = ""
    elif not version:
        raise ValueError(f"{source}: its config records no experiment.space_version (a run older than the "
                         f"setting); say which with --space-version (versions of {family!r}: "
                         f"{space_versions(family)})")
    if space_versions(family) and version not in space_versions(family):
        raise ValueError(f"{source}: family {family!r} has no gene space version {version!r}; "
                         f"versions: {space_versions(family)}")
    arch = (cfg.get("target") or {}).get("arch") or "sm_90a"     # the config default when not written
    objective = cfg.get("objective") or {}
    return Source(label=str(run.get("run_id") or source), family=family, space_version=version, arch=arch,
                  metric=objective.get("metric") or "geomean_speedup", baseline=objective.get("baseline") or "torch",
                  evaluations=tuple(r.evaluation for r in frames.records), config=cfg)


def class_fitness(ev: Evaluation, cases: Sequence[str], baseline: str, metric: str) -> float | None:
    """The fitness of an evaluation on one shape class: the geomean of its speedups over the
    class's cases (every one of them measured), or the run's metric when the records hold no
    cases (a table of objectives only). None when the evaluation cannot compete there."""
    if ev.fitness(metric) is None:
        return None
    if not cases:
        return ev.fitness(metric)
    by_id = {c.case: c for c in ev.cases}
    speedups = []
    for cid in cases:
        c = by_id.get(cid)
        s = c.speedup(baseline) if c is not None and c.status is Status.OK else None
        if s is None or not s > 0:
            return None
        speedups.append(s)
    return geomean(speedups)


def _class_verdict(ev: Evaluation, genome: Mapping[str, Any], fitness: float | None, cases: Sequence[str]) -> Verdict:
    """Verdict of an evaluation for one class: its own failure, or "launch" when it ran but could
    not launch one of the class's cases."""
    cat = category(ev)
    msg = ev.message
    if cat is None and fitness is None and cases:
        by_id = {c.case: c for c in ev.cases}
        missing = [cid for cid in cases if cid not in by_id or by_id[cid].status is not Status.OK]
        if missing:
            cat = "launch"
            msg = f"cannot run {missing[0]}: " + (by_id[missing[0]].message if missing[0] in by_id else "not recorded")
    return Verdict(ev.key, genome, cat, msg, fitness)


def _case_evidence(ev: Evaluation, cases: Sequence[str], baseline: str) -> dict[str, dict[str, Any]]:
    out = {}
    for c in ev.cases:
        if c.case in cases:
            out[c.case] = {"time_us": c.time_us, "spread_us": c.spread_us, "samples": c.samples, "tbps": c.tbps,
                           f"{baseline}_us": c.baselines_us.get(baseline), "speedup": c.speedup(baseline)}
    return out


def _surrogate_kinds(kind: str) -> list[str]:
    if kind != "auto":
        return [kind]
    try:
        import sklearn  # noqa: F401
    except ImportError:
        return ["ridge"]
    return ["ridge", "trees"]


def build_lessons(sources: Sequence[Source], *, surrogate: str = "auto", elites: int = ELITES, folds: int = FOLDS,
                  seed: int = 0, exclude_classes: Iterable[str] = ()) -> list[LessonRecord]:
    """Lesson records for every (family, space version, arch, shape class) the sources cover,
    except the classes in `exclude_classes`. `surrogate`: "ridge", "trees" or "auto" (both when
    scikit-learn is there; the one with the lower cross-validated error gives the effects)."""
    groups: dict[tuple[str, str, str], list[Source]] = {}
    for s in sources:
        groups.setdefault((s.family, s.space_version, s.arch), []).append(s)
    excluded = set(exclude_classes)
    out: list[LessonRecord] = []
    for (family, version, arch), group in groups.items():
        space = load_space(family, version)
        classify = shape_classifier(family)
        metric, baseline = group[0].metric, group[0].baseline
        evs: dict[str, tuple[Evaluation, Genome, str]] = {}
        dropped = 0
        for s in group:
            for ev in s.evaluations:
                if ev.key in evs:
                    continue
                if ev.space != space.name or not space.is_valid(ev.genome):
                    dropped += 1
                    continue
                evs[ev.key] = (ev, space.make(ev.genome), s.label)
        if dropped:
            log.info("%s %s: %d recorded genomes are not valid in its gene space and are left out", family, version,
                     dropped)
        bench: dict[str, dict[str, Any]] = {}
        for ev, _, _ in evs.values():
            for c in ev.cases:
                if c.time_us:
                    bench.setdefault(c.case, dict(c.params))
        classes: dict[str, list[str]] = {}
        for cid in sorted(bench):
            classes.setdefault(classify(cid, bench[cid]), []).append(cid)
        if not classes:
            classes = {"all": []}
        for cls, cases in sorted(classes.items()):
            if cls in excluded:
                log.info("%s %s %s: class %s left out as asked", family, version, arch, cls)
                continue
            payload = _lesson_payload(space, list(evs.values()), cases, metric, baseline, surrogate=surrogate,
                                      elites=elites, folds=folds, seed=seed)
            out.append(LessonRecord(family, version, arch, cls, payload, tuple(s.label for s in group)))
    return out


def _lesson_payload(space: GeneSpace, evs: Sequence[tuple[Evaluation, Genome, str]], cases: Sequence[str], metric: str,
                    baseline: str, *, surrogate: str, elites: int, folds: int, seed: int) -> dict[str, Any]:
    rows = [(ev, g, src, class_fitness(ev, cases, baseline, metric)) for ev, g, src in evs]
    verdicts = [_class_verdict(ev, g, f, cases) for ev, g, _, f in rows]
    scored = sorted((r for r in rows if r[3] is not None), key=lambda r: (-r[3], r[0].key))
    genomes = [r[1] for r in rows]
    fits = [r[3] for r in rows]
    cv = {k: fx.cross_validate(k, space, genomes, fits, folds=folds, seed=seed).to_dict()
          for k in _surrogate_kinds(surrogate)}
    usable = {k: v for k, v in cv.items() if v["rmse_log"] is not None}
    chosen = min(usable, key=lambda k: (usable[k]["rmse_log"], k)) if usable else next(iter(cv))
    model = fx.make_surrogate(chosen, space, seed=seed)
    effects = []
    if model.fit(genomes, fits):
        effects = [e.to_dict() for e in fx.gene_effects(model, space, [r[1] for r in scored], seed=seed)]
    order = list(range(len(verdicts)))
    random.Random(seed).shuffle(order)
    return {
        "metric": f"geomean speedup vs {baseline} over the class's cases" if cases else metric,
        "baseline": baseline, "cases": list(cases),
        "evaluations": len(rows), "verified": len(scored),
        "best": scored[0][3] if scored else None,
        "elites": [{"key": ev.key, "genome": dict(g), "fitness": f, "source": src,
                    "cases": _case_evidence(ev, cases, baseline)} for ev, g, src, f in scored[:elites]],
        "failures": learn(verdicts).to_dict(),
        "skip_check": backtest(verdicts, folds, order).to_dict(),
        "surrogate": chosen, "cv": cv, "effects": effects,
        "effect_spans": dict(fx.effects_by_gene([fx.Effect(**e) for e in effects])),
        "samples": [[ev.key, dict(g), f] for ev, g, _, f in rows],
        "devices": sorted({ev.device for ev, _, _, _ in rows if ev.device}),
        "judge_protocols": sorted({str(ev.artifacts.get("judge_protocol")) for ev, _, _, _ in rows
                                   if ev.artifacts.get("judge_protocol")}),
    }


__all__ = ["Source", "build_lessons", "class_fitness", "latest_version", "read_source", "shape_classifier"]
