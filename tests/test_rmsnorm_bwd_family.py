"""CPU tests of the RMSNorm backward family: gene space, render, launch geometry of every benchmark
and check case, and a seeded sample compiled for sm_90a (no spills; the SASS holds what each
genome promises, and genes change the machine code). GPU verification through the real judge is
tests/test_rmsnorm_bwd_gpu.py."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fitness.family import load_family
from genomes import load_space
from genomes.rmsnorm_bwd import (DEFAULT, SPACE, SPACES, register_cap, register_demand_v5)

FAMILY = load_family("rmsnorm_bwd")
FAM = sys.modules["_kernels_rmsnorm_bwd_family"]
OP = sys.modules["_kernels_rmsnorm_bwd_operation"]
SMEM_STATIC_LIMIT = 48 * 1024
COMPILE_SAMPLE = 3                 # random genomes compiled beside DEFAULT, the extremes and the seeds
SEEDS_FILE = Path(__file__).resolve().parent.parent / "experiments" / "seeds" / "rmsnorm_bwd_v3.json"
SEEDS_V4 = SEEDS_FILE.with_name("rmsnorm_bwd_v4.json")
SEEDS_V5 = SEEDS_FILE.with_name("rmsnorm_bwd_v5.json")
DISPATCH_S12 = SEEDS_FILE.parents[2] / "results" / "archive" / "session12" / "callC" / "rmsnorm_bwd_dispatch.json"


def _seeds(path: Path = SEEDS_FILE) -> list[dict]:
    import json  # noqa: PLC0415
    return json.loads(path.read_text())["genomes"]


def _widths(text: str) -> tuple[int, int]:
    lo, hi = (int(t[:-1]) * 1024 if t.endswith("K") else int(t) for t in text.split("-"))
    return lo, hi


def _cases():
    return FAMILY.benchmark_cases("all") + FAMILY.check_cases()


# -- the space ----------------------------------------------------------------------------------
def test_space_is_registered_versioned_and_documented():
    assert load_space("rmsnorm_bwd") is SPACE and load_space("rmsnorm_bwd", "v1") is SPACES["v1"]
    assert load_space("rmsnorm_bwd", "v3") is SPACES["v3"]
    assert SPACE is SPACES["v15"] and load_space("rmsnorm_bwd", "v5") is SPACES["v5"]
    assert set(SPACES["v1"].names) < set(SPACES["v2"].names) < set(SPACES["v3"].names) < set(SPACE.names)
    assert len(SPACE.genes) >= 14 and len(SPACE.constraints) >= 8
    assert {"memory", "geometry", "reduce", "pipeline", "compile"} <= set(SPACE.groups())
    assert all(g.doc for g in SPACE.genes)


def test_default_and_extremes_are_valid_and_cover_the_variants():
    gs = FAM.sample_genomes(0)
    assert gs[0] == DEFAULT and len({g.key for g in gs}) == len(gs)
    for g in gs:
        assert SPACE.is_valid(g), SPACE.violations(g)
        assert register_demand_v5(g) <= register_cap(g)
    assert {g["dw_reduce"] for g in gs} == {"partials", "atomic"}
    assert {g["stages"] for g in gs} == {1, 2, 3, 4}
    assert {g["rstd_mode"] for g in gs} == {"load", "recompute"}
    assert {g["vec_bytes"] for g in gs} == {8, 16}
    assert {1, 4, 8, 16} <= {g["cluster"] for g in gs}
    assert {g["staging"] for g in gs} == {"regs", "smem_async", "l2"}
    assert any(g["staging"] == "smem_async" and g["stages"] == 2 for g in gs)
    assert {g["row_schedule"] for g in gs} == {"static", "dynamic"} and {g["dw_acc"] for g in gs} == {"regs", "smem"}
    assert {3, 4} <= {g["stages"] for g in gs}
    assert {g["dw_reduce"] for g in gs if g["row_schedule"] == "dynamic"} == {"partials", "atomic"}
    assert {g["vector_loop"] for g in gs} == {"unrolled", "rolled", "rolled4"}
    assert {g["cluster_exchange"] for g in gs} == {"barrier", "async"}
    assert {g["staging"] for g in gs if g["cluster_exchange"] == "async"} == {"regs", "smem_async", "l2"}


def _in(space, genome) -> dict:
    """A genome's values of the genes `space` has (an older version lacks the later genes)."""
    return {k: v for k, v in dict(genome).items() if k in space.names}


def test_v3_stays_loadable_and_unchanged_under_v4():
    """Recorded runs name v3: it keeps its genes (no cluster_exchange) and constraints, and every v3
    genome (its seeds, session 12's dispatch winners) has the same key in v4, where it reads as
    cluster_exchange = barrier and renders without BWD_XCHG_ASYNC (the same kernel)."""
    import json  # noqa: PLC0415
    v3, v4 = SPACES["v3"], SPACES["v4"]
    assert "cluster_exchange" not in v3.names and set(v4.names) - set(v3.names) == {"cluster_exchange"}
    assert v4.gene("cluster_exchange").legacy == "barrier"
    recorded = [s["genome"] for s in _seeds()]
    if DISPATCH_S12.exists():
        recorded += [e["genome"] for e in json.loads(DISPATCH_S12.read_text())["entries"]]
    for values in recorded:
        old, new = v3.make(values), v4.make(values)
        assert old.key == new.key and new["cluster_exchange"] == "barrier"
        assert "#define BWD_XCHG_ASYNC" not in FAMILY.render(new).split("// RMSNorm backward")[0]
        if new["cluster"] > 1 and new["staging"] == "smem_async":
            twin = v4.make(dict(new, cluster_exchange="async"))
            assert twin.key != new.key and "#define BWD_XCHG_ASYNC 1" in FAMILY.render(twin)
    assert not v4.is_valid(dict(_in(v4, DEFAULT), cluster=1, cluster_exchange="async"))   # no duplicate genomes


def test_constraints_reject_invalid_combinations():
    bad = [
        dict(DEFAULT, cta_threads=1024, min_blocks=4),                     # > 2048 threads per SM
        dict(DEFAULT, maxrreg=128, cta_threads=1024),                      # 128 regs x 1024 threads
        dict(DEFAULT, cluster=2, cta_threads=64),                          # clusters need wide CTAs
        dict(DEFAULT, dw_reduce="atomic", reduce_cols=64),                 # no reduction kernel there
        dict(DEFAULT, chunks=8, stages=2, weight_regs=True),               # 40 + 8*32 registers at 128
        dict(DEFAULT, load_cache="cs", l2_prefetch="128B"),
        dict(DEFAULT, staging="smem_async", load_cache="nc_na"),           # cp.async: ca/cg + hint only
        dict(DEFAULT, staging="smem_async", load_cache="default", cta_threads=1024, chunks=8, stages=2),
        dict(DEFAULT, cluster=1, cluster_slack=1),
        dict(DEFAULT, stages=3),                                           # a ring needs shared staging
        dict(DEFAULT, cluster=1, row_schedule="dynamic"),                  # only clusters schedule rows
        dict(DEFAULT, row_schedule="dynamic", cluster_slack=1),
        dict(DEFAULT, row_schedule="dynamic"),                             # spills (8-24 bytes at 128)
        dict(DEFAULT, staging="smem_async", load_cache="default", chunks=8, dw_acc="smem"),  # x 8 spills
        dict(DEFAULT, staging="smem_async", load_cache="default", cta_threads=1024, chunks=4, dw_acc="smem"),
        dict(DEFAULT, cluster=1, cluster_exchange="async"),                # the exchange needs a cluster
        # register staging pays 16 registers for the async exchange (a sampled 128 x 7 spilled 52 bytes)
        dict(DEFAULT, cta_threads=128, chunks=7, cluster=4, min_blocks=3, dw_acc="smem", cluster_exchange="async"),
        # v5: the L2 re-read needs lines that stay (no evict-first loads); rolled forms need shared state
        dict(DEFAULT, staging="l2", load_cache="cs", dw_acc="smem"),
        dict(DEFAULT, staging="l2", load_cache="nc_ef", dw_acc="smem"),
        dict(DEFAULT, staging="l2", load_cache="default", vector_loop="rolled4", dw_acc="regs"),
        dict(DEFAULT, staging="l2", load_cache="default", vector_loop="rolled4", dw_acc="smem", weight_regs=True),
        dict(DEFAULT, stages=4, vector_loop="rolled4", dw_acc="smem"),  # register staging: neither
        # rolled4 at 64 registers: its four vectors' loads need ~120 (ptxas: 110-114)
        dict(DEFAULT, staging="l2", load_cache="default", dw_acc="smem", vector_loop="rolled4", cta_threads=1024,
             chunks=2, cluster=16, ctas_per_sm=1),
    ]
    for values in bad:
        # v7 keeps every rejection but v6's register estimate (what ptxas decides in v7: see
        # test_v7_register_floor_admits_what_compiles)
        v6 = _in(SPACES["v6"], values)          # (DEFAULT is the latest space's: v8 adds waves)
        assert not SPACES["v6"].is_valid(v6), values
        assert not SPACE.is_valid(values) or SPACES["v6"].violations(v6) == [
            f"constraint {c.describe()}" for c in SPACES["v6"].constraints if c.name == "registers_fit"], values


