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
    ("//@wb legacy\n//@other new\n//@other end\n", "do not nest"),
    ("//@wb sometimes\n", "bad region marker"),
    ("//@zz legacy\n//@zz end\n", "'zz'"),
])
def test_malformed_regions_name_the_line_and_the_fix(text, match):
    with pytest.raises(ValueError, match=match):
        select_regions(text, {"wb": True, "other": False}, where="t.cu")
