"""A densely recorded slice: every valid genome of a sub-space, judged, as a test bed for search.

A slice is any recording (a run directory, a store URL#RUN_ID or an `evo dump` file) made by
strategy = "grid"; its sub-space is read back from the run's [search.grid] (or, for a recording
without one, from the values its genomes take). From it come:

- `space()`: the gene space restricted to the sub-space (same genes, names and genome keys), so
  a search replayed on the slice never asks for a genome the slice does not hold;
- `optimum()` / `for_class()`: the slice's best fitness, and the slice seen by one shape class
  (each evaluation's fitness on that class's cases only), what a warm start is measured on; or by
  a group of classes (`classes_of`: the classes whose names continue a prefix, e.g. every class of
  one dtype when a family names its classes dtype first), each evaluation's fitness there the
  geomean of its class fitnesses, as the race's whole-slice objective weighs classes;
- `kt_cache()`: the slice in Kernel Tuner's cache format (what its simulation mode replays):
  a header (device_name, kernel_name, problem_size, tune_params_keys, tune_params, objective) and
  one entry per configuration keyed "v1,v2,..." in tune_params_keys order, holding the parameter
  values, "time" (ms) and "times", our objective, compile/verification/benchmark times (ms) from
  the record, and for a failed genome the Kernel Tuner error name in place of the times.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from fitness.objectives import geomean
from fitness.records import Evaluation, Status
from genomes import GeneSpace
from genomes.genes import Choice, IntRange, PowerOfTwo
from genomes.registry import load_space
from evo.lesson_build import Source, class_fitness, read_source, shape_classifier
from evo.strategies.grid import subspace

#: Kernel Tuner's error names (kernel_tuner.util), by our failure statuses
KT_ERRORS = {Status.COMPILE_ERROR: "CompilationFailedConfig", Status.RUNTIME_ERROR: "RuntimeFailedConfig",
             Status.TIMEOUT: "RuntimeFailedConfig", Status.WRONG_RESULT: "RuntimeFailedConfig",
             Status.INVALID: "InvalidConfig"}


def restricted_space(space: GeneSpace, values: Mapping[str, Sequence[Any]]) -> GeneSpace:
    """`space` with every gene narrowed to `values` (subspace's): same names, constraints and
    genome keys, so the genomes a strategy draws from it are the slice's genomes."""
    genes = []
    for g in space.genes:
        vals = tuple(values[g.name])
        if vals == g.values():
            genes.append(g)
            continue
        ordered = tuple(v for v in g.values() if v in vals)
        if isinstance(g, Choice):
            genes.append(dataclasses.replace(g, options=ordered))
            continue
        if isinstance(g, IntRange) and len(ordered) > 1 and ordered == tuple(range(ordered[0], ordered[-1] + 1,
                                                                                   g.step)):
            genes.append(dataclasses.replace(g, low=ordered[0], high=ordered[-1]))
            continue
        if isinstance(g, PowerOfTwo) and len(ordered) > 1 and all(b == 2 * a for a, b in zip(ordered, ordered[1:])):
            genes.append(dataclasses.replace(g, low=ordered[0], high=ordered[-1]))
            continue
        # a fixed flag, or values with holes: a choice among them (keys are of values, not kinds)
        genes.append(Choice(g.name, options=ordered, group=g.group, doc=g.doc, legacy=g.legacy))
    return GeneSpace(name=space.name, genes=tuple(genes), constraints=space.constraints, doc=space.doc)


@dataclass(frozen=True)
class Slice:
    source: Source
    values: Mapping[str, tuple]                  # gene -> its values in the sub-space
    space: GeneSpace = field(repr=False)         # restricted to the sub-space
    full_space: GeneSpace = field(repr=False)
    classes: Mapping[str, tuple[str, ...]]       # shape class -> its benchmark case ids
    #: valid genomes of the recorded sub-space (its grid's product under the constraints), None when
    #: the recording names no grid (the recorded genomes then are the sub-space)
    valid_genomes: int | None = None

    @property
    def recorded(self) -> int:
        return len({e.key for e in self.evaluations})

    @property
    def whole(self) -> bool:
        return self.valid_genomes is None or self.recorded >= self.valid_genomes

    def require_whole(self) -> None:
        """A race or a warm start on part of a slice would compare strategies on a space none of
        them searched (a strategy that asks an unrecorded genome ends its replay early): refused,
        in one line."""
        if not self.whole:
            raise ValueError(f"slice {self.source.label} is partial: {self.recorded} of {self.valid_genomes} valid "
                             "genomes recorded; record the rest first (experiments/device/record_slice.sh resumes it)")

    @property
    def evaluations(self) -> tuple[Evaluation, ...]:
        return self.source.evaluations

    @property
    def metric(self) -> str:
        return self.source.metric

    @property
    def varied(self) -> list[str]:
        return [n for n in self.space.names if len(self.values[n]) > 1]

    def classes_of(self, name: str) -> tuple[str, ...]:
        """The shape classes `name` stands for: itself when it is one of the slice's classes, else
        every class whose name continues it past a "/" (a family names its classes as paths, its
        own first word first: `name` is then a group of them, e.g. one dtype's every row regime).
        ValueError (one line) when it names none."""
        if name in self.classes:
            return (name,)
        group = tuple(c for c in self.classes if name and c.startswith(name.rstrip("/") + "/"))
        if not group:
            raise ValueError(f"slice {self.source.label} has no shape class {name!r} and no class under it; "
                             f"classes: {sorted(self.classes)}")
        return group

    def fitness(self, ev: Evaluation, cls: str | None = None) -> float | None:
        """The recorded objective (cls None), the fitness on one shape class, or on a group of
        classes (`classes_of`): the geomean of its class fitnesses, each class counting once
        whatever its cases (None when it cannot compete on one of them)."""
        if cls is None:
            return ev.fitness(self.metric)
        classes = self.classes_of(cls)
        fits = [class_fitness(ev, self.classes[c], self.source.baseline, self.metric) for c in classes]
        if len(fits) == 1:
            return fits[0]
        return geomean([f for f in fits if f is not None]) if all(f is not None and f > 0 for f in fits) else None

    def optimum(self, cls: str | None = None) -> float:
        fits = [f for f in (self.fitness(e, cls) for e in self.evaluations) if f is not None]
        if not fits:
            raise ValueError(f"slice {self.source.label}: no verified evaluation" + (f" on class {cls}" if cls else ""))
        return max(fits)

    def for_class(self, cls: str) -> list[Evaluation]:
        """The slice as a recording of class `cls` alone (or of a group of classes, `classes_of`):
        its cases only, the metric its fitness there (a genome that ran but not on that class is
        INVALID for it)."""
        cases = {c for name in self.classes_of(cls) for c in self.classes[name]}
        out = []
        for ev in self.evaluations:
            f = self.fitness(ev, cls)
            kept = tuple(c for c in ev.cases if c.case in cases)
            if f is None and ev.status is Status.OK:
                out.append(dataclasses.replace(ev, status=Status.INVALID, objectives={}, cases=kept,
                                               message=f"INVALID at bench: cannot run class {cls}"))
            else:
                out.append(dataclasses.replace(ev, objectives={self.metric: f} if f is not None else {}, cases=kept))
        return out

    # -- Kernel Tuner ----------------------------------------------------------------------------
    def kt_cache(self, cls: str | None = None, device: str = "", kernel: str = "") -> dict[str, Any]:
        """The slice (or one class of it) in Kernel Tuner's cache format; tune parameters are the
        varied genes, values as the genome spells them (str(value) in the keys, as Kernel Tuner
        joins them)."""
        params = self.varied
        tune = {n: [_kt_value(v) for v in self.values[n]] for n in params}
        cases = sorted({c for name in (self.classes_of(cls) if cls else self.classes) for c in self.classes[name]})
        entries: dict[str, dict[str, Any]] = {}
        for ev in self.evaluations:
            values = {n: _kt_value(ev.genome[n]) for n in params}
            key = ",".join(str(values[n]) for n in params)
            entry: dict[str, Any] = dict(values)
            f = self.fitness(ev, cls)
            stage = ev.artifacts.get("stage_seconds")
            secs = _stage_seconds(stage)
            entry.update(compile_time=1000 * secs.get("compile", 0.0), verification_time=1000 * secs.get("check", 0.0),
                         benchmark_time=1000 * secs.get("bench", 0.0), strategy_time=0, framework_time=0,
                         timestamp=_stamp(ev.finished_at))
            if f is None:
                err = KT_ERRORS.get(ev.status, "InvalidConfig") if ev.status is not Status.OK else "InvalidConfig"
                entry.update(time=err, times=err, **{self.metric: err})
            else:
                times = [c.time_us / 1000.0 for c in ev.cases if c.case in cases and c.time_us]
                entry.update(time=geomean(times), times=times, **{self.metric: f})
            entries[key] = entry
        return {"device_name": device or (self.source.evaluations[0].device if self.evaluations else "") or "unknown",
                "kernel_name": kernel or f"{self.source.family}_{cls or 'all'}".replace("/", "_"),
                "problem_size": [len(cases)], "tune_params_keys": params, "tune_params": tune,
                "objective": self.metric, "objective_higher_is_better": True, "cache": entries}


def _kt_value(v: Any) -> Any:
    return v if isinstance(v, (bool, int, float, str)) else str(v)


def _stage_seconds(raw: Any) -> dict[str, float]:
    import json

    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            return {}
    return {k: float(v) for k, v in (raw or {}).items() if isinstance(v, (int, float))}


def _stamp(t: float) -> str:
    return datetime.datetime.fromtimestamp(t or 0.0, datetime.timezone.utc).isoformat()


def load_slice(source: str, space_version: str = "") -> Slice:
    """A recording as a slice; ValueError (one line) when it is not a whole sub-space."""
    src = read_source(source, space_version)
    full = load_space(src.family, src.space_version)
    grid = _recorded_grid(src.config)
    if grid is not None:
        values = subspace(full, *grid)
    else:
        seen: dict[str, list] = {n: [] for n in full.names}
        for ev in src.evaluations:
            g = full.complete(ev.genome)
            for n in full.names:
                if g[n] not in seen[n]:
                    seen[n].append(g[n])
        values = {n: tuple(v for v in full.gene(n).values() if v in seen[n]) for n in full.names}
    space = restricted_space(full, values)
    kept = tuple(e for e in src.evaluations if e.space == full.name and space.is_valid(e.genome))
    classify = shape_classifier(src.family)
    bench: dict[str, Mapping[str, Any]] = {}
    for ev in kept:
        for c in ev.cases:
            if c.time_us:
                bench.setdefault(c.case, c.params)
    classes: dict[str, list[str]] = {}
    for cid in sorted(bench):
        classes.setdefault(classify(cid, bench[cid]), []).append(cid)
    return Slice(dataclasses.replace(src, evaluations=kept), values, space, full,
                 {k: tuple(v) for k, v in sorted(classes.items())},
                 valid_genomes=_count_valid(full, values) if grid is not None else None)


def _count_valid(space: GeneSpace, values: Mapping[str, tuple]) -> int:
    """Valid genomes of the sub-space (every one enumerated: a slice recorded densely is small enough
    to count, and a count skipped would let a partial slice pass as whole)."""
    from evo.strategies.grid import grid_points

    return sum(1 for _ in grid_points(space, values))


def _recorded_grid(config: Mapping[str, Any]):
    cfg = config.get("search") or {}
    grid = cfg.get("grid") or {}
    if cfg.get("strategy") == "grid" and (grid.get("fixed") or grid.get("vary")):
        return {k: (v[0] if isinstance(v, list) and len(v) == 1 else v) for k, v in grid["fixed"].items()}, grid["vary"]
    return None


def coverage(sl: Slice) -> tuple[int, int]:
    """(genomes recorded, valid genomes of the sub-space): a slice is whole when they are equal."""
    return sl.recorded, (sl.valid_genomes if sl.valid_genomes is not None else _count_valid(sl.full_space, sl.values))


def fraction_curve(best_so_far: Sequence[float | None], optimum: float) -> list[float]:
    """Best-so-far over evaluations as a fraction of the optimum (0 before anything verified)."""
    return [0.0 if b is None or not math.isfinite(b) else b / optimum for b in best_so_far]
