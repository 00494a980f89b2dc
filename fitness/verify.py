"""Pure correctness checks (the CORRECTNESS PROTOCOL of DESIGN.md), for numpy or cupy arrays.

- `check_output`: NaN/inf anywhere fails (and an element still holding the poison pattern is
  reported as "not written"), then |out - ref| <= atol + rtol*|ref| elementwise, then the
  relative L2 error, then (when the tolerance has groups) the relative L2 error of every group
  (`group_rel_l2`: e.g. per sequence and head, so one wrong token cannot hide in a big output). On cupy one fused raw kernel per output computes every count and sum
  (one host sync); numpy runs the same definitions as array code over flat chunks
  (`_chunk_stats`, the executable specification). The first offending element is located only
  when something failed.
- `inputs_unchanged`: bitwise comparison of inputs before and after a launch (one fused count
  per array, one sync for all).
- `guard_intact`: the poisoned guard zones around an output must come back untouched.
- `fingerprint` / `fingerprints`: a cheap position-sensitive checksum, for inputs too large to
  keep a copy of (one fused kernel per array, one sync for a mapping).

Raw kernels index with 64-bit integers (outputs reach 2**31 elements); tests/test_verify.py
compiles them for sm_90a and runs them on the host against the numpy code.

Every result names the first offending element and its values, so a failed candidate's record
says exactly what went wrong.
"""

from __future__ import annotations

import dataclasses
import math
import re
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
    #: the worst group's relative L2 error when the tolerance has groups (Tolerance.group_rel_l2)
    group_rel_l2: float | None = None

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


# ---------------------------------------------------------------------------------------------
# One fused pass per output
# ---------------------------------------------------------------------------------------------
# On cupy, `check_output` runs ONE raw kernel over the output and its reference that yields, per
# block, the 7 statistics of `_chunk_stats` (the numpy code there is the executable spec); the
# partials come back in one transfer (one host sync per output). Only when something fails are the
# first offending elements located, with array code (slow, but only on the failure path).
THREADS = 256           # block size of every raw kernel here (a power of two)
MAX_BLOCKS = 1024       # grid-stride loops: at most this many blocks
N_STATS = 7             # n_poison, n_nonfinite, n_ref_nonfinite, n_bad, max_err, sum_sq_err, sum_sq_ref

# element type -> (bits C type, poison literal, decode: bits `b` -> double)
_DECODE = {
    "bf16": ("unsigned short", "0x7FC1u", "(double)__uint_as_float(((unsigned int)b) << 16)"),
    "fp16": ("unsigned short", "0x7E01u", "jf_fp16_to_f64(b)"),
    "fp32": ("unsigned int", "0x7FC0DEADu", "(double)__uint_as_float(b)"),
    "fp64": ("unsigned long long", "0x7FF8DEADBEEF0001ull", "__longlong_as_double((long long)b)"),
    "int32": ("unsigned int", "0x7FC0DEADu", "(double)(int)b"),
}
_WORDS = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}

CUDA_COMMON = r"""
__device__ __forceinline__ unsigned long long jf_fp_mix(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
__device__ __forceinline__ double jf_fp16_to_f64(unsigned short h) {
    unsigned int e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    double v;
    if (e == 0x1Fu) v = m ? __longlong_as_double(0x7FF8000000000000ll) : __longlong_as_double(0x7FF0000000000000ll);
    else if (e == 0u) v = ldexp((double)m, -24);
    else v = ldexp((double)(m | 0x400u), (int)e - 25);
    return (h & 0x8000u) ? -v : v;
}
"""

