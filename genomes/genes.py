"""Typed genes: the vocabulary a kernel family uses to describe its PTX-level choices.

Each gene knows its own legal values, how to draw one, which values are "next to" a value
(for local search and repair) and how far apart two values are (so repair can find the
*nearest* valid genome rather than any valid one). Genes are frozen dataclasses so a gene
space can be shared freely between runs, threads and worker processes.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Hashable, Sequence


class GeneError(ValueError):
    """A value that is not legal for a gene, or a gene defined inconsistently."""


@dataclass(frozen=True)
class Gene:
    """Base of every gene kind.

    `group` names the part of the kernel a gene belongs to (memory, geometry, ...):
    crossover by group swaps whole groups so that genes that only work together travel together.
    `structural` genes change the shape of the generated code; the Optuna stage freezes them and
    tunes only the numeric ones.
    """

    name: str
    group: str = "default"
    doc: str = ""
    # A gene added to a space after genomes were recorded: `legacy` is the value that reproduces
    # the kernels made before it existed. A genome with that value keeps the key it had without
    # the gene, and a recorded genome that lacks the gene reads as having it, so stores, replay
    # tables and compile caches of earlier runs stay valid (None: an original gene).
    legacy: Any = None

    kind = "gene"
    structural = True

    def values(self) -> tuple[Any, ...]:
        raise NotImplementedError

    def sample(self, rng: random.Random) -> Any:
        return rng.choice(self.values())

    def contains(self, value: Any) -> bool:
        try:
            return value in self.values()
        except TypeError:
            return False

    def validate(self, value: Any) -> Any:
        """Return the canonical form of `value`, or raise GeneError naming the legal values."""
        if not self.contains(value):
            raise GeneError(f"gene {self.name!r}: {value!r} is not one of {self.describe_values()}")
        return self.canonical(value)

    def canonical(self, value: Any) -> Any:
        return value

    def describe_values(self) -> str:
        vals = self.values()
        if len(vals) > 8:
            return f"{list(vals[:3])} ... {list(vals[-2:])} ({len(vals)} values)"
        return str(list(vals))

    def neighbours(self, value: Any) -> tuple[Any, ...]:
        """Values one step away from `value`: adjacent in an ordered gene, every other in a choice."""
        vals = self.values()
        i = vals.index(value)
        return tuple(v for v in (vals[i - 1] if i > 0 else None, vals[i + 1] if i + 1 < len(vals) else None) if v is not None)

    def distance(self, a: Any, b: Any) -> float:
        """How far apart two legal values are, normalised so one step is about 1."""
        vals = self.values()
        return float(abs(vals.index(a) - vals.index(b)))

    def mutate(self, value: Any, rng: random.Random) -> Any:
        """A different legal value, biased towards near ones for ordered genes."""
        near = self.neighbours(value)
        if not near:
            return value
        return rng.choice(near)

    def to_json(self, value: Any) -> Any:
        return value

    def from_json(self, raw: Any) -> Any:
        return self.validate(raw)

    def spec(self) -> dict[str, Any]:
        """A JSON-safe description (for stores, reports and LLM prompts)."""
        return self._with_legacy({"name": self.name, "kind": self.kind, "group": self.group,
                                  "values": list(self.values()), "doc": self.doc})

    def _with_legacy(self, spec: dict[str, Any]) -> dict[str, Any]:
        if self.legacy is not None:
            spec["legacy"] = self.legacy
        return spec


@dataclass(frozen=True)
class Choice(Gene):
    """One of an unordered set of options (cache operator, rsqrt variant, ...)."""

    options: tuple[Hashable, ...] = ()
    kind = "choice"

    def __post_init__(self) -> None:
        opts = tuple(self.options)
        object.__setattr__(self, "options", opts)
        if len(opts) < 1:
            raise GeneError(f"gene {self.name!r}: a choice needs at least one option")
        if len(set(opts)) != len(opts):
            raise GeneError(f"gene {self.name!r}: options repeat: {list(opts)}")

    def values(self) -> tuple[Any, ...]:
        return self.options

    def canonical(self, value: Any) -> Any:
        # the stored option, so that equal values (1, 1.0, True) give one genome key
        return self.options[self.options.index(value)]

    def neighbours(self, value: Any) -> tuple[Any, ...]:
        return tuple(o for o in self.options if o != value)

    def distance(self, a: Any, b: Any) -> float:
        return 0.0 if a == b else 1.0


@dataclass(frozen=True)
class Flag(Gene):
    """On or off (streaming stores, weight in registers, ...)."""

    kind = "bool"

    def values(self) -> tuple[Any, ...]:
        return (False, True)

    def contains(self, value: Any) -> bool:
        return isinstance(value, bool)

    def neighbours(self, value: Any) -> tuple[Any, ...]:
        return (not value,)

    def distance(self, a: Any, b: Any) -> float:
        return 0.0 if a == b else 1.0


@dataclass(frozen=True)
class IntRange(Gene):
    """An integer in [low, high] on a step grid (unroll depth, register cap, stages)."""

    low: int = 0
    high: int = 0
    step: int = 1
    kind = "int"
    structural = False

    def __post_init__(self) -> None:
        if self.step < 1 or self.high < self.low or (self.high - self.low) % self.step:
            raise GeneError(
                f"gene {self.name!r}: need low <= high with (high - low) a multiple of step; "
                f"got low={self.low} high={self.high} step={self.step}"
            )

    def values(self) -> tuple[Any, ...]:
        return tuple(range(self.low, self.high + 1, self.step))

    def contains(self, value: Any) -> bool:
        return (
            isinstance(value, int)
            and not isinstance(value, bool)
            and self.low <= value <= self.high
            and (value - self.low) % self.step == 0
        )

    def canonical(self, value: Any) -> Any:
        return int(value)

    def sample(self, rng: random.Random) -> Any:
        return self.low + self.step * rng.randrange((self.high - self.low) // self.step + 1)

    def neighbours(self, value: Any) -> tuple[Any, ...]:
        return tuple(v for v in (value - self.step, value + self.step) if self.low <= v <= self.high)

    def distance(self, a: Any, b: Any) -> float:
        return abs(a - b) / self.step

    def mutate(self, value: Any, rng: random.Random) -> Any:
        """A Gaussian step of about a sixth of the range, at least one grid step."""
        n = (self.high - self.low) // self.step
        if n == 0:
            return value
        for _ in range(8):
            delta = int(round(rng.gauss(0.0, max(1.0, n / 6.0))))
            cand = value + delta * self.step
            if delta and self.low <= cand <= self.high:
                return cand
        return rng.choice(self.neighbours(value))

    def spec(self) -> dict[str, Any]:
        return self._with_legacy({"name": self.name, "kind": self.kind, "group": self.group, "low": self.low,
                                  "high": self.high, "step": self.step, "doc": self.doc})


@dataclass(frozen=True)
class PowerOfTwo(Gene):
    """A power of two in [low, high] (threads per row, vector width, cluster size)."""

    low: int = 1
    high: int = 1
    kind = "pow2"
    structural = False

    def __post_init__(self) -> None:
        for bound in (self.low, self.high):
            if bound < 1 or bound & (bound - 1):
                raise GeneError(f"gene {self.name!r}: bounds must be powers of two, got {bound}")
        if self.high < self.low:
            raise GeneError(f"gene {self.name!r}: high {self.high} < low {self.low}")

    def values(self) -> tuple[Any, ...]:
        out, v = [], self.low
        while v <= self.high:
            out.append(v)
            v *= 2
        return tuple(out)

    def contains(self, value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value in self.values()

    def canonical(self, value: Any) -> Any:
        return int(value)

    def distance(self, a: Any, b: Any) -> float:
        return abs(math.log2(a) - math.log2(b))

    def spec(self) -> dict[str, Any]:
        return self._with_legacy({"name": self.name, "kind": self.kind, "group": self.group, "low": self.low,
                                  "high": self.high, "doc": self.doc})


GENE_KINDS: dict[str, type[Gene]] = {"choice": Choice, "bool": Flag, "int": IntRange, "pow2": PowerOfTwo}


def gene_from_spec(spec: dict[str, Any]) -> Gene:
    """Rebuild a gene from `Gene.spec()` (constraints are code and do not round-trip)."""
    kind = spec.get("kind")
    common = {"name": spec["name"], "group": spec.get("group", "default"), "doc": spec.get("doc", ""),
              "legacy": spec.get("legacy")}
    if kind == "choice":
        return Choice(options=tuple(spec["values"]), **common)
    if kind == "bool":
        return Flag(**common)
    if kind == "int":
        return IntRange(low=spec["low"], high=spec["high"], step=spec.get("step", 1), **common)
    if kind == "pow2":
        return PowerOfTwo(low=spec["low"], high=spec["high"], **common)
    raise GeneError(f"unknown gene kind {kind!r}; known: {sorted(GENE_KINDS)}")


def ordered_names(genes: Sequence[Gene]) -> tuple[str, ...]:
    names = tuple(g.name for g in genes)
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise GeneError(f"gene names repeat: {sorted(dup)}")
    return names

