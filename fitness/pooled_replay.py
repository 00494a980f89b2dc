"""Replay through a pool: recorded verdicts answered inside the pool's workers, not in the driver.

`fitness.replay.ReplayEvaluator` answers a genome from a recording in the driver's own process.
`PooledReplayEvaluator` sends every genome as a Job through a pool (fitness.pool: the local one
or RayPool), where `ReplayRunner`, the CPU stand-in for fitness.device.DeviceRunner inside each
disposable worker process, answers it from the same recording after `latency_s` of worker time.
The verdicts are the recording's, so a run through it must equal the plain replay run; what it
exercises is everything between: placement over GPUs and hosts, a worker or an actor killed
mid-job (the job retried), the node and GPU recorded with each evaluation. That is how the CI
tests the Ray pool without a GPU (tests/test_ray_chaos.py), and how a user rehearses a cluster
before spending GPU time on it (`[evaluator] kind = "replay"`, `pool = "ray"`).

A genome the recording lacks raises NotRecorded as the plain replay does (or is INVALID with
missing = "invalid"); a job that the pool could not bring back (its worker crashed, its actor lost
more often than the pool retries) is recorded as what the pool said, RUNTIME_ERROR or TIMEOUT,
exactly as the GPU judge would record it.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Sequence

from fitness.evaluator import Evaluator
from fitness.jobs import Job, JobResult
from fitness.records import Evaluation, Status, failed
from fitness.replay import NotRecorded, ReplayEvaluator
from genomes import GeneSpace, Genome

REPLAY_STAGE = "replay"


def _load(table: str, space: str = "", space_version: str = "") -> ReplayEvaluator:
    gene_space = None
    if space:
        from genomes import load_space
        gene_space = load_space(space, space_version or None)
    return ReplayEvaluator.from_file(table, space=gene_space)


class ReplayRunner:
    """A worker's runner (fitness.workers builds it as `ReplayRunner(device_index, **kwargs)`)
    that answers a job for genome `job.key` from the recording `table`; `space` types a CSV."""

    def __init__(self, device_index: int, *, table: str, space: str = "", space_version: str = "",
                 latency_s: float = 0.0):
        self.device_index = device_index
        self.latency_s = float(latency_s)
        self._by_key = {e.key: e for e in _load(table, space, space_version).evaluations()}
        recorded = next(iter(self._by_key.values()), None)
        self.device = f"replay of {recorded.device if recorded else '?'}"

    def describe(self) -> dict[str, Any]:
        return {"device": self.device}

    def run(self, job: Job) -> JobResult:
        t0 = time.perf_counter()
        if self.latency_s:
            time.sleep(self.latency_s)
        recorded = self._by_key.get(job.key)
        if recorded is None:
            return JobResult(job_id=job.job_id, status=Status.INVALID, message="not in replay table",
                             device=self.device, seconds=time.perf_counter() - t0, extra={"not_recorded": True})
        # the whole recorded evaluation rides in extra, as JSON (plain data across the pipe)
        return JobResult(job_id=job.job_id, status=recorded.status, cases=recorded.cases, device=self.device,
                         seconds=time.perf_counter() - t0,
                         extra={"evaluation": json.dumps(recorded.to_dict()), "pid": os.getpid()})


class PooledReplayEvaluator(Evaluator):
    """The recording `table` answered through `pool` (see the module docstring); `batch_size` is
    `per_worker` jobs for each of the pool's workers, as the GPU judge batches."""

    def __init__(self, table: str, space: GeneSpace, pool: Any, *, missing: str = "error", latency_s: float = 0.0,
                 timeout_s: float = 60.0, per_worker: int = 2, space_family: str = "", space_version: str = ""):
        if missing not in ("error", "invalid"):
            raise ValueError("missing must be 'error' or 'invalid'")
        self.table = str(table)
        self.space = space
        self.missing = missing
        self.timeout_s = float(timeout_s) + float(latency_s)
        self.source = self.table
        self._pool = pool
        self._recorded = _load(self.table, space_family, space_version)
        self._jobs = 0
        self.batch_size = max(1, int(pool.size)) * max(1, per_worker)

    def __len__(self) -> int:
        return len(self._recorded)

    @property
    def pool(self) -> Any:
        return self._pool

    def evaluate(self, genomes: Sequence[Genome]) -> list[Evaluation]:
        genomes = list(genomes)
        if not genomes:
            return []
        start = time.time()
        jobs = []
        for g in genomes:
            self._jobs += 1
            jobs.append(Job(job_id=f"{g.key}-{self._jobs}", key=g.key, stage=REPLAY_STAGE, family=self.space.name,
                            family_root="", cubin=b"", cases=(), launches={}))
        results = self._pool.run(jobs, timeout_s=self.timeout_s)
        return [self._evaluation(g, r, start) for g, r in zip(genomes, results)]

    def _evaluation(self, genome: Genome, result: JobResult, start: float) -> Evaluation:
        where = json.dumps([{"stage": REPLAY_STAGE, "node": result.node, "gpu": result.gpu}])
        if result.extra.get("not_recorded"):
            if self.missing == "error":
                raise NotRecorded(f"genome {genome.key} ({genome.as_dict()}) is not in the replay table {self.table!r}")
            return failed(genome, Status.INVALID, "not in replay table", started_at=start)
        if "evaluation" not in result.extra:       # the pool's own verdict: a crash, a timeout, a lost job
            ev = failed(genome, result.status, result.message.strip().splitlines()[-1] if result.message else
                        result.status.value, started_at=start)
            return Evaluation(**{**ev.__dict__, "artifacts": {**ev.artifacts, "judged_on": where}})
        ev = Evaluation.from_dict(json.loads(result.extra["evaluation"]))
        artifacts = {**ev.artifacts, "replayed_from": self.table, "judged_on": where}
        return Evaluation(**{**ev.__dict__, "artifacts": artifacts, "started_at": start, "finished_at": time.time()})

    def describe(self) -> dict[str, Any]:
        any_ev = next(iter(self._recorded.evaluations()), None)
        return {"device": f"replay of {any_ev.device if any_ev else '?'}", "toolkit": any_ev.toolkit if any_ev else "",
                "source": self.table, "workers": len(self._pool.worker_info())}

    def stats(self) -> dict[str, Any]:
        return {"pool": self._pool.stats}

    def close(self) -> None:
        self._pool.close()