_STATS_SRC = r"""
extern "C" __global__ void jf_stats_NAME(const BITS* __restrict__ out, const double* __restrict__ ref,
                                         long long n, double atol, double rtol, int match_nonfinite,
                                         double* partials) {
    __shared__ unsigned long long s_c[4][256];
    __shared__ double s_d[3][256];
    unsigned long long n_poison = 0, n_nonfinite = 0, n_ref_nonfinite = 0, n_bad = 0;
    double max_err = 0.0, sq_err = 0.0, sq_ref = 0.0;
    const long long step = (long long)gridDim.x * (long long)blockDim.x;
    for (long long i = (long long)blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += step) {
        const BITS b = out[i];
        const double r = ref[i];
        const bool poison = (b == (BITS)POISON);
        const double v = DECODE;
        const bool fin_out = isfinite(v), fin_ref = isfinite(r);
        /* a non-finite reference is met only under match_nonfinite, by NaN for NaN (never the
           poison) and by the same infinity for an infinity */
        const bool met = match_nonfinite && !poison && ((isnan(r) && isnan(v)) || (isinf(r) && v == r));
        n_poison += poison ? 1ull : 0ull;
        n_nonfinite += (!fin_out && !poison && fin_ref) ? 1ull : 0ull;
        n_ref_nonfinite += (fin_ref || met) ? 0ull : 1ull;
        const double err = (fin_out && fin_ref) ? fabs(__dsub_rn(v, r)) : 0.0;
        const double aref = fin_ref ? fabs(r) : 0.0;
        n_bad += (err > __dadd_rn(atol, __dmul_rn(rtol, aref))) ? 1ull : 0ull;   /* no FMA: as numpy */
        max_err = fmax(max_err, err);
        sq_err += err * err;
        sq_ref += aref * aref;
    }
    const unsigned int t = threadIdx.x;
    s_c[0][t] = n_poison; s_c[1][t] = n_nonfinite; s_c[2][t] = n_ref_nonfinite; s_c[3][t] = n_bad;
    s_d[0][t] = max_err; s_d[1][t] = sq_err; s_d[2][t] = sq_ref;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) {
            for (int k = 0; k < 4; ++k) s_c[k][t] += s_c[k][t + s];
            s_d[0][t] = fmax(s_d[0][t], s_d[0][t + s]);
            s_d[1][t] += s_d[1][t + s];
            s_d[2][t] += s_d[2][t + s];
        }
        __syncthreads();
    }
    if (t == 0) {
        double* p = partials + 7ll * blockIdx.x;
        for (int k = 0; k < 4; ++k) p[k] = (double)s_c[k][0];
        p[4] = s_d[0][0]; p[5] = s_d[1][0]; p[6] = s_d[2][0];
    }
}
"""

_COUNT_DIFF_SRC = r"""
extern "C" __global__ void jf_count_diff_NAME(const WORD* __restrict__ a, const WORD* __restrict__ b, long long n,
                                              unsigned long long* partials) {
    __shared__ unsigned long long s_c[256];
    unsigned long long c = 0;
    const long long step = (long long)gridDim.x * (long long)blockDim.x;
    for (long long i = (long long)blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += step)
        c += (a[i] != b[i]) ? 1ull : 0ull;
    const unsigned int t = threadIdx.x;
    s_c[t] = c;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) s_c[t] += s_c[t + s];
        __syncthreads();
    }
    if (t == 0) partials[blockIdx.x] = s_c[0];
}
"""

# Position i is mixed into each word by the splitmix64 finaliser (no period: a kernel cannot move
# or swap words without changing the sum, wherever they are).
_FINGERPRINT_SRC = r"""
extern "C" __global__ void jf_fingerprint_NAME(const WORD* __restrict__ a, long long n, unsigned long long* partials) {
    __shared__ unsigned long long s_1[256], s_2[256];
    unsigned long long s1 = 0, s2 = 0;                        /* sums mod 2**64 (wrap-around) */
    const long long step = (long long)gridDim.x * (long long)blockDim.x;
    for (long long i = (long long)blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += step) {
        const unsigned long long v = (unsigned long long)a[i];
        s1 += v;
        s2 += jf_fp_mix(v + ((unsigned long long)i + 1ull) * 0x9E3779B97F4A7C15ull);
    }
    const unsigned int t = threadIdx.x;
    s_1[t] = s1; s_2[t] = s2;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) { s_1[t] += s_1[t + s]; s_2[t] += s_2[t + s]; }
        __syncthreads();
    }
    if (t == 0) { partials[2ll * blockIdx.x] = s_1[0]; partials[2ll * blockIdx.x + 1] = s_2[0]; }
}
"""

# Every element written and finite, for outputs checked against a sampled reference: counts of
# the poison pattern and of other NaN/inf, over the whole output.
_WRITTEN_SRC = r"""
extern "C" __global__ void jf_written_NAME(const BITS* __restrict__ out, long long n, unsigned long long* partials) {
    __shared__ unsigned long long s_p[256], s_n[256];
    unsigned long long np_ = 0, nn = 0;
    const long long step = (long long)gridDim.x * (long long)blockDim.x;
    for (long long i = (long long)blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += step) {
        const BITS b = out[i];
        const bool poison = (b == (BITS)POISON);
        const double v = DECODE;
        np_ += poison ? 1ull : 0ull;
        nn += (!poison && !isfinite(v)) ? 1ull : 0ull;
    }
    const unsigned int t = threadIdx.x;
    s_p[t] = np_; s_n[t] = nn;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) { s_p[t] += s_p[t + s]; s_n[t] += s_n[t + s]; }
        __syncthreads();
    }
    if (t == 0) { partials[2ll * blockIdx.x] = s_p[0]; partials[2ll * blockIdx.x + 1] = s_n[0]; }
}
"""


