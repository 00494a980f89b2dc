"""Objectives: the numbers a search maximises, computed from per-case results.

Only cases with status OK and a measured time count. Cases whose baseline was not measured are
left out of the speedups but kept for the bandwidth figures. Objective names are stable (they are
stored with every Evaluation and named by experiment configs as the fitness metric); higher is
better unless the name ends in `_us`:

    geomean_speedup        geometric mean over cases of baseline_us / time_us (the primary baseline)
    min_speedup            the worst case's speedup over the primary baseline
    geomean_speedup@<b>    the same against another measured baseline <b> (e.g. geomean_speedup@quack)
    min_speedup@<b>
    mean_tbps              mean achieved bandwidth, TB/s (fewest bytes moved / median time)
    min_tbps               the worst case's bandwidth
    ceiling_fraction       mean over cases of achieved TB/s / the measured copy ceiling
    min_ceiling_fraction   the worst case's fraction of the copy ceiling
    total_us               sum of the median times of the measured cases (lower is better)
    cases                  how many cases the objectives are computed over
    unsupported_cases      benchmark cases the genome cannot run (only with an unsupported_speedup:
                           each then counts in the speedups as that value, e.g. 0.01x)

A name is absent when it cannot be computed (no case with that baseline, no copy ceiling), never
NaN: `Evaluation.fitness` then treats the candidate as unable to compete on that metric.

`is_suspect` flags a case faster than physics allows: moving `bytes_moved` bytes cannot take less
than bytes_moved / copy ceiling, so a faster time means the kernel skipped work or the timing is
wrong. A suspect evaluation is recorded but never gets a fitness.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Mapping, Sequence

from fitness.records import CaseResult, Status

GEOMEAN_SPEEDUP = "geomean_speedup"
MIN_SPEEDUP = "min_speedup"
MEAN_TBPS = "mean_tbps"
MIN_TBPS = "min_tbps"
CEILING_FRACTION = "ceiling_fraction"
MIN_CEILING_FRACTION = "min_ceiling_fraction"
TOTAL_US = "total_us"
CASES = "cases"
UNSUPPORTED_CASES = "unsupported_cases"

NAMES = (GEOMEAN_SPEEDUP, MIN_SPEEDUP, MEAN_TBPS, MIN_TBPS, CEILING_FRACTION, MIN_CEILING_FRACTION,
         TOTAL_US, CASES)

BytesMoved = Mapping[str, int] | Callable[[str], int | None] | None


def against(name: str, baseline: str) -> str:
    """The objective name of a speedup against a secondary baseline: 'geomean_speedup@quack'."""
    return f"{name}@{baseline}"


def measured(cases: Iterable[CaseResult]) -> list[CaseResult]:
    """The cases that count: status OK with a positive, finite median time."""
    return [c for c in cases if c.status is Status.OK and c.time_us is not None
            and math.isfinite(c.time_us) and c.time_us > 0]


def _bytes(bytes_moved: BytesMoved, case: str) -> int | None:
    if bytes_moved is None:
        return None
    if callable(bytes_moved):
        return bytes_moved(case)
    return bytes_moved.get(case)


def tbps(bytes_moved: int, time_us: float) -> float:
    """Bytes over microseconds, in TB/s (1e12 bytes per second)."""
    return bytes_moved / time_us / 1e6


def case_tbps(case: CaseResult, bytes_moved: BytesMoved = None) -> float | None:
    """Achieved TB/s of a case: from the byte model when known, else the runner's figure."""
    if case.time_us and case.time_us > 0:
        b = _bytes(bytes_moved, case.case)
        if b:
            return tbps(b, case.time_us)
    return case.tbps if case.tbps is not None and math.isfinite(case.tbps) else None


def speedups(cases: Iterable[CaseResult], baseline: str) -> dict[str, float]:
    """case id -> baseline_us / time_us, for measured cases that have the baseline."""
    out = {}
    for c in measured(cases):
        s = c.speedup(baseline)
        if s is not None and math.isfinite(s) and s > 0:
            out[c.case] = s
    return out


def geomean(values: Sequence[float]) -> float | None:
    values = [v for v in values if v > 0 and math.isfinite(v)]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def geomean_speedup(cases: Iterable[CaseResult], baseline: str) -> float | None:
    return geomean(list(speedups(cases, baseline).values()))


def min_speedup(cases: Iterable[CaseResult], baseline: str) -> float | None:
    s = speedups(cases, baseline)
    return min(s.values()) if s else None


def _tbps_list(cases: Iterable[CaseResult], bytes_moved: BytesMoved) -> list[float]:
    return [t for t in (case_tbps(c, bytes_moved) for c in measured(cases)) if t is not None]


def mean_tbps(cases: Iterable[CaseResult], bytes_moved: BytesMoved = None) -> float | None:
    vals = _tbps_list(cases, bytes_moved)
    return sum(vals) / len(vals) if vals else None


