"""Space v13 of the RMSNorm backward: cp_async_l1 = allocate stages 16-byte vectors with cp.async.ca (through
L1, as INT21's kernels do) instead of cp.async.cg (L2 straight to shared memory). genomes/rmsnorm_bwd.py has the
why (session 30's Nsight Compute profile of bf16 32768x8192: INT21's main kernel 1.7-2.2 % shorter than ours with
the same DRAM bytes, and 1.8x our shared-memory wavefronts).

What must hold without a GPU: v12 genomes keep their keys and their source (the gene is a define, emitted only
away from its legacy value), so sessions 29-30's verdicts still carry; allocate changes the copy's cache operator
and nothing else; it exists only where a 16-byte cp.async does; and (nvcc) an allocating genome's staging copies
are LDGSTS.E.128 where its bypassing twin's are LDGSTS.E.BYPASS.128, without spills.
"""

from __future__ import annotations

import re

import pytest

from fitness.family import load_family
from genomes.rmsnorm_bwd import SPACE, SPACES
from tests.test_rmsnorm_bwd_exact import compiled_clean
from tests.test_rmsnorm_bwd_v11 import _functions
from tests.test_rmsnorm_bwd_v12 import _recorded

FAMILY = load_family("rmsnorm_bwd")
#: session 29's H100 table genomes that stage 16-byte vectors in shared memory (fc59536a and c0755542: the 8K
#: profile's two), and one that keeps them in registers
STAGED = ("fc59536a", "c0755542", "cc311014", "1c3f9f09")


def _allocating(genome):
    return SPACE.make(dict(genome, cp_async_l1="allocate"))


def test_v13_adds_cp_async_l1_and_v12_genomes_keep_their_keys_and_source():
    v12, v13 = SPACES["v12"], SPACES["v13"]
    assert SPACE is v13 and v13.names == v12.names + ("cp_async_l1",)
    gene = v13.gene("cp_async_l1")
    assert gene.legacy == "bypass" and gene.values() == ("bypass", "allocate")
    for g in v12.sample_distinct(200, seed=30):
        twin = v13.make(dict(g))
        assert twin.key == g.key and v13.is_valid(dict(twin)), dict(g)
        src = FAMILY.render(twin)
        assert src == FAMILY.render(g)
        if g["staging"] == "smem_async":
            want = "cp.async.cg.shared.global" if g["vec_bytes"] == 16 else "cp.async.ca.shared.global"
            assert f'#define BWD_CPASYNC "{want}' in src, dict(g)


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


def test_allocate_exists_only_for_a_16_byte_cp_async():
    g = dict(_recorded("fc59536a"), cp_async_l1="allocate")
    assert SPACE.is_valid(g)
    for change in ({"vec_bytes": 8}, {"staging": "regs"}, {"staging": "l2"}):
        bad = dict(g, **change)
        assert any("l1_allocate_only_for_16_byte_staging" in v for v in SPACE.violations(bad)), change


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
