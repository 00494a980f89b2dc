"""Stand-ins for fitness.device.DeviceRunner, for worker-pool and evaluator tests without a GPU.

`ScriptedRunner` does what the job's key says, so one worker can be sent a mix of behaviours:

    ok            a JobResult OK with one CaseResult per case
    sleep:S       sleep S seconds, then as ok
    hang          sleep forever (the pool must time it out)
    segv          SIGSEGV the worker process
    exit:N        os._exit(N)
    raise         raise ValueError (caught in the worker, which stays up)
    sticky        raise an error whose text is a sticky CUDA error (worker must be replaced)
    lost          return a result with context_lost=True
    spawn_hang:P  start a `sleep` grandchild, write its pid to file P, then hang
    wrong         a WRONG_RESULT JobResult
    mp_pool       start a multiprocessing process pool and use it (as QuACK's autotuner does)

`run` also reports the worker's pid and CUDA_VISIBLE_DEVICES in JobResult.extra.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

from fitness.jobs import Job, JobResult
from fitness.records import CaseResult, Status


def _child_pid(_: int) -> int:
    return os.getpid()


class ScriptedRunner:
    def __init__(self, device_index: int):
        self.device_index = device_index
        self.device = f"fake GPU {device_index} (pid {os.getpid()})"
        self.copy_ceiling_tbps = 4.0

    def describe(self) -> dict:
        return {"device": self.device, "copy_ceiling_tbps": self.copy_ceiling_tbps}

    def _ok(self, job: Job, status: Status = Status.OK) -> JobResult:
        cases = tuple(CaseResult(case=c.id, status=status, time_us=10.0, samples=1) for c in job.cases)
        return JobResult(job_id=job.job_id, status=status, cases=cases, device=self.device,
                         copy_ceiling_tbps=self.copy_ceiling_tbps, seconds=0.001,
                         extra={"pid": os.getpid(), "cvd": os.environ.get("CUDA_VISIBLE_DEVICES")})

    def run(self, job: Job) -> JobResult:
        what, _, arg = job.key.partition(":")
        if what == "ok":
            return self._ok(job)
        if what == "sleep":
            time.sleep(float(arg))
            return self._ok(job)
        if what == "hang":
            while True:
                time.sleep(3600)
        if what == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
            time.sleep(10)
        if what == "exit":
            os._exit(int(arg))
        if what == "raise":
            raise ValueError("candidate-shaped bug in the runner")
        if what == "sticky":
            raise RuntimeError("cudaErrorIllegalAddress: an illegal memory access was encountered")
        if what == "lost":
            return JobResult(job_id=job.job_id, status=Status.RUNTIME_ERROR, message="illegal address",
                             context_lost=True, device=self.device, extra={"pid": os.getpid()})
        if what == "spawn_hang":
            child = subprocess.Popen(["sleep", "1000"])
            with open(arg, "w") as fh:
                fh.write(str(child.pid))
            while True:
                time.sleep(3600)
        if what == "wrong":
            return self._ok(job, Status.WRONG_RESULT)
        if what == "mp_pool":
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn")) as ex:
                pids = set(ex.map(_child_pid, range(4)))
            result = self._ok(job)
            result.extra["child_pids"] = sorted(pids)
            return result
        raise KeyError(f"fake runner: unknown script {job.key!r}")


class BrokenRunner:
    """Cannot start (like a worker without cupy or without a GPU)."""

    def __init__(self, device_index: int):
        raise ImportError("no module named cupy (fake)")


class SlowStartRunner(ScriptedRunner):
    """Takes longer to start than a short startup timeout."""

    def __init__(self, device_index: int):
        time.sleep(30)
        super().__init__(device_index)


class EchoRunner(ScriptedRunner):
    """Answers any real job: every case it can launch runs in 10 us, torch in 20 us; cases the
    genome cannot handle (launch None) come back INVALID. Proves Jobs cross the process boundary."""

    def run(self, job: Job) -> JobResult:
        cases = []
        for c in job.cases:
            launch = job.launches.get(c.id)
            if launch is None:
                cases.append(CaseResult(case=c.id, status=Status.INVALID, message="no launch"))
            else:
                cases.append(CaseResult(case=c.id, time_us=10.0, samples=job.timing.reps,
                                        baselines_us={b: 20.0 for b in job.timing.baselines}))
        status = Status.OK if all(c.status is Status.OK for c in cases) else Status.INVALID
        return JobResult(job_id=job.job_id, status=status, cases=tuple(cases), device=self.device,
                         copy_ceiling_tbps=self.copy_ceiling_tbps, seconds=0.25,
                         extra={"pid": os.getpid(), "cubin": len(job.cubin)})
