"""Failure signatures: gene patterns that (nearly) always failed, learned from recorded verdicts.

Why: a GPU evaluation costs seconds, a candidate that fails to compile, spills, cannot launch a
case or computes a wrong result teaches the same thing every time it is judged again. A signature
is a conjunction of one or two gene values (e.g. rsqrt = newton and inf_safe = False) under which
at least `min_count` recorded candidates failed in one category and at most a `1 - min_rate`
share of those recorded with it did not; a candidate matching one is predicted to fail. Only
minimal patterns are kept (a pair is dropped when one of its genes alone is already a signature
of that category), and of those only the ones that explain failures the stronger ones do not
(genes that merely co-occur with a real cause in the recorded failures add nothing), so a
signature names the genes to change.

Categories come from the verdict (status and message): compile, spill, smem (shared memory over
the limit), launch (the genome cannot run a benchmark case), runtime, wrong, timeout, invalid
(another static rule). Everything here is deterministic: same records, same signatures, same
order.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from fitness.records import Evaluation, Status

#: fewest failures of a category under a pattern before it is a signature
MIN_COUNT = 2
#: least share of the candidates recorded with a pattern that failed (in that category)
MIN_RATE = 0.9


def category(ev: Evaluation) -> str | None:
    """The failure category of a verdict; None for a verified (OK) one."""
    if ev.status is Status.OK:
        return None
    msg = ev.message.lower()
    if ev.status is Status.COMPILE_ERROR:
        return "compile"
    if ev.status is Status.WRONG_RESULT:
        return "wrong"
    if ev.status is Status.TIMEOUT:
        return "timeout"
    if ev.status is Status.RUNTIME_ERROR:
        return "runtime"
    if "spill" in msg or "stack frame" in msg:
        return "spill"
    if "shared memory" in msg:
        return "smem"
    if "cannot handle" in msg or "launch() returned none" in msg:
        return "launch"
    return "invalid"


def _value(v: Any) -> Any:
    """Gene values as JSON keeps them (tuples of patterns must compare equal after a round trip)."""
    return v if isinstance(v, (str, bool, int)) or v is None else float(v)


def patterns(genome: Mapping[str, Any], size: int = 2) -> Iterable[tuple[tuple[str, Any], ...]]:
    """Every conjunction of 1..size gene values of a genome, genes in name order."""
    items = sorted((k, _value(v)) for k, v in genome.items())
    for n in range(1, size + 1):
        yield from itertools.combinations(items, n)


@dataclass(frozen=True)
class Signature:
    category: str
    genes: tuple[tuple[str, Any], ...]      # (gene, value) pairs, in gene-name order
    failed: int                              # recorded candidates with the pattern failing in `category`
    seen: int                                # recorded candidates with the pattern
    example: str = ""                        # one failure message, shortened

    @property
    def rate(self) -> float:
        return self.failed / self.seen if self.seen else 0.0

    def matches(self, genome: Mapping[str, Any]) -> bool:
        return all(name in genome and _value(genome[name]) == value for name, value in self.genes)

    def describe(self) -> str:
        genes = " and ".join(f"{k} = {v!r}" for k, v in self.genes)
        return f"{genes}: {self.category} in {self.failed} of {self.seen} recorded"

    def to_dict(self) -> dict[str, Any]:
        return {"category": self.category, "genes": {k: v for k, v in self.genes}, "failed": self.failed,
                "seen": self.seen, "example": self.example}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Signature":
        return cls(str(d["category"]), tuple(sorted((str(k), _value(v)) for k, v in dict(d["genes"]).items())),
                   int(d["failed"]), int(d["seen"]), str(d.get("example", "")))


@dataclass(frozen=True)
class FailureModel:
    """Signatures learned from verdicts; `predict` names the first one a genome matches."""

    signatures: tuple[Signature, ...] = ()
    counts: Mapping[str, int] = field(default_factory=dict)     # failures per category, recorded

    def predict(self, genome: Mapping[str, Any]) -> Signature | None:
        for s in self.signatures:
            if s.matches(genome):
                return s
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"signatures": [s.to_dict() for s in self.signatures], "counts": dict(self.counts)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "FailureModel":
        return cls(tuple(Signature.from_dict(s) for s in d.get("signatures") or ()),
                   {str(k): int(v) for k, v in (d.get("counts") or {}).items()})


@dataclass(frozen=True)
class Verdict:
    """What a failure model learns from: a genome and how it fared (category None: it ran)."""

    key: str
    genome: Mapping[str, Any]
    category: str | None
    message: str = ""
    fitness: float | None = None

    @classmethod
    def of(cls, ev: Evaluation, genome: Mapping[str, Any] | None = None, metric: str = "") -> "Verdict":
        return cls(ev.key, dict(ev.genome if genome is None else genome), category(ev), ev.message,
                   ev.fitness(metric) if metric else None)


def learn(verdicts: Iterable[Verdict], *, min_count: int = MIN_COUNT, min_rate: float = MIN_RATE,
          size: int = 2) -> FailureModel:
    """Signatures from verdicts (a genome counts once: later verdicts of the same key are
    ignored), strongest first: more failures, then higher rate, then fewer genes."""
    if min_count < 1 or not 0.0 < min_rate <= 1.0:
        raise ValueError(f"min_count must be >= 1 and min_rate in (0, 1], got {min_count}, {min_rate}")
    seen: Counter = Counter()
    failed: dict[str, dict[tuple, list[str]]] = {}      # category -> pattern -> keys that failed with it
    example: dict[tuple[str, tuple], str] = {}
    counts: Counter = Counter()
    keys: set[str] = set()
    for v in verdicts:
        if v.key in keys:
            continue
        keys.add(v.key)
        cat = v.category
        if cat is not None:
            counts[cat] += 1
        for p in patterns(v.genome, size):
            seen[p] += 1
            if cat is not None:
                failed.setdefault(cat, {}).setdefault(p, []).append(v.key)
                example.setdefault((cat, p), v.message[:160])
    found: list[Signature] = []
    for cat in sorted(failed):
        by = failed[cat]
        strong = {p for p, ks in by.items() if len(ks) >= min_count and len(ks) / seen[p] >= min_rate - 1e-12}
        minimal = [p for p in strong
                   if not (len(p) > 1 and any(sub in strong for sub in itertools.combinations(p, len(p) - 1)))]
        minimal.sort(key=lambda p: (-len(by[p]), -len(by[p]) / seen[p], len(p), repr(p)))
        # greedy cover: a pattern is kept only if it explains min_count failures the stronger ones
        # do not (genes that merely co-occur with a kept signature's genes add nothing)
        covered: set[str] = set()
        for p in minimal:
            new = set(by[p]) - covered
            if len(new) < min_count:
                continue
            covered |= new
            found.append(Signature(cat, p, len(by[p]), seen[p], example[(cat, p)]))
    found.sort(key=lambda s: (-s.failed, -s.rate, len(s.genes), s.category, repr(s.genes)))
    return FailureModel(tuple(found), dict(sorted(counts.items())))


@dataclass(frozen=True)
class SkipCheck:
    """How a failure model's skips would have done on held-out verdicts (`backtest`)."""

    judged: int            # held-out verdicts
    failed: int            # of them, failures
    skipped: int           # predicted to fail
    caught: int            # skipped and in fact failed
    wrong: int             # skipped but in fact verified (OK)
    wrong_good: int        # skipped but verified and at least as fit as the held-out median

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["wrong_share"] = self.wrong / self.skipped if self.skipped else None
        d["recall"] = self.caught / self.failed if self.failed else None
        return d


