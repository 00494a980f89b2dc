"""GeneSpace: the set of legal genomes of one kernel family.

Search strategies and operators never check constraints themselves; they ask the space to
sample, validate, repair or list neighbours, so a new family only has to declare genes and
constraints. Repair moves an invalid genome to the *nearest* valid one (fewest, smallest
changes, preferring genes named by the violated constraints), because a repaired child should
resemble its parents: that is what makes variation operators inheritance rather than resampling.
"""

from __future__ import annotations

import heapq
import itertools
import json
import random
import zlib
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Sequence

from genomes.constraints import Constraint
from genomes.genes import Gene, GeneError, gene_from_spec, ordered_names
from genomes.genome import Genome


#: a region is a small corner of the space: this many times `tries` rejection draws, then repairs
REGION_DRAWS = 20
#: draws after the first 256 when none of those was valid (GeneSpace.repair's last resort)
FALLBACK_DRAWS = 8192
REGION_REPAIRS = 32


class InvalidGenome(GeneError):
    """Values that break a gene's range or a constraint; the message lists every problem."""


@dataclass(frozen=True)
class GeneSpace:
    name: str
    genes: tuple[Gene, ...]
    constraints: tuple[Constraint, ...] = ()
    doc: str = ""
    repair_budget: int = 20000
    #: where the nearest-valid search gives up, search again from the genome with every gene that has a legacy
    #: value and sits in a broken constraint back at that value, before the random fallback; and repair a
    #: uniform draw (sample) from there at once. Off by default: a space's draws and repairs must stay draw for
    #: draw what its recorded searches did (rmsnorm_bwd v14 turns it on: its refill gene doubled the frontier of
    #: the tangled v13 space, some uniform draws found no repair, and a draw took 1.1 s against v13's 0.36)
    legacy_retry: bool = False
    _index: dict[str, int] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "genes", tuple(self.genes))
        object.__setattr__(self, "constraints", tuple(self.constraints))
        names = ordered_names(self.genes)
        object.__setattr__(self, "_index", {n: i for i, n in enumerate(names)})
        for c in self.constraints:
            missing = [g for g in c.genes if g not in self._index]
            if missing:
                raise GeneError(f"constraint {c.name!r} names unknown genes {missing}")

    # -- structure ---------------------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        return tuple(g.name for g in self.genes)

    def gene(self, name: str) -> Gene:
        try:
            return self.genes[self._index[name]]
        except KeyError:
            raise GeneError(f"space {self.name!r} has no gene {name!r}; genes: {list(self.names)}") from None

    def groups(self) -> dict[str, tuple[str, ...]]:
        out: dict[str, list[str]] = {}
        for g in self.genes:
            out.setdefault(g.group, []).append(g.name)
        return {k: tuple(v) for k, v in out.items()}

    def size(self) -> int:
        """Number of genomes before constraints (an upper bound on the valid ones)."""
        n = 1
        for g in self.genes:
            n *= len(g.values())
        return n

    # -- validity ----------------------------------------------------------------------------
    def complete(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """`values` with every missing gene that has a legacy value set to it (genomes recorded
        before the gene was added)."""
        out = dict(values)
        for g in self.genes:
            if g.name not in out and g.legacy is not None:
                out[g.name] = g.legacy
        return out

    def violations(self, values: Mapping[str, Any]) -> list[str]:
        return list(self._problems(values))

    def is_valid(self, values: Mapping[str, Any]) -> bool:
        """`not violations(values)`, stopping at the first problem: drawing a genome of a tangled
        space tests hundreds of rejected draws for each one kept."""
        return next(self._problems(values), None) is None

    def _problems(self, values: Mapping[str, Any]) -> Iterator[str]:
        """What is wrong with `values`, lazily: unknown, missing or illegal genes; only when the
        genes are sound, the constraints that do not hold."""
        values = self.complete(values)
        sound = True
        extra = set(values) - set(self.names)
        if extra:
            sound = False
            yield f"unknown genes {sorted(extra)} (space {self.name!r} has {list(self.names)})"
        for g in self.genes:
            if g.name not in values:
                sound = False
                yield f"gene {g.name!r} is missing"
            elif not g.contains(values[g.name]):
                sound = False
                yield f"gene {g.name!r}: {values[g.name]!r} is not one of {g.describe_values()}"
        if sound:
            yield from (f"constraint {c.describe()}" for c in self.constraints if not c.holds(values))

    def make(self, values: Mapping[str, Any]) -> Genome:
        """A Genome from exactly valid values; InvalidGenome lists every problem otherwise."""
        problems = self.violations(values)
        if problems:
            raise InvalidGenome(f"invalid genome for space {self.name!r}: " + "; ".join(problems))
        return self._genome(self.complete(values))

    def _genome(self, values: Mapping[str, Any]) -> Genome:
        items = tuple((g.name, g.canonical(values[g.name])) for g in self.genes)
        # genes at their legacy value are left out of the key: the genome keeps its old key
        keyed = tuple((n, v) for (n, v), g in zip(items, self.genes) if g.legacy is None or v != g.legacy)
        return Genome(self.name, items, key_items=keyed)

    # -- sampling ----------------------------------------------------------------------------
    def sample(self, rng: random.Random, tries: int = 1000,
               within: Mapping[str, Sequence[Any]] | None = None) -> Genome:
        """A uniformly drawn valid genome (rejection sampling, repair as a last resort).

        `within` (gene -> allowed values, see `region`) draws those genes only from the given
        values: a search can start part of its population in a region the designer suspects
        matters (e.g. shared-memory staging for long rows) that uniform sampling rarely reaches
        because most of the space is elsewhere. A tangled region (RMSNorm's shared-memory
        stagings: 0.3 % of draws valid) gets REGION_DRAWS times more draws, then repaired draws
        that stay inside it; a region the constraints exclude is an error."""
        region = self.region(within) if within else {}

        def draw() -> dict[str, Any]:
            return {g.name: (rng.choice(region[g.name]) if g.name in region else g.sample(rng)) for g in self.genes}

        for _ in range(tries * (REGION_DRAWS if region else 1)):
            values = draw()
            if self.is_valid(values):
                return self._genome(values)
        for _ in range(REGION_REPAIRS if region else 0):
            try:
                fixed = self.repair(draw(), rng)
            except InvalidGenome:
                continue
            if all(fixed[n] in allowed for n, allowed in region.items()):
                return fixed
        if region:
            raise GeneError(f"no valid genome of space {self.name!r} found within {region} in "
                            f"{tries * REGION_DRAWS} draws and {REGION_REPAIRS} repairs; widen the region "
                            "(the constraints may exclude it entirely)")
        if self.legacy_retry:           # a draw, not a chosen value: its later genes yield first where they break
            values = self._at_legacy_where_broken(values)
        return self.repair(values, rng)

    def sample_distinct(self, n: int, seed: int = 0, first: Sequence[Genome] = ()) -> list[Genome]:
        """`first` (e.g. a family's DEFAULT and its named extremes), then `n` seeded random valid genomes,
        no genome twice: the fixed sample a family's tests and probes judge."""
        out = list(first)
        rng = random.Random(seed)
        seen = {g.key for g in out}
        tries = 0
        while len(out) < len(first) + n and tries < 100 * (n + 1):
            tries += 1
            g = self.sample(rng)
            if g.key not in seen:
                seen.add(g.key)
                out.append(g)
        return out

    def region(self, within: Mapping[str, Sequence[Any]]) -> dict[str, tuple[Any, ...]]:
        """Canonical allowed values per gene, checked against the genes (GeneError names the gene
        and its legal values); a scalar stands for a one-value list."""
        out: dict[str, tuple[Any, ...]] = {}
        for name, allowed in within.items():
            gene = self.gene(name)
            vals = allowed if isinstance(allowed, (list, tuple)) else [allowed]
            if not vals:
                raise GeneError(f"gene {name!r}: an empty list of values; give some of {gene.describe_values()}")
            out[name] = tuple(dict.fromkeys(gene.validate(v) for v in vals))
        return out

    def enumerate(self, limit: int = 1_000_000) -> Iterator[Genome]:
        """Every valid genome, in a fixed order; refuses spaces larger than `limit`."""
        if self.size() > limit:
            raise GeneError(f"space {self.name!r} has {self.size()} points, more than limit={limit}")
        for combo in itertools.product(*(g.values() for g in self.genes)):
            values = dict(zip(self.names, combo))
            if self.is_valid(values):
                yield self._genome(values)

    # -- local structure ---------------------------------------------------------------------
    def neighbours(self, genome: Mapping[str, Any]) -> list[Genome]:
        """Valid genomes that differ from `genome` in one gene by one step."""
        out = []
        for g in self.genes:
            for v in g.neighbours(genome[g.name]):
                values = dict(genome)
                values[g.name] = v
                if self.is_valid(values):
                    out.append(self._genome(values))
        return out

    def distance(self, a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
        return sum(g.distance(a[g.name], b[g.name]) for g in self.genes)

    # -- repair ------------------------------------------------------------------------------
    def snap(self, values: Mapping[str, Any], rng: random.Random) -> dict[str, Any]:
        """Move every gene value into its legal set (nearest legal value), ignoring constraints."""
        out = {}
        values = self.complete(values)
        for g in self.genes:
            v = values.get(g.name, None)
            if g.contains(v):
                out[g.name] = g.canonical(v)
                continue
            legal = g.values()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in legal
            ):
                out[g.name] = min(legal, key=lambda x: (abs(x - v), x))
            else:
                out[g.name] = g.sample(rng)
        return out

    def repair(self, values: Mapping[str, Any], rng: random.Random) -> Genome:
        """The valid genome nearest to `values` (ties broken by `rng`, so repair is seeded)."""
        start = self.snap(values, rng)
        if self.is_valid(start):
            return self._genome(start)
        found = self._nearest_valid(start, rng)
        if found is None and self.legacy_retry:
            found = self._nearest_valid(self._at_legacy_where_broken(start), rng)
        if found is not None:
            return self._genome(found)
        # Fall back: the closest of many valid samples. Rare; only for very tangled constraints.
        # 256 draws first (what every recorded search used: their replays stay draw for draw),
        # then, only if none of them was valid, up to FALLBACK_DRAWS more (RMSNorm v3/v4: 2-3 %
        # of uniform draws are valid, so 256 found none in ~7-10 % of random repairs).
        best, best_d = None, float("inf")
        for i in range(256 + FALLBACK_DRAWS):
            if i >= 256 and best is not None:
                break
            cand = {g.name: g.sample(rng) for g in self.genes}
            if self.is_valid(cand):
                d = self.distance(start, cand)
                if d < best_d:
                    best, best_d = cand, d
        if best is None:
            raise InvalidGenome(f"space {self.name!r}: could not find any valid genome near {start}")
        return self._genome(best)

    def _at_legacy_where_broken(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """`values` with each gene that has a legacy value and appears in a broken constraint at that value."""
        broken = {g for c in self.constraints if not c.holds(values) for g in c.genes}
        return {n: (self.gene(n).legacy if n in broken and self.gene(n).legacy is not None else v)
                for n, v in values.items()}

    def _nearest_valid(self, start: dict[str, Any], rng: random.Random) -> dict[str, Any] | None:
        """Best-first search from `start` over one-gene moves of the genes in broken constraints,
        nearest first (ties by a seeded hash of the state: crc32 of repr((salt, state))).

        The hash is computed incrementally (the repr of a state differs from its parent's in one
        element, and crc32 continues over a prefix), which gives the same keys, so the same
        repairs, as hashing each state's whole repr: every recorded search replays draw for draw
        (tests/test_genomes.py checks it against the first version, kept there). Repairs were most of the time of
        drawing a genome of a tangled space (rmsnorm_bwd v13: ~0.6 s a genome before)."""
        order = list(self.names)
        genes = [self.gene(n) for n in order]
        options = [g.values() for g in genes]
        tiebreak = itertools.count()
        salt = rng.random()
        head = "(" + repr(salt) + ", ("
        start_t = tuple(start[n] for n in order)
        heap = [(0.0, 0.0, next(tiebreak), start_t)]
        seen = {start_t}
        expansions = 0
        last = len(order) - 1
        push, crc32 = heapq.heappush, zlib.crc32
        while heap and expansions < self.repair_budget:
            d, _, _, state = heapq.heappop(heap)
            values = dict(zip(order, state))
            broken = [c for c in self.constraints if not c.holds(values)]
            if not broken:
                return values
            expansions += 1
            touch = {g for c in broken for g in c.genes}
            parts = [repr(v) for v in state]
            crc_pre = crc32(head.encode())          # crc32 of the repr up to element i
            suffixes = [""] * (last + 1)            # the repr after element i
            tail = "))"
            for i in range(last, -1, -1):
                suffixes[i] = tail
                tail = ", " + parts[i] + tail
            for i, name in enumerate(order):
                if i:
                    crc_pre = crc32((parts[i - 1] + ", ").encode(), crc_pre)
                if name not in touch:
                    continue
                gene, cur = genes[i], state[i]
                pre, post, suffix = state[:i], state[i + 1:], suffixes[i]
                for v in options[i]:
                    if v == cur:
                        continue
                    nxt = pre + (v,) + post
                    if nxt in seen:
                        continue
                    seen.add(nxt)
                    nd = d + gene.distance(cur, v)
                    # random secondary key: equal-distance repairs are chosen by the seeded rng
                    push(heap, (nd, crc32((repr(v) + suffix).encode(), crc_pre), next(tiebreak), nxt))
        return None

    # -- (de)serialisation -------------------------------------------------------------------
    def to_json(self, genome: Genome) -> str:
        return genome.to_json()

    def from_json(self, raw: str | Mapping[str, Any]) -> Genome:
        data = json.loads(raw) if isinstance(raw, str) else dict(raw)
        if "genes" in data:
            if data.get("space", self.name) != self.name:
                raise InvalidGenome(f"genome belongs to space {data.get('space')!r}, not {self.name!r}")
            data = data["genes"]
        return self.make({k: self.gene(k).from_json(v) if k in self._index else v for k, v in data.items()})

    def spec(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "doc": self.doc,
            "genes": [g.spec() for g in self.genes],
            "constraints": [{"name": c.name, "genes": list(c.genes), "why": c.why} for c in self.constraints],
        }


def genes_from_specs(specs: Iterable[Mapping[str, Any]]) -> tuple[Gene, ...]:
    return tuple(gene_from_spec(dict(s)) for s in specs)


def common_values(genomes: Sequence[Mapping[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    """Values shared by every genome for the given genes (used to freeze structure)."""
    if not genomes:
        return {}
    first = genomes[0]
    return {n: first[n] for n in names if all(g[n] == first[n] for g in genomes)}
