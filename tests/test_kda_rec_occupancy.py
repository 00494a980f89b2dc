"""KDA v9, `rec_min_blocks` (kernels/kda/template.cu KDA_REC_MIN_BLOCKS, README "v9: kda_rec at 4 CTAs
an SM"): kda_rec's __launch_bounds__ minimum CTAs per SM. Why it exists: session 16's table leaves the
uniform scenarios at 1.25x FlashKDA, and SPLIT_FIT's chunk time a + b w says three 4-warp kda_rec CTAs
an SM (registers bind at 156) pay the fixed latency a for 1.5 heads; capped at 128 registers, four fit.
What is checked here without a GPU: the space (every v8 key kept, the gene only where it was checked),
ptxas's figures (128 registers, no spills, so 4 or 2 CTAs an SM), the SASS (the twin's arithmetic, kda_prep
byte for byte the twin's) and that no other genome's kernels changed (SASS byte for byte against the
template before v9). Its outputs equal the twin's bit for bit on the device (tests/test_kda_gpu.py, -m gpu)."""

from __future__ import annotations

import collections
import re

import pytest

from fitness.family import KERNELS_DIR, import_sibling, load_family
from genomes.kda import NAMED, REC_MIN_BLOCKS_FOR_SPLIT, SPACE, SPACES

FAMILY = load_family("kda")
fam = import_sibling(str(KERNELS_DIR / "kda" / "family.py"), "family")
model = import_sibling(str(KERNELS_DIR / "kda" / "family.py"), "kernel_model")

#: the last commit whose template.cu had no KDA_REC_MIN_BLOCKS (session 16's v8 measurements)
PRE_V9 = "c2225f0"
R = {"split-bf16-v2-tight-r4": "split-bf16-v2-tight", "split-bf16-tight-r2": "split-bf16-tight"}


def test_v9_keeps_every_v8_genome_and_adds_the_bound_only_where_it_was_checked():
    v8, v9 = SPACES["v8"], SPACES["v9"]
    assert SPACE is SPACES["v11"] and SPACES["v10"].names == v9.names == v8.names + ("rec_min_blocks",)
    for name, g in NAMED.items():
        # (tail: v10, tests/test_kda_tail.py; prep_solve = columns: v11, tests/test_kda_p6.py)
        if g["rec_min_blocks"] == 1 and g["prep_overlap"] != "tail" and g["prep_solve"] == "rows":
            assert g.key == v8.make({k: g[k] for k in v8.names}).key, name
    new = [g for g in v9.enumerate() if g["rec_min_blocks"] != 1]
    assert new and all(g["kernels"] == "split" and g["prep_overlap"] == "none" and g["rec_mma"] == "mma_sync"
                       and REC_MIN_BLOCKS_FOR_SPLIT[g["rec_v_split"]] == g["rec_min_blocks"]
                       and not (g["split_s"] or g["split_u"] or g["split_w"] or g["split_intra"]) for g in new)
    # one bounded twin for every one-tile, mma.sync, non-overlapped split genome at rec_v_split 1 or 2
    twins = [g for g in v8.enumerate() if g["kernels"] == "split" and g["prep_overlap"] == "none"
             and g["rec_mma"] == "mma_sync" and g["rec_v_split"] in REC_MIN_BLOCKS_FOR_SPLIT
             and not (g["split_s"] or g["split_u"] or g["split_w"] or g["split_intra"])]
    assert sorted(v9.make(dict(g, rec_min_blocks=1)).key for g in new) == \
        sorted(v9.make(dict(g, rec_min_blocks=1)).key for g in twins)
    base = dict(NAMED["split-bf16-v2-tight-r4"])
    for bad in (dict(base, rec_min_blocks=2), dict(base, rec_v_split=4), dict(base, split_u=True),
                dict(base, rec_mma="wgmma"), dict(base, prep="compact", prep_overlap="pdl"),
                dict(base, kernels="fused", rec_v_split=1, prep="v3", rec_min_blocks=2)):
        assert not v9.is_valid(bad) and not SPACE.is_valid(bad), bad


