"""experiments/scripts/bench_rmsnorm.py: how a row of the final table is formed from the main pass
and QuACK's autotuned pass (every ratio from two times measured in one process)."""

from __future__ import annotations

import importlib.util

import pytest

from fitness.records import CaseResult
from tests.conftest import REPO

SCRIPT = REPO / "experiments" / "scripts" / "bench_rmsnorm.py"
spec = importlib.util.spec_from_file_location("bench_rmsnorm", SCRIPT)
bench_rmsnorm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_rmsnorm)


def _case(evolved, **baselines):
    return CaseResult(case="bf16/32768x4096", params={"M": 32768, "N": 4096, "dtype": "bf16"},
                      time_us=evolved, spread_us=0.5, tbps=3.9, baselines_us=baselines)


def test_without_a_tuned_pass_quack_is_its_plain_path():
    row = bench_rmsnorm.table_row("k", _case(100.0, torch=120.0, quack=95.0))
    assert row["speedup_vs_quack"] == pytest.approx(0.95)
    assert row["quack_us"] == pytest.approx(95.0) and row["quack_tuned_us"] is None
    assert row["speedup_vs_torch"] == pytest.approx(1.2) and row["speedup_vs_quack_tuned"] is None


def test_the_tuned_ratio_comes_from_its_own_pass_and_the_faster_quack_path_is_the_headline():
    # main pass: evolved 100, plain 98 (0.98); tuned pass: evolved 102, tuned 96.9 (0.95): tuned wins
    tuned = {"evolved_us": 102.0, "quack_us": 99.0, "quack_tuned_us": 96.9, "notes": ""}
    row = bench_rmsnorm.table_row("k", _case(100.0, torch=120.0, quack=98.0), tuned)
    assert row["speedup_vs_quack_tuned"] == pytest.approx(0.95)
    assert row["speedup_vs_quack"] == pytest.approx(0.95)
    assert row["quack_us"] == pytest.approx(95.0)         # on the main pass's scale
    assert row["quack_plain_us"] == 98.0 and row["quack_tuned_us"] == 96.9 and row["tuned_pass"] is tuned


def test_a_tuned_path_that_failed_leaves_the_plain_figure():
    tuned = {"evolved_us": 101.0, "quack_us": 99.0, "quack_tuned_us": None, "notes": "rmsnorm_fwd_tuned failed"}
    row = bench_rmsnorm.table_row("k", _case(100.0, quack=98.0), tuned)
    assert row["speedup_vs_quack"] == pytest.approx(0.98) and row["speedup_vs_quack_tuned"] is None
