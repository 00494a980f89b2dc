"""Constraints between genes, stated by a kernel family so invalid combinations are never compiled.

A constraint is a predicate over the genome's values plus the names of the genes it reads: repair
uses those names to change only the genes that can fix a violation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

Values = Mapping[str, Any]


@dataclass(frozen=True)
class Constraint:
    """`check(values)` is True when the combination is legal; `why` is shown when it is not."""

    name: str
    genes: tuple[str, ...]
    check: Callable[[Values], bool]
    why: str = ""

    def holds(self, values: Values) -> bool:
        return bool(self.check(values))

    def describe(self) -> str:
        return f"{self.name}: {self.why}" if self.why else self.name


def implies(name: str, genes: tuple[str, ...], when: Callable[[Values], bool],
            then: Callable[[Values], bool], why: str = "") -> Constraint:
    """`when(values)` requires `then(values)`; e.g. cluster size > 1 needs threads per row >= 128."""
    return Constraint(name, tuple(genes), lambda v: (not when(v)) or bool(then(v)), why)


def forbid(name: str, genes: tuple[str, ...], combo: Callable[[Values], bool], why: str = "") -> Constraint:
    """No genome may satisfy `combo`."""
    return Constraint(name, tuple(genes), lambda v: not combo(v), why)


def require(name: str, genes: tuple[str, ...], check: Callable[[Values], bool], why: str = "") -> Constraint:
    """Every genome must satisfy `check`."""
    return Constraint(name, tuple(genes), check, why)
