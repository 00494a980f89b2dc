"""The staged judging pipeline, as small steps that can each be tested with fakes.

    stage 0  render + compile (Compiler.compile_many, in parallel) + static checks
             -> COMPILE_ERROR / INVALID stop here, with the compile log, the ptxas resource report
                and the static problems as artifacts
    stage 1  a CHECK job (the family's small awkward check cases, no timing) per survivor
             -> WRONG_RESULT / RUNTIME_ERROR / TIMEOUT / INVALID stop here
    stage 2  a BENCH job (the benchmark matrix, verified and timed beside the baselines) for the
             candidates that passed. With `hopeless_below` set, the few largest-bytes cases run
             first; a candidate whose geomean speedup there is below `hopeless_below` stops with
             status OK, objectives over the cases it ran and artifacts["truncated"] saying why.

Every step takes plain inputs (genomes, `Settings`, anything with `compile_many`, anything with
`run(jobs, timeout_s=...)`) and works on `Judging` records; `finalize` turns a candidate into
its Evaluation. `run_cascade` chains the steps. Nothing here raises for a candidate's fault; a
broken machine (no toolkit, no worker can start) still raises from the compiler or the pool.
"""

from __future__ import annotations

import json
import re
import secrets
import time
import traceback
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from fitness import objectives as obj
from fitness.family import Case, KernelFamily, Launch
from fitness.jobs import BENCH, CHECK, JUDGE_PROTOCOL, VERIFY, Job, JobResult, TimingConfig
from fitness.records import CaseResult, Evaluation, Status
from fitness.sass import instructions
from fitness.baseline_runs import machine_missing
from fitness.toolchain import ToolchainError
from fitness.workers import BaselineUnavailableError
from genomes import Genome

LOG_CHARS = 20_000          # compile logs and job messages kept in artifacts are cut to this
MESSAGE_CHARS = 300         # Evaluation.message stays one concise line

# Opcodes worth counting in the SASS summary: TMA, wgmma, async copies, barriers, memory traffic.
NOTABLE_OPCODES = frozenset({
    "UTMALDG", "UTMASTG", "UTMAPF", "UTMACCTL", "UBLKCP", "UBLKRED", "UBLKPF", "HGMMA", "WARPGROUP",
    "LDGSTS", "LDGDEPBAR", "DEPBAR", "SYNCS", "LDG", "STG", "LDS", "STS", "LDSM", "STSM", "LDL", "STL",
    "LD", "ST", "SHFL", "BAR", "BSYNC", "MEMBAR", "FENCE", "RED", "REDUX", "REDG", "ATOM", "ATOMS",
    "ATOMG", "MUFU", "ELECT", "UCGABAR_ARV", "UCGABAR_WAIT", "CCTL", "PRMT", "F2FP", "HADD2", "HFMA2",
    "FFMA", "FMUL", "FADD", "IMAD", "BRA", "EXIT", "USETMAXREG", "STAS", "REDAS", "ACQBULK", "PREEXIT",
    "UTMACMDFLUSH",
})
_WIDTH_OPS = ("LDG", "STG", "LDS", "STS", "LD", "ST", "LDL", "STL")


