"""Typed mutation: every gene mutates by its own kind's rule, then the space repairs the child.

Random draws come only from the `random.Random` passed in (never the global `random` module that
DEAP's own mutation operators use), so the same seed always gives the same children.
"""

from __future__ import annotations

import random

from genomes import GeneSpace, Genome

#: fresh attempts before falling back to a one-step neighbour or a new sample
MUTATION_TRIES = 8
SAMPLE_TRIES = 32


def _check_probability(name: str, p: float) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {p!r}")
    return float(p)


def mutate(genome: Genome, space: GeneSpace, rng: random.Random, indpb: float | None = None) -> Genome:
    """A valid child that differs from `genome` whenever the space has another valid genome.

    Each gene with more than one legal value mutates with probability `indpb` (default
    1 / number of genes) using its kind's `mutate` (Gaussian step for integer ranges, adjacent
    power of two, another option or flag); at least one gene always mutates. Repair may undo a
    change that broke a constraint, so the attempt is repeated (bounded); after that, a random
    valid one-step neighbour is taken, and as a last resort a fresh sample.
    """
    if genome.space != space.name:
        raise ValueError(f"genome of space {genome.space!r} cannot be mutated in space {space.name!r}")
    mutable = [g for g in space.genes if len(g.values()) > 1]
    if not mutable:
        return genome
    p = 1.0 / len(space.genes) if indpb is None else _check_probability("indpb", indpb)
    for _ in range(MUTATION_TRIES):
        values = genome.as_dict()
        chosen = [g for g in mutable if rng.random() < p] or [rng.choice(mutable)]
        for g in chosen:
            values[g.name] = g.mutate(values[g.name], rng)
        child = space.repair(values, rng)
        if child != genome:
            return child
    near = space.neighbours(genome)
    if near:
        return rng.choice(near)
    for _ in range(SAMPLE_TRIES):
        child = space.sample(rng)
        if child != genome:
            return child
    return genome
