"""CPU tests of the RMSNorm backward operation (kernels/rmsnorm_bwd/operation.py): cases, inputs,
the float64 reference against an independent formula, the tolerance rules (dx per dtype, dw
growing with M), sampled references, bytes and baselines."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from fitness import dtypes, verify
from fitness.family import load_family

FAMILY = load_family("rmsnorm_bwd")
OP = sys.modules["_kernels_rmsnorm_bwd_operation"]


def fam(**kw):
    return type(FAMILY)(**kw)


def _inputs(case, seed=0, dist="normal", f=FAMILY):
    return f.make_inputs(case, np.random.default_rng(seed), dist)


def _independent_reference(case, inp):
    """dx = rstd*w*dy - rstd^3 * x * mean(x*w*dy) and dw = rstd-weighted column sums, row by row
    in plain Python-level float64 loops over rows (no shared code with operation.py)."""
    M, N, dt = OP._params(case)
    x = dtypes.to_float64(inp["x"], dt)
    dy = dtypes.to_float64(inp["dy"], dt)
    w = inp["w"].astype(np.float64)
    r = inp["rstd"].astype(np.float64)
    dx = np.empty((M, N))
    dw = np.zeros(N)
    for i in range(M):
        m = float(np.dot(x[i] * w, dy[i])) / N
        dx[i] = r[i] * w * dy[i] - r[i] ** 3 * x[i] * m
        dw += dy[i] * x[i] * r[i]
    return dx, dw


def _fp32_kernel(case, inp, order="blocked"):
    """What an honest kernel computes: fp32 arithmetic from the stored inputs, dx rounded once;
    dw summed in fp32 over rows in blocks (order="blocked", like per-CTA partials then a column
    sum) or by one accumulator over every row in order (order="sequential", the worst order)."""
    M, N, dt = OP._params(case)
    x = dtypes.to_float64(inp["x"], dt).astype(np.float32)
    dy = dtypes.to_float64(inp["dy"], dt).astype(np.float32)
    w = inp["w"].astype(np.float32)
    r = inp["rstd"].astype(np.float32)[:, None]
    with np.errstate(all="ignore"):
        s1 = (x * w * dy).sum(axis=1, dtype=np.float32, keepdims=True)
        c = r * s1 / np.float32(N)
        xh = x * r
        dx = r * (w * dy - xh * c)
        t = dy * xh
        if order == "sequential":
            dw = np.zeros(N, np.float32)
            for i in range(M):
                dw += t[i]
        else:
            parts = [t[i:i + 256].sum(axis=0, dtype=np.float32) for i in range(0, M, 256)]
            dw = np.sum(np.stack(parts), axis=0, dtype=np.float32)
    return dtypes.quantize(dx.astype(np.float64), dt), dw


# -- cases ------------------------------------------------------------------------------------
def test_quack_matrix_and_model_widths():
    cases = FAMILY.benchmark_cases("quack")
    assert len(cases) == 33
    shapes = {(c.params["M"], c.params["N"]) for c in cases}
    assert shapes == {(32768, n) for n in (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)} | {
        (16384, 131072), (8192, 262144)}
    assert {c.params["dtype"] for c in cases} == {"bf16", "fp16", "fp32"}
    models = FAMILY.benchmark_cases("models:bf16")
    assert {(c.params["M"], c.params["N"]) for c in models} == {(m, n) for n in (4096, 5120, 7168, 8192, 14336)
                                                                 for m in (1, 128, 4096)}
    assert all("with_rstd" not in c.params for c in cases)


def test_check_cases_cover_what_the_benchmark_does_not():
    cases = FAMILY.check_cases()
    for d in ("bf16", "fp16", "fp32"):
        mine = [c for c in cases if c.params["dtype"] == d]
        assert any(c.params["M"] == 65543 for c in mine)
        huge = [c for c in mine if c.params.get("sample_rows")]
        assert huge and all(c.params["M"] * c.params["N"] > 2**31 for c in huge)
        assert {c.params["N"] for c in huge} == {4104, 262152, 65536}
        assert any(c.params.get("nonfinite") for c in mine)
        assert any(c.params.get("x_scale") for c in mine)
        widths = {c.params["N"] for c in mine}
        assert {1000, 4104, 8200, 262152, 393224} <= widths


def test_exact_check_cases_repeat_each_check_property_at_evenly_dividing_shapes():
    """The exact entries (space v10) run only where rows divide evenly; every property the forward's
    CHECK cases test at awkward widths is tested again at such a shape, none a benchmark shape, and every
    benchmark width (each an exact entry of its own since v11's exact_width) has such a case."""
    bench = {(c.params["M"], c.params["N"]) for c in FAMILY.benchmark_cases("all")}
    for d in ("bf16", "fp16", "fp32"):
        even = [c for c in FAMILY.check_cases() if c.params["dtype"] == d and c.params["N"] & (c.params["N"] - 1) == 0
                and c.params["N"] >= 512]
        assert all((c.params["M"], c.params["N"]) not in bench for c in even)
        assert all(c.params["M"] % 256 == 0 or c.params["N"] >= 65536 for c in even)
        assert any(c.params["M"] > 65535 for c in even)
        assert any(c.params["M"] * c.params["N"] > 2**31 and c.params.get("sample_rows") for c in even)
        assert any(c.params.get("nonfinite") for c in even)
        assert any(c.params.get("x_scale") for c in even) and any(c.params.get("eps") for c in even)
        widths = {c.params["N"] for c in FAMILY.benchmark_cases("all") if c.params["dtype"] == d}
        exact = {n for _, n, _ in sys.modules[type(FAMILY).__mro__[1].__module__].EXACT_CHECKS}
        assert widths <= exact, widths - exact


def test_io_workspace_and_args():
    case = FAMILY.make_case(7, 1000, "bf16")
    ins, outs = FAMILY.io(case)
    assert {k: (v.shape, v.dtype) for k, v in ins.items()} == {
        "x": ((7, 1000), "bfloat16"), "w": ((1000,), "float32"), "dy": ((7, 1000), "bfloat16"),
        "rstd": ((7,), "float32")}
    assert {k: (v.shape, v.dtype) for k, v in outs.items()} == {"dx": ((7, 1000), "bfloat16"),
                                                                 "dw": ((1000,), "float32")}
    assert FAMILY.workspace(case)["dw_part"].shape == (7, 1000)
    big = FAMILY.make_case(32768, 262144, "bf16")
    rows = FAMILY.workspace(big)["dw_part"].shape[0]
    assert rows == 33 and rows * 262144 * 4 <= OP.REGISTER_BYTES
    assert FAMILY.workspace(FAMILY.make_case(32768, 256, "bf16"))["dw_part"].shape == (132 * 16, 256)
    args = FAMILY.main_args(case)
    assert args[:7] == ("x", "w", "dy", "rstd", "dx", "dw", "dw_part")
    assert [type(a) for a in args[7:]] == [np.int32, np.int32, np.float32]


# -- inputs and reference ---------------------------------------------------------------------
@pytest.mark.parametrize("dist", ["normal", "wide"])
def test_inputs_rstd_follows_the_forward_formula(dist):
    case = FAMILY.make_case(9, 264, "bf16")
    inp = _inputs(case, 3, dist)
    x = dtypes.to_float64(inp["x"], "bf16")
    want = (1.0 / np.sqrt((x * x).mean(axis=1) + 1e-6)).astype(np.float32)
    assert inp["rstd"].dtype == np.float32 and np.array_equal(inp["rstd"], want)
    dy = dtypes.to_float64(inp["dy"], "bf16")
    assert np.all(np.abs(dy) >= 0.99e-3) and 0.8 < dy.std() < 1.2            # dy is "normal" in both
    again = _inputs(case, 3, dist)
    assert all(np.array_equal(again[k], inp[k]) for k in inp)
    if dist == "wide":                    # x carries the magnitudes: rstd spans decades
        assert inp["rstd"].max() / inp["rstd"].min() > 100


@pytest.mark.parametrize("dt", ["bf16", "fp16", "fp32"])
def test_reference_equals_an_independent_formula(dt):
    case = FAMILY.make_case(13, 520, dt)
    for dist in ("normal", "wide"):
        inp = _inputs(case, 1, dist)
        ref = FAMILY.reference(case, inp)
        dx, dw = _independent_reference(case, inp)
        np.testing.assert_allclose(ref["dx"], dx, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(ref["dw"], dw, rtol=1e-10, atol=1e-12)


def test_reference_in_row_blocks_equals_one_block(monkeypatch):
    case = FAMILY.make_case(37, 264, "fp16")
    inp = _inputs(case, 2, "wide")
    whole = FAMILY.reference(case, inp)
    monkeypatch.setattr(OP, "_CHUNK_ELEMS", 264 * 5)
    blocks = FAMILY.reference(case, inp)
    np.testing.assert_array_equal(whole["dx"], blocks["dx"])
    np.testing.assert_allclose(whole["dw"], blocks["dw"], rtol=1e-13)


def test_sampled_reference_equals_the_full_one():
    f = FAMILY
    case = f.make_case(50, 264, "bf16", sample_rows=6)
    inp = _inputs(case, 4)
    full = f.reference(case, inp)
    sample = f.reference_sample(case, inp, np.random.default_rng(0))
    idx, vals = sample["dx"]
    assert {0, 49 * 264} <= set(idx.tolist())
    np.testing.assert_allclose(vals, full["dx"].reshape(-1)[idx], rtol=1e-12)
    cols, dw = sample["dw"]
    assert np.array_equal(cols, np.arange(264))
    np.testing.assert_allclose(dw, full["dw"], rtol=1e-12)
    assert f.reference_sample(f.make_case(50, 264, "bf16"), inp, np.random.default_rng(0)) is None


def test_nonfinite_rows_follow_ieee_propagation():
    case = FAMILY.make_case(8, 264, "fp32", nonfinite=True)
    inp = _inputs(case, 5)
    ref = FAMILY.reference(case, inp)
    finite_rows = [0, 2, 4, 7]
    assert np.isfinite(ref["dx"][finite_rows]).all()
    assert np.isnan(ref["dx"][[1, 3, 5, 6]]).all()              # their dot product is NaN
    assert inp["rstd"][1] == 0 and np.isnan(inp["rstd"][5])
    assert np.isnan(ref["dw"]).all()                             # a NaN row has rstd NaN
    tol = FAMILY.tolerances(case)
    assert tol["dx"].match_nonfinite and tol["dw"].match_nonfinite
    dx, dw = _fp32_kernel(case, inp)
    assert verify.check_output(dx, ref["dx"], tol["dx"], "fp32").ok
    assert verify.check_output(dw, ref["dw"], tol["dw"], "fp32").ok


# -- tolerances -------------------------------------------------------------------------------
def test_tolerance_table_and_dw_rule():
    for dt, (a, r, l2) in {"bf16": (1e-2, 1.6e-2, 1e-2), "fp16": (2e-3, 2e-3, 2e-3),
                           "fp32": (1e-5, 1e-4, 1e-5)}.items():
        t = FAMILY.tolerances(FAMILY.make_case(4, 256, dt))["dx"]
        assert (t.atol, t.rtol, t.rel_l2) == (a, r, l2)
    atols = [FAMILY.tolerances(FAMILY.make_case(m, 256, "bf16"))["dw"].atol for m in (1, 128, 4096, 32768, 65543)]
    assert atols == sorted(atols) and atols[-1] / atols[2] > 10                  # grows with M
    assert atols[-1] == pytest.approx(4 * (65543 + 64) * 2**-24)
    assert atols[-1] < 0.02          # far below one term (|dy*xhat| ~ 0.6)


@pytest.mark.parametrize("dt", ["bf16", "fp32"])
def test_an_honest_fp32_sum_in_the_worst_order_passes_and_an_off_by_one_row_fails(dt):
    """65543 rows (more than any benchmark): one fp32 accumulator over every row in order stays
    within dw's tolerance; a dw missing the last row, or counting the first twice, fails."""
    case = FAMILY.make_case(65543, 264, dt)
    tol = FAMILY.tolerances(case)["dw"]
    for dist in ("normal", "wide"):
        inp = _inputs(case, 7, dist)
        ref = FAMILY.reference(case, inp)
        _, dw = _fp32_kernel(case, inp, order="sequential")
        res = verify.check_output(dw, ref["dw"], tol, "fp32", name="dw")
        assert res.ok, res.message
        assert np.abs(dw - ref["dw"]).max() < 0.6 * tol.atol
        x = dtypes.to_float64(inp["x"], dt)
        dy = dtypes.to_float64(inp["dy"], dt)
        first = dy[0] * x[0] * float(inp["rstd"][0])
        last = dy[-1] * x[-1] * float(inp["rstd"][-1])
        for wrong in (ref["dw"] - last, ref["dw"] + first):
            bad = verify.check_output(wrong.astype(np.float32), ref["dw"], tol, "fp32", name="dw")
            assert not bad.ok


@pytest.mark.parametrize("dt", ["bf16", "fp16", "fp32"])
def test_an_honest_fp32_kernel_passes_on_the_small_check_cases(dt):
    f = fam(dtypes=(dt,))
    small = [c for c in f.check_cases() if c.params["M"] * c.params["N"] <= 200 * 8200]
    assert len(small) >= 20
    for i, case in enumerate(small):
        for dist in f.distributions:
            inp = f.make_inputs(case, np.random.default_rng(i), dist)
            ref = f.reference(case, inp)
            dx, dw = _fp32_kernel(case, inp)
            tols = f.tolerances(case)
            for name, got, d in (("dx", dx, dt), ("dw", dw, "fp32")):
                res = verify.check_output(got, ref[name], tols[name], d, name=name)
                assert res.ok, f"{case.id} {dist}: {res.message}"


def test_dx_tolerance_scales_with_rstd_where_x_is_tiny():
    """The eps case x_scale = 1e-3 (rstd ~ 707, dx RMS ~ 711): an honest fp32 kernel that sums
    the row's dot product in 8-wide blocks in order, then forms dx as rstd*w*dy - (rstd*xhat)*c,
    errs by ~2e-5 where the two terms cancel. The forward's fp32 atol (1e-5) failed it on 4 of
    these 12 draws (session 31's H100 table lost two verified genomes so); dx_tolerance's floor
    (16 ulps of 707) holds it under 0.1 of the bound, while a dx without the mean term, with c
    off by 0.1 %, or scaled by 1 + 3e-4 still fails."""
    case = FAMILY.make_case(512, 1024, "fp32", x_scale=1e-3)
    tol = FAMILY.tolerances(case)["dx"]
    old = OP.DX_TOLERANCES["fp32"]
    assert tol.atol == pytest.approx(16 * 2**-24 / np.sqrt(1e-6 + 1e-6)) and tol.rtol == old.rtol
    assert FAMILY.tolerances(FAMILY.make_case(512, 1024, "fp32"))["dx"] == old       # unit scale: unchanged
    old_failures = 0
    for seed in range(16, 28):
        inp = _inputs(case, seed)
        ref = FAMILY.reference(case, inp)["dx"]
        x, dy, w = inp["x"], inp["dy"], inp["w"].astype(np.float32)
        r = inp["rstd"].astype(np.float32)[:, None]
        s = np.zeros((case.params["M"], 1), np.float32)
        for j in range(0, case.params["N"], 8):
            s += (x[:, j:j + 8] * w[j:j + 8] * dy[:, j:j + 8]).sum(axis=1, dtype=np.float32, keepdims=True)
        c = r * s / np.float32(case.params["N"])
        dx = r * (w * dy) - (r * x * r) * c
        bound = tol.atol + tol.rtol * np.abs(ref)
        assert (np.abs(dx - ref) / bound).max() < 0.1, seed
        old_failures += not verify.check_output(dx, ref, old, "fp32").ok
        for wrong in (r * (w * dy), r * (w * dy) - (r * x * r) * (c * np.float32(1.001)), dx * np.float32(1 + 3e-4)):
            assert not verify.check_output(wrong.astype(np.float32), ref, tol, "fp32").ok
    assert old_failures >= 3


def test_a_wrong_dx_fails():
    case = FAMILY.make_case(7, 1000, "bf16")
    inp = _inputs(case, 0)
    ref = FAMILY.reference(case, inp)
    tol = FAMILY.tolerances(case)["dx"]
    r = inp["rstd"].astype(np.float64)[:, None]
    no_mean = dtypes.quantize(r * inp["w"] * dtypes.to_float64(inp["dy"], "bf16"), "bf16")   # forgets the mean term
    assert not verify.check_output(no_mean, ref["dx"], tol, "bf16").ok
    assert not verify.check_output(dtypes.quantize(ref["dx"] * 1.03, "bf16"), ref["dx"], tol, "bf16").ok


# -- bytes and baselines ----------------------------------------------------------------------
def test_bytes_model_and_nondeterministic_dw():
    case = FAMILY.make_case(32768, 4096, "bf16")
    assert FAMILY.bytes_moved(case) == 3 * 32768 * 4096 * 2 + 4 * 32768 + 8 * 4096
    assert FAMILY.bytes_moved(case) == OP.bytes_for(32768, 4096, "bf16")
    assert FAMILY.flops(case) > 0
    assert tuple(FAMILY.nondeterministic_outputs(case)) == ("dw",)


def test_baselines_are_declared_and_lazy():
    names = {b.name: b for b in FAMILY.baselines()}
    assert set(names) == {"torch", "quack", "liger", "int21", "roofline"}
    assert not names["roofline"].objective
    assert all(names[n].objective for n in ("torch", "quack", "liger", "int21"))
    for b in names.values():
        assert isinstance(b.available(), bool)


def test_torch_baseline_in_place_gives_the_formulas_bits_and_the_reference():
    """The torch baseline (in place, to keep its reserved memory at three M x N fp32 tensors: the
    judge verifies the next 2**31-element case before torch's cache is released) computes the
    same bits as the out-of-place formula, within tolerance of the float64 reference, and leaves
    its inputs alone. Runs where torch is importable (CPU tensors)."""
    torch = pytest.importorskip("torch")
    for dt in ("bf16", "fp16", "fp32"):
        case = FAMILY.make_case(37, 1000, dt)
        inp = _inputs(case, seed=5, dist="wide")
        before = {k: v.copy() for k, v in inp.items()}
        run = OP._prepare_torch(case, inp)
        got = run.as_outputs(run())
        x, w, dy, rstd = OP._tensors(case, inp)
        want = run.as_outputs(OP.torch_formula_reference(x, w, dy, rstd))
        for name in ("dx", "dw"):
            assert np.array_equal(np.asarray(got[name]), np.asarray(want[name])), (dt, name)
        ref = FAMILY.reference(case, inp)
        tols = FAMILY.tolerances(case)
        dx = np.asarray(got["dx"]).view(dtypes.storage_dtype(dt))
        assert verify.check_output(dx, ref["dx"], tols["dx"], dt).ok, dt
        assert verify.check_output(np.asarray(got["dw"]), ref["dw"], tols["dw"], "fp32").ok, dt
        for k in inp:
            assert np.array_equal(inp[k], before[k]), (dt, k)
    del torch
