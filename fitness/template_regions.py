"""Template regions that exist only away from a gene's legacy value.

A kernel factory remembers: a genome judged in an earlier session is evidence (carried seeds, the
exported package, the compile cache) only while its source renders byte for byte as it was judged.
A gene added to a space later (its `legacy` value is what genomes recorded before it mean) must
therefore not touch the text legacy genomes render. Templates mark such code with line markers:

    //@weight_batch legacy      text rendered when the genome holds the gene's legacy value
    //@weight_batch new         text rendered otherwise
    //@weight_batch end

Either part may be empty or absent. Regions of different genes nest (code of a gene added in a
later version inside code of an earlier one): a line is rendered when every region around it
keeps it. Marker lines are never rendered, nor are template comments written as `//@ ...` (a
space after the marker), which is where a template documents its regions without changing what
legacy genomes compile.
"""
from __future__ import annotations

from collections.abc import Mapping

MARK = "//@"
_PARTS = ("legacy", "new", "end")


def gene_regions(text: str) -> set[str]:
    """The genes a template keys regions on (so a family can check they all have legacy values)."""
    return {name for _, name, _ in _markers(text)}


def at_legacy(space, genome: Mapping) -> dict[str, bool]:
    """Whether `genome` holds each later-added gene's legacy value, for every gene of `space` that
    has one (a gene the genome lacks, e.g. one added after the genome's space version, is at its
    legacy value by definition): what select_regions keys on."""
    return {gene.name: genome.get(gene.name, gene.legacy) == gene.legacy
            for gene in space.genes if gene.legacy is not None}


def select_regions(text: str, at_legacy: Mapping[str, bool], *, where: str = "template") -> str:
    """`text` with each region's part for the genome kept and the markers removed.

    at_legacy[gene] says whether the genome holds that gene's legacy value; a region keyed on a
    gene missing from it is an error (the template and the gene space disagree)."""
    out: list[str] = []
    stack: list[tuple[str, str, int]] = []        # (gene, part, line opened) of the open regions
    markers = {n: (name, p) for n, name, p in _markers(text, where)}
    for n, line in enumerate(text.split("\n"), start=1):
        if n in markers:
            name, p = markers[n]
            if p == "end":
                if not stack or stack[-1][0] != name:
                    inner = f" (the innermost open region is {stack[-1][0]}'s)" if stack else ""
                    raise ValueError(f"{where}:{n}: '{MARK}{name} end' closes no open {name} region{inner}")
                stack.pop()
                continue
            if name not in at_legacy:
                raise ValueError(f"{where}:{n}: region keyed on {name!r}, which the gene space does not "
                                 f"have as a gene with a legacy value (genes: {sorted(at_legacy)})")
            if stack and stack[-1][0] == name:          # legacy -> new (or new -> legacy) switch
                stack[-1] = (name, p, stack[-1][2])
            elif any(g == name for g, _, _ in stack):
                raise ValueError(f"{where}:{n}: a {name} region inside another {name} region")
            else:
                stack.append((name, p, n))
            continue
        if line.startswith(MARK + " ") or line == MARK:
            continue
        if all((part == "legacy") == bool(at_legacy[gene]) for gene, part, _ in stack):
            out.append(line)
    if stack:
        gene, _, opened = stack[-1]
        raise ValueError(f"{where}:{opened}: the {gene} region is never closed (add '{MARK}{gene} end')")
    return "\n".join(out)


def _markers(text: str, where: str = "template") -> list[tuple[int, str, str]]:
    found = []
    for n, line in enumerate(text.split("\n"), start=1):
        if not line.startswith(MARK) or line.startswith(MARK + " ") or line == MARK:
            continue
        words = line[len(MARK):].split()
        if len(words) != 2 or words[1] not in _PARTS:
            raise ValueError(f"{where}:{n}: bad region marker {line!r}: expected "
                             f"'{MARK}<gene> legacy|new|end' (or '{MARK} comment')")
        found.append((n, words[0], words[1]))
    return found
