"""experiments/device/kda_baselines.py run here end to end with a numpy backend and fake
baselines (one exact, one wrong, one that supports nothing), so a device call is not spent on a
plumbing error: every scenario verified on both distributions, timed, written as JSON and a table."""

from __future__ import annotations

import importlib.util
import json

import numpy as np

from fitness import dtypes
from fitness.family import Baseline, BaselineRun, load_family

from tests.conftest import REPO
from tests.host_backend import HostBackend

FAMILY = load_family("kda")


def _script():
    spec = importlib.util.spec_from_file_location("kda_baselines_script", REPO / "experiments" / "device" / "kda_baselines.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class NumpyBackend(HostBackend):
    def __init__(self):
        self.flushes = 0

    def describe(self):
        return "numpy"


def _outputs(case):
    def outputs(result):
        return {n: dtypes.quantize(v, "bf16" if n == "o" else case.params["state"]) for n, v in result.items()}
    return outputs


def _exact(case, dev):
    refs = FAMILY.reference(case, dev)
    return BaselineRun(lambda: refs, _outputs(case))


def _wrong(case, dev):
    refs = FAMILY.reference(case, dev)
    return BaselineRun(lambda: {n: 0.9 * v for n, v in refs.items()}, _outputs(case))


class FakeFamily:
    """The kda family with fake baselines in place of FlashKDA and fla."""

    def __getattr__(self, name):
        return getattr(FAMILY, name)

    def benchmark_cases(self, matrix="default"):
        return [FAMILY.make_case((40,), 2, name="tiny-fixed"), FAMILY.make_case((9, 14, 3), 2, name="tiny-mixed"),
                FAMILY.make_case((8, 8), 2, name="tiny-uniform")]

    def baselines(self):
        return [Baseline("flashkda", lambda: True, _exact), Baseline("fla", lambda: True, _wrong),
                Baseline("never", lambda: True, lambda case, dev: None)]


def test_script_verifies_times_and_writes_the_table(tmp_path):
    mod = _script()
    backend = NumpyBackend()
    prefix = tmp_path / "kda"
    rc = mod.main(["--out", str(prefix), "--cases", "fixed,uniform", "--reps", "3", "--cross-check-heads", "1",
                   "--warmup", "1", "--seed", "5", "--no-do-bench", "--baselines", "flashkda,fla,never,absent"],
                  backend=backend, family=FakeFamily())
    assert rc == 0
    report = json.loads(prefix.with_suffix(".json").read_text())
    assert [r["case"] for r in report["scenarios"]] == ["tiny-fixed/H2", "tiny-uniform/H2"]
    first = report["scenarios"][0]
    assert set(first["recurrent_check"]) == {"flashkda", "long_memory"}
    assert first["recurrent_check"]["long_memory"]["heads"] == 1
    assert first["recurrent_check"]["long_memory"]["o_rel_diff"] < 1e-12
    assert first["recurrent_check"]["flashkda"]["final_state_rel_diff"] < 1e-12
    assert "recurrent_check" not in report["scenarios"][1]
    for row in report["scenarios"]:
        b = row["baselines"]
        assert b["flashkda"]["status"] == "ok" and b["flashkda"]["samples"] == 3
        for d in ("flashkda", "long_memory"):
            assert b["flashkda"]["checks"][d]["ok"] and b["flashkda"]["checks"][d]["o_rel_rms"] < 2e-3
            assert b["flashkda"]["checks"][d]["o_row_rms"] < 0.05 and b["fla"]["checks"][d]["o_row_rms"] is None
            assert not b["fla"]["checks"][d]["ok"] and abs(b["fla"]["checks"][d]["o_rel_rms"] - 0.1) < 2e-3
        assert b["flashkda"]["after_timing"]["ok"] and not b["fla"]["after_timing"]["ok"]
        assert b["never"]["status"] == "unsupported" and "median_ms" not in b["never"]
        assert b["absent"]["status"] == "unavailable"
        assert row["fla_over_flashkda"] > 0
    assert backend.flushes == 2 * 2 * (3 + 1)               # 2 scenarios x 2 timed baselines x rounds
    table = prefix.with_suffix(".md").read_text()
    assert "| tiny-fixed/H2 |" in table and "FAIL" in table


def test_partial_results_are_written_after_every_scenario_and_no_cross_check_by_default(tmp_path):
    """The JSON and the table exist after the first scenario (a call that runs out of time keeps
    them); references are made once per (scenario, distribution) and dropped after it."""
    mod = _script()
    seen = []

    class Watching(FakeFamily):
        def reference(self, case, inputs, **kw):
            seen.append(case.id)
            return FAMILY.reference(case, inputs, **kw)

        def baselines(self):
            def exact(case, dev):
                assert (tmp_path / "kda.md").is_file() == (case.id != "tiny-fixed/H2")
                return _exact(case, dev)
            return [Baseline("flashkda", lambda: True, exact)]

    prefix = tmp_path / "kda"
    assert mod.main(["--out", str(prefix), "--cases", "fixed,mixed", "--reps", "2", "--warmup", "0", "--seed", "1",
                     "--no-do-bench", "--baselines", "flashkda"], backend=NumpyBackend(), family=Watching()) == 0
    report = json.loads(prefix.with_suffix(".json").read_text())
    assert all("recurrent_check" not in r for r in report["scenarios"])
    # one chunked reference per (scenario, distribution) (the fake adapter makes its own elsewhere)
    assert seen == ["tiny-fixed/H2"] * 2 + ["tiny-mixed/H2"] * 2


def test_peers_build_restores_flashkda_and_tritons_cache_and_saves_the_cache(tmp_path):
    """kda_peers_build.sh: the carried FlashKDA build is unpacked and named by
    EVO_FLASHKDA_PREBUILT (with its commit); Triton's cache is restored from a carried archive or
    its parts; kda_triton_save writes it back without the intermediate IR, in 15 MiB parts when
    larger (a returned file is at most 16 MiB)."""
    import os
    import subprocess
    import tarfile

    repo, tx, tc, out = tmp_path / "repo", tmp_path / "tx", tmp_path / "triton", tmp_path / "out"
    (repo / ".peers").mkdir(parents=True)
    build = tmp_path / "build" / "flashkda_peer_C"
    build.mkdir(parents=True)
    (build / "flashkda_peer_C.so").write_bytes(b"\x7fELF")
    with tarfile.open(repo / ".peers" / "flashkda_ext.tgz", "w:gz") as t:
        t.add(build, arcname="flashkda_peer_C")
    (repo / ".peers" / "flashkda_ext.commit").write_text("1ce47ea\n")
    cache = tmp_path / "cache"
    (cache / "AB").mkdir(parents=True)
    (cache / "AB" / "k.cubin").write_bytes(b"cubin")
    (cache / "AB" / "k.ttgir").write_text("ir")
    (cache / "CD").mkdir()
    (cache / "CD" / "chunk_kda.autotune.json").write_text("{}")
    (cache / "CD" / "big.cubin").write_bytes(np.random.default_rng(0).bytes(16 * 1024 * 1024))
    parts = subprocess.run(f"tar -C {cache} -czf - . | split -b 15M -d -a 1 - {repo}/.peers/fla_triton.tgz.part",
                           shell=True, capture_output=True, text=True)
    assert parts.returncode == 0, parts.stderr
    script = f"""
        export TORCH_EXTENSIONS_DIR={tx} TRITON_CACHE_DIR={tc} OUT={out}
        . {REPO}/experiments/device/kda_peers_build.sh
        echo "PREBUILT=$EVO_FLASHKDA_PREBUILT COMMIT=$EVO_FLASHKDA_COMMIT"
        kda_triton_save
    """
    res = subprocess.run(["bash", "-c", script], cwd=repo, capture_output=True, text=True,
                         env={**os.environ, "PATH": os.environ.get("PATH", "")})
    assert res.returncode == 0, res.stderr
    assert "FlashKDA build restored" in res.stdout and "Triton cache restored from parts" in res.stdout
    assert f"PREBUILT={tx}/flashkda_peer_C/flashkda_peer_C.so COMMIT=1ce47ea" in res.stdout
    assert "Triton cache: 1 autotune results, 2 kernels" in res.stdout
    saved = sorted(p.name for p in out.iterdir())
    assert saved == ["fla_triton.tgz.part0", "fla_triton.tgz.part1"]
    joined = tmp_path / "joined.tgz"
    joined.write_bytes(b"".join((out / n).read_bytes() for n in saved))
    with tarfile.open(joined) as t:
        names = sorted(m.name.removeprefix("./") for m in t.getmembers() if m.isfile())
    assert names == ["AB/k.cubin", "CD/big.cubin", "CD/chunk_kda.autotune.json"]      # no .ttgir
