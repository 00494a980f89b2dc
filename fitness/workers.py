"""A pool of GPU worker processes: one isolated process per GPU, restarted when a candidate kills it.

Each worker is a process started with the "spawn" method (CUDA and fork do not mix) that sees
exactly one GPU as device 0 (CUDA_VISIBLE_DEVICES is set in the worker before anything touches
CUDA). It builds a runner from a dotted path ("fitness.device:DeviceRunner" by default; tests pass
fakes) as `factory(device_index)`, then loops: receive a `Job` over a Pipe, `runner.run(job)`, send
the `JobResult` back.

The parent (`WorkerPool.run`) hands jobs to idle workers and turns every way a candidate can go
wrong into a JobResult, never an exception:

  hung job          -> the job's hard timeout expires: the worker's process group is SIGKILLed,
                       the worker restarted, the job answered TIMEOUT
  worker death      -> (segfault, os._exit, OOM kill) RUNTIME_ERROR naming the exit code or signal;
                       the worker is restarted
  runner exception  -> caught inside the worker, RUNTIME_ERROR with the traceback; the worker stays
                       up unless the error text is a sticky CUDA error (then context_lost=True)
  context_lost=True -> the result is kept, then the worker is restarted (its CUDA context is gone)

Worker startup (importing cupy, creating the context, measuring the copy ceiling) has its own,
longer timeout. A worker that cannot start `max_start_failures` times in a row is disabled; when
no worker is left, `WorkerStartupError` is raised: that is the machine's fault, not a candidate's.

No orphans: workers run in their own process group (killed as a group), a watchdog thread in each
worker exits when the parent goes away, and every pool is closed by `close()`, the context
manager, or at interpreter exit.

Because workers are spawned, a script that builds a pool must guard its entry point with
`if __name__ == "__main__":` (the spawn method re-imports the main module in every worker).
"""

from __future__ import annotations

import atexit
import importlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import deque
from dataclasses import replace
from multiprocessing import connection as mp_connection
from typing import Any, Callable, Mapping, Sequence

import multiprocessing

from fitness.jobs import Job, JobResult
from fitness.pool import Pool, job_limits, node_name, stamped
from fitness.records import Status

DEFAULT_RUNNER = "fitness.device:DeviceRunner"

# Error texts after which a CUDA context is unusable (sticky errors): the worker must be replaced.
_STICKY = re.compile(
    r"illegal (memory )?address|illegal instruction|misaligned address|unspecified launch failure|"
    r"CUDA_ERROR_(ILLEGAL|MISALIGNED|LAUNCH_FAILED|HARDWARE_STACK|ASSERT|CONTEXT_IS_DESTROYED)|"
    r"cudaError(IllegalAddress|IllegalInstruction|MisalignedAddress|LaunchFailure|Assert|"
    r"HardwareStackError|ContextIsDestroyed)|device-side assert|context is destroyed",
    re.IGNORECASE)


class WorkerPoolError(RuntimeError):
    """The pool itself is broken (closed, or no worker can run)."""


class WorkerStartupError(WorkerPoolError):
    """No worker could start: no GPU, cupy missing, bad runner path... (a machine problem)."""


class NoDeviceError(WorkerPoolError):
    """No GPU is visible and no worker count was given."""


class WrongDeviceError(WorkerPoolError):
    """The GPU the workers judge on is not the one the run is for (the config's [target] gpu): a run for
    the H200 that lands on an H100 would record the H100's times under the H200's name."""


class BaselineUnavailableError(WorkerPoolError):
    """The run's primary baseline cannot run on this machine (its package or checkout is missing):
    every speedup the run records would be missing, so nothing more is judged here. The batch in
    flight is not recorded; `evo resume` judges it again once the machine has the baseline."""


