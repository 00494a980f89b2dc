"""`evo export` of the committed KDA forward run (results/kda_fwd_h200_run.json.gz) as a standalone
package (CPU only: nvcc compiles the dispatch genomes' cubins, once for the module).

What makes the package trustworthy without a GPU here: its `_geometry.py` (generated from
kernels/kda/family.py's source) gives, for every packaged genome and every benchmark and check
case, the launches family.launch gives, and the workspace family.workspace sizes; its dispatch.json
is the run's table; it imports nothing of the factory; off-GPU it refuses with UnsupportedDevice;
and its torch path, run against fake torch / cupy modules, checks its arguments by name and
launches each genome's kernels in order (the pdl genome's kda_rec through cuLaunchKernelEx).
The package's own GPU tests (tests/test_ptxk_kda.py in the export) run on an H200.
"""

from __future__ import annotations

import ast
import ctypes
import importlib.util
import json
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from evo.analysis import load_run
from evo.dispatch import build_dispatch
from evo.export import ExportError, export_run
from fitness.family import load_family
from tests.conftest import have_nvcc

REPO = Path(__file__).resolve().parent.parent
RUN = REPO / "results" / "kda_fwd_h200_run.json.gz"
PKG = "ptxk_kda"


@pytest.fixture(scope="module")
def family():
    return load_family("kda")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    if not have_nvcc():
        pytest.skip("needs nvcc")
    base = tmp_path_factory.mktemp("kda-export")
    return export_run(RUN, base / "pkg", cache_dir=base / "cache")