def kernel_sources() -> dict[str, str]:
    """Every raw kernel of this module: name -> full CUDA source (what cupy.RawKernel compiles)."""
    out = {}
    for dt, (bits, poison, decode) in _DECODE.items():
        body = _STATS_SRC.replace("NAME", dt).replace("BITS", bits).replace("POISON", poison).replace("DECODE", decode)
        out[f"jf_stats_{dt}"] = CUDA_COMMON + body
        written = _WRITTEN_SRC.replace("NAME", dt).replace("BITS", bits).replace("POISON", poison).replace("DECODE", decode)
        out[f"jf_written_{dt}"] = CUDA_COMMON + written
    for size, word in _WORDS.items():
        out[f"jf_count_diff_u{8 * size}"] = _COUNT_DIFF_SRC.replace("NAME", f"u{8 * size}").replace("WORD", word)
        out[f"jf_fingerprint_u{8 * size}"] = CUDA_COMMON + _FINGERPRINT_SRC.replace("NAME", f"u{8 * size}").replace("WORD", word)
    return out


_SOURCES = kernel_sources()
_RAW: dict[str, Any] = {}


def _raw_kernel(name: str) -> Any:
    """cupy.RawKernel `name`, compiled once per process (cupy also caches the cubin on disk)."""
    k = _RAW.get(name)
    if k is None:
        import cupy  # noqa: PLC0415 - only reached with cupy arrays
        k = _RAW[name] = cupy.RawKernel(_SOURCES[name], name)
    return k


