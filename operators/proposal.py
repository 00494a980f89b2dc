"""Proposal: what an evidence-reading operator (guided rules, an LLM) made of one parent.

Every proposal is recorded in the run's store (kind "proposal"), whether it became a candidate or
not, so a report counts proposals, valid ones and their yield per operator, and an invalid or
duplicate one is evidence too:

    outcome    candidate?  meaning
    valid      yes         the proposed genome (or source) as asked for
    repaired   yes         the genes broke a constraint or a range; the nearest valid genome is judged
    invalid    no          cannot be judged (unknown gene, malformed answer, forbidden #include, ...)
    duplicate  no          the run has judged (or is judging) that candidate already
    skipped    no          asked for but not judged (the evaluator takes no source; the budget is spent)
    error      no          the endpoint failed (timeout, connection, 5xx after the retries, refusal)
    no_rule    no          no guided rule fired on the parent's evidence
"""

from __future__ import annotations

import abc
import random
from dataclasses import dataclass, field
from typing import Any, Collection, Mapping, Sequence

from operators.candidate import Candidate

OUTCOMES = ("valid", "repaired", "invalid", "duplicate", "skipped", "error", "no_rule")


@dataclass(frozen=True)
class Proposal:
    operator: str                       # "guided:<rule>", "llm:genes", "llm:source"
    parent: str                         # key of the parent it was made from
    outcome: str
    reason: str = ""
    candidate: Candidate | None = None
    rationale: str = ""                 # the rule's why, or the model's own words (data, never run)
    changes: Mapping[str, Any] = field(default_factory=dict)
    exchange: int | None = None         # index of the LLM exchange it came from

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome {self.outcome!r} is not one of {OUTCOMES}")
        if (self.candidate is not None) != (self.outcome in ("valid", "repaired")):
            raise ValueError(f"a {self.outcome} proposal {'must' if self.candidate is None else 'cannot'} "
                             "carry a candidate")

    @property
    def accepted(self) -> bool:
        return self.candidate is not None

    def as_event(self) -> dict[str, Any]:
        c = self.candidate
        return {"operator": self.operator, "parent": self.parent, "outcome": self.outcome, "reason": self.reason,
                "rationale": self.rationale[:2000], "changes": {k: _plain(v) for k, v in self.changes.items()},
                "exchange": self.exchange, "key": c.key if c is not None else None,
                "edit": ("source" if c.raw is not None else "genes") if c is not None
                else ("source" if self.operator.endswith(":source") else "genes")}


@dataclass(frozen=True)
class Request:
    """One parent to propose from: its evaluation (the evidence) and its genome."""

    parent: Any                          # fitness.records.Evaluation
    genome: Any                          # genomes.Genome


class Proposer(abc.ABC):
    """The proposer contract (guided rules, an LLM, ...): one Proposal per request, in order, never
    raising for a bad parent or a bad answer. `taken`: keys already judged or in the batch, which a
    proposal must not repeat (outcome "duplicate"); `context`: what the run knows (lessons)."""

    name: str = "proposer"

    @abc.abstractmethod
    def propose_many(self, requests: Sequence[Request], rng: random.Random, taken: Collection[str] = (),
                     context: str = "") -> list[Proposal]:
        """One Proposal per request."""


def _plain(v: Any) -> Any:
    return v if isinstance(v, (str, int, float, bool)) or v is None else str(v)


__all__ = ["OUTCOMES", "Proposal", "Proposer", "Request"]
