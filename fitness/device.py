"""The GPU side of the judge: `DeviceRunner.run(job) -> JobResult`, inside one worker process.

A worker (fitness.workers) builds one DeviceRunner for its GPU and hands it Jobs. For each case
the runner follows the CORRECTNESS and TIMING protocols of DESIGN.md; the pieces live in their
own modules and this one puts them in order:

fitness.guarded        guarded, poisoned output buffers and the judgement of what a launch left
fitness.verify         the fused array checks (outputs vs float64, inputs unchanged, fingerprints)
fitness.baseline_runs  baselines prepared, trial-run and checked on the job's own inputs
fitness.timing         the interleaved, poisoned, fingerprinted timing loop

verify (CHECK jobs, VERIFY jobs, and once per case before timing in BENCH jobs)
    Fresh inputs (made on the device where the family can, seeded from the job's seed, which
    the evaluator draws at run time) -> outputs and guard zones poisoned -> launch -> wait (at
    most timing.max_case_seconds) -> inputs bitwise unchanged -> only then the float64
    reference is computed (so no answer sits in device memory while the candidate runs) ->
    guards intact, every output element written and within tolerance. Then DIFFERENT fresh
    inputs go into the SAME buffers (same pointers) and are checked again, which catches kernels
    that cache results keyed on pointers. CHECK jobs run both distributions twice each (large
    cases, over CHECK_FULL_ELEMS elements, once each); BENCH and VERIFY jobs once each, the
    second in the first's buffers. Cases too large for a full float64 reference are judged on
    the rows the family samples (`KernelFamily.reference_sample`), with every element of the
    output still checked written and finite. A family that makes its reference in blocks
    (`KernelFamily.reference_blocks`) is judged block by block (verify.OutputCheck): the same
    verdict, one block of float64 held at a time, the baselines' results fed the same blocks.
time (BENCH jobs)
    Input sets (at least one per distribution; more when they fit in L2, rotated) filled with
    fresh data from the job's run-time timing seed; their buffers are reused between jobs, their
    contents never. See fitness.timing: every candidate launch finds a poisoned output and is
    fingerprinted; the last launch on every set and a few chosen after they ran are judged in
    full; all launches on a set must agree bit for bit. Baselines are timed on the same inputs in
    the same rounds, in rotating order, and their outputs are checked in every job. Afterwards
    the inputs' fingerprints are re-checked. Median and inter-quartile range per implementation.

Device memory (one process holds two allocators: cupy's pool for the judge, torch's caching
allocator for the baselines; neither can use blocks the other caches, and each retries a failed
allocation only after freeing its own). The judge holds at most `cache_limit` of cached timing
sets (entries are evicted before a new one is allocated, so cached + new <= cache_limit; an
entry larger than the limit is used for its case and then let go), verification buffers of at most
VERIFY_CACHE_BYTES, and what the current case needs: a case's prepared baselines (and the tensors
they hold) are dropped when it has been timed, and every allocator's cached blocks are freed
after each timed case. The float64 references a timed case makes leave cupy's pool after each
judgement (`free_own_cache`), so the baselines timed next can have that memory. When an
allocation still fails (cupy's OutOfMemoryError, torch's OutOfMemoryError, CUDA status 2), the
judge drops its caches, frees both allocators' blocks (`_release`) and tries once more: the
reference, a baseline's preparation or timed call, or else the whole case (on inputs drawn afresh:
the first attempt's launches saw the first ones). A second failure is
a value: the case RUNTIME_ERROR with a message naming the memory it needed ("judge out of device
memory: ..."; JobResult.extra["judge_out_of_memory"] lists such cases, and the job goes on with
its next case), or, for a baseline, that baseline's note. Such a job's result asks for a new worker
(context_lost): memory that freeing every allocator did not give back is held where the judge cannot
free it (the driver keeps a context's local memory at the most a launched kernel asked for: a
candidate's kernel with a large stack frame reserves it for every resident thread, for the life of
the context), and it must not fail the next candidates' jobs on this worker. A candidate's launch
refused for want of memory is the candidate's RUNTIME_ERROR (fitness.timing.launch_candidate).

Failures are values: launch errors -> RUNTIME_ERROR (sticky ones such as an illegal address set
context_lost so the worker is replaced), a launch exceeding max_case_seconds -> TIMEOUT (with
context_lost: the kernel may still be running), anything the protocol rejects -> WRONG_RESULT,
an inconsistent launch (too many threads, cluster not dividing the grid, unknown buffer name)
-> INVALID. A bug in the runner or the family is reported as RUNTIME_ERROR with
extra["internal_error"] = True.

The CUDA calls sit behind a small backend (`CupyBackend`, fitness/cuda_backend.py); everything else
is array code written against the backend's array module, so tests drive the whole runner on the
CPU with a numpy backend.

Notes on cupy:
- Cubins are loaded with `cupy.cuda.function.Module().load(bytes)`, not `cupy.RawModule(path=)`:
  RawModule memoises loaded modules per path for the life of the process, so every candidate's
  module (and its __device__ globals) would stay loaded forever. A Module is unloaded when the
  last reference goes, i.e. at the end of each job.
- cupy cannot pass cluster dimensions at launch. A kernel compiled with `__cluster_dims__(x, y, z)`
  gets its clusters from an ordinary cupy launch; the runner reads the compiled cluster shape
  (CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_*) and declares the case INVALID when Launch.cluster
  disagrees with it or the grid is not divisible by it. A kernel compiled without one that is
  asked for a cluster, and any launch with a ByValue argument, goes through the CUDA driver's
  cuLaunchKernelEx instead (fitness.driver_launch: the cluster as a launch attribute, the
  parameters packed by the runner).
"""

from __future__ import annotations

import gc
import math
import time
import traceback
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

import numpy as np

from fitness import baseline_runs, dtypes, verify
from fitness.cuda_backend import (  # noqa: F401 - re-exported: tests and workers name them here
    STATIC_SMEM_LIMIT, STICKY_CUDA_ERRORS, CudaStatusError, CupyBackend, DeviceOutOfMemory, KernelTimeout,
    LaunchInvalid, first_line, format_bytes, is_out_of_memory, oom_bytes)
