"""fitness.dtypes: exact bf16 rounding, conversions, poison patterns."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fitness import dtypes


def _bf16_value(bits: int) -> float:
    return float(dtypes.bf16_bits_to_f32(np.array([bits], dtype=np.uint16))[0])


def _nearest_even_ok(x: float, bits: int) -> bool:
    """bits is the correctly rounded (ties to even) bf16 of the finite float x."""
    v = _bf16_value(bits)
    if np.isinf(v):
        # overflow: x must be at least halfway between max finite and 2**128
        return abs(x) >= (3.3895313892515355e38 + 2.0 ** 128) / 2
    mag = bits & 0x7FFF
    sign = bits & 0x8000
    neighbours = [sign | (mag - 1)] if mag > 0 else [(mag + 1) | (sign ^ 0x8000)]
    if mag < 0x7F7F:
        neighbours.append(sign | (mag + 1))
    err = abs(x - v)
    for nb in neighbours:
        e = abs(x - _bf16_value(nb))
        if e < err:
            return False
        if e == err and (bits & 1):          # a tie must go to the even mantissa
            return False
    return True


def test_names_and_sizes():
    assert dtypes.canonical("bfloat16") == "bf16" and dtypes.canonical("float16") == "fp16"
    assert dtypes.canonical(np.float32) == "fp32" and dtypes.canonical(np.dtype("float64")) == "fp64"
    assert [dtypes.itemsize(d) for d in ("bf16", "fp16", "fp32", "fp64")] == [2, 2, 4, 8]
    assert dtypes.storage_dtype("bf16") == np.uint16 and dtypes.storage_dtype("fp16") == np.float16
    assert dtypes.bits_dtype("fp32") == np.uint32
    assert dtypes.numpy_name("bf16") == "bfloat16" and dtypes.numpy_name("fp32") == "float32"
    with pytest.raises(dtypes.DTypeError, match="unknown element type"):
        dtypes.canonical("int8")


def test_every_bf16_pattern_round_trips():
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    f = dtypes.bf16_bits_to_f32(bits)
    back = dtypes.f32_to_bf16_bits(f)
    finite = ~np.isnan(f)
    assert np.array_equal(back[finite], bits[finite])
    assert np.isnan(dtypes.bf16_bits_to_f32(back[~finite])).all()
    # float64 path too
    with np.errstate(invalid="ignore"):          # signalling NaN patterns
        f64 = f.astype(np.float64)
    back64 = dtypes.f64_to_bf16_bits(f64)
    assert np.array_equal(back64[finite], bits[finite])


@pytest.mark.parametrize("value, bits", [
    (1.0, 0x3F80), (-2.0, 0xC000), (0.0, 0x0000), (-0.0, 0x8000),
    (1.0 + 2.0 ** -8, 0x3F80),              # tie -> even (down)
    (1.0 + 3 * 2.0 ** -8, 0x3F82),          # tie -> even (up)
    (1.0 + 2.0 ** -8 + 2.0 ** -20, 0x3F81), # just above the tie
    (3.4028234663852886e38, 0x7F80),        # float32 max rounds to inf
    (float("inf"), 0x7F80), (float("-inf"), 0xFF80),
])
def test_f32_rounding_examples(value, bits):
    assert int(dtypes.f32_to_bf16_bits(np.array([value], dtype=np.float32))[0]) == bits


def test_nan_stays_quiet_nan_with_sign():
    out = dtypes.f32_to_bf16_bits(np.array([np.nan, -np.nan], dtype=np.float32))
    assert np.isnan(dtypes.bf16_bits_to_f32(out)).all()
    assert (out[0] & 0x7FC0) == 0x7FC0


def test_f64_to_bf16_has_no_double_rounding():
    x = 1.0 + 2.0 ** -8 + 2.0 ** -30       # above the tie, but float32 would round it onto the tie
    assert np.float32(x) == np.float32(1.0 + 2.0 ** -8)
    assert int(dtypes.f32_to_bf16_bits(np.array([x], dtype=np.float32))[0]) == 0x3F80   # double rounding
    assert int(dtypes.quantize(np.array([x]), "bf16")[0]) == 0x3F81                     # correct
    y = -(1.0 + 2.0 ** -8 + 2.0 ** -40)
    assert int(dtypes.quantize(np.array([y]), "bf16")[0]) == 0xBF81


@settings(max_examples=300, deadline=None)
@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_f32_to_bf16_is_nearest_even(x):
    bits = int(dtypes.f32_to_bf16_bits(np.array([x], dtype=np.float32))[0])
    assert _nearest_even_ok(float(np.float32(x)), bits)


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=-3.0e38, max_value=3.0e38, allow_nan=False))
def test_f64_to_bf16_is_nearest_even(x):
    bits = int(dtypes.quantize(np.array([x], dtype=np.float64), "bf16")[0])
    assert _nearest_even_ok(x, bits)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(min_value=-6e4, max_value=6e4, allow_nan=False), min_size=1, max_size=50))
def test_fp16_and_fp32_quantize_match_numpy(values):
    a = np.array(values, dtype=np.float64)
    assert np.array_equal(dtypes.quantize(a, "fp16"), a.astype(np.float16))
    assert np.array_equal(dtypes.quantize(a, "fp32"), a.astype(np.float32))
    for d in ("bf16", "fp16", "fp32"):
        r = dtypes.round_trip(a, d)
        assert r.dtype == np.float64
        assert np.array_equal(dtypes.round_trip(r, d), r)       # idempotent


def test_to_float64_is_exact_and_checks_bf16_storage():
    bits = np.array([0x3F80, 0x4049, 0x0001], dtype=np.uint16)
    v = dtypes.to_float64(bits, "bf16")
    assert v.dtype == np.float64 and v[0] == 1.0 and v[2] == 2.0 ** -133
    with pytest.raises(dtypes.DTypeError, match="uint16"):
        dtypes.to_float64(np.ones(2, dtype=np.float32), "bf16")
    assert dtypes.to_float64(np.array([0.1], dtype=np.float32), "fp32")[0] == float(np.float32(0.1))


@pytest.mark.parametrize("name, canonical_nans", [
    ("bf16", (0x7FC0, 0x7FFF, 0xFFC0, 0xFFFF)),
    ("fp16", (0x7E00, 0x7FFF, 0xFE00)),
    ("fp32", (0x7FC00000, 0x7FFFFFFF, 0xFFC00000)),
])
def test_poison_is_a_distinctive_quiet_nan(name, canonical_nans):
    a = np.zeros(5, dtype=dtypes.storage_dtype(name))
    dtypes.poison(a, name)
    assert dtypes.is_poison(a, name).all()
    assert np.isnan(dtypes.to_float64(a, name)).all()
    assert dtypes.poison_bits(name) not in canonical_nans
    # what hardware or numpy write for NaN is not mistaken for "never written"
    nan_bits = np.array(canonical_nans, dtype=dtypes.bits_dtype(name))
    assert not dtypes.is_poison(nan_bits.view(dtypes.storage_dtype(name)), name).any()
    # a NaN computed from floats is not the poison pattern either
    q = dtypes.quantize(np.array([np.nan]), name)
    assert not dtypes.is_poison(q, name).any()


def test_array_module_is_numpy_for_numpy():
    assert dtypes.array_module(np.zeros(1)) is np


# -- the fused device conversions (cupy.ElementwiseKernel sources) ---------------------------------------
import shutil  # noqa: E402

import cuda_host  # noqa: E402  (tests/cuda_host.py; pytest puts tests/ on sys.path)


def _ew_wrapper(name: str) -> str:
    tin, tout = (cuda_host.CTYPES[p.split()[0]] for p in dtypes.ELEMENTWISE[name][:2])
    return (f'extern "C" void run_{name}(const {tin}* a, {tout}* b, long long n, int grid) {{\n'
            + cuda_host.grid_loop(f"{name}(a, b, n)") + "}\n")


def _ew_source() -> str:
    return dtypes.CUDA_PREAMBLE + "".join(cuda_host.elementwise_as_kernel(n, *spec)
                                          for n, spec in dtypes.ELEMENTWISE.items())


def _run_ew(name: str, a: np.ndarray, out_dtype, grid: int = 3) -> np.ndarray:
    lib = cuda_host.host_library(_ew_source(), "".join(_ew_wrapper(n) for n in dtypes.ELEMENTWISE))
    a = np.ascontiguousarray(a)
    b = np.empty(a.shape, dtype=out_dtype)
    getattr(lib, f"run_{name}")(a.ctypes.data_as(ctypes.c_void_p), b.ctypes.data_as(ctypes.c_void_p),
                                ctypes.c_longlong(a.size), ctypes.c_int(grid))
    return b


def test_fused_conversion_kernels_compile_for_sm90a(tmp_path):
    if cuda_host.nvcc() is None:
        pytest.skip("nvcc not found")
    proc = cuda_host.nvcc_cubin(_ew_source(), tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _special_f64() -> np.ndarray:
    rng = np.random.default_rng(0)
    base = rng.standard_normal(20000) * 10.0 ** rng.uniform(-45, 39, 20000)
    f32max = float(np.finfo(np.float32).max)
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0, f32max, -f32max, 3.4e38, 3.5e38, 1e300,
                -1e300, 1e-300, -1e-300, 1e-45, 1.4e-45, 1e-39, 2.0 ** -133, 2.0 ** -134, 2.0 ** -126,
                1.0 + 2.0 ** -8, 1.0 + 2.0 ** -8 + 2.0 ** -40, 1.0 + 2.0 ** -8 - 2.0 ** -40, 1.0 + 3 * 2.0 ** -8,
                (3.3895313892515355e38 + 2.0 ** 128) / 2, np.nextafter((3.3895313892515355e38 + 2.0 ** 128) / 2, 0)]
    with np.errstate(invalid="ignore"):
        ties = (rng.integers(0, 1 << 16, 2000).astype(np.uint32) << 16 | 0x8000).view(np.float32).astype(np.float64)
    near = ties + ties * rng.choice([-1e-12, 1e-12], 2000)
    return np.concatenate([base, np.array(specials), ties, near])


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found")
def test_fused_conversions_equal_the_numpy_spec():
    a64 = _special_f64()
    got = _run_ew("jf_cvt_f64_bf16", a64, np.uint16)
    np.testing.assert_array_equal(got, dtypes.f64_to_bf16_bits(a64))
    with np.errstate(over="ignore", invalid="ignore"):
        a32 = a64.astype(np.float32)
    a32 = np.concatenate([a32, np.arange(0, 1 << 32, 65537, dtype=np.uint64).astype(np.uint32).view(np.float32)])
    np.testing.assert_array_equal(_run_ew("jf_cvt_f32_bf16", a32, np.uint16), dtypes.f32_to_bf16_bits(a32))
    bits = np.arange(1 << 16, dtype=np.uint16)
    f32 = _run_ew("jf_cvt_bf16_f32", bits, np.float32)
    np.testing.assert_array_equal(f32.view(np.uint32), dtypes.bf16_bits_to_f32(bits).view(np.uint32))
    f64 = _run_ew("jf_cvt_bf16_f64", bits, np.float64)
    ref = dtypes.to_float64(bits, "bf16")
    assert np.array_equal(f64, ref, equal_nan=True)
    assert np.array_equal(np.signbit(f64[~np.isnan(f64)]), np.signbit(ref[~np.isnan(ref)]))


def test_int32_is_an_index_type():
    """cu_seqlens-style buffers: stored as int32, exact in float64, rounded and range-checked when
    made from floats, poisoned with a pattern of their own."""
    assert dtypes.canonical("int32") == dtypes.canonical(np.int32) == "int32"
    assert dtypes.storage_dtype("int32") == np.int32 and dtypes.bits_dtype("int32") == np.uint32
    assert dtypes.itemsize("int32") == 4 and dtypes.numpy_name("int32") == "int32"
    q = dtypes.quantize(np.array([0.0, 2.6, -3.5, 2**31 - 1]), "int32")
    assert q.dtype == np.int32 and q.tolist() == [0, 3, -4, 2**31 - 1]
    assert dtypes.quantize(np.array([7, 9], dtype=np.int64), "int32").tolist() == [7, 9]
    for bad in (np.array([2.0**31]), np.array([np.nan]), np.array([-2**31 - 1], dtype=np.int64)):
        with pytest.raises(dtypes.DTypeError, match="int32"):
            dtypes.quantize(bad, "int32")
    v = dtypes.to_float64(np.array([-(2**31), 5], dtype=np.int32), "int32")
    assert v.dtype == np.float64 and v.tolist() == [-(2**31), 5]
    a = np.zeros(3, dtype=np.int32)
    dtypes.poison(a, "int32")
    assert dtypes.is_poison(a, "int32").all() and int(a[0]) == 0x7FC0DEAD
    a[1] = 17
    assert dtypes.is_poison(a, "int32").tolist() == [True, False, True]
