"""The strategy contract: ask for candidates, tell their evaluations.

Strategies never evaluate, store or time anything; the Run does. That is what makes a run
resumable by replay: given the same seed and the same answers, a strategy asks for the same
candidates, so a resumed run re-asks, the store answers what was already measured, and only the
missing evaluations are run.
"""

from __future__ import annotations

import abc
from typing import Sequence

from fitness.records import Evaluation
from genomes import Genome
from operators.candidate import Candidate


class Strategy(abc.ABC):
    #: recorded as the `stage` of every record this strategy produces
    name: str = "strategy"

    def __init__(self) -> None:
        self.generation = 0

    def start(self, history: Sequence[tuple[Candidate, Evaluation]]) -> None:
        """Evidence gathered before this strategy began (earlier stages of the run)."""

    @abc.abstractmethod
    def ask(self) -> list[Candidate]:
        """The next candidates to evaluate; an empty list means the strategy has finished."""

    @abc.abstractmethod
    def tell(self, candidates: Sequence[Candidate], evaluations: Sequence[Evaluation]) -> None:
        """Evaluations of (a prefix of) the candidates of the last ask, in the same order."""

    def upcoming(self, n: int) -> list[Genome]:
        """A hint, asked while the last ask's candidates are judged: at most n genomes the next
        ask() will return, where the strategy can tell before it hears the evaluations (a grid's
        fixed order); the run starts their compiles early. It must not change what ask() returns.
        Default: none."""
        return []

    def close(self) -> None:
        """Release resources (e.g. Optuna storages)."""
