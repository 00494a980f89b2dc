"""Selection: tournament (seeded), elitism and best-unique, over `Individual`s.

`elite` is DEAP's `tools.selBest`. Tournament is written here because `tools.selTournament`
draws from the global `random` module; this one draws only from the `random.Random` passed in.
Failed individuals carry fitness -inf, so they lose every comparison yet remain orderable.
"""

from __future__ import annotations

import random
from operator import attrgetter
from typing import Sequence

from deap import tools

from operators.individual import Individual


def _check_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"k must be a non-negative integer, got {k!r}")
    return k


def tournament(individuals: Sequence[Individual], k: int, rng: random.Random,
               tournsize: int = 3) -> list[Individual]:
    """k winners, each the fittest of `tournsize` individuals drawn with replacement.

    Ties go to the first drawn aspirant, so the result depends only on `rng`.
    """
    _check_k(k)
    if isinstance(tournsize, bool) or not isinstance(tournsize, int) or tournsize < 1:
        raise ValueError(f"tournsize must be a positive integer, got {tournsize!r}")
    if k and not individuals:
        raise ValueError("tournament needs at least one individual")
    pool = list(individuals)
    chosen = []
    for _ in range(k):
        aspirants = [pool[rng.randrange(len(pool))] for _ in range(tournsize)]
        chosen.append(max(aspirants, key=attrgetter("fitness")))
    return chosen


def elite(individuals: Sequence[Individual], k: int) -> list[Individual]:
    """The k fittest (DEAP's selBest; stable, so ties keep their input order)."""
    return tools.selBest(list(individuals), _check_k(k))


def best_unique(individuals: Sequence[Individual], k: int) -> list[Individual]:
    """The k fittest with distinct genome keys (the first, fittest copy of each genome wins)."""
    _check_k(k)
    out, seen = [], set()
    for ind in sorted(individuals, key=attrgetter("fitness"), reverse=True):
        if len(out) >= k:
            break
        if ind.genome.key not in seen:
            seen.add(ind.genome.key)
            out.append(ind)
    return out
