"""WorkerPool with fake runners: results in order, timeouts, crashes, restarts, no orphans."""

from __future__ import annotations

import os
import time

import pytest

import fake_runners
from fitness.records import Status
from fitness.workers import (WorkerPool, WorkerStartupError, describe_exit, plan_devices, resolve,
                             visible_devices)
from pool_contract import RUNNER, alive, job


@pytest.fixture
def pool():
    p = WorkerPool(1, runner=RUNNER, timeout_s=10, startup_timeout_s=60, devices=["7"])
    yield p
    p.close()


def test_results_in_order_and_visible_device(pool):
    results = pool.run([job("ok", i) for i in range(5)])
    assert [r.job_id for r in results] == [f"ok-{i}" for i in range(5)]
    assert all(r.status is Status.OK and len(r.cases) == 2 for r in results)
    assert {r.extra["cvd"] for r in results} == {"7"}       # each worker sees its GPU as device 0
    assert pool.stats["jobs"] == 5 and pool.stats["restarts"] == 0
    info = pool.worker_info()[0]
    assert info["device"].startswith("fake GPU 0") and info["copy_ceiling_tbps"] == 4.0


def test_hung_job_times_out_and_worker_restarts(pool):
    first_pid = pool.run([job("ok")])[0].extra["pid"]
    t0 = time.monotonic()
    results = pool.run([job("hang"), job("ok", 1)], timeout_s=1.0)
    assert time.monotonic() - t0 < 8
    assert results[0].status is Status.TIMEOUT and "killed and restarted" in results[0].message
    assert results[0].seconds >= 1.0
    assert results[1].status is Status.OK and results[1].extra["pid"] != first_pid
    assert not alive(first_pid)
    assert pool.stats["timeouts"] == 1 and pool.stats["restarts"] == 1