# --------------------------------------------------------------------------------------------
# Inputs and state
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    """Everything the stages need that is not a genome, fixed for a run."""

    family: KernelFamily
    family_name: str
    family_root: str
    bench_cases: tuple[Case, ...]
    check_cases: tuple[Case, ...] = ()
    bytes_moved: Mapping[str, int] = field(default_factory=dict)   # case id -> fewest bytes
    flops: Mapping[str, int] = field(default_factory=dict)         # case id -> fewest flops (0: none)
    peak_tflops: float | None = None                               # tensor-core peak of the target
    baseline: str = "torch"
    baselines: tuple[str, ...] = ("torch",)
    timing: TimingConfig = field(default_factory=TimingConfig)
    check: bool = True
    seed: int = 0
    timeout_s: float = 60.0                  # hard limit of a CHECK job
    bench_case_timeout_s: float | None = None  # BENCH job limit per case (default timeout_s)
    hopeless_below: float | None = None
    hopeless_cases: int = 2
    # a case parameter (e.g. "dtype") splitting the matrix into groups probed separately: the
    # probe takes the hopeless_cases largest of each group, and a candidate is cut only if it is
    # hopeless in every group (a bf16 specialist must not be cut by its fp32 rows)
    hopeless_group: str | None = None
    # None: a benchmark case the genome cannot run (launch() returns None) makes it INVALID; a
    # number: such a case counts as this speedup in the objectives and the genome stays OK, so a
    # specialist (e.g. rows staged in shared memory, which must fit) can win the cases it runs
    unsupported_speedup: float | None = None
    suspect_slack: float = 1.02
    # drawn at run time (GPUEvaluator): mixed into every verification seed, so no candidate can
    # know its inputs from the run's config; recorded with each evaluation
    nonce: int = 0
    toolkit: str = ""
    device: str = ""                         # used for candidates that never reached a GPU

    def job_timeout(self, job: Job) -> float:
        """The pool's hard limit for a job: CHECK gets timeout_s; BENCH gets bench_case_timeout_s
        (default timeout_s) per case, never less than timeout_s. It is the last resort: the device
        runner already abandons a single launch after timing.max_case_seconds."""
        if job.stage == CHECK:
            return self.timeout_s
        per_case = self.bench_case_timeout_s if self.bench_case_timeout_s is not None else self.timeout_s
        return max(self.timeout_s, per_case * len(job.cases))


@dataclass
class Judging:
    """One genome (or raw source) on its way through the stages: the judge's working record, not
    the engine's proposal (operators.candidate.Candidate). `status` stays None while it is in."""

    genome: Genome
    started_at: float
    status: Status | None = None
    stage: str = "compile"                  # where it is (or where it stopped)
    message: str = ""
    cubin: bytes | None = None
    cases: list[CaseResult] = field(default_factory=list)
    artifacts: dict[str, str] = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    gpu_seconds: float = 0.0
    device: str = ""
    copy_ceiling_tbps: float | None = None
    truncated: str = ""
    finished_at: float = 0.0
    judged_on: list[dict[str, str]] = field(default_factory=list)   # per job: stage, node, GPU (the pool's)

    @property
    def alive(self) -> bool:
        return self.status is None

    def stop(self, status: Status, message: str, cases: Sequence[CaseResult] | None = None) -> None:
        self.status = status
        self.message = message
        if cases is not None:
            self.cases = list(cases)
        self.finished_at = time.time()


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------
def clip(text: str, limit: int = LOG_CHARS) -> str:
    text = text or ""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... [{len(text) - limit} characters cut] ...\n{text[-half:]}"


def one_line(text: str, limit: int = MESSAGE_CHARS) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def first_error(log: str) -> str:
    """The line of a compile log that says what went wrong."""
    lines = [ln.strip() for ln in (log or "").splitlines() if ln.strip()]
    for ln in lines:
        if re.search(r"\berror\b", ln, re.IGNORECASE):
            return ln
    return lines[-1] if lines else "no compiler output"


def derive_seed(seed: int, key: str, stage: str, nonce: int = 0) -> int:
    """A per-genome, per-stage seed for the worker's fresh inputs (reproducible given the run's
    seed and its run-time nonce)."""
    return zlib.crc32(f"{seed}/{key}/{stage}".encode()) ^ (int(nonce) & 0xFFFFFFFFFFFF) << 32


def sass_summary(sass: str | None) -> dict[str, int]:
    """Counts of notable opcodes in a SASS listing (cuobjdump -sass), with 64/128-bit load/store
    forms counted apart (e.g. "LDG.128"), plus the total under "instructions"."""
    insns = instructions(sass or "")
    counts: Counter = Counter()
    for i in insns:
        if i.base in NOTABLE_OPCODES:
            counts[i.base] += 1
        if i.base in _WIDTH_OPS:
            parts = i.form.split(".")[1:]
            width = next((w for w in ("128", "64") if w in parts), None)
            if width:
                counts[f"{i.base}.{width}"] += 1
    if insns:
        counts["instructions"] = len(insns)
    return dict(sorted(counts.items()))


