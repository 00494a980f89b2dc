"""`evo export`: the committed H200 run as a standalone package (CPU only: nvcc, cuobjdump, pip).

The export is made once per session (its compiles go through evo's Compiler in a tmp cache). The
equivalence of the packaged `_geometry.py` with the family's `launch` is what makes the package
trustworthy: it is checked case by case for every exported genome and a sample of the space.
"""

from __future__ import annotations

import ast
import copy
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evo.dispatch import build_dispatch, lookup
from evo.export import ExportError, export_run
from fitness.family import load_family
from fitness.toolchain import find_nvcc, find_tool, ToolchainError

REPO = Path(__file__).resolve().parent.parent
RUN = REPO / "results" / "rmsnorm_fwd_h200_run.json"
PKG = "ptxk_rmsnorm"
ODD_M = (1, 7, 199)
ODD_N = (256, 520, 1000, 4104, 8200, 131072)


def _have_nvcc() -> bool:
    try:
        find_nvcc()
        return True
    except ToolchainError:
        return False


needs_nvcc = pytest.mark.skipif(not _have_nvcc(), reason="needs nvcc")


@pytest.fixture(scope="session")
def exported(tmp_path_factory):
    if not _have_nvcc():
        pytest.skip("needs nvcc")
    out = tmp_path_factory.mktemp("export") / "pkg"
    cache = tmp_path_factory.mktemp("compile-cache")
    result = export_run(RUN, out, cache_dir=cache)
    return result


@pytest.fixture(scope="session")
def family():
    return load_family("rmsnorm")