# --------------------------------------------------------------------------------------------
# Devices
# --------------------------------------------------------------------------------------------
def visible_devices(env: Mapping[str, str] | None = None) -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES tokens.

    CUDA_VISIBLE_DEVICES wins when set (indices, GPU-/MIG- UUIDs; CUDA ignores everything from the
    first invalid token, e.g. "-1", on). Otherwise `nvidia-smi -L` is asked for its GPUs (with MIG
    enabled, set CUDA_VISIBLE_DEVICES to the MIG UUIDs instead). No GPU: an empty list.
    """
    env = os.environ if env is None else env
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        out = []
        for tok in (t.strip() for t in cvd.split(",")):
            if not tok or tok.startswith("-"):
                break
            out.append(tok)
        return out
    try:
        proc = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if proc.returncode != 0:
        return []
    return [m.group(1) for m in re.finditer(r"^GPU (\d+):", proc.stdout, re.MULTILINE)]


def plan_devices(workers: int | None, devices: Sequence[str] | None = None) -> list[str | None]:
    """One device token per worker (round robin when there are more workers than GPUs; None =
    leave CUDA_VISIBLE_DEVICES alone, only when no GPU is visible and a count was given)."""
    devs = list(visible_devices() if devices is None else devices)
    if workers is None:
        if not devs:
            raise NoDeviceError("no GPU visible (CUDA_VISIBLE_DEVICES / nvidia-smi -L found none); "
                                "pass workers=N to run anyway")
        workers = len(devs)
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if not devs:
        return [None] * workers
    return [devs[i % len(devs)] for i in range(workers)]


def resolve(path: str) -> Callable[..., Any]:
    """'package.module:attr.sub' (or 'package.module.attr') -> the object."""
    if ":" in path:
        mod_name, _, attr = path.partition(":")
    else:
        mod_name, _, attr = path.rpartition(".")
    if not mod_name or not attr:
        raise ValueError(f"runner path {path!r} must look like 'package.module:Factory'")
    obj: Any = importlib.import_module(mod_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "exit status unknown"
    if exitcode < 0:
        try:
            return f"killed by signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


# --------------------------------------------------------------------------------------------
# The worker process
# --------------------------------------------------------------------------------------------
def _watch_parent(parent_pid: int, period_s: float = 0.5) -> None:
    def loop() -> None:
        while True:
            time.sleep(period_s)
            if os.getppid() != parent_pid:           # orphaned: take our own children along
                try:
                    if os.getpgrp() == os.getpid():
                        os.killpg(os.getpid(), signal.SIGKILL)
                except OSError:
                    pass
                os._exit(3)
    threading.Thread(target=loop, name="parent-watchdog", daemon=True).start()


def _runner_info(runner: Any) -> dict[str, Any]:
    info: dict[str, Any] = {}
    describe = getattr(runner, "describe", None)
    if callable(describe):
        try:
            d = describe()
            if isinstance(d, Mapping):
                info.update({str(k): v for k, v in d.items()})
        except Exception as exc:  # a describe() bug must not stop the worker
            info["describe_error"] = repr(exc)
    for attr in ("device", "copy_ceiling_tbps"):
        if attr not in info and isinstance(getattr(runner, attr, None), (str, int, float)):
            info[attr] = getattr(runner, attr)
    return info


def _safe_send(conn: Any, msg: tuple) -> bool:
    try:
        conn.send(msg)
        return True
    except (BrokenPipeError, EOFError, OSError):
        return False


def worker_main(conn: Any, runner_path: str, device_token: str | None, device_index: int,
                runner_kwargs: Mapping[str, Any] | None, parent_pid: int) -> None:
    """Entry point of a worker process (spawned): build the runner, then serve jobs until told
    to stop, until the parent goes away, or until a result says the CUDA context is lost."""
    try:
        os.setpgrp()                 # own process group: the parent can kill it with its children
    except OSError:
        pass
    if device_token is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = device_token
    _watch_parent(parent_pid)
    try:
        factory = resolve(runner_path)
        runner = factory(device_index, **dict(runner_kwargs or {}))
        info = _runner_info(runner)
    except BaseException:
        _safe_send(conn, ("startup_error", traceback.format_exc()))
        conn.close()
        os._exit(1)
    info.update(pid=os.getpid(), cuda_visible_devices=device_token)
    if not _safe_send(conn, ("ready", info)):
        os._exit(0)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            break
        if not isinstance(msg, tuple) or not msg or msg[0] == "stop":
            break
        if msg[0] != "job":
            continue
        job: Job = msg[1]
        t0 = time.perf_counter()
        try:
            result = runner.run(job)
            if not isinstance(result, JobResult):
                raise TypeError(f"runner.run returned {type(result).__name__}, not JobResult")
            if not result.seconds:
                result = replace(result, seconds=time.perf_counter() - t0)
        except Exception:
            tb = traceback.format_exc()
            result = JobResult(job_id=job.job_id, status=Status.RUNTIME_ERROR,
                               message=f"runner raised:\n{tb}", device=str(info.get("device", "")),
                               context_lost=bool(_STICKY.search(tb)),
                               seconds=time.perf_counter() - t0)
        try:
            conn.send(("result", result))
        except (BrokenPipeError, EOFError, OSError):
            break
        except Exception:            # the result itself would not pickle
            fallback = JobResult(job_id=job.job_id, status=Status.RUNTIME_ERROR,
                                 message="worker could not send the result back:\n" + traceback.format_exc(),
                                 device=str(result.device), context_lost=result.context_lost,
                                 seconds=result.seconds)
            if not _safe_send(conn, ("result", fallback)):
                break
        if result.context_lost:
            break
    close = getattr(runner, "close", None)
    if callable(close):
        try:
            close()
        except Exception:
            pass
    conn.close()


# --------------------------------------------------------------------------------------------
# The parent side
# --------------------------------------------------------------------------------------------
DOWN, STARTING, READY, BUSY, DISABLED = "down", "starting", "ready", "busy", "disabled"
_LIVE = (STARTING, READY, BUSY)


class _Worker:
    def __init__(self, slot: int, device_token: str | None):
        self.slot = slot
        self.device_token = device_token
        self.proc: Any = None
        self.conn: Any = None
        self.state = DOWN
        self.deadline = 0.0          # startup deadline (STARTING) or job deadline (BUSY)
        self.since = 0.0             # when the current start or job began
        self.job_index: int | None = None
        self.job: Job | None = None
        self.info: dict[str, Any] = {}
        self.start_failures = 0
        self.last_error = ""
        self.pids: list[int] = []    # every pid this slot ever had (for tests and diagnostics)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def __repr__(self) -> str:
        return f"<worker {self.slot} pid={self.pid} gpu={self.device_token} {self.state}>"


# Pools not yet closed, held strongly: worker processes are not daemonic (below), so a pool must be
# closed (killing its process groups) before multiprocessing joins its children at exit.
_LIVE_POOLS: "set[WorkerPool]" = set()


@atexit.register
def _close_all_pools() -> None:
    for pool in list(_LIVE_POOLS):
        try:
            pool.close()
        except Exception:
            pass


class WorkerPool(Pool):
    """Worker processes, one per visible GPU unless `workers` says otherwise (the local pool of
    the fitness.pool contract; each result names this host and the worker's GPU token).

    `run(jobs)` blocks until every job has a JobResult and returns them in job order. Use as a
    context manager, or call `close()`; pools still open at interpreter exit are closed then.
    """

    def __init__(self, workers: int | None = None, *, devices: Sequence[str] | None = None,
                 runner: str = DEFAULT_RUNNER, runner_kwargs: Mapping[str, Any] | None = None,
                 timeout_s: float = 60.0, startup_timeout_s: float = 120.0,
                 max_start_failures: int = 3, stop_grace_s: float = 2.0):
        self.runner = runner
        self.runner_kwargs = dict(runner_kwargs or {})
        self.timeout_s = float(timeout_s)
        self.startup_timeout_s = float(startup_timeout_s)
        self.max_start_failures = int(max_start_failures)
        self.stop_grace_s = float(stop_grace_s)
        self._ctx = multiprocessing.get_context("spawn")
        self._workers = [_Worker(i, tok) for i, tok in enumerate(plan_devices(workers, devices))]
        self._closed = False
        self.node = node_name()
        self._stats: dict[str, float] = dict(
            jobs=0, ok=0, restarts=0, timeouts=0, crashes=0, context_lost=0, runner_errors=0,
            startup_failures=0, idle_deaths=0, busy_seconds=0.0, startup_seconds=0.0)
        _LIVE_POOLS.add(self)

    # -- facts ---------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return len(self._workers)

    @property
    def stats(self) -> dict[str, float]:
        """Counters: jobs, ok, restarts, timeouts, crashes, context_lost, runner_errors,
        startup_failures, idle_deaths, busy_seconds, startup_seconds."""
        return dict(self._stats)

    def worker_info(self) -> list[dict[str, Any]]:
        """Per worker: slot, state, pid, device token, and what its runner reported at startup."""
        return [dict(w.info, slot=w.slot, state=w.state, pid=w.pid, gpu=w.device_token, node=self.node,
                     last_error=w.last_error) for w in self._workers]

    def pids(self, all_time: bool = False) -> list[int]:
        if all_time:
            return [p for w in self._workers for p in w.pids]
        return [w.pid for w in self._workers if w.pid is not None and w.state != DOWN]

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self, wait: bool = True) -> "WorkerPool":
        """Spawn every worker that is down; with `wait`, block until each is ready or has failed
        to start (raises WorkerStartupError when none could)."""
        self._check_open()
        for w in self._workers:
            if w.state == DOWN:
                self._spawn(w)
        if wait:
            while any(w.state == STARTING for w in self._workers):
                self._pump(results=None, jobs=())
            self._require_some_worker()
        return self

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for w in self._workers:
            if w.proc is not None and w.state in (READY, STARTING) and w.conn is not None:
                _safe_send(w.conn, ("stop",))
        deadline = time.monotonic() + self.stop_grace_s
        for w in self._workers:
            if w.proc is None:
                continue
            if w.state in (READY, STARTING):
                w.proc.join(max(0.0, deadline - time.monotonic()))
            self._kill(w)
        _LIVE_POOLS.discard(self)

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- running jobs --------------------------------------------------------------------------
    def run(self, jobs: Sequence[Job], timeout_s: float | Sequence[float] | None = None) -> list[JobResult]:
        """Run every job on some worker; results in job order. `timeout_s`: one hard limit for
        all jobs, or one per job (default: the pool's `timeout_s`)."""
        self._check_open()
        jobs = list(jobs)
        limits = job_limits(jobs, timeout_s, self.timeout_s)
        results: list[JobResult | None] = [None] * len(jobs)
        queue = deque(range(len(jobs)))
        for w in self._workers:
            if w.state == DOWN:
                self._spawn(w)
        while queue or any(w.state == BUSY for w in self._workers):
            for w in self._workers:
                if w.state == READY and queue:
                    i = queue.popleft()
                    if not self._submit(w, i, jobs[i], limits[i], results):
                        queue.appendleft(i)
            self._require_some_worker()
            self._pump(results, jobs)
        return [r if r is not None else JobResult(job_id=j.job_id, status=Status.RUNTIME_ERROR,
                                                   message="no result (pool error)")
                for r, j in zip(results, jobs)]

    # -- internals -----------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise WorkerPoolError("the worker pool is closed")

    def _require_some_worker(self) -> None:
        if all(w.state == DISABLED for w in self._workers):
            errors = "\n---\n".join(f"worker {w.slot} (CUDA_VISIBLE_DEVICES={w.device_token}): {w.last_error}"
                                    for w in self._workers)
            raise WorkerStartupError(f"no GPU worker could start (runner {self.runner!r}):\n{errors}")

    def _spawn(self, w: _Worker) -> None:
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        # Not daemonic: a daemonic process may not start children, and a runner's baselines may
        # need to (QuACK's autotuner compiles its configs in a process pool). Orphans are still
        # impossible: the worker leads its own process group, which close() and _kill() SIGKILL,
        # and its parent watchdog kills that group if this process dies without closing.
        proc = self._ctx.Process(
            target=worker_main, name=f"gpu-worker-{w.slot}", daemon=False,
            args=(child_conn, self.runner, w.device_token, 0, self.runner_kwargs, os.getpid()))
        proc.start()
        child_conn.close()
        w.proc, w.conn, w.state = proc, parent_conn, STARTING
        w.since = time.monotonic()
        w.deadline = w.since + self.startup_timeout_s
        w.pids.append(proc.pid)

    def _kill(self, w: _Worker) -> None:
        proc = w.proc
        if proc is not None:
            if proc.exitcode is None:
                try:
                    if os.getpgid(proc.pid) == proc.pid:     # its own group: take its children too
                        os.killpg(proc.pid, signal.SIGKILL)
                    else:
                        proc.kill()
                except (ProcessLookupError, PermissionError, OSError):
                    try:
                        proc.kill()
                    except Exception:
                        pass
            proc.join(10)
            try:
                proc.close()
            except ValueError:
                pass
        if w.conn is not None:
            try:
                w.conn.close()
            except OSError:
                pass
        w.proc = w.conn = None
        w.job = w.job_index = None
        if w.state != DISABLED:
            w.state = DOWN

    def _restart(self, w: _Worker) -> None:
        self._kill(w)
        self._stats["restarts"] += 1
        if w.state != DISABLED and not self._closed:
            self._spawn(w)

    def _exitcode(self, w: _Worker) -> int | None:
        if w.proc is None:
            return None
        w.proc.join(2)
        return w.proc.exitcode

    def _submit(self, w: _Worker, i: int, job: Job, limit: float, results: list) -> bool:
        try:
            w.conn.send(("job", job))
        except (BrokenPipeError, EOFError, OSError):
            self._died_idle(w)          # the worker was already gone: the job goes back in the queue
            return False
        except Exception:               # the job would not pickle: the caller's bug, not the GPU's
            results[i] = JobResult(job_id=job.job_id, status=Status.RUNTIME_ERROR,
                                   message="job could not be sent to the worker:\n" + traceback.format_exc())
            return True
        w.state, w.job_index, w.job = BUSY, i, job
        w.since = time.monotonic()
        w.deadline = w.since + limit
        return True

    def _pump(self, results: list | None, jobs: Sequence[Job]) -> None:
        """Wait for the next message, death or deadline, and handle whatever happened."""
        waiting: dict[Any, _Worker] = {}
        for w in self._workers:
            if w.state in _LIVE and w.proc is not None:
                waiting[w.conn] = w
                waiting[w.proc.sentinel] = w
        deadlines = [w.deadline for w in self._workers if w.state in (STARTING, BUSY)]
        now = time.monotonic()
        timeout = max(0.0, min(deadlines) - now) if deadlines else 1.0
        ready = mp_connection.wait(list(waiting), timeout=min(timeout, 5.0)) if waiting else []
        for w in {id(waiting[o]): waiting[o] for o in ready}.values():
            self._service(w, results)
        now = time.monotonic()
        for w in self._workers:
            if w.state == BUSY and now >= w.deadline:
                self._timed_out(w, results)
            elif w.state == STARTING and now >= w.deadline:
                self._start_failed(w, f"did not start within {self.startup_timeout_s:g} s")

    def _service(self, w: _Worker, results: list | None) -> None:
        eof = False
        while w.conn is not None and w.state in _LIVE:
            try:
                if not w.conn.poll():
                    break
                msg = w.conn.recv()
            except (EOFError, OSError):
                eof = True
                break
            self._message(w, msg, results)
        if w.proc is None or w.state not in _LIVE:
            return
        if eof:
            w.proc.join(2)           # a worker closes its pipe just before it exits
        elif w.proc.is_alive():
            return
        if w.state == BUSY:
            self._died_busy(w, results)
        elif w.state == STARTING:
            self._start_failed(w, f"worker process ended during startup ({describe_exit(self._exitcode(w))})")
        else:
            self._died_idle(w)

    def _message(self, w: _Worker, msg: Any, results: list | None) -> None:
        kind = msg[0] if isinstance(msg, tuple) and msg else None
        if kind == "ready" and w.state == STARTING:
            w.info = dict(msg[1])
            w.state = READY
            w.start_failures = 0
            w.last_error = ""
            self._stats["startup_seconds"] += time.monotonic() - w.since
        elif kind == "startup_error" and w.state == STARTING:
            self._start_failed(w, str(msg[1]))
        elif kind == "result" and w.state == BUSY:
            result: JobResult = msg[1]
            i, job = w.job_index, w.job
            assert i is not None and job is not None
            if result.job_id != job.job_id:
                result = replace(result, job_id=job.job_id,
                                 message=f"(runner answered job id {result.job_id!r}) {result.message}")
            self._stats["jobs"] += 1
            self._stats["busy_seconds"] += time.monotonic() - w.since
            if result.status is Status.OK:
                self._stats["ok"] += 1
            if result.message.startswith("runner raised:"):
                self._stats["runner_errors"] += 1
            if results is not None:
                results[i] = stamped(result, self.node, w.device_token)
            w.job = w.job_index = None
            w.state = READY
            if result.context_lost:
                self._stats["context_lost"] += 1
                self._restart(w)

    def _died_busy(self, w: _Worker, results: list | None) -> None:
        code = self._exitcode(w)
        i, job = w.job_index, w.job
        elapsed = time.monotonic() - w.since
        self._stats["crashes"] += 1
        self._stats["jobs"] += 1
        self._stats["busy_seconds"] += elapsed
        if results is not None and i is not None and job is not None:
            results[i] = JobResult(
                job_id=job.job_id, status=Status.RUNTIME_ERROR, device=str(w.info.get("device", "")),
                message=f"worker {w.slot} (pid {w.pid}) died running the job: {describe_exit(code)}; restarted",
                seconds=elapsed, extra={"exitcode": code}, node=self.node, gpu=w.device_token or "")
        self._restart(w)

    def _died_idle(self, w: _Worker) -> None:
        w.last_error = f"idle worker died: {describe_exit(self._exitcode(w))}"
        self._stats["idle_deaths"] += 1
        self._restart(w)

    def _timed_out(self, w: _Worker, results: list | None) -> None:
        i, job = w.job_index, w.job
        elapsed = time.monotonic() - w.since
        limit = w.deadline - w.since
        self._stats["timeouts"] += 1
        self._stats["jobs"] += 1
        self._stats["busy_seconds"] += elapsed
        if results is not None and i is not None and job is not None:
            results[i] = JobResult(
                job_id=job.job_id, status=Status.TIMEOUT, device=str(w.info.get("device", "")),
                message=f"no result within {limit:g} s; worker {w.slot} (pid {w.pid}) killed and restarted",
                seconds=elapsed, node=self.node, gpu=w.device_token or "")
        self._restart(w)

    def _start_failed(self, w: _Worker, why: str) -> None:
        self._stats["startup_failures"] += 1
        w.start_failures += 1
        w.last_error = why
        self._kill(w)
        if w.start_failures >= self.max_start_failures:
            w.state = DISABLED
            print(f"[fitness.workers] worker {w.slot} disabled after {w.start_failures} failed starts:\n{why}",
                  file=sys.stderr)
        else:
            w.state = DOWN
            if not self._closed:
                self._spawn(w)