@pytest.fixture(scope="module")
def geometry(exported):
    spec = importlib.util.spec_from_file_location("_ptxk_kda_geometry", exported.path / PKG / "_geometry.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def pkg(exported):
    saved = {k: v for k, v in sys.modules.items() if k == PKG or k.startswith(PKG + ".")}
    sys.path.insert(0, str(exported.path))
    try:
        for k in [k for k in sys.modules if k == PKG or k.startswith(PKG + ".")]:
            del sys.modules[k]
        yield importlib.import_module(PKG)
    finally:
        sys.path.remove(str(exported.path))
        for k in [k for k in sys.modules if k == PKG or k.startswith(PKG + ".")]:
            del sys.modules[k]
        sys.modules.update(saved)


def _entries():
    frames = load_run(RUN)
    return build_dispatch(frames.records, frames.keys, baseline=frames.run["baseline"])


def test_package_layout(exported):
    out = exported.path
    for rel in ("README.md", "pyproject.toml", "bench.py", "_build_in_temp.py", f"tests/test_{PKG}.py",
                f"{PKG}/__init__.py", f"{PKG}/_geometry.py", f"{PKG}/bench.py", f"{PKG}/dispatch.json",
                f"{PKG}/provenance.json"):
        assert (out / rel).is_file(), rel
    keys = {e.key for e in _entries()}
    assert len(keys) == 3
    for k in keys:
        for ext in ("cu", "cubin", "ptx", "json"):
            assert (out / PKG / "kernels" / f"{k}.{ext}").is_file()
    for path in [*out.rglob("*.py")]:
        compile(path.read_text(), str(path), "exec")          # every rendered template is Python
    assert not any("__" + w + "__" in p.read_text() for p in out.rglob("*") if p.is_file() and p.suffix in (".py", ".md")
                   for w in ("PKG", "RUN_ID", "K_DIM", "CUPY", "FLAG_STATE_KV"))
    readme = (out / "README.md").read_text()
    assert "chunk_kda" in readme and "safe_gate" in readme and "bench.py" in readme
    assert "((8192,), 96)" in (out / PKG / "bench.py").read_text()      # FlashKDA's scenarios


def test_dispatch_json_is_the_runs_table(exported):
    d = json.loads((exported.path / PKG / "dispatch.json").read_text())
    assert d["family"] == "kda" and d["arch"] == "sm_90a" and (d["k_dim"], d["v_dim"]) == ("128", "128")
    assert (d["flag_beta_sigmoid"], d["flag_qk_l2norm"], d["flag_state_kv"]) == ("1", "2", "4")
    entries = _entries()
    fp32 = [e for e in d["entries"] if e["state"] == "fp32"]
    assert [(e["recurrences_min"], e["recurrences_max"], e["key"]) for e in fp32] == \
        [(e.lo, e.hi, e.key) for e in entries] and all(e["measured"] for e in fp32)
    bf16 = [e for e in d["entries"] if e["state"] == "bf16"]       # the same kernels' bf16 entries, untimed
    assert [(e["recurrences_min"], e["recurrences_max"], e["key"]) for e in bf16] == \
        [(e.lo, e.hi, e.key) for e in entries] and not any(e["measured"] for e in bf16)
    assert all(e["ranges_from"] == "fp32" for e in bf16)
    for key, info in d["kernels"].items():
        assert info["same_compile_as_judge"] is True          # the judged source (v8's rendering)
        want = {"kda_prep", "kda_rec_fp32", "kda_rec_bf16"} | ({"kda_flags_zero"} if info["genome"].get(
            "prep_overlap") == "pdl" else set())
        assert set(info["entries"]) == want, key


def _family_steps(family, genome, case):
    launch = family.launch(genome, case)
    steps = launch if isinstance(launch, tuple) else (launch,)
    return [{"kernel": s.kernel, "grid": tuple(s.grid), "block": tuple(s.block), "shared_bytes": s.shared_bytes,
             "overlap": bool(s.overlap), "workspace": "kda_ws" in s.args} for s in steps]


def _cases(family):
    return [*family.benchmark_cases("all"), *family.benchmark_cases("smoke"), *family.check_cases()]


def test_geometry_equals_family_launch_and_workspace(exported, family, geometry):
    from genomes.kda import DEFAULT, NAMED

    d = json.loads((exported.path / PKG / "dispatch.json").read_text())
    genomes = [info["genome"] for info in d["kernels"].values()] + [dict(DEFAULT)] + [dict(g) for g in NAMED.values()]
    cases = _cases(family)
    assert len(cases) > 20
    for genome in genomes:
        for case in cases:
            p = case.params
            got = [dict(s, grid=tuple(s["grid"]), block=tuple(s["block"]))
                   for s in geometry.launch(genome, p["T"], p["N"], p["H"], p["state"])]
            assert got == _family_steps(family, genome, case), (genome, case.id)
    for case in cases:
        p = case.params
        spec = family.workspace(case)["kda_ws"]
        assert spec.dtype == "float32"
        assert geometry.workspace_bytes(p["T"], p["N"], p["H"]) == 4 * int(np.prod(spec.shape)), case.id


def test_geometry_refuses_what_the_family_refuses(family, geometry):
    from genomes.kda import DEFAULT

    case = family.make_case((20,), 2, K=64, V=64)
    with pytest.raises(ValueError, match="K = V = 128"):
        family.launch(DEFAULT, case)
    with pytest.raises(ValueError, match="K = V = 128"):
        geometry.launch(dict(DEFAULT), 20, 1, 2, "fp32", K=64, V=64)
    with pytest.raises(ValueError, match="state"):
        geometry.launch(dict(DEFAULT), 20, 1, 2, "fp16")


def test_geometry_is_generated_from_the_family_source(exported, family):
    src = (exported.path / PKG / "_geometry.py").read_text()
    assert src == family.export_launch_source()
    tree = ast.parse(src)
    mods = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    mods |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert mods <= {"__future__", "typing"}, mods
    fam = sys.modules[type(family).__module__]
    import inspect

    assert inspect.getsource(fam.launch_geometry) in src and inspect.getsource(fam.prep_grid) in src


def test_package_imports_nothing_of_the_factory(exported):
    pattern = re.compile(r"^\s*(from|import)\s+(evo|fitness|genomes|kernels|tests|experiments)\b", re.M)
    for path in exported.path.rglob("*.py"):
        text = path.read_text()
        assert not pattern.search(text), path
        assert "sys.path" not in text, path


def test_plan_follows_the_dispatch_table(pkg):
    for e in _entries():
        for r in (e.lo, e.hi or e.lo * 2):
            H = 1 if r % 2 else 2
            key, steps = pkg.plan(8 * r, r // H, H, "fp32")
            assert key == e.key, (r, key)
            assert [s["kernel"] for s in steps][-1] == "kda_rec_fp32"
            assert pkg.plan(8 * r, r // H, H, "bf16")[0] == e.key


def test_import_without_a_gpu_and_unsupported_device(pkg):
    assert set(pkg.__all__) == {n for n in dir(pkg) if not n.startswith("_")}
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    if not have_torch:
        with pytest.raises(pkg.UnsupportedDevice) as exc:
            pkg.chunk_kda(None, None, None, None, None)
        assert isinstance(exc.value, RuntimeError) and "\n" not in str(exc.value)
        assert "sm_90a" in str(exc.value) and "torch" in str(exc.value)
    try:
        import cupy  # noqa: F401
    except ImportError:
        with pytest.raises(pkg.UnsupportedDevice) as exc:
            pkg.kda_fwd_cupy(None, None, None, None, None, None)
        assert "\n" not in str(exc.value) and "cupy" in str(exc.value)


@pytest.mark.parametrize("kwargs,name", [
    (dict(bogus=1), "bogus"),
    (dict(allow_neg_eigval=True), "allow_neg_eigval"),
    (dict(return_intermediate_states=True), "return_intermediate_states"),
    (dict(cp_context=object()), "cp_context"),
    (dict(use_gate_in_kernel=True), "safe_gate"),
    (dict(use_gate_in_kernel=True, safe_gate=True), "lower_bound"),
    (dict(use_gate_in_kernel=True, safe_gate=True, lower_bound=-6.0), "lower_bound"),
    (dict(use_gate_in_kernel=True, safe_gate=True, lower_bound=0.5), "lower_bound"),
])
def test_arguments_the_kernels_do_not_compute_are_refused_by_name(pkg, kwargs, name):
    with pytest.raises(ValueError) as exc:
        pkg.chunk_kda(None, None, None, None, None, **kwargs)
    msg = str(exc.value)
    assert msg.startswith(f"{PKG}: {name}:") and "\n" not in msg


def test_pdl_launches_through_the_judges_module_copied_verbatim(exported, pkg):
    """The package launches with the overlap through `_launch_ex.py`, which is fitness/launch_ex.py byte
    for byte (the structures fitness.driver_launch's judge launches with), and keeps no copy of its own."""
    from fitness import driver_launch as dl
    from fitness import launch_ex

    assert (exported.path / PKG / "_launch_ex.py").read_bytes() == Path(launch_ex.__file__).read_bytes()
    assert pkg._launch_ex.__name__ == f"{PKG}._launch_ex" and pkg._launch_ex is not launch_ex
    for ours, theirs in ((pkg._launch_ex.CUlaunchConfig, dl.CUlaunchConfig),
                         (pkg._launch_ex.CUlaunchAttribute, dl.CUlaunchAttribute),
                         (pkg._launch_ex.CUlaunchAttributeValue, dl.CUlaunchAttributeValue)):
        assert ctypes.sizeof(ours) == ctypes.sizeof(theirs) and ctypes.alignment(ours) == ctypes.alignment(theirs)
        for name, *_ in ours._fields_:
            assert getattr(ours, name).offset == getattr(theirs, name).offset, name
    assert pkg._CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION == \
        dl.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    assert pkg._CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT == dl.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
    init = (exported.path / PKG / "__init__.py").read_text()
    assert "_ctypes" not in init and "class _Launch" not in init and "CDLL" not in init


# -- the torch path against fake torch and cupy modules ------------------------------------------
class _DType:
    def __init__(self, name, size):
        self.name, self.size = name, size

    def __repr__(self):
        return f"torch.{self.name}"


class _Device:
    def __init__(self, spec):
        self.type, _, idx = str(spec).partition(":")
        self.index = int(idx) if idx else 0

    def __eq__(self, other):
        return str(self) == str(other)

    def __str__(self):
        return f"{self.type}:{self.index}"


class _Tensor:
    _next = 1 << 20

    def __init__(self, shape, dtype, device="cuda:0", requires_grad=False):
        self.shape, self.dtype, self.device = tuple(shape), dtype, _Device(device)
        self.is_cuda, self.requires_grad = self.device.type == "cuda", requires_grad
        self._ptr, _Tensor._next = _Tensor._next, _Tensor._next + (1 << 30)

    def dim(self):
        return len(self.shape)

    def numel(self):
        return int(np.prod(self.shape))

    def data_ptr(self):
        return self._ptr

    def contiguous(self):
        return self

    def is_contiguous(self):
        return True

    def element_size(self):
        return self.dtype.size

    def is_floating_point(self):
        return self.dtype.name.startswith(("float", "bfloat"))

    def to(self, device=None, dtype=None):
        if (device is None or _Device(device) == self.device) and (dtype is None or dtype is self.dtype):
            return self
        return _Tensor(self.shape, dtype or self.dtype, device or self.device)


@pytest.fixture
def fakes(monkeypatch, pkg):
    state = {"launches": [], "attrs": [], "ex": []}
    t = types.ModuleType("torch")
    t.__version__ = "0.0-fake"
    t.Tensor = _Tensor
    for name, size in (("bfloat16", 2), ("float16", 2), ("float32", 4), ("float64", 8), ("int32", 4),
                       ("int64", 8), ("uint8", 1)):
        setattr(t, name, _DType(name, size))
    t.cuda = types.SimpleNamespace(is_available=lambda: True, current_device=lambda: 0,
                                   get_device_capability=lambda d: (9, 0), get_device_name=lambda d=None: "Fake H200")
    t._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda dev: 0xABC0)
    t.is_grad_enabled = lambda: False
    t.empty = lambda shape, dtype=None, device=None: _Tensor((shape,) if isinstance(shape, int) else shape, dtype, device)
    t.zeros = t.empty
    t.arange = lambda a, b, s, dtype=None, device=None: _Tensor((len(range(a, b, s)),), dtype, device)

    class Function:
        def __init__(self, name):
            self.name, self.ptr = name, 1000 + sum(map(ord, name))

        def __call__(self, grid, block, args, shared_mem=0, stream=None):
            state["launches"].append({"kernel": self.name, "grid": grid, "block": block, "args": args,
                                      "shared": shared_mem, "stream": stream.ptr})

    class Module:
        def load(self, data):
            assert data[:4] == b"\x7fELF"

        def get_function(self, name):
            return Function(name)

    class Device:
        def __init__(self, dev=None):
            self.id = dev or 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    c = types.ModuleType("cupy")
    c.cuda = types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDevice=lambda: 0), Device=Device,
        ExternalStream=lambda ptr, dev=-1: types.SimpleNamespace(ptr=ptr),
        function=types.SimpleNamespace(Module=Module),
        driver=types.SimpleNamespace(funcSetAttribute=lambda *a: state["attrs"].append(a)))
    monkeypatch.setitem(sys.modules, "torch", t)
    monkeypatch.setitem(sys.modules, "cupy", c)

    def ex(cfg, fn, params, extra):
        cfg = cfg._obj
        state["ex"].append({"fn": fn.value, "grid": (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ),
                            "block": (cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ), "shared": cfg.sharedMemBytes,
                            "stream": cfg.hStream, "attr": (cfg.attrs[0].id, cfg.attrs[0].value.programmaticStreamSerializationAllowed),
                            "params": [ctypes.c_uint64.from_address(params[i]).value for i in range(11)]
                            + [ctypes.c_int32.from_address(params[i]).value for i in (11, 12, 13)]
                            + [ctypes.c_float.from_address(params[i]).value for i in (14, 15)]
                            + [ctypes.c_int32.from_address(params[16]).value, ctypes.c_uint64.from_address(params[17]).value]})
        return 0
    monkeypatch.setattr(pkg._launch_ex, "driver", lambda library=None: ex)
    return state, t


