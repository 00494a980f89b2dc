"""Space v13 of the RMSNorm backward, two genes from session 30's Nsight Compute profile of bf16 32768x8192 on
the H100 (INT21's main kernel 1.7-2.2 % shorter than ours with the same DRAM bytes; genomes/rmsnorm_bwd.py has
the why of each):
  - cp_async_l1 = allocate stages 16-byte vectors with cp.async.ca (through L1, as INT21's kernels do) instead
    of cp.async.cg (L2 straight to shared memory): a define;
  - rstd_stage = smem copies each row's rstd with its group (a 4-byte cp.async into the thread's own slot,
    committed with x and dy) and reads it from shared memory in pass 2, where the legacy register queue's
    load, sunk by ptxas to the row barrier, stalled the end of every visit: //@rstd_stage regions.

What must hold without a GPU: v12 genomes keep their keys and render the source they were judged with (the
template of BEFORE_V13), so sessions 29-30's verdicts still carry; allocate changes the copy's cache operator and
nothing else; rstd_stage = smem adds a slot per thread and stage to the launch's shared memory and nothing else
to it; each exists only where its copy does; and (nvcc) an allocating genome's staging copies are LDGSTS.E.128
where its bypassing twin's are LDGSTS.E.BYPASS.128, and a staged-rstd genome's main entries copy rstd with a
4-byte LDGSTS.E and load none with LDG, where its twin's load it with LDG.E.CONSTANT, all without spills.
"""

from __future__ import annotations

import re

import pytest

from fitness.family import load_family
from genomes.rmsnorm_bwd import SPACE, SPACES
from tests.test_rmsnorm_bwd_exact import assert_rendered_as_at, compiled_clean, keyed_twins
from tests.test_rmsnorm_bwd_v11 import _functions
from tests.test_rmsnorm_bwd_v12 import _recorded

FAMILY = load_family("rmsnorm_bwd")
BEFORE_V13 = "ac83cb0"        # the template before the //@rstd_stage regions
#: session 29's H100 table genomes that stage 16-byte vectors in shared memory (fc59536a and c0755542: the 8K
#: profile's two), and one that keeps them in registers
STAGED = ("fc59536a", "c0755542", "cc311014", "1c3f9f09")


def _allocating(genome):
    return SPACE.make(dict(genome, cp_async_l1="allocate"))


def test_v13_adds_cp_async_l1_and_rstd_stage_and_v12_genomes_keep_their_keys_and_source():
    v12, v13 = SPACES["v12"], SPACES["v13"]
    assert SPACES["v14"].names[:len(v13.names)] == v13.names and v13.names == v12.names + ("cp_async_l1", "rstd_stage")
    gene = v13.gene("cp_async_l1")
    assert gene.legacy == "bypass" and gene.values() == ("bypass", "allocate")
    gene = v13.gene("rstd_stage")
    assert gene.legacy == "regs" and gene.values() == ("regs", "smem")
    for g, src in keyed_twins(v12, v13, 60, seed=30):
        assert src == FAMILY.render(g) and "\n//@" not in src and "cp_async_f32" not in src
        if g["staging"] == "smem_async":
            want = "cp.async.cg.shared.global" if g["vec_bytes"] == 16 else "cp.async.ca.shared.global"
            assert f'#define BWD_CPASYNC "{want}' in src, dict(g)


def test_v12_genomes_render_the_source_they_were_judged_with(tmp_path, monkeypatch):
    """The template of BEFORE_V13 renders every sampled v12 genome (and session 29's table genomes) to the very
    text v13 renders it to: the //@rstd_stage regions add nothing to them, so their verdicts carry."""
    genomes = [SPACE.make(dict(g)) for g in SPACES["v12"].sample_distinct(60, seed=13)]
    genomes += [_recorded(k) for k in STAGED + ("97177bfb", "aa8471ea", "a2b08a6c", "18b18729")]
    assert_rendered_as_at(BEFORE_V13, genomes, tmp_path, monkeypatch)


@pytest.mark.parametrize("key", STAGED)
def test_allocate_changes_the_copys_cache_operator_and_nothing_else(key):
    bypass = _recorded(key)
    assert bypass["staging"] == "smem_async" and bypass["vec_bytes"] == 16
    allocate = _allocating(bypass)
    assert SPACE.is_valid(dict(allocate)) and allocate.key != bypass.key
    # below the descriptive first line (the genome's key and values)
    a, b = FAMILY.render(allocate).splitlines()[1:], FAMILY.render(bypass).splitlines()[1:]
    differ = [(x, y) for x, y in zip(a, b) if x != y]
    assert len(a) == len(b) and len(differ) == 1, differ[:3]
    (x, y), = differ
    assert x.startswith("#define BWD_CPASYNC") and x == y.replace("cp.async.cg.", "cp.async.ca.")
    for case in FAMILY.benchmark_cases("all"):               # the launches are the twin's
        assert FAMILY.launch(allocate, case) == FAMILY.launch(bypass, case), case.id


