"""The cheat suite: every way of fooling the judge must be caught by the real GPU pipeline.

Every kernel of tests/cheats/rmsnorm_raw/ is a raw source (fitness.raw.RawSource: CUDA source +
a launch description) for the RMSNorm forward operation of kernels/rmsnorm (bf16 x, fp32 w, one
256-thread CTA per row), judged through fitness.gpu_evaluator.GPUEvaluator.evaluate_raw exactly
as an LLM-written or outside kernel would be: include allowlist -> nvcc -> static checks (device
state, runtime calls, resources) -> CHECK (the family's check cases) -> BENCH (smoke matrix,
timed beside torch). `good` must come out OK; every cheat must get its expected verdict for the
right reason (the evidence words). Adaptive cheats were written against the holes of the judge
before it poisoned every timed launch (see EXPECTED's comments); `compute_if_poisoned` is the
one whose hole is closed by design: it must come out OK and gain nothing.

With EVO_RESULTS_DIR set, a markdown table of the verdicts is written to
$EVO_RESULTS_DIR/fitness_gpu_suite.md (before the assertions, so failures are recorded too).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from fitness import dtypes, verify
from fitness.family import KERNELS_DIR, Tolerance
from fitness.raw import LaunchSpec, RawSource
from fitness.records import Status
from tests.conftest import gpu_or_skip

RAW = Path(__file__).resolve().parent / "cheats" / "rmsnorm_raw"
LAUNCH = LaunchSpec(kernel="rmsnorm_fwd", grid=("M", 1, 1), block=(256, 1, 1),
                    args=("x", "w", "y", "null", "i32:M", "i32:N", "f32:eps"),
                    when="dtype == 'bf16' and weight_dtype == 'fp32'")

# kernel -> (expected statuses, evidence words ("a|b": either), the hole it was written against)
EXPECTED: dict[str, tuple[set[Status], tuple[str, ...], str]] = {
    "good": ({Status.OK}, (), "honest"),
    "partial_write": ({Status.WRONG_RESULT}, ("not written",), "skips the last column"),
    "constant": ({Status.WRONG_RESULT}, ("reference",), "writes 1.0"),
    "cache_by_pointer": ({Status.INVALID}, ("__device__ state",), "replays by pointer from a device cache"),
    "stale_output": ({Status.WRONG_RESULT}, ("not written",), "never stores y"),
    "modify_input": ({Status.WRONG_RESULT}, ("modified",), "flips a bit of x"),
    "no_work": ({Status.WRONG_RESULT}, ("not written",), "returns at once"),
    "out_of_bounds_write": ({Status.WRONG_RESULT}, ("out-of-bounds",), "writes just past y"),
    "infinite_loop": ({Status.TIMEOUT}, (), "spins forever"),
    "too_much_smem": ({Status.COMPILE_ERROR, Status.INVALID}, (), "300 KB of shared memory"),
    "fault": ({Status.RUNTIME_ERROR}, (), "stores through a wild pointer"),
    # adaptive cheats, one per hole of the earlier judge
    "compute_if_poisoned": ({Status.OK}, (), "only unchecked timed launches found a stale output"),
    "skip_alternate_launches": ({Status.WRONG_RESULT}, ("not written",), "unchecked timed launches were never judged"),
    "memo_by_content": ({Status.INVALID}, ("__device__ state",), "timing inputs never changed"),
    "rows_16bit": ({Status.WRONG_RESULT}, ("not written",), "no case had more rows than the benchmark"),
    "offsets_32bit": ({Status.WRONG_RESULT, Status.RUNTIME_ERROR}, (), "no tensor had more than 2**31 elements"),
    "pow2_widths_only": ({Status.WRONG_RESULT}, ("not written",), "long rows verified only at powers of two"),
    "ignores_eps": ({Status.WRONG_RESULT}, ("reference",), "eps never mattered"),
    "bf16_accumulate": ({Status.WRONG_RESULT}, ("relative L2|reference",), "low-precision sums passed the CHECK stage"),
    "newton_nonfinite": ({Status.WRONG_RESULT}, ("nonfinite",), "inf rows were never checked"),
    "far_write": ({Status.WRONG_RESULT}, ("out-of-bounds",), "guards saw only 64 KiB past an output"),
}


def _bf16_family():
    """The RMSNorm forward family of kernels/rmsnorm restricted to bf16 (the suite's kernels are bf16)."""
    from fitness.family import load_family
    return type(load_family("rmsnorm"))(dtypes=("bf16",))


def source(name: str) -> str:
    """The kernel's file with the suite's shared prelude (prelude.cuh) after its first line: one
    self-contained source, as a raw candidate must be."""
    first, rest = (RAW / f"{name}.cu").read_text().split("\n", 1)
    return first + "\n" + (RAW / "prelude.cuh").read_text() + rest


def raw(name: str) -> RawSource:
    return RawSource(family="rmsnorm", source=source(name), launch=LAUNCH, origin="test", note=EXPECTED[name][2])


def test_the_suite_is_complete():
    assert {p.stem for p in RAW.glob("*.cu")} == set(EXPECTED)
    for name in EXPECTED:
        assert not raw(name).problems(), name
    family = _bf16_family()
    for case in family.check_cases() + family.benchmark_cases("smoke"):
        launch = LAUNCH.resolve(case)
        ins, outs = family.io(case)
        assert launch is not None and {a for a in launch.args if isinstance(a, str)} <= set(ins) | set(outs), case.id


def test_every_suite_kernel_compiles_for_sm90a_but_the_one_that_must_not(tmp_path):
    from fitness.compile import Compiler
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found")
    names = list(EXPECTED)
    results = Compiler(tmp_path / "cc", arch="sm_90a").compile_many([(source(n), ()) for n in names])
    for name, r in zip(names, results):
        assert r.ok == (name != "too_much_smem"), (name, r.log[-500:])


def test_device_state_and_runtime_calls_are_refused_before_any_gpu_time(tmp_path):
    """The memoising cheats keep their cache in __device__ arrays: the static checks refuse them
    on the ptxas report (no GPU); the honest kernel passes; device malloc is refused on the SASS."""
    from fitness.compile import Compiler
    from fitness.raw import RawFamily
    from fitness.static_checks import static_problems
    from fitness.family import load_family
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found")
    family = RawFamily(load_family("rmsnorm"))
    mallocing = raw("good")
    mallocing = RawSource(family="rmsnorm", launch=LAUNCH, source=mallocing.source.replace(
        "rmsnorm_row(x, w, y, rstd, row, N, eps, N);\n}", "rmsnorm_row(x, w, y, rstd, row, N, eps, N);\n"
        "    if (row < 0) { float* p = (float*)malloc(16); y[0] = __float2bfloat16(p[0]); free(p); }\n}", 1))
    assert mallocing.source != raw("good").source
    # a launch naming a kernel the source only mentions in a comment: the cubin has no such entry
    misnamed = RawSource(family="rmsnorm", source=raw("good").source + "\n// rmsnorm_fwd_v2 is next\n",
                         launch=LaunchSpec(**{**LAUNCH.to_dict(), "kernel": "rmsnorm_fwd_v2"}))
    assert not misnamed.problems()                              # the text names it: only the cubin can tell
    kernels = [raw("good"), raw("memo_by_content"), raw("cache_by_pointer"), mallocing, misnamed]
    results = Compiler(tmp_path / "cc", arch="sm_90a").compile_many([(k.source, tuple(k.flags)) for k in kernels])
    problems = [static_problems(r, family, k) for r, k in zip(results, kernels)]
    assert all(r.ok for r in results), [r.log for r in results if not r.ok]
    assert problems[0] == [], problems[0]
    assert any("__device__ state" in p for p in problems[1]) and any("__device__ state" in p for p in problems[2])
    assert any("device runtime" in p for p in problems[3]), problems[3]
    assert any("'rmsnorm_fwd_v2', which the cubin does not define" in p for p in problems[4]), problems[4]


def _write_summary(rows: list[tuple[str, str, str, str, float, str]]) -> None:
    out_dir = os.environ.get("EVO_RESULTS_DIR")
    if not out_dir:
        return
    path = Path(out_dir) / "fitness_gpu_suite.md"
    path.parent.mkdir(parents=True, exist_ok=True)

    def cell(text: str) -> str:
        text = " ".join(str(text).split()).replace("|", "\\|")
        return text if len(text) <= 300 else text[:297] + "..."

    lines = ["# GPU judge: cheat suite (tests/test_cheats_gpu.py)", "",
             "Raw-source kernels through `GPUEvaluator.evaluate_raw` (compile, static checks, CHECK, BENCH on "
             "the smoke matrix beside torch). `pytest -m gpu tests/test_cheats_gpu.py` with EVO_RESULTS_DIR set.", "",
             "| kernel | written against | expected | status | GPU s | evidence |", "|---|---|---|---|---:|---|"]
    for name, hole, expected, status, seconds, message in rows:
        lines.append(f"| {name} | {cell(hole)} | {expected} | {status} | {seconds:.2f} | {cell(message)} |")
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.gpu
@pytest.mark.slow
def test_every_cheat_is_caught(tmp_path):
    gpu_or_skip()
    from fitness.gpu_evaluator import GPUEvaluator
    from genomes import load_space

    family = _bf16_family()
    names = list(EXPECTED)
    with GPUEvaluator(family, load_space("rmsnorm"), matrix="smoke", baseline="torch", baselines=["torch"],
                      workers=None, timeout_s=180, cache_dir=tmp_path / "compile") as evaluator:
        evaluations = evaluator.evaluate_raw([raw(n) for n in names])
    assert len(evaluations) == len(names)

    rows, failures = [], []
    for name, ev in zip(names, evaluations):
        expected, words, hole = EXPECTED[name]
        evidence = " ".join([ev.message] + [c.message for c in ev.cases])
        rows.append((name, hole, "/".join(sorted(s.value for s in expected)), ev.status.value,
                     float(ev.artifacts.get("gpu_seconds", 0.0)), evidence))
        if ev.status not in expected:
            failures.append(f"{name}: expected {sorted(s.value for s in expected)}, got {ev.status.value}: "
                            f"{evidence[:500]}")
            continue
        for word in words:                       # "a|b": either
            if not any(w in evidence for w in word.split("|")):
                failures.append(f"{name}: {ev.status.value} but the evidence lacks {word!r}: {evidence[:500]}")
        assert ev.artifacts.get("raw_source", "").startswith("// cheat suite kernel"), name
    _write_summary(rows)
    assert not failures, "\n".join(failures)

    good = evaluations[names.index("good")]
    timed = {c.case: c for c in good.cases if c.time_us is not None}
    assert timed, "the honest kernel was never timed"
    for c in timed.values():
        assert c.status is Status.OK and c.time_us > 0 and c.samples >= 20 and c.tbps and c.tbps > 0
        assert c.max_abs_err is not None and c.max_abs_err < 1e-1
    # the cheat whose hole is closed computes on every launch: no faster than the honest kernel
    adaptive = {c.case: c for c in evaluations[names.index("compute_if_poisoned")].cases if c.time_us}
    ratios = [timed[k].time_us / adaptive[k].time_us for k in timed if k in adaptive]
    assert ratios and float(np.median(ratios)) < 1.15, ratios


@pytest.mark.gpu
def test_array_code_agrees_on_device_and_host():
    gpu_or_skip()
    import cupy as cp

    rng = np.random.default_rng(0)
    a64 = rng.standard_normal(100_003) * 10.0 ** rng.uniform(-5, 5, 100_003)
    for name in ("bf16", "fp16", "fp32"):
        host = dtypes.quantize(a64, name)
        dev = dtypes.quantize(cp.asarray(a64), name)
        assert np.array_equal(cp.asnumpy(dev), host), name
        assert np.array_equal(cp.asnumpy(dtypes.to_float64(dev, name)), dtypes.to_float64(host, name))
    ref = rng.standard_normal((64, 1000))
    out = dtypes.quantize(ref, "bf16")
    out[5, 7] = dtypes.poison_bits("bf16")
    tol = Tolerance(1e-2, 1.6e-2, 1e-2)
    h = verify.check_output(out, ref, tol, "bf16", name="y", chunk=999)
    d = verify.check_output(cp.asarray(out), cp.asarray(ref), tol, "bf16", name="y", chunk=999)
    assert (h.ok, h.message) == (d.ok, d.message) and "y[5, 7] not written" in d.message
    assert verify.fingerprint(cp.asarray(out)) == verify.fingerprint(out)
    assert verify.inputs_unchanged(cp.asarray(out), cp.asarray(out))
    assert tuple(int(v) for v in verify.written_counts(cp.asarray(out), "bf16").get()) == verify.written_counts(out, "bf16")
    nf = Tolerance(1e-2, 1.6e-2, 1e-2, match_nonfinite=True)
    r2 = ref.copy()
    r2[3, 3] = np.nan
    o2 = dtypes.quantize(r2, "bf16")
    assert verify.check_output(cp.asarray(o2), cp.asarray(r2), nf, "bf16").ok == verify.check_output(o2, r2, nf, "bf16").ok

    family = _bf16_family()
    for case in (family.make_case(199, 4104, "bf16"), family.make_case(64, 4104, "bf16", nonfinite=True),
                 family.make_case(199, 1000, "bf16", x_scale=1e-3)):
        for dist in ("normal", "wide"):
            inputs = family.make_inputs(case, cp.random.RandomState(7), dist, xp=cp)
            assert isinstance(inputs["x"], cp.ndarray) and inputs["x"].dtype == cp.uint16
            dev_ref = family.reference(case, inputs)
            host_ref = family.reference(case, {k: cp.asnumpy(v) for k, v in inputs.items()})
            np.testing.assert_allclose(cp.asnumpy(dev_ref["y"]), host_ref["y"], rtol=1e-12)
    case = family.make_case(3000, 1000, "bf16", sample_rows=9)
    inputs = family.make_inputs(case, cp.random.RandomState(8), "normal", xp=cp)
    idx, vals = family.reference_sample(case, inputs, np.random.default_rng(1))["y"]
    full = family.reference(case, inputs)["y"].reshape(-1)
    np.testing.assert_array_equal(cp.asnumpy(full[idx]), cp.asnumpy(vals))


def _compile(name: str, tmp_path: Path) -> bytes:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    out, cu = tmp_path / f"{name}.cubin", tmp_path / f"{name}.cu"
    cu.write_text(source(name))
    subprocess.run([nvcc, "-cubin", "-gencode", "arch=compute_90a,code=sm_90a", "-O3", "-std=c++17",
                    "-o", str(out), str(cu)], check=True, capture_output=True, text=True)
    return out.read_bytes()


@pytest.mark.gpu
def test_device_runner_in_process_on_the_largest_cases(tmp_path):
    """CHECK (every check case, the > 2**31-element ones included) and BENCH through the
    DeviceRunner directly, without the worker pool; then the pointer cache caught by the runner
    itself (the static checks would have stopped it first)."""
    gpu_or_skip()
    from fitness.device import DeviceRunner
    from fitness.jobs import BENCH, CHECK, Job, TimingConfig

    family = _bf16_family()
    runner = DeviceRunner(0)
    info = runner.describe()
    assert "sm_90" in info["device"] and info["copy_ceiling_tbps"] and 1.0 < info["copy_ceiling_tbps"] < 10.0
    timing = TimingConfig(reps=20, warmup=3, baselines=("torch",), max_case_seconds=5.0)

    def job(name: str, stage: str, cases) -> Job:
        return Job(job_id=f"{name}-{stage}", key=name, stage=stage, family="rmsnorm", family_root=str(KERNELS_DIR),
                   cubin=_compile(name, tmp_path), cases=tuple(cases),
                   launches={c.id: LAUNCH.resolve(c) for c in cases}, seed=3, timing_seed=5, timing=timing)

    res = runner.run(job("good", CHECK, family.check_cases()))
    assert res.status is Status.OK, res.message
    assert any(c.params.get("sample_rows") and c.status is Status.OK for c in res.cases)
    res = runner.run(job("good", BENCH, family.benchmark_cases("smoke") + [family.make_case(8192, 262144, "bf16")]))
    assert res.status is Status.OK, res.message
    for c in res.cases:
        assert c.time_us and c.time_us > 0 and c.samples == 20 and c.tbps > 0, c
        print(c.case, f"{c.time_us:.1f} us", f"{c.tbps:.2f} TB/s", dict(c.baselines_us), c.message)
    res = runner.run(job("cache_by_pointer", CHECK, family.check_cases()[:8]))
    assert res.status is Status.WRONG_RESULT and "same buffers" in res.message and not res.context_lost, res.message
