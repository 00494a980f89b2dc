"""The engine (evo/) knows no kernel family: a second family needs no change there.

Two checks over every module of evo/ (subpackages included):
- imports: no module imports a family's code by name (genomes.<family>, kernels/<family> modules
  loaded by path) or reaches a family folder by a literal path; the engine gets a family through
  fitness.family.load_family and genomes.registry, by the name a config gives;
- literals: no family name (read from kernels/, so a new family is covered the day it lands), no
  dtype name and none of the dispatch key fields a family owns (RMSNorm's "N", "M", "dtype",
  n_min / n_max) appear in evo's code or strings; those come from KernelFamily.dispatch_key().
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from fitness.family import available_families

REPO = Path(__file__).resolve().parent.parent
EVO = REPO / "evo"
FAMILIES = available_families(REPO / "kernels")
#: dtype names in the spellings families use (case parameters, numpy/torch names)
DTYPE_WORDS = ("bf16", "fp16", "fp32", "fp8", "e4m3", "e5m2", "bfloat16", "float16", "float32")
#: dispatch key fields and JSON names of a family (RMSNorm's today): quoted, as dict keys or columns
KEY_LITERALS = ("N", "M", "dtype", "n_min", "n_max", "weight_dtype")


def evo_modules() -> list[Path]:
    return sorted(EVO.rglob("*.py"))


def family_words() -> list[str]:
    """Each family's name and the stem every family-derived name starts with (rmsnorm_bwd ->
    rmsnorm_bwd, rmsnorm), at least 4 letters, so a family's kernels, configs and files are caught."""
    words = set()
    for name in FAMILIES:
        words.add(name)
        stem = re.split(r"[_\-]", name)[0]
        if len(stem) >= 4:
            words.add(stem)
    return sorted(words)


def _imported(tree: ast.AST) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return out


def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    return [(n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def test_there_is_a_family_to_check_against():
    assert FAMILIES, "kernels/ holds no family (nothing for this test to guard)"
    assert evo_modules()


def import_violations(text: str, families: list[str]) -> list[str]:
    """Where a module's code reaches a family's code by name: imports of kernels.* or
    genomes.<family>, string paths into kernels/<name>, or import_sibling (kernels/ by path)."""
    tree = ast.parse(text)
    bad = [m for m in _imported(tree)
           if m.startswith("kernels") or m.endswith(".import_sibling")
           or any(m == f"genomes.{f}" or m.startswith(f"genomes.{f}.") for f in families)]
    bad += [f"line {ln}: {s!r}" for ln, s in _strings(tree)
            if re.search(r"kernels[/\\.](?!<)\w", s) or "import_sibling" in s]
    bad += [f"line {n.lineno}: import_sibling" for n in ast.walk(tree)
            if isinstance(n, ast.Name) and n.id == "import_sibling"]
    return bad


def literal_violations(text: str, words: list[str]) -> list[str]:
    """Family names (any case, at a word start), dtype names, a family's key fields as string
    literals, and attributes named after them."""
    hits = []
    for ln, line in enumerate(text.splitlines(), 1):
        for w in words:
            if re.search(rf"(?<![A-Za-z0-9]){re.escape(w)}", line, re.IGNORECASE):
                hits.append(f"line {ln}: family name {w!r}")
        for w in DTYPE_WORDS:
            if re.search(rf"(?<![A-Za-z0-9_]){w}(?![A-Za-z0-9_])", line):
                hits.append(f"line {ln}: dtype {w!r}")
    tree = ast.parse(text)
    for ln, s in _strings(tree):
        if s in KEY_LITERALS:
            hits.append(f"line {ln}: key field literal {s!r}")
    for node in ast.walk(tree):                  # attribute names of a family's key: e.n_min, e.dtype_pairs()
        if isinstance(node, ast.Attribute) and node.attr in ("n_min", "n_max", "weight_dtype", "dtype_pairs"):
            hits.append(f"line {node.lineno}: attribute .{node.attr}")
    return hits


@pytest.mark.parametrize("path", evo_modules(), ids=lambda p: str(p.relative_to(REPO)))
def test_evo_imports_no_family_code(path):
    bad = import_violations(path.read_text(), FAMILIES)
    assert not bad, f"{path.relative_to(REPO)} reaches a family's code by name: {bad}"


@pytest.mark.parametrize("path", evo_modules(), ids=lambda p: str(p.relative_to(REPO)))
def test_evo_names_no_family_dtype_or_key_field(path):
    hits = literal_violations(path.read_text(), family_words())
    assert not hits, f"{path.relative_to(REPO)} names a family, a dtype or a family's key: " + "; ".join(hits)


@pytest.mark.parametrize("code", [
    "import genomes.{f}", "from genomes.{f} import SPACE", "from genomes import {f}",
    "import kernels.{f}.family", "x = load('kernels/{f}/family.py')", "from fitness.family import import_sibling",
])
def test_the_import_check_catches_a_family_import(code):
    f = FAMILIES[0]
    assert import_violations(code.format(f=f), FAMILIES), code
    assert not import_violations("from fitness.family import load_family\nfam = load_family(name)", FAMILIES)


@pytest.mark.parametrize("code", [
    'x = "{f}"', "# the {F} family", 'c = params["N"]', "d = row['dtype']", 'e = {{"n_min": 1}}', "t = 'fp32'",
    "w = e.n_max", "p = fam.dtype_pairs()", "b = torch.bfloat16",
])
def test_the_literal_check_catches_a_family_key_or_dtype(code):
    f = FAMILIES[0]
    assert literal_violations(code.format(f=f, F=f.upper()), family_words()), code
    assert not literal_violations('n = len(rows)  # widths, a numpy dtype, the Nth case\nkey = keys.point(p)',
                                  family_words())
