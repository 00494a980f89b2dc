"""The cascade and GPUEvaluator with a fake family, a fake compiler and a fake worker pool.

The fake family's genome says how the candidate behaves (compile error, spills, wrong result,
crash, hang, unsupported case...) and how fast it is relative to the torch baseline, so every path
through the stages can be driven without nvcc or a GPU. The real static checks are used.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import fake_runners
from fitness import cascade
from fitness.compile import CompileResult
from fitness.family import BufferSpec, Case, KernelFamily, Launch, Tolerance
from fitness.gpu_evaluator import GPUEvaluator
from fitness.jobs import BENCH, CHECK, Job, JobResult, TimingConfig
from fitness.ptxas import ResourceReport
from fitness.records import CaseResult, Status
from fitness.static_checks import classify, static_problems
from fitness.workers import WorkerPool
from genomes import Choice, GeneSpace

BEHAVIOURS = ("ok", "compile_error", "spill", "render_bug", "wrong", "crash", "hang", "narrow", "nocheck", "short",
              "wrong_untimed")
SPACE = GeneSpace("fakeop", genes=(Choice("behaviour", options=BEHAVIOURS),
                                   Choice("speed", options=(0.25, 0.5, 1.0, 2.0, 100.0))))
TORCH_TBPS = 2.0
CEILING = 4.0


class FakeFamily(KernelFamily):
    name = "fakeop"
    space_name = "fakeop"

    def benchmark_cases(self, matrix="default"):
        return [Case(f"n{n}", {"N": n}) for n in (1024, 8192, 2048, 4096)]

    def check_cases(self):
        return [Case("n7", {"N": 7}), Case("n199", {"N": 199})]

    def io(self, case):
        n = case.params["N"]
        return {"x": BufferSpec((n,), "float32")}, {"y": BufferSpec((n,), "float32")}

    def make_inputs(self, case, rng, distribution):
        return {"x": rng.standard_normal(case.params["N"]).astype(np.float32)}

    def reference(self, case, inputs):
        return {"y": inputs["x"].astype(np.float64)}

    def tolerances(self, case):
        return {"y": Tolerance(1e-5, 1e-4)}

    def bytes_moved(self, case):
        return case.params["N"] * 1000

    def render(self, genome):
        if genome["behaviour"] == "render_bug":
            raise KeyError("template variable missing")
        return f"// behaviour={genome['behaviour']} speed={genome['speed']}\nextern \"C\" __global__ void k() {{}}\n"

    def launch(self, genome, case):
        n = case.params["N"]
        if genome["behaviour"] == "narrow" and n == 1024:
            return None
        if genome["behaviour"] == "nocheck" and n < 1000:
            return None
        if genome["behaviour"] == "short" and n >= 4096:     # a specialist for short rows
            return None
        return Launch("k", (n, 1, 1), (128, 1, 1), ("x", "y", np.int32(n)))


FAMILY = FakeFamily()


class FakeCompiler:
    toolkit = "13.0.88"

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.batches: list[int] = []

    def compile_many(self, items):
        self.batches.append(len(items))
        out = []
        for source, flags in items:
            h = hashlib.sha256(source.encode()).hexdigest()
            if "compile_error" in source:
                out.append(CompileResult(ok=False, source_hash=h, arch="sm_90a", flags=tuple(flags), cubin_path=None,
                                         log="kernel.cu(2): error: identifier \"bogus\" is undefined\n1 error"))
                continue
            cubin = self.tmp / f"{h}.cubin"
            cubin.write_bytes(source.encode())
            spill = 16 if "spill" in source else 0
            report = ResourceReport(kernel="k", arch="sm_90a", registers=40, spill_store_bytes=spill,
                                    spill_load_bytes=spill)
            sass = ("        /*0000*/                   LDG.E.128 R4, desc[UR4][R2.64] ;\n"
                    "        /*0010*/                   STG.E.128 desc[UR4][R6.64], R4 ;\n"
                    "        /*0020*/                   EXIT ;\n")
            out.append(CompileResult(ok=True, source_hash=h, arch="sm_90a", flags=tuple(flags),
                                     cubin_path=str(cubin), log="ptxas info : Used 40 registers",
                                     resources={"k": report}, sass=sass, seconds=0.01))
        return out


class FakePool:
    """Runs jobs in-process; the genome (found by key) decides the outcome."""

    size = 2

    def __init__(self, genomes_by_key):
        self.genomes = genomes_by_key
        self.jobs: list[Job] = []
        self.timeouts: list[float] = []

    def run(self, jobs, timeout_s=None):
        self.jobs.extend(jobs)
        self.timeouts.extend(timeout_s if isinstance(timeout_s, list) else [timeout_s] * len(jobs))
        return [self._one(j) for j in jobs]

    def _one(self, job: Job) -> JobResult:
        g = self.genomes[job.key]
        b, speed = g["behaviour"], g["speed"]
        if b == "crash":
            return JobResult(job.job_id, Status.RUNTIME_ERROR, message="worker 0 died: killed by signal SIGSEGV",
                             seconds=0.1)
        if b == "hang":
            return JobResult(job.job_id, Status.TIMEOUT, message="no result within 60 s", seconds=60.0)
        cases = []
        for c in job.cases:
            if job.launches[c.id] is None:
                cases.append(CaseResult(c.id, Status.INVALID, message="no launch"))
                continue
            if b == "wrong" or (b == "wrong_untimed" and c.id == "n1024" and job.stage != CHECK):
                cases.append(CaseResult(c.id, Status.WRONG_RESULT, max_abs_err=3.0, message="y[5]: 3 vs 0"))
                continue
            base_us = FAMILY.bytes_moved(c) / (TORCH_TBPS * 1e6)
            time_us = None if job.stage == CHECK else base_us / speed
            cases.append(CaseResult(c.id, Status.OK, time_us=time_us, max_abs_err=1e-7,
                                    baselines_us={"torch": base_us} if job.stage == BENCH else {}))
        status = next((c.status for c in cases if c.status is not Status.OK), Status.OK)
        return JobResult(job.job_id, status, cases=tuple(cases), device="Fake H200", copy_ceiling_tbps=CEILING,
                         seconds=0.5)


def g(behaviour="ok", speed=1.0):
    return SPACE.make({"behaviour": behaviour, "speed": speed})


def settings(**kw):
    base = dict(family=FAMILY, family_name="fakeop", family_root="/nowhere",
                bench_cases=tuple(FAMILY.benchmark_cases()), check_cases=tuple(FAMILY.check_cases()),
                bytes_moved={c.id: FAMILY.bytes_moved(c) for c in FAMILY.benchmark_cases()},
                baseline="torch", baselines=("torch",), toolkit="nvcc 13.0.88")
    base.update(kw)
    return cascade.Settings(**base)


def judge(genomes, tmp_path, **kw):
    pool = FakePool({x.key: x for x in genomes})
    compiler = FakeCompiler(tmp_path)
    evs = cascade.run_cascade(genomes, settings(**kw), compiler, pool, static_problems=static_problems,
                              classify=classify, space=SPACE)
    assert [e.key for e in evs] == [x.key for x in genomes]
    return evs, pool, compiler


def stages(pool, key):
    return [j.stage + j.job_id.split(j.stage, 1)[1] for j in pool.jobs if j.key == key]


# -- stage 0 ------------------------------------------------------------------------------------
def test_compile_errors_and_static_problems_stop_at_stage_0(tmp_path):
    genomes = [g("compile_error"), g("spill"), g("render_bug")]
    (ce, sp, rb), pool, compiler = judge(genomes, tmp_path)
    assert pool.jobs == []
    assert compiler.batches == [2]                          # one parallel batch; the render bug never compiles
    assert ce.status is Status.COMPILE_ERROR and "identifier \"bogus\" is undefined" in ce.message
    assert "error" in ce.artifacts["compile_log"] and ce.artifacts["stage"] == "compile"
    assert sp.status is Status.INVALID and "spills 32 bytes" in sp.message
    assert "spills" in sp.artifacts["problems"]
    assert json.loads(sp.artifacts["resources"])["k"]["spill_store_bytes"] == 16
    assert json.loads(sp.artifacts["sass_summary"])["LDG.128"] == 1
    assert rb.status is Status.INVALID and "render failed" in rb.message and "KeyError" in rb.artifacts["render_error"]
    for e in (ce, sp, rb):
        assert e.fitness("geomean_speedup") is None and e.objectives == {}
        assert e.artifacts["gpu_seconds"] == "0.0" and e.toolkit == "nvcc 13.0.88"


def test_genome_from_another_space_is_invalid(tmp_path):
    other = GeneSpace("other", genes=(Choice("behaviour", options=("ok",)),)).make({"behaviour": "ok"})
    pool, compiler = FakePool({}), FakeCompiler(tmp_path)
    (ev,) = cascade.run_cascade([other], settings(), compiler, pool, static_problems=static_problems,
                                classify=classify, space=SPACE)
    assert ev.status is Status.INVALID and "space 'other'" in ev.message and compiler.batches == []


# -- stage 1 ------------------------------------------------------------------------------------
def test_wrong_result_at_check_never_reaches_bench(tmp_path):
    wrong, ok = g("wrong"), g("ok")
    (ew, eo), pool, _ = judge([wrong, ok], tmp_path)
    assert stages(pool, wrong.key) == ["check"]
    assert stages(pool, ok.key) == ["check", "bench"]
    assert ew.status is Status.WRONG_RESULT and ew.message.startswith("WRONG_RESULT at check")
    assert {c.case for c in ew.cases} == {"n7", "n199"} and ew.artifacts["stage"] == "check"
    assert ew.artifacts["gpu_seconds"] == "0.5"
    assert eo.status is Status.OK and eo.artifacts["gpu_seconds"] == "1.0"


def test_only_survivors_are_benchmarked(tmp_path):
    genomes = [g("ok", 2.0), g("compile_error"), g("crash"), g("hang"), g("ok", 0.5), g("nocheck")]
    evs, pool, _ = judge(genomes, tmp_path)
    bench_keys = {j.key for j in pool.jobs if j.stage == BENCH}
    assert bench_keys == {genomes[0].key, genomes[4].key}
    assert [e.status for e in evs] == [Status.OK, Status.COMPILE_ERROR, Status.RUNTIME_ERROR, Status.TIMEOUT,
                                       Status.OK, Status.INVALID]
    assert "SIGSEGV" in evs[2].message and evs[3].message.startswith("TIMEOUT at check")
    assert "none of the check cases" in evs[5].message
    assert evs[0].device == evs[4].device == "Fake H200"
    fast, slow = evs[0], evs[4]
    assert fast.fitness("geomean_speedup") == pytest.approx(2.0)
    assert slow.fitness("geomean_speedup") == pytest.approx(0.5) and slow.objectives["min_speedup"] == pytest.approx(0.5)
    assert fast.objectives["mean_tbps"] == pytest.approx(4.0) and fast.objectives["ceiling_fraction"] == pytest.approx(1.0)
    assert [c.case for c in fast.cases] == ["n1024", "n8192", "n2048", "n4096"]     # matrix order
    assert fast.message.startswith("OK: 2.000x geomean vs torch") and not fast.suspect
    assert json.loads(fast.artifacts["stage_seconds"]) == {"check": 0.5, "bench": 0.5, "compile": 0.01,
                                                           "render": pytest.approx(0, abs=0.1)}
    # check jobs get timeout_s; bench jobs timeout_s per case (4 cases -> 240 s)
    assert sorted(set(pool.timeouts)) == [60.0, 240.0]


def test_check_can_be_skipped(tmp_path):
    (ev,), pool, _ = judge([g("ok")], tmp_path, check=False, check_cases=())
    assert [j.stage for j in pool.jobs] == [BENCH] and ev.status is Status.OK


def test_unsupported_bench_case_is_invalid_not_skipped(tmp_path):
    (ev,), pool, _ = judge([g("narrow")], tmp_path)
    assert ev.status is Status.INVALID and ev.message.startswith("INVALID at bench")
    bench = next(j for j in pool.jobs if j.stage == BENCH)
    assert bench.launches["n1024"] is None and len(bench.cases) == 4
    assert {c.case: c.status for c in ev.cases}["n1024"] is Status.INVALID
    assert ev.objectives["cases"] == 3.0 and ev.fitness("geomean_speedup") is None


# -- stage 2: hopeless cut and suspects ------------------------------------------------------------
def test_hopeless_cut_after_largest_cases(tmp_path):
    slow, fine = g("ok", 0.25), g("ok", 1.0)
    (es, ef), pool, _ = judge([slow, fine], tmp_path, hopeless_below=0.5)
    probe = next(j for j in pool.jobs if j.key == slow.key and j.stage == BENCH)
    assert [c.id for c in probe.cases] == ["n8192", "n4096"]      # largest bytes first
    assert stages(pool, slow.key) == ["check", "bench-probe", "verify-rest"]     # the rest verified, not timed
    assert stages(pool, fine.key) == ["check", "bench-probe", "bench-rest"]
    assert es.status is Status.OK and "hopeless" in es.artifacts["truncated"]
    assert "2 of 4 cases verified, not timed" in es.artifacts["truncated"] and "truncated" in es.message
    assert set(json.loads(es.artifacts["verified_untimed"])) == {"n1024", "n2048"}
    assert es.objectives["cases"] == 2.0 and es.fitness("geomean_speedup") == pytest.approx(0.25)
    assert ef.objectives["cases"] == 4.0 and "truncated" not in ef.artifacts
    assert [c.case for c in ef.cases] == ["n1024", "n8192", "n2048", "n4096"]
    assert ef.artifacts["gpu_seconds"] == "1.5"


def test_a_hopeless_cut_never_turns_a_wrong_kernel_into_an_ok_record(tmp_path):
    """Slow on the probe cases, wrong only on a case the cut leaves untimed: WRONG_RESULT."""
    bad = g("wrong_untimed", 0.25)
    (ev,), pool, _ = judge([bad], tmp_path, hopeless_below=0.5)
    assert stages(pool, bad.key) == ["check", "bench-probe", "verify-rest"]
    assert ev.status is Status.WRONG_RESULT and "at verify" in ev.message and "n1024" in ev.message


def test_no_hopeless_cut_by_default(tmp_path):
    (es,), pool, _ = judge([g("ok", 0.25)], tmp_path)
    assert stages(pool, es.key) == ["check", "bench"] and es.objectives["cases"] == 4.0


def test_suspect_never_gets_fitness(tmp_path):
    (ev,), _, _ = judge([g("ok", 100.0)], tmp_path)
    assert ev.status is Status.OK and ev.suspect
    assert ev.objectives["geomean_speedup"] == pytest.approx(100.0)
    assert ev.fitness("geomean_speedup") is None
    assert ev.message.startswith("SUSPECT") and len(json.loads(ev.artifacts["suspect_cases"])) == 4


# -- small steps ------------------------------------------------------------------------------------
def test_probe_split_and_helpers():
    cases = FAMILY.benchmark_cases()
    probe, rest = cascade.probe_split(cases, {c.id: FAMILY.bytes_moved(c) for c in cases}, 2)
    assert [c.id for c in probe] == ["n8192", "n4096"] and [c.id for c in rest] == ["n1024", "n2048"]
    assert cascade.derive_seed(0, "abc", CHECK) == cascade.derive_seed(0, "abc", CHECK)
    assert cascade.derive_seed(0, "abc", CHECK) != cascade.derive_seed(0, "abc", BENCH)
    assert cascade.first_error("warning: x\nkernel.cu(3): error: boom\n") == "kernel.cu(3): error: boom"
    assert len(cascade.clip("x" * 50_000)) < 21_000
    s = settings(timeout_s=10.0)
    job = Job("j", "k", BENCH, "f", "/r", b"", tuple(cases), {})
    assert s.job_timeout(job) == 40.0 and settings(bench_case_timeout_s=1.0).job_timeout(job) == 60.0
    assert s.job_timeout(Job("j", "k", CHECK, "f", "/r", b"", (), {})) == 10.0


def test_merge_cases_fills_missing_case():
    cases = tuple(FAMILY.check_cases())
    job = Job("j", "k", CHECK, "f", "/r", b"", cases, {c.id: None for c in cases})
    result = JobResult("j", Status.OK, cases=(CaseResult("n7"),))
    merged = cascade.merge_cases(job, result, [])
    assert [c.case for c in merged] == ["n7", "n199"] and merged[1].status is Status.RUNTIME_ERROR
    assert cascade.job_status(result, merged) is Status.RUNTIME_ERROR


# -- GPUEvaluator ------------------------------------------------------------------------------------
def test_gpu_evaluator_with_fakes(tmp_path):
    genomes = [g("ok", 2.0), g("wrong"), g("compile_error")]
    pool = FakePool({x.key: x for x in genomes})
    ev = GPUEvaluator(FAMILY, SPACE, family_root=tmp_path, compiler=FakeCompiler(tmp_path), pool=pool,
                      baselines=(), timing=TimingConfig(reps=7))
    assert ev.batch_size == 8
    out = ev.evaluate(genomes)
    assert [e.status for e in out] == [Status.OK, Status.WRONG_RESULT, Status.COMPILE_ERROR]
    assert out[0].toolkit == "nvcc 13.0.88" and out[0].device == "Fake H200"
    job = pool.jobs[0]
    assert job.family == "fakeop" and job.family_root == str(tmp_path.resolve())
    assert job.timing.reps == 7 and job.timing.baselines == ("torch",)
    stats = ev.stats()
    assert stats["verified"] == 1 and stats["gpu_seconds"] == pytest.approx(1.5)
    assert stats["verified_per_gpu_minute"] == pytest.approx(40.0)
    assert ev.describe()["toolkit"] == "nvcc 13.0.88"
    with pytest.raises(ValueError, match="unknown metric"):
        GPUEvaluator(FAMILY, SPACE, metric="fastest", compiler=FakeCompiler(tmp_path), pool=pool)
    with pytest.raises(ValueError, match="gene space"):
        GPUEvaluator(FAMILY, GeneSpace("other", genes=SPACE.genes), pool=pool)


def test_gpu_evaluator_jobs_cross_the_process_boundary(tmp_path):
    genomes = [g("ok"), g("narrow")]
    with WorkerPool(1, runner=f"{fake_runners.__name__}:EchoRunner", devices=["0"]) as pool:
        ev = GPUEvaluator(FAMILY, SPACE, compiler=FakeCompiler(tmp_path), pool=pool)
        ok, narrow = ev.evaluate(genomes)
        assert ok.status is Status.OK and ok.objectives["geomean_speedup"] == pytest.approx(2.0)
        assert ok.device.startswith("fake GPU 0") and ok.artifacts["gpu_seconds"] == "0.5"
        assert narrow.status is Status.INVALID
        assert ev.describe()["copy_ceiling_tbps"] == 4.0
        assert pool.stats["jobs"] == 4 and pool.stats["restarts"] == 0


def test_gpu_evaluator_prefetch_compiles_the_next_batch_in_the_background(tmp_path):
    import threading

    class ThreadRecordingCompiler(FakeCompiler):
        def __init__(self, tmp):
            super().__init__(tmp)
            self.threads: list[str] = []
            self.gate = threading.Event()

        def compile_many(self, items):
            name = threading.current_thread().name
            self.threads.append(name)
            if name.startswith("evo-prefetch"):
                self.gate.wait(5)                 # still compiling while the first batch is judged
            return super().compile_many(items)

    first, second = [g("ok", 2.0)], [g("ok", 0.5), g("compile_error")]
    pool = FakePool({x.key: x for x in first + second})
    compiler = ThreadRecordingCompiler(tmp_path)
    ev = GPUEvaluator(FAMILY, SPACE, family_root=tmp_path, compiler=compiler, pool=pool, baselines=())
    ev.prefetch(second)
    out1 = ev.evaluate(first)                     # does not wait for the other batch's compile
    assert out1[0].status is Status.OK
    assert compiler.threads[0].startswith("evo-prefetch") and not compiler.threads[1].startswith("evo-prefetch")
    compiler.gate.set()
    out2 = ev.evaluate(second)                    # waits for its background compile, then judges
    assert [e.status for e in out2] == [Status.OK, Status.COMPILE_ERROR]
    assert out2[0].objectives["geomean_speedup"] == pytest.approx(0.5)
    ev.prefetch([])                               # nothing to do: no error
    pool.close = lambda: None
    ev.close()                                    # stops the prefetch thread too


def _verdicts(evs):
    """What a record says of a genome, without the clocks (timestamps, stage timings)."""
    out = []
    for e in evs:
        arts = {k: v for k, v in e.artifacts.items() if k not in ("batch_seconds", "stage_seconds", "compile_cached")}
        if "input_seeds" in arts:                  # the verification seeds stay; BENCH's timing seed is drawn per job
            arts["input_seeds"] = {k: v["verify"] for k, v in json.loads(arts["input_seeds"]).items()}
        out.append((e.key, e.status, e.message, e.objectives, e.cases, e.device, e.toolkit, arts))
    return out


def _jobs(pool):
    """The jobs the GPU got, less the per-job random timing seed (drawn afresh for every BENCH job)."""
    return [replace(j, timing_seed=0) for j in pool.jobs]


def test_a_staged_batch_is_judged_exactly_like_one_compiled_in_line(tmp_path):
    """prefetch() runs stage 0 (render, compile, static checks) of a later batch in the
    background; evaluate() then takes those candidates instead of running stage 0 again. The GPU
    stages are untouched: the same CHECK job on every check case (same cubin, same input seed),
    the same BENCH jobs, the same verdicts and evidence as without the prefetch."""
    import threading

    batch = [g("ok", 2.0), g("wrong"), g("compile_error"), g("spill"), g("render_bug"), g("narrow"), g("ok", 0.5)]
    seen: list[str] = []

    def recording_problems(result, family, genome):
        seen.append(threading.current_thread().name)
        return static_problems(result, family, genome)

    def judged(prefetch):
        pool = FakePool({x.key: x for x in batch})
        compiler = FakeCompiler(tmp_path)
        ev = GPUEvaluator(FAMILY, SPACE, family_root=tmp_path, compiler=compiler, pool=pool, baselines=())
        ev.settings = replace(ev.settings, nonce=1234)          # the run-time nonce, fixed to compare seeds
        seen.clear()
        original = cascade._default_checks
        cascade._default_checks = lambda: (recording_problems, classify)
        try:
            if prefetch:
                ev.prefetch(batch)
                ev._prefetched[batch[0].key].result()          # the background stage 0 has run
            out = ev.evaluate(batch)
        finally:
            cascade._default_checks = original
        return out, pool, compiler, list(seen)

    inline, pool_a, compiler_a, threads_a = judged(False)
    staged, pool_b, compiler_b, threads_b = judged(True)
    assert _verdicts(staged) == _verdicts(inline)
    assert _jobs(pool_b) == _jobs(pool_a)
    checks = [j for j in pool_b.jobs if j.stage == CHECK]
    assert checks and all(tuple(c.id for c in j.cases) == ("n7", "n199") for j in checks)
    assert all(j.seed == cascade.derive_seed(0, j.key, CHECK, 1234) for j in checks)
    assert [e.status for e in staged] == [Status.OK, Status.WRONG_RESULT, Status.COMPILE_ERROR, Status.INVALID,
                                          Status.INVALID, Status.INVALID, Status.OK]
    # stage 0 ran once per genome, in the background thread, and not again in evaluate()
    assert compiler_b.batches == [6] and compiler_a.batches == [6]
    assert threads_b and all(t.startswith("evo-prefetch") for t in threads_b)
    assert threads_a and not any(t.startswith("evo-prefetch") for t in threads_a)
    assert all(json.loads(e.artifacts["batch_seconds"])["staged"] == 7 for e in staged)
    assert all("staged" not in json.loads(e.artifacts["batch_seconds"]) for e in inline)


def test_without_stage0_ahead_only_the_compiles_run_ahead(tmp_path):
    """evaluator.judge_ahead = false: the judge before session 16 (the compile in the background,
    the static checks in evaluate(), which finds the compile in the cache)."""
    import threading

    seen: list[str] = []

    def recording_problems(result, family, genome):
        seen.append(threading.current_thread().name)
        return static_problems(result, family, genome)

    batch = [g("ok", 2.0), g("spill")]
    compiler = FakeCompiler(tmp_path)
    ev = GPUEvaluator(FAMILY, SPACE, family_root=tmp_path, compiler=compiler, pool=FakePool({x.key: x for x in batch}),
                      baselines=(), stage0_ahead=False)
    original = cascade._default_checks
    cascade._default_checks = lambda: (recording_problems, classify)
    try:
        ev.prefetch(batch)
        assert ev._prefetched[batch[0].key].result() == {}
        out = ev.evaluate(batch)
    finally:
        cascade._default_checks = original
    assert [e.status for e in out] == [Status.OK, Status.INVALID]
    assert compiler.batches == [2, 2] and seen and not any(t.startswith("evo-prefetch") for t in seen)
    assert "staged" not in json.loads(out[0].artifacts["batch_seconds"])


def test_a_batch_mixing_staged_and_unstaged_genomes_keeps_its_order(tmp_path):
    first, later = [g("ok", 2.0), g("compile_error")], [g("ok", 0.5), g("wrong")]
    pool = FakePool({x.key: x for x in first + later})
    compiler = FakeCompiler(tmp_path)
    ev = GPUEvaluator(FAMILY, SPACE, family_root=tmp_path, compiler=compiler, pool=pool, baselines=())
    ev.prefetch([later[1], first[0]])
    ev._prefetched[first[0].key].result()
    import time
    t_call = time.time()
    out = ev.evaluate([first[0], later[0], first[1], later[1]])
    assert [e.key for e in out] == [first[0].key, later[0].key, first[1].key, later[1].key]
    assert [e.status for e in out] == [Status.OK, Status.OK, Status.COMPILE_ERROR, Status.WRONG_RESULT]
    assert compiler.batches == [2, 2]                  # the background pair, then the two left in line
    assert json.loads(out[0].artifacts["batch_seconds"])["staged"] == 2
    assert ev._prefetched == {}
    # a staged record's clock starts with the batch that judges it, as a cached compile's did
    assert all(t_call <= e.started_at <= e.finished_at for e in out)


def test_a_background_stage_0_that_fails_leaves_the_batch_to_evaluate(tmp_path):
    """A broken toolchain in the background is not a candidate's verdict: evaluate() runs stage 0
    itself and the machine's error comes up from there, as without a prefetch."""
    from fitness.toolchain import ToolchainError

    class Broken(FakeCompiler):
        def compile_many(self, items):
            raise ToolchainError("nvcc vanished")

    genomes = [g("ok")]
    ev = GPUEvaluator(FAMILY, SPACE, family_root=tmp_path, compiler=Broken(tmp_path),
                      pool=FakePool({x.key: x for x in genomes}), baselines=())
    ev.prefetch(genomes)
    with pytest.raises(ToolchainError, match="nvcc vanished"):
        ev.evaluate(genomes)