def min_tbps(cases: Iterable[CaseResult], bytes_moved: BytesMoved = None) -> float | None:
    vals = _tbps_list(cases, bytes_moved)
    return min(vals) if vals else None


def ceiling_fraction(cases: Iterable[CaseResult], copy_ceiling_tbps: float | None,
                     bytes_moved: BytesMoved = None) -> tuple[float, float] | None:
    """(mean, min) of achieved TB/s over the measured copy ceiling, or None."""
    if not copy_ceiling_tbps or copy_ceiling_tbps <= 0:
        return None
    vals = [t / copy_ceiling_tbps for t in _tbps_list(cases, bytes_moved)]
    return (sum(vals) / len(vals), min(vals)) if vals else None


def total_us(cases: Iterable[CaseResult]) -> float | None:
    m = measured(cases)
    return sum(c.time_us for c in m) if m else None  # type: ignore[misc]


def is_suspect(case: CaseResult, bytes_moved: int | None, copy_ceiling_tbps: float | None,
               slack: float = 1.02) -> bool:
    """True when the case beat the copy ceiling by more than `slack` (physically impossible)."""
    if not bytes_moved or not copy_ceiling_tbps or copy_ceiling_tbps <= 0:
        return False
    if case.time_us is None or not math.isfinite(case.time_us):
        return False
    if case.time_us <= 0:
        return True
    return tbps(bytes_moved, case.time_us) > copy_ceiling_tbps * slack


#: dense tensor-core peaks by target (TFLOP/s, bf16/fp16 inputs, fp32 accumulate; datasheet
#: figures for the SXM parts): a case doing its operation's fewest flops faster than this is as
#: impossible as one moving its fewest bytes faster than a copy
TENSOR_PEAK_TFLOPS = {"sm_90a": 989.4, "sm_90": 989.4}


def beats_compute_peak(case: CaseResult, flops: int | None, peak_tflops: float | None, slack: float = 1.02) -> bool:
    """True when the case did its `flops` faster than `peak_tflops` allows (by more than `slack`)."""
    if not flops or not peak_tflops or case.time_us is None or not math.isfinite(case.time_us):
        return False
    return case.time_us <= 0 or flops / (case.time_us * 1e-6) / 1e12 > peak_tflops * slack


def suspect_cases(cases: Iterable[CaseResult], bytes_moved: BytesMoved, copy_ceiling_tbps: float | None,
                  slack: float = 1.02, *, flops: Mapping[str, int] | None = None,
                  peak_tflops: float | None = None) -> list[str]:
    """Cases faster than the roofline: the family's fewest bytes over the measured copy ceiling,
    or its fewest flops over the tensor-core peak (`flops` per case id; memory- and compute-bound
    operations alike)."""
    return [c.case for c in cases if c.status is Status.OK
            and (is_suspect(c, _bytes(bytes_moved, c.case), copy_ceiling_tbps, slack)
                 or beats_compute_peak(c, (flops or {}).get(c.case), peak_tflops, slack))]


def compute(cases: Sequence[CaseResult], baseline: str, *, bytes_moved: BytesMoved = None,
            copy_ceiling_tbps: float | None = None, other_baselines: Iterable[str] = (),
            unsupported: int = 0, unsupported_speedup: float | None = None) -> dict[str, float]:
    """Every objective that can be computed, under the names in the module docstring.

    `unsupported` cases (the genome cannot run them) with an `unsupported_speedup` enter every
    speedup objective as that value: a specialist that skips cases ranks below a genome that
    runs them all at the same speed, and cannot raise its geomean by skipping hard cases."""
    out: dict[str, float] = {}

    def put(name: str, value: float | None) -> None:
        if value is not None and math.isfinite(value):
            out[name] = float(value)

    def speeds(b: str) -> list[float]:
        s = list(speedups(cases, b).values())
        if s and unsupported and unsupported_speedup is not None:
            s += [float(unsupported_speedup)] * unsupported
        return s

    for b in (baseline, *(x for x in other_baselines if x != baseline)):
        s = speeds(b)
        put(GEOMEAN_SPEEDUP if b == baseline else against(GEOMEAN_SPEEDUP, b), geomean(s))
        put(MIN_SPEEDUP if b == baseline else against(MIN_SPEEDUP, b), min(s) if s else None)
    put(MEAN_TBPS, mean_tbps(cases, bytes_moved))
    put(MIN_TBPS, min_tbps(cases, bytes_moved))
    frac = ceiling_fraction(cases, copy_ceiling_tbps, bytes_moved)
    if frac is not None:
        put(CEILING_FRACTION, frac[0])
        put(MIN_CEILING_FRACTION, frac[1])
    put(TOTAL_US, total_us(cases))
    out[CASES] = float(len(measured(cases)))
    if unsupported and unsupported_speedup is not None:
        out[UNSUPPORTED_CASES] = float(unsupported)
    return out
