"""The first KDA search recorded on the H200 replays without a GPU: session 15's run of
experiments/kda_fwd_h200.toml (`SEARCH_S=450 bash experiments/device/kda_search_h200.sh`), 48
evaluations of gene space "kda" v7, every one OK, judged on FlashKDA's six scenarios beside
FlashKDA, the worst scenario's speedup the objective (results/kda_fwd_h200_run.json.gz). The config
it ran with (stored in the record) asks the same genomes in the same order, verdict for verdict,
and stops where it stopped: at the evaluation budget. Nothing is compiled: the replay answers
each ask from the record."""

from __future__ import annotations

import gzip
import json

import pytest

from fitness.family import load_family
from fitness.records import Evaluation, Status
from genomes import load_space
from genomes.kda import NAMED
from tests.conftest import REPO
from tests.recorded_runs import recorded_config, replay_recording

RECORDING = REPO / "results" / "kda_fwd_h200_run.json.gz"
SCENARIOS = ["fixed/H96", "mixed/H96", "uniform/H96", "fixed/H64", "mixed/H64", "uniform/H64"]


@pytest.fixture(scope="module")
def recording():
    return json.loads(gzip.decompress(RECORDING.read_bytes()))


CONFIG = REPO / "experiments" / "kda_fwd_h200.toml"     # the record was made from experiments/


def test_replay_reproduces_the_recorded_kda_search(recording):
    cfg = recorded_config(recording, RECORDING, CONFIG)
    assert cfg.experiment.family == "kda" and cfg.experiment.space_version == "v7"
    assert cfg.objective.metric == "min_speedup" and cfg.objective.baseline == "flashkda"
    store, summary, recorded, replayed = replay_recording(recording, RECORDING, CONFIG)
    assert len(recorded) == 48 and replayed == recorded
    by_key = {e["key"]: Evaluation.from_dict(e) for e in recording["evaluations"]}
    for r in store.records("replay"):              # verdict for verdict
        assert r.evaluation.status is by_key[r.key].status is Status.OK
    # the replay stops where the device run did, not at the end of the recording
    assert summary.stop_reason == recording["notes"]["stop_reason"] == "evaluation budget of 48 reached"
    assert summary.evaluations == 48 and summary.by_status == {"OK": 48}
    assert summary.best.key.startswith("aac6ba5a")
    assert summary.best.evaluation.fitness("min_speedup") == pytest.approx(1.199, abs=5e-4)
    recorded_best = max(by_key.values(), key=lambda e: e.fitness("min_speedup"))
    assert recorded_best.key == summary.best.key


def test_the_record_is_real_h200_evidence_beside_flashkda(recording):
    assert [c.id for c in load_family("kda").benchmark_cases("flashkda")] == SCENARIOS
    space = load_space("kda", "v7")
    evs = [Evaluation.from_dict(e) for e in recording["evaluations"]]
    assert len(evs) == 48 and len({e.key for e in evs}) == 48
    for e in evs:
        assert e.space == "kda" and space.violations(e.genome) == [], e.key
        assert space.make(e.genome).key == e.key
        assert "H200" in e.device and e.status is Status.OK
        assert [c.case for c in e.cases] == SCENARIOS
        for c in e.cases:
            assert c.status is Status.OK and c.time_us > 0 and c.baselines_us["flashkda"] > 0
        # the objective is what the cases measured: the worst scenario's speedup over FlashKDA
        assert e.fitness("min_speedup") == pytest.approx(min(c.baselines_us["flashkda"] / c.time_us for c in e.cases))

    # the overlapped (v7 prep_overlap = pdl) genomes the search judged: those of the session's
    # table, each timed on all six scenarios with its worst one's speedup recorded
    pdl = {e.key: e for e in evs if e.genome["prep_overlap"] == "pdl"}
    named = {n: g.key for n, g in NAMED.items() if g.as_dict().get("prep_overlap") == "pdl"}
    assert set(pdl) == set(named.values()), sorted(named)
    best = max(evs, key=lambda e: e.fitness("min_speedup"))
    assert best.key.startswith("aac6ba5a") and best.genome["prep_overlap"] == "none"
    for e in pdl.values():
        assert e.fitness("min_speedup") is not None and 0 < e.fitness("min_speedup") < best.fitness("min_speedup")