def test_a_compile_that_timed_out_in_the_background_is_compiled_again_in_evaluate(tmp_path):
    """A timed-out nvcc is not cached (fitness.compile: a loaded machine may finish it next time),
    and before stage 0 ran ahead evaluate() compiled it again after the background compile: a
    timeout in the background (nvcc beside another batch's compiles) must not become the verdict."""
    class SlowOnce(FakeCompiler):
        def __init__(self, tmp):
            super().__init__(tmp)
            self.calls = 0

        def compile_many(self, items):
            self.calls += 1
            if self.calls == 1:
                self.batches.append(len(items))
                return [CompileResult(ok=False, source_hash=hashlib.sha256(s.encode()).hexdigest(), arch="sm_90a",
                                      flags=tuple(f), cubin_path=None, log="\ntimeout: nvcc killed after 180s")
                        for s, f in items]
            return super().compile_many(items)

    genomes = [g("ok", 2.0)]
    compiler = SlowOnce(tmp_path)
    ev = GPUEvaluator(FAMILY, SPACE, family_root=tmp_path, compiler=compiler,
                      pool=FakePool({x.key: x for x in genomes}), baselines=())
    ev.prefetch(genomes)
    ev._prefetched[genomes[0].key].result()
    out = ev.evaluate(genomes)
    assert compiler.batches == [1, 1]
    assert [e.status for e in out] == [Status.OK]
    assert "staged" not in json.loads(out[0].artifacts["batch_seconds"])


