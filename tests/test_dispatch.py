"""Dispatch tables come from the run's per-case evidence, never from hand-written rules."""

from __future__ import annotations

import pytest

from evo.dispatch import build_dispatch, lookup
from fitness.records import CaseResult, Evaluation, Status


def ev(key, times, status=Status.OK, suspect=False, dtype="bf16"):
    cases = tuple(CaseResult(case=f"{dtype}/{m}x{n}", params={"M": m, "N": n, "dtype": dtype}, time_us=t,
                             baselines_us={"torch": 10.0}) for (m, n), t in times.items())
    return Evaluation(key=key, genome={"g": key}, space="s", status=status, cases=cases, suspect=suspect,
                      objectives={"geomean_speedup": 1.0})


def test_winner_per_width_and_merged_ranges():
    evs = [
        ev("a", {(32, 256): 1.0, (32, 512): 2.0, (32, 1024): 9.0, (32, 2048): 9.0}),
        ev("b", {(32, 256): 2.0, (32, 512): 3.0, (32, 1024): 4.0, (32, 2048): 5.0}),
        ev("fast-but-wrong", {(32, 256): 0.1, (32, 512): 0.1, (32, 1024): 0.1, (32, 2048): 0.1},
           status=Status.WRONG_RESULT),
        ev("fast-but-suspect", {(32, 256): 0.1, (32, 512): 0.1, (32, 1024): 0.1, (32, 2048): 0.1}, suspect=True),
    ]
    table = build_dispatch(evs)
    assert [(e.key, e.n_min, e.n_max) for e in table] == [("a", 1, 512), ("b", 513, None)]
    assert lookup(table, "bf16", 300).key == "a"
    assert lookup(table, "bf16", 1 << 20).key == "b"
    assert table[0].cases["bf16/32x256"]["speedup"] == pytest.approx(10.0)
    with pytest.raises(LookupError):
        lookup(table, "fp16", 256)


def test_width_with_several_rows_uses_geomean_and_needs_every_case():
    evs = [
        ev("a", {(1, 4096): 1.0, (4096, 4096): 100.0}),
        ev("b", {(1, 4096): 4.0, (4096, 4096): 20.0}),      # geomean 8.9 < 10: b wins
        ev("partial", {(1, 4096): 0.5}),                    # did not run every case at this width
    ]
    assert [e.key for e in build_dispatch(evs)] == ["b"]
