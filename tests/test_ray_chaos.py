"""Chaos on a local Ray of 2 CPUs and 2 resource-only GPUs, the synthetic recording replayed through
the Ray pool's actors (fitness.pooled_replay): an actor SIGKILLed mid-job (its job retried, the
run's records identical to an undisturbed run's), a driver SIGKILLed mid-search and the run
resumed from its PostgreSQL store alone by a driver in another working directory, Optuna stage
included (nothing lost, nothing recorded twice). The scenarios are experiments/scripts/ray_scaling.py's,
which writes the same figures into results/ray_scaling.json (`ray_scaling.py chaos`)."""

from __future__ import annotations

import importlib.util
import json
import os
import socket

import pytest

from tests.conftest import REPO

pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[ray]'")

SCRIPT = REPO / "experiments" / "scripts" / "ray_scaling.py"
spec = importlib.util.spec_from_file_location("ray_scaling", SCRIPT)
ray_scaling = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ray_scaling)


def test_an_actor_killed_mid_job_leaves_the_run_identical_to_an_undisturbed_one(ray_cluster):
    figures = ray_scaling.actor_kill(ray_cluster, budget=32, latency_s=0.1, kill_after=(6,))
    assert figures["actors_killed"] == 1 and figures["actor_deaths"] >= 1
    assert figures["retried"] >= 1 and figures["jobs_lost_by_pool"] == 0
    assert figures["lost"] == 0 and figures["duplicated"] == 0
    assert figures["identical_to_reference"] and figures["evaluations"] == 32
    assert figures["judged_on"] == [f"{socket.gethostname()}:0", f"{socket.gethostname()}:1"]


@pytest.mark.postgres
def test_a_killed_driver_is_resumed_on_another_host_from_postgres(ray_cluster, tmp_path):
    url = os.environ.get("EVO_TEST_POSTGRES_URL", "")
    if not url:
        pytest.skip("PostgreSQL not reachable: EVO_TEST_POSTGRES_URL is not set; .ci/postgres.sh starts one")
    scoped, drop = ray_scaling.fresh_schema(url)
    try:
        figures = ray_scaling.driver_kill(ray_cluster, scoped, tmp_path, budget=48, kill_at=16, optuna_trials=12)
    finally:
        drop()
    assert figures["state_after_kill"] == "running" and figures["final_state"] == "finished"
    assert figures["records_before_kill_kept"] and 16 <= figures["killed_at"] < 48
    assert figures["lost"] == 0 and figures["duplicated"] == 0 and figures["evaluations"] == 48
    assert figures["identical_to_reference"] and figures["stages"] == ["ga", "optuna"]
    assert (tmp_path / "host-b" / "runs").is_dir()       # driver B made its own run directory


def test_the_results_files_say_what_was_measured_and_why_the_two_gpu_figure_is_missing(tmp_path):
    chaos = {"actor_kill": {"evaluations": 48, "lost": 0, "duplicated": 0, "identical_to_reference": True,
                            "retried": 1, "actors_killed": 1, "actor_deaths": 1, "judged_on": ["h:0", "h:1"]},
             "driver_kill": {"evaluations": 60, "lost": 0, "duplicated": 1, "identical_to_reference": False,
                             "killed_at": 20, "state_after_kill": "running", "final_state": "finished",
                             "stages": ["ga", "optuna"]},
             "seconds": 40.0, "cluster": "local Ray", "store": "PostgreSQL"}
    data = ray_scaling.write(tmp_path / "ray_scaling", chaos=chaos, command="python x chaos")
    assert (data["retried"], data["lost"], data["duplicated"]) == (1, 0, 1)
    assert data["identical_to_undisturbed"] is False
    assert data["scaling_2gpu"] is None and "nvidia-h200-x2" in data["scaling_2gpu_why_null"]
    assert data["single_h200"] is None
    device = {"pool": "ray", "gpus": 1, "device": "H200", "candidates": 4, "bench_cases": 33, "wall_s": 60.0,
              "candidates_per_gpu_minute": 4.0, "command": "python x device", "rows": [],
              "comparison": {"candidates_per_gpu_minute_ratio": 0.98, "same_status": "4/4",
                             "cases_within_spreads": "120/132"}}
    data = ray_scaling.write(tmp_path / "ray_scaling", device=device)
    assert data["single_h200"]["candidates_per_gpu_minute_ratio"] == 0.98 and data["lost"] == 0   # chaos kept
    md = (tmp_path / "ray_scaling.md").read_text()
    assert "duplicated **1**" in md and "Ray / local: **0.980**" in md and "`scaling_2gpu` is null" in md


def test_the_committed_results_come_from_the_chaos_command():
    data = json.loads((REPO / "results" / "ray_scaling.json").read_text())
    assert {"scaling_2gpu", "lost", "duplicated", "retried", "chaos"} <= set(data)
    assert data["lost"] == 0 and data["duplicated"] == 0 and data["retried"] >= 1
    assert data["identical_to_undisturbed"] and "ray_scaling.py chaos" in data["commands"]["chaos"]
    assert (data["scaling_2gpu"] is None) == bool(data["scaling_2gpu_why_null"])


def test_the_device_measurement_judges_the_recorded_searchs_genomes_and_compares_two_files():
    """What experiments/device/ray_pool_h200.sh's calls feed on, checked without the GPU."""
    from genomes import load_space

    space = load_space("rmsnorm")
    genomes = ray_scaling.device_genomes(space, 4)
    assert len(genomes) == 4 == len({g.key for g in genomes})
    assert all(g["inf_safe"] == (g["rsqrt"] == "newton") for g in genomes)

    def measured(pool, wall, times):
        rows = [{"key": g.key, "status": "OK", "geomean_speedup": 1.2,
                 "cases": {"a": [t, 0.5], "b": [10.0, 0.1]}} for g, t in zip(genomes, times)]
        return {"pool": pool, "gpus": 1, "wall_s": wall, "candidates": 4, "rows": rows,
                "candidates_per_gpu_minute": 4 / (wall / 60)}

    cmp = ray_scaling.side_by_side(measured("local", 60.0, [5.0] * 4), measured("ray", 62.0, [5.2, 6.5, 5.0, 3.0]))
    assert cmp["candidates_per_gpu_minute_ratio"] == pytest.approx(60 / 62)
    assert cmp["same_status"] == "4/4" and cmp["cases_within_spreads"] == "6/8"
    assert cmp["geomean_speedup_ratio_median"] == pytest.approx(1.0)
