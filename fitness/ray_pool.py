"""RayPool: the pool contract (fitness.pool) on a Ray cluster, one actor per GPU.

    pool = RayPool(gpus=8, address="head-node:6379")      # or address="" for a Ray of this host
    results = pool.run(jobs)                               # one JobResult per job, in order

Each actor asks Ray for one GPU (`num_gpus=1`; Ray sets its CUDA_VISIBLE_DEVICES) and holds the
local pool of fitness.workers with a single worker: the candidate still runs in a disposable
process of its own, killed and replaced on a hang or a fault, exactly as on one host. What Ray
adds is placement over many GPUs and hosts, and a second kind of failure, which is never the
candidate's fault and so is never its verdict:

  the actor or its node dies     (SIGKILL, OOM of the actor, a host lost): Ray restarts the actor
                                 (at most `max_restarts` times, on whatever node has a GPU free)
                                 and the job is run again, at most `max_retries` times; a job
                                 lost more often than that comes back RUNTIME_ERROR saying so
  the actor stops answering      past the job's hard limit plus the worker's startup time plus
                                 `grace_s` (the inner pool already kills a hung candidate at its
                                 limit): the actor is killed, restarted by Ray, the job retried

A job's result is returned once (the first that comes back), so each evaluation is recorded
once. Every result names the node (the actor's host) and the GPU (the token Ray gave the actor);
`stats` counts jobs, retries, actor deaths and jobs lost.

The driver joins the cluster at `address` (`ray start --head` on one host, `ray start
--address=HEAD:6379` on the others); an empty address starts a Ray of this host (or joins the
one RAY_ADDRESS names). A cluster that cannot be reached, or that has no GPU, is a RayPoolError
(a WorkerPoolError: the machine's fault, one line), never a candidate's verdict.
"""

from __future__ import annotations

import os
import socket
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from fitness.jobs import Job, JobResult
from fitness.pool import Pool, job_limits, node_name
from fitness.records import Status
from fitness.workers import DEFAULT_RUNNER, WorkerPool, WorkerPoolError, WorkerStartupError, visible_devices

RAY_HINT = "pip install 'ptx-kernel-factory[ray]'"


class RayPoolError(WorkerPoolError):
    """Ray is missing, the cluster cannot be reached, or it has no GPU for the pool."""


