"""DEAP individuals without `deap.creator`.

`deap.creator.create` adds classes to a module-global namespace, so two runs in one process (a
notebook, the test suite) share and overwrite each other's types. Here the fitness and
individual classes are ordinary module-level classes: DEAP's `tools.selBest`, `tools.HallOfFame`
and `tools.Statistics` only need an object with a `fitness` attribute, which `Individual` has.

A failed candidate (its Evaluation has no fitness) gets the value -inf: it loses every comparison
with a candidate that ran, yet it can still be sorted, selected against and kept in a population.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Iterable

from deap import base

from genomes import Genome

if TYPE_CHECKING:  # record types only; keeps `import operators` light
    from fitness.records import Evaluation

FAILED = float("-inf")


class FitnessMax(base.Fitness):
    """One objective, maximised (speedup, TB/s, ...)."""

    weights = (1.0,)


class Individual:
    """A genome with its fitness and genealogy, as DEAP's tools expect.

    Two individuals are equal when their genomes are (same key): that is the `similar` test
    DEAP's HallOfFame uses, so the hall never holds the same kernel twice.
    """

    __slots__ = ("genome", "fitness", "parents", "operator")

    def __init__(self, genome: Genome, fitness: FitnessMax | None = None,
                 parents: Iterable[str] = (), operator: str = "init"):
        if not isinstance(genome, Genome):
            raise TypeError(f"Individual.genome must be a Genome, got {type(genome).__name__}")
        self.genome = genome
        self.fitness = fitness if fitness is not None else FitnessMax()
        self.parents = tuple(parents)
        self.operator = operator

    @property
    def key(self) -> str:
        return self.genome.key

    @property
    def value(self) -> float | None:
        """The fitness value, or None when unset or the candidate failed."""
        if not self.fitness.valid:
            return None
        v = self.fitness.values[0]
        return v if math.isfinite(v) else None

    @property
    def failed(self) -> bool:
        return self.fitness.valid and not math.isfinite(self.fitness.values[0])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Individual):
            return self.genome == other.genome
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.genome)

    def __repr__(self) -> str:
        fit = self.fitness.values[0] if self.fitness.valid else "unset"
        return f"Individual({self.genome.key[:8]}, fitness={fit}, operator={self.operator!r})"


def individual(genome: Genome, value: float | None, parents: Iterable[str] = (),
               operator: str = "init") -> Individual:
    """An Individual with its fitness set; None or a non-finite value (failed) becomes -inf."""
    ind = Individual(genome, parents=parents, operator=operator)
    if value is None:
        v = FAILED
    else:
        v = float(value)
        if math.isnan(v) or v == float("inf"):
            v = FAILED
    ind.fitness.values = (v,)
    return ind


def from_evaluation(genome: Genome, evaluation: "Evaluation", metric: str,
                    parents: Iterable[str] = (), operator: str = "init") -> Individual:
    """An Individual whose fitness is `evaluation.fitness(metric)` (-inf when it failed)."""
    if evaluation.key != genome.key:
        raise ValueError(f"evaluation {evaluation.key!r} is not of genome {genome.key!r}")
    return individual(genome, evaluation.fitness(metric), parents=parents, operator=operator)