def test_staged_candidates_are_not_taken_for_raw_sources(tmp_path):
    """evaluate_raw judges through another family (fitness.raw): a prefetched stage 0 of the
    evaluator's own family is never taken for it."""
    ev = GPUEvaluator(FAMILY, SPACE, family_root=tmp_path, compiler=FakeCompiler(tmp_path),
                      pool=FakePool({}), baselines=())
    genome = g("ok")
    ev.prefetch([genome])
    other = replace(ev.settings, family=FakeFamily())
    assert ev._take_staged([genome], other, "default") == {}
    ev.prefetch([genome])
    assert ev._take_staged([genome], ev.settings, None) == {}
    ev.prefetch([genome])
    assert list(ev._take_staged([genome], ev.settings, "default")) == [genome.key]


def test_gpu_evaluator_evaluate_cases_times_only_the_given_cases(tmp_path):
    genomes = [g("ok", 2.0)]
    pool = FakePool({x.key: x for x in genomes})
    ev = GPUEvaluator(FAMILY, SPACE, family_root=tmp_path, compiler=FakeCompiler(tmp_path), pool=pool, baselines=())
    all_ids = [c.id for c in ev.settings.bench_cases]
    (e,) = ev.evaluate_cases(genomes, all_ids[-1:])
    assert e.status is Status.OK and [c.case for c in e.cases] == all_ids[-1:]
    bench_jobs = [j for j in pool.jobs if j.stage == "bench"]
    assert [c.id for c in bench_jobs[-1].cases] == all_ids[-1:]
    assert [c.id for c in ev.settings.bench_cases] == all_ids          # the evaluator itself unchanged
    with pytest.raises(ValueError, match="not in the benchmark matrix"):
        ev.evaluate_cases(genomes, ["nope"])


