"""fitness.verify: output checks, input checks, guard zones, fingerprints (numpy stands in for cupy)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fitness import dtypes, verify
from fitness.family import Tolerance

BF16 = Tolerance(atol=1e-2, rtol=1.6e-2, rel_l2=1e-2)
FP32 = Tolerance(atol=1e-5, rtol=1e-4, rel_l2=1e-5)


def _ref(shape=(5, 40), seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def test_exact_output_passes_and_unpacks():
    ref = _ref()
    out = dtypes.quantize(ref, "fp32")
    res = verify.check_output(out, ref, FP32, "fp32", name="y")
    assert res and res.ok
    ok, max_err, rel, msg = res
    assert ok and max_err < 1e-6 and rel < 1e-7 and msg == ""


def test_bf16_rounded_reference_passes_bf16_tolerance():
    ref = _ref((64, 1000)) * 3
    res = verify.check_output(dtypes.quantize(ref, "bf16"), ref, BF16, "bf16")
    assert res.ok, res.message


def test_poison_reports_not_written_with_index():
    ref = _ref()
    out = dtypes.quantize(ref, "bf16")
    out[3, 17] = dtypes.poison_bits("bf16")
    out[4, 2] = dtypes.poison_bits("bf16")
    res = verify.check_output(out, ref, BF16, "bf16", name="y")
    assert not res and res.max_abs_err is None and res.rel_l2 is None
    assert "element y[3, 17] not written (poison NaN remains)" in res.message
    assert "2 of 200 elements not written" in res.message


def test_other_nan_and_inf_fail():
    ref = _ref()
    out = dtypes.quantize(ref, "fp32")
    out[1, 1] = np.nan
    res = verify.check_output(out, ref, FP32, "fp32", name="y")
    assert not res.ok and "y[1, 1] is NaN" in res.message and "not written" not in res.message
    out = dtypes.quantize(ref, "fp32")
    out[0, 5] = -np.inf
    res = verify.check_output(out, ref, FP32, "fp32", name="y")
    assert not res.ok and "y[0, 5] is inf" in res.message
    bits = dtypes.quantize(ref, "bf16")
    bits[2, 3] = 0x7FFF                       # the NaN a kernel's conversion would produce
    res = verify.check_output(bits, ref, BF16, "bf16", name="y")
    assert not res.ok and "y[2, 3] is NaN" in res.message


def test_out_of_tolerance_names_first_element_and_values():
    ref = _ref()
    out = dtypes.quantize(ref, "fp32")
    out[2, 9] = np.float32(ref[2, 9] + 0.5)
    out[4, 0] = np.float32(ref[4, 0] - 0.25)
    res = verify.check_output(out, ref, FP32, "fp32", name="y")
    assert not res.ok
    assert res.message.startswith("y[2, 9] = ")
    assert "but the reference is" in res.message and "2 of 200 elements out of tolerance" in res.message
    assert res.max_abs_err == pytest.approx(0.5, rel=1e-6)
    assert res.rel_l2 is not None and res.rel_l2 > 0


def test_rtol_scales_with_reference():
    ref = np.array([1000.0, 1e-3])
    tol = Tolerance(atol=1e-5, rtol=1e-2)
    assert verify.check_output(np.array([1005.0, 1e-3], dtype=np.float32), ref, tol, "fp32").ok
    assert not verify.check_output(np.array([1000.0, 2e-3], dtype=np.float32), ref, tol, "fp32").ok


def test_relative_l2_is_checked_after_elementwise():
    ref = np.ones(1000)
    out = np.full(1000, 1.004, dtype=np.float32)
    loose = Tolerance(atol=1e-2, rtol=1e-2, rel_l2=1e-3)
    res = verify.check_output(out, ref, loose, "fp32", name="y")
    assert not res.ok and "relative L2 error" in res.message and res.rel_l2 == pytest.approx(0.004, rel=1e-3)
    assert verify.check_output(out, ref, Tolerance(atol=1e-2, rtol=1e-2, rel_l2=None), "fp32").ok


def test_shape_mismatch_fails():
    res = verify.check_output(np.zeros((2, 3), dtype=np.float32), np.zeros((3, 2)), FP32, "fp32", name="y")
    assert not res.ok and "shape" in res.message


def test_nonfinite_reference_is_reported():
    ref = _ref()
    ref[0, 0] = np.nan
    res = verify.check_output(dtypes.quantize(_ref(), "fp32"), ref, FP32, "fp32", name="y")
    assert not res.ok and "reference" in res.message


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 300), chunk=st.integers(1, 64), seed=st.integers(0, 1000),
       n_bad=st.integers(0, 3), n_poison=st.integers(0, 2))
def test_chunked_check_equals_one_pass(n, chunk, seed, n_bad, n_poison):
    rng = np.random.default_rng(seed)
    ref = rng.standard_normal(n)
    out = dtypes.quantize(ref, "bf16")
    for i in rng.integers(0, n, n_bad):
        out[i] = dtypes.quantize(np.array([ref[i] + 1.0]), "bf16")[0]
    for i in rng.integers(0, n, n_poison):
        out[i] = dtypes.poison_bits("bf16")
    a = verify.check_output(out, ref, BF16, "bf16", name="y")
    b = verify.check_output(out, ref, BF16, "bf16", name="y", chunk=chunk)
    assert a.ok == b.ok and a.message == b.message
    if a.max_abs_err is not None:
        assert a.max_abs_err == pytest.approx(b.max_abs_err) and a.rel_l2 == pytest.approx(b.rel_l2)


def test_inputs_unchanged_bitwise():
    x = dtypes.quantize(_ref((4, 8)), "bf16")
    before = x.copy()
    assert verify.inputs_unchanged(before, x)
    x[1, 2] ^= 1
    v = verify.inputs_unchanged(before, x, name="x")
    assert not v and "input x[1, 2] was modified" in v.message and "1 of 32 elements changed" in v.message
    ok, message = v
    assert not ok and message


def test_inputs_unchanged_sees_bits_not_values():
    a = np.array([0.0, np.nan, 1.0], dtype=np.float32)
    b = a.copy()
    assert verify.inputs_unchanged(a, b)           # NaN == NaN bitwise
    b[0] = -0.0
    assert not verify.inputs_unchanged(a, b)       # equal values, different bits


def test_inputs_unchanged_on_mappings_chunked():
    before = {"x": np.arange(100, dtype=np.float32), "w": np.ones(7, dtype=np.float32)}
    after = {k: v.copy() for k, v in before.items()}
    assert verify.inputs_unchanged(before, after, chunk=8)
    after["w"][6] = 2.0
    v = verify.inputs_unchanged(before, after, chunk=8)
    assert not v and "input w[6]" in v.message
    assert not verify.inputs_unchanged(before, {"x": after["x"]})


def test_guard_intact():
    g = np.empty(16, dtype=np.uint16)
    dtypes.poison(g, "bf16")
    assert verify.guard_intact(g, "bf16", name="y")
    g[0] = 0x3F80
    v = verify.guard_intact(g, "bf16", name="y", where="after")
    assert not v and "out-of-bounds write" in v.message and "element 1 past the end of y" in v.message
    g2 = np.empty(8, dtype=np.float32)
    dtypes.poison(g2, "fp32")
    g2[5] = 1.0
    v = verify.guard_intact(g2[::-1], "fp32", name="rstd", where="before")
    assert not v and "element 3 before the start of rstd" in v.message


def test_fingerprint_is_position_sensitive_and_chunk_independent():
    a = np.arange(1000, dtype=np.uint16)
    f = verify.fingerprint(a)
    assert f == verify.fingerprint(a.copy()) == verify.fingerprint(a, chunk=7)
    b = a.copy()
    b[[3, 4]] = b[[4, 3]]
    assert verify.fingerprint(b) != f
    c = a.copy()
    c[999] ^= 1
    assert verify.fingerprint(c) != f
    assert verify.fingerprint(np.ones((3, 5), dtype=np.float32)) == verify.fingerprint(np.ones(15, dtype=np.float32))
    # no period in the position weight: words 65521 apart swapped (the old weight repeated there)
    d = np.arange(70000, dtype=np.uint32)
    e = d.copy()
    e[[1, 65522]] = e[[65522, 1]]
    assert verify.fingerprint(e) != verify.fingerprint(d)


# -- the fused device kernels (cupy.RawKernel sources), compiled for sm_90a and run on the host --------
import ctypes  # noqa: E402
import shutil  # noqa: E402

import cuda_host  # noqa: E402  (tests/cuda_host.py)


def test_raw_kernels_compile_for_sm90a(tmp_path):
    if cuda_host.nvcc() is None:
        pytest.skip("nvcc not found")
    for name, src in verify.kernel_sources().items():
        assert f'extern "C" __global__ void {name}(' in src
        proc = cuda_host.nvcc_cubin(src, tmp_path)
        assert proc.returncode == 0, (name, proc.stdout + proc.stderr)


def _host_lib():
    srcs = verify.kernel_sources()
    wrappers = []
    for dt, (bits, _, _) in verify._DECODE.items():
        wrappers.append(f'extern "C" void run_stats_{dt}(const {bits}* o, const double* r, long long n, double atol, '
                        f'double rtol, int match, double* p, int grid) {{\n'
                        + cuda_host.grid_loop(f"jf_stats_{dt}(o, r, n, atol, rtol, match, p)") + "}\n")
        wrappers.append(f'extern "C" void run_written_{dt}(const {bits}* o, long long n, unsigned long long* p, '
                        f'int grid) {{\n' + cuda_host.grid_loop(f"jf_written_{dt}(o, n, p)") + "}\n")
    for size, word in verify._WORDS.items():
        u = f"u{8 * size}"
        wrappers.append(f'extern "C" void run_count_diff_{u}(const {word}* a, const {word}* b, long long n, '
                        f'unsigned long long* p, int grid) {{\n'
                        + cuda_host.grid_loop(f"jf_count_diff_{u}(a, b, n, p)") + "}\n")
        wrappers.append(f'extern "C" void run_fingerprint_{u}(const {word}* a, long long n, unsigned long long* p, '
                        f'int grid) {{\n' + cuda_host.grid_loop(f"jf_fingerprint_{u}(a, n, p)") + "}\n")
    # the stats kernels share CUDA_COMMON: define it once
    body = verify.CUDA_COMMON + "".join(v.replace(verify.CUDA_COMMON, "") for v in srcs.values())
    return cuda_host.host_library(body, "".join(wrappers))


def _p(a):
    return ctypes.c_void_p(a.ctypes.data)


def _host_stats(out, ref, tol, dt, grid=5):
    lib = _host_lib()
    bits = np.ascontiguousarray(out).reshape(-1).view(dtypes.bits_dtype(dt))
    ref = np.ascontiguousarray(ref, dtype=np.float64).reshape(-1)
    parts = np.zeros((grid, verify.N_STATS))
    getattr(lib, f"run_stats_{dt}")(_p(bits), _p(ref), ctypes.c_longlong(bits.size), ctypes.c_double(tol.atol),
                                     ctypes.c_double(tol.rtol), ctypes.c_int(int(tol.match_nonfinite)), _p(parts),
                                     ctypes.c_int(grid))
    return np.concatenate([parts[:, :4].sum(axis=0), [parts[:, 4].max()], parts[:, 5:].sum(axis=0)])


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found")
@pytest.mark.parametrize("dt", ["bf16", "fp16", "fp32", "fp64"])
def test_stats_kernel_equals_the_array_spec(dt):
    rng = np.random.default_rng(1)
    tol = Tolerance(atol=1e-2, rtol=1.6e-2, rel_l2=1e-2)
    ref = rng.standard_normal(5000) * 10.0 ** rng.uniform(-3, 3, 5000)
    out = dtypes.quantize(ref, dt)
    flat = out.reshape(-1)
    bits = flat.view(dtypes.bits_dtype(dt))
    bits[[3, 900]] = dtypes.poison_bits(dt)                                      # not written
    flat[[10, 11, 12]] = dtypes.quantize(np.array([np.nan, np.inf, -np.inf]), dt)  # NaN/inf
    flat[20:40] = dtypes.quantize(ref[20:40] * 1.5 + 0.1, dt)                    # out of tolerance
    ref = ref.copy()
    ref[[50, 4999]] = [np.nan, np.inf]                                           # broken reference
    bound = tol.atol + tol.rtol * np.abs(ref[100])
    ref[100] = float(dtypes.to_float64(flat[100:101], dt)[0]) + bound            # err == bound exactly: passes
    want = verify._chunk_stats(out, ref, tol, dt)
    got = _host_stats(out, ref, tol, dt)
    np.testing.assert_array_equal(got[:5], want[:5])
    np.testing.assert_allclose(got[5:], want[5:], rtol=1e-12)
    assert want[0] == 2 and want[1] == 3 and want[2] == 2 and want[3] >= 15
    np.testing.assert_array_equal(_host_stats(out[:0], ref[:0], tol, dt, grid=1), np.zeros(7))


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found")
@pytest.mark.parametrize("dt", ["bf16", "fp16", "fp32"])
def test_nonfinite_rule_is_matched_by_the_kernel_and_the_spec(dt):
    """match_nonfinite: NaN meets NaN (never the poison), inf the same inf; everything else fails."""
    tol = Tolerance(atol=1e-2, rtol=1.6e-2, rel_l2=1e-2, match_nonfinite=True)
    ref = np.array([1.0, np.nan, np.inf, -np.inf, np.nan, np.inf, np.nan, 2.0, 0.0])
    out = dtypes.quantize(np.array([1.0, np.nan, np.inf, -np.inf, 0.0, -np.inf, 0.0, 2.0, 0.0]), dt)
    bits = out.view(dtypes.bits_dtype(dt))
    bits[6] = dtypes.poison_bits(dt)                 # the poison is no NaN for the rule: not written
    want = verify._chunk_stats(out, ref, tol, dt)
    np.testing.assert_array_equal(_host_stats(out, ref, tol, dt)[:5], want[:5])
    assert want[0] == 1 and want[1] == 0 and want[2] == 3      # 4 and 5 differ from the rule, 6 unwritten
    res = verify.check_output(out[:6], ref[:6], tol, dt, name="y")
    assert not res.ok and "rule for non-finite inputs" in res.message and "y[4]" in res.message
    good = out[:4]
    assert verify.check_output(good, ref[:4], tol, dt, name="y").ok
    assert not verify.check_output(good, ref[:4], Tolerance(1e-2, 1.6e-2), dt, name="y").ok   # rule not stated


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found")
@pytest.mark.parametrize("dt", ["bf16", "fp32"])
def test_written_kernel_and_sampled_check(dt):
    rng = np.random.default_rng(4)
    ref = rng.standard_normal((40, 50))
    out = dtypes.quantize(ref, dt)
    lib = _host_lib()
    bits = out.reshape(-1).view(dtypes.bits_dtype(dt))
    bits[77] = dtypes.poison_bits(dt)
    out.reshape(-1)[5] = dtypes.quantize(np.array([np.inf]), dt)[0]
    parts = np.zeros((3, 2), dtype=np.uint64)
    getattr(lib, f"run_written_{dt}")(_p(bits), ctypes.c_longlong(bits.size), _p(parts), ctypes.c_int(3))
    assert tuple(int(v) for v in parts.sum(axis=0)) == verify.written_counts(out, dt) == (1, 1)
    idx = np.array([0, 49, 1999, 1000])
    res = verify.check_sampled_output(out, idx, ref.reshape(-1)[idx], Tolerance(1e-2, 1.6e-2, 1e-2), dt, name="y")
    assert not res.ok and "y[1, 27] not written" in res.message
    out = dtypes.quantize(ref, dt)
    out[20, 0] = dtypes.quantize(np.array([7.0]), dt)[0]
    res = verify.check_sampled_output(out, idx, ref.reshape(-1)[idx], Tolerance(1e-2, 1.6e-2, 1e-2), dt, name="y")
    assert not res.ok and "y[20, 0]" in res.message and "sampled: 4 of 2000" in res.message
    assert verify.check_sampled_output(dtypes.quantize(ref, dt), idx, ref.reshape(-1)[idx],
                                       Tolerance(1e-2, 1.6e-2, 1e-2), dt, name="y").ok


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found")
def test_count_diff_and_fingerprint_kernels_equal_numpy():
    lib = _host_lib()
    rng = np.random.default_rng(2)
    for size, word in verify._WORDS.items():
        dt = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[size]
        a = rng.integers(0, np.iinfo(dt).max, 70001, dtype=dt, endpoint=True)
        b = a.copy()
        b[[0, 5, 70000]] ^= 1
        parts = np.zeros(7, dtype=np.uint64)
        getattr(lib, f"run_count_diff_u{8 * size}")(_p(a), _p(b), ctypes.c_longlong(a.size), _p(parts), ctypes.c_int(7))
        assert int(parts.sum()) == 3
        fp = np.zeros((7, 2), dtype=np.uint64)
        getattr(lib, f"run_fingerprint_u{8 * size}")(_p(a), ctypes.c_longlong(a.size), _p(fp), ctypes.c_int(7))
        mask = (1 << 64) - 1
        assert (sum(int(v) for v in fp[:, 0]) & mask, sum(int(v) for v in fp[:, 1]) & mask) == verify.fingerprint(a)


def test_stats_spec_semantics():
    """The numbers behind every verdict: counts, max |err| and the L2 sums, whatever the chunking."""
    ref = np.array([1.0, 2.0, -3.0, 4.0, np.nan])
    out = dtypes.quantize(np.array([1.0, 2.5, np.nan, 4.0, 1.0]), "fp32")
    dtypes.bits_view(out, "fp32")[3] = dtypes.poison_bits("fp32")
    st = verify._stats(out, ref, FP32, "fp32", chunk=2)
    # poison 1 (index 3), non-finite 1 (index 2: NaN that is not poison), ref non-finite 1, bad 1 (0.5 off)
    assert list(st[:4]) == [1, 1, 1, 1]
    assert st[4] == 0.5 and st[5] == 0.25 and st[6] == 1.0 + 4.0 + 9.0 + 16.0
    np.testing.assert_array_equal(st, verify._stats(out, ref, FP32, "fp32", chunk=1 << 20))


def test_inputs_unchanged_uses_wide_words_but_reports_elements():
    x = dtypes.quantize(_ref((3, 8)), "bf16")        # 48 bytes: compared as 6 uint64 words
    assert verify._words(x).dtype == np.uint64 and verify._words(x[:, :3]).dtype == np.uint16
    before = {"x": x.copy(), "w": np.ones(3, dtype=np.float32)}
    after = {"x": x.copy(), "w": before["w"].copy()}
    after["x"][2, 5] ^= 0x8000
    after["x"][2, 6] ^= 1
    v = verify.inputs_unchanged(before, after)
    assert not v and "input x[2, 5] was modified" in v.message and "2 of 24 elements changed" in v.message
    odd = np.arange(5, dtype=np.uint8)
    assert verify.inputs_unchanged(odd, odd.copy())
    assert verify.fingerprints({"a": odd, "b": x}) == {"a": verify.fingerprint(odd), "b": verify.fingerprint(x)}


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found")
def test_int32_outputs_are_checked_exactly_and_poison_is_unwritten():
    """An int32 output (an index) against its float64 reference: the kernel and the array spec
    agree, a value off by one fails at atol 0, an unwritten element is reported as such."""
    tol = Tolerance(atol=0.0, rtol=0.0)
    ref = np.arange(-50, 950, dtype=np.float64) * 3
    out = dtypes.quantize(ref, "int32")
    assert verify.check_output(out, ref, tol, "int32", name="idx").ok
    out[7] += 1
    out.view(np.uint32)[9] = dtypes.poison_bits("int32")
    want = verify._chunk_stats(out, ref, tol, "int32")
    np.testing.assert_array_equal(_host_stats(out, ref, tol, "int32")[:5], want[:5])
    assert want[0] == 1 and want[1] == 0 and want[3] == 2       # the poisoned one is "bad" too (0 err)
    res = verify.check_output(out, ref, tol, "int32", name="idx")
    assert not res.ok and "idx[9] not written" in res.message
    out.view(np.uint32)[9] = np.uint32(out[8] + 3)
    res = verify.check_output(out, ref, tol, "int32", name="idx")
    assert not res.ok and "idx[7] = " in res.message and "1 of 1000" in res.message
