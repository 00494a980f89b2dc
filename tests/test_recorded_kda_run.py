"""The KDA searches recorded on the H200 replay without a GPU: runs of experiments/kda_fwd_h200.toml
(`SEARCH_S=450 bash experiments/device/kda_search_h200.sh`), 48 evaluations each, every one OK,
judged on FlashKDA's six scenarios beside FlashKDA, the worst scenario's speedup the objective:
session 15's over gene space "kda" v7 (results/archive/session15/kda_fwd_h200_run.json.gz) and
session 16's over v8 (results/kda_fwd_h200_run.json.gz). The config each ran with (stored in the
record) asks the same genomes in the same order, verdict for verdict, and stops where it stopped:
at the evaluation budget. Nothing is compiled: the replay answers each ask from the record."""

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

# (path, space version, the best's key prefix, its worst-scenario speedup)
RECORDINGS = {
    "session15-v7": (REPO / "results" / "archive" / "session15" / "kda_fwd_h200_run.json.gz", "v7", "aac6ba5a", 1.199),
    "session16-v8": (REPO / "results" / "kda_fwd_h200_run.json.gz", "v8", "73678429", 1.252),
}
SCENARIOS = ["fixed/H96", "mixed/H96", "uniform/H96", "fixed/H64", "mixed/H64", "uniform/H64"]


@pytest.fixture(scope="module", params=sorted(RECORDINGS))
def recorded(request):
    path, version, best_prefix, best_value = RECORDINGS[request.param]
    return json.loads(gzip.decompress(path.read_bytes())), path, version, best_prefix, best_value


CONFIG = REPO / "experiments" / "kda_fwd_h200.toml"     # the record was made from experiments/


def test_replay_reproduces_the_recorded_kda_search(recorded):
    recording, path, version, best_prefix, best_value = recorded
    cfg = recorded_config(recording, path, CONFIG)
    assert cfg.experiment.family == "kda" and cfg.experiment.space_version == version
    assert cfg.objective.metric == "min_speedup" and cfg.objective.baseline == "flashkda"
    store, summary, recorded, replayed = replay_recording(recording, path, CONFIG)
    assert len(recorded) == 48 and replayed == recorded
    by_key = {e["key"]: Evaluation.from_dict(e) for e in recording["evaluations"]}
    for r in store.records("replay"):              # verdict for verdict
        assert r.evaluation.status is by_key[r.key].status is Status.OK
    # the replay stops where the device run did, not at the end of the recording
    assert summary.stop_reason == recording["notes"]["stop_reason"] == "evaluation budget of 48 reached"
    assert summary.evaluations == 48 and summary.by_status == {"OK": 48}
    assert summary.best.key.startswith(best_prefix)
    assert summary.best.evaluation.fitness("min_speedup") == pytest.approx(best_value, abs=5e-4)
    recorded_best = max(by_key.values(), key=lambda e: e.fitness("min_speedup"))
    assert recorded_best.key == summary.best.key


def test_the_record_is_real_h200_evidence_beside_flashkda(recorded):
    recording, _, version, best_prefix, _ = recorded
    assert [c.id for c in load_family("kda").benchmark_cases("flashkda")] == SCENARIOS
    space = load_space("kda", version)
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

    # the overlapped (v7 prep_overlap = pdl) genomes the search judged (session 15: those of its
    # table, seeded), each timed on all six scenarios with its worst one's speedup recorded, and
    # none the best: the overlap lost its worst scenario in both searches
    pdl = {e.key: e for e in evs if e.genome["prep_overlap"] == "pdl"}
    assert pdl
    if version == "v7":
        named = {n: g.key for n, g in NAMED.items() if g.as_dict().get("prep_overlap") == "pdl"}
        assert set(pdl) == set(named.values()), sorted(named)
    best = max(evs, key=lambda e: e.fitness("min_speedup"))
    assert best.key.startswith(best_prefix) and best.genome["prep_overlap"] == "none"
    if version == "v8":     # v8's tight prep: the best worst-scenario genome is split-bf16-v2-tight
        assert best.key == NAMED["split-bf16-v2-tight"].key and best.genome["prep"] == "tight"
    for e in pdl.values():
        assert e.fitness("min_speedup") is not None and 0 < e.fitness("min_speedup") < best.fitness("min_speedup")
