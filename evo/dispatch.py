"""A dispatch table from a run: for every group of the family's dispatch key and every range of its
ordered field, the genome that measured fastest there.

One genome rarely wins everywhere (short rows want one warp per row, very long rows want clusters),
so the product of a search is a table, chosen from the run's evidence, never written by hand. The
family says how it is keyed (`KernelFamily.dispatch_key()`, a fitness.family.DispatchKey): exact
fields a table splits on (a group per distinct value) and an ordered field whose ranges a group
covers; the engine knows neither their names nor their values. For each key point (group and
ordered value) measured in the run, the winner is the verified, not suspect genome with the
smallest geometric-mean time over that point's cases (every other case parameter measured there);
adjacent points of a group with the same winner merge into one range. Range edges sit at the
measured values: a range covers (previous value, its last value], the first starts at 1 (or the
smallest measured value, if lower) and the last is open-ended. A dispatch playoff (evo/playoff.py)
may replace a point's recorded winner by the genome that was fastest when the near-tied ones were
judged again side by side.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from fitness.family import DispatchKey, KeyPoint
from fitness.objectives import geomean
from fitness.records import Status


@dataclass(frozen=True)
class DispatchEntry:
    """One range of one group: genome `key` serves the cases whose key point has this `group` and
    an ordered value in [lo, hi] (hi None: no upper bound)."""

    keys: DispatchKey
    group: tuple[str, ...]
    lo: int
    hi: int | None
    key: str
    genome: Mapping[str, Any]
    cases: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)   # case id -> figures

    def covers(self, point: KeyPoint) -> bool:
        return point.group == self.group and self.lo <= point.at and (self.hi is None or point.at <= self.hi)

    @property
    def range_label(self) -> str:
        return f"{self.lo}..{self.hi if self.hi is not None else 'inf'}"

    def bounds(self) -> dict[str, Any]:
        """The group's fields and the range's bounds, as JSON fields (the family's names)."""
        out: dict[str, Any] = dict(zip((f.name for f in self.keys.exact), self.group))
        names = self.keys.range_names
        if names:
            out[names[0]], out[names[1]] = self.lo, self.hi
        return out

    def to_dict(self) -> dict[str, Any]:
        return {**self.bounds(), "key": self.key, "genome": dict(self.genome),
                "cases": {k: dict(v) for k, v in self.cases.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], keys: DispatchKey) -> "DispatchEntry":
        """An entry as `to_dict` (or an exported package's dispatch.json) wrote it; ValueError naming
        a missing field."""
        names = keys.range_names
        need = [f.name for f in keys.exact] + list(names or ()) + ["key", "genome"]
        missing = [n for n in need if n not in data]
        if missing:
            raise ValueError(f"dispatch entry lacks {missing} (the family's dispatch key needs {need[:-2]})")
        lo, hi = (data[names[0]], data[names[1]]) if names else (0, None)
        return cls(keys, tuple(str(data[f.name]) for f in keys.exact), int(lo), None if hi is None else int(hi),
                   data["key"], data["genome"], data.get("cases") or {})


def complete_evidence(evaluations: Iterable[Any], keys: DispatchKey) -> dict[KeyPoint, dict[str, dict[str, Any]]]:
    """Key point -> genome key -> case id -> CaseResult, for the verified, not suspect genomes
    that were timed on every case the run measured at that point (the ones a point can choose)."""
    by_point: dict[KeyPoint, dict[str, dict[str, Any]]] = {}
    for item in evaluations:
        ev = getattr(item, "evaluation", item)
        if ev.status is not Status.OK or ev.suspect:
            continue
        for cr in ev.cases:
            if cr.status is not Status.OK or not cr.time_us:
                continue
            by_point.setdefault(keys.point(cr.params), {}).setdefault(ev.key, {})[cr.case] = cr
    out = {}
    for point, per_key in by_point.items():
        all_cases = set().union(*(set(c) for c in per_key.values()))
        complete = {k: c for k, c in per_key.items() if set(c) == all_cases}
        if complete:
            out[point] = complete
    return out


def recorded_times(complete: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """Genome key -> geometric mean of its recorded times over a point's cases: what the dispatch
    ranks (complete_evidence's value for one point)."""
    return {k: geomean([cr.time_us for cr in cases.values()]) for k, cases in complete.items()}


def build_dispatch(evaluations: Iterable[Any], keys: DispatchKey, baseline: str = "torch",
                   winners: Mapping[KeyPoint, str] | None = None) -> list[DispatchEntry]:
    """Dispatch entries from Evaluations (or Records) of one run, keyed by the family's `keys`.
    `winners` (key point -> genome key, from an evo.playoff file) replaces the recorded fastest
    where given; each must be a genome with complete evidence at that point (ValueError otherwise:
    a playoff of another run)."""
    evaluations = list(evaluations)
    genomes: dict[str, Mapping[str, Any]] = {}
    for item in evaluations:
        ev = getattr(item, "evaluation", item)
        genomes.setdefault(ev.key, ev.genome)
    evidence = complete_evidence(evaluations, keys)
    unknown = sorted(set(winners or {}) - set(evidence))
    if unknown:
        raise ValueError(f"playoff points {[keys.describe(p) for p in unknown]} were not measured in this run "
                         "(a playoff of another run?)")
    chosen: dict[KeyPoint, tuple[str, dict[str, Any]]] = {}
    for point, complete in evidence.items():
        times = recorded_times(complete)
        key = min(times, key=lambda k: (times[k], k))
        if winners and point in winners:
            key = winners[point]
            if key not in complete:
                raise ValueError(f"playoff winner {key} at {keys.describe(point)} has no complete verified "
                                 "evidence in this run (a playoff of another run?)")
        chosen[point] = (key, complete[key])
    entries: list[DispatchEntry] = []
    for group in sorted({p.group for p in chosen}):
        at = sorted(p.at for p in chosen if p.group == group)
        start = min(1, at[0])
        i = 0
        while i < len(at):
            key = chosen[KeyPoint(group, at[i])][0]
            j = i
            while j + 1 < len(at) and chosen[KeyPoint(group, at[j + 1])][0] == key:
                j += 1
            cases: dict[str, dict[str, Any]] = {}
            for v in at[i:j + 1]:
                for cid, cr in chosen[KeyPoint(group, v)][1].items():
                    base = cr.baselines_us.get(baseline)
                    cases[cid] = {**{s: cr.params.get(s) for s in keys.shape}, "time_us": cr.time_us,
                                  "tbps": cr.tbps, f"{baseline}_us": base,
                                  "speedup": (base / cr.time_us) if base else None}
            last = j + 1 == len(at)
            entries.append(DispatchEntry(keys, group, start, None if last else at[j], key, genomes[key], cases))
            start = at[j] + 1
            i = j + 1
    return entries


def lookup(entries: Iterable[DispatchEntry], point: KeyPoint) -> DispatchEntry:
    """The entry serving a key point (`keys.point(case)`); LookupError when none does."""
    entries = list(entries)
    for e in entries:
        if e.covers(point):
            return e
    where = entries[0].keys.describe(point) if entries else str(point)
    raise LookupError(f"no dispatch entry for {where}")


def entry_for(entries: Sequence[DispatchEntry], params: Mapping[str, Any]) -> DispatchEntry:
    """The entry serving a case, given its parameters (a Case's, a CaseResult's or a table row's),
    keyed by the entries' own dispatch key; LookupError when none does."""
    if not entries:
        raise LookupError("empty dispatch table")
    return lookup(entries, entries[0].keys.point(params))


def scope(keys: DispatchKey) -> str:
    """What one entry of a table keyed by `keys` serves, in words: "dtype and N range"."""
    parts = [f.title for f in keys.exact] + ([f"{keys.ordered.title} range"] if keys.ordered is not None else [])
    return " and ".join(parts) if parts else "table (one genome for every case)"


def markdown_rows(entries: Sequence[DispatchEntry], baseline: str, code: bool = False) -> list[str]:
    """The dispatch table as markdown: per entry its group, range, genome key, cases and the geomean
    of its cases' speedups over `baseline` (code: keys in backticks); `evo dispatch` prints it."""
    keys = entries[0].keys if entries else DispatchKey()
    head = [f.title for f in keys.exact] + ([f"{keys.ordered.title} range"] if keys.ordered is not None else [])
    rows = ["| " + " | ".join([*head, "genome key", "cases", f"geomean speedup vs {baseline} |"]),
            "|" + "---|" * (len(head) + 1) + "---:|---:|"]
    for e in entries:
        gm = geomean([c["speedup"] for c in e.cases.values() if c.get("speedup")])
        where = [*e.group, *([e.range_label] if keys.ordered is not None else [])]
        key = f"`{e.key}`" if code else e.key
        rows.append("| " + " | ".join([*where, key, str(len(e.cases)), f"{gm:.3f}" if gm else "-"]) + " |")
    return rows
