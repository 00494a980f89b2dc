"""RMSNorm forward: the operation half of the kernel-family contract.

    y[i, :] = x[i, :] * rstd[i] * w,   rstd[i] = 1 / sqrt(mean_j x[i, j]^2 + eps)

x is [M, N] in bf16, fp16 or fp32 (bf16 carried as uint16 bits), w is [N] in fp32 (or in x's
dtype with weight_dtype="same"), y is [M, N] in x's dtype, rstd (optional) is [M] fp32.

This module defines everything about the *operation* (cases, inputs, float64 reference,
tolerances, bytes moved, baselines); `kernels/rmsnorm/family.py` subclasses it and adds the
templates (render/launch). Import it from a family file with
`import_sibling(__file__, "operation")`.

Kernel convention (every RMSNorm forward template follows it, see `kernel_args`):

    extern "C" __global__ void <name>(const T* x, const W* w, T* y, float* rstd,
                                      int M, int N, float eps)

T = __nv_bfloat16 | __half | float (x's dtype), W = float (or T with weight_dtype="same"),
rows contiguous (row stride N), rstd may be NULL (with_rstd=False). M*N can reach 2**31, so
element offsets must be computed in 64 bits: (size_t)row * N + col.

`make_inputs` and `reference` also accept device (cupy) arrays (`supports_device_arrays`), so the
judge can make and check the largest cases on the device.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from typing import Any, Callable, Mapping

import numpy as np

from fitness import dtypes
from fitness.dtypes import array_module
from fitness.family import Baseline, BaselineRun, BufferSpec, Case, KernelFamily, Tolerance, import_sibling
from fitness.family import importable as _has

_PEERS = import_sibling(__file__, "peers")

DTYPES = ("bf16", "fp16", "fp32")
K = 1024
QUACK_SHAPES: tuple[tuple[int, int], ...] = tuple((32768, n) for n in (256, 512, K, 2 * K, 4 * K, 8 * K, 16 * K, 32 * K, 64 * K)) \
    + ((16384, 128 * K), (8192, 256 * K))
MODEL_WIDTHS = (4096, 5120, 7168, 8192, 14336)
MODEL_ROWS = (1, 128, 4096)
MODEL_SHAPES: tuple[tuple[int, int], ...] = tuple((m, n) for n in MODEL_WIDTHS for m in MODEL_ROWS)
SMOKE_SHAPES: tuple[tuple[int, int], ...] = ((1, 4096), (128, 5120), (199, 1000), (1024, 8192))
#: one case per shape class (short, mid, long rows): the densely recorded slice (experiments/rmsnorm_fwd_slice_h200.toml)
SLICE_SHAPES: tuple[tuple[int, int], ...] = ((32768, K), (32768, 16 * K), (8192, 256 * K))
CHECK_ROWS = (1, 7, 199)
CHECK_WIDTHS = (256, 520, 1000, 4104, 8200)          # multiples of 8, none a power of two but 256
CHECK_RANGE_ROWS = 7
MANY_ROWS = (65543, 264)          # more rows than any benchmark (row indices past 16 bits)
HUGE_WIDTHS = (4104, 262152)      # > 2**31 elements at a short and a long width (sampled rows)
HUGE_OVERSHOOT = 1.05             # how far past 2**31 elements the huge cases go
SAMPLE_ROWS = 48                  # random rows (besides the first and the last) a huge case checks
EPS_CASE = (199, 1000)            # rows whose mean square is eps (x_scale) and a large eps
SMALL_X_SCALE = 1e-3              # x ~ 1e-3: mean square 1e-6, as eps
LARGE_EPS = 0.5
NONFINITE_SHAPES = ((64, 4104), (7, 65544))
BEYOND_WIDTHS = (262152, 393224)  # the last dispatch range is open-ended
MATRICES: dict[str, tuple[tuple[int, int], ...]] = {
    "quack": QUACK_SHAPES,
    "models": MODEL_SHAPES,
    "smoke": SMOKE_SHAPES,
    "slice": SLICE_SHAPES,
}
MATRIX_ALIASES = {"default": ("quack",), "all": ("quack", "models")}

TOLERANCES: dict[str, Tolerance] = {
    "bf16": Tolerance(atol=1e-2, rtol=1.6e-2, rel_l2=1e-2),
    "fp16": Tolerance(atol=2e-3, rtol=2e-3, rel_l2=2e-3),
    "fp32": Tolerance(atol=1e-5, rtol=1e-4, rel_l2=1e-5),
}
RSTD_TOLERANCE = Tolerance(atol=1e-5, rtol=1e-5, rel_l2=1e-5)

WIDE_LOG10 = (-3.0, 3.0)      # element magnitudes of the "wide" distribution: 1e-3 .. 1e3
_CHUNK_ELEMS = 1 << 26        # rows are generated/referenced in blocks of about this many elements


def _explicit_shape(name: str) -> tuple[int, int] | None:
    """"MxN" (positive integers) as a shape, None for anything else (a matrix name)."""
    m, sep, n = name.partition("x")
    if not (sep and m.isdigit() and n.isdigit() and int(m) > 0 and int(n) > 0):
        return None
    return int(m), int(n)


def _rows_per_chunk(n: int) -> int:
    return max(1, _CHUNK_ELEMS // max(1, n))


class RMSNormOperation(KernelFamily):
    """RMSNorm forward; options fix the weight dtype, eps, the rstd output and the dtypes."""

    name = "rmsnorm"
    space_name = "rmsnorm"
    supports_device_arrays = True     # make_inputs(xp=cupy) and reference(cupy arrays) work

    def __init__(self, *, eps: float = 1e-6, weight_dtype: str = "fp32", with_rstd: bool = False,
                 dtypes: tuple[str, ...] = DTYPES):
        if weight_dtype != "same":
            weight_dtype = _canonical_float(weight_dtype)
        self.eps = float(eps)
        self.weight_dtype = weight_dtype
        self.with_rstd = bool(with_rstd)
        self.dtypes = tuple(_canonical_float(d) for d in dtypes)
        if not self.dtypes:
            raise ValueError("RMSNormOperation needs at least one dtype")

    # -- cases ----------------------------------------------------------------------------
    def make_case(self, M: int, N: int, dtype: str, *, eps: float | None = None, x_scale: float = 1.0,
                  nonfinite: bool = False, sample_rows: int = 0) -> Case:
        """A case; the keywords make CHECK cases: another eps, x scaled (mean square ~ eps),
        rows holding +-inf/NaN (judged by torch's rule, see `tolerances`), or a case judged on
        `sample_rows` random rows plus the first and last (too large for a full reference)."""
        dtype = _canonical_float(dtype)
        wdt = dtype if self.weight_dtype == "same" else self.weight_dtype
        eps = self.eps if eps is None else float(eps)
        cid = f"{dtype}/{M}x{N}"
        if wdt != "fp32":
            cid += f"/w{wdt}"
        if self.with_rstd:
            cid += "/rstd"
        if eps != self.eps:
            cid += f"/eps{eps:g}"
        if x_scale != 1.0:
            cid += f"/xs{x_scale:g}"
        if nonfinite:
            cid += "/nonfinite"
        if sample_rows:
            cid += f"/sampled{int(sample_rows)}"
        params = {"M": int(M), "N": int(N), "dtype": dtype, "weight_dtype": wdt, "eps": eps,
                  "with_rstd": self.with_rstd}
        if x_scale != 1.0:
            params["x_scale"] = float(x_scale)
        if nonfinite:
            params["nonfinite"] = True
        if sample_rows:
            params["sample_rows"] = int(sample_rows)
        return Case(id=cid, params=params)

    def benchmark_cases(self, matrix: str = "default") -> list[Case]:
        """Named matrices: quack (default), models, smoke, all; one shape as "MxN"; "+" joins them
        and ":bf16,fp16" picks dtypes, e.g. "quack:bf16", "quack+models:bf16,fp32" or
        "8192x262144:fp32" (a probe of the one case no peer runs, without the other ten)."""
        names, _, dts = str(matrix).partition(":")
        dtype_list = tuple(_canonical_float(d) for d in dts.split(",") if d.strip()) if dts else self.dtypes
        shapes: list[tuple[int, int]] = []
        for part in names.split("+"):
            part = part.strip().lower()
            for sub in MATRIX_ALIASES.get(part, (part,)):
                shape = _explicit_shape(sub)
                if shape is None and sub not in MATRICES:
                    raise ValueError(f"unknown RMSNorm benchmark matrix {part!r}; known: "
                                     f"{sorted(MATRICES) + sorted(MATRIX_ALIASES)} or a shape like 8192x262144 "
                                     f"(optionally ':bf16,fp16')")
                shapes.extend(s for s in ((shape,) if shape else MATRICES[sub]) if s not in shapes)
        return [self.make_case(m, n, d) for d in dtype_list for (m, n) in shapes]

    def check_cases(self) -> list[Case]:
        """What the benchmark matrices do not cover, for every dtype (a genome is checked on every
        case its launch() accepts; the dispatch serves a width range only with genomes checked
        inside it):

        - small awkward shapes: CHECK_ROWS x CHECK_WIDTHS;
        - every width range the dispatch can serve (between consecutive benchmark widths of any
          matrix, and past the largest: the last range is open-ended): its first width (the
          boundary) and one inside it, none a power of two, at CHECK_RANGE_ROWS rows;
        - more rows than any benchmark (MANY_ROWS: row indices beyond 16 bits);
        - more than 2**31 elements (HUGE_WIDTHS, 5 % past it: 32-bit element offsets), judged on
          sampled rows;
        - rows whose mean square is eps (x ~ 1e-3) and a large eps (eps must be added, in float);
        - rows holding +-inf and NaN, judged by torch's rule (see `tolerances`)."""
        out: list[Case] = []
        for d in self.dtypes:
            out += [self.make_case(m, n, d) for m in CHECK_ROWS for n in CHECK_WIDTHS]
            out += [self.make_case(CHECK_RANGE_ROWS, n, d) for n in range_check_widths() if n not in CHECK_WIDTHS]
            out.append(self.make_case(*MANY_ROWS, d))
            for n in HUGE_WIDTHS:
                m = int(math.ceil(HUGE_OVERSHOOT * 2**31 / n))
                out.append(self.make_case(m, n, d, sample_rows=SAMPLE_ROWS))
            out.append(self.make_case(*EPS_CASE, d, x_scale=SMALL_X_SCALE))
            out.append(self.make_case(*EPS_CASE, d, eps=LARGE_EPS))
            out += [self.make_case(m, n, d, nonfinite=True) for m, n in NONFINITE_SHAPES]
        return out

    def io(self, case: Case) -> tuple[dict[str, BufferSpec], dict[str, BufferSpec]]:
        M, N, dt, wdt = _params(case)
        inputs = {"x": BufferSpec((M, N), dtypes.numpy_name(dt)), "w": BufferSpec((N,), dtypes.numpy_name(wdt))}
        outputs = {"y": BufferSpec((M, N), dtypes.numpy_name(dt))}
        if case.params.get("with_rstd"):
            outputs["rstd"] = BufferSpec((M,), "float32")
        return inputs, outputs

    def kernel_args(self, case: Case) -> tuple[Any, ...]:
        """Launch.args in the RMSNorm kernel convention (None is passed as a NULL pointer)."""
        M, N, _, _ = _params(case)
        return ("x", "w", "y", "rstd" if case.params.get("with_rstd") else None,
                np.int32(M), np.int32(N), np.float32(case.params.get("eps", self.eps)))

    # -- inputs and reference -------------------------------------------------------------
    def make_inputs(self, case: Case, rng: Any, distribution: str, xp: Any = None) -> dict[str, Any]:
        """x and w rounded to their dtypes (bf16 as uint16 bits), never zero; x scaled by the
        case's x_scale, and with +-inf/NaN planted in some rows for a `nonfinite` case.

        "normal": x ~ N(0, 1) with |x| >= 1e-3; "wide": |x| = 10**u, rows cycle through mixed
        (u in [-3, 3]), tiny (u in [-3, -1]) and huge (u in [1, 3]) kinds, random signs.
        w ~ 1 + 0.1 N(0, 1) in both. `rng` needs standard_normal(size, dtype) and
        uniform(low, high, size): a numpy Generator (x drawn in blocks of about _CHUNK_ELEMS
        elements), or a cupy RandomState with xp=cupy: then x comes from one counter-based kernel
        seeded by one draw of the RandomState (gen_x_spec is its numpy specification).
        """
        made = self._make_inputs(case, rng, distribution, xp)
        scale = float(case.params.get("x_scale", 1.0))
        if scale != 1.0:
            M, N, dt, _ = _params(case)
            x64 = dtypes.to_float64(made["x"], dt) * scale
            made["x"] = dtypes.quantize(x64, dt)
        if case.params.get("nonfinite"):
            made["x"] = _with_nonfinite(made["x"], case, rng)
        return made

    def _make_inputs(self, case: Case, rng: Any, distribution: str, xp: Any = None) -> dict[str, Any]:
        xp = np if xp is None else xp
        if distribution not in ("normal", "wide"):
            raise ValueError(f"unknown input distribution {distribution!r}; use 'normal' or 'wide'")
        M, N, dt, wdt = _params(case)
        x = xp.empty((M, N), dtype=dtypes.storage_dtype(dt))
        if xp is not np:
            # one counter-based kernel writes x in its dtype (see gen_x_spec): cuRAND's normal and
            # double-uniform draws cost 100+ ms per 2**31-element input, this is memory-bound
            hi, lo = (int(v) for v in xp.asarray(rng.randint(0, 2**31 - 1, size=2)).get())
            seed = (hi << 31) | lo
            _cupy_kernel(f"jf_rms_gen_{distribution}_{dt}")(np.uint64(seed), np.int64(N), x)
            w = 1.0 + 0.1 * xp.asarray(rng.standard_normal(N, dtype=np.float32)).astype(xp.float64)
            return {"x": x, "w": dtypes.quantize(_away_from_zero(xp, w), wdt)}
        step = _rows_per_chunk(N)
        for r0 in range(0, M, step):
            r1 = min(M, r0 + step)
            if distribution == "normal":
                vals = _away_from_zero(xp, xp.asarray(rng.standard_normal((r1 - r0, N), dtype=np.float32)))
            else:
                vals = _wide_rows(xp, rng, r0, r1, N)
            x[r0:r1] = dtypes.quantize(vals, dt)
        w = 1.0 + 0.1 * xp.asarray(rng.standard_normal(N, dtype=np.float32)).astype(xp.float64)
        w = dtypes.quantize(_away_from_zero(xp, w), wdt)
        return {"x": x, "w": w}

    def reference(self, case: Case, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """float64 y (and rstd) from the rounded inputs, on the inputs' device.

        On cupy: one reduction kernel (sum of squares per row, in float64) and one elementwise
        kernel writing y; numpy computes the same in blocks of rows (the specification)."""
        M, N, dt, wdt = _params(case)
        x, w = inputs["x"], inputs["w"]
        xp = array_module(x)
        eps = float(case.params.get("eps", self.eps))
        wf = dtypes.to_float64(w, wdt).reshape(1, N)
        if xp is not np:
            sumsq = _cupy_kernel(f"jf_rms_sumsq_{dt}")(x, axis=1)
            rstd = 1.0 / xp.sqrt(sumsq / N + eps)
            y = _cupy_kernel(f"jf_rms_y_{dt}")(x, rstd.reshape(M, 1), wf)
        else:
            y = xp.empty((M, N), dtype=xp.float64)
            rstd = xp.empty((M,), dtype=xp.float64)
            step = _rows_per_chunk(N)
            for r0 in range(0, M, step):
                r1 = min(M, r0 + step)
                xf = dtypes.to_float64(x[r0:r1], dt)
                with np.errstate(invalid="ignore", over="ignore"):     # non-finite rows: torch's rule
                    r = 1.0 / xp.sqrt((xf * xf).sum(axis=1) / N + eps)
                    rstd[r0:r1] = r
                    y[r0:r1] = xf * r[:, None] * wf
        out = {"y": y}
        if case.params.get("with_rstd"):
            out["rstd"] = rstd
        return out

    def tolerances(self, case: Case) -> dict[str, Tolerance]:
        """Per dtype (DESIGN.md). Non-finite inputs follow torch's rule, which is what the float64
        reference computes with IEEE semantics: a row holding a NaN is NaN throughout; a row
        holding +-inf (and no NaN) has rstd 0, so y is NaN at the infinities and 0 elsewhere."""
        tol = {"y": TOLERANCES[case.params["dtype"]]}
        if case.params.get("with_rstd"):
            tol["rstd"] = RSTD_TOLERANCE
        if case.params.get("nonfinite"):
            tol = {k: dataclasses.replace(v, match_nonfinite=True) for k, v in tol.items()}
        return tol

    def bytes_moved(self, case: Case) -> int:
        M, N, dt, wdt = _params(case)
        s = dtypes.itemsize(dt)
        total = M * N * s + N * dtypes.itemsize(wdt) + M * N * s
        if case.params.get("with_rstd"):
            total += 4 * M
        return total

    def flops(self, case: Case) -> int:
        M, N, _, _ = _params(case)
        return 4 * M * N          # square, add, scale by rstd, scale by w

    def reference_sample(self, case: Case, inputs: Mapping[str, Any], rng: Any) -> dict[str, tuple[Any, Any]] | None:
        """For cases with `sample_rows`: the first, the last and that many random rows, their
        float64 reference (rows are independent, so a row's reference is the whole answer)."""
        k = int(case.params.get("sample_rows", 0) or 0)
        if not k:
            return None
        M, N, dt, wdt = _params(case)
        x = inputs["x"]
        xp = array_module(x)
        rows = np.unique(np.concatenate([[0, M - 1], rng.integers(0, M, size=k)])).astype(np.int64)
        sub = Case(id=case.id + "/rows", params={**case.params, "M": int(rows.size), "sample_rows": 0})
        dev_rows = xp.asarray(rows)
        ref = self.reference(sub, {"x": xp.ascontiguousarray(x[dev_rows]), "w": inputs["w"]})
        cols = xp.arange(N, dtype=xp.int64)
        out = {"y": ((dev_rows[:, None] * N + cols[None, :]).reshape(-1), ref["y"].reshape(-1))}
        if case.params.get("with_rstd"):
            out["rstd"] = (dev_rows, ref["rstd"].reshape(-1))
        return out

    # -- baselines ------------------------------------------------------------------------
    def baselines(self) -> list[Baseline]:
        return [
            Baseline("torch", lambda: _has("torch"), _prepare_torch),
            Baseline("torch_compile", lambda: _has("torch") and _has("triton"), _prepare_torch_compile),
            Baseline("quack", lambda: _has("torch") and _has("quack"), _prepare_quack,
                     needs=_PEERS.QUACK_NEEDS),
            Baseline("quack_tuned", lambda: _has("torch") and _has("quack"), _prepare_quack_tuned,
                     needs=_PEERS.QUACK_NEEDS),
            Baseline("liger", lambda: _has("torch") and _has("liger_kernel"), _prepare_liger,
                     needs=_PEERS.LIGER_NEEDS),
            Baseline("int21", _PEERS.int21_available, _prepare_int21,
                     needs=_PEERS.INT21_NEEDS),
            Baseline("copy", lambda: _has("torch"), _prepare_copy, objective=False),
        ]


# -- helpers -------------------------------------------------------------------------------
def _canonical_float(name: str) -> str:
    c = dtypes.canonical(name)
    if c not in DTYPES:
        raise ValueError(f"RMSNorm supports {DTYPES}, not {name!r}")
    return c


def _params(case: Case) -> tuple[int, int, str, str]:
    p = case.params
    dt = _canonical_float(p["dtype"])
    wdt = p.get("weight_dtype", "fp32")
    wdt = dt if wdt == "same" else _canonical_float(wdt)
    return int(p["M"]), int(p["N"]), dt, wdt


def _away_from_zero(xp: Any, v: Any, floor: float = 1e-3) -> Any:
    """Magnitudes below `floor` pushed out to +-floor (inputs are never zero)."""
    if xp is not np and v.dtype == xp.float32 and floor == 1e-3:
        return _cupy_kernel("jf_rms_away32")(v)
    small = xp.abs(v) < floor
    return xp.where(small, xp.where(v < 0, -floor, floor), v).astype(v.dtype, copy=False)


def _with_nonfinite(x: Any, case: Case, rng: Any) -> Any:
    """x with non-finite values planted by row (row % 8): 1 one +inf; 3 a -inf and a +inf;
    5 a NaN; 6 a NaN and a +inf; other rows finite. Columns are drawn from `rng`."""
    xp = array_module(x)
    M, N, dt, _ = _params(case)
    inf, ninf, nan = (dtypes.quantize(np.array([v]), dt)[0] for v in (np.inf, -np.inf, np.nan))
    plan = {1: (inf,), 3: (ninf, inf), 5: (nan,), 6: (nan, inf)}
    rows, cols, vals = [], [], []
    for r in range(M):
        values = plan.get(r % 8)
        if not values:
            continue
        picked = _draw_columns(rng, N, len(values))
        for c, v in zip(picked, values):
            rows.append(r)
            cols.append(c)
            vals.append(v)
    if rows:
        x[xp.asarray(np.array(rows)), xp.asarray(np.array(cols))] = xp.asarray(np.array(vals, dtype=x.dtype))
    return x


def _draw_columns(rng: Any, n: int, k: int) -> list[int]:
    """k distinct columns from a numpy Generator or a cupy RandomState."""
    if hasattr(rng, "choice") and isinstance(rng, np.random.Generator):
        return [int(c) for c in rng.choice(n, size=k, replace=False)]
    picked: list[int] = []
    while len(picked) < k:
        c = int(rng.randint(0, n, size=1).get()[0]) if hasattr(rng, "randint") else int(rng.integers(0, n))
        if c not in picked:
            picked.append(c)
    return picked


def range_check_widths() -> list[int]:
    """Widths inside every range the dispatch can serve: for consecutive benchmark widths a < b
    of any matrix, a + 8 (the range's first width) and one near the middle that is not a power
    of two; below the smallest, one; past the largest, BEYOND_WIDTHS."""
    bench = sorted({n for name in ("quack", "models") for _, n in MATRICES[name]})
    out = [136]
    for a, b in zip(bench, bench[1:]):
        mid = ((a + b) // 2 + 7) // 8 * 8
        if mid & (mid - 1) == 0:
            mid += 8
        out += [a + 8, mid]
    out += list(BEYOND_WIDTHS)
    return sorted(set(out))


def _wide_rows(xp: Any, rng: Any, r0: int, r1: int, n: int) -> Any:
    """Rows r0..r1 of the "wide" distribution: the row kind (r % 4: 0, 3 mixed; 1 tiny; 2 huge)
    fixes the exponent range, as per-row vectors broadcast over the columns."""
    lo, hi = WIDE_LOG10
    rows = r1 - r0
    kind = np.arange(r0, r1) % 4
    low = np.where(kind == 2, 1.0, lo).reshape(rows, 1)
    span = (np.where(kind == 1, -1.0, hi) - low.reshape(-1)).reshape(rows, 1)
    u = xp.asarray(rng.uniform(0.0, 1.0, (rows, n))).astype(xp.float64, copy=False)
    s = xp.asarray(rng.uniform(0.0, 1.0, (rows, n))).astype(xp.float64, copy=False)
    if xp is not np:
        return _cupy_kernel("jf_rms_wide")(u, s, xp.asarray(low), xp.asarray(span))
    return np.where(s < 0.5, -1.0, 1.0) * np.power(10.0, low + span * u)


# -- fused device kernels (cupy), compiled once per process; numpy code above is their spec ---------
_DECODE_X = {   # x's storage element `x` -> double
    "bf16": ("uint16", "(double)__uint_as_float(((unsigned int)x) << 16)"),
    "fp16": ("float16", "(double)(float)x"),
    "fp32": ("float32", "(double)x"),
}
#: name -> ("elementwise" | "reduction", in_params, out_params, operation or map expression)
CUPY_KERNELS: dict[str, tuple[str, str, str, str]] = {
    "jf_rms_away32": ("elementwise", "float32 v", "float32 y",
                      "y = (fabsf(v) < 1e-3f) ? ((v < 0.0f) ? -1e-3f : 1e-3f) : v;"),
    "jf_rms_wide": ("elementwise", "float64 u, float64 s, float64 lo, float64 span", "float64 y",
                    "y = pow(10.0, __dadd_rn(lo, __dmul_rn(span, u))); if (s < 0.5) y = -y;"),
}
for _dt, (_ty, _dec) in _DECODE_X.items():
    CUPY_KERNELS[f"jf_rms_sumsq_{_dt}"] = ("reduction", f"{_ty} x", "float64 s", f"({_dec}) * ({_dec})")
    CUPY_KERNELS[f"jf_rms_y_{_dt}"] = ("elementwise", f"{_ty} x, float64 r, float64 w", "float64 y",
                                       f"y = __dmul_rn(__dmul_rn({_dec}, r), w);")
# Counter-based generation of x on the device: element i of a draw seeded by `seed` hashes
# (seed, i) with the splitmix64 finaliser; the high and low 32 bits give two uniforms in (0, 1).
# "normal": Box-Muller in double -> float32 -> away from zero -> the dtype (as the numpy path);
# "wide": row kind from the row index (i / N), |x| = 10**(low + span*u1), sign from u2 < 0.5,
# double -> the dtype (fp16 through float32). gen_x_spec below is the executable specification.
GEN_PREAMBLE = r"""
__device__ __forceinline__ unsigned long long jf_mix64(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
__device__ __forceinline__ void jf_uniforms(unsigned long long seed, long long i, double& u1, double& u2) {
    const unsigned long long h = jf_mix64(seed + (unsigned long long)(i + 1) * 0x9E3779B97F4A7C15ull);
    u1 = ((double)(h >> 32) + 0.5) * 2.3283064365386963e-10;          /* 2**-32 */
    u2 = ((double)(h & 0xFFFFFFFFull) + 0.5) * 2.3283064365386963e-10;
}
__device__ __forceinline__ float jf_gen_normal(unsigned long long seed, long long i) {
    double u1, u2;
    jf_uniforms(seed, i, u1, u2);
    float v = (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    return (fabsf(v) < 1e-3f) ? ((v < 0.0f) ? -1e-3f : 1e-3f) : v;
}
__device__ __forceinline__ double jf_gen_wide(unsigned long long seed, long long i, long long n) {
    double u1, u2;
    jf_uniforms(seed, i, u1, u2);
    const long long kind = (i / n) % 4;
    const double lo = (kind == 2) ? 1.0 : -3.0;
    const double span = ((kind == 1) ? -1.0 : 3.0) - lo;
    const double y = pow(10.0, __dadd_rn(lo, __dmul_rn(span, u1)));
    return (u2 < 0.5) ? -y : y;
}
"""
_GEN_STORE = {   # dtype -> (storage type, normal: float32 v -> stored, wide: double y -> stored)
    "bf16": ("uint16", "x = jf_f32bits_to_bf16(__float_as_uint(v));", "x = jf_f64_to_bf16(y);"),
    "fp16": ("float16", "x = (float16)v;", "x = (float16)(float)y;"),
    "fp32": ("float32", "x = v;", "x = (float)y;"),
}
for _dt, (_ty, _st_n, _st_w) in _GEN_STORE.items():
    CUPY_KERNELS[f"jf_rms_gen_normal_{_dt}"] = ("elementwise", "uint64 seed, int64 ncols", f"{_ty} x",
                                                f"const float v = jf_gen_normal(seed, i); {_st_n}")
    CUPY_KERNELS[f"jf_rms_gen_wide_{_dt}"] = ("elementwise", "uint64 seed, int64 ncols", f"{_ty} x",
                                              f"const double y = jf_gen_wide(seed, i, ncols); {_st_w}")
_CUPY_CACHE: dict[str, Any] = {}


def gen_x_spec(seed: int, shape: tuple[int, int], distribution: str, dtype: str, start: int = 0,
               count: int | None = None) -> np.ndarray:
    """numpy specification of the device generator: flat elements start .. start+count of x."""
    M, N = shape
    count = M * N - start if count is None else count
    i = np.arange(start, start + count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + (i + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        h = z ^ (z >> np.uint64(31))
    scale = 2.3283064365386963e-10
    u1 = ((h >> np.uint64(32)).astype(np.float64) + 0.5) * scale
    u2 = ((h & np.uint64(0xFFFFFFFF)).astype(np.float64) + 0.5) * scale
    dt = _canonical_float(dtype)
    if distribution == "normal":
        v = (np.sqrt(-2.0 * np.log(u1)) * np.cos(6.283185307179586 * u2)).astype(np.float32)
        v = _away_from_zero(np, v)
        return dtypes.quantize(v, dt)
    if distribution != "wide":
        raise ValueError(f"unknown input distribution {distribution!r}; use 'normal' or 'wide'")
    kind = (i // np.uint64(N)) % np.uint64(4)
    lo = np.where(kind == 2, 1.0, -3.0)
    span = np.where(kind == 1, -1.0, 3.0) - lo
    y = np.power(10.0, lo + span * u1)
    y = np.where(u2 < 0.5, -y, y)
    if dt == "fp16":
        return y.astype(np.float32).astype(np.float16)
    return dtypes.quantize(y, dt)


def _cupy_kernel(name: str) -> Any:
    k = _CUPY_CACHE.get(name)
    if k is None:
        import cupy  # noqa: PLC0415 - only with cupy arrays
        kind, in_p, out_p, op = CUPY_KERNELS[name]
        if kind == "reduction":
            k = cupy.ReductionKernel(in_p, out_p, op, "a + b", "s = a", "0", name)
        else:
            k = cupy.ElementwiseKernel(in_p, out_p, op, name, preamble=dtypes.CUDA_PREAMBLE + GEN_PREAMBLE)
        _CUPY_CACHE[name] = k
    return k


# -- baseline adapters (torch and friends are imported only when a baseline is prepared) ------
def _torch():
    import torch  # noqa: PLC0415 - lazy on purpose: this module must import without torch
    return torch


def _as_torch(arr: Any, dtype_name: str):
    """A zero-copy torch view of a device array; bf16 bits become a bfloat16 tensor."""
    torch = _torch()
    if dtypes.canonical(dtype_name) == "bf16":
        return _zero_copy(arr.view(np.int16)).view(torch.bfloat16)
    return _zero_copy(arr)


def _zero_copy(arr: Any):
    torch = _torch()
    if hasattr(arr, "__dlpack__"):
        try:
            return torch.from_dlpack(arr)
        except Exception:  # noqa: BLE001 - fall back to the CUDA array interface
            pass
    return torch.as_tensor(arr)


def _storage_view(t: Any, dtype_name: str) -> Any:
    torch = _torch()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16)
    return t


def _torch_inputs(case: Case, device_inputs: Mapping[str, Any]):
    torch = _torch()
    _, _, dt, wdt = _params(case)
    x = _as_torch(device_inputs["x"], dt)
    w = _as_torch(device_inputs["w"], wdt)
    torch.set_grad_enabled(False)
    if x.is_cuda:
        torch.cuda.set_device(x.device)
    return x, w


def _y_only(case: Case) -> Callable[[Any], dict[str, Any]]:
    dt = case.params["dtype"]
    return lambda result: {"y": _storage_view(result, dt)}


def _prepare_torch(case: Case, device_inputs: Mapping[str, Any]) -> BaselineRun | None:
    torch = _torch()
    F = torch.nn.functional
    if not hasattr(F, "rms_norm"):
        return None
    x, w = _torch_inputs(case, device_inputs)
    if w.dtype != x.dtype:
        # eager torch with mixed dtypes promotes y to fp32 (a different, costlier operation);
        # the usual eager call has the weight in x's dtype, so the weight is cast once here.
        w = w.to(x.dtype)
    N, eps = int(case.params["N"]), float(case.params["eps"])
    return BaselineRun(lambda: F.rms_norm(x, (N,), w, eps), _y_only(case))


_COMPILED: dict[str, Any] = {}


def _raise_recompile_limits(torch) -> None:
    """torch.compile recompiles per shape on one code object; the default limit (8) would make
    later shapes fall back to eager silently."""
    cfg = torch._dynamo.config
    for attr in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(cfg, attr):
            try:
                setattr(cfg, attr, max(int(getattr(cfg, attr)), 4096))
            except Exception:  # noqa: BLE001
                pass


def _prepare_torch_compile(case: Case, device_inputs: Mapping[str, Any]) -> BaselineRun | None:
    torch = _torch()
    _raise_recompile_limits(torch)
    x, w = _torch_inputs(case, device_inputs)
    fn = _COMPILED.get(case.id)
    if fn is None:
        eps = float(case.params["eps"])

        def rmsnorm_ref(x, w):
            xf = x.float()
            return (xf * torch.rsqrt(xf.square().mean(dim=-1, keepdim=True) + eps) * w.float()).to(x.dtype)

        fn = _COMPILED[case.id] = torch.compile(rmsnorm_ref, dynamic=False)
    return BaselineRun(lambda: fn(x, w), _y_only(case))


def _prepare_quack(case: Case, device_inputs: Mapping[str, Any]) -> BaselineRun | None:
    qr = importlib.import_module("quack.rmsnorm")   # `import quack.rmsnorm as qr` gives the function quack exports under that name
    x, w = _torch_inputs(case, device_inputs)
    eps = float(case.params["eps"])
    dt = case.params["dtype"]
    if case.params.get("with_rstd") and hasattr(qr, "rmsnorm_fwd"):
        def outputs(res):
            # (out, residual_out, rstd) in recent QuACK, (out, rstd) in some older ones
            rstd = next((t for t in reversed(res[1:]) if t is not None and t.dim() == 1), None)
            return {"y": _storage_view(res[0], dt), **({"rstd": rstd} if rstd is not None else {})}
        return BaselineRun(lambda: qr.rmsnorm_fwd(x, w, eps=eps, store_rstd=True), outputs)
    return BaselineRun(lambda: qr.rmsnorm(x, w, eps=eps), _y_only(case))


def _prepare_quack_tuned(case: Case, device_inputs: Mapping[str, Any]) -> BaselineRun | None:
    """QuACK's autotuned forward (`rmsnorm_fwd_tuned`, an exhaustive search over its configs at
    the first call per shape, 23-29 s of JIT compiles on the H200). From N = 32768 some of its
    75 configs need more shared memory than sm_90 has and fail; the tuner skips them (measured
    for bf16/fp16 32768, session 4). If the call fails as a whole, the error is raised (the judge
    records it in the case's notes) and QuACK is represented by its plain path ("quack")."""
    qr = importlib.import_module("quack.rmsnorm")   # `import quack.rmsnorm as qr` gives the function quack exports under that name
    import torch  # noqa: PLC0415
    if not hasattr(qr, "rmsnorm_fwd_tuned"):
        return None
    x, w = _torch_inputs(case, device_inputs)
    eps = float(case.params["eps"])
    dt = case.params["dtype"]
    out = torch.empty_like(x)
    rstd = torch.empty(x.shape[0], device=x.device, dtype=torch.float32) if case.params.get("with_rstd") else None

    def run():
        qr.rmsnorm_fwd_tuned(x, w, out, rstd=rstd, eps=eps)
        return out

    try:
        run()                      # autotunes now, outside the timed region
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - recorded in the case's notes, never hidden
        import traceback  # noqa: PLC0415

        traceback.print_exc()
        raise RuntimeError(f"rmsnorm_fwd_tuned failed at its autotuning call: {type(exc).__name__}: "
                           f"{str(exc)[:300]}") from exc
    return BaselineRun(run, lambda _: {"y": _storage_view(out, dt), **({"rstd": rstd} if rstd is not None else {})})


def _prepare_liger(case: Case, device_inputs: Mapping[str, Any]) -> BaselineRun | None:
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction  # noqa: PLC0415
    x, w = _torch_inputs(case, device_inputs)
    eps = float(case.params["eps"])
    return BaselineRun(lambda: LigerRMSNormFunction.apply(x, w, eps), _y_only(case))


def _prepare_int21(case: Case, device_inputs: Mapping[str, Any]) -> BaselineRun | None:
    """INT21's RMSNorm-H100 forward (kernels/rmsnorm/peers.py says where its checkout lives):
    `rmsnorm_fwd` returns (out, residual_out, rstd); its extension is built at this first call."""
    peer = _PEERS.int21()
    x, w = _torch_inputs(case, device_inputs)
    eps = float(case.params["eps"])
    dt = case.params["dtype"]
    store_rstd = bool(case.params.get("with_rstd"))

    def outputs(res):
        out = {"y": _storage_view(res[0], dt)}
        if store_rstd and res[2] is not None:
            out["rstd"] = res[2]
        return out

    run = BaselineRun(lambda: peer.rmsnorm_fwd(x, w, eps=eps, store_rstd=store_rstd), outputs)
    run()                          # builds and warms the extension outside any timed region
    return run


class CopyRoofline:
    """Not an RMSNorm: x copied into a y of its shape and dtype (a device-to-device copy), i.e. the
    bytes of the operation less the weight, moved with no arithmetic. Timed beside a kernel on the
    same case it is that case's attainable memory time, launch and DRAM ramp included, which a
    1 GiB copy's TB/s is not for a 13 us kernel. It has no `as_outputs`, so the judge does not
    check its result (y is x, not the norm) and it must never be a run's objective baseline."""

    roofline = True

    def __init__(self, x: Any):
        self._x = x
        self._y = _torch().empty_like(x)

    def __call__(self) -> Any:
        return self._y.copy_(self._x)


def _prepare_copy(case: Case, device_inputs: Mapping[str, Any]) -> CopyRoofline:
    x, _ = _torch_inputs(case, device_inputs)
    return CopyRoofline(x)


def bytes_for(M: int, N: int, dtype: str, weight_dtype: str = "fp32", with_rstd: bool = False) -> int:
    """The bytes model without a Case (for notebooks)."""
    s = dtypes.itemsize(dtype)
    return 2 * M * N * s + N * dtypes.itemsize(weight_dtype) + (4 * M if with_rstd else 0)


__all__ = ["RMSNormOperation", "BaselineRun", "TOLERANCES", "RSTD_TOLERANCE", "QUACK_SHAPES", "MODEL_SHAPES",
           "SMOKE_SHAPES", "CHECK_ROWS", "CHECK_WIDTHS", "DTYPES", "bytes_for"]
