"""The RMSNorm backward search recorded on the H200 in session 12 (52 evaluations of gene space v3,
results/archive/session12/rmsnorm_bwd_h200_run.json.gz) replays without a GPU: the config it ran
with (stored in the record) and its seed ask the same genomes in the same order, verdict for
verdict. The record is honest about its flaw: INT21's checkout was missing on the device for its
last 28 evaluations (nothing stopped the judge then; BaselineUnavailableError does now), so those
have no speedup over the run's baseline; the replay reproduces that too."""

from __future__ import annotations

import gzip
import json

import pytest

from evo.config import from_dict
from evo.lessons import prior_evaluations, seed_genomes
from evo.run import Run, new_run_info
from evo.rundir import without_nulls
from evo.store import open_store
from fitness.records import Evaluation, Status
from fitness.replay import ReplayEvaluator
from genomes import load_space
from tests.conftest import REPO

RECORDING = REPO / "results" / "archive" / "session12" / "rmsnorm_bwd_h200_run.json.gz"


@pytest.fixture(scope="module")
def recording():
    return json.loads(gzip.decompress(RECORDING.read_bytes()))


def recorded_config(recording, **overrides):
    # seed_genomes is relative to the config's folder: the record was made from experiments/
    cfg = from_dict(without_nulls(recording["config"]), source=str(REPO / "experiments" / "rmsnorm_bwd_h200.toml"))
    return cfg.with_overrides({"evaluator.kind": "replay", "evaluator.replay": str(RECORDING),
                               "output.progress": False, **overrides})


def test_replay_reproduces_the_recorded_backward_search(recording):
    cfg = recorded_config(recording)
    space = load_space("rmsnorm_bwd", cfg.experiment.space_version)
    assert space.name == "rmsnorm_bwd" and cfg.experiment.space_version == "v3"
    store = open_store("memory://")
    store.create_run(new_run_info(cfg, "replay"))
    summary = Run(cfg, space, store, ReplayEvaluator.from_file(RECORDING), "replay",
                  seeds=seed_genomes(cfg, space), prior=prior_evaluations(cfg, space)).optimize()
    recorded = [(x["key"], x["generation"], x["operator"], tuple(x["parents"])) for x in recording["lineage"]]
    replayed = [(r.key, r.generation, r.operator, r.parents) for r in store.records("replay")]
    assert len(recorded) == 52 and replayed == recorded
    assert "recording ends here" in summary.stop_reason
    by_key = {e["key"]: Evaluation.from_dict(e) for e in recording["evaluations"]}
    for r in store.records("replay"):              # verdict for verdict
        assert r.evaluation.status is by_key[r.key].status


def test_the_record_is_real_h200_evidence_and_says_where_int21_is_missing(recording):
    evs = [Evaluation.from_dict(e) for e in recording["evaluations"]]
    space = load_space("rmsnorm_bwd", "v3")
    with_int21 = [e for e in evs if e.status is Status.OK and any("int21" in c.baselines_us for c in e.cases)]
    without = [e for e in evs if e.status is Status.OK and not any("int21" in c.baselines_us for c in e.cases)]
    for e in evs:
        space.make(e.genome)
        assert e.device.startswith("NVIDIA H200")
    assert len(with_int21) == 24 and len(without) == 27
    assert all("no int21 timing" in e.message for e in without)
    assert all(e.fitness("geomean_speedup") is None for e in without)
