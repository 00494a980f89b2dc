"""`evo export FWD_RUN --with BWD_RUN`: one package that trains (issue 17's training drop-in), checked
without a GPU or torch (nvcc, cuobjdump, pip; torch and cupy replaced by the fakes of test_export).

The forward is the committed re-judged H200 record (results/rejudge/rejudge_run.json.gz). No
backward search has been recorded yet, so the backward run is a labelled STAND-IN
(tests/bwd_standin.py): two of the backward family's own genomes compiled and statically checked
by the judge's machinery here, with made-up times and no GPU verdict. What is tested is what the
export makes of any such pair of runs: both tables and their kernels in one package, the packaged
backward geometry equal to the family's `launch` on every case of its matrices, the backward plan
following its table, the runtime's launch sequence, and the package importing without torch. The
package's own training tests (tests/test_<pkg>_training.py in the export) need torch and, for the
kernel path, an sm_90 GPU.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from evo.dispatch import build_dispatch, entry_for
from evo.export import ExportError, _with_blocks, export_run
from fitness.family import load_family
from fitness.records import read_json
from fitness.toolchain import find_tool
from tests.conftest import have_nvcc

REPO = Path(__file__).resolve().parent.parent
FWD = REPO / "results" / "rejudge" / "rejudge_run.json.gz"
PKG = "ptxk_rmsnorm"
ODD_M = (1, 7, 199)
ODD_N = (8, 256, 520, 1000, 4104, 8200, 131072)


pytestmark = pytest.mark.skipif(not have_nvcc(), reason="needs nvcc")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("compile-cache")


@pytest.fixture(scope="module")
def standin(tmp_path_factory, cache):
    from tests.bwd_standin import write_standin

    return write_standin(tmp_path_factory.mktemp("standin") / "bwd_standin.json", cache)


@pytest.fixture(scope="module")
def forward_only(tmp_path_factory, cache):
    return export_run(FWD, tmp_path_factory.mktemp("fwd") / "pkg", cache_dir=cache)


@pytest.fixture(scope="module")
def training(tmp_path_factory, cache, standin):
    return export_run(FWD, tmp_path_factory.mktemp("train") / "pkg", cache_dir=cache, companions=[standin])


@pytest.fixture(scope="module")
def bwd_family():
    return load_family("rmsnorm_bwd")


def _bwd_entries(standin):
    from evo.analysis import load_run

    frames = load_run(standin)
    return build_dispatch(frames.records, frames.keys, baseline=frames.run["baseline"])


def _load_module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


# -- the files ----------------------------------------------------------------------------------
def test_the_package_holds_both_tables_and_their_kernels(training, standin):
    root, bdir = training.path, training.path / PKG / "backward"
    for rel in (f"{PKG}/_autograd.py", f"{PKG}/backward/__init__.py", f"{PKG}/backward/_geometry.py",
                f"{PKG}/backward/dispatch.json", f"tests/test_{PKG}_training.py", f"tests/test_{PKG}.py"):
        assert (root / rel).is_file(), rel
    entries = _bwd_entries(standin)
    assert len({e.key for e in entries}) == 2                  # the stand-in's two genomes both win a range
    table = json.loads((bdir / "dispatch.json").read_text())
    assert table["family"] == "rmsnorm_bwd" and table["run_id"] == read_json(standin)["run_id"]
    assert [((e["dtype"],), e["n_min"], e["n_max"], e["key"]) for e in table["entries"]] == \
        [(e.group, e.lo, e.hi, e.key) for e in entries]
    comp = training.companions["backward"]
    assert set(comp["kernels"]) == set(table["kernels"]) == {e.key for e in entries}
    for key, info in table["kernels"].items():
        for ext in ("cu", "cubin", "ptx", "json"):
            assert (bdir / "kernels" / f"{key}.{ext}").stat().st_size > 0
        assert info["same_compile_as_judge"] is True, key            # the stand-in's judge compile, here
    prov = json.loads((root / PKG / "provenance.json").read_text())
    assert prov["companions"]["backward"]["run_id"] == table["run_id"]
    assert prov["companions"]["backward"]["gpu"] == ["STAND-IN: no GPU ran (tests/bwd_standin.py)"]
    from fitness import launch_ex

    # the judge's cuLaunchKernelEx module, byte for byte
    assert (root / PKG / "_launch_ex.py").read_bytes() == Path(launch_ex.__file__).read_bytes()
    pyproject = (root / "pyproject.toml").read_text()
    assert f'packages = ["{PKG}", "{PKG}.backward"]' in pyproject and '"backward/kernels/*.cubin"' in pyproject
    readme = (root / "README.md").read_text()
    assert "## Training" in readme and "### Fallback" in readme and "## Dispatch: backward" in readme
    for reason in ("`device`", "`dtype`", "`shape`", "`no_kernel`"):
        assert f"| {reason} |" in readme
    assert table["run_id"] in readme and "STAND-IN" in readme
    assert "### Overlapped launches" in readme and f"`{PKG.upper()}_PDL=0`" in readme
    assert not re.findall(r"__[A-Z_]+__", readme), "a template placeholder left unreplaced"


def test_backward_cubins_hold_every_entry_the_geometry_names(training, bwd_family):
    cuobjdump = find_tool("cuobjdump")
    if not cuobjdump:
        pytest.skip("needs cuobjdump")
    bdir = training.path / PKG / "backward"
    geo = _load_module("_ptxk_bwd_geometry_entries", bdir / "_geometry.py")
    for key, info in json.loads((bdir / "dispatch.json").read_text())["kernels"].items():
        sass = subprocess.run([cuobjdump, "-sass", str(bdir / info["cubin"])], capture_output=True, text=True,
                              check=True).stdout
        functions = {line.split(":", 1)[1].strip() for line in sass.splitlines() if "Function :" in line}
        assert "code for sm_90a" in sass and functions == set(info["entries"])
        named = {la["kernel"] for c in bwd_family.benchmark_cases("quack+models")
                 for la in (geo.launch(info["genome"], c.params["M"], c.params["N"], c.params["dtype"]) or ())}
        assert named and named <= functions, key


def test_without_with_the_forward_package_is_as_before(forward_only, training):
    fwd, tr = forward_only.path, training.path
    assert not (fwd / PKG / "_autograd.py").exists() and not (fwd / PKG / "backward").exists()
    assert not (fwd / "tests" / f"test_{PKG}_training.py").exists()
    assert forward_only.companions == {}
    differ = {"README.md", "pyproject.toml", f"{PKG}/__init__.py", f"{PKG}/provenance.json", f"tests/test_{PKG}.py"}
    for path in sorted(p for p in fwd.rglob("*") if p.is_file()):
        rel = path.relative_to(fwd).as_posix()
        if rel not in differ:
            assert path.read_bytes() == (tr / rel).read_bytes(), rel
    # __init__.py: the training one is the forward-only one plus the template's `#@with backward` block
    template = (REPO / "kernels" / "rmsnorm" / "export" / "__init__.py.tmpl").read_text()
    assert "#@with backward" in template
    plain, with_bwd = (fwd / PKG / "__init__.py").read_text(), (tr / PKG / "__init__.py").read_text()
    assert "#@" not in plain + with_bwd and "_autograd" not in plain and "from ._autograd import" in with_bwd
    assert [l for l in with_bwd.splitlines() if l not in plain.splitlines()] == \
        [l for l in _block(template, "backward").splitlines() if l not in plain.splitlines()]
    # the forward's tests: without a GPU, torch calls raise there; a training package falls back instead
    plain_t, with_t = (fwd / "tests" / f"test_{PKG}.py").read_text(), (tr / "tests" / f"test_{PKG}.py").read_text()
    assert "#@" not in plain_t + with_t and "pkg.rmsnorm(None, None)" in plain_t
    assert "pkg.rmsnorm(None, None)" not in with_t and "pkg.rmsnorm_cupy(None, None)" in with_t
    readme = (fwd / "README.md").read_text()
    assert "## Training" not in readme and "Dispatch: backward" not in readme
    assert "companions" not in json.loads((fwd / PKG / "provenance.json").read_text())


def _block(template: str, role: str) -> str:
    lines, inside = [], False
    for line in template.splitlines():
        if line.strip() == f"#@with {role}":
            inside = True
        elif line.strip() == "#@end":
            inside = False
        elif inside:
            lines.append(line)
    return "\n".join(lines)


def test_with_blocks_keep_or_drop_whole_lines():
    text = "a\n#@with backward\nb\n  #@end\nc\n#@with other\nd\n#@end\n"
    assert _with_blocks(text, ()) == "a\nc\n"
    assert _with_blocks(text, ("backward",)) == "a\nb\nc\n"
    assert _with_blocks(text, ("backward", "other")) == "a\nb\nc\nd\n"
    assert _with_blocks("no markers\n", ("x",)) == "no markers\n"
    text = "a\n#@without backward\nb\n#@end\n#@with backward\nc\n#@end\n"
    assert _with_blocks(text, ()) == "a\nb\n" and _with_blocks(text, ("backward",)) == "a\nc\n"
    for broken, why in (("#@with a\nx\n", "never closed"), ("x\n#@end\n", "without '#@with'"),
                        ("#@with a\n#@without b\n#@end\n", "inside")):
        with pytest.raises(ExportError, match=why):
            _with_blocks(broken, ())


# -- the packaged backward geometry ----------------------------------------------------------------
@pytest.fixture(scope="module")
def bwd_geometry(training):
    return _load_module("_ptxk_exported_bwd_geometry", training.path / PKG / "backward" / "_geometry.py")


def test_backward_geometry_uses_only_the_standard_library(training):
    tree = ast.parse((training.path / PKG / "backward" / "_geometry.py").read_text())
    mods = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    mods |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert mods <= {"__future__", "dataclasses", "typing", "types"}, mods


def _arg(a):
    """A family Launch argument as the packaged geometry writes it."""
    if isinstance(a, np.integer):
        return ("int32", int(a))
    if isinstance(a, np.floating):
        return ("float32", float(a))
    return a


def _family_launches(family, genome, case):
    las = family.launch(genome, case)
    return None if las is None else [(la.kernel, tuple(la.grid), tuple(la.block), la.shared_bytes, tuple(la.cluster),
                                      tuple(_arg(a) for a in la.args), la.overlap) for la in las]


def _packaged_launches(geo, genome, p):
    las = geo.launch(genome, p["M"], p["N"], p["dtype"], p["eps"])

    def arg(a):          # the runtime passes ("float32", v) as numpy.float32(v)
        return ("float32", float(np.float32(a[1]))) if isinstance(a, tuple) and a[0] == "float32" else a
    return None if las is None else [(la["kernel"], tuple(la["grid"]), tuple(la["block"]), la["shared_bytes"],
                                      tuple(la["cluster"]), tuple(arg(a) for a in la["args"]), la["overlap"])
                                     for la in las]


def test_backward_geometry_equals_the_familys_launch_on_every_case(training, bwd_family, bwd_geometry):
    fam_mod = sys.modules[type(bwd_family).__module__]
    cases = bwd_family.benchmark_cases("quack+models")
    cases += [bwd_family.make_case(m, n, d) for d in ("bf16", "fp16", "fp32") for m in ODD_M for n in ODD_N]
    cases += [c for c in bwd_family.check_cases() if c.params["M"] * c.params["N"] < 1 << 31]
    genomes = [dict(i["genome"]) for i in training.companions["backward"]["kernels"].values()]
    genomes += [dict(g) for g in fam_mod.sample_genomes(24, seed=5)]
    compared = nones = 0
    for genome in genomes:
        for case in cases:
            want = _family_launches(bwd_family, genome, case)
            got = _packaged_launches(bwd_geometry, genome, case.params)
            assert got == want, (genome, case.id)
            compared += 1
            nones += want is None
    assert compared > 3000 and 0 < nones < compared
    for case in cases:                          # the workspace the runtime allocates is the judge's
        p = case.params
        assert bwd_geometry.workspace(p["M"], p["N"], p["dtype"]) == \
            {k: tuple(v.shape) for k, v in bwd_family.workspace(case).items()}


_LOCK = threading.Lock()


def _uses_json(genome):
    return json.dumps(genome)


def _uses_a_lock(genome):
    return _LOCK


def _calls_a_test_helper(genome):
    return _uses_json(genome)


def test_the_launch_source_refuses_what_it_cannot_carry():
    """fitness.export_source carries the project's functions and plain constants; anything else used
    on a launch path is a ValueError naming it, not a module that fails when the package runs."""
    from fitness.export_source import launch_module_source

    for fn, why in ((_uses_json, "uses the module json"), (_uses_a_lock, "_LOCK is a lock"),
                    (_calls_a_test_helper, "_uses_json .* is not the project's code")):
        with pytest.raises(ValueError, match=why):
            launch_module_source("doc", {"f": fn}, {}, "")
    with pytest.raises(ValueError, match="must be a constant"):
        launch_module_source("doc", {}, {"lock": _LOCK}, "")


def test_backward_geometry_refuses_what_the_family_refuses(bwd_family, bwd_geometry):
    genome = dict(bwd_family.default_genome())
    for m, n, dt in ((4, 1001, "bf16"), (4, 6, "fp32"), (0, 256, "bf16")):
        with pytest.raises(ValueError) as want:
            bwd_family.launch(genome, bwd_family.make_case(m, n, dt))
        with pytest.raises(ValueError) as got:
            bwd_geometry.launch(genome, m, n, dt)
        assert str(got.value) == str(want.value)
    with pytest.raises(ValueError, match="fp64"):          # a dtype the family renders no entry for
        bwd_geometry.launch(genome, 4, 256, "fp64")


def _pdl_twin(bwd_family, genome):
    """`genome` with launch_overlap = pdl (space v11): the same launches, each after the first overlapped."""
    from genomes import load_space

    return dict(load_space(bwd_family.space_name).make(dict(genome, launch_overlap="pdl")))


def test_packaged_launches_carry_the_familys_overlap_and_compiled_clusters(training, bwd_family, bwd_geometry):
    """For the stand-in's two genomes (plain) and their pdl twins: each launch dict of backward/_geometry.py
    says `overlap` as family.launch's Launch.overlap does (never for a plain genome, every kernel but the
    first for a pdl one), and every launch with a cluster names an entry its source compiles with
    __cluster_dims__ of that size, so the runtime's cuLaunchKernelEx needs no cluster attribute (the judge
    passes none for such kernels either: fitness.cuda_backend)."""
    import re

    cases = [bwd_family.make_case(m, n, d) for d in ("bf16", "fp32") for m, n in ((199, 1000), (4096, 4096), (7, 65536))]
    seen = {False: 0, True: 0}
    clustered = 0
    for info in training.companions["backward"]["kernels"].values():
        plain = dict(info["genome"])
        assert plain.get("launch_overlap", "none") == "none"
        for genome, pdl in ((plain, False), (_pdl_twin(bwd_family, plain), True)):
            src = bwd_family.render(genome)
            for case in cases:
                want = bwd_family.launch(genome, case)
                got = bwd_geometry.launch(genome, case.params["M"], case.params["N"], case.params["dtype"])
                if want is None:
                    assert got is None
                    continue
                assert [d["overlap"] for d in got] == [la.overlap for la in want] == [False] + [pdl] * (len(want) - 1)
                seen[pdl] += len(want) > 1
                for d in got:
                    c = d["cluster"][0]
                    if tuple(d["cluster"]) != (1, 1, 1):
                        assert re.search(rf"BWD_ENTRY\w*\({re.escape(d['kernel'])}, \w+, {c}, __cluster_dims__\({c}, 1, 1\)",
                                         src), d["kernel"]
                        clustered += 1
                    else:
                        assert not re.search(rf"\({re.escape(d['kernel'])}, \w+, \d+, __cluster_dims__", src)
    assert seen[False] and seen[True] and clustered
    template = (REPO / "kernels" / "rmsnorm_bwd" / "template.cu").read_text()
    assert template.count("__global__ void BWD_BOUNDS ATTR NAME(") == 3         # every entry macro puts ATTR on


# -- the package without torch ---------------------------------------------------------------------
@pytest.fixture
def pkg_module(training, monkeypatch):
    """The exported package imported here as if torch and cupy were absent (so that it neither
    registers its ops with a real torch nor caches one: the tests give it the fakes)."""
    saved = {k: v for k, v in sys.modules.items() if k == PKG or k.startswith(PKG + ".")}
    for k in list(saved):
        del sys.modules[k]
    try:
        spec = importlib.util.spec_from_file_location(PKG, training.path / PKG / "__init__.py",
                                                      submodule_search_locations=[str(training.path / PKG)])
        mod = importlib.util.module_from_spec(spec)
        sys.modules[PKG] = mod
        with monkeypatch.context() as m:
            m.setitem(sys.modules, "torch", None)
            m.setitem(sys.modules, "cupy", None)
            spec.loader.exec_module(mod)
        # no cuLaunchKernelEx: the fakes' function handles must never reach a real libcuda (a machine
        # with a driver); the tests of the overlapped launches put a recorder in its place
        monkeypatch.setattr(mod._launch_ex, "driver", lambda library=None: None)
        yield mod
    finally:
        for k in [k for k in sys.modules if k == PKG or k.startswith(PKG + ".")]:
            del sys.modules[k]
        sys.modules.update(saved)


def test_backward_plan_follows_its_dispatch_table(pkg_module, standin, bwd_family):
    plan = pkg_module._autograd._bwd_plan
    entries = _bwd_entries(standin)
    genomes = {e.key: e.genome for e in entries}
    misses = 0
    for n in (8, 256, 264, 1000, 4096, 4104, 8200, 65536, 65544, 131072, 262144):
        for dt in ("bf16", "fp16", "fp32"):
            got = plan(199, n, dt, 1e-6)
            case = bwd_family.make_case(199, n, dt)
            want = entry_for(entries, case.params)
            if bwd_family.launch(want.genome, case) is not None:
                assert got[0] == want.key, (dt, n)
            elif any(bwd_family.launch(g, case) is not None for g in genomes.values()):
                assert got is not None and got[0] != want.key
            else:                                        # no packaged genome holds the row
                assert got is None, (dt, n)
                misses += 1
            if got is not None:
                assert [la[0] for la in got[1]] == [la.kernel for la in bwd_family.launch(genomes[got[0]], case)]
    assert misses >= 1           # fp32 N = 262144: the family's "not yet" (README), a fallback of the package


def test_the_generated_python_parses_and_imports_without_torch(training, tmp_path):
    for path in training.path.rglob("*.py"):
        ast.parse(path.read_text(), filename=str(path))
    code = f"""