# -- hopeless probes per group (session 3 cut two of session 2's per-dtype champions) -------------
def _dtype_cases():
    return [Case(f"{d}/{n}", {"dtype": d, "N": n}) for d in ("bf16", "fp32") for n in (256, 4096, 65536)]


def test_probe_split_takes_the_largest_cases_of_each_group():
    probe_split = cascade.probe_split
    cases = _dtype_cases()
    sizes = {c.id: c.params["N"] * (4 if c.params["dtype"] == "fp32" else 2) for c in cases}
    probe, rest = probe_split(cases, sizes, 1)
    assert [c.id for c in probe] == ["fp32/65536"]                         # whole matrix: fp32 only
    probe, rest = probe_split(cases, sizes, 1, "dtype")
    assert [c.id for c in probe] == ["bf16/65536", "fp32/65536"]         # one per dtype, matrix order
    assert [c.id for c in rest] == ["bf16/256", "bf16/4096", "fp32/256", "fp32/4096"]
    probe, _ = probe_split(cases, sizes, 2, "dtype")
    assert [c.id for c in probe] == ["bf16/65536", "bf16/4096", "fp32/65536", "fp32/4096"]


def test_hopeless_per_group_needs_every_group_below_the_threshold():
    hopeless_verdict = cascade.hopeless_verdict
    def cr(dtype, speedup):
        return CaseResult(f"{dtype}/65536", params={"dtype": dtype}, time_us=100.0 / speedup,
                          baselines_us={"torch": 100.0})

    specialist = [cr("bf16", 1.2), cr("fp32", 0.45)]       # fast on bf16, hopeless on fp32
    assert hopeless_verdict(specialist, "torch", 0.5) is None              # geomean 0.73: kept anyway
    assert hopeless_verdict([cr("bf16", 0.6), cr("fp32", 0.3)], "torch", 0.5)   # geomean 0.42: cut
    assert hopeless_verdict([cr("bf16", 0.6), cr("fp32", 0.3)], "torch", 0.5, "dtype") is None
    why = hopeless_verdict([cr("bf16", 0.45), cr("fp32", 0.3)], "torch", 0.5, "dtype")
    assert why and "every dtype" in why and "bf16 at 0.450x" in why


