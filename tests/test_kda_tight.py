"""KDA v8, prep = tight (kernels/kda/template.cu KDA_PREP_LEAN 3, README "v8: the tight prep"): the
compact kda_prep with the fp32 G written over the raw g (kr back in its own tile) and dt_bias read
into registers, so six CTAs fit an SM where compact fits five. Why it exists: session 15's table put
the persistent prep at 3 and 2 CTAs per SM at 1.6-2.2x compact's time at 5, i.e. a prep CTA's life is
latency that more CTAs beside it hide. What is checked here without a GPU: the space (keys kept,
where tight is allowed), the figures that make it 6 per SM (bytes, registers by ptxas, the launch
bound), its SASS (compact's arithmetic, one more barrier, no global load after the wait) and that no
other genome's kernel changed (SASS byte for byte against the template before v8). Its outputs
equal compact's bit for bit on the device (tests/test_kda_gpu.py, `pytest -m gpu`)."""

from __future__ import annotations

import collections
import re

import pytest

from fitness.family import KERNELS_DIR, import_sibling, load_family
from genomes.kda import NAMED, SPACE, SPACES

FAMILY = load_family("kda")
fam = import_sibling(str(KERNELS_DIR / "kda" / "family.py"), "family")

#: the last commit whose template.cu had no tight prep (v7's, session 15's device results)
PRE_V8 = "709b0ad"
TIGHT = ("split-bf16-tight", "split-bf16-v2-tight", "split-bf16-v2-tight-longest")


def test_v8_keeps_every_v7_genome_and_adds_tight_where_compact_is():
    v7, v8 = SPACES["v7"], SPACES["v8"]
    assert v8.names == v7.names and SPACE.names[:len(v8.names)] == v8.names
    for name, g in NAMED.items():
        if g["prep"] != "tight" and g["rec_min_blocks"] == 1:
            assert g.key == v7.make({k: g[k] for k in v7.names}).key, name
    tight = [g for g in v8.enumerate() if g["prep"] == "tight"]
    compact = [g for g in v7.enumerate() if g["prep"] == "compact" and g["prep_overlap"] == "none"]
    assert sorted(v8.make(dict(g, prep="compact")).key for g in tight) == sorted(g.key for g in compact)
    base = {k: NAMED["split-bf16-v2-tight"][k] for k in v8.names}
    assert v8.is_valid(base)
    assert not v8.is_valid(dict(base, split_intra=True)) and not v8.is_valid(dict(base, split_w=True))
    assert not v8.is_valid(dict(base, kernels="fused", rec_v_split=1))
    assert not v8.is_valid(dict(base, prep_overlap="pdl"))           # the overlap's budget is compact's
    for name in TIGHT:
        assert "#define KDA_PREP_LEAN 3\n" in FAMILY.render(NAMED[name])


@pytest.mark.parametrize("name", TIGHT)
def test_tight_fits_six_ctas_an_sm_and_launches_as_compact(name):
    g = NAMED[name]
    twin = SPACE.make(dict(g, prep="compact"))
    # compact less G (16 x 128 fp32) and dt_bias (128 fp32), plus kr's own padded tile (16 x 136 bf16)
    assert fam.prep_smem_bytes(g) == fam.prep_smem_bytes(twin) - 16 * 128 * 4 - 128 * 4 + 16 * 136 * 2 == 37648
    assert fam.prep_min_blocks(g) == 6 and 6 * (37648 + fam.SM_CTA_RESERVED_BYTES) <= fam.SM_SHARED_BYTES
    assert 6 * 256 * fam.PREP_REGISTERS[3] <= 65536 < 6 * 256 * fam.PREP_REGISTERS[2]
    assert "#define KDA_PREP_MIN_BLOCKS 6\n" in FAMILY.render(g)
    for case in FAMILY.check_cases()[:4] + FAMILY.benchmark_cases("all"):
        (prep, rec), (prep1, rec1) = FAMILY.launch(g, case), FAMILY.launch(twin, case)
        assert (prep.kernel, prep.grid, prep.block, prep.args) == (prep1.kernel, prep1.grid, prep1.block, prep1.args)
        assert rec == rec1 and prep.shared_bytes == 37648


def _kda_prep(tmp_path, genome):
    """kda_prep's compile result, its SASS opcode counts and lines (tests/test_kda_template.py's reader)."""
    from tests.test_kda_template import _prep_sass  # noqa: PLC0415

    res, lines = _prep_sass(genome, tmp_path)
    return res, collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", x).split()[0].split(".")[0] for x in lines), lines


def test_tight_prep_is_compacts_arithmetic_at_40_registers_with_one_more_barrier(tmp_path):
    """ptxas fits the tight kda_prep in 40 registers without spills (what 6 x 256 threads leave);
    the same floating-point and tensor-core instructions as compact (the same operations, so the
    same outputs), one more BAR (P2's wait between reading g and writing G over it), dt_bias's
    load issued before the one cp.async wait (no global load after it)."""
    tight, compact = NAMED["split-bf16-v2-tight"], NAMED["split-bf16-v2-compact"]
    (rt, ct, lt), (rc, cc, _) = _kda_prep(tmp_path / "t", tight), _kda_prep(tmp_path / "c", compact)
    prep_t = rt.resources["kda_prep"]
    assert prep_t.registers <= 40 and prep_t.spill_store_bytes == prep_t.spill_load_bytes == 0
    assert rc.resources["kda_prep"].registers == fam.PREP_REGISTERS[2]
    for op in ("HMMA", "FFMA", "FMUL", "FADD", "MUFU", "LDGSTS"):
        assert ct[op] == cc[op], op
    assert ct["BAR"] == cc["BAR"] + 1
    wait = next(i for i, x in enumerate(lt) if x.startswith("DEPBAR.LE"))
    assert not [x for x in lt[wait:] if re.search(r"\bLDG\.", x)]


@pytest.mark.parametrize("name", ["split-bf16-v2-compact", "split-bf16-compact-wgmma", "default"])
def test_other_genomes_sass_is_untouched_by_the_tight_prep(tmp_path, name):
    """Every genome with prep != tight compiles to the SASS it had before v8, byte for byte (checked
    by hand on split-bf16-v2-compact, -compact, default; the recorded results keep their kernels)."""
    from tests.test_kda_template import assert_same_sass, template_at  # noqa: PLC0415

    text = fam.template_text(NAMED[name])
    before = template_at(PRE_V8)
    assert "KDA_PREP_LEAN == 3" in text and "KDA_PREP_LEAN == 3" not in before
    assert_same_sass(tmp_path, NAMED[name], text, before)