import sys
for name in ("evo", "fitness", "genomes", "operators", "torch", "cupy"):
    sys.modules[name] = None          # neither the factory nor torch nor cupy: imports must not need them
import {PKG} as p
extra = sorted(n for n in vars(p) if not n.startswith("_") and n not in p.__all__)
print("extra", extra)
print("pdl", p._autograd._PDL_ENV, p._autograd.PDL)
print("stats", p.fallback_stats())
for call in (lambda: p.RMSNorm(8), lambda: p.rmsnorm(None, None), lambda: p.replace_rmsnorm(None)):
    try:
        call()
    except p.UnsupportedDevice as exc:
        print("error", exc)
    else:
        raise SystemExit("no error without torch")
"""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONPATH"] = str(training.path)
    env["PTXK_RMSNORM_PDL"] = "0"            # the opt-out of programmatic dependent launch, read at import
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert "pdl PTXK_RMSNORM_PDL False" in run.stdout
    assert "extra ['backward']" in run.stdout                 # the backward tables' subpackage, beside __all__
    zero = {k: 0 for k in ("kernel", "device", "dtype", "shape", "no_kernel")}
    assert f"stats {dict(forward=zero, backward=zero)}" in run.stdout
    errors = [l for l in run.stdout.splitlines() if l.startswith("error")]
    assert len(errors) == 3 and all("no torch installed" in l and "sm_90a" in l for l in errors)


def test_pip_install_carries_the_backward_tables(training, tmp_path):
    target = tmp_path / "site"
    base = [sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", "-q",
            "--target", str(target)]
    offline = importlib.util.find_spec("wheel") is not None
    proc = subprocess.run(base + (["--no-build-isolation"] if offline else []) + [str(training.path)],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0 and ("wheel" in proc.stderr or "network" in proc.stderr.lower()
                                 or "connection" in proc.stderr.lower()):
        pytest.skip(f"cannot build a wheel here: {proc.stderr.strip().splitlines()[-1:]}")
    assert proc.returncode == 0, proc.stderr
    installed = target / PKG
    assert (installed / "_autograd.py").is_file() and (installed / "backward" / "_geometry.py").is_file()
    assert (installed / "backward" / "dispatch.json").is_file()
    assert len(list((installed / "backward" / "kernels").glob("*.cubin"))) == len(training.companions["backward"]["kernels"])


# -- the runtime's launches, on the fakes ----------------------------------------------------------
@pytest.fixture
def fakes(monkeypatch):
    from tests.test_export import _FakeTensor, _fake_cupy, _fake_torch

    state = {"stream": 0xABC0, "compiling": False, "grad": True, "current": 0, "empty": 0, "loads": 0,
             "launches": [], "streams": [], "device_enters": [], "attrs": [], "memsets": [], "shapes": []}
    torch = _fake_torch(state)
    real_empty = torch.empty

    def empty(shape, dtype=None, device=None):
        state["shapes"].append((tuple(shape) if not isinstance(shape, int) else (shape,), dtype))
        return real_empty(shape, dtype=dtype, device=device)

    torch.empty = empty
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(state))
    monkeypatch.setattr(_FakeTensor, "dim", lambda self: len(self.shape), raising=False)
    _FakeTensor.log = []
    return state, _FakeTensor


def test_backward_launches_follow_the_plan_with_the_judges_arguments(pkg_module, fakes):
    state, T = fakes
    p, t = pkg_module._autograd, sys.modules["torch"]
    for M, N, dt, tdt in ((4096, 4096, "bf16", t.bfloat16), (199, 16384, "fp16", t.float16),
                          (3, 1000, "fp32", t.float32)):
        state["launches"].clear()
        state["shapes"].clear()
        x, dy = T((M, N), tdt), T((M, N), tdt)
        w, rstd = T((N,), t.float32), T((M,), t.float32)
        assert p._reason(x, "backward", 1e-6) is None
        dx, dw = p._backward_impl(dy, x, w, rstd, 1e-6)
        key, launches = p._bwd_plan(M, N, dt, 1e-6)
        assert [c["kernel"] for c in state["launches"]] == [la[0] for la in launches]
        ptrs = {"x": x.data_ptr(), "w": w.data_ptr(), "dy": dy.data_ptr(), "rstd": rstd.data_ptr(),
                "dx": dx.data_ptr(), "dw": dw.data_ptr()}
        # what it allocated: dx, dw, then the dw_part workspace as the family sizes it for the judge
        assert state["shapes"] == [((M, N), tdt), ((N,), t.float32),
                                   (p._bwd_geometry.workspace(M, N, dt)["dw_part"], t.float32)]
        for call, (name, grid, block, shared, args, overlap) in zip(state["launches"], launches):
            assert call["grid"] == grid and call["block"] == block and call["shared"] == shared
            assert call["stream"].ptr == 0xABC0 and len(call["args"]) == len(args)
            for got, want in zip(call["args"], args):
                if isinstance(want, str):
                    assert str(got.dtype) == "uint64"
                    if want in ptrs:
                        assert int(got) == ptrs[want], (name, want)
                else:
                    assert str(got.dtype) == want[0] and float(got) == pytest.approx(want[1])
        assert dx.shape == (M, N) and dx.dtype is tdt and dw.shape == (N,) and dw.dtype is t.float32
    assert p.fallback_stats()["backward"]["kernel"] == 3


def _driver_recorder(calls):
    """A stand-in cuLaunchKernelEx (what _launch_ex.driver returns): records each launch's configuration,
    attributes and the 8 bytes behind each parameter pointer (a ctypes scalar's buffer holds at least 8)."""
    import ctypes

    def ex(cfg, fn, params, extra):
        c = cfg._obj
        calls.append({"fn": fn.value, "grid": (c.gridDimX, c.gridDimY, c.gridDimZ),
                      "block": (c.blockDimX, c.blockDimY, c.blockDimZ), "shared": c.sharedMemBytes,
                      "stream": c.hStream, "extra": extra,
                      "attrs": [(c.attrs[i].id, c.attrs[i].value.programmaticStreamSerializationAllowed)
                                for i in range(c.numAttrs)],
                      "params": [ctypes.string_at(params[i], 8) for i in range(len(params))]})
        return 0
    return ex


def _param(raw, want, ptrs):
    """A recorded parameter decoded by the plan's argument (a buffer name: its pointer)."""
    if isinstance(want, str):
        return int.from_bytes(raw, "little") == ptrs[want] if want in ptrs else True
    got = np.frombuffer(raw[:4], dtype=np.int32 if want[0] == "int32" else np.float32)[0]
    return got == (np.int32(want[1]) if want[0] == "int32" else np.float32(want[1]))


def test_a_pdl_genomes_backward_overlaps_through_the_driver_as_the_judge_launches(pkg_module, driver, bwd_family,
                                                                                   monkeypatch):
    """The stand-in's genomes swapped for their pdl twins: every overlapped kernel goes to cuLaunchKernelEx
    (one programmatic-stream-serialization attribute, no cluster attribute, torch's raw stream, the
    parameters cupy would get) after its predecessor went through cupy, with the most shared memory asked
    for both (the judge's carveout); with PDL off, or without cuLaunchKernelEx, every kernel goes through
    cupy in the same order."""
    model, T = driver
    p, t = pkg_module._autograd, sys.modules["torch"]
    assert p._PDL_ENV == "PTXK_RMSNORM_PDL"
    table = p.backward_table()
    for info in table["kernels"].values():
        info["genome"] = _pdl_twin(bwd_family, info["genome"])
    p._bwd_plan.cache_clear()
    calls = []
    monkeypatch.setattr(pkg_module._launch_ex, "driver", lambda library=None: _driver_recorder(calls))
    monkeypatch.setattr(p, "PDL", True)
    kinds = set()
    for M, N, dt, tdt in ((4096, 4096, "bf16", t.bfloat16), (199, 16384, "fp16", t.float16),
                          (3, 1000, "fp32", t.float32)):
        model.state["launches"].clear()
        calls.clear()
        x, dy, w, rstd = T((M, N), tdt), T((M, N), tdt), T((N,), t.float32), T((M,), t.float32)
        dx, dw = p._backward_impl(dy, x, w, rstd, 1e-6)
        key, launches = p._bwd_plan(M, N, dt, 1e-6)
        assert [la[5] for la in launches] == [False] + [True] * (len(launches) - 1) and len(launches) > 1
        plain = [la for la in launches if not la[5]]
        over = [la for la in launches if la[5]]
        assert [c["kernel"] for c in model.state["launches"]] == [la[0] for la in plain]
        assert len(calls) == len(over)
        ptrs = {"x": x.data_ptr(), "w": w.data_ptr(), "dy": dy.data_ptr(), "rstd": rstd.data_ptr(),
                "dx": dx.data_ptr(), "dw": dw.data_ptr()}
        for call, (name, grid, block, shared, args, _) in zip(calls, over):
            fn = p._bwd_function(0, key, name, shared)
            assert call["fn"] == fn.ptr and call["extra"] is None
            assert (call["grid"], call["block"], call["shared"], call["stream"]) == (grid, block, shared, 0xABC0)
            assert call["attrs"] == [(6, 1)]                  # PDL only, never a cluster attribute
            assert len(call["params"]) == len(args)
            assert all(_param(raw, a, ptrs) for raw, a in zip(call["params"], args)), name
        for i, la in enumerate(launches):                     # the judge's carveout: overlapped and predecessor
            if la[5]:
                for j in (i - 1, i):
                    h = p._bwd_function(0, key, launches[j][0], launches[j][3]).ptr
                    assert model.attrs[h].get(9) == 100, launches[j][0]
        kinds.add(tuple(la[0].split("_")[1] if la[0].startswith("bwd_") else "main" for la in launches))
    assert len(kinds) == 2, kinds            # [main, reduce] (partial rows) and [zero, main] (atomics, cluster 8)
    # PDL off, then no cuLaunchKernelEx: the same kernels in the same order, all through cupy
    for off in ("switch", "driver"):
        if off == "switch":
            monkeypatch.setattr(p, "PDL", False)
        else:
            monkeypatch.setattr(p, "PDL", True)
            monkeypatch.setattr(pkg_module._launch_ex, "driver", lambda library=None: None)
        model.state["launches"].clear()
        calls.clear()
        x = T((4096, 4096), t.bfloat16)
        p._backward_impl(T((4096, 4096), t.bfloat16), x, T((4096,), t.float32), T((4096,), t.float32), 1e-6)
        assert not calls and [c["kernel"] for c in model.state["launches"]] == \
            [la[0] for la in p._bwd_plan(4096, 4096, "bf16", 1e-6)[1]], off
    assert not model.refused


def test_forward_impl_writes_rstd_and_the_reasons_are_the_documented_ones(pkg_module, fakes):
    state, T = fakes
    p, t = pkg_module._autograd, sys.modules["torch"]
    x, w = T((2, 64, 4096), t.bfloat16), T((4096,), t.float32)
    y, rstd = p._forward_impl(x, w, 1e-6)
    (call,) = state["launches"]
    assert int(call["args"][3]) == rstd.data_ptr() != 0 and rstd.shape == (2, 64) and rstd.dtype is t.float32
    assert y.shape == x.shape and y.dtype is t.bfloat16
    assert p._reason(T((8, 1001), t.bfloat16), "forward", 1e-6) == "shape"
    assert p._reason(T((8, 1001), t.bfloat16), "backward", 1e-6) == "shape"
    assert p._reason(T((0, 256), t.bfloat16), "forward", 1e-6) == "shape"
    assert p._reason(T((8, 256), t.float64), "forward", 1e-6) == "dtype"
    assert p._reason(T((8, 256), t.bfloat16, device="cpu"), "backward", 1e-6) == "device"
    assert p._reason(T((3, 262144), t.float32), "backward", 1e-6) == "no_kernel"
    assert p._reason(T((3, 262144), t.float32), "forward", 1e-6) is None
    assert set(p.FALLBACK_REASONS) == {"device", "dtype", "shape", "no_kernel"}
    t.cuda.get_device_capability = lambda d: (8, 0)
    p._DEVICE_OK.clear()
    pkg_module._CHECKED.clear()
    assert p._reason(x, "forward", 1e-6) == "device"       # an A100: the sm_90a cubins cannot run there


# -- the driver's launch checks, modelled: the function attributes over a sequence of shapes ---------
class _DriverModel:
    """The CUDA driver's side of the package's cupy launches, as far as function attributes decide
    them: one CUfunction per (module, entry), the same handle from every get_function (as
    cuModuleGetFunction gives), with its MAX_DYNAMIC_SHARED_SIZE_BYTES (attribute 8: 48 KiB until
    set, at most 227 KiB), NON_PORTABLE_CLUSTER_SIZE_ALLOWED (14) and the compiled cluster (11-13,
    from the entry's _c<N> suffix: both families compile clusters with __cluster_dims__). A launch the
    driver refuses with CUDA_ERROR_INVALID_VALUE is recorded in `refused`: more dynamic shared bytes
    than attribute 8 says, more than 8 CTAs a cluster without 14, a grid the cluster does not divide,
    more than 1024 threads."""

    def __init__(self, state):
        self.state = state
        self.handles: dict[tuple[int, str], int] = {}
        self.names: dict[int, str] = {}
        self.attrs: dict[int, dict[int, int]] = {}
        self.asked: dict[int, list[int]] = {}       # handle -> dynamic shared bytes of its launches, in order
        self.refused: list[tuple] = []
        self.launches = 0

    @staticmethod
    def cluster(name: str) -> int:
        head, _, tail = name.rpartition("_c")
        return int(tail) if head and tail.isdigit() else 1

    def get_attribute(self, attr: int, handle: int) -> int:
        c = self.cluster(self.names[handle])
        return {11: c, 12: 1, 13: 1}.get(attr, 0) if c > 1 else 0

    def set_attribute(self, handle: int, attr: int, value: int) -> None:
        if attr == 8 and not 0 <= value <= 227 * 1024:
            raise RuntimeError(f"CUDA_ERROR_INVALID_VALUE: MAX_DYNAMIC_SHARED_SIZE_BYTES {value}")
        self.attrs.setdefault(handle, {})[attr] = int(value)

    def launch(self, handle: int, grid, block, shared: int) -> None:
        self.launches += 1
        self.asked.setdefault(handle, []).append(int(shared))
        name, a, c = self.names[handle], self.attrs.get(handle, {}), self.cluster(self.names[handle])
        problems = []
        if shared > a.get(8, 48 * 1024):
            problems.append(f"{shared} dynamic shared bytes over MAX_DYNAMIC_SHARED_SIZE_BYTES {a.get(8, 48 * 1024)}")
        if c > 8 and not a.get(14):
            problems.append(f"a cluster of {c} without NON_PORTABLE_CLUSTER_SIZE_ALLOWED")
        if grid[0] % c:
            problems.append(f"grid {grid} not divisible by the cluster {c}")
        if block[0] * block[1] * block[2] > 1024:
            problems.append(f"block {block}")
        if problems:
            self.refused.append((name, tuple(grid), tuple(block), int(shared), problems))

    def cupy(self):
        from tests.test_export import _fake_cupy

        model, state = self, self.state
        c = _fake_cupy(state)

        class Function:
            def __init__(self, handle, name):
                self.ptr, self.name = handle, name

            def __call__(self, grid, block, args, shared_mem=0, stream=None):
                model.launch(self.ptr, grid, block, shared_mem)
                state["launches"].append({"kernel": self.name, "grid": grid, "block": block, "args": args,
                                          "shared": shared_mem, "stream": stream})

        class Module:
            count = 0

            def load(self, data):
                state["loads"] += 1
                Module.count += 1
                self.id = Module.count

            def get_function(self, name):
                handle = model.handles.setdefault((self.id, name), len(model.handles) + 1)
                model.names[handle] = name
                return Function(handle, name)

        c.cuda.function.Module = Module
        c.cuda.driver.funcSetAttribute = self.set_attribute
        c.cuda.driver.funcGetAttribute = self.get_attribute
        return c


@pytest.fixture
def driver(fakes, monkeypatch):
    state, T = fakes
    model = _DriverModel(state)
    monkeypatch.setitem(sys.modules, "cupy", model.cupy())
    return model, T


def _shapes(p, dtype):
    """Every N at an end of a forward or backward dispatch range of `dtype` (whole 16-byte units, as
    the package's own tests pick them) at M = a 4 Mi-element matrix's rows, 1, 7 and 199, the Ns
    longest first, then the same shapes shortest first. An entry's shared bytes grow with N within
    its range (and with M for short rows), so the second pass launches cached functions at more
    bytes than the shapes loaded after them asked for, as the H200 run did (the forward's tests,
    then the training tests)."""
    u = 16 // {"bf16": 2, "fp16": 2, "fp32": 4}[dtype]
    ns = {256, 4096, 5120, 8200, 3 * u}
    for table in (p.dispatch_table(), p._autograd.backward_table()):
        for e in table["entries"]:
            if e["dtype"] == dtype:
                ns.add(-(-max(e["n_min"], u) // u) * u)
                if e["n_max"] is not None:
                    ns.add(e["n_max"] // u * u)
    once = [(m, n) for n in sorted((x for x in ns if u <= x <= 262144), reverse=True)
            for m in (max(1, (1 << 22) // n), 1, 7, 199)]
    return once + once[::-1]


def _smem_backward_genomes(bwd_family):
    """Backward EXTREMES whose main kernel takes dynamic shared memory (the stand-in's two genomes
    take none): v2's shared staging over a cluster of 16 and v3's rolled loop with dw in shared memory."""
    mod = sys.modules[type(bwd_family).__module__]
    from genomes import load_space

    space = load_space(bwd_family.space_name)
    picked = [dict(space.make(dict(e))) for e in mod.EXTREMES
              if e.get("staging") == "smem_async" and e["cluster"] == 16]
    assert len(picked) >= 2
    return picked[:2]


def _judge_accepts(model, name: str, grid, block, shared: int) -> None:
    """The same launch prepared by the judge's own code (CupyBackend.prepare_kernel, before every
    case) on a function of its own: the model must accept it, as the H200 accepted the judge's."""
    from fitness.cuda_backend import CupyBackend
    from fitness.family import Launch

    judge = object.__new__(CupyBackend)
    judge.cp, judge._runtime_cluster = sys.modules["cupy"], {}
    handle = model.handles.setdefault(("judge", name), len(model.handles) + 1)
    model.names[handle] = name
    fn = type("Fn", (), {"ptr": handle})()
    c = model.cluster(name)
    judge.prepare_kernel(fn, Launch(kernel=name, grid=tuple(grid), block=tuple(block), args=(),
                                    shared_bytes=int(shared), cluster=(c, 1, 1)))
    model.launch(handle, grid, block, shared)


def test_the_driver_accepts_every_launch_of_a_shape_sequence_in_both_directions(pkg_module, driver, bwd_family):
    """Session 12's H200 run of the exported training package: 25 of its tests failed with
    CUDA_ERROR_INVALID_VALUE at the forward kernel's launch (the judge launches the same kernels
    fine). The package caches one cupy Function per (entry, dynamic shared bytes) and set
    MAX_DYNAMIC_SHARED_SIZE_BYTES to each new shape's bytes on loading it, but the attribute is the
    CUfunction's, shared by all of them: a smaller shape lowered it under a larger one cached before,
    whose next launch the driver refused. Here the package runs both directions over every dispatch
    range at M large, small and large again, forward through the training op's impl (rstd written)
    and backward through its impl, on the stand-in's backward genomes and on two that take shared
    memory; the driver model refuses nothing, and it accepts the judge's own preparation of every
    one of those launches (so it is no stricter than the driver the judge ran on)."""
    model, T = driver
    p, t = pkg_module, sys.modules["torch"]
    ag = p._autograd
    tdt = {"bf16": t.bfloat16, "fp16": t.float16, "fp32": t.float32}
    table = ag.backward_table()
    genome_sets = [None, _smem_backward_genomes(bwd_family)]
    served = {"forward": 0, "backward": 0}
    for genomes in genome_sets:
        if genomes is not None:          # the backward table's genomes swapped for the shared-memory ones
            for info, g in zip(table["kernels"].values(), genomes):
                info["genome"] = g
            ag._bwd_plan.cache_clear()
        for dt in ("bf16", "fp16", "fp32"):
            for M, N in _shapes(p, dt):
                x, w = T((M, N), tdt[dt]), T((N,), t.float32)
                if genomes is None and ag._reason(x, "forward", 1e-6) is None:
                    ag._forward_impl(x, w, 1e-6)
                    served["forward"] += 1
                if ag._reason(x, "backward", 1e-6) is None:
                    ag._backward_impl(T((M, N), tdt[dt]), x, w, T((M,), t.float32), 1e-6)
                    served["backward"] += 1
    ag._bwd_plan.cache_clear()
    fwd_refused = [r for r in model.refused if r[0].startswith("rmsnorm_fwd")]
    assert not model.refused, (f"{len(model.refused)} launches refused ({len(fwd_refused)} forward), first: "
                               f"{(fwd_refused or model.refused)[:2]}")
    # not vacuous: functions of both directions were asked for fewer shared bytes after more, then more again
    def regrown(asked):      # some launch asked for fewer bytes than one before it and one after it
        for s in asked:
            before = [max(s[:i + 1]) for i in range(len(s))]
            after = [max(s[i:]) for i in range(len(s))]
            if any(before[i - 1] > s[i] < after[i + 1] for i in range(1, len(s) - 1)):
                return True
        return False

    fwd = [s for h, s in model.asked.items() if model.names[h].startswith("rmsnorm_fwd")]
    bwd = [s for h, s in model.asked.items() if model.names[h].startswith("rmsnorm_bwd")]
    assert regrown(fwd) and regrown(bwd), "no function was asked for more shared bytes after fewer"
    assert served["forward"] > 100 and served["backward"] > 100, served
    for call in list(model.state["launches"]):
        _judge_accepts(model, call["kernel"], call["grid"], call["block"], call["shared"])
    assert not model.refused, f"the model refuses the judge's own launches: {model.refused[:3]}"


# -- the CLI and its refusals ----------------------------------------------------------------------
def test_cli_exports_with_a_companion(standin, cache, tmp_path, capsys):
    from evo.cli import main

    assert main(["export", str(FWD), "--with", str(standin), "--out", str(tmp_path / "p"),
                 "--cache-dir", str(cache)]) == 0
    out = capsys.readouterr().out
    assert "backward: 9 entries, 2 kernels" in out and (tmp_path / "p" / PKG / "backward" / "dispatch.json").is_file()


def _edited(standin, tmp_path, edit):
    data = read_json(standin)
    edit(data)
    path = tmp_path / "edited_bwd.json"
    path.write_text(json.dumps(data))
    return path


def test_export_refuses_a_companion_it_cannot_carry(standin, cache, tmp_path):
    with pytest.raises(ExportError, match=r"a 'rmsnorm' run; family 'rmsnorm' packages companions \['rmsnorm_bwd'\]"):
        export_run(FWD, tmp_path / "a", cache_dir=cache, companions=[FWD])
    with pytest.raises(ExportError, match="a second 'rmsnorm_bwd' run"):
        export_run(FWD, tmp_path / "b", cache_dir=cache, companions=[standin, standin])

    def wrong(data):
        best = max(data["evaluations"], key=lambda e: e["objectives"]["geomean_speedup"])
        best["status"] = "WRONG_RESULT"

    with pytest.raises(ExportError, match=r"^--with .*edited_bwd.json: run STANDIN-.* best candidate"):
        export_run(FWD, tmp_path / "c", cache_dir=cache, companions=[_edited(standin, tmp_path, wrong)])
    for d in "abc":
        assert not (tmp_path / d).exists()
    from evo.cli import main

    assert main(["export", str(FWD), "--with", str(FWD), "--out", str(tmp_path / "d")]) == 2


# -- the package's own tests, where torch is installed ----------------------------------------------
def test_the_packages_own_tests_pass_where_torch_is_installed(training, tmp_path):
    """The exported tests (training and forward) in a fresh process: on a machine with torch but no
    sm_90 GPU the fallback, opcheck, gradcheck, module and compile (aot_eager) tests run and the
    kernel tests skip; on an H100/H200 with cupy every test runs."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed here (the exported tests need it)")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME",)}
    env["PYTHONPATH"] = os.pathsep.join([str(training.path), env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                         cwd=training.path, capture_output=True, text=True, env=env, timeout=3000)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout.splitlines()[-1]
