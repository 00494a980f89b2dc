"""A run killed with SIGKILL mid-generation, then resumed, equals an uninterrupted run:
every completed evaluation kept exactly once, the same records in the same order, the same best.
Real subprocesses, a real SQLite store, a real kill."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evo.rundir import open_run_dir
from evo.store import open_store
from tests.conftest import TABLE, subprocess_env

CONFIG = f"""
[experiment]
name = "resume"
family = "synthetic"
seed = 11

[search.ga]
population = 16
offspring = 16

[search.optuna]
enabled = true
trials = 30
top_k = 2

[budget]
evaluations = 150

[evaluator]
kind = "replay"
replay = "{TABLE}"
latency_s = 0.02

[output]
progress = false
report = false                 # what resume must reproduce is the records; figures only cost time here
"""


def evo(*args, cwd):
    return subprocess.Popen([sys.executable, "-m", "evo.cli", *args], cwd=cwd, env=subprocess_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_dir_of(runs: Path, timeout=30.0) -> Path:
    deadline = time.time() + timeout
    while time.time() < deadline:
        dirs = [d for d in runs.glob("*") if (d / "run.json").exists()] if runs.exists() else []
        if dirs:
            return dirs[0]
        time.sleep(0.02)
    raise AssertionError("the run directory never appeared")


def records_of(rd: Path):
    meta = open_run_dir(rd)
    with open_store(meta.store_url) as store:
        return store.records(meta.run_id), store.get_run(meta.run_id)


def wait_for_records(rd: Path, n: int, proc, timeout=60.0) -> None:
    meta = open_run_dir(rd)
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, f"run ended before {n} records: {proc.stderr.read()}"
        try:
            with open_store(meta.store_url) as store:
                if store.count(meta.run_id) >= n:
                    return
        except Exception:
            pass   # store not created yet
        time.sleep(0.01)
    raise AssertionError(f"never reached {n} records")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("straight")
    cfg = tmp / "cfg.toml"
    cfg.write_text(CONFIG)
    proc = evo("run", str(cfg), "--runs-dir", str(tmp / "runs"), cwd=tmp)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    records, info = records_of(run_dir_of(tmp / "runs"))
    return records


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", [40, 133], ids=["mid-GA-generation", "mid-optuna-stage"])
def test_sigkill_then_resume_matches_uninterrupted(tmp_path, uninterrupted, kill_at):
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(CONFIG)
    proc = evo("run", str(cfg), "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    rd = run_dir_of(tmp_path / "runs")
    wait_for_records(rd, kill_at, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    before, info = records_of(rd)
    assert kill_at <= len(before) < 150
    assert info.state == "running"          # killed: nobody had the chance to mark it
    assert info.elapsed_s > 0               # but its time so far counts against a wall budget

    resumed = evo("resume", str(rd), "--quiet", cwd=tmp_path)
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err
    after, info = records_of(rd)

    keys = [r.key for r in after]
    assert len(keys) == len(set(keys)) == 150                       # exactly once
    assert [r.key for r in after[: len(before)]] == [r.key for r in before]   # nothing rewritten
    assert keys == [r.key for r in uninterrupted]                   # same search
    assert [r.stage for r in after] == [r.stage for r in uninterrupted]
    best = max(after, key=lambda r: (r.fitness("geomean_speedup") or -1, -r.seq))
    best_straight = max(uninterrupted, key=lambda r: (r.fitness("geomean_speedup") or -1, -r.seq))
    assert best.key == best_straight.key
    assert info.state == "finished"
    assert "best geomean_speedup" in out


def test_ctrl_c_stops_cleanly_and_resume_finishes(tmp_path):
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(CONFIG)
    proc = evo("run", str(cfg), "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    rd = run_dir_of(tmp_path / "runs")
    wait_for_records(rd, 20, proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert "evo resume" in err and "Traceback" not in err
    records, info = records_of(rd)
    assert info.state == "interrupted"
    status = evo("status", str(rd), cwd=tmp_path)
    sout, serr = status.communicate(timeout=30)
    assert status.returncode == 0 and "interrupted" in sout and f"{len(records)}/150" in sout
    resumed = evo("resume", str(rd), "--quiet", cwd=tmp_path)
    resumed.communicate(timeout=120)
    records, info = records_of(rd)
    assert len(records) == 150 and info.state == "finished"
