"""Tolerance.group_rel_l2 in fitness.verify: the relative L2 error bounded per group of elements
(per sequence and head for a packed batch), so one wrong token cannot hide under the whole
output's norm. numpy path (the cupy path runs the same array code)."""

from __future__ import annotations

import numpy as np
import pytest

from fitness import dtypes, verify
from fitness.family import Tolerance

ROWS = (0, 50, 51, 51, 1000)         # three sequences and an empty one: 50, 1, 0 and 949 tokens


def _o(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1000, 3, 8))


def _tol(**kw) -> Tolerance:
    return Tolerance(atol=np.inf, rtol=0.0, rel_l2=0.05, **kw)


def test_a_wrong_token_of_one_head_hides_under_the_global_norm_but_not_in_its_group():
    ref = _o()
    out = ref.copy()
    out[20, 2] = -ref[20, 2]                         # one token of head 2 in the first sequence
    stored = dtypes.quantize(out, "fp32")
    plain = verify.check_output(stored, ref, _tol(), "fp32", name="o")
    assert plain.ok and plain.rel_l2 < 0.05          # 1/3000 of the rows: the global test passes
    res = verify.check_output(stored, ref, _tol(group_rel_l2=0.05, group_axes=2, group_rows=ROWS), "fp32", name="o")
    assert not res.ok and res.rel_l2 == pytest.approx(plain.rel_l2)
    assert res.message.startswith("o[0:50, 2]: relative L2 error") and "1 of 12 groups over" in res.message
    assert res.group_rel_l2 > 0.1


def test_every_row_its_own_group_and_the_first_bad_block_is_named():
    ref = np.random.default_rng(1).standard_normal((4, 3, 6, 5))     # a state [N, H, V, K]
    out = ref.copy()
    out[2, 1, 0, :] += 0.2
    tol = _tol(group_rel_l2=0.05, group_axes=2)
    res = verify.check_output(dtypes.quantize(out, "fp32"), ref, tol, "fp32", name="final_state")
    assert not res.ok and res.message.startswith("final_state[2:3, 1]:") and "1 of 12 groups" in res.message
    good = verify.check_output(dtypes.quantize(ref, "fp32"), ref, tol, "fp32", name="final_state")
    assert good.ok and good.message == "" and good.group_rel_l2 < 1e-6


def test_rounding_error_passes_and_the_worst_group_is_recorded():
    ref = _o(2)
    out = dtypes.quantize(ref, "bf16")
    res = verify.check_output(out, ref, _tol(group_rel_l2=0.01, group_axes=2, group_rows=ROWS), "bf16", name="o")
    assert res.ok and 1e-3 < res.group_rel_l2 < 0.01 and res.group_rel_l2 >= res.rel_l2 * 0.5


def test_a_group_with_an_all_zero_reference_holds_its_error_norm_to_the_bound():
    ref = _o(3)
    ref[50] = 0.0                                                    # the one-token sequence
    out = ref.copy()
    out[50, 0, 3] = 0.1
    tol = _tol(group_rel_l2=0.05, group_axes=2, group_rows=ROWS)
    res = verify.check_output(dtypes.quantize(out, "fp32"), ref, tol, "fp32", name="o")
    assert not res.ok and res.message.startswith("o[50:51, 0]:")
    assert verify.check_output(dtypes.quantize(ref, "fp32"), ref, tol, "fp32", name="o").ok


def test_groups_are_chunk_independent():
    ref = _o(4)
    out = ref * (1 + 0.01 * np.random.default_rng(5).standard_normal(ref.shape))
    tol = _tol(group_rel_l2=1.0, group_axes=2, group_rows=ROWS)
    a = verify.group_rel_l2(dtypes.quantize(out, "fp32"), ref, tol, "fp32")
    b = verify.group_rel_l2(dtypes.quantize(out, "fp32"), ref, tol, "fp32", chunk=7)
    assert a.shape == (4, 3) and np.allclose(a, b, rtol=1e-12, atol=0)
    assert (a[2] == 0).all()                                        # the empty sequence
    want = np.linalg.norm(dtypes.round_trip(out, "fp32")[51:] - ref[51:], axis=(0, 2)) / np.linalg.norm(ref[51:], axis=(0, 2))
    assert np.allclose(a[3], want, rtol=1e-12) and (a[3] > 5e-3).all()


def test_bad_groups_are_the_familys_error():
    for kw in (dict(group_rows=(1, 5)), dict(group_rows=(0, 5, 3)), dict(group_axes=0)):
        with pytest.raises(ValueError, match="group_"):
            _tol(group_rel_l2=0.1, **kw)
    ref = _o()
    with pytest.raises(ValueError, match="end at 999"):
        verify.check_output(dtypes.quantize(ref, "fp32"), ref, _tol(group_rel_l2=0.1, group_axes=2,
                                                                   group_rows=(0, 999)), "fp32")
    with pytest.raises(ValueError, match="group_axes = 4"):
        verify.check_output(dtypes.quantize(ref, "fp32"), ref, _tol(group_rel_l2=0.1, group_axes=4), "fp32")


def test_sampled_checks_skip_the_groups():
    ref = _o()
    out = dtypes.quantize(ref, "fp32")
    idx = np.array([0, 7, 4000])
    tol = _tol(group_rel_l2=0.05, group_axes=2, group_rows=ROWS)
    assert verify.check_sampled_output(out, idx, ref.reshape(-1)[idx], tol, "fp32", name="o").ok


def test_whole_scale_holds_every_row_to_the_outputs_rms():
    """group_scale = "whole": each (token, head) row's error RMS against the whole reference's
    RMS. A row of tiny values with a large relative error passes; a wrong token of ordinary
    magnitude fails, however long its sequence."""
    ref = _o(6)
    ref[10, 1] *= 1e-4                                               # a row of tiny outputs
    out = ref.copy()
    out[10, 1] *= 2.0                                                # 100 % off, but tiny
    tol = _tol(group_rel_l2=0.1, group_axes=2, group_scale="whole")
    assert not verify.check_output(dtypes.quantize(out, "fp32"), ref, _tol(group_rel_l2=0.1, group_axes=2),
                                   "fp32", name="o").ok                # its own scale trips on it
    res = verify.check_output(dtypes.quantize(out, "fp32"), ref, tol, "fp32", name="o")
    assert res.ok and res.group_rel_l2 < 1e-3
    out[700, 0] = 0.0                                                # a token never computed
    res = verify.check_output(dtypes.quantize(out, "fp32"), ref, tol, "fp32", name="o")
    assert not res.ok and res.message.startswith("o[700:701, 0]: RMS error") and "of the whole reference" in res.message
    rel = verify.group_rel_l2(dtypes.quantize(out, "fp32"), ref, tol, "fp32")
    assert rel.shape == (1000, 3)
    want = np.sqrt((ref[700, 0] ** 2).mean() / (ref ** 2).mean())
    assert rel[700, 0] == pytest.approx(want, rel=1e-6)
    seg = _tol(group_rel_l2=0.1, group_axes=2, group_rows=ROWS, group_scale="whole")
    r2 = verify.group_rel_l2(dtypes.quantize(out, "fp32"), ref, seg, "fp32")
    assert r2.shape == (4, 3) and r2[2].tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="group_scale"):
        _tol(group_rel_l2=0.1, group_scale="max")
