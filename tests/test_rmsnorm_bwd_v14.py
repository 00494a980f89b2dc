"""Space v14 of the RMSNorm backward: refill = pass2 (genomes/rmsnorm_bwd.py has the why). With one stage of
shared-memory staging a visit used to issue its row group's copies at its top and wait for them at once, so
every row's load latency was exposed (fp32 8192x262144: 0.63-0.71 of the add roofline on the H100, session 32);
refill = pass2 issues the next group's copies in the visit before, in pass 2, vector by vector right after the
thread has read and used its slots for that vector (//@refill regions of the template). Session 32's probe on
the H100 (results/archive/session32/probe_fp32_wide3.log): 117f7404 0.71 -> its refill twin a2acbcf9 0.78, with
exchange_wait = suspend 0.79; every fp32 and bf16 check case verified.

What must hold without a GPU: v13 genomes keep their keys and render the source they were judged with (the
template of BEFORE_V14), so earlier verdicts carry; refill exists only with one stage of shared-memory staging
(whatever pass 2 reads, wherever rstd waits); it changes no launch; and (nvcc) a refill genome's main entries copy after pass 2
has begun storing dx (an LDGSTS after the first dx STG), where its twin's copies all come before any store, with
no spills.
"""

from __future__ import annotations

import pytest

from fitness.family import load_family
from genomes.rmsnorm_bwd import SPACE, SPACES
from tests.test_rmsnorm_bwd_exact import assert_rendered_as_at, compiled_clean, keyed_twins
from tests.test_rmsnorm_bwd_v11 import _first, _functions
from tests.test_rmsnorm_bwd_v12 import _recorded

FAMILY = load_family("rmsnorm_bwd")
BEFORE_V14 = "0358064"        # the template before the //@refill regions
#: session 32's fp32 8192x262144 genome (76385eae: one stage, barrier exchange) and its async-exchange twin
ONE_STAGE = dict(_recorded("76385eae").as_dict())
ASYNC = dict(ONE_STAGE, cluster_exchange="async")


def test_v14_adds_refill_and_v13_genomes_keep_their_keys():
    v13, v14 = SPACES["v13"], SPACES["v14"]
    assert v14.names == v13.names + ("refill",)
    gene = v14.gene("refill")
    assert gene.legacy == "top" and gene.values() == ("top", "pass2")
    for g, src in keyed_twins(v13, v14, 60, seed=32):
        assert src == FAMILY.render(g) and "\n//@" not in src and "nxg" not in src


def test_v13_genomes_render_the_source_they_were_judged_with(tmp_path, monkeypatch):
    """The template of BEFORE_V14 renders every sampled v13 genome (and session 32's fp32 262144 genomes, the
    H100 table's staged ones) to the very text v14 renders it to: the //@refill regions add nothing to them."""
    genomes = [SPACE.make(dict(g)) for g in SPACES["v13"].sample_distinct(60, seed=14)]
    genomes += [SPACE.make(ONE_STAGE), SPACE.make(ASYNC)]
    genomes += [_recorded(k) for k in ("fc59536a", "c0755542", "cc311014", "1c3f9f09")]
    assert_rendered_as_at(BEFORE_V14, genomes, tmp_path, monkeypatch)


def test_refill_moves_the_copies_into_pass_2_and_changes_no_launch():
    top, refill = SPACE.make(ASYNC), SPACE.make(dict(ASYNC, refill="pass2"))
    assert SPACE.is_valid(dict(refill)) and refill.key != top.key and refill.key.startswith("a2acbcf9")
    src, was = FAMILY.render(refill), FAMILY.render(top)
    assert "load_rows(gq[S - 1], lb, rq[S - 1]);" in was and "load_rows(gq[S - 1], lb, rq[S - 1]);" not in src
    assert "load_rows(gq[0], 0, rq[0]);" in src and "cp_async_vec(slot(sb, 0, j), x + off, pol);" in src
    assert "cp_async_wait<0>();" in src and "rq[0] = nrow < M ? ld_rstd(rstd + nrow) : 0.f;" in src
    for case in FAMILY.benchmark_cases("all"):
        assert FAMILY.launch(refill, case) == FAMILY.launch(top, case), case.id


@pytest.mark.parametrize("change", ({"stages": 2}, {"staging": "regs"}, {"staging": "l2"}))
def test_refill_exists_only_with_one_stage_of_shared_memory_staging(change):
    assert SPACE.is_valid(dict(ASYNC, refill="pass2"))
    bad = dict(ASYNC, refill="pass2", **change)
    assert any("refill_needs_one_staged_stage" in v for v in SPACE.violations(bad)), change


def test_refill_copies_rstd_where_it_waits():
    """rstd from the register queue: loaded into rq[0] after pass 2; from its slot (rstd_stage = smem): copied into
    it with the group, in the same commit group; recomputed: neither."""
    queue = FAMILY.render(SPACE.make(dict(ASYNC, refill="pass2")))
    slot = FAMILY.render(SPACE.make(dict(ASYNC, refill="pass2", rstd_stage="smem")))
    assert "rq[0] = nrow < M ? ld_rstd(rstd + nrow) : 0.f;" in queue and "cp_async_f32(rslot(sb), rstd + nrow)" not in queue
    assert "cp_async_f32(rslot(sb), rstd + nrow)" in slot and "rq[0] = nrow < M" not in slot
    assert slot.index("cp_async_f32(rslot(sb), rstd + nrow)") < slot.index("one commit group a visit")


# -- nvcc ----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_refill_genomes_copy_after_pass_2_has_begun_to_store(tmp_path):
    """nvcc 13.0, sm_90a, fp32 entries of 117f7404 and its refill twin, the clustered main entries (those of the
    262144 case): with refill = pass2 some LDGSTS comes after the first STG (the dx store of pass 2: the next
    group's copies), without it every LDGSTS comes before any STG; no spills either way."""
    fp32 = type(FAMILY)(dtypes=("fp32",))
    for genome, refills in ((SPACE.make(ASYNC), False), (SPACE.make(dict(ASYNC, refill="pass2")), True)):
        fns = _functions(compiled_clean(tmp_path, genome, fp32).sass)
        mains = {n: ops for n, ops in fns.items() if n.startswith("rmsnorm_bwd_fp32_c16")}
        assert mains, sorted(fns)
        for name, ops in mains.items():
            store = _first(ops, ("STG",))
            assert store < len(ops) and any(op.startswith("LDGSTS") for op in ops[:store]), (name, refills)
            assert any(op.startswith("LDGSTS") for op in ops[store:]) == refills, (name, refills)
