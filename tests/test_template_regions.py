"""fitness.template_regions: code of genes added later is invisible to legacy genomes."""
from __future__ import annotations

import pytest

from fitness.template_regions import gene_regions, select_regions

TEXT = """a
//@ a template comment, never rendered
//@wb legacy
old
//@wb new
new1
new2
//@wb end
b
//@wb new
only_new
//@wb end"""


def test_legacy_genomes_render_the_text_without_the_gene():
    assert select_regions(TEXT, {"wb": True}) == "a\nold\nb"
    assert select_regions(TEXT, {"wb": False}) == "a\nnew1\nnew2\nb\nonly_new"
    assert gene_regions(TEXT) == {"wb"}


def test_text_without_regions_is_unchanged():
    text = "x\n// plain comment\n#if A\ny\n#endif\n"
    assert select_regions(text, {}) == text


@pytest.mark.parametrize("text, match", [
    ("//@wb legacy\nx\n", "never closed"),
    ("//@wb end\n", "closes no open"),
    ("//@wb legacy\n//@other new\n//@wb end\n//@other end\n", "innermost open region is other's"),
    ("//@wb legacy\n//@other new\n//@wb new\n", "inside another wb region"),
    ("//@wb sometimes\n", "bad region marker"),
    ("//@zz legacy\n//@zz end\n", "'zz'"),
])
def test_malformed_regions_name_the_line_and_the_fix(text, match):
    with pytest.raises(ValueError, match=match):
        select_regions(text, {"wb": True, "other": False}, where="t.cu")


def test_regions_of_different_genes_nest():
    text = "a\n//@wb new\nb\n//@wp legacy\nc\n//@wp new\nd\n//@wp end\ne\n//@wb end\nf"
    assert select_regions(text, {"wb": True, "wp": True}) == "a\nf"
    assert select_regions(text, {"wb": False, "wp": True}) == "a\nb\nc\ne\nf"
    assert select_regions(text, {"wb": False, "wp": False}) == "a\nb\nd\ne\nf"
    assert select_regions(text, {"wb": True, "wp": False}) == "a\nf"


def test_at_legacy_reads_every_gene_with_a_legacy_value():
    """at_legacy: genes without a legacy value are not keys; a gene the genome lacks counts as at legacy."""
    from fitness.template_regions import at_legacy
    from genomes.genes import Choice
    from genomes.space import GeneSpace

    space = GeneSpace(name="t", genes=(Choice("a", options=(1, 2)), Choice("b", options=("x", "y"), legacy="x"),
                                       Choice("c", options=(0, 1), legacy=0)))
    assert at_legacy(space, {"a": 2, "b": "y", "c": 0}) == {"b": False, "c": True}
    assert at_legacy(space, {"a": 1}) == {"b": True, "c": True}
