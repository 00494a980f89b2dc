"""The cheat suite: every way of fooling the judge must be caught by the real GPU pipeline.

tests/cheats/rmsnorm_cheats renders one RMSNorm forward kernel per `variant` (see its space.py):
an honest one that must come out OK, and cheats that must each get a specific verdict. All go
through fitness.gpu_evaluator.GPUEvaluator together (render -> nvcc -> static checks -> GPU
worker -> verify -> time), so a fault or a hang in one must not spoil the others.

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
from fitness.family import KERNELS_DIR, Tolerance, import_sibling, load_family
from fitness.jobs import BENCH, CHECK, Job, TimingConfig
from fitness.records import Status

pytestmark = pytest.mark.gpu

CHEATS = Path(__file__).resolve().parent / "cheats"

EXPECTED: dict[str, set[Status]] = {
    "good": {Status.OK},
    "partial_write": {Status.WRONG_RESULT},
    "constant": {Status.WRONG_RESULT},
    "cache_by_pointer": {Status.WRONG_RESULT},
    "stale_output": {Status.WRONG_RESULT},
    "modify_input": {Status.WRONG_RESULT},
    "no_work": {Status.WRONG_RESULT},
    "out_of_bounds_write": {Status.WRONG_RESULT},
    "infinite_loop": {Status.TIMEOUT},
    "too_much_smem": {Status.COMPILE_ERROR, Status.INVALID},
    "fault": {Status.RUNTIME_ERROR},
}

# words the evidence must contain: the verdict is right *for the right reason*
EVIDENCE: dict[str, tuple[str, ...]] = {
    "partial_write": ("not written",),
    "stale_output": ("not written",),
    "no_work": ("not written",),
    "modify_input": ("modified",),
    "out_of_bounds_write": ("out-of-bounds",),
    "cache_by_pointer": ("same buffers",),
    "constant": ("reference",),
}


def _gpu_or_skip() -> None:
    cupy = pytest.importorskip("cupy")
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"no usable CUDA device: {exc}")
    if n < 1:
        pytest.skip("no CUDA device")


def _write_summary(rows: list[tuple[str, str, str, str, float]]) -> None:
    out_dir = os.environ.get("EVO_RESULTS_DIR")
    if not out_dir:
        return
    path = Path(out_dir) / "fitness_gpu_suite.md"
    path.parent.mkdir(parents=True, exist_ok=True)

    def cell(text: str) -> str:
        text = " ".join(str(text).split()).replace("|", "\\|")
        return text if len(text) <= 300 else text[:297] + "..."

    lines = ["# GPU judge: cheat suite (tests/test_cheats_gpu.py)", "",
             "| variant | expected | status | seconds | message |", "|---|---|---|---:|---|"]
    for variant, expected, status, message, seconds in rows:
        lines.append(f"| {variant} | {expected} | {status} | {seconds:.1f} | {cell(message)} |")
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.slow
def test_every_cheat_is_caught(tmp_path):
    _gpu_or_skip()
    from fitness.gpu_evaluator import GPUEvaluator

    family = load_family("rmsnorm_cheats", root=CHEATS)
    space = import_sibling(str(CHEATS / "rmsnorm_cheats" / "family.py"), "space").SPACE
    variants = list(space.gene("variant").options)
    assert set(variants) == set(EXPECTED)
    genomes = [space.make({"variant": v}) for v in variants]
    timing = TimingConfig(reps=20, warmup=3, baselines=("torch",), max_case_seconds=5.0)
    with GPUEvaluator(family, space, matrix="smoke", baseline="torch", baselines=["torch"], timing=timing,
                      workers=None, timeout_s=120, cache_dir=tmp_path / "compile",
                      family_root=CHEATS) as evaluator:
        evaluations = evaluator.evaluate(genomes)
    assert len(evaluations) == len(genomes)

    rows, failures = [], []
    for variant, ev in zip(variants, evaluations):
        evidence = " ".join([ev.message] + [c.message for c in ev.cases])
        rows.append((variant, "/".join(s.value for s in sorted(EXPECTED[variant], key=lambda s: s.value)),
                     ev.status.value, evidence, ev.duration_s))
        if ev.status not in EXPECTED[variant]:
            failures.append(f"{variant}: expected {sorted(s.value for s in EXPECTED[variant])}, got "
                            f"{ev.status.value}: {evidence[:500]}")
            continue
        for word in EVIDENCE.get(variant, ()):
            if word not in evidence:
                failures.append(f"{variant}: {ev.status.value} but the evidence lacks {word!r}: {evidence[:500]}")
    _write_summary(rows)
    assert not failures, "\n".join(failures)

    good = evaluations[variants.index("good")]
    timed = [c for c in good.cases if c.time_us is not None]
    assert timed, "the honest kernel was never timed"
    for c in timed:
        assert c.status is Status.OK and c.time_us > 0 and c.samples >= 20 and c.tbps and c.tbps > 0
        assert c.max_abs_err is not None and c.max_abs_err < 1e-1


# -- the GPU pieces on their own (in this process; only variants that leave the context intact) --------
def _compile(variant: str, tmp_path: Path) -> bytes:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    family = load_family("rmsnorm_cheats", root=CHEATS)
    space = import_sibling(str(CHEATS / "rmsnorm_cheats" / "family.py"), "space").SPACE
    cu = tmp_path / f"{variant}.cu"
    cu.write_text(family.render(space.make({"variant": variant})))
    out = tmp_path / f"{variant}.cubin"
    subprocess.run([nvcc, "-cubin", "-gencode", "arch=compute_90a,code=sm_90a", "-O3", "-std=c++17",
                    "-o", str(out), str(cu)], check=True, capture_output=True, text=True)
    return out.read_bytes()


def _job(variant: str, cubin: bytes, stage: str, cases, timing: TimingConfig) -> Job:
    family = load_family("rmsnorm_cheats", root=CHEATS)
    space = import_sibling(str(CHEATS / "rmsnorm_cheats" / "family.py"), "space").SPACE
    genome = space.make({"variant": variant})
    return Job(job_id=f"{variant}-{stage}", key=genome.key, stage=stage, family="rmsnorm_cheats",
               family_root=str(CHEATS), cubin=cubin, cases=tuple(cases),
               launches={c.id: family.launch(genome, c) for c in cases}, seed=3, timing=timing)


def test_array_code_agrees_on_device_and_host():
    _gpu_or_skip()
    import cupy as cp

    rng = np.random.default_rng(0)
    a64 = rng.standard_normal(100_003) * 10.0 ** rng.uniform(-5, 5, 100_003)
    for name in ("bf16", "fp16", "fp32"):
        host = dtypes.quantize(a64, name)
        dev = dtypes.quantize(cp.asarray(a64), name)
        assert np.array_equal(cp.asnumpy(dev), host), name
        assert np.array_equal(cp.asnumpy(dtypes.to_float64(dev, name)), dtypes.to_float64(host, name))
        assert np.array_equal(cp.asnumpy(dtypes.quantize(cp.asarray(a64.astype(np.float32)), name)),
                              dtypes.quantize(a64.astype(np.float32), name))
    ref = rng.standard_normal((64, 1000))
    out = dtypes.quantize(ref, "bf16")
    out[5, 7] = dtypes.poison_bits("bf16")
    tol = Tolerance(1e-2, 1.6e-2, 1e-2)
    h = verify.check_output(out, ref, tol, "bf16", name="y", chunk=999)
    d = verify.check_output(cp.asarray(out), cp.asarray(ref), tol, "bf16", name="y", chunk=999)
    assert (h.ok, h.message) == (d.ok, d.message) and "y[5, 7] not written" in d.message
    assert verify.fingerprint(cp.asarray(out)) == verify.fingerprint(out)
    assert verify.inputs_unchanged(cp.asarray(out), cp.asarray(out))

    op = import_sibling(str(KERNELS_DIR / "rmsnorm" / "family.py"), "operation")
    family = load_family("rmsnorm_cheats", root=CHEATS)
    case = family.make_case(199, 4104, "bf16")
    for dist in ("normal", "wide"):
        inputs = family.make_inputs(case, cp.random.RandomState(7), dist, xp=cp)
        assert isinstance(inputs["x"], cp.ndarray) and inputs["x"].dtype == cp.uint16
        x = dtypes.to_float64(inputs["x"], "bf16")
        assert bool((x != 0).all()) and bool(cp.isfinite(x).all())
        dev_ref = family.reference(case, inputs)
        host_ref = family.reference(case, {k: cp.asnumpy(v) for k, v in inputs.items()})
        np.testing.assert_allclose(cp.asnumpy(dev_ref["y"]), host_ref["y"], rtol=1e-12)
    assert isinstance(family, op.RMSNormOperation)


def test_device_runner_in_process(tmp_path):
    """CHECK and BENCH through fitness.device.DeviceRunner directly, without the worker pool."""
    _gpu_or_skip()
    from fitness.device import DeviceRunner

    family = load_family("rmsnorm_cheats", root=CHEATS)
    runner = DeviceRunner(0)
    info = runner.describe()
    assert "sm_90" in info["device"] and info["copy_ceiling_tbps"] and 1.0 < info["copy_ceiling_tbps"] < 10.0
    timing = TimingConfig(reps=20, warmup=3, baselines=("torch", "torch_compile", "quack", "liger"),
                          max_case_seconds=5.0)
    good = _compile("good", tmp_path)
    res = runner.run(_job("good", good, CHECK, family.check_cases(), timing))
    assert res.status is Status.OK, res.message
    res = runner.run(_job("good", good, BENCH, family.benchmark_cases("smoke"), timing))
    assert res.status is Status.OK, res.message
    for c in res.cases:
        assert c.time_us and c.time_us > 0 and c.samples == 20 and c.tbps > 0, c
        print(c.case, f"{c.time_us:.1f} us", f"{c.tbps:.2f} TB/s", dict(c.baselines_us), c.message)
    for variant, word in (("partial_write", "not written"), ("cache_by_pointer", "same buffers"),
                          ("modify_input", "modified"), ("out_of_bounds_write", "out-of-bounds")):
        res = runner.run(_job(variant, _compile(variant, tmp_path), CHECK, family.check_cases(), timing))
        assert res.status is Status.WRONG_RESULT and word in res.message, (variant, res.message)
        assert not res.context_lost


@pytest.mark.slow
def test_device_runner_on_the_largest_case(tmp_path):
    """8192 x 262144 bf16 (2**31 elements): device-side inputs and reference, 64-bit offsets."""
    _gpu_or_skip()
    from fitness.device import DeviceRunner

    family = load_family("rmsnorm_cheats", root=CHEATS)
    runner = DeviceRunner(0)
    case = family.make_case(8192, 262144, "bf16")
    timing = TimingConfig(reps=5, warmup=1, baselines=("torch",), max_case_seconds=10.0)
    res = runner.run(_job("good", _compile("good", tmp_path), BENCH, [case], timing))
    assert res.status is Status.OK, res.message
    c = res.cases[0]
    print(c.case, f"{c.time_us:.1f} us", f"{c.tbps:.2f} TB/s", dict(c.baselines_us), c.message)