def test_evaluate_in_full_ignores_the_hopeless_cut(tmp_path):
    slow = g("ok", 0.25)
    pool = FakePool({slow.key: slow})
    ev = GPUEvaluator(FAMILY, SPACE, family_root=tmp_path, compiler=FakeCompiler(tmp_path), pool=pool,
                      baselines=(), hopeless_below=0.5, hopeless_cases=1)
    (cut,) = ev.evaluate([slow])
    assert "hopeless" in cut.artifacts["truncated"] and cut.objectives["cases"] == 1.0
    (full,) = ev.evaluate_in_full([slow])
    assert "truncated" not in full.artifacts and full.objectives["cases"] == 4.0
    assert ev.settings.hopeless_below == 0.5                  # the evaluator's own settings unchanged


# -- specialists: cases a genome cannot run, counted at a penalty instead of invalidating it -------
def test_unsupported_cases_count_at_the_penalty_speed_when_allowed(tmp_path):
    (ev,), pool, _ = judge([g("narrow", 2.0)], tmp_path, unsupported_speedup=0.01)
    assert ev.status is Status.OK and ev.fitness("geomean_speedup") is not None
    assert {c.case: c.status for c in ev.cases}["n1024"] is Status.INVALID
    assert ev.objectives["cases"] == 3.0 and ev.objectives["unsupported_cases"] == 1.0
    assert ev.objectives["geomean_speedup"] == pytest.approx((2.0 ** 3 * 0.01) ** 0.25)
    assert ev.objectives["min_speedup"] == pytest.approx(0.01)
    assert "1 cases it cannot run counted as 0.01x" in ev.message
    full = judge([g("ok", 2.0)], tmp_path, unsupported_speedup=0.01)[0][0]
    assert full.fitness("geomean_speedup") > ev.fitness("geomean_speedup")   # skipping never pays
    assert "unsupported_cases" not in full.objectives


