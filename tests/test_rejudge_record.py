"""The committed re-judge (results/rejudge/): session 9's dispatch table through the hardened judge.

These tests check that the committed record says what results/rejudge_dispatch.md and the closing
note say: every evaluation was made under judge protocol 2, exactly the genomes that take the
Newton step without inf_safe fail (torch's rule on rows holding +-inf), their inf_safe twins pass,
and the successor dispatch table is what `evo dispatch` builds from the record (so `evo export`
can package it: its sources are today's).
"""

from __future__ import annotations

import json
from pathlib import Path

from evo.dispatch import build_dispatch
from fitness.family import dispatch_key_of
from fitness.jobs import JUDGE_PROTOCOL
from fitness.records import Evaluation, Status, read_json

REPO = Path(__file__).resolve().parents[1]
RUN = REPO / "results" / "rejudge" / "rejudge_run.json.gz"


def _evaluations() -> list[Evaluation]:
    return [Evaluation.from_dict(e) for e in read_json(RUN)["evaluations"]]


def test_every_evaluation_is_of_protocol_2_and_only_the_newton_step_fails():
    evs = _evaluations()
    old = json.loads((REPO / "results" / "rmsnorm_dispatch.json").read_text())
    assert {e["key"] for e in old["entries"]} <= {e.key for e in evs}          # every dispatch genome
    assert len(evs) == 28
    for e in evs:
        assert e.artifacts["judge_protocol"] == str(JUDGE_PROTOCOL)
        unsafe_newton = e.genome["rsqrt"] == "newton" and not e.genome.get("inf_safe", False)
        if unsafe_newton:
            assert e.status is Status.WRONG_RESULT and "nonfinite" in e.message, (e.key, e.message)
        else:
            assert e.status is Status.OK and not e.suspect, (e.key, e.message)
    twins = [e for e in evs if e.genome.get("inf_safe")]
    assert len(twins) == 9 and all(t.status is Status.OK for t in twins)


def test_the_successor_dispatch_is_built_from_the_record():
    committed = json.loads((REPO / "results" / "rejudge" / "rmsnorm_dispatch.json").read_text())
    entries = build_dispatch(_evaluations(), dispatch_key_of("rmsnorm"), baseline=committed["baseline"])
    assert [e.to_dict() for e in entries] == committed["entries"]       # the committed format, field for field
    by_key = {e.key: e for e in _evaluations()}
    for e in entries:
        ev = by_key[e.key]
        assert ev.status is Status.OK and not (ev.genome["rsqrt"] == "newton" and not ev.genome.get("inf_safe"))


def test_the_cost_figures_are_the_records():
    s = json.loads((REPO / "results" / "rejudge_dispatch.json").read_text())
    assert s["compared"] >= 5 and 1.5 < s["cost_ratio"] < 4.0 and s["check_share_after"] < 0.25
    before = {g["key"]: g for g in json.loads((REPO / "results" / "rejudge" / "before.json").read_text())["genomes"]}
    after = {g["key"]: g for g in json.loads((REPO / "results" / "rejudge" / "after.json").read_text())["genomes"]}
    assert set(before) <= set(after) and len(before) == 19