from fitness.cuda_errors import clear_pending_errors
from fitness.family import Buffer, BufferSpec, Case, KernelFamily, Launch, kernel_arg, load_family
from fitness.guarded import GUARD_MIN_BYTES, GuardedBuffer, guard_bytes_for, judge_outputs, spec_dtype  # noqa: F401
from fitness.jobs import BENCH, CHECK, Job, JobResult, TimingConfig
from fitness.records import JUDGE_OUT_OF_MEMORY, CaseResult, Status
from fitness.timing import (  # noqa: F401 - re-exported
    CANDIDATE, CHECKED_RANDOM_ROUNDS, MAX_INPUT_SETS, LaunchShield, launch_candidate, median_iqr, rotation_sets,
    time_case)

GUARD_BYTES = GUARD_MIN_BYTES      # the smallest guard zone (they grow with the output)
# Inputs with more elements than this are generated and referenced on the device (when the family
# and backend can). 0: all of them. The numpy path stays the executable specification the CPU
# tests run.
HOST_LIMIT_ELEMS = 0
DISTRIBUTIONS = ("normal", "wide")
CHECK_FULL_ELEMS = 1 << 28         # CHECK cases larger than this run each distribution once
VERIFY_CACHE_BYTES = 1 << 30       # verification buffers up to this size are kept for the next case
# A job whose fastest case streamed faster than the worker's ceiling has the ceiling measured again,
# at most this many times in a worker's life (DeviceRunner._recheck_ceiling)
CEILING_RECHECKS = 4

_SEVERITY = {Status.OK: 0, Status.INVALID: 1, Status.WRONG_RESULT: 2, Status.RUNTIME_ERROR: 3,
             Status.TIMEOUT: 4, Status.COMPILE_ERROR: 5}


# ---------------------------------------------------------------------------------------------
# Pure helpers
# ---------------------------------------------------------------------------------------------
def worst_status(statuses: Sequence[Status]) -> Status:
    """The most severe status (OK only when all are OK; an empty list is OK)."""
    return max(statuses, key=lambda s: _SEVERITY[s], default=Status.OK)


def launch_problem(launch: Launch, *, max_threads: int = 1024, max_smem: int = 227 * 1024) -> str | None:
    """Why a Launch cannot be valid on the device, or None."""
    grid, block, cluster = tuple(launch.grid), tuple(launch.block), tuple(launch.cluster)
    if len(grid) != 3 or len(block) != 3 or len(cluster) != 3:
        return f"grid, block and cluster must be 3-tuples, got {grid}, {block}, {cluster}"
    if any(int(g) < 1 for g in grid) or any(int(b) < 1 for b in block) or any(int(c) < 1 for c in cluster):
        return f"grid {grid}, block {block} and cluster {cluster} must be positive"
    threads = block[0] * block[1] * block[2]
    if threads > max_threads:
        return f"block {block} has {threads} threads, more than {max_threads}"
    if grid[0] > 2**31 - 1 or grid[1] > 65535 or grid[2] > 65535:
        return f"grid {grid} exceeds the device limits (2^31-1, 65535, 65535)"
    if any(g % c for g, c in zip(grid, cluster)):
        return f"grid {grid} is not divisible by cluster {cluster}"
    if launch.shared_bytes < 0 or launch.shared_bytes > max_smem:
        return f"dynamic shared memory {launch.shared_bytes} B is more than the {max_smem} B a block may use"
    return None


def resolve_args(launch: Launch, buffers: Mapping[str, Any]) -> list[Any]:
    """Launch.args -> kernel arguments: a Buffer (or a buffer name) becomes its array, None a NULL
    pointer; numpy scalars and ByValue bytes pass by value (the backend packs them). Plain Python
    numbers are refused (cupy would pass them as 64-bit)."""
    out = []
    for i, a in enumerate(launch.args):
        try:
            arg = kernel_arg(a, i)
        except ValueError as exc:
            raise LaunchInvalid(str(exc)) from None
        if isinstance(arg, Buffer):
            if arg.name not in buffers:
                raise LaunchInvalid(f"Launch.args[{i}] names buffer {arg.name!r}, but the case has {sorted(buffers)}")
            out.append(buffers[arg.name])
        else:
            out.append(arg)
    return out


def prepare_overlaps(backend: Any, steps: Sequence[tuple[Any, Launch]]) -> None:
    """Each kernel launched to overlap its predecessor (Launch.overlap) and that predecessor ask
    the same L1/shared split, the most shared memory (backend.prefer_shared_carveout, where the
    backend has it): an SM changes its split only when empty, so two kernels of different
    carveouts would not share one. A first kernel that overlaps follows the call before's last
    (calls are timed back to back). The judge and every tool that launches a candidate as the
    judge does (experiments/device/bwd_ncu_probe.py) call this, so what they measure is one launch."""
    side_by_side = getattr(backend, "prefer_shared_carveout", None)
    if side_by_side is None:
        return
    for i, (kernel, one) in enumerate(steps):
        if one.overlap:
            side_by_side(steps[i - 1][0])
            side_by_side(kernel)


def as_launches(launch: Launch | Sequence[Launch]) -> tuple[Launch, ...]:
    """A case's launch as the sequence the family gives: one Launch, or several run in order
    (e.g. a kernel writing partial sums into a workspace, then one reducing them)."""
    return (launch,) if isinstance(launch, Launch) else tuple(launch)


def distributions(family: KernelFamily) -> tuple[str, ...]:
    d = tuple(getattr(family, "distributions", DISTRIBUTIONS) or DISTRIBUTIONS)
    return d if len(d) >= 2 else d + d


def _prod(shape: Sequence[int]) -> int:
    return int(np.prod([int(s) for s in shape])) if len(shape) else 1


def input_bytes(ins: Mapping[str, BufferSpec]) -> int:
    """The bytes `_alloc_inputs` allocates for these inputs."""
    return sum(_prod(s.shape) * dtypes.storage_dtype(spec_dtype(s)).itemsize for s in ins.values())


