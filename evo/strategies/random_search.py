"""Random search: the baseline every smarter strategy must beat on the same budget."""

from __future__ import annotations

import random
from typing import Sequence

from fitness.records import Evaluation
from genomes import GeneSpace
from operators.candidate import Candidate
from evo.strategies.base import Strategy


class RandomSearch(Strategy):
    """Uniform draws over the valid space, without repeats."""

    name = "random"

    def __init__(self, space: GeneSpace, rng: random.Random, batch: int = 32, tries: int = 200):
        super().__init__()
        self.space, self.rng, self.batch, self.tries = space, rng, batch, tries
        self._seen: set[str] = set()

    def start(self, history: Sequence[tuple[Candidate, Evaluation]]) -> None:
        self._seen.update(c.key for c, _ in history)

    def ask(self) -> list[Candidate]:
        out = []
        misses = 0
        while len(out) < self.batch and misses < self.tries:
            g = self.space.sample(self.rng)
            if g.key in self._seen:
                misses += 1
                continue
            self._seen.add(g.key)
            out.append(Candidate(g, (), "random"))
        return out

    def tell(self, candidates: Sequence[Candidate], evaluations: Sequence[Evaluation]) -> None:
        self.generation += 1