def _inputs(t, T, H, N=1, g_dtype=None):
    bf = t.bfloat16
    return dict(q=_Tensor((1, T, H, 128), bf), k=_Tensor((1, T, H, 128), bf), v=_Tensor((1, T, H, 128), bf),
                g=_Tensor((1, T, H, 128), g_dtype or bf), beta=_Tensor((1, T, H), bf)), \
        dict(A_log=_Tensor((H,), t.float32), dt_bias=_Tensor((H * 128,), t.float32),
             cu_seqlens=_Tensor((N + 1,), t.int64), initial_state=_Tensor((N, H, 128, 128), t.float32))


@pytest.mark.parametrize("r", [64, 96])          # fixed/H64: the pdl genome; fixed/H96: tight, no overlap
def test_chunk_kda_launches_the_genomes_kernels_in_order(pkg, fakes, family, r):
    state, t = fakes
    T, H, N = 8192, r, 1
    x, kw = _inputs(t, T, H, N)
    o, ht = pkg.chunk_kda(*x.values(), initial_state=kw["initial_state"], output_final_state=True,
                          use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True, use_gate_in_kernel=True,
                          safe_gate=True, lower_bound=-5.0, A_log=kw["A_log"], dt_bias=kw["dt_bias"],
                          state_v_first=True)
    assert o.shape == (1, T, H, 128) and ht.shape == (N, H, 128, 128) and ht.dtype is t.float32
    case = family.make_case((T,), H)
    key, steps = pkg.plan(T, N, H, "fp32")
    want = _family_steps(family, pkg.dispatch_table()["kernels"][key]["genome"], case)
    plain = [s for s in want if not s["overlap"]]
    assert [(d["kernel"], tuple(d["grid"]), tuple(d["block"]), d["shared"]) for d in state["launches"]] == \
        [(s["kernel"], s["grid"], s["block"], s["shared_bytes"]) for s in plain]
    flags = family.kernel_args(case)[-1]
    for d in state["launches"]:
        a = d["args"]
        assert d["stream"] == 0xABC0 and len(a) == 18 and int(a[-2]) == int(flags)
        assert (int(a[11]), int(a[12]), int(a[13])) == (T, H, N) and float(a[15]) == -5.0
        assert int(a[9]) == o.data_ptr() and int(a[10]) == ht.data_ptr() and int(a[-1]) != 0
    overlapped = [s for s in want if s["overlap"]]
    assert len(state["ex"]) == len(overlapped)
    for e, s in zip(state["ex"], overlapped):
        assert (e["grid"], e["block"], e["shared"], e["stream"]) == (s["grid"], s["block"], s["shared_bytes"], 0xABC0)
        assert e["attr"] == (6, 1)
        assert e["params"][9:11] == [o.data_ptr(), ht.data_ptr()] and e["params"][11:14] == [T, H, N]
        assert e["params"][16] == int(flags) and e["params"][17] == int(state["launches"][0]["args"][-1])
    shared = {(a[0], a[2]) for a in state["attrs"] if a[1] == 8}
    assert {s for _, s in shared} == {s["shared_bytes"] for s in want if s["shared_bytes"]}
    assert any(a[1] == 9 for a in state["attrs"]) == bool(overlapped)     # the carveout for the overlap


