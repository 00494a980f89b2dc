"""A dispatch table from a run: for every dtype and row-width range, the genome that measured
fastest there.

One genome rarely wins everywhere (short rows want one warp per row, very long rows want clusters),
so the product of a search is a table keyed by dtype and N range, chosen from the run's evidence,
never written by hand. For each (dtype, N) measured in the run, the winner is the verified, not
suspect genome with the smallest geometric-mean time over that width's cases (every M measured at
that width); adjacent widths with the same winner merge into one range. Range edges sit at the
measured widths: a range covers (previous width, its last width], the first starts at 1 and the
last is open-ended. A dispatch playoff (evo/playoff.py) may replace a width's recorded winner by
the genome that was fastest when the near-tied ones were judged again side by side.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from fitness.objectives import geomean
from fitness.records import Status


@dataclass(frozen=True)
class DispatchEntry:
    dtype: str
    n_min: int
    n_max: int | None                      # None: no upper bound
    key: str
    genome: Mapping[str, Any]
    cases: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)   # case id -> figures

    def covers(self, dtype: str, n: int) -> bool:
        return dtype == self.dtype and self.n_min <= n and (self.n_max is None or n <= self.n_max)

    def to_dict(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "n_min": self.n_min, "n_max": self.n_max, "key": self.key,
                "genome": dict(self.genome), "cases": {k: dict(v) for k, v in self.cases.items()}}


def complete_evidence(evaluations: Iterable[Any]) -> dict[tuple[str, int], dict[str, dict[str, Any]]]:
    """(dtype, N) -> genome key -> case id -> CaseResult, for the verified, not suspect genomes
    that were timed on every case the run measured at that width (the ones a width can choose)."""
    by_width: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}   # (dtype, N) -> key -> case -> cr
    for item in evaluations:
        ev = getattr(item, "evaluation", item)
        if ev.status is not Status.OK or ev.suspect:
            continue
        for cr in ev.cases:
            if cr.status is not Status.OK or not cr.time_us:
                continue
            dtype, n = str(cr.params.get("dtype")), int(cr.params.get("N", 0))
            by_width.setdefault((dtype, n), {}).setdefault(ev.key, {})[cr.case] = cr
    out = {}
    for width, per_key in by_width.items():
        all_cases = set().union(*(set(c) for c in per_key.values()))
        complete = {k: c for k, c in per_key.items() if set(c) == all_cases}
        if complete:
            out[width] = complete
    return out


def recorded_times(complete: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """Genome key -> geometric mean of its recorded times over a width's cases: what the dispatch
    ranks (complete_evidence's value for one width)."""
    return {k: geomean([cr.time_us for cr in cases.values()]) for k, cases in complete.items()}


def build_dispatch(evaluations: Iterable[Any], baseline: str = "torch",
                   winners: Mapping[tuple[str, int], str] | None = None) -> list[DispatchEntry]:
    """Dispatch entries from Evaluations (or Records) of one run. `winners` ((dtype, N) -> key, from
    an evo.playoff file) replaces the recorded fastest where given; each must be a genome with
    complete evidence at that width (ValueError otherwise: a playoff of another run)."""
    evaluations = list(evaluations)
    genomes: dict[str, Mapping[str, Any]] = {}
    for item in evaluations:
        ev = getattr(item, "evaluation", item)
        genomes.setdefault(ev.key, ev.genome)
    evidence = complete_evidence(evaluations)
    unknown = sorted(set(winners or {}) - set(evidence))
    if unknown:
        raise ValueError(f"playoff widths {unknown} were not measured in this run (a playoff of another run?)")
    chosen: dict[tuple[str, int], tuple[str, dict[str, Any]]] = {}
    for width, complete in evidence.items():
        times = recorded_times(complete)
        key = min(times, key=lambda k: (times[k], k))
        if winners and width in winners:
            key = winners[width]
            if key not in complete:
                raise ValueError(f"playoff winner {key} at {width[0]} N={width[1]} has no complete verified "
                                 "evidence in this run (a playoff of another run?)")
        chosen[width] = (key, complete[key])
    entries: list[DispatchEntry] = []
    for dtype in sorted({d for d, _ in chosen}):
        widths = sorted(n for d, n in chosen if d == dtype)
        start = 1
        i = 0
        while i < len(widths):
            key = chosen[(dtype, widths[i])][0]
            j = i
            while j + 1 < len(widths) and chosen[(dtype, widths[j + 1])][0] == key:
                j += 1
            cases: dict[str, dict[str, Any]] = {}
            for n in widths[i:j + 1]:
                for cid, cr in chosen[(dtype, n)][1].items():
                    base = cr.baselines_us.get(baseline)
                    cases[cid] = {"M": cr.params.get("M"), "N": cr.params.get("N"), "time_us": cr.time_us,
                                  "tbps": cr.tbps, f"{baseline}_us": base,
                                  "speedup": (base / cr.time_us) if base else None}
            last = j + 1 == len(widths)
            entries.append(DispatchEntry(dtype, start, None if last else widths[j], key, genomes[key], cases))
            start = widths[j] + 1
            i = j + 1
    return entries


def lookup(entries: Iterable[DispatchEntry], dtype: str, n: int) -> DispatchEntry:
    for e in entries:
        if e.covers(dtype, n):
            return e
    raise LookupError(f"no dispatch entry for dtype {dtype} and N = {n}")


def markdown_rows(entries: Sequence[DispatchEntry], baseline: str, code: bool = False) -> list[str]:
    """The dispatch table as markdown: per entry its dtype, N range, genome key, cases and the geomean
    of its cases' speedups over `baseline` (code: keys in backticks); `evo dispatch` prints it."""
    rows = [f"| dtype | N range | genome key | cases | geomean speedup vs {baseline} |", "|---|---|---|---:|---:|"]
    for e in entries:
        gm = geomean([c["speedup"] for c in e.cases.values() if c.get("speedup")])
        rng = f"{e.n_min}..{e.n_max if e.n_max is not None else 'inf'}"
        key = f"`{e.key}`" if code else e.key
        rows.append(f"| {e.dtype} | {rng} | {key} | {len(e.cases)} | {f'{gm:.3f}' if gm else '-'} |")
    return rows
