"""Candidate: a genome proposed by some operator, with where it came from.

The engine evaluates candidates and the store records `parents` (genome keys) and `operator`
beside each evaluation, so a run's genealogy and the share of improvements each operator makes
can be studied afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from genomes import Genome

#: operator labels used in this package; others ("optuna:tpe", "guided", "llm", ...) come from
#: strategies and later operators, so the field is a free string rather than an enum.
KNOWN_OPERATORS = (
    "init", "random", "mutation", "crossover:uniform", "crossover:group",
    "crossover:uniform+mutation", "crossover:group+mutation", "migration",
)


@dataclass(frozen=True)
class Candidate:
    genome: Genome
    parents: tuple[str, ...] = ()
    operator: str = "init"
    #: a source proposal (fitness.raw.RawSource): judged through the evaluator's evaluate_raw, keyed
    #: by its own hash; `genome` is then the genome it was derived from (its parent)
    raw: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.genome, Genome):
            raise TypeError(f"Candidate.genome must be a Genome, got {type(self.genome).__name__}")
        object.__setattr__(self, "parents", tuple(self.parents))
        if not all(isinstance(p, str) for p in self.parents):
            raise TypeError(f"Candidate.parents must be genome keys (str), got {self.parents!r}")

    @property
    def key(self) -> str:
        return self.raw.key if self.raw is not None else self.genome.key