def require_ray() -> Any:
    """The ray module, or RayPoolError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise RayPoolError(f"[evaluator] pool = \"ray\" needs Ray, which is not installed: {RAY_HINT}") from None
    return ray


def connect(address: str = "", init: Mapping[str, Any] | None = None) -> bool:
    """Join the Ray cluster at `address` (empty: RAY_ADDRESS, or a Ray started for this process),
    unless this process is connected already. True when this call connected (so the caller
    disconnects at close). `init`: more ray.init arguments (num_cpus, num_gpus, runtime_env)."""
    ray = require_ray()
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"logging_level": "ERROR", "log_to_driver": False, "configure_logging": True}
    if not address and not os.environ.get("RAY_ADDRESS"):
        kwargs["include_dashboard"] = False
    kwargs.update(init or {})
    where = address or os.environ.get("RAY_ADDRESS") or "a new local Ray"
    unreachable = _unreachable(address or os.environ.get("RAY_ADDRESS", ""))
    if unreachable:                 # ray.init would retry for minutes, printing as it goes
        raise RayPoolError(f"cannot join the Ray cluster at {where} ([evaluator] ray_address): {unreachable}; "
                           f"is `ray start --head` running there?")
    try:
        ray.init(address=address or None, **kwargs)
    except Exception as exc:  # noqa: BLE001 - ConnectionError, RuntimeError, ValueError: all mean "cannot reach it"
        detail = " ".join(str(exc).split())[:200]
        raise RayPoolError(f"cannot join the Ray cluster at {where} ([evaluator] ray_address): {detail}; "
                           f"is `ray start --head` running there?") from None
    return True


def _unreachable(address: str, timeout_s: float = 5.0) -> str:
    """Why nothing answers at a cluster address ("host:port", "ray://host:port"), or "" when
    something does (or the address is not of that form, e.g. "auto": ray.init decides)."""
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return ""
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return ""
    except OSError as exc:
        return f"nothing answers at {host}:{port} ({exc.strerror or exc})"


class JudgeActor:
    """One GPU of the cluster (Ray gives it `num_gpus=1`): a one-worker local pool on that GPU.

    Kept free of Ray itself (RayPool wraps it with ray.remote), so it is the local pool's
    isolation unchanged: the runner lives in a child process the actor replaces when a candidate
    hangs or crashes it."""

    def __init__(self, runner: str, runner_kwargs: Mapping[str, Any] | None, timeout_s: float,
                 startup_timeout_s: float):
        self._args = dict(runner=runner, runner_kwargs=dict(runner_kwargs or {}), timeout_s=timeout_s,
                          startup_timeout_s=startup_timeout_s)
        self._pool: WorkerPool | None = None

    def ready(self) -> dict[str, Any]:
        """Start the worker (once per actor life); its facts, or {"error": why it cannot start}."""
        if self._pool is None:
            devices = visible_devices()
            pool = WorkerPool(1, devices=devices[:1], **self._args)
            try:
                pool.start()
            except WorkerPoolError as exc:
                pool.close()
                return {"error": str(exc)}
            self._pool = pool
        info = dict(self._pool.worker_info()[0])
        info.update(actor_pid=os.getpid(), node=node_name(), gpu=str(info.get("gpu") or ""))
        try:
            import ray
            info["ray_node_id"] = ray.get_runtime_context().get_node_id()
        except Exception:  # noqa: BLE001 - only a fact for the record
            pass
        return info

    def run(self, job: Job, limit_s: float) -> tuple[str, Any]:
        """("result", JobResult) or ("startup_error", why): the worker could not start here."""
        info = self.ready()
        if "error" in info:
            return "startup_error", info["error"]
        assert self._pool is not None
        return "result", self._pool.run([job], timeout_s=[limit_s])[0]

    def stats(self) -> dict[str, float]:
        return self._pool.stats if self._pool is not None else {}

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


READY, BUSY, RECOVERING, DEAD = "ready", "busy", "recovering", "dead"


@dataclass
class _Slot:
    index: int
    handle: Any
    state: str = RECOVERING       # a slot starts by pinging its actor (ready())
    info: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    deaths: int = 0


@dataclass
class _Flight:
    slot: _Slot
    kind: str                     # "job" or "ping"
    index: int = -1               # the job's position in run()'s list
    deadline: float = 0.0
    since: float = 0.0


def _lost_errors(ray: Any) -> tuple[type, ...]:
    """Ray's exceptions meaning "the process or node holding the task is gone" (not a bug)."""
    names = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError", "NodeDiedError",
             "ObjectLostError", "OwnerDiedError", "ObjectReconstructionFailedError")
    return tuple(t for t in (getattr(ray.exceptions, n, None) for n in names) if isinstance(t, type))


