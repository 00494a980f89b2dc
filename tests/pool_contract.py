"""The pool contract (fitness.pool) as one reusable suite, run against every pool, as the store
contract is (tests/store_contract.py, after Optuna's storage tests): subclass PoolContract in a
test_*.py file and provide `make_pool`.

    class TestMyPool(PoolContract):
        @pytest.fixture
        def make_pool(self):
            return lambda size, **kw: MyPool(size, **kw)

`make_pool(size, runner=..., timeout_s=..., startup_timeout_s=...)` builds a pool of `size` GPUs
whose workers run `runner` (a tests/fake_runners.py class: the job's key says what the candidate
does); the suite closes every pool it makes.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

import fake_runners
from fitness.family import Case
from fitness.jobs import CHECK, Job
from fitness.records import Status
from fitness.workers import WorkerPoolError, WorkerStartupError

RUNNER = f"{fake_runners.__name__}:ScriptedRunner"


def job(script: str, n: int = 0) -> Job:
    return Job(job_id=f"{script}-{n}", key=script, stage=CHECK, family="fake", family_root="",
               cubin=b"", cases=(Case("c0", {}), Case("c1", {})), launches={})


def alive(pid: int) -> bool:
    """True if pid exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def gone(pids, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


class PoolContract:
    @pytest.fixture
    def make_pool(self):
        raise NotImplementedError

    @pytest.fixture
    def pools(self, make_pool):
        made = []

        def build(size: int = 2, **kw):
            kw.setdefault("runner", RUNNER)
            kw.setdefault("timeout_s", 20)
            kw.setdefault("startup_timeout_s", 60)
            made.append(make_pool(size, **kw))
            return made[-1]

        yield build
        for p in made:
            p.close()

    def test_results_in_order_each_naming_its_node_and_gpu(self, pools):
        pool = pools(2).start()
        assert pool.size == 2
        results = pool.run([job("ok", i) for i in range(5)])
        assert [r.job_id for r in results] == [f"ok-{i}" for i in range(5)]
        assert all(r.status is Status.OK and len(r.cases) == 2 for r in results)
        assert {r.node for r in results} == {socket.gethostname()}
        assert {r.gpu for r in results} <= {"0", "1"} and all(r.gpu == r.extra["cvd"] for r in results)
        info = pool.worker_info()
        assert len(info) == 2 and {w["gpu"] for w in info} == {"0", "1"}
        assert all(w["device"].startswith("fake GPU") and w["copy_ceiling_tbps"] == 4.0 for w in info)
        assert pool.stats["jobs"] == 5

    def test_two_gpus_judge_at_once(self, pools):
        pool = pools(2).start()
        t0 = time.monotonic()
        results = pool.run([job("sleep:0.6", i) for i in range(4)])
        wall = time.monotonic() - t0
        assert all(r.status is Status.OK for r in results)
        assert len({r.gpu for r in results}) == 2
        assert wall < 2.2, wall                  # 4 x 0.6 s one after the other would be 2.4 s

    def test_a_hung_candidate_is_timeout_and_its_process_replaced(self, pools):
        pool = pools(1).start()
        first = pool.run([job("ok")])[0].extra["pid"]
        results = pool.run([job("hang"), job("ok", 1)], timeout_s=1.0)
        assert results[0].status is Status.TIMEOUT and "killed and restarted" in results[0].message
        assert results[0].gpu and results[0].node == socket.gethostname()
        assert results[1].status is Status.OK and results[1].extra["pid"] != first
        assert gone([first]) and pool.stats["timeouts"] == 1

    @pytest.mark.parametrize("script, expect", [("segv", "SIGSEGV"), ("exit:7", "exit code 7")])
    def test_a_crash_is_runtime_error_and_the_next_job_runs(self, pools, script, expect):
        pool = pools(1).start()
        results = pool.run([job(script), job("ok", 1)])
        assert results[0].status is Status.RUNTIME_ERROR and expect in results[0].message
        assert results[1].status is Status.OK

    def test_a_runner_exception_is_runtime_error(self, pools):
        pool = pools(1).start()
        results = pool.run([job("raise"), job("ok", 1)])
        assert results[0].status is Status.RUNTIME_ERROR and "ValueError" in results[0].message
        assert results[1].status is Status.OK

    def test_no_worker_can_start_is_a_startup_error_naming_why(self, pools):
        pool = pools(1, runner=f"{fake_runners.__name__}:BrokenRunner")
        with pytest.raises(WorkerStartupError, match="no module named cupy"):
            pool.start()
            pool.run([job("ok")])

    def test_close_leaves_no_process_and_a_closed_pool_refuses_work(self, pools):
        pool = pools(2).start()
        pool.run([job("ok", i) for i in range(2)])
        pids = [w["pid"] for w in pool.worker_info()]
        assert len(pids) == 2 and all(alive(p) for p in pids)
        pool.close()
        assert gone(pids)
        with pytest.raises(WorkerPoolError):
            pool.run([job("ok")])

    def test_genomes_cross_the_seam_through_the_cascade(self, pools, tmp_path):
        """The GPU judge on the pool, with a fake family and compiler: evaluations record which
        node and GPU judged each of their jobs."""
        import json

        from fitness.gpu_evaluator import GPUEvaluator
        from test_cascade import FAMILY, SPACE, FakeCompiler, g

        pool = pools(2, runner=f"{fake_runners.__name__}:EchoRunner")
        ev = GPUEvaluator(FAMILY, SPACE, compiler=FakeCompiler(tmp_path), pool=pool)
        assert ev.batch_size == 8
        ok, narrow = ev.evaluate([g("ok"), g("narrow")])
        assert ok.status is Status.OK and ok.objectives["geomean_speedup"] == pytest.approx(2.0)
        assert narrow.status is Status.INVALID
        where = json.loads(ok.artifacts["judged_on"])
        assert [w["stage"] for w in where] == ["check", "bench"]
        assert all(w["node"] == socket.gethostname() and w["gpu"] in ("0", "1") for w in where)
        assert ev.describe()["copy_ceiling_tbps"] == 4.0
