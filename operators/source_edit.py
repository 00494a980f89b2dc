"""Source edits: a rewrite of one editable region of a parent's rendered source, as a raw candidate.

A family marks what a proposal may rewrite in kernels/<family>/raw_launch.py (optional):

    REGIONS = {"row_reduce": {"function": "row_reduce", "doc": "the sum of squares across the row"}, ...}

A region is the whole definition of the named device function in the rendered source (from the
line that declares it, template line included, to its closing brace). `replace_region` swaps it
for the proposal's text and the result becomes a fitness.raw.RawSource whose launch is the
parent's own (`ParentLaunch`: the family's launch(genome, case) of the parent genome, so grid,
block, shared memory, cluster and arguments are exactly what the template's kernel got). The
candidate is then compiled and judged like any other: nothing of the proposal runs on the host.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from fitness.family import Case, Launch, import_sibling, KERNELS_DIR


class RegionError(ValueError):
    """The region is unknown or cannot be found in the rendered source."""


def family_regions(family: str) -> dict[str, dict[str, str]]:
    """The editable regions kernels/<family>/raw_launch.py declares ({} when it declares none)."""
    path = KERNELS_DIR / family / "raw_launch.py"
    if not path.is_file():
        return {}
    mod = import_sibling(str(KERNELS_DIR / family / "family.py"), "raw_launch")
    return {k: dict(v) for k, v in getattr(mod, "REGIONS", {}).items()}


def family_kernel(family: str) -> dict[str, Any]:
    """What kernels/<family>/raw_launch.py says a whole kernel written from scratch must look like:
    {"convention": text, "example_launch": a fitness.raw.LaunchSpec dict} ({} when it says nothing:
    then no whole kernel is asked for, since a proposal could not know how its entry is called)."""
    path = KERNELS_DIR / family / "raw_launch.py"
    if not path.is_file():
        return {}
    mod = import_sibling(str(KERNELS_DIR / family / "family.py"), "raw_launch")
    spec = dict(getattr(mod, "KERNEL", {}) or {})
    return spec if spec.get("convention") and spec.get("example_launch") else {}


def _span(source: str, function: str) -> tuple[int, int]:
    """[start, end) of the definition of device function `function` in `source`."""
    pat = re.compile(r"^[^\n;{}]*\b" + re.escape(function) + r"\s*\(", re.MULTILINE)
    for m in pat.finditer(source):
        start = m.start()
        # a template line just above belongs to the definition
        prev = source.rfind("\n", 0, max(0, start - 1))
        above = source[prev + 1:start].strip()
        if above.startswith("template"):
            start = prev + 1
        brace = source.find("{", m.end())
        semi = source.find(";", m.end())
        if brace < 0 or (0 <= semi < brace):
            continue          # a declaration or a call, not the definition
        depth = 0
        for i in range(brace, len(source)):
            if source[i] == "{":
                depth += 1
            elif source[i] == "}":
                depth -= 1
                if depth == 0:
                    return start, i + 1
        break
    raise RegionError(f"no definition of {function!r} in the rendered source")


def region_text(source: str, regions: Mapping[str, Mapping[str, str]], name: str) -> str:
    if name not in regions:
        raise RegionError(f"region {name!r} is not editable (editable: {sorted(regions)})")
    a, b = _span(source, regions[name]["function"])
    return source[a:b]


def replace_region(source: str, regions: Mapping[str, Mapping[str, str]], name: str, text: str) -> str:
    if name not in regions:
        raise RegionError(f"region {name!r} is not editable (editable: {sorted(regions)})")
    a, b = _span(source, regions[name]["function"])
    return source[:a] + text.strip("\n") + source[b:]


@dataclass(frozen=True)
class ParentLaunch:
    """A raw candidate's launch borrowed from the genome it was derived from: resolve(case) is the
    family's launch(parent, case). Duck-types fitness.raw.LaunchSpec (kernel, resolve, to_dict)."""

    family: str
    space_version: str                       # the parent's gene-space version ("" : the latest)
    genes: tuple[tuple[str, Any], ...]
    kernel: str                              # an entry the source must define (the problems() check)

    def _genome(self):
        from genomes import load_space  # noqa: PLC0415

        return load_space(self.family, self.space_version).make(dict(self.genes))

    def resolve(self, case: Case) -> Launch | None:
        from fitness.family import load_family  # noqa: PLC0415

        return load_family(self.family).launch(self._genome(), case)

    def to_dict(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "parent_launch": {"family": self.family, "space_version": self.space_version,
                                                          "genome": dict(self.genes)}}

    @property
    def when(self) -> str:
        return ""


def parent_launch(family: Any, family_name: str, genome: Any, case: Case | None,
                  space_version: str = "") -> ParentLaunch:
    kernel = ""
    if case is not None:
        try:
            launch = family.launch(genome, case)
            kernel = launch.kernel if launch is not None else ""
        except Exception:  # noqa: BLE001 - a case the parent cannot run names no entry
            kernel = ""
    return ParentLaunch(family=family_name, space_version=space_version, genes=tuple(genome.as_dict().items()), kernel=kernel)


@dataclass(frozen=True)
class SourceAllele:
    """A region rewrite that beat its parent on the judge, kept so it can be grafted onto other
    genomes (the run's way to recombine a winning source edit with the GA's genes)."""

    region: str
    code: str
    key: str                                 # the raw candidate it came from
    gain: float                              # its fitness over its parent's

    def graft(self, family: Any, family_name: str, genome: Any, regions: Mapping[str, Mapping[str, str]],
              case: Case | None, space_version: str = "", declare: Any = None) -> Any:
        """A RawSource: `genome`'s rendered source with this region replaced, `genome`'s launch."""
        from fitness.raw import RawSource  # noqa: PLC0415

        source = replace_region(family.render(genome), regions, self.region, self.code)
        launch = parent_launch(family, family_name, genome, case, space_version)
        if declare is not None:
            source = declare(source, launch.kernel)
        return RawSource(family=family_name, source=source, launch=launch, flags=tuple(family.compile_flags(genome)),
                         origin=f"graft:{self.key}", parent=genome.key,
                         note=f"region {self.region} of {self.key} ({self.gain:.3f}x its parent) grafted")


__all__ = ["ParentLaunch", "RegionError", "SourceAllele", "family_regions", "parent_launch", "region_text",
           "replace_region"]
