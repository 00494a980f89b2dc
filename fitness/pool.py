"""The pool contract: the seam where the judge hands `Job`s to GPUs and gets `JobResult`s back.

Everything above it (fitness.cascade, GPUEvaluator, the pooled replay) calls only
`pool.run(jobs, timeout_s=...)`; below it a pool decides where each job runs:

    fitness.workers.WorkerPool   one worker process per visible GPU of this host
    fitness.ray_pool.RayPool     one Ray actor per GPU of a cluster (num_gpus=1), each holding
                                 the same one-worker process pool, so the isolation is the same

Every pool keeps the same promises, which tests/pool_contract.py checks against each of them (one
suite, parametrised over the pools, as Optuna tests its storages):

- `run` returns one JobResult per job, in job order, whatever happened: a hung job is TIMEOUT
  (its process killed and replaced), a crashed one RUNTIME_ERROR, a runner exception
  RUNTIME_ERROR; a candidate never takes the pool down;
- each result names the node (host) and GPU that judged it (`JobResult.node`, `.gpu`), which the
  cascade records with the evaluation;
- a pool that cannot judge at all (no worker or actor could start) raises WorkerStartupError, a
  machine problem, never a candidate's verdict;
- `close()` leaves no process behind, and a closed pool refuses work.

A pool may run a job again when the process holding it died for a reason that is not the
candidate's (the Ray pool retries a job whose actor or node died); a job's result is still
returned once, so an evaluation is recorded once.
"""

from __future__ import annotations

import abc
import socket
from dataclasses import replace
from typing import Any, Sequence

from fitness.jobs import Job, JobResult


def node_name() -> str:
    """This host's name, as a JobResult names the node that judged it."""
    return socket.gethostname()


def job_limits(jobs: Sequence[Job], timeout_s: float | Sequence[float] | None, default: float) -> list[float]:
    """One hard limit per job: `timeout_s` for all, one per job, or the pool's default."""
    if timeout_s is None:
        return [float(default)] * len(jobs)
    if isinstance(timeout_s, (int, float)):
        return [float(timeout_s)] * len(jobs)
    limits = [float(t) for t in timeout_s]
    if len(limits) != len(jobs):
        raise ValueError(f"{len(limits)} timeouts for {len(jobs)} jobs")
    return limits


def stamped(result: JobResult, node: str, gpu: str | None) -> JobResult:
    """The result with the node and GPU that judged it, unless the runner said already."""
    return replace(result, node=result.node or node, gpu=result.gpu or (gpu or ""))


class Pool(abc.ABC):
    """Runs Jobs on GPUs; see the module docstring for the promises every pool keeps."""

    @property
    @abc.abstractmethod
    def size(self) -> int:
        """How many jobs can run at once (GPUs); the evaluator's batch size follows it."""

    @abc.abstractmethod
    def run(self, jobs: Sequence[Job], timeout_s: float | Sequence[float] | None = None) -> list[JobResult]:
        """Every job's result, in job order. `timeout_s`: one hard limit for all jobs, or one per
        job (default: the pool's own)."""

    def start(self, wait: bool = True) -> "Pool":
        """Start the workers now rather than at the first `run` (their startup is then not charged
        to the first batch). Raises WorkerStartupError when none can start."""
        return self

    @property
    def stats(self) -> dict[str, float]:
        """Counters (jobs, ok, timeouts, crashes, restarts, ...); each pool documents its own."""
        return {}

    def worker_info(self) -> list[dict[str, Any]]:
        """Per worker: what its runner reported at startup (device, copy ceiling) and where it runs."""
        return []

    def close(self) -> None:
        """Stop every worker; no process is left behind."""

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