def guarded_bytes(outs: Mapping[str, BufferSpec], guard_bytes: int = GUARD_MIN_BYTES) -> int:
    """The bytes GuardedBuffer allocates for these outputs (each with its two guard zones)."""
    total = 0
    for s in outs.values():
        size = dtypes.itemsize(spec_dtype(s))
        n = _prod(s.shape)
        guard = max(1, guard_bytes_for(n * size, guard_bytes) // size)
        total += (n + 2 * guard) * dtypes.bits_dtype(spec_dtype(s)).itemsize
    return total


@dataclass
class TimingBuffers:
    """A case's timing buffers, kept between jobs (their contents are refilled every job)."""

    sets: list[dict[str, Any]]               # device inputs, one dict per rotated set
    out_sets: list[dict[str, GuardedBuffer]]
    nbytes: int
    baselines: baseline_runs.BaselineCache = field(default_factory=baseline_runs.BaselineCache)


@dataclass
class _CaseOutcome:
    result: CaseResult
    context_lost: bool = False
    internal_error: bool = False
    judge_oom: bool = False          # the judge's own memory ran out (also after freeing and a retry)
    retry_oom: bool = False          # an allocation failed: free everything and run the case again


T = TypeVar("T")


@dataclass
class References:
    """The float64 references of one input set, in the one form the family made them: `whole`
    (output -> array), `sampled` (output -> (flat indices, values)) or `blocks` (a lazy iterable
    of (output, first flat index, values): KernelFamily.reference_blocks)."""

    whole: dict[str, Any] | None = None
    sampled: dict[str, tuple[Any, Any]] | None = None
    blocks: Iterable[tuple[str, int, Any]] | None = None


class _OomRetry:
    """A prepared baseline as timed: an out-of-memory error in a call frees what the process
    holds (`release`) and calls it once more; that call's events hold the freeing, so `freed` tells
    the timing loop to keep no sample of it (`retried` counts them for the case's message); a
    second one raises DeviceOutOfMemory (`give_up(exc)`'s, if given), which the timing loop turns
    into the baseline's note ("failed while timed"). The runner's references retry through it too."""

    def __init__(self, fn: Any, release: Any, give_up: Callable[[BaseException], DeviceOutOfMemory] | None = None):
        self.fn, self.release, self.give_up = fn, release, give_up
        self.retried = 0
        self.freed = False

    def __call__(self) -> Any:
        self.freed = False
        try:
            return self.fn()
        except Exception as exc:  # noqa: BLE001
            if not is_out_of_memory(exc):
                raise
        self.freed = True
        self.release()                 # outside the except block: the traceback pins nothing now
        try:
            result = self.fn()
        except Exception as exc:  # noqa: BLE001
            if not is_out_of_memory(exc):
                raise
            if self.give_up is not None:
                raise self.give_up(exc) from None
            needed = oom_bytes(exc)
            size = f" (an allocation of {format_bytes(needed)} failed)" if needed else ""
            raise DeviceOutOfMemory(f"out of device memory{size}, also after freeing every cache and allocator "
                                    f"and trying again [{type(exc).__name__}: {first_line(exc)}]", needed) from None
        self.retried += 1
        return result


# ---------------------------------------------------------------------------------------------
# The runner
# ---------------------------------------------------------------------------------------------
class DeviceRunner:
    """Runs Jobs on one GPU (the one the worker sees as `device_index`, usually 0)."""

    def __init__(self, device_index: int = 0, *, backend: Any = None, cache_fraction: float = 0.3,
                 guard_bytes: int = GUARD_MIN_BYTES, host_limit_elems: int = HOST_LIMIT_ELEMS,
                 measure_copy: bool = True, stop_on_failure: bool = True):
        self.backend = backend if backend is not None else CupyBackend(device_index)
        self.xp = self.backend.xp
        self.guard_bytes = int(guard_bytes)
        self.host_limit_elems = int(host_limit_elems)
        self.stop_on_failure = bool(stop_on_failure)
        self.cache_limit = int(cache_fraction * getattr(self.backend, "total_mem", 0))
        self._families: dict[tuple[str, str], KernelFamily] = {}
        self._timing: OrderedDict[tuple[Any, ...], TimingBuffers] = OrderedDict()
        self._verify_bufs: tuple[Any, dict[str, Any], dict[str, GuardedBuffer]] | None = None
        self._rerun: tuple[int, ...] = ()        # appended to every seed of a case's second attempt
        self.device = self.backend.describe()
        self._context_lost = False
        self._keep_loaded: list[Any] = []
        self.copy_ceiling_tbps: float | None = None
        self.ceiling_rechecks = 0
        if measure_copy:
            try:
                self.copy_ceiling_tbps = float(self.backend.copy_ceiling_tbps())
                self.backend.free_all()
            except Exception:  # noqa: BLE001 - a missing figure only disables the suspect test
                self.copy_ceiling_tbps = None

    def describe(self) -> dict[str, Any]:
        return {"device": self.device, "copy_ceiling_tbps": self.copy_ceiling_tbps,
                "l2_bytes": getattr(self.backend, "l2_bytes", None)}

    def close(self) -> None:
        """Drop cached data; the device is left alone after a lost context (a kernel may still be
        running, and freeing memory would wait for it)."""
        self._timing.clear()
        self._verify_bufs = None
        if self._context_lost:
            return
        try:
            self.backend.free_all()
        except Exception:  # noqa: BLE001
            pass

    # -- the job --------------------------------------------------------------------------------
    def run(self, job: Job) -> JobResult:
        t0 = time.perf_counter()
        results: list[CaseResult] = []
        context_lost = internal = False
        judge_oom: list[str] = []
        message = ""
        module = None
        kernels: dict[str, Any] = {}
        try:
            family = self._family(job.family, job.family_root)
            try:
                module = self.backend.load(job.cubin)
            except Exception as exc:  # noqa: BLE001
                status = self.backend.cuda_status(exc)
                if status is None:
                    raise
                context_lost = status in STICKY_CUDA_ERRORS or not self.backend.context_alive()
                return self._result(job, Status.RUNTIME_ERROR, [], f"the cubin did not load: {exc}", t0,
                                    context_lost=context_lost)
            for idx, case in enumerate(job.cases):
                launch = job.launches.get(case.id)
                if launch is None:
                    results.append(CaseResult(case=case.id, status=Status.INVALID, params=dict(case.params),
                                              message="genome cannot handle this case (launch() returned None)"))
                    continue
                outcome = self._run_case(job, family, module, kernels, idx, case, launch)
                results.append(outcome.result)
                internal = internal or outcome.internal_error
                if outcome.judge_oom:
                    judge_oom.append(case.id)
                if outcome.context_lost:
                    context_lost = True
                    message = f"{case.id}: {outcome.result.status.value}: {outcome.result.message}"
                    break
                if (outcome.result.status not in (Status.OK, Status.INVALID) and self.stop_on_failure
                        and not outcome.judge_oom):          # the judge's memory says nothing of the candidate
                    message = (f"{case.id}: {outcome.result.status.value}: {outcome.result.message} "
                               f"(stopped after the first failing case)")
                    break
        except Exception as exc:  # noqa: BLE001 - a judge bug, or an unexpected CUDA failure
            status = self.backend.cuda_status(exc)
            if status is not None:
                context_lost = status in STICKY_CUDA_ERRORS or not self.backend.context_alive()
                message = f"CUDA error outside a launch: {exc}"
            else:
                internal = True
                message = "judge error:\n" + traceback.format_exc()
            st = worst_status([r.status for r in results] + [Status.RUNTIME_ERROR])
            return self._result(job, st, results, message, t0, context_lost=context_lost, internal=internal,
                                judge_oom=judge_oom)
        finally:
            if context_lost:
                # never unload the module of a kernel that may still be running: cuModuleUnload
                # can wait for it, and the worker must be able to send its result and be replaced
                self._keep_loaded.append((module, dict(kernels)))
            kernels.clear()
            module = None
            if not context_lost:
                try:
                    self.backend.free_all()
                except Exception:  # noqa: BLE001
                    pass
        status = worst_status([r.status for r in results])
        if not message and status is not Status.OK:
            bad = next(r for r in results if r.status is not Status.OK)
            message = f"{bad.case}: {bad.status.value}: {bad.message}"
        if not context_lost:
            self._recheck_ceiling(results)
        return self._result(job, status, results, message, t0, context_lost=context_lost, internal=internal,
                            judge_oom=judge_oom)

    def _recheck_ceiling(self, results: Sequence[CaseResult]) -> None:
        """Measure the streaming ceiling again when a case of this job streamed faster than it, and
        keep, pattern by pattern, the fastest the device did in either measurement.

        Why: the ceiling is measured once when the worker starts, and one measurement can come out
        low. Session 30's H100 worker measured 3.023 TB/s where session 29's had measured 3.080-3.087
        on the same kind of GPU, and four genomes were flagged suspect on launches whose code and
        times (3.10-3.11 TB/s) were those of genomes session 29 had verified unflagged. A kernel
        really faster than the device streams stays faster than any number of measurements; one
        that was only faster than an unlucky measurement is not flagged. The candidate has finished
        when this runs (the ceiling's buffers are its own, 1 GiB each, far beyond L2), so nothing it
        did can raise the figure. At most CEILING_RECHECKS times per worker: a worker judging many
        genomes near the ceiling measures it again a few times, then its figure stands."""
        if not self.copy_ceiling_tbps or self.ceiling_rechecks >= CEILING_RECHECKS:
            return
        # each timed case's TB/s, as the runner recorded it from the family's bytes_moved
        fastest = max((r.tbps for r in results if r.status is Status.OK and r.tbps and math.isfinite(r.tbps)),
                      default=0.0)
        if fastest <= self.copy_ceiling_tbps:
            return
        self.ceiling_rechecks += 1
        before = dict(getattr(self.backend, "ceiling_parts", None) or {})
        try:
            again = float(self.backend.copy_ceiling_tbps())
            self.backend.free_all()
        except Exception:  # noqa: BLE001 - the first figure stands
            return
        after = getattr(self.backend, "ceiling_parts", None)
        if isinstance(after, dict) and before:
            self.backend.ceiling_parts = {k: max(float(before.get(k, 0.0)), float(after.get(k, 0.0)))
                                          for k in {*before, *after}}
        self.copy_ceiling_tbps = max(self.copy_ceiling_tbps, again)

    def _result(self, job: Job, status: Status, results: list[CaseResult], message: str, t0: float, *,
                context_lost: bool = False, internal: bool = False, judge_oom: Sequence[str] = ()) -> JobResult:
        extra: dict[str, Any] = {"internal_error": True} if internal else {}
        parts = getattr(self.backend, "ceiling_parts", None)
        if isinstance(parts, dict) and parts:
            extra["ceiling_tbps_by_pattern"] = {k: float(v) for k, v in parts.items()}
        if self.ceiling_rechecks:
            extra["ceiling_rechecks"] = self.ceiling_rechecks
        if judge_oom:
            extra["judge_out_of_memory"] = list(judge_oom)
            context_lost = True          # what freeing did not give back stays with this process: a new worker
        self._context_lost = self._context_lost or context_lost
        return JobResult(job_id=job.job_id, status=status, cases=tuple(results), message=message,
                         device=self.device, copy_ceiling_tbps=self.copy_ceiling_tbps,
                         context_lost=context_lost, seconds=time.perf_counter() - t0, extra=extra)

    def _family(self, name: str, root: str) -> KernelFamily:
        key = (name, str(root))
        if key not in self._families:
            self._families[key] = load_family(name, Path(root))
        return self._families[key]

    # -- one case ---------------------------------------------------------------------------------
    def _run_case(self, job: Job, family: KernelFamily, module: Any, kernels: dict[str, Any], idx: int,
                  case: Case, launch: Launch | Sequence[Launch]) -> _CaseOutcome:
        """One case; an allocation that fails where no narrower retry covers it (buffers, copies)
        frees everything the judge holds and runs the case once more, verification included, on
        inputs drawn afresh (`_rerun` salts every seed: the first attempt's launches saw the first
        inputs, maybe in the same buffers); a second failure is the judge's, as a value."""
        try:
            for self._rerun in ((), (1,)):
                outcome = self._run_case_once(job, family, module, kernels, idx, case, launch)
                if outcome.retry_oom or (outcome.judge_oom and not outcome.context_lost):
                    self._release()               # the retry, or the next case, starts from what the device has
                if not outcome.retry_oom:
                    return outcome
            return _CaseOutcome(outcome.result, judge_oom=True)
        finally:
            self._rerun = ()

    def _run_case_once(self, job: Job, family: KernelFamily, module: Any, kernels: dict[str, Any], idx: int,
                       case: Case, launch: Launch | Sequence[Launch]) -> _CaseOutcome:
        params = dict(case.params)

        def fail(status: Status, msg: str, **kw: Any) -> _CaseOutcome:
            flags = {k: kw.pop(k) for k in ("context_lost", "internal_error", "judge_oom", "retry_oom")
                     if k in kw}
            return _CaseOutcome(CaseResult(case=case.id, status=status, params=params, message=msg, **kw), **flags)

        timing = job.timing or TimingConfig()
        launches = as_launches(launch)
        if not launches:
            return fail(Status.INVALID, "launch() gave an empty sequence of launches")
        for i, one in enumerate(launches):
            problem = launch_problem(one, max_threads=getattr(self.backend, "max_threads", 1024),
                                     max_smem=getattr(self.backend, "max_smem_optin", 227 * 1024))
            if problem:
                return fail(Status.INVALID, problem if len(launches) == 1 else f"launch {i + 1} of {len(launches)}: {problem}")
        if launches[0].overlap:
            # what runs before a case's first launch is the judge's (the L2 flush, the launch
            # shield's spin, the start event): a kernel may overlap only its own case's launch
            return fail(Status.INVALID, "launch 1 asks to overlap what runs before it (Launch.overlap): only a "
                                        "case's later launches may overlap the launch before them")
        try:
            steps: list[tuple[Any, Launch]] = []
            for one in launches:
                kernel = kernels.get(one.kernel)
                if kernel is None:
                    try:
                        kernel = self.backend.get_kernel(module, one.kernel)
                    except Exception as exc:  # noqa: BLE001
                        if self.backend.cuda_status(exc) is None:
                            raise
                        return fail(Status.INVALID, f"kernel {one.kernel!r} is not in the cubin ({exc})")
                    kernels[one.kernel] = kernel
                self.backend.prepare_kernel(kernel, one)
                steps.append((kernel, one))
            prepare_overlaps(self.backend, steps)
            ins, outs = family.io(case)
            scratch = dict(getattr(family, "workspace", lambda c: {})(case) or {})
            clash = sorted(set(scratch) & (set(ins) | set(outs)))
            if clash:
                raise ValueError(f"workspace buffers {clash} share names with the case's inputs or outputs")
            verdict = self._verify(job, family, case, idx, steps, ins, outs, scratch, timing)
            if isinstance(verdict, str):
                return fail(Status.WRONG_RESULT, verdict)
            max_err, rel = verdict
            if job.stage != BENCH:                   # CHECK and VERIFY jobs end here
                return _CaseOutcome(CaseResult(case=case.id, status=Status.OK, params=params,
                                               max_abs_err=max_err, rel_l2_err=rel))
            return self._bench(job, family, case, steps, ins, outs, scratch, timing, max_err, rel)
        except LaunchInvalid as exc:
            return fail(Status.INVALID, str(exc))
        except KernelTimeout as exc:
            return fail(Status.TIMEOUT, f"a launch exceeded max_case_seconds={timing.max_case_seconds:g}: {exc}",
                        context_lost=True)
        except DeviceOutOfMemory as exc:           # already freed and retried where it happened
            return fail(Status.RUNTIME_ERROR, str(exc), judge_oom=True)
        except Exception as exc:  # noqa: BLE001
            if is_out_of_memory(exc):               # _run_case frees everything and runs the case again
                return fail(Status.RUNTIME_ERROR,
                            self._oom_message("the judge's buffers", family, case, exc,
                                              "also after freeing every cache and allocator and running the case "
                                              "again"), retry_oom=True)
            status = self.backend.cuda_status(exc)
            if status is None:
                return fail(Status.RUNTIME_ERROR, "judge error:\n" + traceback.format_exc(), internal_error=True)
            lost = status in STICKY_CUDA_ERRORS or not self.backend.context_alive()
            return fail(Status.RUNTIME_ERROR, f"CUDA error {status}: {exc}", context_lost=lost)

    # -- inputs and references -------------------------------------------------------------------
    def _on_device(self, family: KernelFamily, ins: Mapping[str, BufferSpec]) -> bool:
        n = sum(_prod(s.shape) for s in ins.values())
        return (bool(getattr(family, "supports_device_arrays", False)) and getattr(self.backend, "has_device_rng", False)
                and n > self.host_limit_elems)

    def _alloc_inputs(self, ins: Mapping[str, BufferSpec]) -> dict[str, Any]:
        return {n: self.xp.empty(tuple(s.shape), dtype=dtypes.storage_dtype(spec_dtype(s))) for n, s in ins.items()}

    def _fill_inputs(self, family: KernelFamily, case: Case, rng: np.random.Generator, distribution: str,
                     ins: Mapping[str, BufferSpec], into: Mapping[str, Any]) -> Mapping[str, Any]:
        """Fresh inputs written into the existing buffers `into`; returns what the reference is
        to be computed from later: the host arrays (host-made inputs) or `into` itself."""
        if self._on_device(family, ins):
            gen = self.backend.device_rng(int(rng.integers(0, 2**63 - 1)))
            made = family.make_inputs(case, gen, distribution, xp=self.xp)
        else:
            made = family.make_inputs(case, rng, distribution)
        for name, spec in ins.items():
            if name not in made:
                raise ValueError(f"make_inputs gave no {name!r} (got {sorted(made)})")
            src = made[name]
            want = dtypes.storage_dtype(spec_dtype(spec))
            if tuple(src.shape) != tuple(spec.shape) or src.dtype != want:
                raise ValueError(f"make_inputs gave {name} {tuple(src.shape)} {src.dtype}, the spec says "
                                 f"{tuple(spec.shape)} {want}")
            self.backend.upload(into[name], src)
        return into if self._on_device(family, ins) else made

    def _judged(self, family: KernelFamily, case: Case, source: Mapping[str, Any], rng: np.random.Generator,
                use: Callable[[References], T], keep: Any = None) -> T:
        """`use(references)` with the float64 references of the inputs (`_make_references`). Out
        of device memory while they are made or used: everything the judge holds is freed (but
        the timing entry `keep`, in use) and it is done once more (with the same draws of `rng`);
        a second failure raises DeviceOutOfMemory naming the memory the references needed."""
        state = getattr(getattr(rng, "bit_generator", None), "state", None)

        def release() -> None:
            self._release(keep=keep)
            if state is not None:
                rng.bit_generator.state = state          # the retry draws what the failed attempt drew

        def give_up(exc: BaseException) -> DeviceOutOfMemory:
            return DeviceOutOfMemory(self._oom_message("the float64 reference", family, case, exc,
                                                       "also after freeing every cache and allocator and trying again"),
                                     oom_bytes(exc))

        return _OomRetry(lambda: use(self._make_references(family, case, source, rng)), release, give_up)()

    def _make_references(self, family: KernelFamily, case: Case, source: Mapping[str, Any],
                         rng: np.random.Generator) -> References:
        """The references the family offers, in this order of preference: sampled (a case too
        large for a full check), in blocks (never more than a block of float64 held at once:
        KernelFamily.reference_blocks, made lazily while judged), else whole."""
        sample_fn = getattr(family, "reference_sample", None)
        sample = sample_fn(case, source, rng) if callable(sample_fn) else None
        if sample is not None:
            return References(sampled={k: (self.xp.asarray(i), self.xp.asarray(v)) for k, (i, v) in sample.items()})
        blocks_fn = getattr(family, "reference_blocks", None)
        blocks = blocks_fn(case, source) if callable(blocks_fn) else None
        if blocks is not None:
            return References(blocks=blocks)
        return References(whole={k: self.xp.asarray(v) for k, v in family.reference(case, source).items()})

    def _judge(self, family: KernelFamily, case: Case, source: Mapping[str, Any], outputs: Mapping[str, GuardedBuffer],
               tols: Mapping[str, Any], rng: np.random.Generator,
               scratch: Sequence[str] = ()) -> tuple[str | None, float | None, float | None]:
        return self._judged(family, case, source, rng, lambda refs: judge_outputs(
            outputs, refs.whole or {}, tols, sampled=refs.sampled, blocks=refs.blocks, scratch=scratch))

    # -- verification ------------------------------------------------------------------------------
    def _launch_and_wait(self, steps: Sequence[tuple[Any, Launch]], buffers: Mapping[str, Any], timeout_s: float) -> None:
        launch_candidate(self.backend, steps, [resolve_args(launch, buffers) for _, launch in steps])
        self.backend.wait(self.backend.record(), timeout_s)

    def _verify_buffers(self, ins: Mapping[str, BufferSpec],
                        outs: Mapping[str, BufferSpec]) -> tuple[dict[str, Any], dict[str, GuardedBuffer]]:
        """Input and guarded output buffers for verification, reused from the previous case when
        the shapes and dtypes agree (small ones only: big ones would hold memory the timing needs).
        Every round poisons the outputs and writes fresh inputs, so reuse carries nothing over."""
        key = (tuple((n, tuple(s.shape), spec_dtype(s)) for n, s in ins.items()),
               tuple((n, tuple(s.shape), spec_dtype(s)) for n, s in outs.items()), self.guard_bytes)
        if self._verify_bufs is not None and self._verify_bufs[0] == key:
            return self._verify_bufs[1], self._verify_bufs[2]
        self._verify_bufs = None
        dev_in = self._alloc_inputs(ins)
        out_bufs = {n: GuardedBuffer(self.xp, s, self.guard_bytes) for n, s in outs.items()}
        nbytes = sum(int(a.nbytes) for a in dev_in.values()) + sum(b.nbytes for b in out_bufs.values())
        if nbytes <= VERIFY_CACHE_BYTES:
            self._verify_bufs = (key, dev_in, out_bufs)
        return dev_in, out_bufs

    def _rounds(self, job: Job, family: KernelFamily, ins: Mapping[str, BufferSpec]) -> list[tuple[str, int]]:
        """(distribution, call) per verification round; call 2 writes new data into the same buffers."""
        d = distributions(family)
        big = sum(_prod(s.shape) for s in ins.values()) > CHECK_FULL_ELEMS
        if job.stage == CHECK and not big:
            return [(d[0], 1), (d[0], 2), (d[1], 1), (d[1], 2)]
        return [(d[0], 1), (d[1], 2)]

    def _verify(self, job: Job, family: KernelFamily, case: Case, idx: int, steps: Sequence[tuple[Any, Launch]],
                ins: Mapping[str, BufferSpec], outs: Mapping[str, BufferSpec], scratch: Mapping[str, BufferSpec],
                timing: TimingConfig) -> str | tuple[float | None, float | None]:
        """A failure message, or (max_abs_err, rel_l2) of the first output over all rounds.
        Workspace buffers (`scratch`) are poisoned and guarded like outputs, never judged."""
        rng = np.random.default_rng([int(job.seed) & 0xFFFFFFFFFFFF, idx, *self._rerun])
        tols = family.tolerances(case)
        dev_in, out_bufs = self._verify_buffers(ins, {**outs, **scratch})
        buffers = dict(dev_in)
        buffers.update({n: b.data for n, b in out_bufs.items()})
        worst_err: float | None = None
        worst_rel: float | None = None
        for distribution, call in self._rounds(job, family, ins):
            source = self._fill_inputs(family, case, rng, distribution, ins, dev_in)
            before = {n: a.copy() for n, a in dev_in.items()}
            for b in out_bufs.values():
                b.poison()
            self._launch_and_wait(steps, buffers, timing.max_case_seconds)
            where = (f"{distribution} inputs, call {call}"
                     + (" (new data in the same buffers)" if call == 2 else ""))
            unchanged = verify.inputs_unchanged(before, dev_in)
            if not unchanged:
                return f"[{where}] {unchanged.message}"
            # the reference is made only now, from the (unchanged) inputs
            problem, err, rel = self._judge(family, case, before if source is dev_in else source, out_bufs, tols, rng,
                                            scratch=tuple(scratch))
            if problem:
                return f"[{where}] {problem}"
            if err is not None:
                worst_err = err if worst_err is None else max(worst_err, err)
            if rel is not None:
                worst_rel = rel if worst_rel is None else max(worst_rel, rel)
            del before, source
        return worst_err, worst_rel

    # -- timing -------------------------------------------------------------------------------------
    def _timing_buffers(self, job: Job, family: KernelFamily, case: Case, ins: Mapping[str, BufferSpec],
                        outs: Mapping[str, BufferSpec]) -> tuple[Any, TimingBuffers]:
        """(cache key, the case's timing buffers). Older entries are evicted (least recently used
        first) BEFORE the new one is allocated, until cached + new <= cache_limit, and their
        blocks go back to the device at once (free_all), so the peak never holds them beside the
        new entry and torch can use what they held. An entry larger than the limit is not cached:
        it is let go when its case has been timed."""
        n_sets = rotation_sets(int(family.bytes_moved(case)), int(getattr(self.backend, "l2_bytes", 0)),
                               enabled=job.timing.rotate_inputs, minimum=len(distributions(family)))
        key = (job.family, str(job.family_root), case.id,
               tuple((n, tuple(s.shape), spec_dtype(s)) for n, s in {**ins, **outs}.items()))
        tb = self._timing.get(key)
        if tb is not None and len(tb.sets) == n_sets:
            self._timing.move_to_end(key)
            return key, tb
        evicted = tb is not None
        if evicted:
            del self._timing[key]
        tb = None
        need = n_sets * (input_bytes(ins) + guarded_bytes(outs, self.guard_bytes))
        cached = sum(t.nbytes for t in self._timing.values())
        while self._timing and cached + need > self.cache_limit:
            cached -= self._timing.popitem(last=False)[1].nbytes
            evicted = True
        if evicted:
            self.backend.free_all()
        sets, out_sets, nbytes = [], [], 0
        for _ in range(n_sets):
            dev = self._alloc_inputs(ins)
            sets.append(dev)
            out_sets.append({n: GuardedBuffer(self.xp, sp, self.guard_bytes) for n, sp in outs.items()})
            nbytes += sum(int(a.nbytes) for a in dev.values()) + sum(g.nbytes for g in out_sets[-1].values())
        tb = TimingBuffers(sets=sets, out_sets=out_sets, nbytes=nbytes)
        if nbytes <= self.cache_limit:
            self._timing[key] = tb
        return key, tb

    def _release(self, keep: Any = None) -> None:
        """Free what the judge holds, for an allocation that failed: the cached timing entries
        (but `keep`, in use), the cached verification buffers, unreachable objects (a torch graph
        in a reference cycle), then every allocator's cached blocks (backend.free_all: cupy's
        pools and torch's cache). The failed cudaMalloc's error is cleared from every loaded CUDA
        runtime, so that the next library to check for errors does not report it as its own."""
        for k in [k for k in self._timing if k != keep]:
            del self._timing[k]
        self._verify_bufs = None
        gc.collect()
        self.backend.free_all()
        clear_pending_errors()

    def _oom_message(self, what: str, family: KernelFamily, case: Case, exc: BaseException, after: str) -> str:
        """'judge out of device memory: ' what ran out, the allocation that failed, what the case's
        buffers take, what the judge caches and what the device held (when the backend says)."""
        needed = oom_bytes(exc)
        parts = [f"{what} for {case.id} could not get device memory"
                 + (f" (an allocation of {format_bytes(needed)} = {needed:,} bytes failed)" if needed else "")]
        try:
            ins, outs = family.io(case)
            scratch = dict(getattr(family, "workspace", lambda c: {})(case) or {})
            per_set = input_bytes(ins) + guarded_bytes({**outs, **scratch}, self.guard_bytes)
            parts.append(f"the case's inputs and guarded outputs take {format_bytes(per_set)} per input set")
        except Exception:  # noqa: BLE001 - the message goes without it
            pass
        cached = sum(t.nbytes for t in self._timing.values())
        parts.append(f"the judge caches {format_bytes(cached)} of timing sets (limit {format_bytes(self.cache_limit)})")
        use = getattr(self.backend, "memory_use", None)
        if callable(use):
            try:
                parts.append("device: " + ", ".join(f"{k} {format_bytes(v)}" for k, v in use().items()))
            except Exception:  # noqa: BLE001
                pass
        alive = getattr(self.backend, "tensors_alive", None)
        if callable(alive):
            try:
                if said := alive():
                    parts.append(said)
            except Exception:  # noqa: BLE001
                pass
        return f"{JUDGE_OUT_OF_MEMORY}: {'; '.join(parts)}; {after} [{type(exc).__name__}: {first_line(exc)}]"

    def _bench(self, job: Job, family: KernelFamily, case: Case, steps: Sequence[tuple[Any, Launch]],
               ins: Mapping[str, BufferSpec], outs: Mapping[str, BufferSpec], scratch: Mapping[str, BufferSpec],
               timing: TimingConfig, max_err: float | None, rel: float | None) -> _CaseOutcome:
        """Time the candidate interleaved with the baselines on fresh inputs (fitness.timing). The
        baselines prepared for it are dropped afterwards (prepared anew in every job anyway), and
        every allocator's cached blocks freed, so the next case finds the device as this one's
        timing sets leave it."""
        self.backend.free_all()          # give the verification's blocks back (torch allocates separately)
        key, tb = self._timing_buffers(job, family, case, ins, {**outs, **scratch})
        try:
            outcome = self._time(job, family, case, steps, ins, outs, scratch, timing, max_err, rel, key, tb)
        finally:
            tb.baselines.drop_runs()
            del tb
        if not outcome.context_lost:     # a kernel that may still run: leave the device alone
            self.backend.free_all()
        return outcome

    def _time(self, job: Job, family: KernelFamily, case: Case, steps: Sequence[tuple[Any, Launch]],
              ins: Mapping[str, BufferSpec], outs: Mapping[str, BufferSpec], scratch: Mapping[str, BufferSpec],
              timing: TimingConfig, max_err: float | None, rel: float | None, key: Any,
              tb: TimingBuffers) -> _CaseOutcome:
        params = dict(case.params)
        tols = family.tolerances(case)
        seed = int(getattr(job, "timing_seed", 0) or 0)
        rng = np.random.default_rng([seed & 0xFFFFFFFFFFFFFFFF, zlib.crc32(case.id.encode()), *self._rerun])
        dists = distributions(family)
        sources = []
        for s, dev in enumerate(tb.sets):
            src = self._fill_inputs(family, case, np.random.default_rng([seed & 0xFFFFFFFFFFFFFFFF,
                                                                         zlib.crc32(case.id.encode()), s, *self._rerun]),
                                    dists[s % len(dists)], ins, dev)
            sources.append(src)
        prints = [verify.fingerprints(dev) for dev in tb.sets]
        buffers = []
        for s in range(len(tb.sets)):
            b = dict(tb.sets[s])
            b.update({n: g.data for n, g in tb.out_sets[s].items()})
            buffers.append(b)
        args = [[resolve_args(launch, b) for _, launch in steps] for b in buffers]
        for bufs in tb.out_sets:
            for g in bufs.values():
                g.poison()

        def release() -> None:
            self._release(keep=key)

        names, notes = baseline_runs.prepare(self.backend, family, case, tb.sets, list(timing.baselines),
                                             tb.baselines, release=release)
        timed = {k: _OomRetry(fn, release) for k, fn in tb.baselines.runs.items()}
        free_own = getattr(self.backend, "free_own_cache", None)
        nondet = set(getattr(family, "nondeterministic_outputs", lambda c: ())(case) or ())
        deterministic = [n for n in outs if n not in nondet]

        def judged(s: int, baseline_results: Mapping[str, Any] | None, refs: References) -> str | None:
            runs = {name: tb.baselines.runs[(name, 0)] for name in (baseline_results or {})}
            if refs.blocks is not None:      # the baselines' results judged by the same blocks, made once
                checks = {name: baseline_runs.BlockChecks(self.xp, runs[name], result, tols, outs, name)
                          for name, result in (baseline_results or {}).items()}
                problem, _, _ = judge_outputs(tb.out_sets[s], {}, tols, blocks=refs.blocks,
                                              beside=baseline_runs.by_output(checks.values()), scratch=tuple(scratch))
                new_notes = {name: c.note() for name, c in checks.items()}
            else:
                problem, _, _ = judge_outputs(tb.out_sets[s], refs.whole or {}, tols, sampled=refs.sampled,
                                              scratch=tuple(scratch))
                new_notes = {name: baseline_runs.check_result(self.xp, runs[name], result, refs.whole, tols, outs, name)
                             for name, result in (baseline_results or {}).items()}
            notes.update({name: note for name, note in new_notes.items() if note})
            return problem

        def judge(s: int, baseline_results: Mapping[str, Any] | None) -> str | None:
            problem = self._judged(family, case, sources[s], rng, lambda refs: judged(s, baseline_results, refs),
                                   keep=key)
            if callable(free_own):
                free_own()               # the reference's blocks: to the device, where the baselines can get them
            return problem

        checked = {name for name in names if baseline_runs.checkable(tb.baselines.runs.get((name, 0)))}
        outcome = time_case(self.backend, steps=steps, args=args, out_sets=tb.out_sets,
                            baselines=timed, names=names, timing=timing, rng=rng, judge=judge,
                            deterministic=deterministic, checked=checked)
        if outcome.status is not Status.OK:
            return _CaseOutcome(CaseResult(case=case.id, status=outcome.status, params=params, message=outcome.message),
                                context_lost=outcome.status is Status.TIMEOUT)
        # the inputs must be intact (all fingerprints in one sync)
        for s in range(len(tb.sets)):
            now = verify.fingerprints(tb.sets[s])
            for n in tb.sets[s]:
                if now[n] != prints[s][n]:
                    return _CaseOutcome(CaseResult(case=case.id, status=Status.WRONG_RESULT, params=params,
                                                   message=f"[timed launches, input set {s}] input {n} was "
                                                           f"modified by the kernel"))
        med, iqr = median_iqr(outcome.samples[CANDIDATE])
        time_us = med * 1e3
        bytes_moved = int(family.bytes_moved(case))
        tbps = bytes_moved / (time_us * 1e-6) / 1e12 if time_us > 0 else None
        base_us = {n: median_iqr(outcome.samples[n])[0] * 1e3 for n in names
                   if outcome.samples[n] and n not in outcome.dropped}
        msgs = [notes[n] if notes[n].startswith("baseline ") else f"baseline {n}: {notes[n]}"
                for n in timing.baselines if n in notes]
        msgs += list(outcome.dropped.values())
        retried = {k[0]: 0 for k in timed}
        for (n, _), w in timed.items():
            retried[n] += w.retried
        msgs += [f"baseline {n}: ran out of device memory while timed and was called again after freeing every "
                 f"cache and allocator ({k} such calls, not counted as samples)" for n, k in retried.items()
                 if k and n not in outcome.dropped]
        msgs += outcome.notes
        msgs.append(f"{outcome.launches} launches poisoned and fingerprinted, {len(outcome.judged)} judged in full")
        return _CaseOutcome(CaseResult(case=case.id, status=Status.OK, params=params, time_us=time_us,
                                       spread_us=iqr * 1e3, samples=len(outcome.samples[CANDIDATE]), tbps=tbps,
                                       baselines_us=base_us, max_abs_err=max_err, rel_l2_err=rel,
                                       message="; ".join(msgs)))


__all__ = ["CHECKED_RANDOM_ROUNDS", "CupyBackend", "DeviceRunner", "GuardedBuffer", "KernelTimeout", "LaunchInvalid",
           "LaunchShield", "MAX_INPUT_SETS", "STICKY_CUDA_ERRORS", "judge_outputs", "launch_problem", "median_iqr",
           "resolve_args", "rotation_sets", "worst_status"]