@pytest.fixture(scope="session")
def packaged_geometry(exported):
    path = exported.path / PKG / "_geometry.py"
    spec = importlib.util.spec_from_file_location("_ptxk_exported_geometry", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _frames():
    from evo.analysis import load_run

    return load_run(RUN)


def _entries():
    return build_dispatch(_frames().records, baseline="torch")


# -- the files ----------------------------------------------------------------------------------
def test_package_has_every_file(exported):
    root = exported.path
    for rel in ("pyproject.toml", "README.md", "bench.py", f"tests/test_{PKG}.py", f"{PKG}/__init__.py",
                f"{PKG}/_geometry.py", f"{PKG}/bench.py", f"{PKG}/dispatch.json", f"{PKG}/provenance.json"):
        assert (root / rel).is_file(), rel
    keys = {e.key for e in _entries()}
    assert set(exported.kernels) == keys and len(keys) == 7
    for k in keys:
        for ext in ("cu", "cubin", "ptx", "json"):
            assert (root / PKG / "kernels" / f"{k}.{ext}").stat().st_size > 0, (k, ext)
        assert json.loads((root / PKG / "kernels" / f"{k}.json").read_text()) == \
            next(dict(e.genome) for e in _entries() if e.key == k)
    table = json.loads((root / PKG / "dispatch.json").read_text())
    assert table["run_id"] == "rmsnorm-fwd-h200-20261129-191846-d0d8" and table["arch"] == "sm_90a"
    assert {e["dtype"] for e in table["entries"]} == {"bf16", "fp16", "fp32"}
    assert [(e["dtype"], e["n_min"], e["n_max"], e["key"]) for e in table["entries"] if e["measured"]] == \
        [(e.dtype, e.n_min, e.n_max, e.key) for e in _entries()]
    for k, info in table["kernels"].items():
        assert info["nvcc_flags"][:4] == ["-cubin", "-gencode", "arch=compute_90a,code=sm_90a", "-O3"]
        assert "-std=c++17" in info["nvcc_flags"]
        assert info["nvcc_flags"][-1] == f"-maxrregcount={info['genome']['maxrreg']}"
        # same source, flags, arch and toolkit as the judge's compile recorded in the run
        assert info["same_compile_as_judge"] is True, k


def test_readme_and_provenance(exported):
    readme = (exported.path / "README.md").read_text()
    assert "| bf16 | 32768 x 4096 | 136.3 | 3.94 | 163.1 |" in readme      # results/rmsnorm_fwd_h200.md's table
    assert "rmsnorm-fwd-h200-20261129-191846-d0d8" in readme
    prov = json.loads((exported.path / PKG / "provenance.json").read_text())
    assert prov["run_id"] == "rmsnorm-fwd-h200-20261129-191846-d0d8"
    assert any("H200" in g for g in prov["gpu"]) and prov["toolkit_in_run"] == ["nvcc 13.0.88"]
    assert prov["bench"]["versions"]["torch"] == "2.11.0" and prov["bench"]["file"] == "rmsnorm_fwd_h200.json"
    assert set(prov["genomes"]) == set(exported.kernels)
    assert prov["exported_at"] and "commit" in prov["factory"]
    pyproject = (exported.path / "pyproject.toml").read_text()
    assert "kernels/*.cubin" in pyproject and "kernels/*.ptx" in pyproject and "setuptools" in pyproject


def test_cubins_are_sm90a_with_their_entries(exported, family):
    cuobjdump = find_tool("cuobjdump")
    if not cuobjdump:
        pytest.skip("needs cuobjdump")
    for key, info in exported.kernels.items():
        cubin = exported.path / PKG / info["cubin"]
        assert cubin.read_bytes()[:4] == b"\x7fELF"
        sass = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
        assert "code for sm_90a" in sass
        functions = {line.split(":", 1)[1].strip() for line in sass.splitlines() if "Function :" in line}
        c = info["genome"]["cluster"]
        want = {f"rmsnorm_fwd_{x}_{w}" + (f"_c{cc}" if cc > 1 else "")
                for x, w in family.dtype_pairs() for cc in sorted({1, c})}
        assert functions == want == set(info["entries"]), key
        assert ".target sm_90a" in (exported.path / PKG / info["ptx"]).read_text()


# -- install and import without the factory --------------------------------------------------------
def _pip_install(src: Path, target: Path) -> subprocess.CompletedProcess:
    base = [sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", "-q",
            "--target", str(target)]
    offline = importlib.util.find_spec("wheel") is not None
    cmd = base + (["--no-build-isolation"] if offline else []) + [str(src)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_pip_install_and_import_without_the_factory(exported, tmp_path):
    target = tmp_path / "site"
    proc = _pip_install(exported.path, target)
    if proc.returncode != 0 and ("wheel" in proc.stderr or "network" in proc.stderr.lower()
                                 or "connection" in proc.stderr.lower()):
        pytest.skip(f"cannot build a wheel here: {proc.stderr.strip().splitlines()[-1:]}")
    assert proc.returncode == 0, proc.stderr
    installed = target / PKG
    assert (installed / "dispatch.json").is_file() and (installed / "provenance.json").is_file()
    assert len(list((installed / "kernels").glob("*.cubin"))) == len(exported.kernels)
    assert len(list((installed / "kernels").glob("*.ptx"))) == len(exported.kernels)
    code = f"""
import importlib.util, sys
# the factory may be installed (CI installs it editable): make its packages unimportable, so any
# import of them by the exported package fails here
for name in ("evo", "fitness", "genomes", "operators"):
    sys.modules[name] = None
import {PKG} as p
key, launch = p.plan(4096, 4096, "bf16")
print("plan", key, launch["kernel"])
for call in (lambda: p.rmsnorm(None, None), lambda: p.rmsnorm_cupy(None, None)):
    try:
        call()
    except RuntimeError as exc:
        assert isinstance(exc, p.UnsupportedDevice)
        print("error", exc)
    else:
        raise SystemExit("no error without an sm_90 GPU")
"""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONPATH"] = str(target)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    errors = [l for l in run.stdout.splitlines() if l.startswith("error")]
    assert len(errors) == 2
    for line in errors:
        assert "sm_90a" in line and "H100/H200" in line and "found" in line
    assert "plan 97d69cc067472bc1f279 rmsnorm_fwd_bf16_fp32" in run.stdout


# -- the packaged geometry -------------------------------------------------------------------------
def test_geometry_module_uses_only_the_standard_library(exported):
    tree = ast.parse((exported.path / PKG / "_geometry.py").read_text())
    mods = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    mods |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert mods <= {"__future__", "dataclasses", "typing"}, mods


def _cases(family):
    cases = family.benchmark_cases("quack+models")
    cases += [family.make_case(m, n, d) for d in ("bf16", "fp16", "fp32") for m in ODD_M for n in ODD_N]
    return cases


def _launch_tuple(lau):
    return None if lau is None else (lau.kernel, tuple(lau.grid), tuple(lau.block), lau.shared_bytes,
                                     tuple(lau.cluster))


def _packaged_tuple(d):
    return None if d is None else (d["kernel"], tuple(d["grid"]), tuple(d["block"]), d["shared_bytes"],
                                   tuple(d["cluster"]))


def _genomes(exported, family):
    fam_mod = sys.modules[type(family).__module__]
    out = [dict(info["genome"]) for info in exported.kernels.values()]
    out += [dict(g) for g in fam_mod.sample_genomes(24, seed=3)]
    return out


def test_geometry_equivalence(exported, family, packaged_geometry):
    cases = _cases(family)
    assert len(cases) == 3 * (11 + 15) + 3 * 18
    compared = nones = 0
    for genome in _genomes(exported, family):
        for case in cases:
            p = case.params
            want = _launch_tuple(family.launch(genome, case))
            got = _packaged_tuple(packaged_geometry.launch(genome, p["M"], p["N"], p["dtype"], p["weight_dtype"],
                                                           p["with_rstd"]))
            assert got == want, (genome, case.id)
            compared += 1
            nones += want is None
    assert compared > 3000 and nones < compared


def test_packaged_geometry_refuses_what_the_family_refuses(family, packaged_geometry):
    genome = dict(family.default_genome())
    for m, n, dt in ((4, 1001, "bf16"), (4, 6, "fp32"), (0, 256, "bf16")):
        with pytest.raises(ValueError) as want:
            family.launch(genome, family.make_case(m, n, dt))
        with pytest.raises(ValueError) as got:
            packaged_geometry.launch(genome, m, n, dt)
        assert str(got.value) == str(want.value)


def test_package_plan_follows_the_dispatch_table(exported):
    spec = importlib.util.spec_from_file_location(PKG, exported.path / PKG / "__init__.py",
                                                  submodule_search_locations=[str(exported.path / PKG)])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[PKG] = mod
    try:
        spec.loader.exec_module(mod)
        entries = _entries()
        for n in (8, 256, 264, 1000, 4096, 8200, 65536, 131072, 262144, 1 << 20):
            for dt in ("bf16", "fp16", "fp32"):
                key, launch = mod.plan(199, n, dt)
                assert key == lookup(entries, "bf16", n).key        # fp16/fp32 reuse the bf16 ranges
                assert launch["kernel"].startswith(f"rmsnorm_fwd_{dt}_fp32")
        with pytest.raises(ValueError):
            mod.plan(3, 1001, "bf16")
        with pytest.raises(RuntimeError, match="sm_90a"):
            mod.rmsnorm(None, None) if importlib.util.find_spec("torch") is None else mod.rmsnorm_cupy(None, None)
    finally:
        sys.modules.pop(PKG, None)


# -- refusals -------------------------------------------------------------------------------------
def _edited_dump(tmp_path, edit) -> Path:
    data = json.loads(RUN.read_text())
    data = copy.deepcopy(data)
    edit(data)
    path = tmp_path / "edited_run.json"
    path.write_text(json.dumps(data))
    return path


def _best_index(data):
    metric = data["config"]["objective"]["metric"]
    ok = [(e["objectives"].get(metric, float("-inf")), -i, i) for i, e in enumerate(data["evaluations"])
          if e["status"] == "OK" and not e.get("suspect")]
    return max(ok)[2]


@pytest.mark.parametrize("how", ["wrong_result", "suspect", "case_wrong", "runtime_error"])
def test_export_refuses_a_best_that_failed_verification(tmp_path, how):
    def edit(data):
        ev = data["evaluations"][_best_index(data)]
        if how == "wrong_result":
            ev["status"] = "WRONG_RESULT"
            ev["message"] = "y mismatch"
        elif how == "suspect":
            ev["suspect"] = True
        elif how == "case_wrong":
            ev["cases"][3]["status"] = "WRONG_RESULT"
        else:
            ev["status"] = "RUNTIME_ERROR"

    dump = _edited_dump(tmp_path, edit)
    with pytest.raises(ExportError, match="best candidate"):
        export_run(dump, tmp_path / "out", cache_dir=tmp_path / "cache")
    assert not (tmp_path / "out").exists()
    from evo.cli import main

    assert main(["export", str(dump), "--out", str(tmp_path / "out2"), "--cache-dir", str(tmp_path / "c")]) == 2


def test_export_refuses_without_a_verified_evaluation(tmp_path, capsys):
    def edit(data):
        for ev in data["evaluations"]:
            ev["status"] = "WRONG_RESULT"

    dump = _edited_dump(tmp_path, edit)
    with pytest.raises(ExportError, match="no verified evaluation"):
        export_run(dump, tmp_path / "out", cache_dir=tmp_path / "cache")
    from evo.cli import main

    assert main(["export", str(dump), "--out", str(tmp_path / "o")]) == 2
    assert "no verified evaluation" in capsys.readouterr().err


def test_export_refuses_a_non_empty_out_dir(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("x")
    with pytest.raises(ExportError, match="not empty"):
        export_run(RUN, tmp_path / "out", cache_dir=tmp_path / "cache")
    assert (tmp_path / "out" / "keep.txt").exists()