def test_random_samples_and_repair_stay_valid():
    rng = random.Random(3)
    for _ in range(60):         # ~1 s a draw and repair of the tangled v15 space on CI: 200 took 3 minutes, 100 took 64 s
        g = SPACE.sample(rng)
        assert SPACE.is_valid(g)
        gene = rng.choice(SPACE.genes)
        assert SPACE.is_valid(SPACE.repair(dict(g, **{gene.name: gene.mutate(g[gene.name], rng)}), rng))


# -- render ---------------------------------------------------------------------------------------
def test_render_is_pure_and_names_every_entry():
    for g in FAM.sample_genomes(3, 2):
        a = FAMILY.render(g)
        assert a == FAMILY.render(SPACE.from_json(g.to_json()))
        for d in ("bf16", "fp16", "fp32"):
            assert f"BWD_ENTRY({FAM.entry_name(d)}," in a
            if g["cluster"] > 1:
                assert f"BWD_ENTRY({FAM.entry_name(d, g['cluster'])}," in a
                assert f"__cluster_dims__({g['cluster']}, 1, 1)" in a
        assert "bwd_dw_reduce" in a and "bwd_dw_zero" in a


def test_every_gene_but_the_launch_only_ones_changes_the_source():
    """Each gene moved away from DEFAULT (repaired to a valid genome that keeps the new value)
    changes the rendered code below the descriptive first line."""
    launch_only = {"ctas_per_sm", "reduce_cols", "reduce_threads", "cluster_slack", "waves", "cluster"}  # cluster: an entry
    base = FAMILY.render(DEFAULT).split("\n", 1)[1]
    changed = set()
    for gene in SPACE.genes:
        for value in gene.values():
            if value == DEFAULT[gene.name] or gene.name in changed:
                continue
            # repair may undo a value that needs two other genes moved (staging: the cache op, chunks)
            tries = [dict(DEFAULT, staging="smem_async", load_cache="default", chunks=2)] if gene.name == "staging" else []
            if gene.name in ("cp_async_l1", "rstd_stage"):      # allocate, smem: the 16-byte staging
                tries = [dict(DEFAULT, staging="smem_async", load_cache="default", chunks=2, **{gene.name: value})]
            if gene.name == "refill":           # pass2: one stage of the 16-byte staging
                tries = [dict(DEFAULT, staging="smem_async", load_cache="default", chunks=2, stages=1, refill=value)]
            if gene.name == "vector_loop":      # rolled needs staging and dw_acc moved too
                tries = [dict(DEFAULT, staging="smem_async", load_cache="default", dw_acc="smem", vector_loop=value)]
            tries += [dict(SPACE.repair(dict(DEFAULT, **{gene.name: value}), random.Random(seed))) for seed in range(20)]
            cand = next((t for t in tries if t[gene.name] == value and SPACE.is_valid(t)), None)
            if cand is None:
                continue
            if FAMILY.render(SPACE.make(cand)).split("\n", 1)[1] != base:
                changed.add(gene.name)
    assert set(SPACE.names) - launch_only <= changed, set(SPACE.names) - launch_only - changed
    assert len(changed) >= 12


# -- launch geometry ------------------------------------------------------------------------------
def test_default_launches_every_benchmark_case_the_registers_can_hold():
    """Every case but fp32 8192 x 262144: a 1 MB fp32 row of x plus one of dy needs 1024 threads x
    4 vectors x 16 CTAs at ~90 registers, more than a 1024-thread CTA may use (64); the register
    kernel refuses it (launch None) and the issue's fp32 targets stop at N = 131072."""
    for case in FAMILY.benchmark_cases("all"):
        steps = FAMILY.launch(DEFAULT, case)
        if case.id == "fp32/8192x262144":
            assert steps is None
        else:
            assert steps is not None, case.id


def test_a_rolled_v3_genome_launches_fp32_8192x262144():
    """DEFAULT cannot hold fp32 8192 x 262144; the v3 shape that can: a dynamic cluster of 16 CTAs of
    1024 threads x 4 vectors, x and dy staged (128 KB) and dw in shared memory (64 KB), the vector
    loops rolled so that every entry fits 64 registers (the compile test builds it)."""
    rolled_extreme = next(e for e in FAM.EXTREMES if e.get("vector_loop") == "rolled")
    g = SPACE.make(rolled_extreme)
    assert g["vector_loop"] == "rolled" and g["cta_threads"] == 1024
    geo = FAMILY.geometry(g, FAMILY.make_case(8192, 262144, "fp32"))
    assert geo is not None and geo.cluster == 16 and geo.tpr == 1024 and geo.dynamic
    assert geo.shared_bytes == 128 * 1024 + 64 * 1024
    assert FAMILY.launch(g, FAMILY.make_case(8192, 262144, "fp32"))[0].kernel == "bwd_sched_init"
    rolled = FAMILY.render(g)
    assert "#define BWD_ROLLED 1" in rolled and "#define BWD_ROLLED" not in FAMILY.render(DEFAULT).split("// RMSNorm backward")[0]
    assert not SPACES["v6"].is_valid(dict(rolled_extreme, vector_loop="unrolled"))  # 16-bit entries spill
    assert not SPACE.is_valid(dict(rolled_extreme, weight_regs=True))             # a register array by vector


def test_launch_rejects_widths_that_are_not_16_byte_units():
    with pytest.raises(ValueError, match="16-byte"):
        FAMILY.launch(DEFAULT, FAMILY.make_case(4, 1001, "bf16"))
    with pytest.raises(ValueError, match="16-byte"):
        FAMILY.launch(DEFAULT, FAMILY.make_case(4, 1002, "fp32"))


