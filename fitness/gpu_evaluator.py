"""GPUEvaluator: the real judge. Genomes in, Evaluations out, through the cascade on GPU workers.

    with GPUEvaluator("rmsnorm", load_space("rmsnorm"), baseline="torch") as ev:
        evaluations = ev.evaluate(genomes)      # batch_size = 4 x the number of GPU workers

Per batch: render and compile every genome in parallel (nvcc, content-addressed cache), reject on
static checks, verify survivors on the family's check cases (one CHECK job each, spread over the
workers), then verify and time the survivors on the benchmark matrix (one BENCH job each) beside
the baselines; see fitness.cascade. A candidate's failure is a value; only a broken machine (no
toolkit, no worker can start) raises. `prefetch(genomes)` runs a later batch's stage 0 in a
background thread while the current batch is on the GPU (its stages 1 and 2 are unchanged).

Every Evaluation carries: device and toolkit, timestamps, objectives (fitness.objectives), the
suspect flag, and artifacts: compile_log, resources (ptxas report, JSON), source_hash, flags,
sass_summary (notable opcodes, JSON), problems, stage_seconds (JSON), gpu_seconds (the sum of its
jobs' JobResult.seconds), copy_ceiling_tbps, truncated (hopeless cut), check / check_message /
bench_message, suspect_cases, batch_seconds (stage wall times of the batch). `stats()` sums GPU seconds and verified candidates for a throughput
figure (verified candidates per GPU-minute).

Baselines: `baselines=None` asks for every baseline the family offers; each worker times those it
can import and leaves the rest out of CaseResult.baselines_us (a case without the primary
baseline is left out of the speedups, and a batch with none has no `geomean_speedup`). The
primary `baseline` is always requested, first.

Time limits (hard, enforced by killing the worker): a CHECK job gets `timeout_s`; a BENCH job
`bench_case_timeout_s` (default `timeout_s`) per case, never less than `timeout_s`. Worker startup
gets `startup_timeout_s`. The device runner itself abandons a launch after
`timing.max_case_seconds`, so these limits only catch a runner that is stuck as a whole.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import secrets
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from fitness import objectives as obj
from fitness.baseline_runs import lasting_gap
from fitness.compile import TIMEOUT_NOTE
from fitness.cascade import Settings, is_unsupported, run_cascade, stage0_compile
from fitness.evaluator import Evaluator
from fitness.family import KERNELS_DIR, KernelFamily, credited_check_cases, load_family
from fitness.jobs import JUDGE_PROTOCOL, TimingConfig
from fitness.pool import Pool
from fitness.records import Evaluation, Status
from fitness.workers import DEFAULT_RUNNER, WorkerPool, plan_devices
from genomes import GeneSpace, Genome

WORKER_BATCH = 4      # genomes per worker per batch: compiles run in parallel, GPU jobs queue up


def _family_root(family: KernelFamily, family_root: str | Path | None) -> Path:
    if family_root is not None:
        return Path(family_root).resolve()
    module = sys.modules.get(type(family).__module__)
    path = getattr(module, "__file__", None)
    return Path(path).resolve().parent.parent if path else KERNELS_DIR


def _check_metric(metric: str) -> None:
    base = metric.split("@", 1)[0]
    if base not in obj.NAMES:
        raise ValueError(f"unknown metric {metric!r}; objectives are {list(obj.NAMES)} "
                         f"(speedups against another baseline: 'geomean_speedup@<baseline>')")


def _compile_only(compiler: Any, items: Sequence[tuple[str, tuple[str, ...]]]) -> dict[str, Any]:
    compiler.compile_many(items)
    return {}                       # nothing staged: evaluate() runs stage 0, finding the cache warm


def _timed_out(c: Any) -> bool:
    """A candidate stopped because nvcc ran out of time (its compile log ends with the note)."""
    return c.status is Status.COMPILE_ERROR and TIMEOUT_NOTE in str(c.artifacts.get("compile_log", ""))


class GPUEvaluator(Evaluator):
    def __init__(self, family: KernelFamily | str, space: GeneSpace, *, matrix: str = "default",
                 check: bool = True, baseline: str = "torch", baselines: Sequence[str] | None = None,
                 metric: str = "geomean_speedup", timing: TimingConfig | None = None,
                 workers: int | None = None, timeout_s: float = 60, startup_timeout_s: float = 120,
                 cache_dir: str | Path = ".cache/evo-compile", arch: str = "sm_90a",
                 family_root: str | Path | None = None, seed: int = 0,
                 hopeless_below: float | None = None, hopeless_cases: int = 2,
                 hopeless_group: str | None = None, unsupported_speedup: float | None = None,
                 bench_case_timeout_s: float | None = None, runner: str = DEFAULT_RUNNER,
                 compile_jobs: int | None = None, compiler: Any = None, pool: Any = None,
                 stage0_ahead: bool = True):
        if isinstance(family, str):
            root = Path(family_root).resolve() if family_root is not None else KERNELS_DIR
            family = load_family(family, root)
        else:
            root = _family_root(family, family_root)
        if family.space_name and space.name != family.space_name:
            raise ValueError(f"family {family.name!r} uses gene space {family.space_name!r}, not {space.name!r}")
        _check_metric(metric)
        self.family = family
        self.space = space
        self.metric = metric
        self.arch = arch
        self.cache_dir = Path(cache_dir)
        self.runner = runner
        self.workers = workers
        self.timeout_s = float(timeout_s)
        self.startup_timeout_s = float(startup_timeout_s)
        self.compile_jobs = compile_jobs
        self.stage0_ahead = bool(stage0_ahead)     # False: prefetch only compiles (static checks in line)
        self._compiler = compiler
        self._pool = pool
        self._pool_started = False
        self._toolkit: str | None = None
        self._device = ""
        self._totals = {"evaluated": 0, "verified": 0, "gpu_seconds": 0.0, "wall_seconds": 0.0}
        self._prefetch_pool: cf.ThreadPoolExecutor | None = None
        self._prefetched: dict[str, cf.Future] = {}     # genome key -> its background stage 0

        offered = [b.name for b in family.baselines()]
        not_objective = {b.name for b in family.baselines() if not b.objective}
        for named in (baseline, metric.split("@", 1)[1] if "@" in metric else None):
            if named in not_objective:
                raise ValueError(f"baseline {named!r} of family {family.name!r} is a reference, not the "
                                 f"operation (timed beside the others only); speedups are measured against "
                                 f"one of {[n for n in offered if n not in not_objective]}")
        names = list(offered if baselines is None else baselines)
        if baseline not in names:
            names.insert(0, baseline)
        else:                                       # the primary baseline is timed first
            names.remove(baseline)
            names.insert(0, baseline)
        timing = timing or TimingConfig()
        timing = replace(timing, baselines=tuple(names))

        bench = tuple(family.benchmark_cases(matrix))
        if not bench:
            raise ValueError(f"family {family.name!r} has no benchmark cases in matrix {matrix!r}")
        self.settings = Settings(
            family=family, family_name=family.name or root.name, family_root=str(root),
            bench_cases=bench,
            check_cases=credited_check_cases(family.dispatch_key(), bench, family.check_cases()) if check else (),
            bytes_moved={c.id: int(family.bytes_moved(c)) for c in bench},
            flops={c.id: int(family.flops(c)) for c in bench},
            peak_tflops=obj.TENSOR_PEAK_TFLOPS.get(arch),
            baseline=baseline, baselines=tuple(names), timing=timing, check=check, seed=seed,
            timeout_s=self.timeout_s, bench_case_timeout_s=bench_case_timeout_s,
            hopeless_below=hopeless_below, hopeless_cases=hopeless_cases, hopeless_group=hopeless_group or None,
            unsupported_speedup=unsupported_speedup, nonce=secrets.randbits(32))
        n_workers = pool.size if pool is not None else len(plan_devices(workers))
        self.batch_size = max(1, n_workers) * WORKER_BATCH

    # -- lazily built parts ----------------------------------------------------------------
    @property
    def toolkit(self) -> str:
        if self._toolkit is None:
            tk = getattr(self._compiler, "toolkit", "") if self._compiler is not None else ""
            if not tk:
                try:
                    from fitness.toolchain import toolkit_version
                    tk = toolkit_version()
                except Exception:
                    tk = ""
            self._toolkit = f"nvcc {tk}" if tk else ""
        return self._toolkit

    def compiler(self) -> Any:
        if self._compiler is None:
            from fitness.compile import Compiler
            self._compiler = Compiler(self.cache_dir, arch=self.arch, jobs=self.compile_jobs or os.cpu_count())
        return self._compiler

    def pool(self) -> Any:
        """The worker pool, started (and waited for) on first use."""
        if self._pool is None:
            self._pool = WorkerPool(self.workers, runner=self.runner, timeout_s=self.timeout_s,
                                    startup_timeout_s=self.startup_timeout_s)
            self._pool.start()
        elif not self._pool_started and isinstance(self._pool, Pool):
            self._pool.start()          # a pool handed in (e.g. a RayPool) joins its cluster here
        self._pool_started = True
        if not self._device and hasattr(self._pool, "worker_info"):
            devices = sorted({str(w.get("device", "")) for w in self._pool.worker_info() if w.get("device")})
            self._device = " | ".join(devices)
        return self._pool

    # -- the contract ----------------------------------------------------------------------
    def prefetch(self, genomes: Sequence[Genome]) -> None:
        """Start stage 0 (render, compile, static checks) of genomes that a later evaluate() will
        get, in the background.

        The GPU waits while a batch goes through stage 0 (3-5 s for 4 RMSNorm genomes when nvcc
        runs, 1.3 s of SASS reading when the compiles were cached: session 15), so the run hands
        over its next batch before evaluating the current one. What comes back is each genome's
        Judging after stage 0 (compiled or stopped with its evidence), which evaluate() takes
        instead of running stage 0 again (it waits for a genome's background stage 0 first); the
        compiles land in the content-addressed cache as before. Nothing here can fail a
        candidate or the run: a background stage 0 that raises (a broken toolchain) leaves its
        genomes to evaluate()'s own stage 0, which reports it again. Only the GPU stages run in
        evaluate(), so what a genome is judged on is the same either way. With stage0_ahead
        False, only the compiles run ahead (into the cache) and stage 0 runs in evaluate()."""
        if not self.stage0_ahead:
            self._prefetch_compiles(genomes)
            return
        todo = list({g.key: g for g in genomes if g.key not in self._prefetched}.values())
        if not todo:
            return
        if self._prefetch_pool is None:
            self._prefetch_pool = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="evo-prefetch")
        settings = replace(self.settings, toolkit=self.toolkit, device=self._device)
        fut = self._prefetch_pool.submit(self._stage0_ahead, todo, settings, self.compiler())
        for g in todo:
            self._prefetched[g.key] = fut

    def _prefetch_compiles(self, genomes: Sequence[Genome]) -> None:
        """The compiles alone, into the content-addressed cache (stage 0 finds them there)."""
        items, keys = [], []
        for g in genomes:
            if g.key in self._prefetched or self.space.violations(g.as_dict()):
                continue
            try:
                items.append((self.family.render(g), tuple(self.family.compile_flags(g))))
            except Exception:  # noqa: BLE001 - stage 0 reports it
                continue
            keys.append(g.key)
        if not items:
            return
        if self._prefetch_pool is None:
            self._prefetch_pool = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="evo-prefetch")
        fut = self._prefetch_pool.submit(_compile_only, self.compiler(), items)
        for k in keys:
            self._prefetched[k] = fut

    def _stage0_ahead(self, genomes: Sequence[Genome], settings: Settings, compiler: Any) -> dict[str, Any]:
        cands = stage0_compile(genomes, settings, compiler, space=self.space)
        # a compile that timed out is not cached (a loaded machine may finish it next time): not a
        # verdict made ahead; evaluate()'s own stage 0 compiles it again, as it did after a
        # background compile before stage 0 ran ahead
        return {c.genome.key: c for c in cands if not _timed_out(c)}

    def _take_staged(self, genomes: Sequence[Genome], base: Settings, space: Any) -> dict[str, Any]:
        """The background stage 0 of these genomes (waited for), for the genomes it finished.
        Taken only where stage 0 would be the same here: this evaluator's family and gene space
        (evaluate, evaluate_in_full, evaluate_cases; not raw sources)."""
        usable = space == "default" and base.family is self.settings.family
        staged: dict[str, Any] = {}
        for g in genomes:
            fut = self._prefetched.pop(g.key, None)
            if fut is None:
                continue
            try:
                done = fut.result()
            except Exception:  # noqa: BLE001 - stage 0 runs again here and reports
                continue
            c = done.pop(g.key, None)
            if usable and c is not None and g.key not in staged:
                staged[g.key] = c
        return staged

    def evaluate(self, genomes: Sequence[Genome]) -> list[Evaluation]:
        return self._evaluate(genomes, self.settings)

    def evaluate_in_full(self, genomes: Sequence[Genome]) -> list[Evaluation]:
        return self._evaluate(genomes, replace(self.settings, hopeless_below=None))

    def evaluate_cases(self, genomes: Sequence[Genome], case_ids: Sequence[str]) -> list[Evaluation]:
        """Like evaluate(), on a subset of the benchmark matrix (case ids from it, in its order).

        For final tables: a dispatch table's genome is timed only on the cases it serves, instead
        of the whole matrix for every genome."""
        wanted = set(case_ids)
        unknown = wanted - {c.id for c in self.settings.bench_cases}
        if unknown:
            raise ValueError(f"cases not in the benchmark matrix: {sorted(unknown)}")
        if not wanted:
            raise ValueError("evaluate_cases needs at least one case")
        subset = tuple(c for c in self.settings.bench_cases if c.id in wanted)
        return self._evaluate(genomes, replace(self.settings, bench_cases=subset))

    def evaluate_raw(self, raws: Sequence[Any], case_ids: Sequence[str] | None = None) -> list[Evaluation]:
        """Judge raw-source candidates (fitness.raw.RawSource: CUDA source + launch description)
        exactly as genomes are judged: include/flag allowlists, compile, static checks (device
        state, resource and promise checks), CHECK, BENCH, against this evaluator's family's
        operation. Each must name this evaluator's family. `case_ids`: a subset of the benchmark
        matrix, as evaluate_cases."""
        from fitness.raw import RawFamily
        raws = list(raws)
        for r in raws:
            if r.family != self.settings.family_name:
                raise ValueError(f"raw candidate {r.key} is for family {r.family!r}; this judge judges "
                                 f"{self.settings.family_name!r}")
        settings = replace(self.settings, family=RawFamily(self.family))
        if case_ids is not None:
            wanted = set(case_ids)
            settings = replace(settings, bench_cases=tuple(c for c in self.settings.bench_cases if c.id in wanted))
        return self._evaluate(raws, settings, space=None)

    def _evaluate(self, genomes: Sequence[Genome], base: Settings, space: Any = "default") -> list[Evaluation]:
        genomes = list(genomes)
        if not genomes:
            return []
        t0 = time.time()
        staged = self._take_staged(genomes, base, space)
        waited = time.time() - t0
        compiler = self.compiler()
        pool = self.pool()
        settings = replace(base, toolkit=self.toolkit, device=self._device)
        evaluations = run_cascade(genomes, settings, compiler, pool,
                                  space=self.space if space == "default" else space, staged=staged,
                                  staged_wait_s=waited)
        self._totals["evaluated"] += len(evaluations)
        self._totals["verified"] += sum(e.status is Status.OK for e in evaluations)
        self._totals["gpu_seconds"] += sum(float(e.artifacts.get("gpu_seconds", 0.0)) for e in evaluations)
        self._totals["wall_seconds"] += time.time() - t0
        for e in evaluations:
            if e.device and not self._device:
                self._device = e.device
        return evaluations

    def stats(self) -> dict[str, Any]:
        """Totals so far and the throughput: verified candidates per GPU-minute."""
        out: dict[str, Any] = dict(self._totals)
        gpu_min = out["gpu_seconds"] / 60.0
        out["verified_per_gpu_minute"] = out["verified"] / gpu_min if gpu_min > 0 else None
        if self._pool is not None and hasattr(self._pool, "stats"):
            s = self._pool.stats
            out["pool"] = s() if callable(s) else dict(s)
        return out

    def accepts_evidence(self, evaluation: Evaluation) -> str:
        """An earlier verdict stands for this judge when it was verified (OK, not suspect) on the
        same device (the workers' GPU names, driver included) with the same toolkit, arch and gene
        space, for the same kernel (the compile key of the source rendered now, flags and toolkit
        included, equals the recorded one: a template changed since is judged again), and timed
        every benchmark case of this judge (or recorded it as unsupported) beside the primary
        baseline, or where that baseline could not run for a reason it would meet again
        (baseline_runs.lasting_gap: INT21 fails on fp32 8192x262144, so until session 35 every genome
        that runs that case was judged again in every H100 run). Starts the workers (their device is
        the question)."""
        if evaluation.status is not Status.OK or evaluation.suspect:
            return f"not a verified evaluation ({evaluation.status.value}{', suspect' if evaluation.suspect else ''})"
        protocol = str(evaluation.artifacts.get("judge_protocol", "1"))
        if protocol != str(JUDGE_PROTOCOL):
            return (f"judged under protocol {protocol}, this judge follows protocol {JUDGE_PROTOCOL} "
                    f"(fitness.jobs.JUDGE_PROTOCOL): judged again")
        self.pool()
        for what, mine, theirs in (("device", self._device, evaluation.device),
                                   ("toolkit", self.toolkit, evaluation.toolkit),
                                   ("arch", self.arch, evaluation.artifacts.get("arch", self.arch)),
                                   ("gene space", self.space.name, evaluation.space)):
            if not mine or mine != theirs:
                return f"{what} differs: recorded {theirs!r}, here {mine!r}"
        try:
            genome = self.space.make(evaluation.genome)
            source_hash = self.compiler().key(self.family.render(genome), tuple(self.family.compile_flags(genome)))
        except Exception as exc:  # noqa: BLE001 - a reason, not a crash: the genome is judged again
            return f"cannot render it here: {type(exc).__name__}: {exc}"
        if evaluation.artifacts.get("source_hash") != source_hash:
            return "kernel source differs (the template, its flags or the toolkit changed since)"
        recorded = {c.case: c for c in evaluation.cases}
        for case in self.settings.bench_cases:
            c = recorded.get(case.id)
            if c is None:
                return f"case {case.id} was not measured"
            if is_unsupported(c):
                continue
            if not (c.status is Status.OK and c.time_us):
                return f"case {case.id} has no verified time"
            if not c.baselines_us.get(self.settings.baseline) and not lasting_gap(c.message, self.settings.baseline):
                return f"case {case.id} has no verified time beside {self.settings.baseline}"
        return ""

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "device": self._device, "toolkit": self.toolkit, "arch": self.arch,
            "family": self.settings.family_name, "space": self.space.name,
            "baseline": self.settings.baseline, "baselines": list(self.settings.baselines),
            "metric": self.metric, "bench_cases": len(self.settings.bench_cases),
            "check_cases": len(self.settings.check_cases), "batch_size": self.batch_size,
            "hopeless_below": self.settings.hopeless_below,
            "hopeless_cases": self.settings.hopeless_cases,
            "hopeless_group": self.settings.hopeless_group,
            "unsupported_speedup": self.settings.unsupported_speedup,
        }
        if self._pool is not None and hasattr(self._pool, "worker_info"):
            info = self._pool.worker_info()
            out["workers"] = len(info)
            ceilings = [w["copy_ceiling_tbps"] for w in info if isinstance(w.get("copy_ceiling_tbps"), (int, float))]
            if ceilings:
                out["copy_ceiling_tbps"] = min(ceilings)
        return out

    def close(self) -> None:
        if self._prefetch_pool is not None:
            self._prefetch_pool.shutdown(wait=True, cancel_futures=True)
            self._prefetch_pool = None
            self._prefetched.clear()
        if self._pool is not None:
            self._pool.close()