def test_probe_cases_a_specialist_cannot_run_do_not_stop_it(tmp_path):
    """The hopeless probe times the largest cases first; a short-row specialist runs none of
    them, which says nothing about its speed: it goes on to the cases it runs."""
    (ev,), pool, _ = judge([g("short", 2.0)], tmp_path, unsupported_speedup=0.01, hopeless_below=0.5)
    assert ev.status is Status.OK and "truncated" not in ev.artifacts
    assert stages(pool, ev.key) == ["check", "bench-rest"]          # the probe had nothing to launch
    assert ev.objectives["cases"] == 2.0 and ev.objectives["unsupported_cases"] == 2.0
    (strict,), _, _ = judge([g("short", 2.0)], tmp_path, hopeless_below=0.5)
    assert strict.status is Status.INVALID                          # the default: every case or nothing


def test_a_genome_that_runs_no_benchmark_case_is_invalid_even_when_allowed(tmp_path):
    class NoneFamily(FakeFamily):
        def launch(self, genome, case):
            return None if case.id.startswith("n") and case.params["N"] >= 1000 else super().launch(genome, case)

    fam = NoneFamily()
    (ev,), _, _ = judge([g("ok")], tmp_path, family=fam, unsupported_speedup=0.01)
    assert ev.status is Status.INVALID and "cannot handle 4 benchmark cases" in ev.message