def backtest(verdicts: Sequence[Verdict], folds: int, order: Sequence[int], **learn_kw: Any) -> SkipCheck:
    """k-fold check of the skip rule: signatures learned on the other folds judge each fold;
    `order`, a permutation of the verdicts' indices (the caller's seeded shuffle), deals them into
    folds. "Good" is a verified verdict at least as fit as the median verified one."""
    n = len(verdicts)
    if n < 2 or folds < 2:
        return SkipCheck(n, sum(v.category is not None for v in verdicts), 0, 0, 0, 0)
    folds = min(folds, n)
    fits = [v.fitness for v in verdicts if v.fitness is not None and math.isfinite(v.fitness)]
    median = sorted(fits)[len(fits) // 2] if fits else math.inf
    parts = [list(order[i::folds]) for i in range(folds)]
    failed = skipped = caught = wrong = wrong_good = 0
    for part in parts:
        held = set(part)
        model = learn((v for i, v in enumerate(verdicts) if i not in held), **learn_kw)
        for i in part:
            v = verdicts[i]
            bad = v.category is not None
            failed += bad
            if model.predict(v.genome) is None:
                continue
            skipped += 1
            caught += bad
            if not bad:
                wrong += 1
                wrong_good += v.fitness is not None and v.fitness >= median
    return SkipCheck(n, failed, skipped, caught, wrong, wrong_good)


__all__ = ["FailureModel", "Signature", "SkipCheck", "Verdict", "backtest", "category", "learn", "patterns"]
