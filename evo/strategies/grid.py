"""Grid: every valid genome of a sub-space, in a fixed order (a densely recorded slice).

A slice is the test bed for search claims: with every genome of a sub-space recorded, a strategy's
"evaluations to 99 % of the optimum" is measured against the true optimum, by replay, for any
number of seeds. The sub-space is given as genes held fixed and genes that take each of a list of
values; every gene of the space is one or the other, so nothing is left to a default.

Recording a slice may take several GPU sessions: the strategy asks its points in one fixed order
(the product of the varied genes' values, in the space's gene order), so `evo resume` replays the
recorded part from the store (no GPU time, no second record) and judges only what is left.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterator, Mapping, Sequence

from fitness.records import Evaluation
from genomes import GeneSpace, Genome
from genomes.genes import GeneError
from operators.candidate import Candidate
from evo.strategies.base import Strategy


def subspace(space: GeneSpace, fixed: Mapping[str, Any], vary: Mapping[str, Sequence[Any]]) -> dict[str, tuple]:
    """gene -> its canonical values in the sub-space (GeneError naming the gene or value that is
    wrong, a gene both fixed and varied, or the genes neither names)."""
    both = sorted(set(fixed) & set(vary))
    if both:
        raise GeneError(f"genes {both} are both fixed and varied; name each once")
    region = space.region({**{k: (v if isinstance(v, (list, tuple)) else [v]) for k, v in fixed.items()}, **vary})
    many = sorted(k for k in fixed if len(region[k]) != 1)
    if many:
        raise GeneError(f"fixed genes {many} must have one value each (vary them instead)")
    missing = [n for n in space.names if n not in region]
    if missing:
        raise GeneError(f"genes {missing} are neither fixed nor varied; every gene of {space.name!r} must be one "
                        "or the other")
    return {n: region[n] for n in space.names}


def grid_points(space: GeneSpace, values: Mapping[str, Sequence[Any]]) -> Iterator[Genome]:
    """The valid genomes of a sub-space (subspace's values) in the fixed order."""
    for combo in itertools.product(*(values[n] for n in space.names)):
        genes = dict(zip(space.names, combo))
        if space.is_valid(genes):
            yield space.make(genes)


def grid_size(values: Mapping[str, Sequence[Any]]) -> int:
    """Points of the sub-space before constraints."""
    n = 1
    for v in values.values():
        n *= len(v)
    return n


class GridSearch(Strategy):
    name = "grid"

    def __init__(self, space: GeneSpace, fixed: Mapping[str, Any], vary: Mapping[str, Sequence[Any]],
                 batch: int = 16):
        super().__init__()
        self.points = list(grid_points(space, subspace(space, fixed, vary)))
        self.batch = batch
        self._next = 0
        self._done: set[str] = set()

    def start(self, history: Sequence[tuple[Candidate, Evaluation]]) -> None:
        self._done.update(c.key for c, _ in history)

    def upcoming(self, n: int) -> list[Genome]:
        """The next n points of the fixed order that the next asks will return (nothing is
        consumed: ask() still returns them)."""
        out, i = [], self._next
        while i < len(self.points) and len(out) < n:
            g = self.points[i]
            i += 1
            if g.key not in self._done:
                out.append(g)
        return out

    def ask(self) -> list[Candidate]:
        out = []
        while self._next < len(self.points) and len(out) < self.batch:
            g = self.points[self._next]
            self._next += 1
            if g.key not in self._done:
                out.append(Candidate(g, (), "grid"))
        return out

    def tell(self, candidates: Sequence[Candidate], evaluations: Sequence[Evaluation]) -> None:
        self._done.update(c.key for c in candidates[:len(evaluations)])
        self.generation += 1