@pytest.mark.parametrize("key", ("fc59536a", "c0755542"))
def test_staged_rstd_adds_a_slot_per_thread_and_stage_and_changes_nothing_else_of_a_launch(key):
    from dataclasses import replace  # noqa: PLC0415

    from fitness.device import as_launches  # noqa: PLC0415

    regs = _recorded(key)
    staged = SPACE.make(dict(regs, rstd_stage="smem"))
    assert SPACE.is_valid(dict(staged)) and staged.key != regs.key
    src = FAMILY.render(staged)
    assert "cp_async_f32(rslot(sb), rstd + row)" in src and "ld_shared_f32(rslot(sb))" in src
    assert "const float r = rq[0];" not in src and "const float r = rq[0];" in FAMILY.render(regs)
    grew = 0
    for case in FAMILY.benchmark_cases("all"):
        got, want = FAMILY.launch(staged, case), FAMILY.launch(regs, case)
        assert (got is None) == (want is None), case.id
        if want is None:
            continue
        for a, b in zip(as_launches(got), as_launches(want), strict=True):
            if a.kernel.startswith("rmsnorm_bwd_") and b.shared_bytes:
                geo = FAMILY.geometry(regs, case)
                extra = regs["stages"] * geo.rows * geo.tpr * 4
                assert a.shared_bytes == b.shared_bytes + extra, case.id
                grew += 1
            assert replace(a, shared_bytes=b.shared_bytes) == b, case.id
    assert grew >= 5


def test_allocate_exists_only_for_a_16_byte_cp_async():
    g = dict(_recorded("fc59536a"), cp_async_l1="allocate")
    assert SPACE.is_valid(g)
    for change in ({"vec_bytes": 8}, {"staging": "regs"}, {"staging": "l2"}):
        bad = dict(g, **change)
        assert any("l1_allocate_only_for_16_byte_staging" in v for v in SPACE.violations(bad)), change


def test_staged_rstd_exists_only_with_staging_a_loaded_rstd_and_pass2s_update():
    g = dict(_recorded("c0755542"), rstd_stage="smem")
    assert SPACE.is_valid(g)
    for change in ({"staging": "regs"}, {"staging": "l2"}, {"rstd_mode": "recompute"}, {"dw_update": "shadow"}):
        bad = dict(g, **change)
        assert any("rstd_stage_needs_staging" in v for v in SPACE.violations(bad)), change


# -- nvcc ----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_allocating_genomes_copy_through_l1(tmp_path):
    """nvcc 13.0, sm_90a, bf16 entries of the 8K profile's two genomes: every main entry's staging copies are
    LDGSTS.E.128 (no BYPASS) with cp_async_l1 = allocate and LDGSTS.E.BYPASS.128 without; no spills."""
    bf16 = type(FAMILY)(dtypes=("bf16",))
    for key in ("fc59536a", "c0755542"):
        bypass = _recorded(key)
        for genome, bypassed in ((bypass, True), (_allocating(bypass), False)):
            fns = _functions(compiled_clean(tmp_path, genome, bf16).sass)
            mains = {n: ops for n, ops in fns.items() if n.startswith("rmsnorm_bwd_bf16")}
            assert mains, sorted(fns)
            for name, ops in mains.items():
                copies = [op for op in ops if op.startswith("LDGSTS")]
                assert copies, (key, name)
                assert all(bool(re.search(r"\.BYPASS\b", op)) == bypassed for op in copies), (key, name, copies[:4])


@pytest.mark.slow
def test_staged_rstd_genomes_copy_rstd_with_the_group_and_load_none(tmp_path):
    """nvcc 13.0, sm_90a, bf16 entries of the 8K profile's two genomes: with rstd_stage = smem every unclustered
    main entry copies rstd by a 4-byte LDGSTS.E beside the group's 16-byte copies and has no 32-bit
    LDG.E.CONSTANT (the register queue's load); the regs twin's entries have that load and no 4-byte copy."""
    bf16 = type(FAMILY)(dtypes=("bf16",))
    for key in ("fc59536a", "c0755542"):
        regs = _recorded(key)
        for genome, staged in ((regs, False), (SPACE.make(dict(regs, rstd_stage="smem")), True)):
            fns = _functions(compiled_clean(tmp_path, genome, bf16).sass)
            mains = {n: ops for n, ops in fns.items() if re.fullmatch(r"rmsnorm_bwd_bf16(_x\d+r\d+)?", n)}
            assert mains, sorted(fns)
            for name, ops in mains.items():
                four_byte_copies = [op for op in ops if op == "LDGSTS.E"]
                word_loads = [op for op in ops if op == "LDG.E.CONSTANT"]
                assert bool(four_byte_copies) == staged and bool(word_loads) != staged, (key, name, staged)
