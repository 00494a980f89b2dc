"""The KDA family's operation half (kernels/kda/): cases, buffers, inputs, reference, tolerances,
roofline, baselines' case support and FlashKDA's build options. CPU only, small cases."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

from fitness import dtypes, verify
from fitness.family import KERNELS_DIR, import_sibling, load_family

FAMILY = load_family("kda")
op = import_sibling(str(KERNELS_DIR / "kda" / "family.py"), "operation")
ref = import_sibling(str(KERNELS_DIR / "kda" / "family.py"), "reference")
base = import_sibling(str(KERNELS_DIR / "kda" / "family.py"), "baselines")
peers = import_sibling(str(KERNELS_DIR / "kda" / "family.py"), "peers")

SMALL = [c for c in FAMILY.check_cases() if sum(c.params["lens"]) * c.params["H"] <= 400]


def test_benchmark_is_flashkdas_six_scenarios():
    cases = FAMILY.benchmark_cases()
    assert [c.id for c in cases] == [f"{n}/H{h}" for h in (96, 64) for n in ("fixed", "mixed", "uniform")]
    for c in cases:
        p = c.params
        assert sum(p["lens"]) == 8192 and (p["K"], p["V"]) == (128, 128)
        assert (p["state"], p["initial"], p["final"], p["layout"]) == ("fp32", True, True, "vk")
        assert p["gate_in_kernel"] and p["beta_sigmoid"] and p["qk_l2norm"] and p["lower_bound"] == -5.0
        assert math.isclose(p["scale"], 128 ** -0.5)
    assert cases[1].params["lens"] == (1300, 547, 2048, 963, 271, 3063)
    assert cases[2].params["lens"] == (1024,) * 8
    assert all(c.params["state"] == "bf16" for c in FAMILY.benchmark_cases("flashkda_bf16state"))
    assert len(FAMILY.benchmark_cases("all")) == 12
    with pytest.raises(ValueError, match="unknown KDA benchmark matrix"):
        FAMILY.benchmark_cases("nope")


def test_check_cases_cover_what_the_benchmark_does_not():
    cases = FAMILY.check_cases()
    ids = [c.id for c in cases]
    assert len(set(ids)) == len(ids)
    lens = [n for c in cases for n in c.params["lens"]]
    assert 0 in lens and 1 in lens
    assert any(all(n % 16 for n in c.params["lens"] if n) for c in cases)
    assert max(lens) > 8192
    assert any(c.params["H"] == 1 for c in cases)
    assert any(len(c.params["lens"]) >= 40 for c in cases)
    ps = [c.params for c in cases]
    for key, value in (("initial", False), ("final", False), ("state", "bf16"), ("layout", "kv"),
                       ("gate_in_kernel", False), ("beta_sigmoid", False), ("qk_l2norm", False)):
        assert any(p[key] == value for p in ps), key
    assert any(p["lower_bound"] != -5.0 for p in ps) and any(not math.isclose(p["scale"], 128 ** -0.5) for p in ps)


def test_make_case_rejects_bad_options():
    for kw in (dict(lens=(), H=1), dict(lens=(0,), H=1), dict(lens=(3,), H=0), dict(lens=(3,), H=1, state="fp16"),
               dict(lens=(3,), H=1, layout="hv")):
        with pytest.raises(ValueError):
            FAMILY.make_case(**kw)


@pytest.mark.parametrize("distribution", ["flashkda", "long_memory"])
def test_inputs_match_the_buffers_and_differ_by_seed(distribution):
    for case in FAMILY.check_cases():
        ins, _ = FAMILY.io(case)
        a = FAMILY.make_inputs(case, np.random.default_rng(0), distribution)
        assert set(a) == set(ins), case.id
        for name, spec in ins.items():
            assert a[name].shape == spec.shape and a[name].dtype == dtypes.storage_dtype(spec.dtype), (case.id, name)
        cu = op.decode_index(a["cu_seqlens"])
        assert cu.tolist() == [0, *np.cumsum(case.params["lens"]).tolist()]
        if case is SMALL[0]:
            b = FAMILY.make_inputs(case, np.random.default_rng(0), distribution)
            c = FAMILY.make_inputs(case, np.random.default_rng(1), distribution)
            assert all(np.array_equal(a[n], b[n]) for n in a)
            assert not np.array_equal(a["q"], c["q"]) and not np.array_equal(a["v"], c["v"])
    with pytest.raises(ValueError, match="distribution"):
        FAMILY.make_inputs(SMALL[0], np.random.default_rng(0), "normal")


def test_distributions_differ_in_memory():
    """flashkda's decays are strong (the state forgets within tokens), long_memory's weak."""
    case = FAMILY.make_case((200,), 4)
    decay = {}
    for d in FAMILY.distributions:
        f = FAMILY.activations(case, FAMILY.make_inputs(case, np.random.default_rng(2), d))
        assert (f["g"] < 0).all() and (f["g"] >= -5.0).all()
        np.testing.assert_allclose(np.linalg.norm(f["k"], axis=-1), 1.0, atol=1e-5)
        decay[d] = float(np.median(-f["g"]))
    assert decay["flashkda"] > 1.0 and decay["long_memory"] < 0.01


def test_reference_state_layout_and_initial_state():
    """The operation's reference is the recurrence per sequence with h0 read and the final state
    written in the case's layout ([N, H, V, K] for vk), and zeros without an initial state."""
    rng = np.random.default_rng(3)
    vk = FAMILY.make_case((9, 4), 2)
    kv = FAMILY.make_case((9, 4), 2, layout="kv")
    ins = FAMILY.make_inputs(vk, rng, "long_memory")
    ins_kv = dict(ins, initial_state=np.ascontiguousarray(ins["initial_state"].transpose(0, 1, 3, 2)))
    r_vk, r_kv = FAMILY.reference(vk, ins), FAMILY.reference(kv, ins_kv)
    np.testing.assert_array_equal(r_vk["o"], r_kv["o"])
    np.testing.assert_array_equal(r_vk["final_state"], r_kv["final_state"].transpose(0, 1, 3, 2))
    f = FAMILY.activations(vk, ins)
    o, S = ref.recurrent(f["q"][:9], f["k"][:9], f["v"][:9], f["g"][:9], f["beta"][:9], vk.params["scale"], f["h0"][0])
    np.testing.assert_allclose(r_vk["o"][:9], o, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(r_vk["final_state"][0], S.transpose(0, 2, 1), rtol=1e-10, atol=1e-14)
    fresh = FAMILY.make_case((9, 4), 2, initial=False)
    r0 = FAMILY.reference(fresh, {n: a for n, a in ins.items() if n != "initial_state"})
    assert not np.allclose(r0["o"], r_vk["o"])
    assert "final_state" not in FAMILY.reference(FAMILY.make_case((9, 4), 2, final=False), ins)


@pytest.mark.parametrize("case", SMALL, ids=lambda c: c.id)
def test_chunked_reference_equals_recurrent_on_check_cases(case):
    for d in FAMILY.distributions:
        ins = FAMILY.make_inputs(case, np.random.default_rng(4), d)
        a = FAMILY.reference(case, ins)
        b = FAMILY.reference(case, ins, method="recurrent")
        for name in a:
            rel = np.linalg.norm(a[name] - b[name]) / np.linalg.norm(b[name])
            assert rel < 1e-12, (case.id, d, name, rel)


def test_gate_and_beta_options_are_what_the_reference_computes():
    """A precomputed fp32 gate and a post-sigmoid bf16 beta give (nearly) the in-kernel ones'
    results: the same formulas, rounded once more."""
    rng = np.random.default_rng(5)
    fused = FAMILY.make_case((40,), 2)
    pre = FAMILY.make_case((40,), 2, gate_in_kernel=False, beta_sigmoid=False)
    ins = FAMILY.make_inputs(fused, rng, "flashkda")
    f = FAMILY.activations(fused, ins)
    ins_pre = {n: a for n, a in ins.items() if n not in ("A_log", "dt_bias")}
    ins_pre["g"] = dtypes.quantize(f["g"], "fp32")
    ins_pre["beta"] = dtypes.quantize(f["beta"], "bf16")
    a, b = FAMILY.reference(fused, ins), FAMILY.reference(pre, ins_pre)
    rel = np.linalg.norm(a["o"] - b["o"]) / np.linalg.norm(a["o"])
    assert 0 < rel < 5e-3


def test_tolerances_are_relative_rms():
    case = FAMILY.make_case((64, 30), 3)
    ins = FAMILY.make_inputs(case, np.random.default_rng(6), "flashkda")
    r = FAMILY.reference(case, ins)
    tol = FAMILY.tolerances(case)
    assert tol["o"].rel_l2 == 0.005 and tol["final_state"].rel_l2 == 0.006
    o_bf16 = dtypes.quantize(r["o"], "bf16")
    assert verify.check_output(o_bf16, r["o"], tol["o"], "bf16").ok           # bf16 rounding alone passes
    noisy = r["o"] * (1 + 0.01 * np.random.default_rng(7).standard_normal(r["o"].shape))
    res = verify.check_output(dtypes.quantize(noisy, "bf16"), r["o"], tol["o"], "bf16")
    assert not res.ok and "relative L2" in res.message
    one_head = r["final_state"].copy()
    one_head[:, 1] = 0
    assert not verify.check_output(one_head.astype(np.float32), r["final_state"], tol["final_state"], "fp32").ok
    assert "final_state" not in FAMILY.tolerances(FAMILY.make_case((5,), 1, final=False))


def test_bytes_and_flops():
    case = FAMILY.benchmark_cases()[0]                        # fixed/H96
    T, H, D, N = 8192, 96, 128, 1
    want = 4 * T * H * D * 2 + T * H * 2 + H * 4 + H * D * 4 + (N + 1) * 4 + 2 * N * H * D * D * 4 + T * H * D * 2
    assert FAMILY.bytes_moved(case) == want
    assert FAMILY.flops(case) == 6 * D * D * T * H
    bf = FAMILY.make_case((8192,), 96, state="bf16", initial=False)
    assert FAMILY.bytes_moved(bf) == want - 2 * N * H * D * D * 4 + N * H * D * D * 2


def test_kernel_args_name_buffers_of_the_case():
    for case in FAMILY.check_cases():
        ins, outs = FAMILY.io(case)
        args = FAMILY.kernel_args(case)
        assert len(args) == 17
        names = [a for a in args[:11] if a is not None]
        assert set(names) <= set(ins) | set(outs) and set(ins) | set(outs) <= set(names)
        assert int(args[11]) == sum(case.params["lens"]) and int(args[13]) == len(case.params["lens"])
        p = case.params
        assert int(args[16]) == (p["beta_sigmoid"] * 1 | p["qk_l2norm"] * 2 | (p["layout"] == "kv") * 4)
        assert (args[5] is None) == (not p["gate_in_kernel"])


def test_cu_seqlens_is_an_int32_buffer():
    case = FAMILY.make_case((5, 0, 7), 2)
    ins, _ = FAMILY.io(case)
    assert ins["cu_seqlens"].dtype == "int32" and dtypes.storage_dtype(ins["cu_seqlens"].dtype) == np.int32
    a = FAMILY.make_inputs(case, np.random.default_rng(0), "flashkda")
    assert a["cu_seqlens"].dtype == np.int32 and a["cu_seqlens"].tolist() == [0, 5, 5, 12]
    values = [0, 1, 5, 2**31 - 1]
    assert op.decode_index(op.index_array(values)).tolist() == values


def test_group_tolerance_catches_one_wrong_token_the_global_test_misses():
    """A bug on one token of one head (just after the sequence boundary, 50 % off) stays under o's global 5e-3 and fails its (token, head) row; bf16 rounding passes."""
    case = FAMILY.make_case((600, 400), 16)
    ins = FAMILY.make_inputs(case, np.random.default_rng(8), "flashkda")
    r = FAMILY.reference(case, ins)
    tol = FAMILY.tolerances(case)
    assert tol["o"].group_scale == "whole" and tol["o"].group_rel_l2 == op.O_ROW_RMS
    good = verify.check_output(dtypes.quantize(r["o"], "bf16"), r["o"], tol["o"], "bf16", name="o")
    assert good.ok and good.group_rel_l2 < 0.02
    ratio = np.sqrt((r["o"][600:620] ** 2).mean(axis=-1) / (r["o"] ** 2).mean())
    tok, head = (int(i) for i in np.unravel_index(np.argmin(np.abs(ratio - 1.0)), ratio.shape))
    tok += 600                                                       # a row of ordinary size
    bad = r["o"].copy()
    bad[tok, head] *= 1.5
    stored = dtypes.quantize(bad, "bf16")
    res = verify.check_output(stored, r["o"], tol["o"], "bf16", name="o")
    assert res.rel_l2 < op.O_REL_RMS and not res.ok
    assert res.message.startswith(f"o[{tok}:{tok + 1}, {head}]: RMS error")
    st = verify.check_output(r["final_state"].astype(np.float32), r["final_state"], tol["final_state"], "fp32")
    assert st.ok and st.group_rel_l2 < 1e-6


def test_dispatch_key_is_state_and_recurrences():
    key = FAMILY.dispatch_key()
    assert [f.name for f in key.exact] == ["state"] and key.ordered.name == "recurrences"
    assert key.columns == ("T", "H", "N", "state", "recurrences")
    points = {c.id: key.point(c) for c in FAMILY.benchmark_cases("all")}
    assert points["fixed/H96"].group == ("fp32",) and points["fixed/H96"].at == 96
    assert points["mixed/H64"].at == 384 and points["uniform/H96"].at == 768
    assert points["fixed/H64/state-bf16"].group == ("bf16",)
    assert key.shape_of(FAMILY.benchmark_cases()[1].params) == "8192 x 96 x 6"
    classes = {c.id: FAMILY.shape_class(c.params) for c in FAMILY.benchmark_cases()}
    assert classes == {"fixed/H96": "fp32/few", "mixed/H96": "fp32/many", "uniform/H96": "fp32/many",
                       "fixed/H64": "fp32/few", "mixed/H64": "fp32/many", "uniform/H64": "fp32/many"}
    for c in FAMILY.check_cases():
        p = c.params
        assert (p["T"], p["N"], p["recurrences"]) == (sum(p["lens"]), len(p["lens"]), p["H"] * len(p["lens"]))


def test_baselines_support_what_they_can_run():
    assert [b.name for b in FAMILY.baselines()] == ["flashkda", "fla"]
    for case in FAMILY.benchmark_cases("all"):
        assert base.flashkda_supports(case) == ""
    for case in FAMILY.benchmark_cases():
        assert base.fla_supports(case) == ""
    assert "fp32" in base.fla_supports(FAMILY.make_case((5,), 1, state="bf16"))
    assert base.fla_supports(FAMILY.make_case((5,), 1, state="bf16", initial=False, final=False)) == ""
    assert "[V, K]" in base.flashkda_supports(FAMILY.make_case((5,), 1, layout="kv"))
    assert "gate" in base.flashkda_supports(FAMILY.make_case((5,), 1, gate_in_kernel=False))
    assert "L2 norm" in base.flashkda_supports(FAMILY.make_case((5,), 1, qk_l2norm=False))


def test_flashkda_checkout_and_build_options(tmp_path, monkeypatch):
    monkeypatch.setenv("EVO_FLASHKDA_ROOT", str(tmp_path / "none"))
    monkeypatch.delenv("EVO_FLASHKDA_CUTLASS", raising=False)
    assert peers.flashkda_root() is None and not peers.flashkda_available()
    assert "no FlashKDA checkout" in peers.missing()
    root = tmp_path / "FlashKDA"
    (root / "csrc" / "smxx").mkdir(parents=True)
    (root / "csrc" / "flash_kda.cpp").write_text("")
    monkeypatch.setenv("EVO_FLASHKDA_ROOT", str(root))
    assert peers.flashkda_root() == root and "no CUTLASS" in peers.missing()
    (root / "cutlass" / "include" / "cute").mkdir(parents=True)
    (root / "cutlass" / "include" / "cute" / "tensor.hpp").write_text("")
    assert peers.cutlass_root() == root / "cutlass"
    opts = peers.build_options(root, root / "cutlass")
    assert opts["name"] == "flashkda_peer_C"
    assert opts["sources"] == [str(root / "csrc" / "flash_kda.cpp"), str(root / "csrc" / "smxx" / "fwd_launch.cu")]
    assert opts["extra_include_paths"] == [str(root / "cutlass" / "include"), str(root / "csrc")]
    flags = " ".join(opts["extra_cuda_cflags"])
    assert "arch=compute_90a,code=sm_90a" in flags and "--expt-relaxed-constexpr" in flags


def test_prebuilt_flashkda_stands_in_for_the_checkout(tmp_path, monkeypatch):
    """EVO_FLASHKDA_PREBUILT: a carried build is used without the checkout; one that did not
    arrive says so instead of falling back to a build; the commit comes from the environment."""
    monkeypatch.setenv("EVO_FLASHKDA_ROOT", str(tmp_path / "none"))
    monkeypatch.delenv(peers.PREBUILT_ENV, raising=False)
    monkeypatch.delenv("EVO_FLASHKDA_COMMIT", raising=False)
    assert peers.prebuilt() is None and peers.commit() is None
    monkeypatch.setenv(peers.PREBUILT_ENV, str(tmp_path / "tx" / "flashkda_peer_C.so"))
    with pytest.raises(FileNotFoundError, match="did not arrive"):
        peers.prebuilt()
    assert "did not arrive" in peers.missing() and not peers.flashkda_available()
    so = tmp_path / "flashkda_peer_C.so"
    so.write_bytes(b"\x7fELF")
    monkeypatch.setenv(peers.PREBUILT_ENV, str(so))
    assert peers.prebuilt() == so
    has_torch = importlib.util.find_spec("torch") is not None
    assert peers.flashkda_available() == has_torch and (peers.missing() == "") == has_torch
    monkeypatch.setenv("EVO_FLASHKDA_COMMIT", "1ce47ea\n")
    assert peers.commit() == "1ce47ea"
