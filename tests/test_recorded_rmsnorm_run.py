"""The RMSNorm search recorded on the H200 (results/rmsnorm_fwd_h200_run.json) replays without a GPU:
the same config and seed ask the same genomes in the same order and reach the same best."""

from __future__ import annotations

import json

import pytest

from evo.config import load_config
from evo.dispatch import build_dispatch
from evo.lessons import prior_evaluations, seed_genomes
from evo.run import Run, new_run_info
from evo.store import open_store
from fitness.cascade import is_unsupported
from fitness.records import Evaluation
from fitness.replay import ReplayEvaluator
from genomes import load_space
from tests.conftest import REPO

RECORDING = REPO / "results" / "rmsnorm_fwd_h200_run.json"
CONFIG = REPO / "experiments" / "rmsnorm_fwd_h200.toml"
SPACE = load_space("rmsnorm", load_config(CONFIG).experiment.space_version)   # the version it ran with


@pytest.fixture(scope="module")
def recording():
    return json.loads(RECORDING.read_text())


def test_replay_reproduces_the_recorded_search(recording):
    cfg = load_config(CONFIG).with_overrides({"evaluator.kind": "replay", "evaluator.replay": str(RECORDING),
                                              "output.progress": False})
    store = open_store("memory://")
    store.create_run(new_run_info(cfg, "replay"))
    summary = Run(cfg, SPACE, store, ReplayEvaluator.from_file(RECORDING), "replay",   # as `evo run` does:
                  seeds=seed_genomes(cfg, SPACE),                 # [search] seed_from and seed_variants
                  prior=prior_evaluations(cfg, SPACE)).optimize()  # the screening model's history
    recorded = [(x["key"], x["generation"], x["operator"], tuple(x["parents"])) for x in recording["lineage"]]
    replayed = [(r.key, r.generation, r.operator, r.parents) for r in store.records("replay")]
    assert replayed == recorded
    assert "recording ends here" in summary.stop_reason
    best = max((Evaluation.from_dict(e) for e in recording["evaluations"]),
               key=lambda e: e.fitness("geomean_speedup") or -1)
    assert summary.best.key == best.key


def test_recorded_evaluations_are_complete_evidence(recording):
    evs = [Evaluation.from_dict(e) for e in recording["evaluations"]]
    assert recording["config"]["benchmark"]["matrix"] == "quack:bf16,fp16,fp32"
    for e in evs:
        SPACE.make(e.genome)                      # every recorded genome is valid in today's space
        assert e.device.startswith("NVIDIA H200")
        if e.status.value == "OK":
            # every case timed beside torch, or each dtype's largest only when the hopeless rule
            # (evaluator.hopeless_below, hopeless_group = "dtype") stopped a candidate below 0.5x
            # torch in all three; a case the genome's launch() refuses (shared memory too small)
            # is recorded as unsupported and counted at evaluator.unsupported_speedup
            truncated = "truncated, hopeless" in e.message
            assert len(e.cases) == (3 if truncated else 33), e.message
            timed = [c for c in e.cases if not is_unsupported(c)]
            assert all(c.time_us and c.baselines_us.get("torch") for c in timed)
            assert not truncated or e.fitness("geomean_speedup") < 0.5
            assert e.artifacts.get("compile_log") is not None and e.artifacts.get("resources")
    # session 9: 3 candidates cut as hopeless (drawn register kernels; session 8: 1), none INVALID;
    # 5 genomes' launch() refuses one case each, fp32 8192 x 262144 (a row their shared memory
    # cannot hold)
    assert sum("truncated, hopeless" in e.message for e in evs) == 3
    refused = [[c.case for c in e.cases if is_unsupported(c)] for e in evs]
    assert sorted(r for r in refused if r) == [["fp32/8192x262144"]] * 5
    assert all(e.status.value == "OK" for e in evs)


