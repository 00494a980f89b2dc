"""fitness.occupancy: resident CTAs and warps per SM from threads, ptxas registers and shared
memory (the CUDA occupancy calculator's arithmetic for sm_90), and its use by the analysis."""

from __future__ import annotations

import pytest

from fitness.family import Launch
from fitness.occupancy import SM90, Occupancy, launch_occupancy, resident


@pytest.mark.parametrize("threads, registers, shared, expected", [
    (256, 48, 0, Occupancy(5, 40, "registers")),        # 48 x 32 = 1536 per warp: 42 warps -> 5 CTAs of 8
    (256, 47, 0, Occupancy(5, 40, "registers")),        # rounded up to 48
    (256, 64, 0, Occupancy(4, 32, "registers")),
    (256, 70, 0, Occupancy(3, 24, "registers")),        # 72 x 32 = 2304: 28 warps -> 3 CTAs
    (256, 112, 0, Occupancy(2, 16, "registers")),
    (256, 32, 0, Occupancy(8, 64, "threads")),          # registers allow 8 too: the fixed limit is named
    (64, 32, 0, Occupancy(32, 64, "threads")),          # 32 CTAs: threads and the CTA limit tie
    (32, 32, 0, Occupancy(32, 32, "ctas")),
    (1024, 64, 0, Occupancy(1, 32, "registers")),     # 32 warps of 2048 fill the file; threads allow 2
    (256, 32, 100 * 1024, Occupancy(2, 16, "shared memory")),   # 102400 + 1024 reserved -> 2 per 228 KB
    (256, 32, 64 * 1024, Occupancy(3, 24, "shared memory")),
    (96, 40, 0, Occupancy(17, 51, "registers")),        # 3 warps of 1280 registers: 51 warps -> 17 CTAs
    (128, 256, 0, Occupancy(0, 0, "registers")),        # over 255 registers a thread: cannot launch
])
def test_resident_ctas_follow_the_occupancy_calculator(threads, registers, shared, expected):
    assert resident(threads, registers, shared) == expected


def test_shared_memory_counts_static_plus_dynamic_and_the_per_cta_reserve():
    # 228 KB / (56 KB + 1 KB reserved) = 4; one byte more and only 3 fit
    assert resident(128, 32, 57344).ctas == 4
    assert resident(128, 32, 57344 + 1).ctas == 3
    assert SM90.shared_bytes == 233472


def test_bad_threads_are_refused():
    with pytest.raises(ValueError, match="threads"):
        resident(0, 32, 0)


def test_launch_occupancy_reads_the_launched_kernels_report():
    launch = Launch(kernel="k_c4", grid=(1024, 1, 1), block=(64, 4, 1), args=(), shared_bytes=8192, cluster=(4, 1, 1))
    resources = {"k": {"registers": 32, "shared_bytes": 0}, "k_c4": {"registers": 70, "shared_bytes": 384}}
    assert launch_occupancy(launch, resources) == resident(256, 70, 8192 + 384)
    assert launch_occupancy(launch, {"k": {"registers": 32}}) is None


# -- in the analysis of the recorded run ----------------------------------------------------------
@pytest.fixture(scope="module")
def frames():
    from evo.analysis import load_run
    from tests.conftest import REPO

    return load_run(REPO / "results" / "archive" / "session6" / "rmsnorm_fwd_h200_run.json.gz")


def test_case_occupancy_of_a_recorded_pair(frames):
    """Session 6: 693f61a2 is 23ff93ed with weight_pipeline on; ptxas gave it 70 registers instead
    of 47 (bf16), so on bf16 rows of 16K an SM holds 3 of its 256-thread CTAs instead of 5."""
    from evo.analysis import case_occupancy

    occ = case_occupancy(frames).set_index(["key", "case"])
    a = occ.loc[("23ff93ed8f1a73ac2c98", "bf16/32768x16384")]
    b = occ.loc[("693f61a20d4a70b67aac", "bf16/32768x16384")]
    assert (a["ctas_per_sm"], a["warps_per_sm"], a["occupancy_limit"]) == (5, 40, "registers")
    assert (b["ctas_per_sm"], b["warps_per_sm"], b["occupancy_limit"]) == (3, 24, "registers")
    # the longest fp32 rows: 64 KB slices in clusters of 16 bound both by shared memory
    c = occ.loc[("e882a46ea555362e39fe", "fp32/8192x262144")]
    assert c["occupancy_limit"] == "shared memory"


def test_weight_batch_helps_where_it_keeps_the_warps_and_hurts_where_it_evicts_them(frames):
    from evo.analysis import one_gene_occupancy

    t = one_gene_occupancy(frames)
    row = {(r.gene, r.value_a, r.value_b, r.warps): r for r in t.itertuples()}
    same, fewer = row[("weight_batch", 2, 4, "same")], row[("weight_batch", 2, 4, "fewer")]
    assert same.cases == 14 and same.better == 14 and same.median_ratio > 1.03
    assert fewer.cases == 80 and fewer.worse >= 75 and fewer.median_ratio < 0.9
    pipe = row[("weight_pipeline", False, True, "fewer")]
    assert pipe.median_ratio < 0.85
