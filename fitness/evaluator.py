"""The evaluator contract: genomes in, Evaluations out, in the same order, failures as values.

The engine only sees this contract, so the GPU pipeline, the replay evaluator and anything a
researcher writes in a notebook are interchangeable.
"""

from __future__ import annotations

import abc
from typing import Any, Sequence

from genomes import Genome
from fitness.records import Evaluation


class Evaluator(abc.ABC):
    """Judges genomes. Must never raise for a bad candidate: return a failed Evaluation instead.

    Raising is reserved for the evaluator itself being broken (no GPU, missing toolkit), which
    should stop the run rather than be recorded against a candidate.
    """

    #: how many genomes the engine should hand over at once (e.g. one per GPU worker)
    batch_size: int = 1

    @abc.abstractmethod
    def evaluate(self, genomes: Sequence[Genome]) -> list[Evaluation]:
        """One Evaluation per genome, in order."""

    def evaluate_in_full(self, genomes: Sequence[Genome]) -> list[Evaluation]:
        """Like evaluate(), but never stopped early by a racing rule (e.g. a hopeless cut): for
        genomes already known to be good somewhere, such as an earlier run's per-case champions,
        whose specialty may lie outside the cases an early-stop rule looks at. Default: evaluate()."""
        return self.evaluate(genomes)

    def accepts_evidence(self, evaluation: Evaluation) -> str:
        """"" when `evaluation`, recorded earlier (e.g. by a previous session), is what this
        evaluator would measure now: same device, toolkit, benchmark cases and baseline, verified.
        Otherwise the reason it is not (the run then judges the genome again). Default: never."""
        return f"{type(self).__name__} does not take earlier evidence"

    def prefetch(self, genomes: Sequence[Genome]) -> None:
        """A hint: these genomes come in a later evaluate() call, so work that does not need the
        device (compiling) may start now. Must not raise for a bad genome; default: nothing."""

    def describe(self) -> dict[str, Any]:
        """Device and toolkit facts recorded beside every evaluation."""
        return {}

    def close(self) -> None:
        """Release workers and devices."""

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