def test_launch_geometry_of_every_case_and_sampled_genome():
    """Every launch of every benchmark and check case: the main kernel covers each row (threads x
    chunks x cluster >= vectors), fits the CTA, the grid is whole clusters, its partial rows fit
    the case's workspace, the reduction covers every column; atomic genomes zero dw first."""
    genomes = FAM.sample_genomes(12, 4)
    cases = _cases()
    launched = 0
    for g in genomes:
        for case in cases:
            M, N, dt = case.params["M"], case.params["N"], case.params["dtype"]
            steps = FAMILY.launch(g, case)
            geo = FAMILY.geometry(g, case)
            if steps is None:
                assert geo is None
                continue
            launched += 1
            E = g["vec_bytes"] // {"bf16": 2, "fp16": 2, "fp32": 4}[dt]
            V = N // E
            assert geo.vectors == V and geo.tpr * g["chunks"] * geo.cluster >= V
            assert geo.tpr * g["chunks"] >= geo.slice_vectors
            assert geo.tpr * geo.rows <= g["cta_threads"] and geo.tpr * geo.rows >= min(32, g["cta_threads"])
            assert geo.rows <= max(1, 1 << (M - 1).bit_length()) or geo.tpr * geo.rows <= 32
            assert geo.grid % geo.cluster == 0 and geo.parts == geo.grid // geo.cluster
            assert geo.parts <= FAMILY.workspace(case)["dw_part"].shape[0]
            assert geo.parts <= -(-M // geo.rows)
            assert main_smem_ok(g, geo, {"bf16": 2, "fp16": 2, "fp32": 4}[dt])
            if geo.cluster > 1:
                assert geo.tpr >= 32 and geo.rows <= g["cta_threads"] // 32
            kinds = [s.kernel for s in steps]
            main = next(s for s in steps if s.kernel.startswith("rmsnorm_bwd_"))
            assert main.grid == (geo.grid, 1, 1) and main.block == geo.block and main.cluster == (geo.cluster, 1, 1)
            assert main.kernel == FAM.entry_name(dt, geo.cluster)
            assert geo.dynamic == (geo.cluster > 1 and g["row_schedule"] == "dynamic" and geo.parts > 1)
            if geo.dynamic:
                # the counter sits in the workspace row past the partial rows; init zeroes it first
                assert geo.parts < FAMILY.workspace(case)["dw_part"].shape[0]
                init = steps[0]
                assert init.kernel == "bwd_sched_init" and int(init.args[3]) == geo.parts
                assert int(init.args[1]) == (N if g["dw_reduce"] == "atomic" else 0)
                assert init.grid[0] * init.block[0] >= int(init.args[1])
                steps = steps[1:]
                kinds = kinds[1:]
            if g["dw_reduce"] == "atomic":
                assert kinds == (["bwd_dw_zero", main.kernel] if not geo.dynamic else [main.kernel])
            else:
                red = steps[1]
                assert kinds == [main.kernel, "bwd_dw_reduce"]
                bx, by, _ = red.block
                assert red.grid[0] * bx * 4 >= N and bx * by <= 1024 and by >= 2
                assert int(red.args[2]) == geo.parts
    assert launched > len(cases) * 4


def _coverage(geo, M: int, chunks: int) -> "np.ndarray":
    """How many times the template's index mapping visits each (row, vector): cluster k of K takes
    row groups k, k + K, ...; rank c owns vectors [c*SV, min(V, (c+1)*SV)); thread (tx, ty) the
    row g*R + ty and the vectors v0 + tx + j*TPR (j < chunks) of its slice."""
    import numpy as np  # noqa: PLC0415
    K = geo.grid // geo.cluster
    count = np.zeros((M, geo.vectors), dtype=np.int32)
    for k in range(K):
        rows = np.concatenate([np.arange(g * geo.rows, min(M, (g + 1) * geo.rows))
                               for g in range(k, -(-M // geo.rows), K)] or [np.zeros(0, int)])
        for c in range(geo.cluster):
            v0, v1 = c * geo.slice_vectors, min(geo.vectors, (c + 1) * geo.slice_vectors)
            owned = (v0 + np.arange(geo.tpr)[:, None] + np.arange(chunks)[None, :] * geo.tpr).reshape(-1)
            owned = owned[owned < v1]
            count[np.ix_(rows, owned)] += 1
    return count


def test_index_mapping_covers_every_row_and_vector_exactly_once():
    genomes = FAM.sample_genomes(8, 6)
    cases = [c for c in _cases() if c.params["M"] * c.params["N"] <= 2_000_000]
    checked = 0
    for g in genomes:
        for case in cases:
            geo = FAMILY.geometry(g, case)
            if geo is None:
                continue
            count = _coverage(geo, case.params["M"], g["chunks"])
            assert count.min() == 1 and count.max() == 1, (dict(g), case.id)
            checked += 1
    assert checked > 50


def _dynamic_visits(nk: int, groups: int, stages: int, rng: random.Random) -> list[list[int]]:
    """The template's dynamic schedule (BWD_SCHED_DYNAMIC), clusters interleaved at random: each
    cluster starts by fetching `stages` groups (atom.add(ctr, S)), then per visit fetches one more
    and computes the head of its queue while that head is < groups. Returns each cluster's visited
    groups. Clusters that start late (any order) are modelled by the random interleaving."""
    ctr = 0
    queues: dict[int, list[int]] = {}
    visits: dict[int, list[int]] = {k: [] for k in range(nk)}
    pending = list(range(nk))
    rng.shuffle(pending)
    active = []
    while pending or active:
        if pending and (not active or rng.random() < 0.3):
            k = pending.pop()
            queues[k] = list(range(ctr, ctr + stages))
            ctr += stages
            active.append(k)
            continue
        k = rng.choice(active)
        q = queues[k]
        if q[0] >= groups:
            active.remove(k)
            continue
        nxt, ctr = ctr, ctr + 1
        visits[k].append(q[0])
        queues[k] = q[1:] + [nxt]
    return [visits[k] for k in range(nk)]


def test_dynamic_schedule_visits_every_group_once_in_any_interleaving():
    """Every row group is computed exactly once, whatever order the clusters start and run in, and a
    cluster's groups come in increasing order (the counter only grows), so a cluster stops at its
    first group past the end and never skips one before it."""
    rng = random.Random(11)
    for _ in range(300):
        nk, groups, stages = rng.randint(2, 40), rng.randint(1, 400), rng.randint(1, 4)
        visits = _dynamic_visits(nk, groups, stages, rng)
        seen = sorted(g for v in visits for g in v)
        assert seen == list(range(groups)), (nk, groups, stages)
        assert all(v == sorted(v) for v in visits)


def test_seeds_file_is_valid_v3_and_launches_its_width_range():
    """experiments/seeds/rmsnorm_bwd_v3.json (the search's seed_genomes): every genome valid in
    today's space under its recorded key, launching every bf16/fp16 benchmark case of the widths it
    is seeded for, with the bytes-ahead figures the family's model gives (the file is what the model
    says, not numbers typed in). The compile test below builds every seed (no spills)."""
    seeds = _seeds()
    assert len({s["key"] for s in seeds}) == len(seeds) >= 6
    assert any(s["genome"]["row_schedule"] == "dynamic" for s in seeds)
    covered = set()
    for s in seeds:
        g = SPACE.make(s["genome"])
        assert g.key == s["key"], s["name"]
        lo, hi = _widths(s["for_widths"])
        for case in FAMILY.benchmark_cases("quack:bf16,fp16"):
            M, N, dt = case.params["M"], case.params["N"], case.params["dtype"]
            if lo <= N <= hi:
                assert FAMILY.launch(g, case) is not None, (s["name"], case.id)
                covered.add(N)
            if dt == "bf16":
                want = FAM.bytes_ahead_per_sm(g, M, N, dt)
                assert s["kib_ahead_per_sm_bf16"].get(str(N)) == (None if want is None else want // 1024), (s["name"], N)
    assert covered == {c.params["N"] for c in FAMILY.benchmark_cases("quack:bf16")}


def _won(text: str) -> tuple[str, int, float]:
    dt, rng = text.split()
    lo, hi = rng.split("-")
    return dt, 1 if lo == "1" else _widths(f"{lo}-{lo}")[0], float("inf") if hi == "inf" else _widths(f"{hi}-{hi}")[0]


def test_seeds_file_v4_holds_todays_winners_and_the_async_genomes():
    """experiments/seeds/rmsnorm_bwd_v4.json: every genome that won a case in session 12's dispatch
    (results/archive/session12/callC/rmsnorm_bwd_dispatch.json) under its recorded key, launching every
    benchmark case of the ranges it won ('won'); and 2-4 genomes of cluster_exchange = async, which
    launch every bf16/fp16 case of their widths (all >= 32K: the clustered rows), each with a "why"
    naming a predicted fraction of the roofline. Every file figure of bytes ahead is the model's."""
    import json  # noqa: PLC0415
    seeds = _seeds(SEEDS_V4)
    assert len({s["key"] for s in seeds}) == len(seeds)
    bench = FAMILY.benchmark_cases("quack:bf16,fp16,fp32")
    winners = [s for s in seeds if "won" in s]
    new = [s for s in seeds if "won" not in s]
    if DISPATCH_S12.exists():
        want = {e["key"] for e in json.loads(DISPATCH_S12.read_text())["entries"]}
        assert {s["key"] for s in winners} == want
    for s in seeds:
        g = SPACE.make(s["genome"])
        assert SPACE.is_valid(g) and g.key == s["key"], s["name"]
        for case in FAMILY.benchmark_cases("quack:bf16"):
            want_b = FAM.bytes_ahead_per_sm(g, case.params["M"], case.params["N"], "bf16")
            assert s["kib_ahead_per_sm_bf16"].get(str(case.params["N"])) == (None if want_b is None else want_b // 1024)
    for s in winners:
        g = SPACE.make(s["genome"])
        assert g["cluster_exchange"] == "barrier"
        for text in s["won"]:
            dt, lo, hi = _won(text)
            hit = [c for c in bench if c.params["dtype"] == dt and lo <= c.params["N"] <= hi]
            assert hit, (s["name"], text)
            assert all(FAMILY.launch(g, c) is not None for c in hit), (s["name"], text)
    assert 2 <= len(new) <= 4
    for s in new:
        g = SPACE.make(s["genome"])
        assert g["cluster_exchange"] == "async" and g["cluster"] > 1
        assert re.search(r"predicted 0\.\d\d-0\.\d\d of the roofline", s["why"], re.I), s["name"]
        lo, hi = _widths(s["for_widths"])
        assert lo >= 32768
        hit = [c for c in bench if c.params["dtype"] != "fp32" and lo <= c.params["N"] <= hi]
        assert hit and all(FAMILY.geometry(g, c) is not None and FAMILY.geometry(g, c).cluster > 1 for c in hit), s["name"]
    widest = max(_widths(s["for_widths"])[1] for s in new)
    assert widest == 262144
    # the A/B probe file: the async seeds and two barrier twins, copied from this file (same keys)
    probe = _seeds(SEEDS_V4.with_name("rmsnorm_bwd_v4_async_probe.json"))
    assert {s["key"] for s in probe} <= {s["key"] for s in seeds} and {s["key"] for s in new} <= {s["key"] for s in probe}
    barrier = [SPACE.make(s["genome"]) for s in probe if s["genome"]["cluster_exchange"] == "barrier"]
    assert barrier and all(SPACE.make(dict(g, cluster_exchange="async")).key in {s["key"] for s in new} for g in barrier)


def _exchange_run(C: int, W: int, calls: int, parities: int, dyn: bool, rng: random.Random) -> str | None:
    """A model of row_reduce_async (template.cu) in one random interleaving: C CTAs of W warps; per
    call k (slot parity p = k % parities, waited phase parity (k // parities) & 1) warp 0 arms its
    CTA's barrier p with C x W (+1 with the dynamic schedule's group index) transactions, every warp
    sends one tagged value into slot [p][its rank][warp] of every CTA (st.async: delivered later, in
    any order, completing one transaction of the receiver's barrier p), CTA 0's warp 0 sends the
    group index into every CTA's xg[p], every warp waits (the hardware's parity test) and then reads
    all C x W slots (and xg). mbarrier: one pending arrival a phase, tx-count may go negative before
    the arm. Returns None, or what went wrong: a read of another call's value (a slot overwritten
    before it was read, or a wait that passed early) or a deadlock."""
    bars = {(c, p): [0, 1, 0] for c in range(C) for p in range(parities)}   # phase, pending, tx
    slot: dict[tuple, int] = {}
    flight: list[tuple] = []
    pc = {(c, w): [0, "arm", []] for c in range(C) for w in range(W)}      # call, step, sends left

    def settle(b):
        if b[1] == 0 and b[2] == 0:
            b[0], b[1] = b[0] + 1, 1

    while True:
        acts = [("deliver", i) for i in range(len(flight))]
        for cw, (k, step, left) in pc.items():
            if k == calls:
                continue
            if step == "wait":
                b = bars[(cw[0], k % parities)]
                if (b[0] & 1) == ((k // parities) & 1):
                    continue
            acts.append(("warp", cw))
        if not acts:
            return None if all(v[0] == calls for v in pc.values()) else "deadlock"
        kind, who = rng.choice(acts)
        if kind == "deliver":
            dst, p, key, tag = flight.pop(who)
            slot[(dst, p) + key] = tag
            b = bars[(dst, p)]
            b[2] -= 1
            settle(b)
            continue
        c, w = who
        k, step, left = pc[who]
        p = k % parities
        if step == "arm":
            if w == 0:
                b = bars[(c, p)]
                b[2] += C * W + (1 if dyn else 0)
                b[1] -= 1
                settle(b)
            left = [(d, ("x", c, w)) for d in range(C)] + ([(d, ("g",)) for d in range(C)] if dyn and c == 0 and w == 0 else [])
            rng.shuffle(left)
            pc[who] = [k, "send", left]
        elif step == "send":
            if left:
                d, key = left.pop()
                flight.append((d, p, key, k))
            else:
                pc[who] = [k, "wait", []]
        elif step == "wait":
            pc[who] = [k, "read", []]
        else:
            keys = [("x", s, v) for s in range(C) for v in range(W)] + ([("g",)] if dyn else [])
            bad = [key for key in keys if slot.get((c, p) + key) != k]
            if bad:
                return f"CTA {c} warp {w} call {k} read {[(key, slot.get((c, p) + key)) for key in bad][:3]}"
            pc[who] = [k + 1, "arm", []]


def test_async_exchange_protocol_holds_in_any_interleaving():
    """The two-parity protocol of cluster_exchange = async (no "empty" barriers, no cluster barrier)
    gives every warp the values of its own call in every interleaving the model draws, with and
    without the dynamic schedule's index on the same barrier; with one parity it does not (so the
    model can tell), which is why the template alternates two slots and two barriers."""
    rng = random.Random(12)
    for _ in range(400):
        C, W, dyn = rng.choice((2, 3, 4)), rng.randint(1, 3), rng.random() < 0.5
        got = _exchange_run(C, W, rng.randint(3, 8), 2, dyn, rng)
        assert got is None, (C, W, dyn, got)
    failures = [_exchange_run(rng.choice((2, 3)), rng.randint(1, 2), 6, 1, False, rng) for _ in range(200)]
    assert any(f is not None for f in failures)


def main_smem_ok(g, geo, itemsize: int) -> bool:
    # (staging = l2, space v5, stages nothing in shared memory: the accumulators at most)
    staged = g["stages"] * geo.rows * geo.tpr * g["chunks"] * g["vec_bytes"] * 2 if g["staging"] == "smem_async" else 0
    if g["dw_acc"] == "smem":
        want = staged + geo.rows * geo.tpr * g["chunks"] * (g["vec_bytes"] // itemsize) * 4
        return geo.shared_bytes == want and 0 < want <= 212 * 1024
    if g["staging"] != "smem_async":
        return geo.shared_bytes == 0
    return geo.shared_bytes == staged and 0 < staged <= 180 * 1024


def test_v1_genomes_keep_their_keys_and_render_without_the_v2_defines():
    v1 = SPACES["v1"].make(dict((k, DEFAULT[k]) for k in SPACES["v1"].names))
    v2 = SPACE.make(dict(v1))
    assert v2.key == v1.key and v2["staging"] == "regs" and v2["cluster_slack"] == 0
    src = FAMILY.render(v2)
    assert "#define BWD_STAGING" not in src.split("// RMSNorm backward")[0] and "staging=" not in src.splitlines()[0]
    staged = FAMILY.render(SPACE.make(dict(DEFAULT, staging="smem_async", load_cache="default", chunks=2)))
    assert '#define BWD_STAGING 1' in staged and '#define BWD_CPASYNC "cp.async.cg.shared.global"' in staged


def test_cluster_slack_removes_clusters_from_the_grid():
    case = FAMILY.make_case(8192, 262144, "bf16")
    a = FAMILY.geometry(DEFAULT, case)
    b = FAMILY.geometry(SPACE.make(dict(DEFAULT, cluster_slack=2)), case)
    assert a.cluster == b.cluster == 16 and b.grid == a.grid - 32


def _eefa2c4e() -> dict:
    """Session 19's static 262144 genome: d30696bb on the 7 clusters of 16 the driver holds."""
    import json  # noqa: PLC0415
    path = SEEDS_FILE.with_name("rmsnorm_bwd_v7_probe.json")
    return next(e["genome"] for e in json.loads(path.read_text())["genomes"]
                if e["name"] == "d30696bb_static_slack1")


def test_v8_only_adds_waves_a_launch_gene_of_static_schedules():
    """v8 adds waves (legacy 1): every v7 genome keeps its key, validity, source and grid; waves > 1
    needs the static schedule; a waves twin renders the same source (launch only)."""
    v7, v8 = SPACES["v7"], SPACES["v8"]
    assert v8.names == v7.names + ("waves",) and v8.gene("waves").legacy == 1
    for g in v7.sample_distinct(300, seed=11):
        twin = v8.make(dict(g))
        assert twin.key == g.key and twin["waves"] == 1
    e = _eefa2c4e()
    assert v8.is_valid(dict(e, waves=4))
    assert not v8.is_valid(dict(e, waves=4, row_schedule="dynamic"))
    body = lambda g: FAMILY.render(g).split("\n", 1)[1]     # noqa: E731  (line 1 names the genome)
    assert body(v8.make(dict(e, waves=4))) == body(v8.make(e))


@pytest.mark.parametrize("M, N, waves, clusters", [
    (8192, 262144, 1, 7), (8192, 262144, 2, 14), (8192, 262144, 4, 28),
    (8192, 262144, 8, 28),          # 56 > max_parts 33: halved to the whole waves the workspace holds
    (16384, 131072, 8, 56), (32768, 65536, 8, 56), (32768, 32768, 8, 56),
])
def test_waves_launch_whole_waves_of_clusters_within_the_workspace(M, N, waves, clusters):
    g = SPACE.make(dict(_eefa2c4e(), waves=waves))
    case = FAMILY.make_case(M, N, "bf16")
    geo = FAMILY.geometry(g, case)
    assert geo.cluster == 16 and geo.grid == clusters * 16 and geo.parts == clusters
    assert geo.waves == clusters // 7 and clusters <= OP.max_parts(M, N)
    assert clusters % 7 == 0                                 # never a partial wave
    one = FAMILY.geometry(SPACE.make(_eefa2c4e()), case)
    assert (geo.tpr, geo.rows, geo.shared_bytes) == (one.tpr, one.rows, one.shared_bytes)
    # the in-flight model counts the resident clusters, not the waiting ones
    assert FAM.bytes_ahead_per_sm(g, M, N, "bf16") == FAM.bytes_ahead_per_sm(SPACE.make(_eefa2c4e()), M, N, "bf16")
    # the reduction reads every partial row the main kernel wrote
    launches = FAMILY.launch(g, case)
    assert launches[-1].kernel == "bwd_dw_reduce" and int(launches[-1].args[2]) == clusters


def test_waves_leave_unclustered_launches_alone():
    g = SPACE.make(dict(_eefa2c4e(), waves=8))
    for M, N in ((32768, 1024), (32768, 4096), (32768, 16384)):
        case = FAMILY.make_case(M, N, "bf16")
        a, b = FAMILY.geometry(g, case), FAMILY.geometry(SPACE.make(_eefa2c4e()), case)
        if a is not None and a.cluster == 1:
            assert a == b


def test_grid_is_persistent_and_clamped_to_residency():
    g = SPACE.make(dict(DEFAULT, cta_threads=128, chunks=1, cluster=1, ctas_per_sm=16))
    geo = FAMILY.geometry(g, FAMILY.make_case(32768, 1024, "bf16"))
    assert geo.tpr == 128 and geo.rows == 1
    assert geo.grid == 132 * min(16, FAM.resident_ctas(g, 128))
    small = FAMILY.geometry(g, FAMILY.make_case(7, 1024, "bf16"))
    assert small.grid == 7                      # never more CTAs than row groups


# -- compile and SASS -----------------------------------------------------------------------------
def _compile(tmp: Path, name: str, src: str) -> tuple[int, str, Path]:
    nvcc = shutil.which("nvcc")
    cu, cubin = tmp / f"{name}.cu", tmp / f"{name}.cubin"
    cu.write_text(src)
    p = subprocess.run([nvcc, "-cubin", "-gencode", "arch=compute_90a,code=sm_90a", "-O3", "-std=c++17",
                        "-Xptxas", "-v", "-o", str(cubin), str(cu)], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr, cubin


def _report(log: str) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    name = None
    for line in log.splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            name = m.group(1)
            out[name] = {}
        elif name and (m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores", line)):
            out[name].update(stack=int(m.group(1)), spill=int(m.group(2)))
        elif name and (m := re.search(r"Used (\d+) registers", line)):
            sm = re.search(r"(\d+) bytes smem", line)
            out[name].update(registers=int(m.group(1)), smem=int(sm.group(1)) if sm else 0)
    return out


def _cuobjdump() -> str | None:
    """cuobjdump on the PATH, or the one of the nvidia-cuda-cupti/nvcc wheels (the dev extra)."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import nvidia  # noqa: PLC0415
    except ImportError:
        return None
    for base in nvidia.__path__:
        p = Path(base) / "cu13" / "bin" / "cuobjdump"
        if p.exists():
            return str(p)
    return None


def _sass(cubin: Path, entry: str) -> str:
    tool = _cuobjdump()
    return subprocess.run([tool, "-sass", "-fun", entry, str(cubin)], capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.slow
def test_sample_compiles_without_spills_and_keeps_its_promises(tmp_path):
    if shutil.which("nvcc") is None or _cuobjdump() is None:
        pytest.skip("nvcc/cuobjdump not found: install the CUDA toolkit to compile sm_90a cubins")
    from fitness.sass import find  # noqa: PLC0415
    genomes = FAM.sample_genomes(COMPILE_SAMPLE, 9)
    genomes += [g for g in (SPACE.make(s["genome"]) for s in _seeds()) if g not in genomes]
    genomes += [g for g in (SPACE.make(s["genome"]) for s in _seeds(SEEDS_V4)) if g not in genomes]
    genomes += [g for g in (SPACE.make(s["genome"]) for s in _seeds(SEEDS_V5)) if g not in genomes]
    jobs = [(f"g{i}", FAMILY.render(g), g) for i, g in enumerate(genomes)]
    with ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as ex:
        results = list(ex.map(lambda j: (j, _compile(tmp_path, j[0], j[1])), jobs))
    regs = []
    for (name, _, g), (rc, log, cubin) in results:
        assert rc == 0, f"{name} {dict(g)}:\n{log[-3000:]}"
        rep = _report(log)
        expected = {FAM.entry_name(d, c) for d in FAMILY.dtypes for c in {1, g["cluster"]}}
        expected |= {"bwd_dw_reduce", "bwd_dw_zero"} | ({"bwd_sched_init"} if g["row_schedule"] == "dynamic" else set())
        assert expected == set(rep), (name, sorted(rep))
        for fn, r in rep.items():
            assert r["spill"] == 0 and r["stack"] == 0, (name, fn, r, dict(g))
            assert r["smem"] <= SMEM_STATIC_LIMIT, (name, fn, r)
            if fn.startswith("rmsnorm_bwd_"):
                assert r["registers"] <= register_cap(g), (name, fn, r, dict(g))
                regs.append(r["registers"])
        for d in FAMILY.dtypes:
            for c in {1, g["cluster"]}:
                sass = _sass(cubin, FAM.entry_name(d, c))
                promised = FAMILY.promises(g)
                if c == 1:          # the cluster barrier and the row counter live in the clustered entry
                    promised = {k: v for k, v in promised.items() if not k.startswith("cluster_")}
                for what, prefixes in promised.items():
                    assert find(sass, prefixes), f"{name} {FAM.entry_name(d, c)} promises {what} {prefixes}: {dict(g)}"
                assert not find(sass, ["LDL", "STL"]), name
                # atomics only in the atomic variant; partial rows are plain stores; the row counter's
                # atom.add only in a dynamic genome's clustered entry
                assert bool(find(sass, ["REDG.E.ADD.F32", "RED.E.ADD.F32"])) == (g["dw_reduce"] == "atomic"), (name, d, c)
                assert bool(find(sass, ["ATOMG.E.ADD"])) == (c > 1 and g["row_schedule"] == "dynamic"), (name, d, c)
                if g["vec_bytes"] == 8 and g["load_cache"] != "nc" and g["staging"] == "regs":
                    wide = [p.replace(".64", ".128") for p in promised["x_dy_loads"]]
                    assert not find(sass, wide), (name, wide)
                if c > 1:
                    assert find(sass, ["UCGABAR_ARV"]), name
                    remote = ["STAS"] if g["cluster_exchange"] == "async" else ["ST.E"]
                    assert find(sass, remote), name
    print(f"compiled {len(results)} genomes; main-kernel registers {min(regs)}..{max(regs)}")


@pytest.mark.slow
def test_genes_change_the_machine_code(tmp_path):
    """One gene at a time from DEFAULT, the bf16 entry's SASS: vector width (LDG.E.128 -> .64),
    atomics (RED appears), rstd recomputed (MUFU.RSQ, no rstd load), weight in registers (fewer
    LDG in the row loop), L2 prefetch (LTC256B)."""
    if shutil.which("nvcc") is None or _cuobjdump() is None:
        pytest.skip("nvcc/cuobjdump not found")
    variants = {
        "base": DEFAULT,
        "vec8": SPACE.make(dict(DEFAULT, vec_bytes=8, chunks=8)),
        "atomic": SPACE.make(dict(DEFAULT, dw_reduce="atomic")),
        "recompute": SPACE.make(dict(DEFAULT, rstd_mode="recompute")),
        "prefetch": SPACE.make(dict(DEFAULT, l2_prefetch="256B")),
    }
    with ThreadPoolExecutor(2) as ex:
        built = dict(zip(variants, ex.map(lambda kv: _compile(tmp_path, kv[0], FAMILY.render(kv[1])),
                                          variants.items())))
    sass = {k: _sass(cubin, "rmsnorm_bwd_bf16") for k, (rc, log, cubin) in built.items() if rc == 0}
    assert set(sass) == set(variants)
    count = lambda text, op: len(re.findall(op, text))  # noqa: E731
    assert count(sass["base"], r"LDG\.E\.NA\.128") > 0 and count(sass["base"], r"LDG\.E\.NA\.64") == 0
    assert count(sass["vec8"], r"LDG\.E\.NA\.64") > 0 and count(sass["vec8"], r"LDG\.E\.NA\.128") == 0
    assert count(sass["base"], r"REDG?\.E\.ADD") == 0 and count(sass["atomic"], r"REDG\.E\.ADD\.F32") > 0
    assert count(sass["recompute"], r"MUFU\.RSQ") > count(sass["base"], r"MUFU\.RSQ")
    assert count(sass["prefetch"], r"LTC256B") > 0 and count(sass["base"], r"LTC256B") == 0


def _row_loop(sass: str, marker: str) -> list[str]:
    """The instructions of the smallest loop (a backward BRA and its target) around the first
    instruction that starts with `marker`."""
    ins = [(int(a, 16), t.strip()) for a, t in re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", sass)]
    first = min(a for a, t in ins if re.sub(r"^@!?U?P\w+\s+", "", t).startswith(marker))
    spans = []
    for a, t in ins:
        m = re.search(r"\bBRA\s+(?:`?\(?[!U]*P\w+\)?,\s*)?0x([0-9a-f]+)", t)
        if m and int(m.group(1), 16) <= a:
            spans.append((int(m.group(1), 16), a))
    lo, hi = min((sp for sp in spans if sp[0] <= first <= sp[1]), key=lambda sp: sp[1] - sp[0])
    return [t for a, t in ins if lo <= a <= hi]


@pytest.mark.slow
def test_async_exchange_row_loop_has_no_fence_or_cluster_barrier(tmp_path):
    """The v4 allele in the SASS: the clustered entry's row loop (around the ring's cp.async wait,
    DEPBAR.LE) of today's 32K-64K winner (92c58bb9, cluster_exchange = barrier) holds the
    MEMBAR.ALL.GPU, UCGABAR_ARV/WAIT and CCTL.IVALL of barrier.cluster.arrive.release/wait.acquire;
    its async twin's loop holds st.async (STAS) and the mbarrier arm and wait (SYNCS) and none of
    those, nor a CTA barrier (BAR.SYNC); both compile without spills."""
    if shutil.which("nvcc") is None or _cuobjdump() is None:
        pytest.skip("nvcc/cuobjdump not found")
    seeds = {s["key"][:8]: s for s in _seeds(SEEDS_V4)}
    base = SPACE.make(seeds["92c58bb9"]["genome"])
    twin = SPACE.make(dict(base, cluster_exchange="async"))
    assert twin.key in {s["key"] for s in seeds.values()}
    loops = {}
    for name, g in (("barrier", base), ("async", twin)):
        rc, log, cubin = _compile(tmp_path, name, FAMILY.render(g))
        assert rc == 0, log[-2000:]
        assert all(r["spill"] == 0 for r in _report(log).values()), log
        loops[name] = " ".join(_row_loop(_sass(cubin, FAM.entry_name("bf16", g["cluster"])), "DEPBAR.LE"))
    for op in ("MEMBAR.ALL.GPU", "UCGABAR_ARV", "UCGABAR_WAIT", "CCTL.IVALL"):
        assert op in loops["barrier"] and op not in loops["async"], op
    assert "BAR.SYNC" not in loops["async"] and "STAS" in loops["async"]
    assert "SYNCS.ARRIVE.TRANS64" in loops["async"] and "SYNCS.PHASECHK.TRANS64" in loops["async"]


# -- space v5: staging = l2, vector_loop = rolled4 ------------------------------------------------
def _v5_new() -> list[dict]:
    return [s for s in _seeds(SEEDS_V5) if s["genome"].get("staging") == "l2"]


def test_v4_stays_loadable_and_unchanged_under_v5():
    """Recorded runs name v4: its staging and vector_loop genes keep their options (no l2, no
    rolled4), and every v4 seed has the same key in v5 and renders without the v5 defines."""
    v4, v5 = SPACES["v4"], SPACES["v5"]
    assert "l2" not in v4.gene("staging").options and "rolled4" not in v4.gene("vector_loop").options
    assert set(v5.names) == set(v4.names)
    for s in _seeds(SEEDS_V4):
        old, new = v4.make(s["genome"]), v5.make(s["genome"])
        assert old.key == new.key == s["key"]
        head = FAMILY.render(new).split("// RMSNorm backward")[0]
        assert "BWD_L2" not in head and "#define BWD_ROLLED 4" not in head
    assert v4.is_valid(_in(v4, DEFAULT)) and not v4.is_valid(dict(_in(v4, DEFAULT), staging="l2", dw_acc="smem"))


# -- space v6: dw_update = shadow --------------------------------------------------------------------
#: sha256 of FAMILY.render(DEFAULT): the text v5 genomes were judged with (session 18 checked it equal
#: to the render before v6's //@dw_update regions existed). A change here re-keys every recorded genome's
#: compile: put new code in a region of a new gene instead, or re-judge and update this on purpose.
DEFAULT_RENDER_SHA256 = "2b7e3478a9f7bbcd148027b59bcba588de69853e0620dec49667771533574dc7"


def test_v5_stays_loadable_and_unchanged_under_v6():
    """Recorded runs name v5: every v5 seed keeps its key in v6 (dw_update = pass2, the legacy value)
    and renders without the shadow's code or markers; the DEFAULT renders byte for byte as before."""
    import hashlib  # noqa: PLC0415
    v5, v6 = SPACES["v5"], SPACES["v6"]
    assert set(v6.names) - set(v5.names) == {"dw_update"} and v6.gene("dw_update").legacy == "pass2"
    for s in _seeds(SEEDS_V5):
        old, new = v5.make(s["genome"]), v6.make(s["genome"])
        assert old.key == new.key and new["dw_update"] == "pass2"
        src = FAMILY.render(new)
        assert "BWD_DW_SHADOW" not in src and "row_send_async" not in src and "\n//@" not in src
    assert hashlib.sha256(FAMILY.render(DEFAULT).encode()).hexdigest() == DEFAULT_RENDER_SHA256
    twin = v6.make(dict(_in(v6, DEFAULT), dw_update="shadow"))
    src = FAMILY.render(twin)
    assert twin.key != DEFAULT.key and "#define BWD_DW_SHADOW 1" in src and "row_finish_async" in src
    assert "\n//@" not in src
    assert not v6.is_valid(dict(_in(v6, DEFAULT), dw_update="shadow", rstd_mode="recompute"))   # no rstd before the exchange


def _between_send_and_wait(sass: str) -> dict[str, int]:
    """Instructions between the last st.async of a row exchange (STAS) and the mbarrier wait after it."""
    ops = [m.group(1) for line in sass.splitlines()
           if (m := re.search(r"\*/\s+(?:@!?P\d+\s+)?([A-Z][A-Z0-9._]*)", line))]
    wait = next(i for i, o in enumerate(ops) if o.startswith("SYNCS.PHASECHK") and "STAS" in ops[:i])
    send = max(i for i in range(wait) if ops[i] == "STAS")
    seg = ops[send:wait]
    return {"STS": sum(o.startswith("STS") for o in seg), "LDS": sum(o.startswith("LDS") for o in seg),
            "FFMA": sum(o == "FFMA" for o in seg)}


@pytest.mark.slow
def test_shadow_moves_dw_into_the_exchange_wait(tmp_path):
    """d30696bb (the 262144 genome: clusters of 16, st.async exchange, dw in shared memory) and its
    shadow twin: both compile without spills, and only the twin accumulates dw (its shared-memory
    loads, FFMAs and stores) between sending the row sums and waiting for them."""
    if shutil.which("nvcc") is None or _cuobjdump() is None:
        pytest.skip("nvcc/cuobjdump not found: install the CUDA toolkit to compile sm_90a cubins")
    base = next(SPACE.make(s["genome"]) for s in _seeds(SEEDS_V5) if SPACE.make(s["genome"]).key.startswith("d30696bb"))
    seen = {}
    for upd in ("pass2", "shadow"):
        g = SPACE.make(dict(base, dw_update=upd))
        rc, log, cubin = _compile(tmp_path, upd, FAMILY.render(g))
        assert rc == 0, log[-2000:]
        rep = _report(log)
        assert all(v.get("spill", 0) == 0 and v.get("stack", 0) == 0 for v in rep.values()), rep
        seen[upd] = _between_send_and_wait(_sass(cubin, "rmsnorm_bwd_bf16_c16"))
    assert seen["pass2"] == {"STS": 0, "LDS": 0, "FFMA": 0}
    # 4 vectors of 8 bf16: x, dy and the accumulators read, 8 FFMAs each, the accumulators written back
    assert seen["shadow"]["FFMA"] >= 32 and seen["shadow"]["STS"] >= 8 and seen["shadow"]["LDS"] >= 16, seen


def test_l2_staging_fits_131072_and_262144_at_two_ctas_per_sm():
    """The point of staging = l2 (README "Session 13"): shared memory holds only the dw accumulators,
    so a 2048-vector slice (131072 bf16 over 8 CTAs, 262144 over 16) runs two CTAs per SM, where the
    same genome staged in shared memory needs 192 KB a CTA and cannot be placed twice."""
    new = {s["name"]: SPACE.make(s["genome"]) for s in _v5_new()}
    for name, N, M, C in (("l2_2sm_256x8_c8_s2", 131072, 16384, 8), ("l2_2sm_256x8_c16_s2", 262144, 8192, 16)):
        g = new[name]
        geo = FAM.geometry(g, M, N, "bf16")
        assert geo is not None and geo.cluster == C and geo.tpr == 256 and geo.rows == 1
        assert geo.shared_bytes == 256 * 8 * 8 * 4                    # the fp32 accumulators only
        assert FAM.resident_ctas(g, 256, geo.shared_bytes) == 2 and geo.grid == 132 * 2 // C * C
        staged = dict(g, staging="smem_async", vector_loop="unrolled")
        assert not SPACES["v6"].is_valid(staged)                      # v6's register estimate; v7
        geo_s = FAM.geometry(SPACE.make(staged), M, N, "bf16")         # admits it, at one CTA an SM:
        assert geo_s.shared_bytes == 192 * 1024 and FAM.resident_ctas(staged, 256, geo_s.shared_bytes) == 1
        assert FAM.l2_bytes_held(g, M, N, "bf16") == geo.parts * g["stages"] * N * 2 * 2
    assert FAM.l2_bytes_held(DEFAULT, 32768, 4096, "bf16") is None
    assert "#define BWD_L2 1" in FAMILY.render(new["l2_2sm_256x8_c8_s2"])
    assert "#define BWD_ROLLED 4" in FAMILY.render(new["l2_2sm_256x8_c8_s2"])


def test_seeds_file_v5_carries_v4_and_adds_l2_genomes():
    """experiments/seeds/rmsnorm_bwd_v5.json: every v4 seed under its key, then 3-5 staging = l2
    genomes that launch every bf16/fp16 case of their widths clustered, each with a predicted
    fraction of the roofline and the model's figures; the probe file is a subset of at most six
    holding every new genome."""
    v4 = _seeds(SEEDS_V4)
    seeds = _seeds(SEEDS_V5)
    assert [s["key"] for s in seeds[:len(v4)]] == [s["key"] for s in v4]
    assert len({s["key"] for s in seeds}) == len(seeds)
    new = _v5_new()
    assert len(seeds) == len(v4) + len(new) and 3 <= len(new) <= 5
    bench = FAMILY.benchmark_cases("quack:bf16,fp16,fp32")
    for s in seeds:
        g = SPACE.make(s["genome"])
        assert SPACE.is_valid(g) and g.key == s["key"], s["name"]
    for s in new:
        g = SPACE.make(s["genome"])
        assert re.search(r"0\.\d\d-0\.\d\d of the roofline", s["why"]), s["name"]
        lo, hi = _widths(s["for_widths"])
        hit = [c for c in bench if c.params["dtype"] != "fp32" and lo <= c.params["N"] <= hi]
        assert hit and all((FAMILY.geometry(g, c) or FAM.Geometry(1, 0, 0, 0, 0, 0, 0, 0)).cluster > 1 for c in hit), s["name"]
        for case in FAMILY.benchmark_cases("quack:bf16"):
            M, N = case.params["M"], case.params["N"]
            b, held = FAM.bytes_ahead_per_sm(g, M, N, "bf16"), FAM.l2_bytes_held(g, M, N, "bf16")
            assert s["kib_ahead_per_sm_bf16"][str(N)] == (None if b is None else b // 1024)
            assert s["l2_mib_held_bf16"][str(N)] == (None if held is None else round(held / 2**20, 1))
    assert max(_widths(s["for_widths"])[1] for s in new) == 262144
    probe = _seeds(SEEDS_V5.with_name("rmsnorm_bwd_v5_probe.json"))
    assert len(probe) <= 6 and {s["key"] for s in new} <= {s["key"] for s in probe} <= {s["key"] for s in seeds}


@pytest.mark.slow
def test_l2_staging_row_loop_prefetches_and_reads_global_memory(tmp_path):
    """The v5 allele in the SASS of the clustered bf16 entry of every l2 seed: bulk L2 prefetches
    (UBLKPF.L2) and 128-bit global loads of x and dy in the row loop (around the mbarrier arm,
    SYNCS.ARRIVE.TRANS64), no cp.async (LDGSTS) anywhere, no fence or cluster barrier in the loop,
    no spills, registers within the cap and the v5 estimate."""
    if shutil.which("nvcc") is None or _cuobjdump() is None:
        pytest.skip("nvcc/cuobjdump not found")
    for s in _v5_new():
        g = SPACE.make(s["genome"])
        rc, log, cubin = _compile(tmp_path, g.key[:8], FAMILY.render(g))
        assert rc == 0, log[-2000:]
        for fn, r in _report(log).items():
            assert r["spill"] == 0 and r["stack"] == 0, (s["name"], fn, r)
            if fn.startswith("rmsnorm_bwd_"):
                assert r["registers"] <= min(register_cap(g), register_demand_v5(g)), (s["name"], fn, r)
        sass = _sass(cubin, FAM.entry_name("bf16", g["cluster"]))
        assert "LDGSTS" not in sass
        loop = " ".join(_row_loop(sass, "SYNCS.ARRIVE.TRANS64"))
        assert "UBLKPF.L2" in loop and "LDG.E.128" in loop and "STAS" in loop, s["name"]
        for op in ("MEMBAR", "UCGABAR_ARV", "UCGABAR_WAIT", "CCTL.IVALL", "BAR.SYNC"):
            assert op not in loop, (s["name"], op)


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found")
def test_bulk_prefetch_spans_are_aligned_lines_inside_the_slice():
    """Session 14 on the H200: three staging = l2 genomes with 8-byte vectors died of CUDA error
    716 (misaligned address) on CHECK's odd rows (1 x 4104, 1 x 8200): a slice of 4-element bf16
    vectors starting at an odd vector is not 16-byte aligned, and cp.async.bulk.prefetch.L2 takes
    nothing else. template.cu's bulk_span (its marked region, compiled for the host) trims each
    span inward to whole 16-byte lines. Checked on the three recorded failures' own cases (the
    untrimmed span was misaligned there) and on every l2 genome of the samples and seeds x every
    CHECK case x every cluster rank x first and last row: aligned, a multiple of 16, inside the
    slice, under 16 bytes lost at each edge."""
    import ctypes  # noqa: PLC0415
    import gzip  # noqa: PLC0415
    import json  # noqa: PLC0415

    import cuda_host  # noqa: PLC0415
    from fitness.records import Evaluation, Status  # noqa: PLC0415

    body = re.search(r"// >>> bulk_span\n(.*?)// <<< bulk_span", FAM.TEMPLATE.read_text(), re.DOTALL).group(1)
    lib = cuda_host.host_library("#define __host__\n" + body, (
        'extern "C" unsigned span(unsigned long long a, unsigned bytes, unsigned long long* lo) {\n'
        "    return bulk_span(a, bytes, lo);\n}\n"))
    lib.span.restype = ctypes.c_uint
    lib.span.argtypes = [ctypes.c_ulonglong, ctypes.c_uint, ctypes.POINTER(ctypes.c_ulonglong)]
    base = 0x7F0000000000                                   # a 256-byte aligned allocation

    def spans(g, M, N, dtype):
        geo = FAM.geometry(g, M, N, dtype)
        if geo is None:
            return
        item = FAM._ITEMSIZE[dtype]
        E = g["vec_bytes"] // item
        for rank in range(geo.cluster):
            v0 = rank * geo.slice_vectors
            v1 = min(geo.vectors, v0 + geo.slice_vectors)
            for row in {0, M - 1}:
                if v1 > v0:
                    yield base + (row * N + v0 * E) * item, (v1 - v0) * E * item

    record = json.loads(gzip.decompress((Path(__file__).resolve().parent.parent / "results" / "archive"
                                         / "session14" / "rmsnorm_bwd_h200_run.json.gz").read_bytes()))
    failed = [Evaluation.from_dict(e) for e in record["evaluations"]]
    failed = [e for e in failed if e.status is Status.RUNTIME_ERROR and "CUDA error 716" in e.message]
    if failed:                                              # the v5 record of session 14
        assert len(failed) == 3 and all(e.genome["staging"] == "l2" and e.genome["vec_bytes"] == 8 for e in failed)
        for e in failed:
            case = re.search(r"(bf16|fp16|fp32)/(\d+)x(\d+): RUNTIME_ERROR", e.message)
            M, N = int(case.group(2)), int(case.group(3))
            assert any(a % 16 or b % 16 for a, b in spans(SPACE.make(e.genome), M, N, case.group(1))), e.key
    genomes = [g for g in FAM.sample_genomes(0) if g["staging"] == "l2"] + [SPACE.make(s["genome"]) for s in _v5_new()]
    genomes += [SPACE.make(dict(e.genome)) for e in failed]
    assert any(g["vec_bytes"] == 8 for g in genomes)
    checked = 0
    for g in genomes:
        for case in FAMILY.check_cases():
            p = case.params
            for a, b in spans(g, p["M"], p["N"], p["dtype"]):
                lo = ctypes.c_ulonglong()
                n = lib.span(a, b, ctypes.byref(lo))
                assert lo.value % 16 == 0 and n % 16 == 0, (g.key, case.id, a, b)
                assert a <= lo.value and lo.value + n <= a + b and lo.value - a < 16, (g.key, case.id)
                assert n == 0 or a + b - (lo.value + n) < 16
                checked += 1
    assert checked > 1000


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[1] / "experiments" / "seeds").glob("rmsnorm_bwd_v[56]*_probe.json")),
                         ids=lambda p: p.name)
def test_backward_probe_files_name_valid_genomes_with_a_reason_each(path):
    """The probe files experiments/device/bwd_probe.py --seeds reads (the next device call's
    questions): every genome valid in the space version its name says, a prediction's reason for each,
    no genome twice; session 15's sched probe holds the two genomes INT21_NOTES.md names, by their keys."""
    import json

    from genomes import load_space

    space = load_space("rmsnorm_bwd", path.name.split("_")[2])
    probe = json.loads(path.read_text())
    keys = []
    for entry in probe["genomes"]:
        assert space.violations(entry["genome"]) == [], (entry["name"], space.violations(entry["genome"]))
        assert entry["why"] and entry["name"]
        keys.append(space.make(entry["genome"]).key[:8])
    assert len(set(keys)) == len(keys)
    if path.name == "rmsnorm_bwd_v5_sched_probe.json":
        assert keys[:2] == ["b7d1aedd", "fb4fbace"]
    if path.name == "rmsnorm_bwd_v5_slack_probe.json":     # session 17: b7d1aedd on the 7 clusters held at once
        assert keys == ["eefa2c4e", "d30696bb", "b7d1aedd"]
        assert probe["genomes"][0]["genome"] == {**probe["genomes"][2]["genome"], "cluster_slack": 1}
    if path.name == "rmsnorm_bwd_v6_shadow_probe.json":    # session 18: the shadow twins beside session 17's three
        assert keys[:3] == ["eefa2c4e", "d30696bb", "b7d1aedd"]
        shadows = [e["genome"] for e in probe["genomes"][3:]]
        assert shadows and all(g["dw_update"] == "shadow" for g in shadows)
        assert space.make({**shadows[0], "dw_update": "pass2"}).key[:8] == "d30696bb"


# -- space v7: the register floor ------------------------------------------------------------------
def test_v7_only_widens_v6():
    """v7 changes one constraint (registers_fit: v6's estimate -> a floor) and widens one gene
    (cluster_slack up to 4): every v6 genome keeps its key and stays valid, and v7 admits more (the
    accumulators in registers beside shared staging above all)."""
    v6, v7 = SPACES["v6"], SPACES["v7"]
    assert v6.names == v7.names and [c.name for c in v6.constraints] == [c.name for c in v7.constraints]
    assert v7.gene("cluster_slack").high == 4 and v6.gene("cluster_slack").high == 2
    # every v6 genome of a fixed sample of 400 (drawn from v6: a draw from v7's genes finds few)
    for g in v6.sample_distinct(400, seed=7):
        assert v7.is_valid(dict(g)) and v7.make(dict(g)).key == g.key, dict(g)
    rng = random.Random(7)
    gained = 0
    for _ in range(20000):
        values = {g.name: g.sample(rng) for g in v7.genes}
        if not v6.is_valid(values) and v7.is_valid(values):
            gained += 1
    assert gained > 0
    d30 = _d30696bb()
    for values in (dict(d30, dw_acc="regs", weight_regs=False), dict(d30, cta_threads=256, chunks=8, dw_acc="regs")):
        assert v7.is_valid(values) and not v6.is_valid(values), values
    # what cannot fit stays out: 64 accumulators and 64 weights at 128 registers
    assert not v7.is_valid(dict(d30, chunks=8, cta_threads=256, dw_acc="regs", weight_regs=True, maxrreg=128))


def _d30696bb() -> dict:
    """The backward table's 262144 genome (experiments/seeds/rmsnorm_bwd_v6_shadow_probe.json)."""
    import json  # noqa: PLC0415
    path = SEEDS_FILE.with_name("rmsnorm_bwd_v6_shadow_probe.json")
    return next(e["genome"] for e in json.loads(path.read_text())["genomes"] if e["name"] == "d30696bb")


@pytest.mark.slow
def test_v7_register_floor_admits_what_compiles(tmp_path):
    """The genome v6 rejected that v7 exists for: d30696bb with dw in registers and the weight out of
    them (512 threads x 4 vectors at its cap of 128) compiles without a spill in every entry, where
    v6's estimate said it would not fit. And a v7 genome that does spill (256 threads x 8 vectors
    with dw in registers: 64 accumulators beside the hoisted shared reads) is failed by the judge's
    static check before any GPU time, with the spill named."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found: install the CUDA toolkit to compile sm_90a cubins")
    from fitness.compile import Compiler  # noqa: PLC0415
    from fitness.records import Status  # noqa: PLC0415
    from fitness.static_checks import classify, static_problems  # noqa: PLC0415
    d30 = _d30696bb()
    fits = SPACE.make(dict(d30, dw_acc="regs", weight_regs=False))
    spills = SPACE.make(dict(d30, cta_threads=256, chunks=8, dw_acc="regs", weight_regs=False))
    compiler = Compiler(tmp_path / "cache")
    got_fit, got_spill = compiler.compile_many([(FAMILY.render(g), FAMILY.compile_flags(g)) for g in (fits, spills)])
    assert got_fit.ok and got_spill.ok
    assert static_problems(got_fit, FAMILY, fits) == [], got_fit.kernels
    assert max(r.registers for r in got_fit.kernels.values()) <= register_cap(fits) == 128
    problems = static_problems(got_spill, FAMILY, spills)
    assert problems and any("spills" in p for p in problems), problems
    assert classify(got_spill, problems) is not Status.OK


# -- space v9: pass 2 from registers (pass2_data = regs) -------------------------------------------
def test_v9_only_adds_pass2_data_and_v8_genomes_render_as_before():
    """v9 adds pass2_data (legacy reread): every v8 genome keeps its key, validity and source (the
    template's //@pass2_data regions render nothing for it); a regs twin defines BWD_P2_REGS, holds
    pass 1's words (xk, dk) and reads no staging slot in pass 2; the constraints keep it to staged rows
    (smem_async, l2) with unrolled loops, and the register floor counts the held words."""
    from genomes.rmsnorm_bwd import held_registers, held_registers_v9  # noqa: PLC0415
    v8, v9 = SPACES["v8"], SPACES["v9"]
    assert v9.names == v8.names + ("pass2_data", "exchange_wait") and v9.gene("pass2_data").legacy == "reread"
    for g in v8.sample_distinct(300, seed=13):
        twin = v9.make(dict(g))
        assert twin.key == g.key and v9.is_valid(dict(twin)), dict(g)
    d30 = v9.make(_d30696bb())
    assert "BWD_P2_REGS" not in FAMILY.render(d30) and "xk[" not in FAMILY.render(d30)
    twin = v9.make(dict(d30, pass2_data="regs"))
    src = FAMILY.render(twin)
    assert twin.key != d30.key and "#define BWD_P2_REGS 1" in src and "BWD_HELD(j)" in src and "\n//@" not in src
    # pass 2 (after the row exchange) takes the held words: BWD_FETCH appears only in pass 1
    body = src.split("// pass 1: s[0]", 1)[1]
    assert body.count("BWD_FETCH(j)") == 1 and body.count("BWD_HELD(j)") == 1      # pass 2
    shadow = FAMILY.render(v9.make(dict(d30, pass2_data="regs", dw_update="shadow"))).split("// pass 1: s[0]", 1)[1]
    assert shadow.count("BWD_FETCH(j)") == 1 and shadow.count("BWD_HELD(j)") == 2   # pass 2 and the shadow
    assert held_registers_v9(twin) == held_registers(twin) + 2 * 4 * 4
    assert not v9.is_valid(dict(d30, staging="regs", stages=1, pass2_data="regs"))      # register staging holds it
    assert not v9.is_valid(dict(d30, pass2_data="regs", vector_loop="rolled", dw_acc="smem", weight_regs=False))
    assert v9.is_valid(dict(d30, staging="l2", pass2_data="regs"))


@pytest.mark.slow
def test_pass2_regs_reads_the_row_once_from_shared_memory(tmp_path):
    """d30696bb with the weight re-read (shared-memory staging, ring of 2) and its pass2_data = regs twin:
    both compile without spills in every entry, and the twin's clustered entry issues fewer shared
    loads (pass 2's x and dy reads gone, 8 LDS.128 of 4 vectors x 2 tensors) with the same cp.async
    copies. (With the weight in registers too, the twin's fp16 cluster entry spills 24 bytes at its
    cap of 128 while bf16 fits: session 22's ptxas; the judge fails such a genome at compile time.)"""
    if shutil.which("nvcc") is None or _cuobjdump() is None:
        pytest.skip("nvcc/cuobjdump not found: install the CUDA toolkit to compile sm_90a cubins")
    seen = {}
    for val in ("reread", "regs"):
        g = SPACE.make(dict(_d30696bb(), pass2_data=val, weight_regs=False))
        rc, log, cubin = _compile(tmp_path, val, FAMILY.render(g))
        assert rc == 0, log[-2000:]
        rep = _report(log)
        assert all(v.get("spill", 0) == 0 and v.get("stack", 0) == 0 for v in rep.values()), rep
        sass = _sass(cubin, "rmsnorm_bwd_bf16_c16")
        seen[val] = {"LDS.128": len(re.findall(r"\bLDS\.128\b", sass)), "LDGSTS": len(re.findall(r"\bLDGSTS", sass))}
    assert seen["regs"]["LDGSTS"] == seen["reread"]["LDGSTS"], seen
    assert seen["reread"]["LDS.128"] - seen["regs"]["LDS.128"] >= 8, seen


def test_v9_exchange_wait_suspend_is_one_hinted_try_wait_loop():
    """exchange_wait = suspend (v9, legacy poll): the async exchange's mbar_wait becomes one asm loop with
    a suspend-time hint; a poll genome renders the C++ loop as before; only async exchanges take it."""
    v9 = SPACES["v9"]
    d30 = v9.make(_d30696bb())
    assert d30["cluster_exchange"] == "async" and "BWD_WAIT_%=" not in FAMILY.render(d30)
    twin = v9.make(dict(d30, exchange_wait="suspend"))
    src = FAMILY.render(twin)
    assert twin.key != d30.key and "BWD_WAIT_%=" in src and "selp.u32 %0, 1, 0, p" not in src
    assert "\n//@" not in src
    assert not v9.is_valid(dict(d30, exchange_wait="suspend", cluster_exchange="barrier"))
