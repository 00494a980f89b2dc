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