def _grid(n: int) -> int:
    return max(1, min(MAX_BLOCKS, -(-int(n) // THREADS)))


def _met(xp: Any, vals: Any, ref: Any, poison: Any, tol: Tolerance) -> Any:
    """Where a non-finite reference is met (tol.match_nonfinite: NaN by a NaN that is not the
    poison, an infinity by the same infinity); all False otherwise."""
    if not getattr(tol, "match_nonfinite", False):
        return xp.zeros(vals.shape, dtype=bool)
    with np.errstate(invalid="ignore"):
        return ~poison & ((xp.isnan(ref) & xp.isnan(vals)) | (xp.isinf(ref) & (vals == ref)))


def _chunk_stats(out: Any, ref: Any, tol: Tolerance, dtype: str) -> np.ndarray:
    """The 7 statistics of one flat chunk with array code: the specification of jf_stats_*.

    poison = still the poison pattern; nonfinite = NaN/inf that is not poison where the reference
    is finite; ref_nonfinite = a non-finite reference not met (see `_met`); err = |out - ref|
    where both are finite (else 0); bad = err > atol + rtol*|ref| (|ref| taken as 0 where the
    reference is not finite)."""
    xp = array_module(out)
    poison = dtypes.is_poison(out, dtype)
    vals = dtypes.to_float64(out, dtype)
    ref = ref.astype(xp.float64, copy=False)
    fin_out = xp.isfinite(vals)
    fin_ref = xp.isfinite(ref)
    met = _met(xp, vals, ref, poison, tol)
    with np.errstate(invalid="ignore", over="ignore"):
        err = xp.where(fin_out & fin_ref, xp.abs(vals - ref), 0.0)
        aref = xp.where(fin_ref, xp.abs(ref), 0.0)
    bad = err > tol.atol + tol.rtol * aref
    return np.array([int(poison.sum()), int((~fin_out & ~poison & fin_ref).sum()), int((~fin_ref & ~met).sum()),
                     int(bad.sum()),
                     float(err.max()) if err.size else 0.0, float((err * err).sum()), float((aref * aref).sum())],
                    dtype=np.float64)


def _stats(out: Any, ref: Any, tol: Tolerance, dtype: str, chunk: int) -> np.ndarray:
    """The 7 statistics over a whole flat output: one fused kernel and one sync on cupy, chunked
    array code on numpy."""
    xp = array_module(out)
    n = int(out.size)
    total = np.zeros(N_STATS, dtype=np.float64)
    if n == 0:
        return total
    if xp is not np:
        grid = _grid(n)
        partials = xp.empty((grid, N_STATS), dtype=xp.float64)
        bits = xp.ascontiguousarray(out).view(dtypes.bits_dtype(dtype))
        ref = xp.ascontiguousarray(ref, dtype=xp.float64)
        _raw_kernel(f"jf_stats_{dtype}")((grid,), (THREADS,), (bits, ref, np.int64(n), np.float64(tol.atol),
                                                                 np.float64(tol.rtol),
                                                                 np.int32(bool(getattr(tol, "match_nonfinite", False))),
                                                                 partials))
        parts = partials.get()                           # the one host sync
        total[:4] = parts[:, :4].sum(axis=0)
        total[4] = parts[:, 4].max()
        total[5:] = parts[:, 5:].sum(axis=0)
        return total
    for start in range(0, n, max(1, int(chunk))):
        stop = min(n, start + int(chunk))
        part = _chunk_stats(out[start:stop], ref[start:stop], tol, dtype)
        total[:4] += part[:4]
        total[4] = max(total[4], part[4])
        total[5:] += part[5:]
    return total


def _first_of(kind: str, out: Any, ref: Any, tol: Tolerance, dtype: str, chunk: int) -> int:
    """Flat index of the first element of `kind` (poison | nonfinite | ref_nonfinite | bad), with the
    definitions of `_chunk_stats`; only called when that kind was counted."""
    xp = array_module(out)
    n = int(out.size)
    for start in range(0, n, max(1, int(chunk))):
        stop = min(n, start + int(chunk))
        o, r = out[start:stop], ref[start:stop].astype(xp.float64, copy=False)
        poison = dtypes.is_poison(o, dtype)
        if kind == "poison":
            mask = poison
        else:
            vals = dtypes.to_float64(o, dtype)
            fin_out = xp.isfinite(vals)
            if kind == "ref_nonfinite":
                mask = ~xp.isfinite(r) & ~_met(xp, vals, r, poison, tol)
            else:
                if kind == "nonfinite":
                    mask = ~fin_out & ~poison & xp.isfinite(r)
                else:
                    fin_ref = xp.isfinite(r)
                    with np.errstate(invalid="ignore", over="ignore"):
                        err = xp.where(fin_out & fin_ref, xp.abs(vals - r), 0.0)
                        aref = xp.where(fin_ref, xp.abs(r), 0.0)
                    mask = err > tol.atol + tol.rtol * aref
        if bool(mask.any()):
            return start + _first(xp, mask)
    raise AssertionError(f"no element of kind {kind!r} found although the fused pass counted one")


def _element(out: Any, ref: Any, i: int, dtype: str) -> tuple[float, float]:
    """(value, reference) of flat element i as Python floats."""
    xp = array_module(out)
    v = dtypes.to_float64(xp.ascontiguousarray(out[i:i + 1]), dtype).reshape(1)
    r = ref[i:i + 1].astype(xp.float64).reshape(1)
    both = xp.concatenate([v, r])
    host = both.get() if xp is not np else both
    return float(host[0]), float(host[1])


def group_rel_l2(out: Any, ref_f64: Any, tol: Tolerance, dtype: str, *, chunk: int = DEFAULT_CHUNK) -> Any:
    """The error of every group of `tol` (Tolerance.group_rows / group_axes) against its own
    reference's norm or the whole reference's RMS (Tolerance.group_scale), as a [groups, width]
    float64 array on the output's device: row g is the g-th range of rows of
    axis 0, column j the j-th index of axes 1 .. group_axes - 1 (flattened). Over the elements
    where output and reference are finite (check_output has rejected the rest before). Temporaries
    are bounded by `chunk` elements; one small reduction per range of rows. ValueError when the
    groups do not fit the output (the family's tolerance is wrong, not the candidate)."""
    xp = array_module(out)
    shape = tuple(int(s) for s in out.shape)
    k = int(tol.group_axes)
    if len(shape) < k:
        raise ValueError(f"Tolerance.group_axes = {k} but the output has {len(shape)} axes {shape}")
    rows = shape[0]
    width = int(np.prod(shape[1:k])) if k > 1 else 1
    inner = int(np.prod(shape[k:])) if len(shape) > k else 1
    bounds = tuple(tol.group_rows)
    if bounds and bounds[-1] != rows:
        raise ValueError(f"Tolerance.group_rows end at {bounds[-1]} but the output has {rows} rows")
    o3 = xp.ascontiguousarray(out).reshape(rows, width, inner)
    r3 = xp.asarray(ref_f64).reshape(rows, width, inner)
    e2 = xp.zeros((rows, width), dtype=xp.float64)
    r2 = xp.zeros((rows, width), dtype=xp.float64)
    step = max(1, int(chunk) // max(1, width * inner))
    for a in range(0, rows, step):
        b = min(rows, a + step)
        with np.errstate(invalid="ignore", over="ignore"):
            v = dtypes.to_float64(o3[a:b], dtype)
            r = r3[a:b].astype(xp.float64, copy=False)
            fin_ref = xp.isfinite(r)
            d = xp.where(xp.isfinite(v) & fin_ref, v - r, 0.0)
            rr = xp.where(fin_ref, r, 0.0)
        e2[a:b] = (d * d).sum(axis=-1)
        r2[a:b] = (rr * rr).sum(axis=-1)
    counts = np.full(rows, inner, dtype=np.float64)
    if bounds:
        pairs = list(zip(bounds, bounds[1:]))
        e2 = xp.stack([e2[a:b].sum(axis=0) for a, b in pairs]) if pairs else xp.zeros((0, width))
        r2 = xp.stack([r2[a:b].sum(axis=0) for a, b in pairs]) if pairs else xp.zeros((0, width))
        counts = np.array([(b - a) * inner for a, b in pairs], dtype=np.float64)
    if getattr(tol, "group_scale", "own") == "whole":
        n = xp.asarray(np.maximum(counts, 1.0))[:, None]
        mean_sq = float(r2.sum()) / max(1, rows * width * inner)
        return xp.sqrt(e2 / n / (mean_sq if mean_sq > 0 else 1.0))
    return xp.where(r2 > 0, xp.sqrt(e2 / xp.where(r2 > 0, r2, 1.0)), xp.sqrt(e2))


def _group_problem(out: Any, ref_f64: Any, tol: Tolerance, dtype: str, name: str, chunk: int,
                   whole: float) -> tuple[float, str]:
    """(the worst group's relative L2 error, '' or why it is over tol.group_rel_l2)."""
    xp = array_module(out)
    rel = group_rel_l2(out, ref_f64, tol, dtype, chunk=chunk)
    if rel.size == 0:
        return 0.0, ""
    flat = rel.reshape(-1)
    i = int(xp.argmax(flat))
    worst = float(flat[i])
    if worst <= float(tol.group_rel_l2):
        return worst, ""
    n_over = int((flat > float(tol.group_rel_l2)).sum())
    g, j = divmod(i, int(rel.shape[1]))
    bounds = tuple(tol.group_rows)
    a, b = (bounds[g], bounds[g + 1]) if bounds else (g, g + 1)
    cols = [int(c) for c in np.unravel_index(j, tuple(int(s) for s in out.shape[1:tol.group_axes]))] \
        if tol.group_axes > 1 else []
    where = ", ".join([f"{a}:{b}", *(str(c) for c in cols)])
    what = ("RMS error {} of the whole reference's RMS" if getattr(tol, "group_scale", "own") == "whole"
            else "relative L2 error {} within the group").format(_num(worst))
    return worst, (f"{name}[{where}]: {what} > {tol.group_rel_l2:g} "
                   f"({n_over} of {int(flat.size)} groups over; the whole output's relative L2 error is {_num(whole)})")


_KINDS = ("poison", "nonfinite", "ref_nonfinite", "bad")   # the first four statistics, in order


class OutputCheck:
    """`check_output` with the reference in pieces: `add(start, ref)` judges the flat elements
    [start, start + len(ref)) of the output against their float64 reference, in ascending order
    and without gaps; `result()` gives the verdict `check_output` would give (same counts, same
    first offending element, same messages), except groups (Tolerance.group_rel_l2 needs the
    whole reference at once: ValueError).

    Why: at the benchmark's 2**31-element cases a float64 reference of one output is 16 GiB.
    Held whole beside the timing sets and five baselines it did not fit an 80 GB H100 (session
    28), so families that can make it in blocks (`KernelFamily.reference_blocks`) are judged
    block by block and the judge never holds more than one block."""

    def __init__(self, out: Any, tol: Tolerance, dtype: str, *, name: str = "out", chunk: int = DEFAULT_CHUNK,
                 groups: bool = False):
        if getattr(tol, "group_rel_l2", None) is not None and not groups:
            raise ValueError(f"{name}: a tolerance with groups (group_rel_l2) needs the whole reference, "
                             f"not blocks of it")
        self.xp = array_module(out)
        self.tol, self.name, self.chunk = tol, name, chunk
        self.dtype = dtypes.canonical(dtype)
        self.shape = tuple(out.shape)
        self.flat = self.xp.ascontiguousarray(out).reshape(-1)
        self.total = int(self.flat.size)
        self.stats = np.zeros(N_STATS, dtype=np.float64)
        self.firsts: dict[str, tuple[int, float, float]] = {}    # kind -> (flat index, value, reference)
        self.covered = 0

    def add(self, start: int, ref_f64: Any) -> None:
        ref = self.xp.asarray(ref_f64).reshape(-1)
        stop = int(start) + int(ref.size)
        if int(start) != self.covered or stop > self.total:
            raise ValueError(f"{self.name}: a reference block for elements {start}:{stop} does not follow "
                             f"{self.covered} (the output has {self.total}): the family's reference is wrong")
        out = self.flat[start:stop]
        part = _stats(out, ref, self.tol, self.dtype, self.chunk)
        self.stats[:4] += part[:4]
        self.stats[4] = max(self.stats[4], part[4])
        self.stats[5:] += part[5:]
        for j, kind in enumerate(_KINDS):
            if part[j] and kind not in self.firsts:
                i = _first_of(kind, out, ref, self.tol, self.dtype, self.chunk)
                self.firsts[kind] = (int(start) + i, *_element(out, ref, i, self.dtype))
        self.covered = stop

    def result(self) -> CheckResult:
        if self.covered != self.total:
            raise ValueError(f"{self.name}: the reference covers {self.covered} of {self.total} elements: "
                             f"the family's reference is wrong")
        name, shape, total, tol = self.name, self.shape, self.total, self.tol
        n_poison, n_nonfinite, n_ref_nonfinite, n_bad = (int(v) for v in self.stats[:4])
        max_err, sum_sq_err, sum_sq_ref = (float(v) for v in self.stats[4:7])
        if n_poison:
            i = self.firsts["poison"][0]
            return CheckResult(False, None, None,
                               f"element {name}{format_index(i, shape)} not written "
                               f"(poison NaN remains); {n_poison} of {total} elements not written")
        if n_nonfinite:
            i, v, r = self.firsts["nonfinite"]
            what = "NaN" if math.isnan(v) else "inf"
            return CheckResult(False, None, None,
                               f"{name}{format_index(i, shape)} is {what} (reference {_num(r)}); "
                               f"{n_nonfinite} of {total} elements are NaN/inf")
        if n_ref_nonfinite:
            i, v, r = self.firsts["ref_nonfinite"]
            if getattr(tol, "match_nonfinite", False):
                return CheckResult(False, None, None,
                                   f"{name}{format_index(i, shape)} = {_num(v)} but the family's rule for non-finite "
                                   f"inputs gives {_num(r)}; {n_ref_nonfinite} of {total} such elements differ")
            return CheckResult(False, None, None,
                               f"the reference for {name}{format_index(i, shape)} is not "
                               f"finite ({n_ref_nonfinite} elements): the inputs or the reference are broken")
        rel = math.sqrt(sum_sq_err) / math.sqrt(sum_sq_ref) if sum_sq_ref > 0 else math.sqrt(sum_sq_err)
        if n_bad:
            i, v, r = self.firsts["bad"]
            e, b = abs(v - r), tol.atol + tol.rtol * abs(r)
            return CheckResult(False, max_err, rel,
                               f"{name}{format_index(i, shape)} = {_num(v)} but the reference is {_num(r)} "
                               f"(|err| {_num(e)} > atol + rtol*|ref| = {_num(b)}); {n_bad} of {total} "
                               f"elements out of tolerance (atol {tol.atol:g}, rtol {tol.rtol:g}), "
                               f"max |err| {_num(max_err)}")
        if tol.rel_l2 is not None and rel > tol.rel_l2:
            return CheckResult(False, max_err, rel,
                               f"{name}: relative L2 error {_num(rel)} > {tol.rel_l2:g} "
                               f"(every element within atol/rtol, max |err| {_num(max_err)})")
        return CheckResult(True, max_err, rel, "")


def check_output(out: Any, ref_f64: Any, tol: Tolerance, dtype: str, *, name: str = "out",
                 chunk: int = DEFAULT_CHUNK) -> CheckResult:
    """Judge one output (storage array: bf16 as uint16 bits) against its float64 reference.

    One fused pass (one host sync on cupy) computes every count and sum; the first offending
    element is looked up only when something failed. `chunk` bounds the temporaries of the array
    code (numpy, and the failure path); the cupy statistics need none."""
    xp = array_module(out)
    ref_f64 = xp.asarray(ref_f64)
    if tuple(out.shape) != tuple(ref_f64.shape):
        return CheckResult(False, None, None,
                           f"{name}: shape {tuple(out.shape)} differs from the reference's {tuple(ref_f64.shape)}")
    check = OutputCheck(out, tol, dtype, name=name, chunk=chunk, groups=True)
    check.add(0, ref_f64)
    res = check.result()
    if res.ok and getattr(tol, "group_rel_l2", None) is not None:
        worst, problem = _group_problem(out, ref_f64, tol, check.dtype, name, chunk, res.rel_l2)
        return CheckResult(not problem, res.max_abs_err, res.rel_l2, problem, group_rel_l2=worst)
    return res


def written_counts(out: Any, dtype: str) -> Any:
    """(elements still holding the poison pattern, other NaN/inf elements) over a whole output:
    on cupy a (2,) device array (no sync), on numpy a tuple of ints."""
    xp = array_module(out)
    dtype = dtypes.canonical(dtype)
    flat = xp.ascontiguousarray(out).reshape(-1)
    n = int(flat.size)
    if xp is np:
        poison = dtypes.is_poison(flat, dtype)
        with np.errstate(invalid="ignore"):
            nonfinite = ~np.isfinite(dtypes.to_float64(flat, dtype)) & ~poison
        return int(poison.sum()), int(nonfinite.sum())
    partials = xp.zeros((_grid(n), 2), dtype=xp.uint64)
    if n:
        bits = flat.view(dtypes.bits_dtype(dtype))
        _raw_kernel(f"jf_written_{dtype}")((int(partials.shape[0]),), (THREADS,), (bits, np.int64(n), partials))
    return partials.sum(axis=0)


def check_sampled_output(out: Any, index: Any, ref_f64: Any, tol: Tolerance, dtype: str, *, name: str = "out",
                         chunk: int = DEFAULT_CHUNK) -> CheckResult:
    """Judge an output too large for a full float64 reference: every element written and finite
    (one fused pass over the whole output), and the elements at flat `index` within tolerance of
    `ref_f64` (their float64 reference, same length). The relative L2 error is the sample's."""
    xp = array_module(out)
    dtype = dtypes.canonical(dtype)
    shape = tuple(out.shape)
    counts = written_counts(out, dtype)
    n_poison, n_nonfinite = (int(v) for v in (counts.get() if xp is not np else counts))
    flat = xp.ascontiguousarray(out).reshape(-1)
    total = int(flat.size)
    if n_poison:
        i = _first(xp, dtypes.is_poison(flat, dtype))
        return CheckResult(False, None, None, f"element {name}{format_index(i, shape)} not written (poison NaN "
                                              f"remains); {n_poison} of {total} elements not written")
    if n_nonfinite:
        with np.errstate(invalid="ignore"):
            i = _first(xp, ~xp.isfinite(dtypes.to_float64(flat, dtype)))
        return CheckResult(False, None, None, f"{name}{format_index(i, shape)} is NaN/inf; {n_nonfinite} of "
                                              f"{total} elements are NaN/inf")
    idx = xp.asarray(index).reshape(-1)
    if getattr(tol, "group_rel_l2", None) is not None:      # groups need the whole output
        tol = dataclasses.replace(tol, group_rel_l2=None)
    res = check_output(flat[idx], xp.asarray(ref_f64).reshape(-1), tol, dtype, name=name, chunk=chunk)
    if res.ok:
        return res
    m = re.search(r"\[(\d+)\]", res.message)
    msg = res.message
    if m:
        k = int(m.group(1))
        host_idx = idx.get() if xp is not np else idx
        msg = msg.replace(f"[{k}]", format_index(int(host_idx[k]), shape), 1)
    return CheckResult(False, res.max_abs_err, res.rel_l2, f"{msg} (sampled: {int(idx.size)} of {total} elements "
                                                          f"checked against float64)")


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


def _words(a: Any) -> Any:
    """The array's bytes as the widest unsigned words that tile it (for a fast equality count)."""
    xp = array_module(a)
    a = xp.ascontiguousarray(a).reshape(-1)
    nbytes = int(a.nbytes)
    for size in (8, 4, 2, 1):
        if nbytes % size == 0 and a.dtype.itemsize <= size:
            return a.view({1: xp.uint8, 2: xp.uint16, 4: xp.uint32, 8: xp.uint64}[size])
    return _unsigned(a)


def _launch_count_diff(b: Any, a: Any) -> Any:
    """How many words differ: an int (numpy), or per-block partial counts on the device (cupy,
    no sync)."""
    xp = array_module(a)
    wa, wb = _words(a), _words(xp.asarray(b))
    n = int(wa.size)
    if xp is np:
        return int(np.count_nonzero(wa != wb))
    partials = xp.zeros(_grid(n), dtype=xp.uint64)
    if n:
        _raw_kernel(f"jf_count_diff_u{8 * wa.dtype.itemsize}")((int(partials.size),), (THREADS,),
                                                               (wa, wb, np.int64(n), partials))
    return partials


def _host_sums(xp: Any, parts: list[Any]) -> list[int]:
    """Sum every entry of `parts` (ints, or device partial arrays fetched in ONE transfer)."""
    if xp is np:
        return [int(p) for p in parts]
    sizes = [int(p.size) for p in parts]
    flat = xp.concatenate([p.reshape(-1) for p in parts]).get() if parts else np.zeros(0, np.uint64)
    out, pos = [], 0
    for k in sizes:
        out.append(int(sum(int(v) for v in flat[pos:pos + k])))
        pos += k
    return out


def inputs_unchanged(before: Any, after: Any, *, name: str = "input", chunk: int = DEFAULT_CHUNK) -> Verdict:
    """Bitwise equality of inputs before and after a launch: arrays, or mappings name -> array.

    One fused comparison per array (as the widest words that tile it) and one host sync for all;
    the first changed element is located only when something changed."""
    if isinstance(before, Mapping):
        if set(before) != set(after):
            return Verdict(False, f"input buffers differ: {sorted(before)} vs {sorted(after)}")
        pairs = [(str(k), before[k], after[k]) for k in before]
    else:
        pairs = [(name, before, after)]
    for key, b, a in pairs:
        if tuple(b.shape) != tuple(a.shape) or b.dtype != a.dtype:
            return _first_difference(b, a, key, chunk)
    if not pairs:
        return Verdict(True)
    xp = array_module(pairs[0][2])
    counts = _host_sums(xp, [_launch_count_diff(b, a) for _, b, a in pairs])
    for (key, b, a), n in zip(pairs, counts):
        if n:
            return _first_difference(b, a, key, chunk)
    return Verdict(True)


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


def _mix64(z: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser on uint64 arrays (wrap-around), as jf_fp_mix."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def fingerprint(a: Any, chunk: int = 1 << 24) -> tuple[int, int]:
    """(sum of words, sum of mix64(word + (i + 1) * golden)) mod 2**64 over the array's bits.

    Position-sensitive with no period (moving or swapping words changes it wherever they are)
    and order-independent in its arithmetic, so numpy and cupy give the same value for the same
    bits. The words are the array's elements as unsigned integers."""
    return fingerprints({"a": a}, chunk=chunk)["a"]


def fingerprint_partials(a: Any) -> Any:
    """The fingerprint of one array, not yet summed: a (blocks, 2) uint64 device array (queued,
    no sync) on cupy, the (s1, s2) tuple on numpy. `fold` turns either into the tuple."""
    xp = array_module(a)
    if xp is np:
        return fingerprint(a)
    u = _unsigned(a)
    total = int(u.size)
    partials = xp.zeros((_grid(total), 2), dtype=xp.uint64)
    if total:
        _raw_kernel(f"jf_fingerprint_u{8 * u.dtype.itemsize}")((int(partials.shape[0]),), (THREADS,),
                                                               (u, np.int64(total), partials))
    return partials


def fold(partials_host: Any) -> tuple[int, int]:
    """(s1, s2) from fingerprint partials already on the host (or a tuple, returned as is)."""
    if isinstance(partials_host, tuple):
        return partials_host
    mask = (1 << 64) - 1
    p = np.asarray(partials_host).reshape(-1, 2)
    return sum(int(v) for v in p[:, 0]) & mask, sum(int(v) for v in p[:, 1]) & mask


def fingerprints(arrays: Mapping[str, Any], chunk: int = 1 << 24) -> dict[str, tuple[int, int]]:
    """`fingerprint` of every array of a mapping; on cupy one fused kernel each and ONE sync."""
    mask = (1 << 64) - 1
    out: dict[str, tuple[int, int]] = {}
    device: list[tuple[str, Any]] = []
    for key, a in arrays.items():
        xp = array_module(a)
        u = _unsigned(a)
        total = int(u.size)
        if xp is not np:
            partials = xp.zeros((_grid(total), 2), dtype=xp.uint64)
            if total:
                _raw_kernel(f"jf_fingerprint_u{8 * u.dtype.itemsize}")((int(partials.shape[0]),), (THREADS,),
                                                                       (u, np.int64(total), partials))
            device.append((key, partials))
            continue
        s1 = s2 = 0
        for start in range(0, total, max(1, int(chunk))):
            stop = min(total, start + int(chunk))
            v = u[start:stop].astype(np.uint64)
            with np.errstate(over="ignore"):
                z = v + (np.arange(start, stop, dtype=np.uint64) + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
            s1 = (s1 + int(v.sum(dtype=np.uint64))) & mask
            s2 = (s2 + int(_mix64(z).sum(dtype=np.uint64))) & mask
        out[key] = (s1, s2)
    if device:
        xp = array_module(device[0][1])
        host = xp.concatenate([p.reshape(-1) for _, p in device]).get()     # the one sync
        pos = 0
        for key, p in device:
            k = int(p.size)
            part = host[pos:pos + k].reshape(-1, 2)
            pos += k
            out[key] = (sum(int(v) for v in part[:, 0]) & mask, sum(int(v) for v in part[:, 1]) & mask)
    return {key: out[key] for key in arrays}
