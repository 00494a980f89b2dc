"""Messages between the evaluator (parent process) and a GPU worker process.

Everything here is plain picklable data: a worker receives a Job, runs it on its GPU with
`fitness.device.DeviceRunner.run(job)` and sends back a JobResult. Keeping the boundary this
narrow is what lets a faulting or hung kernel take down only its worker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from fitness.family import Case, Launch
from fitness.records import CaseResult, Status

#: The judge's correctness and timing protocol. Evidence judged under another protocol is never
#: carried into a run (GPUEvaluator.accepts_evidence): 1 = up to session 9; 2 = every timed launch
#: poisoned and fingerprinted, fresh timing inputs per job, the family's wider CHECK cases,
#: device-state and runtime-call checks, untimed cases of a hopeless cut verified.
JUDGE_PROTOCOL = 2

CHECK = "check"   # cheap stage: verify on the family's small awkward check cases, no timing
BENCH = "bench"   # full stage: verify and time every benchmark case beside the baselines
VERIFY = "verify" # verify benchmark cases without timing them (cases a hopeless cut leaves untimed)


@dataclass(frozen=True)
class TimingConfig:
    reps: int = 50                  # timed launches per case (median and IQR recorded)
    warmup: int = 5
    flush_l2: bool = True
    rotate_inputs: bool = True      # several input sets when they fit in L2
    baselines: tuple[str, ...] = ("torch",)
    max_case_seconds: float = 10.0  # a case whose single launch exceeds this is abandoned
    # timed launches of each baseline per case and job (None: reps), spread evenly over the
    # candidate's rounds; baselines are always timed on the job's own inputs, never pooled
    baseline_reps: int | None = None


@dataclass(frozen=True)
class Job:
    job_id: str
    key: str                                # genome key (for logs)
    stage: str                              # CHECK or BENCH
    family: str                             # kernels/<family>
    family_root: str                        # folder holding kernel families (kernels/ or a test dir)
    cubin: bytes
    cases: tuple[Case, ...]
    launches: Mapping[str, Launch | None]   # case id -> launch (None: genome can't handle the case)
    seed: int = 0                           # seeds fresh inputs for verification (drawn at run time)
    timing_seed: int = 0                    # seeds the timing inputs (drawn at run time, recorded)
    timing: TimingConfig = field(default_factory=TimingConfig)


@dataclass(frozen=True)
class JobResult:
    job_id: str
    status: Status                          # worst status over the cases (OK only if all OK)
    cases: tuple[CaseResult, ...] = ()
    message: str = ""
    device: str = ""                        # e.g. "NVIDIA H200 (sm_90, 132 SMs, driver 580.x)"
    copy_ceiling_tbps: float | None = None  # measured device-to-device copy, read + write
    context_lost: bool = False              # sticky CUDA error: the worker must be restarted
    seconds: float = 0.0
    extra: Mapping[str, Any] = field(default_factory=dict)
    node: str = ""                          # the host that judged it (set by the pool)
    gpu: str = ""                           # its GPU there, as a CUDA_VISIBLE_DEVICES token