# -- a primary baseline the machine lacks --------------------------------------------------------
class NoPrimaryPool(FakePool):
    """The machine has no `torch` baseline (its package or checkout is missing): every timed case
    comes back without its time and with the judge's machine-level note; `note` replaces it."""

    def __init__(self, genomes_by_key, note="baseline torch: not importable here (needs a checkout)", only=None):
        super().__init__(genomes_by_key)
        self.note, self.only = note, only

    def _one(self, job):
        r = super()._one(job)
        if job.stage != BENCH:
            return r
        cases = tuple(replace(c, baselines_us={}, message=self.note)
                      if c.time_us is not None and (self.only is None or c.case == self.only) else c
                      for c in r.cases)
        return replace(r, cases=cases)


def test_a_primary_baseline_the_machine_lacks_stops_the_batch_unrecorded(tmp_path):
    """Session 12: INT21's checkout was not on the device for two calls, and 28 evaluations were
    recorded with "no int21 timing": fitness without its baseline. Now the judge stops instead."""
    from fitness.workers import BaselineUnavailableError, WorkerPoolError

    genomes = [g(speed=2.0), g(speed=0.5)]
    pool = NoPrimaryPool({x.key: x for x in genomes})
    with pytest.raises(BaselineUnavailableError) as exc:
        cascade.run_cascade(genomes, settings(), FakeCompiler(tmp_path), pool, static_problems=static_problems,
                            classify=classify, space=SPACE)
    assert isinstance(exc.value, WorkerPoolError)           # the CLI's one-line machine error
    msg = str(exc.value)
    assert "primary baseline 'torch'" in msg and "not importable here (needs a checkout)" in msg
    assert "Fake H200" in msg and "resume" in msg