def test_timeout_kills_grandchildren(pool, tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    r = pool.run([job(f"spawn_hang:{pid_file}")], timeout_s=1.5)[0]
    assert r.status is Status.TIMEOUT
    grandchild = int(pid_file.read_text())
    for _ in range(50):
        if not alive(grandchild):
            break
        time.sleep(0.05)
    assert not alive(grandchild)


@pytest.mark.parametrize("script, expect", [("segv", "SIGSEGV"), ("exit:7", "exit code 7")])
def test_crash_is_runtime_error_then_restart(pool, script, expect):
    results = pool.run([job(script), job("ok", 1), job("ok", 2)])
    assert results[0].status is Status.RUNTIME_ERROR and expect in results[0].message
    assert [r.status for r in results[1:]] == [Status.OK, Status.OK]
    assert pool.stats["crashes"] == 1 and pool.stats["restarts"] == 1


def test_runner_exception_keeps_worker(pool):
    results = pool.run([job("ok"), job("raise", 1), job("ok", 2)])
    assert results[1].status is Status.RUNTIME_ERROR
    assert "Traceback" in results[1].message and "ValueError" in results[1].message
    assert results[0].extra["pid"] == results[2].extra["pid"]      # same worker carried on
    assert pool.stats["restarts"] == 0 and pool.stats["runner_errors"] == 1


def test_sticky_cuda_error_replaces_worker(pool):
    results = pool.run([job("ok"), job("sticky", 1), job("ok", 2)])
    assert results[1].status is Status.RUNTIME_ERROR and results[1].context_lost
    assert results[0].extra["pid"] != results[2].extra["pid"]
    assert pool.stats["context_lost"] == 1 and pool.stats["restarts"] == 1


def test_context_lost_restarts_after_taking_result(pool):
    results = pool.run([job("ok"), job("lost", 1), job("ok", 2)])
    assert results[1].status is Status.RUNTIME_ERROR and results[1].context_lost
    assert results[1].message == "illegal address"
    assert results[2].status is Status.OK and results[2].extra["pid"] != results[0].extra["pid"]
    assert pool.stats["context_lost"] == 1 and pool.stats["restarts"] == 1


def test_two_workers_run_concurrently_and_close_leaves_no_orphans():
    with WorkerPool(2, runner=RUNNER, devices=["0", "1"], timeout_s=10) as p:
        p.start()
        t0 = time.monotonic()
        results = p.run([job("sleep:0.6", i) for i in range(4)])
        wall = time.monotonic() - t0
        assert all(r.status is Status.OK for r in results)
        assert len({r.extra["pid"] for r in results}) == 2
        assert {r.extra["cvd"] for r in results} == {"0", "1"}
        assert wall < 2.2, wall                  # 4 x 0.6 s serially would be 2.4 s
        pids = p.pids(all_time=True)
        assert len(pids) == 2 and all(alive(q) for q in pids)
    assert not any(alive(q) for q in pids)


def test_close_while_hung_leaves_no_orphans():
    p = WorkerPool(1, runner=RUNNER, devices=["0"])
    r = p.run([job("hang")], timeout_s=0.5)[0]
    assert r.status is Status.TIMEOUT
    pids = p.pids(all_time=True)
    assert len(pids) == 2
    p.close()
    assert not any(alive(q) for q in pids)
    with pytest.raises(Exception):
        p.run([job("ok")])


def test_startup_failure_raises_with_reason():
    with WorkerPool(1, runner=f"{fake_runners.__name__}:BrokenRunner", devices=["0"],
                    max_start_failures=2) as p:
        with pytest.raises(WorkerStartupError, match="no module named cupy"):
            p.run([job("ok")])
        assert p.stats["startup_failures"] == 2


def test_startup_timeout():
    with WorkerPool(1, runner=f"{fake_runners.__name__}:SlowStartRunner", devices=["0"],
                    startup_timeout_s=0.5, max_start_failures=1) as p:
        with pytest.raises(WorkerStartupError, match="did not start within"):
            p.start()


def test_device_planning(monkeypatch):
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "2,3"}) == ["2", "3"]
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "0,-1,2"}) == ["0"]
    assert visible_devices({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert plan_devices(3, ["0", "1"]) == ["0", "1", "0"]
    assert plan_devices(None, ["4", "5"]) == ["4", "5"]
    assert plan_devices(2, []) == [None, None]
    with pytest.raises(Exception, match="no GPU visible"):
        plan_devices(None, [])
    assert resolve("os.path:join") is os.path.join and resolve("os.path.join") is os.path.join
    assert describe_exit(-11) == "killed by signal SIGSEGV" and describe_exit(3) == "exit code 3"


def test_a_job_may_start_its_own_process_pool(pool):
    """Workers are not daemonic, because baselines may start processes of their own: QuACK's
    autotuner compiles its configs in a process pool ("daemonic processes are not allowed to have
    children" made its tuned path unusable in session 3). The pool's children are the job's
    business; the worker serves the next job as before."""
    r = pool.run([job("mp_pool"), job("ok", 1)])
    assert [x.status for x in r] == [Status.OK, Status.OK]
    children = r[0].extra["child_pids"]
    assert children and r[0].extra["pid"] not in children
    assert r[1].extra["pid"] == r[0].extra["pid"]            # same worker, no restart
    assert pool.stats["restarts"] == 0


def test_closed_pools_leave_no_worker_for_exit_to_join():
    """Non-daemonic workers would keep the interpreter waiting at exit; a pool closes (and
    forgets) its workers, and pools never closed are closed by the atexit hook."""
    import multiprocessing

    from fitness import workers

    p = WorkerPool(1, runner=RUNNER, timeout_s=10, startup_timeout_s=60)
    pid = p.run([job("ok")])[0].extra["pid"]
    assert p in workers._LIVE_POOLS
    workers._close_all_pools()
    assert p not in workers._LIVE_POOLS and not alive(pid)
    assert all(c.pid != pid for c in multiprocessing.active_children())


def test_a_script_that_never_closes_its_pool_still_exits():
    import subprocess
    import sys

    from tests.conftest import REPO, subprocess_env

    code = ("import sys; sys.path.insert(0, 'tests'); from fitness.workers import WorkerPool; "
            "from tests.test_workers import job, RUNNER; "
            "p = WorkerPool(1, runner=RUNNER, timeout_s=10, startup_timeout_s=60); "
            "print(p.run([job('ok')])[0].status.value)")
    env = subprocess_env()
    env["PYTHONPATH"] = str(REPO / "tests") + os.pathsep + env["PYTHONPATH"]
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=90)
    assert out.returncode == 0 and out.stdout.strip() == "OK", out.stderr[-2000:]