def test_an_overlapped_launch_without_the_driver_is_plain_and_a_refused_one_names_its_kernel(pkg, fakes, monkeypatch):
    """Where _launch_ex.py finds no cuLaunchKernelEx the pdl genome's kda_rec goes through cupy, after
    kda_prep (correct: the overlap is a permission); a CUresult the driver returns is a RuntimeError
    naming the package, the kernel and the code."""
    state, t = fakes
    T, H = 8192, 64                              # fixed/H64: the pdl genome
    x, kw = _inputs(t, T, H)

    def call():
        return pkg.chunk_kda(*x.values(), initial_state=kw["initial_state"], output_final_state=True,
                             use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True, use_gate_in_kernel=True,
                             safe_gate=True, lower_bound=-5.0, A_log=kw["A_log"], dt_bias=kw["dt_bias"],
                             state_v_first=True)
    steps = pkg.plan(T, 1, H, "fp32")[1]
    assert any(s["overlap"] for s in steps)
    monkeypatch.setattr(pkg._launch_ex, "driver", lambda library=None: None)
    call()
    assert not state["ex"] and [d["kernel"] for d in state["launches"]] == [s["kernel"] for s in steps]
    monkeypatch.setattr(pkg._launch_ex, "driver", lambda library=None: lambda cfg, fn, params, extra: 701)
    monkeypatch.setattr(pkg._launch_ex, "error_name", lambda status, library=None: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")
    overlapped = next(s["kernel"] for s in steps if s["overlap"])
    with pytest.raises(RuntimeError, match=rf"^{PKG}: cuLaunchKernelEx of {overlapped} failed with CUresult 701 "
                                           r"\(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES\)$"):
        call()


def test_chunk_kda_checks_tensors_by_name(pkg, fakes):
    state, t = fakes
    x, kw = _inputs(t, 40, 2, 2)
    gate = dict(use_gate_in_kernel=True, safe_gate=True, lower_bound=-5.0, A_log=kw["A_log"], dt_bias=kw["dt_bias"],
                cu_seqlens=kw["cu_seqlens"])

    def refused(name, **change):
        args = dict(x)
        args.update({k: v for k, v in change.items() if k in args})
        kwargs = dict(gate, **{k: v for k, v in change.items() if k not in args})
        with pytest.raises(ValueError) as exc:
            pkg.chunk_kda(args["q"], args["k"], args["v"], args["g"], args["beta"], **kwargs)
        assert str(exc.value).startswith(f"{PKG}: {name}:"), str(exc.value)

    refused("q", q=_Tensor((1, 40, 2, 128), t.float32))
    refused("q", q=_Tensor((1, 40, 2, 64), t.bfloat16))
    refused("v", v=_Tensor((1, 40, 2, 64), t.bfloat16))
    refused("beta", beta=_Tensor((1, 40, 2), t.float32))
    refused("g", g=_Tensor((1, 40, 2, 128), t.float32))
    refused("A_log", A_log=None)
    refused("A_log", A_log=_Tensor((3,), t.float32))
    refused("dt_bias", dt_bias=_Tensor((2, 64), t.float32))
    refused("cu_seqlens", cu_seqlens=_Tensor((3,), t.float32))
    refused("initial_state", initial_state=_Tensor((2, 2, 128, 64), t.float32))
    refused("initial_state", initial_state=_Tensor((2, 2, 128, 128), t.float16))
    refused("state_dtype", initial_state=_Tensor((2, 2, 128, 128), t.float32), state_dtype=t.bfloat16)
    refused("workspace", workspace=_Tensor((16,), t.uint8))
    q = x["q"]
    q.requires_grad = True
    t.is_grad_enabled = lambda: True
    refused("q")
    q.requires_grad = False
    with pytest.raises(ValueError, match=f"{PKG}: cu_seqlens: needs the packed batch size B = 1"):
        y = {n: _Tensor((2,) + v.shape[1:], v.dtype) for n, v in x.items()}
        pkg.chunk_kda(*y.values(), **gate)
    with pytest.raises(ValueError, match="A_log"):         # a gate input without the in-kernel gate
        pkg.chunk_kda(*x.values(), A_log=kw["A_log"])
    assert not state["launches"] and not state["ex"]
    # a precomputed bf16 log decay is converted exactly to the fp32 the kernels read; bf16 states
    pkg.chunk_kda(*x.values(), output_final_state=True, cu_seqlens=kw["cu_seqlens"])          # fp32 first
    fp32_attrs = {a[0] for a in state["attrs"]}
    state["ex"].clear()
    state["launches"].clear()
    o, ht = pkg.chunk_kda(*x.values(), output_final_state=True, state_dtype=t.bfloat16, cu_seqlens=kw["cu_seqlens"])
    assert ht.dtype is t.bfloat16 and ht.shape == (2, 2, 128, 128)
    steps = pkg.plan(40, 2, 2, "bf16")[1]                 # H x N = 4: the pdl genome, kda_rec overlapped
    assert {a[0] for a in state["attrs"]} - fp32_attrs == {1000 + sum(map(ord, "kda_rec_bf16"))}   # its own opt-in
    assert steps[-1]["kernel"] == "kda_rec_bf16" and steps[-1]["overlap"] and len(state["ex"]) == 1
    assert [d["kernel"] for d in state["launches"]] == [s["kernel"] for s in steps[:-1]]
    args = state["ex"][-1]["params"]
    assert args[5] == 0 and args[6] == 0 and args[8] == 0      # no gate, no initial state
    assert args[3] != x["g"].data_ptr() and args[10] == ht.data_ptr()          # g's fp32 copy


def test_export_refuses_a_changed_template_unless_a_legacy_render_is_the_judged_one(tmp_path, monkeypatch, family):
    """The run was judged at gene space v8: HEAD's render differs in text, v8's (render_v8) is the
    judged source; with no legacy render the export refuses as before."""
    if not have_nvcc():
        pytest.skip("needs nvcc")
    fam = sys.modules[type(family).__module__]
    monkeypatch.setattr(type(family), "export_legacy_renders", lambda self, g: [])
    with pytest.raises(ExportError, match="changed since the run"):
        export_run(RUN, tmp_path / "pkg", cache_dir=tmp_path / "cache")
    assert fam.render_v8(dict(fam.DEFAULT, rec_min_blocks=2, kernels="split", split_s=False, split_u=False,
                              split_intra=False, rec_v_split=1, prep="tight")) is None