@pytest.mark.parametrize("name", sorted(R))
def test_the_bound_is_in_the_source_and_the_launches_are_the_twins(name):
    g, twin = NAMED[name], NAMED[R[name]]
    assert f"#define KDA_REC_MIN_BLOCKS {g['rec_min_blocks']}\n" in FAMILY.render(g)
    assert "#define KDA_REC_MIN_BLOCKS 1\n" in FAMILY.render(twin)
    for case in FAMILY.check_cases()[:4] + FAMILY.benchmark_cases("all"):
        assert FAMILY.launch(g, case) == FAMILY.launch(twin, case)
    # the shared memory of that many kda_rec CTAs fits an SM
    n = g["rec_min_blocks"]
    assert n * (fam.rec_smem_bytes(g) + fam.REC_STATIC_SMEM + fam.SM_CTA_RESERVED_BYTES) <= fam.SM_SHARED_BYTES
    assert n * fam.rec_threads(g) * 128 == 65536


def _compile(tmp_path, genome):
    from fitness.compile import Compiler  # noqa: PLC0415

    res = Compiler(tmp_path).compile(FAMILY.render(genome), FAMILY.compile_flags(genome))
    assert res.ok, res.log[-3000:]
    if not res.sass:
        pytest.skip("no cuobjdump: " + res.log[-300:])
    return res


def _function(sass: str, fn: str) -> list[str]:
    text = sass.split("Function : " + fn + "\n")[1].split("Function :")[0]
    return [ln.split("*/", 1)[1].split(";")[0].strip() for ln in text.splitlines() if ln.strip().startswith("/*") and ";" in ln]


def _ops(lines: list[str]) -> collections.Counter:
    return collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", x).split()[0].split(".")[0] for x in lines)


@pytest.mark.parametrize("name", sorted(R))
def test_kda_rec_fits_128_registers_with_the_twins_arithmetic(tmp_path, name):
    """ptxas meets the cap without spills (so 65,536 / (threads x 128) CTAs an SM); the same
    tensor-core and floating-point instructions as the twin's kda_rec (the same operations, so the
    same outputs); kda_prep byte for byte the twin's (the bound is kda_rec's alone)."""
    g, twin = NAMED[name], NAMED[R[name]]
    a, b = _compile(tmp_path / "r", g), _compile(tmp_path / "t", twin)
    for state in ("kda_rec_bf16", "kda_rec_fp32"):
        r, t = a.resources[state], b.resources[state]
        assert r.registers <= 128 < t.registers, (state, r.registers, t.registers)
        assert r.spill_store_bytes == r.spill_load_bytes == r.stack_frame_bytes == 0, state
        ca, cb = _ops(_function(a.sass, state)), _ops(_function(b.sass, state))
        for op in ("HMMA", "FFMA", "FMUL", "FADD", "MUFU", "F2FP", "LDSM", "LDGSTS", "BAR"):
            assert ca[op] == cb[op], (state, op)
        assert not ca["LDL"] and not ca["STL"]
    assert _function(a.sass, "kda_prep") == _function(b.sass, "kda_prep")


@pytest.mark.parametrize("name", ["split-bf16-v2-tight", "split-bf16-v2-compact-pdl3", "default"])
def test_other_genomes_sass_is_untouched_by_the_bound(tmp_path, name):
    """Every genome at rec_min_blocks = 1 compiles to the SASS it had before v9, byte for byte
    (sampled: a tight pair, an overlapped one, the fused kernel); the recorded results keep their kernels."""
    from tests.test_kda_template import assert_same_sass, template_at  # noqa: PLC0415

    text, before = fam.template_text(NAMED[name]), template_at(PRE_V9)
    assert "KDA_REC_MIN_BLOCKS" in text and "KDA_REC_MIN_BLOCKS" not in before
    assert_same_sass(tmp_path, NAMED[name], text, before)


def test_the_model_predicts_the_gain_on_uniform_only():
    """kernel_model.split_fit_ms at 4 kda_rec CTAs an SM (rec_resident): uniform gains (fewer waves and
    a paid for more heads), fixed is unchanged (fewer CTAs than SMs), mixed/H64 longest-first loses (its
    longest sequence's CTAs run beside more warps): the README's prediction table is this."""
    uni, mixed, fixed = [1024] * 8, [1300, 547, 2048, 963, 271, 3063], [8192]
    for H in (96, 64):
        _, r3 = model.split_fit_ms(uni, H, 2)
        _, r4 = model.split_fit_ms(uni, H, 2, rec_resident=4)
        assert r4 < 0.92 * r3
        assert model.split_fit_ms(fixed, H, 2, rec_resident=4) == model.split_fit_ms(fixed, H, 2)
    assert model.split_fit_ms(mixed, 64, 2, order="longest_first", rec_resident=4)[1] > \
        model.split_fit_ms(mixed, 64, 2, order="longest_first")[1]
