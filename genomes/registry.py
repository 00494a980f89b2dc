"""Find a kernel family's gene space by name: module `genomes.<family>` exporting `SPACE`.

Families are found by module name rather than a registration call so that adding a family
means adding one file here (and one folder in kernels/), with nothing else to edit.
"""

from __future__ import annotations

import importlib
import pkgutil

import genomes
from genomes.space import GeneSpace

_NOT_FAMILIES = {"genes", "genome", "space", "constraints", "registry"}


def available_families() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(genomes.__path__) if m.name not in _NOT_FAMILIES)


def load_space(family: str, version: str = "") -> GeneSpace:
    """The gene space of `family`: SPACE (the latest), or SPACES[version] of a module that keeps
    earlier versions (a recorded search replays under the version it ran with)."""
    if family in _NOT_FAMILIES or not family.isidentifier():
        raise LookupError(f"no gene space for kernel family {family!r}; available: {available_families()}")
    try:
        module = importlib.import_module(f"genomes.{family}")
    except ModuleNotFoundError as exc:
        if exc.name == f"genomes.{family}":
            raise LookupError(
                f"no gene space for kernel family {family!r}; available: {available_families()} "
                f"(a new family needs genomes/{family}.py defining SPACE)"
            ) from None
        raise
    if version:
        versions = getattr(module, "SPACES", {}) or {}
        if version not in versions:
            raise LookupError(f"gene space {family!r} has no version {version!r}; versions: {sorted(versions)} "
                              f"(genomes/{family}.py SPACES)")
        space = versions[version]
    else:
        space = getattr(module, "SPACE", None)
    if not isinstance(space, GeneSpace):
        raise LookupError(f"genomes/{family}.py must define SPACE = GeneSpace(...)")
    return space


def space_versions(family: str) -> list[str]:
    """The named versions of a family's gene space ([] when it keeps only SPACE)."""
    try:
        module = importlib.import_module(f"genomes.{family}")
    except ModuleNotFoundError:
        return []
    return sorted(getattr(module, "SPACES", {}) or {})
