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
from pathlib import Path

import pytest

from fitness.family import import_sibling, load_family
from fitness.jobs import TimingConfig
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