def _jsonable(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if hasattr(value, "__dataclass_fields__"):
        return {k: _jsonable(getattr(value, k)) for k in value.__dataclass_fields__}
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def to_json(value: Any) -> str:
    return json.dumps(_jsonable(value), sort_keys=True, default=repr)


# --------------------------------------------------------------------------------------------
# Stage 0: render, compile, static checks
# --------------------------------------------------------------------------------------------
def render(family: KernelFamily, genome: Genome) -> tuple[str, tuple[str, ...]]:
    return family.render(genome), tuple(family.compile_flags(genome))


def _default_checks() -> tuple[Callable, Callable]:
    from fitness.static_checks import classify, static_problems
    return static_problems, classify


def compile_artifacts(result: Any, problems: Sequence[str] = ()) -> dict[str, str]:
    """What a CompileResult leaves as evidence in Evaluation.artifacts."""
    art = {
        "source_hash": str(getattr(result, "source_hash", "")),
        "arch": str(getattr(result, "arch", "")),
        "flags": to_json(list(getattr(result, "flags", ()) or ())),
        "compile_log": clip(str(getattr(result, "log", "") or "")),
        "resources": to_json(getattr(result, "resources", {}) or {}),
        "sass_summary": to_json(sass_summary(getattr(result, "sass", "") or "")),
        "compile_cached": "true" if getattr(result, "cached", False) else "false",
    }
    if problems:
        art["problems"] = "\n".join(problems)
    return art


def stage0_compile(genomes: Sequence[Genome], settings: Settings, compiler: Any, *,
                   static_problems: Callable | None = None, classify: Callable | None = None,
                   space: Any = None, now: float | None = None) -> list[Judging]:
    """Render every genome, compile the renderable ones in one parallel batch, run the static
    checks. Survivors carry their cubin bytes; the rest are stopped with evidence."""
    if static_problems is None or classify is None:
        default_problems, default_classify = _default_checks()
        static_problems = static_problems or default_problems
        classify = classify or default_classify
    started = time.time() if now is None else now
    cands = [Judging(genome=g, started_at=started, device=settings.device) for g in genomes]
    items: list[tuple[str, tuple[str, ...]]] = []
    todo: list[Judging] = []
    for c in cands:
        g = c.genome
        raw_problems = getattr(g, "problems", None)
        if callable(raw_problems):                # a raw-source candidate (fitness.raw.RawSource)
            c.artifacts["raw_source"] = g.source
            c.artifacts["raw_launch"] = to_json(g.launch.to_dict())
            problems = raw_problems()
            if problems:
                c.stop(Status.INVALID, "INVALID: " + one_line("; ".join(problems)))
                continue
        elif space is not None:
            if g.space != space.name:
                c.stop(Status.INVALID, f"INVALID: genome of space {g.space!r}, evaluator judges {space.name!r}")
                continue
            problems = space.violations(g.as_dict())
            if problems:
                c.stop(Status.INVALID, "INVALID: " + one_line("; ".join(problems)))
                continue
        t0 = time.perf_counter()
        try:
            source, flags = render(settings.family, g)
        except Exception as exc:
            c.artifacts["render_error"] = clip(traceback.format_exc())
            c.stop(Status.INVALID, one_line(f"INVALID: render failed: {exc!r}"))
            continue
        c.stage_seconds["render"] = time.perf_counter() - t0
        items.append((source, flags))
        todo.append(c)
    results = list(compiler.compile_many(items)) if items else []
    if len(results) != len(items):      # the compiler itself is broken: not a candidate's fault
        raise RuntimeError(f"compile_many returned {len(results)} results for {len(items)} sources")
    for c, result in zip(todo, results):
        apply_compile(c, result, settings, static_problems, classify)
    return cands


def apply_compile(c: Judging, result: Any, settings: Settings, static_problems: Callable,
                  classify: Callable) -> None:
    c.stage_seconds["compile"] = float(getattr(result, "seconds", 0.0) or 0.0)
    problems: list[str] = []
    try:
        if result.ok:
            problems = list(static_problems(result, settings.family, c.genome))
        status = classify(result, problems)
    except ToolchainError:           # e.g. promises to check but no disassembler: the machine's fault
        raise
    except Exception as exc:
        c.artifacts.update(compile_artifacts(result))
        c.artifacts["static_check_error"] = clip(traceback.format_exc())
        c.stop(Status.INVALID, one_line(f"INVALID: static checks failed: {exc!r}"))
        return
    c.artifacts.update(compile_artifacts(result, problems))
    if not result.ok or status is Status.COMPILE_ERROR:
        c.stop(Status.COMPILE_ERROR, one_line(f"COMPILE_ERROR: {first_error(getattr(result, 'log', ''))}"))
        return
    if status is not Status.OK:
        c.stop(status, one_line(f"{status.value}: " + ("; ".join(problems) or "static checks")))
        return
    try:
        c.cubin = Path(result.cubin_path).read_bytes()
    except (OSError, TypeError) as exc:
        c.stop(Status.COMPILE_ERROR, one_line(f"COMPILE_ERROR: cubin unreadable: {exc}"))
        return
    c.stage = CHECK


# --------------------------------------------------------------------------------------------
# Jobs and their results
# --------------------------------------------------------------------------------------------
#: the message of a case a genome cannot run (its family's launch() returned None)
UNSUPPORTED = "genome cannot handle this case (launch() returned None)"


def is_unsupported(cr: CaseResult) -> bool:
    return cr.status is Status.INVALID and cr.message == UNSUPPORTED


def build_job(c: Judging, stage: str, cases: Sequence[Case], settings: Settings,
              part: str = "") -> tuple[Job | None, list[CaseResult]]:
    """The Job for a candidate on some cases, and an INVALID CaseResult for every case the genome
    cannot handle. No job (None) when it handles none of them."""
    launches: dict[str, Launch | None] = {}
    unsupported: list[CaseResult] = []
    for case in cases:
        why = UNSUPPORTED
        try:
            launch = settings.family.launch(c.genome, case)
        except Exception as exc:
            launch, why = None, f"launch() raised {exc!r}"
        launches[case.id] = launch
        if launch is None:
            unsupported.append(CaseResult(case=case.id, status=Status.INVALID, params=dict(case.params),
                                          message=why))
    if len(unsupported) == len(cases):
        return None, unsupported
    seed = derive_seed(settings.seed, c.genome.key, stage + part, settings.nonce)
    timing_seed = secrets.randbits(63) if stage == BENCH else 0
    job = Job(job_id=f"{c.genome.key}-{stage}{part}", key=c.genome.key, stage=stage,
              family=settings.family_name, family_root=settings.family_root, cubin=c.cubin or b"",
              cases=tuple(cases), launches=launches, seed=seed, timing_seed=timing_seed,
              timing=settings.timing)
    seeds = json.loads(c.artifacts.get("input_seeds", "{}"))
    seeds[f"{stage}{part}"] = {"verify": seed, **({"timing": timing_seed} if timing_seed else {})}
    c.artifacts["input_seeds"] = json.dumps(seeds, sort_keys=True)
    return job, unsupported


def merge_cases(job: Job, result: JobResult, unsupported: Sequence[CaseResult]) -> list[CaseResult]:
    """One CaseResult per case of the job, in job order: the INVALID one for an unsupported case
    (never launched), else the runner's, else (if the runner claimed success) a RUNTIME_ERROR for
    the missing case."""
    got = {cr.case: cr for cr in result.cases}
    bad = {cr.case: cr for cr in unsupported}
    out = []
    for case in job.cases:
        if case.id in bad:                  # never launched: the judge's own record says why
            out.append(bad[case.id])
        elif case.id in got:
            out.append(got[case.id])
        elif result.status is Status.OK:
            out.append(CaseResult(case=case.id, status=Status.RUNTIME_ERROR, params=dict(case.params),
                                  message="the runner returned no result for this case"))
    extra = [cr for cr in result.cases if cr.case not in {c.id for c in job.cases}]
    return out + extra


def job_status(result: JobResult, cases: Sequence[CaseResult], skip_unsupported: bool = False) -> Status:
    """The job's verdict; with `skip_unsupported`, cases the genome cannot run do not count (the
    runner reports them as INVALID, so an INVALID job whose only failures they are is OK)."""
    kept = [cr for cr in cases if not (skip_unsupported and is_unsupported(cr))]
    only_unsupported = (result.status is Status.INVALID and len(kept) < len(cases)
                        and all(cr.status is Status.OK for cr in kept))
    if result.status is not Status.OK and not only_unsupported:
        return result.status
    for cr in kept:
        if cr.status is not Status.OK:
            return cr.status
    return Status.OK


def _failure_message(stage: str, status: Status, result: JobResult, cases: Sequence[CaseResult]) -> str:
    bad = [cr for cr in cases if cr.status is not Status.OK]
    detail = ""
    if result.message:
        lines = [ln for ln in result.message.strip().splitlines() if ln.strip()]
        detail = lines[-1] if result.message.startswith("runner raised") and lines else result.message
    if bad:
        first = bad[0]
        case_note = f"{len(bad)}/{len(cases)} cases; {first.case}: {first.status.value}"
        if first.message:
            case_note += f" ({first.message})"
        detail = f"{detail}; {case_note}" if detail else case_note
    return one_line(f"{status.value} at {stage}: {detail or 'no detail'}")


def account(c: Judging, stage: str, result: JobResult) -> None:
    c.gpu_seconds += float(result.seconds or 0.0)
    c.stage_seconds[stage] = c.stage_seconds.get(stage, 0.0) + float(result.seconds or 0.0)
    if result.device:
        c.device = result.device
    if result.copy_ceiling_tbps:
        c.copy_ceiling_tbps = result.copy_ceiling_tbps
    parts = (result.extra or {}).get("ceiling_tbps_by_pattern")
    if parts:                        # which streaming pattern set the suspect test's ceiling
        c.artifacts["ceiling_tbps_by_pattern"] = to_json({k: round(float(v), 4) for k, v in parts.items()})
    rechecks = (result.extra or {}).get("ceiling_rechecks")
    if rechecks:                     # the worker measured its ceiling again (a case streamed faster than it)
        c.artifacts["ceiling_rechecks"] = str(int(rechecks))
    if result.node or result.gpu:
        c.judged_on.append({"stage": stage, "node": result.node, "gpu": result.gpu})


def run_jobs(pool: Any, settings: Settings, jobs: Sequence[Job]) -> list[JobResult]:
    if not jobs:
        return []
    return list(pool.run(list(jobs), timeout_s=[settings.job_timeout(j) for j in jobs]))


def run_batch(batch: Sequence[tuple[Judging, Job, list[CaseResult]]], stage: str, settings: Settings,
              pool: Any) -> list[tuple[Judging, JobResult, list[CaseResult]]]:
    """Run a stage's jobs together; per candidate (its GPU time accounted) its job's result and
    one CaseResult per case of the job (merge_cases)."""
    results = run_jobs(pool, settings, [j for _, j, _ in batch])
    out = []
    for (c, job, unsupported), result in zip(batch, results):
        account(c, stage, result)
        out.append((c, result, merge_cases(job, result, unsupported)))
    return out


# --------------------------------------------------------------------------------------------
# Stage 1: CHECK
# --------------------------------------------------------------------------------------------
def stage1_check(cands: Sequence[Judging], settings: Settings, pool: Any) -> list[Judging]:
    """Verify every live candidate on the check cases; failures stop with their check cases."""
    live = [c for c in cands if c.alive]
    if not settings.check or not settings.check_cases or not live:
        return list(cands)
    batch: list[tuple[Judging, Job, list[CaseResult]]] = []
    for c in live:
        c.stage = CHECK
        job, unsupported = build_job(c, CHECK, settings.check_cases, settings)
        if job is None:
            c.stop(Status.INVALID, "INVALID at check: the genome handles none of the check cases", unsupported)
            continue
        batch.append((c, job, unsupported))
    for c, result, cases in run_batch(batch, CHECK, settings, pool):
        # a check case the genome cannot launch (launch() returns None) is one it will never be
        # served on: it does not count; every case it can launch must pass
        status = job_status(result, cases, skip_unsupported=True)
        if status is not Status.OK:
            c.artifacts["check_message"] = clip(result.message)
            c.stop(status, _failure_message(CHECK, status, result, cases), cases)
            continue
        c.artifacts["check"] = to_json({cr.case: {"max_abs_err": cr.max_abs_err, "rel_l2_err": cr.rel_l2_err}
                                        for cr in cases if not is_unsupported(cr)})
        skipped = [cr.case for cr in cases if is_unsupported(cr)]
        if skipped:
            c.artifacts["check_unsupported"] = to_json(skipped)
    return list(cands)


# --------------------------------------------------------------------------------------------
# Stage 2: BENCH (optionally probing the largest cases first)
# --------------------------------------------------------------------------------------------
def _group_of(params: Mapping[str, Any], group: str | None) -> Any:
    return params.get(group) if group else None


def probe_split(cases: Sequence[Case], bytes_moved: Mapping[str, int], k: int,
                group: str | None = None) -> tuple[list[Case], list[Case]]:
    """The k largest-bytes cases (largest first; of each group, groups in matrix order, when
    `group` names a case parameter) and the rest (in matrix order)."""
    ranked = sorted(range(len(cases)), key=lambda i: (-bytes_moved.get(cases[i].id, 0), i))
    picked: list[int] = []
    for key in dict.fromkeys(_group_of(c.params, group) for c in cases):
        picked.extend([i for i in ranked if _group_of(cases[i].params, group) == key][:max(0, k)])
    probe_idx = set(picked)
    return [cases[i] for i in picked], [c for i, c in enumerate(cases) if i not in probe_idx]


def hopeless_verdict(cases: Sequence[CaseResult], baseline: str, below: float | None,
                     group: str | None = None) -> str | None:
    """A reason to stop benchmarking, or None (no cut, or no baseline timing to judge by).
    With `group`, the geomean is taken per group and the candidate is hopeless only if its best
    group is below the threshold."""
    if below is None:
        return None
    groups: dict[Any, list[CaseResult]] = {}
    for c in cases:
        groups.setdefault(_group_of(c.params, group), []).append(c)
    speeds = {key: obj.geomean_speedup(cs, baseline) for key, cs in groups.items()}
    if not speeds or any(v is None or v >= below for v in speeds.values()):
        return None
    if group is None:
        (speed,) = speeds.values()
        return f"geomean speedup {speed:.3f}x vs {baseline} over the {len(obj.measured(cases))} largest cases < {below:g}"
    best_key = max(speeds, key=lambda k: speeds[k])
    return (f"geomean speedup vs {baseline} below {below:g} in every {group} over its largest cases "
            f"(best: {group} {best_key} at {speeds[best_key]:.3f}x)")


def bench_round(cands: Sequence[Judging], cases: Sequence[Case], settings: Settings, pool: Any,
                part: str = "") -> None:
    """One BENCH job per live candidate on `cases`; results are appended to candidate.cases."""
    allowed = settings.unsupported_speedup is not None
    batch: list[tuple[Judging, Job, list[CaseResult]]] = []
    for c in cands:
        if not c.alive:
            continue
        c.stage = BENCH
        job, unsupported = build_job(c, BENCH, cases, settings, part)
        if job is None:
            c.cases.extend(unsupported)
            ran = any(cr.status is Status.OK for cr in c.cases)
            if allowed and (part == "-probe" or ran) and all(is_unsupported(cr) for cr in unsupported):
                continue          # nothing to time here; the genome is judged on the cases it runs
            c.stop(Status.INVALID, one_line(f"INVALID at bench: the genome cannot handle {len(unsupported)} "
                                            f"benchmark cases, e.g. {unsupported[0].case}"))
            continue
        batch.append((c, job, unsupported))
    for c, result, cases_out in run_batch(batch, BENCH, settings, pool):
        why = machine_missing(cases_out, settings.baseline)
        if why:
            raise BaselineUnavailableError(
                f"the primary baseline {settings.baseline!r} cannot run on {result.device or 'this machine'}: "
                f"{why}. Nothing of this batch was recorded; give the machine what it needs and resume the "
                f"run, or choose another [objective] baseline")
        c.cases.extend(cases_out)
        status = job_status(result, cases_out, skip_unsupported=allowed)
        if status is not Status.OK:
            c.artifacts["bench_message"] = clip(result.message)
            c.stop(status, _failure_message(BENCH, status, result, cases_out))


def stage2_bench(cands: Sequence[Judging], settings: Settings, pool: Any) -> list[Judging]:
    live = [c for c in cands if c.alive]
    cases = list(settings.bench_cases)
    if not live:
        return list(cands)
    k = settings.hopeless_cases
    n_groups = len({_group_of(c.params, settings.hopeless_group) for c in cases})
    if settings.hopeless_below is None or k <= 0 or len(cases) <= k * n_groups:
        bench_round(live, cases, settings, pool)
        return list(cands)
    probe, rest = probe_split(cases, settings.bytes_moved, k, settings.hopeless_group)
    bench_round(live, probe, settings, pool, part="-probe")
    go_on, cut = [], []
    for c in live:
        if not c.alive:
            continue
        why = hopeless_verdict(c.cases, settings.baseline, settings.hopeless_below, settings.hopeless_group)
        if why:
            c.truncated = f"hopeless: {why}; {len(rest)} of {len(cases)} cases verified, not timed"
            cut.append(c)
        else:
            go_on.append(c)
    bench_round(go_on, rest, settings, pool, part="-rest")
    verify_round(cut, rest, settings, pool)
    return list(cands)


def verify_round(cands: Sequence[Judging], cases: Sequence[Case], settings: Settings, pool: Any) -> None:
    """Verify (no timing) the cases a hopeless cut leaves untimed: a record that says OK must
    have every case it could be served on checked, so a kernel wrong only where it was not timed
    comes out WRONG_RESULT, not OK-and-truncated."""
    batch: list[tuple[Judging, Job, list[CaseResult]]] = []
    for c in cands:
        if not c.alive or not cases:
            continue
        job, unsupported = build_job(c, VERIFY, cases, settings, "-rest")
        if job is None:
            continue
        batch.append((c, job, unsupported))
    allowed = settings.unsupported_speedup is not None
    for c, result, cases_out in run_batch(batch, VERIFY, settings, pool):
        status = job_status(result, cases_out, skip_unsupported=allowed)
        if status is not Status.OK:
            c.artifacts["verify_message"] = clip(result.message)
            c.cases.extend(cases_out)
            c.stop(status, _failure_message(VERIFY, status, result, cases_out))
            continue
        c.artifacts["verified_untimed"] = to_json({cr.case: {"max_abs_err": cr.max_abs_err, "rel_l2_err": cr.rel_l2_err}
                                                   for cr in cases_out if cr.status is Status.OK})


# --------------------------------------------------------------------------------------------
# The verdict
# --------------------------------------------------------------------------------------------
def _ok_message(objectives: Mapping[str, float], settings: Settings, n_cases: int) -> str:
    parts = []
    g = objectives.get(obj.GEOMEAN_SPEEDUP)
    if g is not None:
        parts.append(f"{g:.3f}x geomean vs {settings.baseline} (min {objectives[obj.MIN_SPEEDUP]:.3f}x)")
    else:
        parts.append(f"no {settings.baseline} timing")
    t = objectives.get(obj.MEAN_TBPS)
    if t is not None:
        frac = objectives.get(obj.CEILING_FRACTION)
        parts.append(f"{t:.2f} TB/s mean" + (f" ({frac:.0%} of copy ceiling)" if frac is not None else ""))
    skipped = int(objectives.get(obj.UNSUPPORTED_CASES, 0))
    if skipped:
        parts.append(f"{skipped} cases it cannot run counted as {settings.unsupported_speedup:g}x")
    return f"OK: {', '.join(parts)} over {n_cases} cases"


def finalize(c: Judging, settings: Settings) -> Evaluation:
    """The Evaluation of a candidate after whatever stages it went through."""
    order = {case.id: i for i, case in enumerate(settings.bench_cases)}
    cases = c.cases
    if c.stage == BENCH:
        cases = sorted(cases, key=lambda cr: order.get(cr.case, len(order)))
    objectives: dict[str, float] = {}
    suspects: list[str] = []
    if c.stage == BENCH and cases:
        objectives = obj.compute(cases, settings.baseline, bytes_moved=settings.bytes_moved,
                                 copy_ceiling_tbps=c.copy_ceiling_tbps, other_baselines=settings.baselines,
                                 unsupported=sum(map(is_unsupported, cases)),
                                 unsupported_speedup=settings.unsupported_speedup)
        suspects = obj.suspect_cases(cases, settings.bytes_moved, c.copy_ceiling_tbps, settings.suspect_slack,
                                     flops=settings.flops, peak_tflops=settings.peak_tflops)
    status = Status.OK if c.alive else c.status
    assert status is not None
    if c.alive:
        message = _ok_message(objectives, settings, int(objectives.get(obj.CASES, 0)))
        if c.truncated:
            message = one_line(f"{message} (truncated, {c.truncated})")
    else:
        message = c.message
    artifacts = dict(c.artifacts)
    artifacts["stage_seconds"] = to_json({k: round(v, 6) for k, v in c.stage_seconds.items()})
    artifacts["gpu_seconds"] = repr(round(c.gpu_seconds, 6))
    artifacts["stage"] = c.stage
    artifacts["judge_protocol"] = str(JUDGE_PROTOCOL)
    if c.copy_ceiling_tbps:
        artifacts["copy_ceiling_tbps"] = repr(c.copy_ceiling_tbps)
    if c.truncated:
        artifacts["truncated"] = c.truncated
    if c.judged_on:                  # which node and GPU judged each job (several, on a cluster)
        artifacts["judged_on"] = to_json(c.judged_on)
    if suspects:
        artifacts["suspect_cases"] = to_json(suspects)
        message = one_line(f"SUSPECT (faster than the roofline on {', '.join(suspects[:3])}"
                           f"{'...' if len(suspects) > 3 else ''}); {message}")
    return Evaluation(key=c.genome.key, genome=c.genome.as_dict(), space=c.genome.space, status=status,
                      objectives=objectives, cases=tuple(cases), artifacts=artifacts,
                      device=c.device or settings.device, toolkit=settings.toolkit,
                      started_at=c.started_at, finished_at=c.finished_at or time.time(),
                      message=message, suspect=bool(suspects))


def run_cascade(genomes: Sequence[Genome], settings: Settings, compiler: Any, pool: Any, *,
                static_problems: Callable | None = None, classify: Callable | None = None,
                space: Any = None, staged: Mapping[str, Judging] | None = None,
                staged_wait_s: float = 0.0) -> list[Evaluation]:
    """All stages for a batch: one Evaluation per genome, in order. Each evaluation also gets
    artifacts["batch_seconds"]: the wall time of each stage for the whole batch.

    `staged`: genome key -> its Judging after stage 0, made ahead of time (GPUEvaluator.prefetch
    runs stage0_compile for a later batch while this one is on the GPU); a genome found there
    skips stage 0 here (its record keeps that stage 0's stage_seconds, and its clock starts with
    this batch, as a compile found in the cache always did), the others go through it now.
    Stages 1 and 2 are the same for both. batch_seconds["compile"] is the time the batch waited
    for stage 0 (`staged_wait_s`, the caller's wait for the background stage 0, included);
    batch_seconds["staged"] says how many genomes came staged (absent when none)."""
    t0 = time.perf_counter()
    now = time.time()
    ahead = dict(staged or {})
    picked: list[Judging | None] = [ahead.pop(g.key, None) for g in genomes]
    fresh = iter(stage0_compile([g for g, c in zip(genomes, picked) if c is None], settings, compiler,
                                static_problems=static_problems, classify=classify, space=space)
                 if any(c is None for c in picked) else ())
    cands = [c if c is not None else next(fresh) for c in picked]
    for c in (c for c in picked if c is not None):
        c.started_at = now
        if not c.alive:
            c.finished_at = now
        if not c.device:
            c.device = settings.device
    t1 = time.perf_counter()
    stage1_check(cands, settings, pool)
    t2 = time.perf_counter()
    stage2_bench(cands, settings, pool)
    t3 = time.perf_counter()
    walls = {"compile": t1 - t0 + float(staged_wait_s), "check": t2 - t1, "bench": t3 - t2}
    n_staged = sum(c is not None for c in picked)
    batch = to_json({**{k: round(v, 6) for k, v in walls.items()}, "genomes": len(cands),
                     **({"staged": n_staged} if n_staged else {})})
    out = []
    for c in cands:
        c.artifacts["batch_seconds"] = batch
        out.append(finalize(c, settings))
    return out
