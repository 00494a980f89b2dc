"""What the Ray pool adds to the pool contract: a job whose actor died (SIGKILL) or stopped
answering (SIGSTOP) is run again and returned once; retries are bounded; an unreachable cluster
is one line; compiles spread over the cluster's CPUs through the shared, content-addressed cache.
A local Ray of 2 CPUs and 2 resource-only GPUs (tests/conftest.py: ray_cluster)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from pool_contract import RUNNER, gone, job
from fitness.records import Status
from tests.conftest import REPO, subprocess_env

pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[ray]'")

from fitness.ray_pool import RayPool, RayPoolError  # noqa: E402


@pytest.fixture
def pool(ray_cluster):
    p = RayPool(2, runner=RUNNER, timeout_s=20, startup_timeout_s=60, grace_s=2.0)
    p.start()
    yield p
    p.close()


def signal_when_busy(pool: RayPool, sig: int, delay_s: float = 0.4) -> threading.Thread:
    """Send `sig` to the first actor once a job is on it (the jobs sleep 1.5 s each)."""
    pid = pool.actor_pids()[0]

    def send() -> None:
        time.sleep(delay_s)
        os.kill(pid, sig)

    t = threading.Thread(target=send)
    t.start()
    return t


def test_a_job_whose_actor_is_killed_runs_again_and_comes_back_once(pool):
    killed = pool.actor_pids()[0]
    worker = next(w["pid"] for w in pool.worker_info() if w["actor_pid"] == killed)
    t = signal_when_busy(pool, signal.SIGKILL)
    results = pool.run([job("sleep:1.5", i) for i in range(4)])
    t.join()
    assert [r.job_id for r in results] == [f"sleep:1.5-{i}" for i in range(4)]
    assert all(r.status is Status.OK for r in results)
    assert sorted(r.extra["attempts"] for r in results) == [1, 1, 1, 2]
    s = pool.stats
    assert s["retried"] == 1 and s["actor_deaths"] == 1 and s["lost"] == 0 and s["jobs"] == 4
    assert gone([killed, worker])                       # the killed actor's worker went with it
    results = pool.run([job("ok", i) for i in range(4)])   # Ray restarted the actor: both GPUs judge again
    assert all(r.status is Status.OK for r in results)
    assert len(pool.actor_pids()) == 2 and killed not in pool.actor_pids()


def test_an_actor_that_stops_answering_is_restarted_and_its_job_retried(ray_cluster):
    # given up after the job's limit + the worker's startup time + grace: 2 + 8 + 2 s
    with RayPool(2, runner=RUNNER, timeout_s=20, startup_timeout_s=8, grace_s=2.0) as p:
        p.start()
        stopped = p.actor_pids()[0]
        t = signal_when_busy(p, signal.SIGSTOP)
        results = p.run([job("sleep:1.5", i) for i in range(2)], timeout_s=2.0)
        t.join()
        assert all(r.status is Status.OK for r in results)
        assert sorted(r.extra["attempts"] for r in results) == [1, 2]
        assert p.stats["stuck"] == 1 and p.stats["retried"] == 1 and p.stats["lost"] == 0
        assert gone([stopped], within_s=20)         # Ray ends the killed actor's process


def test_retries_are_bounded_and_a_lost_job_says_so(ray_cluster):
    with RayPool(1, runner=RUNNER, timeout_s=20, startup_timeout_s=60, max_retries=0) as p:
        p.start()
        t = signal_when_busy(p, signal.SIGKILL)
        (lost,) = p.run([job("sleep:1.5")])
        t.join()
        assert lost.status is Status.RUNTIME_ERROR and lost.job_id == "sleep:1.5-0"
        assert "given up after 1 attempts" in lost.message and "actor died" in lost.message
        assert p.stats["lost"] == 1 and p.stats["retried"] == 0


def test_more_gpus_than_the_cluster_has_start_only_what_fits(ray_cluster):
    with RayPool(3, runner=RUNNER, startup_timeout_s=8) as p:
        p.start()
        assert p.size == 2
        assert [w["state"] for w in p.worker_info()].count("dead") == 1
        assert any("did not start within 8 s" in w["last_error"] for w in p.worker_info())


def test_an_unreachable_cluster_is_one_line():
    code = ("from fitness.ray_pool import RayPool\n"
            "try:\n    RayPool(1, address='127.0.0.1:1').start()\n"
            "except Exception as e:\n    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=subprocess_env(), capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.startswith("RayPoolError cannot join the Ray cluster at 127.0.0.1:1"), out
    assert len(out.stdout.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    assert issubclass(RayPoolError, Exception)


def test_compiles_run_as_ray_tasks_and_a_shared_cache_compiles_each_source_once(ray_cluster, tmp_path):
    from fitness.ray_compile import ClusterCompiler
    from fitness.toolchain import find_tool

    if find_tool("nvcc") is None:
        pytest.skip("nvcc not found (install the CUDA toolkit or set CUDA_HOME)")
    sources = [(f'extern "C" __global__ void k{i}(float* y) {{ y[threadIdx.x] = {i}.0f; }}\n', ())
               for i in range(2)]
    bad = ('extern "C" __global__ void k(float* y) { y[0] = bogus; }\n', ())
    shared = tmp_path / "shared-cache"
    first = ClusterCompiler(shared)
    results = first.compile_many(sources + [bad, sources[0]])
    assert [r.ok for r in results] == [True, True, False, True]
    assert results[0].source_hash == results[3].source_hash and results[0].cubin()[:4] == b"\x7fELF"
    assert "bogus" in results[2].log
    assert first.counts["remote"] == 3 and first.counts["cache_hits"] == 0 and sum(first.nodes.values()) == 3
    # a second driver (another host on the same filesystem) finds every entry: nothing compiled again
    second = ClusterCompiler(shared)
    again = second.compile_many(sources + [bad])
    assert second.counts == {"sources": 3, "cache_hits": 3, "remote": 0, "remote_cache_hits": 0}
    assert [r.source_hash for r in again] == [r.source_hash for r in results[:3]]
    assert all(r.cached for r in again)
