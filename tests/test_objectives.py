"""Objectives from per-case results: speedups, bandwidth, ceiling fraction, suspects."""

from __future__ import annotations

import math

import pytest

from fitness import objectives as obj
from fitness.records import CaseResult, Status


def case(cid, t, base=None, status=Status.OK, tbps=None, **others):
    baselines = {} if base is None else {"torch": base}
    baselines.update(others)
    return CaseResult(case=cid, status=status, time_us=t, baselines_us=baselines, tbps=tbps)


CASES = [case("a", 10.0, base=20.0, quack=10.0), case("b", 40.0, base=20.0, quack=20.0),
         case("c", 5.0)]                      # c: no baseline measured
BYTES = {"a": 20_000_000, "b": 40_000_000, "c": 1_000_000}


def test_speedups_exclude_cases_without_baseline():
    assert obj.speedups(CASES, "torch") == {"a": 2.0, "b": 0.5}
    assert obj.geomean_speedup(CASES, "torch") == pytest.approx(1.0)
    assert obj.min_speedup(CASES, "torch") == 0.5
    assert obj.geomean_speedup(CASES, "nothing") is None


def test_tbps_keeps_cases_without_baseline():
    # a: 20 MB / 10 us = 2 TB/s; b: 40 MB / 40 us = 1 TB/s; c: 1 MB / 5 us = 0.2 TB/s
    assert obj.mean_tbps(CASES, BYTES) == pytest.approx((2.0 + 1.0 + 0.2) / 3)
    assert obj.min_tbps(CASES, BYTES) == pytest.approx(0.2)
    mean, low = obj.ceiling_fraction(CASES, 4.0, BYTES)
    assert mean == pytest.approx((0.5 + 0.25 + 0.05) / 3) and low == pytest.approx(0.05)
    assert obj.ceiling_fraction(CASES, None, BYTES) is None
    assert obj.total_us(CASES) == 55.0


def test_tbps_falls_back_to_runner_figure():
    assert obj.mean_tbps([case("x", 10.0, tbps=3.0)]) == 3.0
    assert obj.mean_tbps([case("x", 10.0, tbps=3.0)], {"x": 10_000_000}) == pytest.approx(1.0)


def test_failed_and_untimed_cases_do_not_count():
    cases = [case("a", 10.0, base=20.0), case("b", 1.0, base=100.0, status=Status.WRONG_RESULT),
             case("c", None, base=5.0), case("d", 0.0, base=5.0)]
    assert obj.speedups(cases, "torch") == {"a": 2.0}
    assert obj.total_us(cases) == 10.0
    assert obj.compute(cases, "torch")["cases"] == 1.0


def test_compute_names_and_secondary_baselines():
    out = obj.compute(CASES, "torch", bytes_moved=BYTES, copy_ceiling_tbps=4.0,
                      other_baselines=("torch", "quack"))
    assert set(out) == {"geomean_speedup", "min_speedup", "geomean_speedup@quack", "min_speedup@quack",
                        "mean_tbps", "min_tbps", "ceiling_fraction", "min_ceiling_fraction", "total_us",
                        "cases"}
    assert out["geomean_speedup@quack"] == pytest.approx(math.sqrt(1.0 * 0.5))
    assert all(math.isfinite(v) for v in out.values())
    assert set(out) - {"geomean_speedup@quack", "min_speedup@quack"} <= set(obj.NAMES)


def test_compute_leaves_out_what_cannot_be_computed():
    out = obj.compute([case("c", 5.0)], "torch")
    assert "geomean_speedup" not in out and "ceiling_fraction" not in out and "mean_tbps" not in out
    assert out == {"total_us": 5.0, "cases": 1.0}
    assert obj.compute([], "torch") == {"cases": 0.0}


def test_is_suspect():
    # 4.27 TB/s ceiling; 42.7 MB cannot move in less than 10 us
    c = case("x", 10.0)
    assert not obj.is_suspect(c, 42_700_000, 4.27)
    assert not obj.is_suspect(case("x", 9.9), 42_700_000, 4.27)          # within the 2 % slack
    assert obj.is_suspect(case("x", 9.0), 42_700_000, 4.27)
    assert obj.is_suspect(case("x", 9.9), 42_700_000, 4.27, slack=1.0)
    assert not obj.is_suspect(case("x", 1.0), 42_700_000, None)        # no ceiling: cannot judge
    assert not obj.is_suspect(case("x", None), 42_700_000, 4.27)
    assert obj.suspect_cases([case("a", 1.0), case("b", 100.0), case("c", 1.0, status=Status.WRONG_RESULT)],
                             {"a": 42_700_000, "b": 42_700_000, "c": 42_700_000}, 4.27) == ["a"]


def test_a_case_faster_than_the_tensor_core_peak_is_suspect():
    """The roofline has two sides: a compute-bound case doing its fewest flops faster than the
    tensor-core peak is as impossible as a memory-bound one beating the copy ceiling."""
    from fitness import objectives as o
    from fitness.records import CaseResult, Status
    fast = CaseResult("gemm", Status.OK, time_us=50.0)           # 1e11 flops in 50 us = 2000 TFLOP/s
    slow = CaseResult("gemm2", Status.OK, time_us=200.0)         # 500 TFLOP/s
    flops = {"gemm": 10**11, "gemm2": 10**11}
    peak = o.TENSOR_PEAK_TFLOPS["sm_90a"]
    assert o.suspect_cases([fast, slow], {}, None, flops=flops, peak_tflops=peak) == ["gemm"]
    assert o.suspect_cases([fast, slow], {}, None) == []                     # flops not counted: no verdict
    assert not o.beats_compute_peak(CaseResult("x", Status.OK, time_us=None), 10**11, peak)
