"""Crossover: uniform (gene by gene) and by group (whole gene groups travel together).

`mix_uniform` and `mix_groups` give the children before repair (each gene taken from one parent);
`uniform` and `by_group` repair them into valid genomes. Random draws come only from the
`random.Random` passed in, never the global `random` module that `deap.tools.cxUniform` uses.
"""

from __future__ import annotations

import random
from typing import Any, Callable

from genomes import GeneSpace, Genome

Values = dict[str, Any]


def _check_parents(a: Genome, b: Genome, space: GeneSpace) -> None:
    for g in (a, b):
        if g.space != space.name:
            raise ValueError(f"genome of space {g.space!r} cannot be crossed in space {space.name!r}")


def mix_uniform(a: Genome, b: Genome, space: GeneSpace, rng: random.Random,
                indpb: float = 0.5) -> tuple[Values, Values]:
    """Swap each gene between the parents with probability `indpb` (no repair)."""
    if isinstance(indpb, bool) or not isinstance(indpb, (int, float)) or not 0.0 <= indpb <= 1.0:
        raise ValueError(f"indpb must be a probability in [0, 1], got {indpb!r}")
    _check_parents(a, b, space)
    c1, c2 = a.as_dict(), b.as_dict()
    for name in space.names:
        if rng.random() < indpb:
            c1[name], c2[name] = c2[name], c1[name]
    return c1, c2


def mix_groups(a: Genome, b: Genome, space: GeneSpace, rng: random.Random) -> tuple[Values, Values]:
    """Swap whole gene groups (space.groups()) between the parents (no repair).

    Each group is swapped with probability 1/2, redrawn so that at least one group is swapped and
    at least one is kept (otherwise the children would be the parents). A space with a single
    group has nothing to swap as a whole, so it falls back to uniform crossover.
    """
    _check_parents(a, b, space)
    groups = list(space.groups().values())
    if len(groups) < 2:
        return mix_uniform(a, b, space, rng)
    swap = [rng.random() < 0.5 for _ in groups]
    if all(swap) or not any(swap):
        i = rng.randrange(len(groups))
        swap[i] = not swap[i]
    c1, c2 = a.as_dict(), b.as_dict()
    for names, s in zip(groups, swap):
        if s:
            for name in names:
                c1[name], c2[name] = c2[name], c1[name]
    return c1, c2


def uniform(a: Genome, b: Genome, space: GeneSpace, rng: random.Random,
            indpb: float = 0.5) -> tuple[Genome, Genome]:
    """Uniform crossover; both children repaired into valid genomes."""
    c1, c2 = mix_uniform(a, b, space, rng, indpb)
    return space.repair(c1, rng), space.repair(c2, rng)


def by_group(a: Genome, b: Genome, space: GeneSpace, rng: random.Random) -> tuple[Genome, Genome]:
    """Crossover by gene group; both children repaired into valid genomes."""
    c1, c2 = mix_groups(a, b, space, rng)
    return space.repair(c1, rng), space.repair(c2, rng)


CROSSOVERS: dict[str, Callable[..., tuple[Genome, Genome]]] = {"uniform": uniform, "group": by_group}
