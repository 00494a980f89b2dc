"""The immutable Genome and its stable key.

The key is what the store, the compile cache and deduplication agree on: the same choices in the
same gene space always give the same key, in any process, on any machine, in any Python version
(canonical JSON, sorted names, SHA-256), so a result measured once is never measured again.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterator, Mapping


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def genome_key(space_name: str, values: Mapping[str, Any]) -> str:
    payload = canonical_json({"space": space_name, "genes": dict(values)})
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


class Genome(Mapping[str, Any]):
    """A point of a gene space: read-only mapping gene name -> value, hashable by key.

    Build genomes through `GeneSpace.make` (validates) or `GeneSpace.repair` (fixes); the
    constructor trusts its input so that the space can create genomes cheaply.
    """

    __slots__ = ("_space", "_items", "_key")

    def __init__(self, space_name: str, items: tuple[tuple[str, Any], ...],
                 key_items: tuple[tuple[str, Any], ...] | None = None):
        self._space = space_name
        self._items = items
        # key_items: the genes the key is computed from (GeneSpace leaves out genes added later
        # that sit at their legacy value, so that old keys stay valid)
        self._key = genome_key(space_name, dict(items if key_items is None else key_items))

    @property
    def space(self) -> str:
        return self._space

    @property
    def key(self) -> str:
        return self._key

    def __getitem__(self, name: str) -> Any:
        for k, v in self._items:
            if k == name:
                return v
        raise KeyError(f"gene {name!r} is not in space {self._space!r}")

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Genome):
            return self._key == other._key
        return NotImplemented

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.__slots__ and not hasattr(self, name):
            object.__setattr__(self, name, value)
        else:
            raise AttributeError("Genome is immutable; use GeneSpace.repair(genome.changed(...))")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Genome is immutable; use GeneSpace.repair(genome.changed(...))")

    def __reduce__(self):
        # the key as it is, not recomputed from every gene: a space leaves genes added later at
        # their legacy value out of the key, so recomputing it (pickle, copy.deepcopy) gave a
        # different key and an unequal genome (found by session 16's review)
        return (_rebuilt, (self._space, self._items, self._key))

    def as_dict(self) -> dict[str, Any]:
        return dict(self._items)

    def changed(self, **values: Any) -> dict[str, Any]:
        """The genome's values with some replaced, as a plain dict for the space to repair."""
        out = dict(self._items)
        unknown = set(values) - set(out)
        if unknown:
            raise KeyError(f"genes {sorted(unknown)} are not in space {self._space!r}")
        out.update(values)
        return out

    def to_json(self) -> str:
        return canonical_json({"space": self._space, "genes": dict(self._items)})

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={v!r}" for k, v in self._items)
        return f"Genome<{self._space}:{self._key[:8]}>({body})"


def _rebuilt(space_name: str, items: tuple[tuple[str, Any], ...], key: str) -> Genome:
    """A Genome from its pickled parts, key included (Genome.__reduce__)."""
    g = Genome.__new__(Genome)
    object.__setattr__(g, "_space", space_name)
    object.__setattr__(g, "_items", items)
    object.__setattr__(g, "_key", key)
    return g

