"""Dispatch tables come from the run's per-case evidence, never from hand-written rules."""

from __future__ import annotations

import pytest

from evo.dispatch import DispatchEntry, build_dispatch, entry_for, lookup, markdown_rows
from fitness.family import NO_DISPATCH_KEY, DispatchKey, KeyField, KeyPoint
from fitness.records import CaseResult, Evaluation, Status

KEYS = DispatchKey(exact=(KeyField("dtype"),), ordered=KeyField("N"), shape=("M", "N"))


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
    table = build_dispatch(evs, KEYS)
    assert [(e.key, e.lo, e.hi) for e in table] == [("a", 1, 512), ("b", 513, None)]
    assert lookup(table, KeyPoint(("bf16",), 300)).key == "a"
    assert lookup(table, KeyPoint(("bf16",), 1 << 20)).key == "b"
    assert entry_for(table, {"dtype": "bf16", "N": 300, "M": 7}).key == "a"
    assert table[0].cases["bf16/32x256"]["speedup"] == pytest.approx(10.0)
    with pytest.raises(LookupError, match="no dispatch entry for fp16 N=256"):
        lookup(table, KeyPoint(("fp16",), 256))
    assert table[0].to_dict() == {"dtype": "bf16", "n_min": 1, "n_max": 512, "key": "a", "genome": {"g": "a"},
                                  "cases": {c: dict(v) for c, v in table[0].cases.items()}}
    assert list(table[0].cases["bf16/32x256"]) == ["M", "N", "time_us", "tbps", "torch_us", "speedup"]
    assert all(DispatchEntry.from_dict(e.to_dict(), KEYS) == e for e in table)
    assert markdown_rows(table, "torch")[:3] == [
        "| dtype | N range | genome key | cases | geomean speedup vs torch |", "|---|---|---|---:|---:|",
        "| bf16 | 1..512 | a | 2 | 7.071 |"]


def test_width_with_several_rows_uses_geomean_and_needs_every_case():
    evs = [
        ev("a", {(1, 4096): 1.0, (4096, 4096): 100.0}),
        ev("b", {(1, 4096): 4.0, (4096, 4096): 20.0}),      # geomean 8.9 < 10: b wins
        ev("partial", {(1, 4096): 0.5}),                    # did not run every case at this width
    ]
    assert [e.key for e in build_dispatch(evs, KEYS)] == ["b"]


def test_the_key_is_the_familys_own():
    """Another family's key (two exact fields, another ordered one) and a family with none: the same
    code splits, ranges and writes them under the family's names."""
    key = DispatchKey(exact=(KeyField("dtype"), KeyField("layout")), ordered=KeyField("T"), shape=("B", "T"))

    def run(k, times, layout):
        cases = tuple(CaseResult(case=f"{layout}/{t}", params={"B": 1, "T": t, "dtype": "bf16", "layout": layout},
                                 time_us=v, baselines_us={"ref": 2.0}) for t, v in times.items())
        return Evaluation(key=k, genome={}, space="s", status=Status.OK, cases=cases)

    evs = [run("x", {1024: 1.0, 8192: 5.0}, "fixed"), run("y", {1024: 2.0, 8192: 4.0}, "fixed"),
           run("z", {1024: 1.0}, "mixed")]
    table = build_dispatch(evs, key, baseline="ref")
    assert [(e.group, e.lo, e.hi, e.key) for e in table] == [
        (("bf16", "fixed"), 1, 1024, "x"), (("bf16", "fixed"), 1025, None, "y"), (("bf16", "mixed"), 1, None, "z")]
    assert table[0].to_dict()["t_min"] == 1 and "n_min" not in table[0].to_dict()
    assert markdown_rows(table, "ref")[0] == "| dtype | layout | T range | genome key | cases | geomean speedup vs ref |"
    single = build_dispatch(evs[:2], NO_DISPATCH_KEY, baseline="ref")
    assert [(e.group, e.key) for e in single] == [((), "x")]          # x: geomean of 1 and 5 beats y's 2 and 4
    assert build_dispatch(evs, NO_DISPATCH_KEY) == []                   # nobody ran every case
    assert set(single[0].to_dict()) == {"key", "genome", "cases"}
    assert markdown_rows(single, "ref")[0] == "| genome key | cases | geomean speedup vs ref |"
