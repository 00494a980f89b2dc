"""Pure correctness checks (the CORRECTNESS PROTOCOL of DESIGN.md), for numpy or cupy arrays.

- `check_output`: NaN/inf anywhere fails (and an element still holding the poison pattern is
  reported as "not written"), then |out - ref| <= atol + rtol*|ref| elementwise, then the
  relative L2 error. Large arrays are checked in flat chunks so the float64 temporaries stay
  bounded on the device.
- `inputs_unchanged`: bitwise comparison of inputs before and after a launch.
- `guard_intact`: the poisoned guard zones around an output must come back untouched.
- `fingerprint`: a cheap position-sensitive checksum, for inputs too large to keep a copy of.

Every result names the first offending element and its values, so a failed candidate's record
says exactly what went wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import numpy as np

from fitness import dtypes
from fitness.dtypes import array_module
from fitness.family import Tolerance

DEFAULT_CHUNK = 1 << 24   # elements per chunk (float64 temporaries of 128 MiB)


@dataclass(frozen=True)
class CheckResult:
    """Unpacks as (ok, max_abs_err, rel_l2, message); truthy only when ok.

    max_abs_err and rel_l2 are None when the output holds NaN/inf or unwritten elements (a
    number over the finite part would look better than the output is)."""

    ok: bool
    max_abs_err: float | None
    rel_l2: float | None
    message: str

    def __iter__(self) -> Iterator[Any]:
        return iter((self.ok, self.max_abs_err, self.rel_l2, self.message))

    def __bool__(self) -> bool:
        return self.ok


@dataclass(frozen=True)
class Verdict:
    """(ok, message); truthy only when ok."""

    ok: bool
    message: str = ""

    def __iter__(self) -> Iterator[Any]:
        return iter((self.ok, self.message))

    def __bool__(self) -> bool:
        return self.ok


def format_index(flat: int, shape: tuple[int, ...] | None) -> str:
    if not shape:
        return f"[{flat}]"
    idx = np.unravel_index(int(flat), tuple(int(s) for s in shape))
    return "[" + ", ".join(str(int(i)) for i in idx) + "]"


def _num(v: float) -> str:
    return f"{v:.6g}"


def _first(xp: Any, mask: Any) -> int:
    """Index of the first True in a 1-D boolean array (argmax over bytes works on numpy and cupy)."""
    return int(xp.argmax(xp.ascontiguousarray(mask).view(xp.uint8)))


class OutputChecker:
    """Accumulates the check of one output over flat chunks; `result()` gives the verdict."""

    def __init__(self, tol: Tolerance, dtype: str, name: str = "out", shape: tuple[int, ...] | None = None):
        self.tol = tol
        self.dtype = dtypes.canonical(dtype)
        self.name = name
        self.shape = tuple(shape) if shape is not None else None
        self.count = 0
        self.n_poison = 0
        self.first_poison: int | None = None
        self.n_nonfinite = 0
        self.first_nonfinite: tuple[int, float, float] | None = None
        self.n_ref_nonfinite = 0
        self.first_ref_nonfinite: int | None = None
        self.n_bad = 0
        self.first_bad: tuple[int, float, float, float, float] | None = None
        self.max_err = 0.0
        self.sum_sq_err = 0.0
        self.sum_sq_ref = 0.0

    def update(self, out: Any, ref: Any, offset: int = 0) -> None:
        xp = array_module(out)
        out = out.reshape(-1)
        ref = xp.asarray(ref).reshape(-1)
        if out.size != ref.size:
            raise ValueError(f"chunk sizes differ: out {out.size}, ref {ref.size}")
        self.count += int(out.size)
        if out.size == 0:
            return
        poison = dtypes.is_poison(out, self.dtype)
        n = int(poison.sum())
        if n:
            self.n_poison += n
            if self.first_poison is None:
                self.first_poison = offset + _first(xp, poison)
        vals = dtypes.to_float64(out, self.dtype)
        ref = ref.astype(xp.float64, copy=False)
        fin_out = xp.isfinite(vals)
        bad_out = ~fin_out & ~poison
        n = int(bad_out.sum())
        if n:
            self.n_nonfinite += n
            if self.first_nonfinite is None:
                i = _first(xp, bad_out)
                self.first_nonfinite = (offset + i, float(vals[i]), float(ref[i]))
        fin_ref = xp.isfinite(ref)
        n = int((~fin_ref).sum())
        if n:
            self.n_ref_nonfinite += n
            if self.first_ref_nonfinite is None:
                self.first_ref_nonfinite = offset + _first(xp, ~fin_ref)
        fin = fin_out & fin_ref
        with np.errstate(invalid="ignore", over="ignore"):
            err = xp.where(fin, xp.abs(vals - ref), 0.0)
            aref = xp.where(fin_ref, xp.abs(ref), 0.0)
        bound = self.tol.atol + self.tol.rtol * aref
        bad = err > bound
        n = int(bad.sum())
        if n:
            self.n_bad += n
            if self.first_bad is None:
                i = _first(xp, bad)
                self.first_bad = (offset + i, float(vals[i]), float(ref[i]), float(err[i]), float(bound[i]))
        self.max_err = max(self.max_err, float(err.max()))
        self.sum_sq_err += float((err * err).sum())
        self.sum_sq_ref += float((aref * aref).sum())

    def result(self) -> CheckResult:
        name, shape, total = self.name, self.shape, self.count
        if self.first_poison is not None:
            return CheckResult(False, None, None,
                               f"element {name}{format_index(self.first_poison, shape)} not written "
                               f"(poison NaN remains); {self.n_poison} of {total} elements not written")
        if self.first_nonfinite is not None:
            i, v, r = self.first_nonfinite
            what = "NaN" if math.isnan(v) else "inf"
            return CheckResult(False, None, None,
                               f"{name}{format_index(i, shape)} is {what} (reference {_num(r)}); "
                               f"{self.n_nonfinite} of {total} elements are NaN/inf")
        if self.first_ref_nonfinite is not None:
            return CheckResult(False, None, None,
                               f"the reference for {name}{format_index(self.first_ref_nonfinite, shape)} is not "
                               f"finite ({self.n_ref_nonfinite} elements): the inputs or the reference are broken")
        rel = math.sqrt(self.sum_sq_err) / math.sqrt(self.sum_sq_ref) if self.sum_sq_ref > 0 else math.sqrt(self.sum_sq_err)
        if self.first_bad is not None:
            i, v, r, e, b = self.first_bad
            return CheckResult(False, self.max_err, rel,
                               f"{name}{format_index(i, shape)} = {_num(v)} but the reference is {_num(r)} "
                               f"(|err| {_num(e)} > atol + rtol*|ref| = {_num(b)}); {self.n_bad} of {total} "
                               f"elements out of tolerance (atol {self.tol.atol:g}, rtol {self.tol.rtol:g}), "
                               f"max |err| {_num(self.max_err)}")
        if self.tol.rel_l2 is not None and rel > self.tol.rel_l2:
            return CheckResult(False, self.max_err, rel,
                               f"{name}: relative L2 error {_num(rel)} > {self.tol.rel_l2:g} "
                               f"(every element within atol/rtol, max |err| {_num(self.max_err)})")
        return CheckResult(True, self.max_err, rel, "")


def check_output(out: Any, ref_f64: Any, tol: Tolerance, dtype: str, *, name: str = "out",
                 chunk: int = DEFAULT_CHUNK) -> CheckResult:
    """Judge one output (storage array: bf16 as uint16 bits) against its float64 reference."""
    xp = array_module(out)
    ref_f64 = xp.asarray(ref_f64)
    if tuple(out.shape) != tuple(ref_f64.shape):
        return CheckResult(False, None, None,
                           f"{name}: shape {tuple(out.shape)} differs from the reference's {tuple(ref_f64.shape)}")
    checker = OutputChecker(tol, dtype, name, tuple(out.shape))
    flat_out, flat_ref = out.reshape(-1), ref_f64.reshape(-1)
    n = int(flat_out.size)
    if n == 0:
        checker.update(flat_out, flat_ref, 0)
    for start in range(0, n, max(1, int(chunk))):
        stop = min(n, start + int(chunk))
        checker.update(flat_out[start:stop], flat_ref[start:stop], start)
    return checker.result()


def _unsigned(a: Any) -> Any:
    xp = array_module(a)
    kinds = {1: xp.uint8, 2: xp.uint16, 4: xp.uint32, 8: xp.uint64}
    a = xp.ascontiguousarray(a)
    return a.reshape(-1).view(kinds[a.dtype.itemsize])


def _first_difference(before: Any, after: Any, name: str, chunk: int) -> Verdict:
    xp = array_module(after)
    if tuple(before.shape) != tuple(after.shape) or before.dtype != after.dtype:
        return Verdict(False, f"input {name} changed shape/dtype: {tuple(before.shape)} {before.dtype} -> "
                              f"{tuple(after.shape)} {after.dtype}")
    b, a = _unsigned(before), _unsigned(after)
    b = xp.asarray(b)
    total, n_diff, first = int(a.size), 0, None
    for start in range(0, total, max(1, int(chunk))):
        stop = min(total, start + int(chunk))
        diff = b[start:stop] != a[start:stop]
        k = int(diff.sum())
        if k:
            n_diff += k
            if first is None:
                i = _first(xp, diff)
                first = (start + i, int(b[start + i]), int(a[start + i]))
    if first is None:
        return Verdict(True)
    i, old, new = first
    width = 2 * before.dtype.itemsize
    return Verdict(False, f"input {name}{format_index(i, tuple(after.shape))} was modified by the kernel "
                          f"(bits 0x{old:0{width}x} -> 0x{new:0{width}x}); {n_diff} of {total} elements changed")


def inputs_unchanged(before: Any, after: Any, *, name: str = "input", chunk: int = DEFAULT_CHUNK) -> Verdict:
    """Bitwise equality of inputs before and after a launch: arrays, or mappings name -> array."""
    if isinstance(before, Mapping):
        if set(before) != set(after):
            return Verdict(False, f"input buffers differ: {sorted(before)} vs {sorted(after)}")
        for key in before:
            v = _first_difference(before[key], after[key], str(key), chunk)
            if not v:
                return v
        return Verdict(True)
    return _first_difference(before, after, name, chunk)


def guard_intact(guard: Any, dtype: str, *, name: str = "out", where: str = "after") -> Verdict:
    """A guard zone next to an output must still hold the poison pattern.

    `guard` is ordered by distance from the output: guard[0] is the element right after the end
    (where="after") or right before the start (where="before": pass the front zone reversed)."""
    xp = array_module(guard)
    flat = guard.reshape(-1)
    if flat.size == 0:
        return Verdict(True)
    ok = dtypes.is_poison(flat, dtype)
    if bool(ok.all()):
        return Verdict(True)
    bad = ~ok
    n = int(bad.sum())
    i = _first(xp, bad)
    side = "past the end" if where == "after" else "before the start"
    bits = int(dtypes.bits_view(flat[i:i + 1].copy(), dtype)[0])
    return Verdict(False, f"out-of-bounds write: the element {i + 1} {side} of {name} was overwritten "
                          f"(bits 0x{bits:x}); {n} guard elements {side} changed")


def fingerprint(a: Any, chunk: int = 1 << 24) -> tuple[int, int]:
    """(sum of words, position-weighted sum of words) mod 2**64 over the array's bits.

    Position-sensitive (swapping two elements changes it) and order-independent in its
    arithmetic, so numpy and cupy give the same value for the same bits."""
    xp = array_module(a)
    u = _unsigned(a)
    total = int(u.size)
    s1 = s2 = 0
    mask = (1 << 64) - 1
    for start in range(0, total, max(1, int(chunk))):
        stop = min(total, start + int(chunk))
        v = u[start:stop].astype(xp.uint64)
        w = xp.arange(start, stop, dtype=xp.uint64) % xp.uint64(65521) + xp.uint64(1)
        s1 = (s1 + int(v.sum(dtype=xp.uint64))) & mask
        s2 = (s2 + int((v * w).sum(dtype=xp.uint64))) & mask
    return s1, s2