class RayPool(Pool):
    """`gpus` actors (None: one per GPU of the cluster), each on one GPU; see the module docstring.

    `init`: ray.init arguments for a Ray this pool starts (tests give num_cpus/num_gpus);
    ignored when the process is connected already (a notebook's, a test's Ray)."""

    def __init__(self, gpus: int | None = None, *, address: str = "", runner: str = DEFAULT_RUNNER,
                 runner_kwargs: Mapping[str, Any] | None = None, timeout_s: float = 60.0,
                 startup_timeout_s: float = 120.0, max_retries: int = 2, max_restarts: int = 3,
                 grace_s: float = 30.0, init: Mapping[str, Any] | None = None):
        if gpus is not None and gpus < 1:
            raise ValueError(f"gpus must be >= 1 (or None: every GPU of the cluster), got {gpus}")
        self.gpus = gpus
        self.address = address
        self.runner = runner
        self.runner_kwargs = dict(runner_kwargs or {})
        self.timeout_s = float(timeout_s)
        self.startup_timeout_s = float(startup_timeout_s)
        self.max_retries = int(max_retries)
        self.max_restarts = int(max_restarts)
        self.grace_s = float(grace_s)
        self._init = dict(init or {})
        self._slots: list[_Slot] = []
        self._flights: dict[Any, _Flight] = {}
        self._connected_here = False
        self._started = False
        self._closed = False
        self._stats: dict[str, float] = dict(jobs=0, ok=0, timeouts=0, runtime_errors=0, retried=0,
                                             actor_deaths=0, lost=0, stuck=0, startup_failures=0,
                                             busy_seconds=0.0)

    # -- facts ---------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Actors that can judge (before start: the GPUs asked for, or the cluster's GPUs)."""
        if self._started:
            return sum(s.state != DEAD for s in self._slots)
        return self.gpus if self.gpus is not None else self._cluster_gpus()

    @property
    def stats(self) -> dict[str, float]:
        """jobs, ok, timeouts, runtime_errors (results as returned), retried (jobs run again after
        their actor or node died), actor_deaths, stuck (actors killed for not answering), lost
        (jobs given up after max_retries), startup_failures, busy_seconds."""
        return dict(self._stats)

    def worker_info(self) -> list[dict[str, Any]]:
        return [dict(s.info, slot=s.index, state=s.state, last_error=s.error) for s in self._slots]

    def actor_pids(self, busy: bool = False) -> list[int]:
        """The live actors' process ids (what a chaos test kills); `busy`: only those judging a job now."""
        return [int(s.info["actor_pid"]) for s in list(self._slots)
                if s.state != DEAD and "actor_pid" in s.info and (not busy or s.state == BUSY)]

    # -- lifecycle -----------------------------------------------------------------------------
    def _cluster_gpus(self) -> int:
        self._connect()
        ray = require_ray()
        return int(ray.cluster_resources().get("GPU", 0))

    def _connect(self) -> None:
        if self._closed:
            raise WorkerPoolError("the Ray pool is closed")
        if not require_ray().is_initialized():
            self._connected_here = connect(self.address, self._init) or self._connected_here

    def start(self, wait: bool = True) -> "RayPool":
        """Place the actors and wait (at most startup_timeout_s) until each has started its worker;
        those that cannot (no GPU free in time, runner broken there) are dropped with the reason.
        WorkerStartupError when none could."""
        if self._closed:
            raise WorkerPoolError("the Ray pool is closed")
        if self._started:
            return self
        ray = require_ray()
        n = self.gpus if self.gpus is not None else self._cluster_gpus()
        self._connect()
        if n < 1:
            raise RayPoolError(f"the Ray cluster at {self.address or 'this host'} has no GPU "
                               f"(ray.cluster_resources() lists none): start its nodes with GPUs, "
                               f"or `ray start --num-gpus N`")
        actor = ray.remote(JudgeActor).options(num_gpus=1, max_restarts=self.max_restarts, max_task_retries=0)
        for i in range(n):
            handle = actor.remote(self.runner, self.runner_kwargs, self.timeout_s, self.startup_timeout_s)
            slot = _Slot(i, handle)
            self._slots.append(slot)
            self._ping(slot)
        self._started = True
        if wait:
            while any(s.state == RECOVERING for s in self._slots):
                self._pump([], None, None)
            self._require_some_actor()
        return self

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self._slots and not self._connected_here:
            return                                    # never joined a cluster: nothing to stop
        ray = require_ray()
        if ray.is_initialized():
            for s in self._slots:
                try:
                    ray.kill(s.handle, no_restart=True)   # its worker's watchdog ends the worker
                except Exception:  # noqa: BLE001 - already gone
                    pass
            if self._connected_here:
                ray.shutdown()
        self._flights.clear()

    # -- running jobs --------------------------------------------------------------------------
    def run(self, jobs: Sequence[Job], timeout_s: float | Sequence[float] | None = None) -> list[JobResult]:
        if self._closed:
            raise WorkerPoolError("the Ray pool is closed")
        jobs = list(jobs)
        limits = job_limits(jobs, timeout_s, self.timeout_s)
        self.start()
        results: list[JobResult | None] = [None] * len(jobs)
        attempts = [0] * len(jobs)
        queue = deque(range(len(jobs)))
        while queue or any(f.kind == "job" for f in self._flights.values()):
            for slot in self._slots:
                if slot.state == READY and queue:
                    i = queue.popleft()
                    attempts[i] += 1
                    self._submit(slot, i, jobs[i], limits[i])
            if queue and not any(f.kind == "job" for f in self._flights.values()):
                self._require_some_actor()
            self._pump(jobs, results, (queue, attempts, jobs))
        return [r if r is not None else JobResult(job_id=j.job_id, status=Status.RUNTIME_ERROR,
                                                   message="no result (Ray pool error)")
                for r, j in zip(results, jobs)]

    # -- internals -----------------------------------------------------------------------------
    def _ping(self, slot: _Slot) -> None:
        slot.state = RECOVERING
        now = time.monotonic()
        ref = slot.handle.ready.remote()
        self._flights[ref] = _Flight(slot, "ping", deadline=now + self.startup_timeout_s, since=now)

    def _submit(self, slot: _Slot, i: int, job: Job, limit: float) -> None:
        slot.state = BUSY
        now = time.monotonic()
        ref = slot.handle.run.remote(job, limit)
        # the inner pool kills a hung candidate at `limit` and may need a worker restart first
        self._flights[ref] = _Flight(slot, "job", i, deadline=now + limit + self.startup_timeout_s + self.grace_s,
                                     since=now)

    def _require_some_actor(self) -> None:
        if self._slots and all(s.state == DEAD for s in self._slots):
            errors = "\n---\n".join(f"actor {s.index}: {s.error}" for s in self._slots)
            raise WorkerStartupError(f"no Ray actor can judge (runner {self.runner!r}):\n{errors}")

    def _pump(self, jobs: Sequence[Job], results: list | None, work: tuple | None) -> None:
        """Wait for the next answer (or a deadline) and handle whatever happened."""
        ray = require_ray()
        if not self._flights:
            return
        now = time.monotonic()
        nearest = min(f.deadline for f in self._flights.values())
        done, _ = ray.wait(list(self._flights), num_returns=1, timeout=max(0.0, min(nearest - now, 1.0)))
        for ref in done:
            flight = self._flights.pop(ref)
            self._answer(ray, ref, flight, jobs, results, work)
        now = time.monotonic()
        for ref, flight in list(self._flights.items()):
            if now >= flight.deadline:
                self._flights.pop(ref)
                self._stuck(ray, flight, results, work)

    def _answer(self, ray: Any, ref: Any, flight: _Flight, jobs: Sequence[Job], results: list | None,
                work: tuple | None) -> None:
        slot = flight.slot
        try:
            value = ray.get(ref)
        except _lost_errors(ray) as exc:
            self._actor_died(slot, flight, results, work, f"{type(exc).__name__}: {_first_line(exc)}")
            return
        except Exception as exc:  # noqa: BLE001 - RayTaskError: the actor's own code raised (a bug)
            if flight.kind == "ping":
                self._give_up_slot(slot, f"the actor raised at startup: {_first_line(exc)}")
                return
            self._finish(flight, results, JobResult(
                job_id=jobs[flight.index].job_id, status=Status.RUNTIME_ERROR,
                message=f"the Ray actor raised running the job: {_first_line(exc)}", node=str(slot.info.get("node", "")),
                gpu=str(slot.info.get("gpu", ""))))
            slot.state = READY
            return
        if flight.kind == "ping":
            if "error" in value:
                self._give_up_slot(slot, str(value["error"]))
            else:
                slot.info, slot.state, slot.error = dict(value), READY, ""
            return
        kind, payload = value
        if kind == "startup_error":
            # the worker cannot start on this actor's GPU: the job goes to another actor, this one stops
            self._give_up_slot(slot, str(payload))
            if work is not None:
                queue, attempts, _ = work
                attempts[flight.index] -= 1
                queue.appendleft(flight.index)
            return
        slot.state = READY
        attempt = work[1][flight.index] if work is not None else 1
        self._finish(flight, results, replace(payload, extra={**dict(payload.extra), "attempts": attempt}))

    def _finish(self, flight: _Flight, results: list | None, result: JobResult) -> None:
        if results is None or results[flight.index] is not None:
            return                                    # a job's result is returned once
        results[flight.index] = result
        self._stats["jobs"] += 1
        self._stats["busy_seconds"] += time.monotonic() - flight.since
        if result.status is Status.OK:
            self._stats["ok"] += 1
        elif result.status is Status.TIMEOUT:
            self._stats["timeouts"] += 1
        elif result.status is Status.RUNTIME_ERROR:
            self._stats["runtime_errors"] += 1

    def _actor_died(self, slot: _Slot, flight: _Flight, results: list | None, work: tuple | None, why: str) -> None:
        """The actor (or its node) is gone: Ray restarts it; its job runs again, within bounds."""
        if slot.state != RECOVERING:                  # a restart that fails again is the same death
            self._stats["actor_deaths"] += 1
        slot.deaths += 1
        slot.error = why
        if flight.kind == "job" and work is not None:
            self._retry(flight, results, work, f"its Ray actor died ({why})")
        if slot.deaths > self.max_restarts:
            self._give_up_slot(slot, f"died {slot.deaths} times (max_restarts {self.max_restarts}); last: {why}")
            return
        self._ping(slot)                              # READY again once Ray has restarted it

    def _stuck(self, ray: Any, flight: _Flight, results: list | None, work: tuple | None) -> None:
        slot = flight.slot
        if flight.kind == "ping":
            self._give_up_slot(slot, f"the actor did not start within {self.startup_timeout_s:g} s "
                                     f"(no GPU free on the cluster, or its worker hangs at startup)")
            return
        self._stats["stuck"] += 1
        slot.error = "stopped answering"
        try:
            ray.kill(slot.handle, no_restart=False)  # Ray starts it again
        except Exception:  # noqa: BLE001 - gone already
            pass
        if work is not None:
            self._retry(flight, results, work, "its Ray actor stopped answering and was restarted")
        self._ping(slot)

    def _retry(self, flight: _Flight, results: list | None, work: tuple, why: str) -> None:
        queue, attempts, jobs = work
        i = flight.index
        if attempts[i] <= self.max_retries:
            self._stats["retried"] += 1
            queue.appendleft(i)
            return
        self._stats["lost"] += 1
        slot = flight.slot
        self._finish(flight, results, JobResult(
            job_id=jobs[i].job_id, status=Status.RUNTIME_ERROR,
            message=f"job given up after {attempts[i]} attempts: {why}", node=str(slot.info.get("node", "")),
            gpu=str(slot.info.get("gpu", "")), extra={"attempts": attempts[i], "lost": True}))

    def _give_up_slot(self, slot: _Slot, why: str) -> None:
        self._stats["startup_failures"] += 1
        slot.state, slot.error = DEAD, why
        try:
            require_ray().kill(slot.handle, no_restart=True)
        except Exception:  # noqa: BLE001 - gone already
            pass


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[-1][:300] if lines else type(exc).__name__
