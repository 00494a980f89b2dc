"""Space v15 of the RMSNorm backward: refill = pass1 and pass2_data = regs_exact32 (genomes/rmsnorm_bwd.py has the
why). Session 33's profile of 146c0ac7 (refill = pass2) on fp32 8192x262144 (results/archive/session33/bwd_ncu.md):
DRAM bytes at the floor yet 0.79 of the add roofline; with pass 2 refilling, pass 1 and the row exchange of every
visit run with no copy of the CTA in flight. refill = pass1 issues the next group's copies in pass 1, right after
each vector's words are held in registers and used, and the clustered dynamic schedule looks one group ahead for
it. Session 33's probes on the H100 (results/archive/session33/probe_fp32_wide{4,5}.log): 0.79 -> 1.00 of the
roofline (4ff32dfd and three siblings), against 0.86 for its pass2 twin; every fp32 check case verified; the pass1
twins write their pass2 twins' dx bit for bit (tests/test_rmsnorm_bwd_gpu.py, gpu_tests_v15.log). The held row
spills in the 16-bit entries at that layout; regs_exact32 holds it in the 32-bit exact entries only.

What must hold without a GPU: v14 genomes keep their keys and render the source they were judged with (the
template of BEFORE_V15), so earlier verdicts carry; pass1 exists only with one staged stage, the held row and the
clustered schedules; it changes no launch; and (nvcc) the seeds' pass1 genome compiles clean in every entry, its
held exact entries issue no copy after pass 2 has begun storing dx while the entries that do not hold the row
(16-bit, run-time) and its pass2 twin's do, and its fp32 machine code is the probed 806d9da2's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fitness.family import load_family
from genomes.rmsnorm_bwd import SPACE, SPACES
from tests.test_rmsnorm_bwd_exact import assert_rendered_as_at, compiled_clean, keyed_twins
from tests.test_rmsnorm_bwd_v11 import _first, _functions
from tests.test_rmsnorm_bwd_v12 import _recorded

REPO = Path(__file__).resolve().parents[1]
FAMILY = load_family("rmsnorm_bwd")
BEFORE_V15 = "69e4d85"        # the template before the //@refill_p1 and //@held32 regions
SEEDS = REPO / "experiments" / "seeds"


def _seed(name: str, key: str) -> dict:
    return next(g["genome"] for g in json.loads((SEEDS / name).read_text())["genomes"] if g["key"] == key)


#: session 33's probed pass1 genome (fp32 8192x262144 at 1.00 of the roofline) and the seeds' all-dtype twin
PASS1 = _seed("rmsnorm_bwd_fp32_wide_probe5.json", "806d9da2")
SEEDED = _seed("rmsnorm_bwd_v15.json", "ff201ea8")


def test_v15_widens_refill_and_pass2_data_and_v14_genomes_keep_their_keys():
    v14, v15 = SPACES["v14"], SPACES["v15"]
    assert SPACE is v15 and v15.names == v14.names
    assert v15.gene("refill").values() == ("top", "pass2", "pass1") and v15.gene("refill").legacy == "top"
    assert v15.gene("pass2_data").values() == ("reread", "regs", "regs_exact", "regs_exact32")
    for _, src in keyed_twins(v14, v15, 60, seed=33):
        assert "\n//@" not in src and "held_row" not in src and " gn " not in src and "rf1" not in src


def test_v14_genomes_render_the_source_they_were_judged_with(tmp_path, monkeypatch):
    """The template of BEFORE_V15 renders every sampled v14 genome (refill = pass2 ones among them: session 32's
    fp32 262144 genomes; regs_exact ones: the H100 table's long rows) to the very text v15 renders it to."""
    genomes = [SPACE.make(dict(g)) for g in SPACES["v14"].sample_distinct(60, seed=15)]
    genomes += [SPACE.make(_seed("rmsnorm_bwd_v14.json", k)) for k in ("146c0ac7", "a2acbcf9")]
    genomes += [SPACE.make(dict(PASS1, refill="pass2"))]
    genomes += [_recorded(k) for k in ("fc59536a", "c0755542", "cc311014", "1c3f9f09")]
    assert_rendered_as_at(BEFORE_V15, genomes, tmp_path, monkeypatch)


def test_the_seeded_pass1_genome_is_the_probed_one_holding_only_32_bit_rows():
    probed, seeded = SPACE.make(PASS1), SPACE.make(SEEDED)
    assert probed.key.startswith("806d9da2") and seeded.key.startswith("ff201ea8")
    assert dict(seeded) == dict(probed, pass2_data="regs_exact32") and SPACE.is_valid(dict(seeded))
    src = FAMILY.render(seeded)
    assert "constexpr bool held_row = XT > 0 && sizeof(T) == 4;" in src and "if constexpr (held_row) {" in src
    assert "constexpr bool rf1 = held_row;" in src
    held = FAMILY.render(probed)
    assert "held_row" not in held and "if constexpr (XT > 0) {" in held and "constexpr bool rf1 = XT > 0;" in held


def test_pass1_copies_in_pass_1_looks_a_group_ahead_and_changes_no_launch():
    p1, p2 = SPACE.make(PASS1), SPACE.make(dict(PASS1, refill="pass2"))
    src, was = FAMILY.render(p1), FAMILY.render(p2)
    # pass 1's copies: after the words are used, before the exchange; pass 2's only where the row is not held
    copy = "cp_async_vec(slot(sb, 0, j), x + off, pol);"
    assert src.count(copy) == was.count(copy) + 1
    assert src.index("if constexpr (rf1) {") < src.index("int got = 0;") < src.index("if (!rf1 && nrow < M")
    # the dynamic schedule: one group more fetched at the start, each visit's fetch is the group two visits on
    for text in ("__shared__ int gst[S + 1];", "fetch_groups(BWD_CTR, S + 1)", "gn = gst[S];",
                 "const int nxg = gn;", "if (dyn) gn = got;"):
        assert text in src and text not in was, text
    for case in FAMILY.benchmark_cases("all") + FAMILY.check_cases():
        assert FAMILY.launch(p1, case) == FAMILY.launch(p2, case), case.id


@pytest.mark.parametrize("change, rule", (
    ({"pass2_data": "reread"}, "refill_pass1_needs_the_held_row"),
    ({"pass2_data": "regs"}, "refill_pass1_needs_the_held_row"),
    ({"stages": 2}, "refill_needs_one_staged_stage"),
    ({"short_schedule": "dynamic"}, "refill_pass1_not_with_the_short_schedule"),
))
def test_pass1_needs_one_staged_stage_the_held_row_and_no_short_schedule(change, rule):
    assert SPACE.is_valid(dict(PASS1)) and SPACE.is_valid(dict(SEEDED))
    assert any(rule in v for v in SPACE.violations(dict(PASS1, **change))), change


def test_regs_exact32_needs_exact_entries():
    bad = dict(SEEDED, refill="pass2", specialize="none")
    assert any("held_exact32_needs_exact_entries" in v for v in SPACE.violations(bad))


# -- nvcc ----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_seeded_pass1_genome_compiles_clean_and_copies_before_its_stores_where_it_holds_the_row(tmp_path):
    """nvcc 13.0, sm_90a: ff201ea8 compiles without a spill in any entry of any dtype. Its fp32 clustered exact
    entries (the held row) issue every 16-byte LDGSTS before the first STG (the prologue's and pass 1's copies,
    none in pass 2); its 16-bit clustered entries and its fp32 run-time entry (no held row: pass 2 refills) issue some
    after it, as do all of its pass2 twin's. Its fp32 machine code is 806d9da2's, the genome session 33 probed."""
    seeded = SPACE.make(SEEDED)
    fns = _functions(compiled_clean(tmp_path, seeded).sass)

    def copies_after_store(name: str) -> bool:
        """Whether a 16-byte copy of x or dy (LDGSTS.E.BYPASS.128; rstd's 4-byte copy into its slot, LDGSTS.E,
        comes after pass 2 in every refill genome) follows the first dx store."""
        ops = fns[name]
        store = _first(ops, ("STG",))
        vector = lambda op: op.startswith("LDGSTS") and op.endswith(".128")  # noqa: E731
        assert store < len(ops) and any(vector(op) for op in ops[:store]), name
        return any(vector(op) for op in ops[store:])

    held = [n for n in fns if n.startswith("rmsnorm_bwd_fp32_c16_x")]
    unheld = [n for n in fns if n.startswith(("rmsnorm_bwd_bf16_c16", "rmsnorm_bwd_fp16_c16"))]
    assert held and unheld and "rmsnorm_bwd_fp32_c16" in fns
    assert not any(copies_after_store(n) for n in held), held
    assert all(copies_after_store(n) for n in unheld + ["rmsnorm_bwd_fp32_c16"])
    fp32 = type(FAMILY)(dtypes=("fp32",))
    # (the pass2 twin of 4ff32dfd, 806d9da2 with rstd from the register queue: 806d9da2's own spills in fp32)
    twin = SPACE.make(dict(_seed("rmsnorm_bwd_fp32_wide_probe5.json", "4ff32dfd"), refill="pass2"))
    fns.update({"twin " + n: ops for n, ops in _functions(compiled_clean(tmp_path, twin, fp32).sass).items()})
    assert all(copies_after_store(n) for n in fns if n.startswith("twin rmsnorm_bwd_fp32_c16"))
    probed = _functions(compiled_clean(tmp_path, SPACE.make(PASS1), fp32).sass)
    mine = {n: ops for n, ops in fns.items() if n in probed}
    assert len(probed) > 8
    assert sorted(mine) == sorted(probed) and all(mine[n] == probed[n] for n in probed)


@pytest.mark.parametrize("name", ("rmsnorm_bwd_fp32_wide_probe4.json", "rmsnorm_bwd_fp32_wide_probe5.json",
                                  "rmsnorm_bwd_8k_pass1_probe.json", "rmsnorm_bwd_v15.json"))
def test_session33s_seeds_files_are_v15_genomes_under_their_keys(name):
    """Each genome of session 33's seeds files (the two fp32 8192x262144 probes, the 8K probe prepared for the next
    session, the configs' v15 seeds) is valid in space v15 under the key it is listed with, and every probe's
    refill = pass1 genome sits beside its refill = pass2 twin."""
    listed = json.loads((SEEDS / name).read_text())["genomes"]
    genomes = [SPACE.make(g["genome"]) for g in listed]
    assert all(SPACE.is_valid(dict(g)) and g.key.startswith(s["key"]) for g, s in zip(genomes, listed))
    keys = {g.key for g in genomes}
    if "probe" in name:
        p1 = [g for g in genomes if g["refill"] == "pass1"]
        assert p1 and any(SPACE.make(dict(g, refill="pass2")).key in keys for g in p1)
