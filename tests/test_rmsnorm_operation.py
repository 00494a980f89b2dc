"""kernels/rmsnorm/operation.py: cases, inputs, reference, tolerances, bytes (the cheat kernels'
compile test lives with the suite, tests/test_cheats_gpu.py)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from fitness import dtypes, verify
from fitness.family import KERNELS_DIR, import_sibling

op = import_sibling(str(KERNELS_DIR / "rmsnorm" / "family.py"), "operation")


class Family(op.RMSNormOperation):
    """The operation with trivial kernels, to exercise the operation half alone."""

    def render(self, genome):
        return ""

    def launch(self, genome, case):
        return None


def fam(**kw) -> Family:
    return Family(**kw)


def _simple_reference(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        ms = sum(float(v) * float(v) for v in x[i]) / x.shape[1]
        out[i] = x[i] / np.sqrt(ms + eps) * w
    return out


def _fp32_kernel(case, inputs) -> dict[str, np.ndarray]:
    """What a careful fp32-accumulating kernel computes, rounded to the output dtype."""
    dt, wdt = case.params["dtype"], case.params["weight_dtype"]
    x = dtypes.to_float64(inputs["x"], dt).astype(np.float32)
    w = dtypes.to_float64(inputs["w"], wdt).astype(np.float32)
    ss = np.add.reduce(x * x, axis=1, dtype=np.float32)
    r = (np.float32(1) / np.sqrt(ss / np.float32(x.shape[1]) + np.float32(case.params["eps"]))).astype(np.float32)
    y = (x * r[:, None] * w[None, :]).astype(np.float32)
    return {"y": dtypes.quantize(y, dt), "rstd": r}


# -- cases --------------------------------------------------------------------------------------
def test_quack_matrix():
    cases = fam().benchmark_cases("quack")
    assert len(cases) == 11 * 3
    ids = [c.id for c in cases]
    assert len(set(ids)) == len(ids)
    assert "bf16/32768x256" in ids and "fp32/8192x262144" in ids and "fp16/16384x131072" in ids
    shapes = {(c.params["M"], c.params["N"]) for c in cases}
    assert shapes == {(32768, 2 ** k) for k in range(8, 17)} | {(16384, 131072), (8192, 262144)}
    assert all(c.params["weight_dtype"] == "fp32" and c.params["eps"] == 1e-6 for c in cases)
    assert [c.id for c in fam().benchmark_cases("default")] == ids


def test_matrix_dtype_selection_and_joins():
    bf = fam().benchmark_cases("quack:bf16")
    assert len(bf) == 11 and all(c.params["dtype"] == "bf16" for c in bf)
    assert bf[0].id == "bf16/32768x256"
    two = fam().benchmark_cases("models:bf16,fp32")
    assert len(two) == 15 * 2
    assert {(c.params["M"], c.params["N"]) for c in two} == {(m, n) for n in (4096, 5120, 7168, 8192, 14336)
                                                             for m in (1, 128, 4096)}
    both = fam().benchmark_cases("quack+models:bf16")
    assert len(both) == 11 + 15
    assert len(fam().benchmark_cases("all:fp16")) == 26
    smoke = fam().benchmark_cases("smoke")
    assert 0 < len(smoke) <= 15 and all(c.params["M"] * c.params["N"] <= 1 << 24 for c in smoke)
    with pytest.raises(ValueError, match="unknown RMSNorm benchmark matrix"):
        fam().benchmark_cases("nope")
    with pytest.raises(ValueError):
        fam().benchmark_cases("quack:int8")


def test_matrix_names_one_shape():
    one = fam().benchmark_cases("8192x262144:fp32")
    assert [c.id for c in one] == ["fp32/8192x262144"]
    joined = fam().benchmark_cases("smoke+4x4096+4x4096:bf16")
    assert joined[-1].id == "bf16/4x4096" and len(joined) == len(fam().benchmark_cases("smoke:bf16")) + 1
    for bad in ("0x4096", "8x", "x8", "8x8x8", "-1x8"):
        with pytest.raises(ValueError, match="unknown RMSNorm benchmark matrix"):
            fam().benchmark_cases(bad)


def test_case_ids_carry_options():
    assert fam(with_rstd=True).benchmark_cases("smoke:bf16")[0].id.endswith("/rstd")
    c = fam(weight_dtype="same").make_case(7, 520, "fp16")
    assert c.id == "fp16/7x520/wfp16" and c.params["weight_dtype"] == "fp16"
    assert fam(dtypes=("bf16",)).benchmark_cases("smoke")[0].params["dtype"] == "bf16"


def test_check_cases_cover_what_the_benchmark_does_not():
    op_mod = import_sibling(str(KERNELS_DIR / "rmsnorm" / "family.py"), "operation")
    f = fam()
    cases = f.check_cases()
    assert len({c.id for c in cases}) == len(cases)
    assert {c.params["dtype"] for c in cases} == {"bf16", "fp16", "fp32"}
    bench = f.benchmark_cases("all")
    max_m = max(c.params["M"] for c in bench)
    bench_widths = sorted({c.params["N"] for c in bench})
    for d in ("bf16", "fp16", "fp32"):
        mine = [c for c in cases if c.params["dtype"] == d]
        assert {1, 7, 199} <= {c.params["M"] for c in mine}
        ns = {c.params["N"] for c in mine}
        assert all(n % 8 == 0 for n in ns) and {1000, 4104, 520, 256, 8200} <= ns
        # every range between benchmark widths has its first width and one inside, not a power of two
        for a, b in zip(bench_widths, bench_widths[1:]):
            inside = [n for n in ns if a < n < b and n & (n - 1)]
            assert a + 8 in ns and len(inside) >= 1, (a, b)
        assert any(n > bench_widths[-1] for n in ns)                  # the open-ended last range
        assert any(c.params["M"] > max(65536, max_m) for c in mine)  # more rows than any benchmark
        huge = [c for c in mine if c.params["M"] * c.params["N"] > 2**31]
        assert len(huge) >= 2 and all(c.params.get("sample_rows") for c in huge)
        assert any(c.params.get("x_scale", 1.0) < 0.01 for c in mine)        # mean square ~ eps
        assert any(c.params["eps"] >= 0.1 for c in mine)
        assert any(c.params.get("nonfinite") for c in mine)
    assert all(c.params["N"] < 2**20 for c in cases) and op_mod.range_check_widths()[0] < 256


def test_small_x_scale_makes_eps_matter_and_nonfinite_rows_follow_torch():
    f = fam()
    case = f.make_case(199, 1000, "bf16", x_scale=1e-3)
    x = f.make_inputs(case, np.random.default_rng(0), "normal")["x"]
    ms = (dtypes.to_float64(x, "bf16") ** 2).mean(axis=1)
    assert 3e-7 < np.median(ms) < 3e-6                                   # comparable to eps = 1e-6
    case = f.make_case(64, 4104, "fp32", nonfinite=True)
    inputs = f.make_inputs(case, np.random.default_rng(1), "wide")
    x = dtypes.to_float64(inputs["x"], "fp32")
    y = f.reference(case, inputs)["y"]
    assert np.isinf(x[1]).sum() == 1 and np.isnan(x[5]).sum() == 1 and np.isfinite(x[0]).all()
    assert np.isnan(y[5]).all() and np.isnan(y[1][np.isinf(x[1])]).all()
    assert (y[1][np.isfinite(x[1])] == 0).all() and np.isfinite(y[0]).all()
    assert f.tolerances(case)["y"].match_nonfinite and not f.tolerances(f.make_case(7, 520, "fp32"))["y"].match_nonfinite


def test_sampled_reference_of_a_huge_case_equals_the_full_one_on_its_rows():
    f = fam()
    case = f.make_case(300, 1000, "bf16", sample_rows=5)
    inputs = f.make_inputs(case, np.random.default_rng(2), "normal")
    full = f.reference(case, inputs)["y"].reshape(-1)
    sample = f.reference_sample(case, inputs, np.random.default_rng(3))
    idx, vals = sample["y"]
    assert idx.size == vals.size and idx.size <= 7 * 1000 and 0 in idx and 300 * 1000 - 1 in idx
    np.testing.assert_array_equal(full[idx], vals)
    assert f.reference_sample(f.make_case(300, 1000, "bf16"), inputs, np.random.default_rng(3)) is None


def test_io_and_kernel_args():
    f = fam(with_rstd=True)
    c = f.make_case(7, 520, "bf16")
    ins, outs = f.io(c)
    assert ins["x"].shape == (7, 520) and ins["x"].dtype == "bfloat16"
    assert ins["w"].shape == (520,) and ins["w"].dtype == "float32"
    assert outs["y"].shape == (7, 520) and outs["y"].dtype == "bfloat16"
    assert outs["rstd"].shape == (7,) and outs["rstd"].dtype == "float32"
    args = f.kernel_args(c)
    assert args[:4] == ("x", "w", "y", "rstd")
    assert args[4] == np.int32(7) and isinstance(args[4], np.int32) and isinstance(args[6], np.float32)
    c2 = fam().make_case(7, 520, "fp32")
    assert fam().kernel_args(c2)[3] is None and "rstd" not in fam().io(c2)[1]


# -- inputs ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("dist", ["normal", "wide"])
def test_inputs_are_rounded_never_zero_and_deterministic(dt, dist):
    f = fam()
    case = f.make_case(199, 1000, dt)
    a = f.make_inputs(case, np.random.default_rng(5), dist)
    b = f.make_inputs(case, np.random.default_rng(5), dist)
    c = f.make_inputs(case, np.random.default_rng(6), dist)
    ins, _ = f.io(case)
    for name, spec in ins.items():
        assert a[name].shape == spec.shape and a[name].dtype == dtypes.storage_dtype(spec.dtype)
        assert np.array_equal(a[name], b[name])
    assert not np.array_equal(a["x"], c["x"])
    x = dtypes.to_float64(a["x"], dt)
    w = dtypes.to_float64(a["w"], "fp32")
    assert np.isfinite(x).all() and (x != 0).all() and (w != 0).all()
    assert np.array_equal(dtypes.quantize(x, dt), a["x"])          # already exactly representable
    assert abs(w.mean() - 1.0) < 0.05 and 0.05 < w.std() < 0.2


def test_wide_inputs_span_magnitudes_with_tiny_and_huge_rows():
    f = fam()
    case = f.make_case(8, 4104, "bf16")
    x = np.abs(dtypes.to_float64(f.make_inputs(case, np.random.default_rng(1), "wide")["x"], "bf16"))
    assert x.min() < 2e-3 and x.max() > 5e2
    row_max, row_min = x.max(axis=1), x.min(axis=1)
    assert (row_max < 0.2).any(), "some rows are all tiny"
    assert (row_min > 5.0).any(), "some rows are all huge"
    assert ((row_min < 2e-3) & (row_max > 5e2)).any(), "some rows mix every magnitude"
    normal = dtypes.to_float64(f.make_inputs(case, np.random.default_rng(1), "normal")["x"], "bf16")
    assert 0.9 < normal.std() < 1.1 and np.abs(normal).min() >= 9e-4


def test_unknown_distribution_raises():
    f = fam()
    with pytest.raises(ValueError, match="distribution"):
        f.make_inputs(f.make_case(1, 256, "bf16"), np.random.default_rng(0), "uniform")


# -- reference and tolerances ------------------------------------------------------------------------
@pytest.mark.parametrize("dt", ["bf16", "fp16", "fp32"])
def test_reference_matches_the_formula(dt):
    f = fam(with_rstd=True)
    case = f.make_case(7, 520, dt)
    inputs = f.make_inputs(case, np.random.default_rng(2), "wide")
    ref = f.reference(case, inputs)
    x = dtypes.to_float64(inputs["x"], dt)
    w = dtypes.to_float64(inputs["w"], "fp32")
    assert ref["y"].dtype == np.float64 and ref["y"].shape == (7, 520)
    np.testing.assert_allclose(ref["y"], _simple_reference(x, w, 1e-6), rtol=1e-12, atol=0)
    np.testing.assert_allclose(ref["rstd"], 1 / np.sqrt((x * x).mean(axis=1) + 1e-6), rtol=1e-13)


def test_reference_without_rstd_and_with_weight_same():
    f = fam(weight_dtype="same")
    case = f.make_case(3, 256, "fp16")
    inputs = f.make_inputs(case, np.random.default_rng(3), "normal")
    assert inputs["w"].dtype == np.float16
    ref = f.reference(case, inputs)
    assert set(ref) == {"y"}
    x = dtypes.to_float64(inputs["x"], "fp16")
    np.testing.assert_allclose(ref["y"], _simple_reference(x, inputs["w"].astype(np.float64), 1e-6), rtol=1e-12)


def test_reference_in_row_chunks_equals_one_block(monkeypatch):
    f = fam(with_rstd=True)
    case = f.make_case(199, 1000, "bf16")
    inputs = f.make_inputs(case, np.random.default_rng(4), "wide")
    whole = f.reference(case, inputs)
    monkeypatch.setattr(op, "_CHUNK_ELEMS", 3000)           # 3 rows per block
    parts = f.reference(case, inputs)
    assert np.array_equal(whole["y"], parts["y"]) and np.array_equal(whole["rstd"], parts["rstd"])
    again = f.make_inputs(case, np.random.default_rng(4), "normal")   # chunked generation works too
    assert again["x"].shape == (199, 1000) and (dtypes.to_float64(again["x"], "bf16") != 0).all()


def test_tolerances_table():
    f = fam(with_rstd=True)
    tol = {d: f.tolerances(f.make_case(1, 256, d)) for d in ("bf16", "fp16", "fp32")}
    assert (tol["bf16"]["y"].atol, tol["bf16"]["y"].rtol, tol["bf16"]["y"].rel_l2) == (1e-2, 1.6e-2, 1e-2)
    assert (tol["fp16"]["y"].atol, tol["fp16"]["y"].rtol, tol["fp16"]["y"].rel_l2) == (2e-3, 2e-3, 2e-3)
    assert (tol["fp32"]["y"].atol, tol["fp32"]["y"].rtol, tol["fp32"]["y"].rel_l2) == (1e-5, 1e-4, 1e-5)
    assert (tol["bf16"]["rstd"].atol, tol["bf16"]["rstd"].rtol) == (1e-5, 1e-5)
    assert "rstd" not in fam().tolerances(fam().make_case(1, 256, "bf16"))


@pytest.mark.parametrize("dt", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("dist", ["normal", "wide"])
def test_an_honest_fp32_kernel_passes_on_every_check_case(dt, dist):
    """The tolerances are reachable by a real kernel (fp32 accumulation, rounded output)."""
    f = fam(with_rstd=True, dtypes=(dt,))
    for i, case in enumerate(f.check_cases()):
        if case.params.get("sample_rows"):
            continue                     # > 2**31 elements: judged on the device, on sampled rows
        inputs = f.make_inputs(case, np.random.default_rng(i), dist)
        ref = f.reference(case, inputs)
        got = _fp32_kernel(case, inputs)
        tols = f.tolerances(case)
        res = verify.check_output(got["y"], ref["y"], tols["y"], dt, name="y")
        assert res.ok, f"{case.id} {dist}: {res.message}"
        res = verify.check_output(got["rstd"], ref["rstd"], tols["rstd"], "fp32", name="rstd")
        assert res.ok, f"{case.id} {dist}: {res.message}"


def test_a_wrong_kernel_fails():
    f = fam()
    case = f.make_case(7, 1000, "bf16")
    inputs = f.make_inputs(case, np.random.default_rng(0), "normal")
    ref = f.reference(case, inputs)
    wrong = dtypes.quantize(ref["y"] * 1.03, "bf16")              # 3% off: beyond rtol 1.6%
    assert not verify.check_output(wrong, ref["y"], f.tolerances(case)["y"], "bf16").ok
    no_weight = dtypes.quantize(ref["y"] / dtypes.to_float64(inputs["w"], "fp32"), "bf16")
    assert not verify.check_output(no_weight, ref["y"], f.tolerances(case)["y"], "bf16").ok


# -- bytes and baselines ----------------------------------------------------------------------------
def test_bytes_model():
    f = fam()
    assert f.bytes_moved(f.make_case(32768, 4096, "bf16")) == 2 * 32768 * 4096 * 2 + 4096 * 4
    assert f.bytes_moved(f.make_case(1, 256, "fp32")) == 2 * 256 * 4 + 256 * 4
    assert fam(with_rstd=True).bytes_moved(fam(with_rstd=True).make_case(8, 512, "fp16")) == 2 * 8 * 512 * 2 + 512 * 4 + 4 * 8
    assert fam(weight_dtype="same").bytes_moved(fam(weight_dtype="same").make_case(8, 512, "bf16")) == 2 * 8 * 512 * 2 + 512 * 2
    assert op.bytes_for(32768, 4096, "bf16") == f.bytes_moved(f.make_case(32768, 4096, "bf16"))
    # the design's figure: 32768 x 4096 bf16 at 130.9 us is 4.10 TB/s
    assert f.bytes_moved(f.make_case(32768, 4096, "bf16")) / 130.9e-6 / 1e12 == pytest.approx(4.10, abs=0.01)


def test_baselines_are_declared_and_lazy():
    names = [b.name for b in fam().baselines()]
    assert names == ["torch", "torch_compile", "quack", "quack_tuned", "liger", "int21", "copy"]
    before = set(sys.modules)
    for b in fam().baselines():
        assert isinstance(b.available(), bool)
    assert not ({"torch", "quack", "liger_kernel"} & (set(sys.modules) - before))


# -- fused device kernels of the operation (cupy Elementwise/ReductionKernel sources) ---------------------
import ctypes  # noqa: E402
import shutil as _shutil  # noqa: E402

import cuda_host  # noqa: E402  (tests/cuda_host.py)


def _op_kernel_source(names=None) -> str:
    parts = []
    for name, (kind, in_p, out_p, body) in op.CUPY_KERNELS.items():
        if names is not None and name not in names:
            continue
        make = cuda_host.reduction_map_as_kernel if kind == "reduction" else cuda_host.elementwise_as_kernel
        parts.append(make(name, in_p, out_p, body))
    return "".join(parts)


def test_operation_kernels_compile_for_sm90a(tmp_path):
    if cuda_host.nvcc() is None:
        pytest.skip("nvcc not found")
    src = ("#include <cuda_fp16.h>\ntypedef __half float16;\n" + dtypes.CUDA_PREAMBLE + op.GEN_PREAMBLE
           + _op_kernel_source())
    proc = cuda_host.nvcc_cubin(src, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.skipif(_shutil.which("g++") is None, reason="g++ not found")
def test_operation_kernels_equal_the_numpy_spec():
    names = ["jf_rms_away32", "jf_rms_wide", "jf_rms_sumsq_bf16", "jf_rms_sumsq_fp32", "jf_rms_y_bf16", "jf_rms_y_fp32"]
    sigs = {n: op.CUPY_KERNELS[n] for n in names}
    wrappers = []
    for n, (kind, in_p, out_p, _) in sigs.items():
        params = cuda_host._params(in_p) + cuda_host._params(out_p)
        decl = ", ".join(f"{cuda_host.CTYPES[t]}* {v}" for t, v in params)
        call = f"{n}({', '.join(v for _, v in params)}, n)"
        wrappers.append(f'extern "C" void run_{n}({decl}, long long n, int grid) {{\n' + cuda_host.grid_loop(call) + "}\n")
    lib = cuda_host.host_library(_op_kernel_source(set(names)), "".join(wrappers))

    def run(name, *arrays):
        ptrs = [ctypes.c_void_p(np.ascontiguousarray(a).ctypes.data) for a in arrays]
        getattr(lib, f"run_{name}")(*ptrs, ctypes.c_longlong(arrays[0].size), ctypes.c_int(3))

    rng = np.random.default_rng(9)
    v = np.concatenate([rng.standard_normal(4000).astype(np.float32) * 1e-3,
                        np.array([0.0, -0.0, 1e-3, -1e-3, 0.00099, -0.00099, 5.0], np.float32)])
    y = np.empty_like(v)
    run("jf_rms_away32", v, y)
    np.testing.assert_array_equal(y, op._away_from_zero(np, v))
    case = fam(with_rstd=True).make_case(7, 520, "bf16")
    for dt in ("bf16", "fp32"):
        case = fam(with_rstd=True).make_case(7, 520, dt)
        inputs = fam(with_rstd=True).make_inputs(case, np.random.default_rng(3), "wide")
        ref = fam(with_rstd=True).reference(case, inputs)
        x = np.ascontiguousarray(inputs["x"]).reshape(-1)
        sq = np.empty(x.size)
        run(f"jf_rms_sumsq_{dt}", x, sq)
        rstd = 1.0 / np.sqrt(sq.reshape(7, 520).sum(axis=1) / 520 + 1e-6)
        np.testing.assert_allclose(rstd, ref["rstd"], rtol=1e-14)
        r = np.repeat(ref["rstd"], 520)
        w = np.tile(dtypes.to_float64(inputs["w"], "fp32"), 7)
        yy = np.empty(x.size)
        run(f"jf_rms_y_{dt}", x, r, w, yy)
        np.testing.assert_array_equal(yy.reshape(7, 520), ref["y"])
    u, s = rng.uniform(0, 1, 1000), rng.uniform(0, 1, 1000)
    lo, span = np.full(1000, -3.0), np.full(1000, 6.0)
    out = np.empty(1000)
    run("jf_rms_wide", u, s, lo, span, out)
    np.testing.assert_allclose(out, np.where(s < 0.5, -1.0, 1.0) * np.power(10.0, lo + span * u), rtol=1e-15)


def test_wide_rows_kinds_are_per_row_vectors():
    x = op._wide_rows(np, np.random.default_rng(0), 5, 13, 2000)
    mag = np.log10(np.abs(x))
    kinds = np.arange(5, 13) % 4
    assert (mag[kinds == 1] <= -1 + 1e-12).all() and (mag[kinds == 1] >= -3 - 1e-12).all()
    assert (mag[kinds == 2] >= 1 - 1e-12).all() and (mag[kinds == 2] <= 3 + 1e-12).all()
    assert mag[kinds == 0].min() < -2.5 and mag[kinds == 3].max() > 2.5
    assert 0.4 < (x < 0).mean() < 0.6


@pytest.mark.skipif(_shutil.which("g++") is None, reason="g++ not found")
@pytest.mark.parametrize("distribution", ["normal", "wide"])
@pytest.mark.parametrize("dt", ["bf16", "fp32"])
def test_device_input_generator_equals_its_numpy_spec(distribution, dt):
    """The counter-based kernels that make x on the device, run on the host through the shim,
    give the elements gen_x_spec specifies (the shim uses the host's libm, the GPU libdevice:
    both are within an ulp in double, so a rare element may round differently)."""
    name = f"jf_rms_gen_{distribution}_{dt}"
    kind, in_p, out_p, body = op.CUPY_KERNELS[name]
    params = cuda_host._params(in_p) + cuda_host._params(out_p)
    decl = ", ".join(f"{cuda_host.CTYPES[t]}* {v}" for t, v in params)
    call = f"{name}({', '.join(v for _, v in params)}, n)"
    wrapper = f'extern "C" void run_{name}({decl}, long long n, int grid) {{\n' + cuda_host.grid_loop(call) + "}\n"
    source = dtypes.CUDA_PREAMBLE + op.GEN_PREAMBLE + cuda_host.elementwise_as_kernel(name, in_p, out_p, body)
    lib = cuda_host.host_library(source.replace("fabsf(", "std::fabs("), wrapper)
    M, N, seed = 37, 520, 0x1234_5678_9ABC_DEF0
    n = M * N
    seeds = np.full(n, seed, dtype=np.uint64)
    cols = np.full(n, N, dtype=np.int64)
    out = np.zeros(n, dtype=dtypes.storage_dtype(dt))
    getattr(lib, f"run_{name}")(*(ctypes.c_void_p(a.ctypes.data) for a in (seeds, cols, out)),
                                ctypes.c_longlong(n), ctypes.c_int(5))
    want = op.gen_x_spec(seed, (M, N), distribution, dt).reshape(-1)
    differ = np.flatnonzero(out.view(dtypes.bits_dtype(dt)) != want.view(dtypes.bits_dtype(dt)))
    assert differ.size <= 2, (differ[:10], out[differ[:5]], want[differ[:5]])


@pytest.mark.parametrize("dt", ["bf16", "fp16", "fp32"])
def test_device_generator_spec_gives_the_two_distributions(dt):
    M, N = 64, 1000
    x = dtypes.to_float64(op.gen_x_spec(99, (M, N), "normal", dt), dt).reshape(M, N)
    assert abs(x.mean()) < 0.02 and abs(x.std() - 1.0) < 0.02 and np.abs(x).min() >= 0.99e-3
    y = dtypes.to_float64(op.gen_x_spec(99, (M, N), "wide", dt), dt).reshape(M, N)
    mag = np.log10(np.abs(y))
    assert mag[1::4].max() <= -0.99 and mag[2::4].min() >= 0.99          # tiny rows, huge rows
    assert mag[0::4].min() < -2.5 and mag[0::4].max() > 2.5              # mixed rows span both
    assert 0.4 < (y < 0).mean() < 0.6
    other = op.gen_x_spec(100, (M, N), "normal", dt)                       # another seed, other data
    assert (other != op.gen_x_spec(99, (M, N), "normal", dt)).mean() > 0.9
    tail = op.gen_x_spec(99, (M, N), "normal", dt, start=N * 5, count=N)  # element i depends on i only
    np.testing.assert_array_equal(tail, op.gen_x_spec(99, (M, N), "normal", dt)[N * 5:N * 6])