def test_seeds_were_carried_and_the_rest_drawn_from_register_kernels_of_many_warps(recording):
    """search.carry_seeds: session 8's 24 per-case champions (its dispatch genomes) answered from
    their verdicts (same device, driver, toolkit; space v5 renders them to their very source); the
    rest of the first population drawn from register kernels of 512-1024 threads in clusters of
    8-16 holding 2-4 vectors per thread (init_within)."""
    evs = {e["key"]: Evaluation.from_dict(e) for e in recording["evaluations"]}
    seeds = [x["key"] for x in recording["lineage"] if x["operator"] == "seed"]
    carried = [k for k in seeds if evs[k].artifacts.get("carried_from")]
    assert len(seeds) == len(carried) == 24
    assert {evs[k].artifacts["carried_from"] for k in carried} == {"../results/rmsnorm_fwd_h200_run.json"}
    session8 = json.loads((REPO / "results" / "archive" / "session8" / "rmsnorm_dispatch.json").read_text())
    assert set(seeds) == {e["key"] for e in session8["entries"]}
    drawn = [evs[x["key"]].genome for x in recording["lineage"] if x["operator"].startswith("init")]
    assert len(drawn) == 24
    assert all(g["staging"] == "regs" and g["cluster"] in (8, 16) and g["cta_threads"] in (512, 1024)
               and g["chunks"] in (2, 3, 4) and not g["persistent"] for g in drawn)


def test_dispatch_table_is_rebuilt_from_the_recording(recording):
    """From the run alone, or, where the table names the playoff it was chosen with
    (`evo playoff`), from the run and that playoff (committed as results/playoff.json)."""
    from evo.playoff import winners_from_dict

    evs = [Evaluation.from_dict(e) for e in recording["evaluations"]]
    committed = json.loads((REPO / "results" / "rmsnorm_dispatch.json").read_text())
    from fitness.family import dispatch_key_of

    keys = dispatch_key_of("rmsnorm")
    winners = winners_from_dict(json.loads((REPO / "results" / "playoff.json").read_text()), keys) \
        if committed.get("playoff") else None
    table = build_dispatch(evs, keys, baseline="torch", winners=winners)
    assert [(e.group, e.lo, e.hi, e.key) for e in table] == \
        [((e["dtype"],), e["n_min"], e["n_max"], e["key"]) for e in committed["entries"]]


def test_readme_main_job_runs_without_a_gpu(tmp_path):
    """The README's main command, through the real CLI in a subprocess."""
    import subprocess
    import sys

    from tests.conftest import subprocess_env

    res = subprocess.run([sys.executable, "-m", "evo.cli", "run", str(CONFIG), "--replay", str(RECORDING),
                          "--runs-dir", str(tmp_path)], cwd=tmp_path, env=subprocess_env(),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    # it reads as the success it is: what it replays, that the whole recording was replayed, the best
    # kernel, and where its report is
    assert "replaying " in res.stderr and "128 evaluations recorded on NVIDIA H200" in res.stderr
    assert "stopped: the replay reached the end of its recording (all 128 recorded evaluations replayed)" in res.stdout
    assert "best geomean_speedup = 1.37942" in res.stdout
    report = next(line for line in res.stdout.splitlines() if line.strip().startswith("report: "))
    assert report.endswith("report.md") and (tmp_path / report.split("report: ")[1]).is_file()


@pytest.mark.parametrize("session, evaluations, best", [("session1", 32, None), ("session2", 52, "1.1769"),
                                                        ("session3", 104, "1.1936"), ("session4", 96, "1.3015"),
                                                        ("session5", 116, "1.31608"), ("session6", 112, "1.33895"),
                                                        ("session7", 112, "1.37867"), ("session8", 116, "1.37867")])
def test_earlier_sessions_searches_replay_from_their_archived_configs(tmp_path, session, evaluations, best):
    """experiments/archive/ keeps each earlier search's config beside its recording in results/."""
    import subprocess
    import sys

    from tests.conftest import subprocess_env

    config = REPO / "experiments" / "archive" / f"rmsnorm_fwd_h200_{session}.toml"
    recording = REPO / "results" / "archive" / session / "rmsnorm_fwd_h200_run.json.gz"
    res = subprocess.run([sys.executable, "-m", "evo.cli", "run", str(config), "--replay", str(recording),
                          "--runs-dir", str(tmp_path), "--no-report"], cwd=tmp_path, env=subprocess_env(),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert f"{evaluations} evaluations" in res.stdout and "stopped: the replay reached the end of its recording" in res.stdout
    if best:
        assert f"best geomean_speedup = {best}" in res.stdout