@pytest.mark.parametrize("note", ["baseline torch: unusable: RuntimeError: n = 131072 exceeds the block size",
                                  "baseline torch: does not support this case"])
def test_a_primary_baseline_missing_on_one_case_is_that_cases_gap(tmp_path, note):
    genomes = [g(speed=2.0)]
    pool = NoPrimaryPool({x.key: x for x in genomes}, note=note, only="n1024")
    (e,) = cascade.run_cascade(genomes, settings(), FakeCompiler(tmp_path), pool, static_problems=static_problems,
                               classify=classify, space=SPACE)
    assert e.status is Status.OK
    assert [c.case for c in e.cases if "torch" not in c.baselines_us] == ["n1024"]


def test_another_baseline_the_machine_lacks_is_only_a_note(tmp_path):
    genomes = [g(speed=2.0)]
    pool = NoPrimaryPool({x.key: x for x in genomes}, note="baseline quack: not importable here")
    (e,) = cascade.run_cascade(genomes, settings(baselines=("torch", "quack")), FakeCompiler(tmp_path), pool,
                               static_problems=static_problems, classify=classify, space=SPACE)
    assert e.status is Status.OK      # the times of torch were dropped by the double, quack is noted


def test_machine_missing_reads_only_machine_level_notes():
    from fitness.baseline_runs import machine_missing

    timed = dict(time_us=1.0, baselines_us={})
    assert machine_missing([CaseResult("a", **timed, message="baseline int21: not importable here; 5 judged")],
                           "int21") == "baseline int21: not importable here"
    assert machine_missing([CaseResult("a", **timed, message="baseline quack: unusable: ModuleNotFoundError: x")],
                           "quack").startswith("baseline quack: unusable: ModuleNotFoundError")
    assert machine_missing([CaseResult("a", **timed, message="baseline quack: unusable: RuntimeError: big")],
                           "quack") == ""
    assert machine_missing([CaseResult("a", time_us=1.0, baselines_us={"int21": 2.0},
                                       message="baseline int21: not importable here")], "int21") == ""
    assert machine_missing([CaseResult("a", Status.INVALID, message="baseline int21: not importable here")],
                           "int21") == ""


def test_a_missing_baselines_note_says_what_the_machine_needs():
    from types import SimpleNamespace

    from fitness.baseline_runs import BaselineCache, prepare
    from fitness.family import Baseline

    family = SimpleNamespace(baselines=lambda: [
        Baseline("peer", lambda: False, lambda case, dev: None, needs="a checkout in .peers/peer or EVO_PEER_ROOT"),
        Baseline("plain", lambda: False, lambda case, dev: None)])
    cache = BaselineCache()
    usable, notes = prepare(None, family, None, [{}], ["peer", "plain"], cache)
    assert usable == []
    assert notes == {"peer": "not importable here (needs a checkout in .peers/peer or EVO_PEER_ROOT)",
                     "plain": "not importable here"}
    assert cache.lasting == notes            # asked once per worker, not once per job


def test_the_ceiling_of_each_streaming_pattern_is_kept_beside_the_ceiling():
    """A suspect verdict names the ceiling it was judged by (copy_ceiling_tbps); the runner's JobResult also
    carries each pattern's figure (copy, grid-stride add, tiled add), which lands in the artifacts, so a record
    says which pattern set the ceiling (session 28's suspects could not be read back that way)."""
    c = cascade.Judging(genome=None, started_at=0.0)
    result = JobResult("j", Status.OK, copy_ceiling_tbps=3.1, seconds=1.0,
                       extra={"ceiling_tbps_by_pattern": {"copy": 2.98, "add": 3.05, "add_tiled": 3.1}})
    cascade.account(c, BENCH, result)
    assert c.copy_ceiling_tbps == 3.1
    assert json.loads(c.artifacts["ceiling_tbps_by_pattern"]) == {"copy": 2.98, "add": 3.05, "add_tiled": 3.1}
    cascade.account(c, CHECK, JobResult("j2", Status.OK, seconds=1.0))     # a job without the figures keeps them
    assert "ceiling_tbps_by_pattern" in c.artifacts
    assert "ceiling_rechecks" not in c.artifacts
    # a worker that measured its ceiling again (fitness.device: a case streamed faster than it) says so
    cascade.account(c, BENCH, JobResult("j3", Status.OK, copy_ceiling_tbps=3.12, seconds=1.0,
                                        extra={"ceiling_rechecks": 2}))
    assert c.copy_ceiling_tbps == 3.12 and c.artifacts["ceiling_rechecks"] == "2"
