"""The device scripts (experiments/device/*.sh, lab tooling) run only on the GPU machine, one call at a time;
what can be checked here is checked here: they parse, and the helpers that carry state between
sessions (QuACK's autotune cache) do what the docs say."""

from __future__ import annotations

import shutil
import tarfile
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPTS = sorted((REPO / "experiments" / "device").glob("*.sh"))


def test_the_device_glue_lives_under_experiments_device():
    assert len(SCRIPTS) >= 12 and not list((REPO / "experiments" / "scripts").glob("*.sh"))
    assert (REPO / "experiments" / "device" / "README.md").is_file()


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_device_script_parses(script):
    res = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_quacks_autotune_cache_is_restored_from_the_repo_and_saved_to_out(tmp_path):
    """results/quack_autotune/ -> $QUACK_CACHE_DIR before a pass (entries already there win), and
    only the *.autotune.json files (not QuACK's compiled objects) -> one archive $OUT/quack_autotune.tgz after."""
    if shutil.which("bash") is None:
        pytest.skip("bash not found")
    repo = tmp_path / "repo"
    (repo / "results" / "quack_autotune" / "OLD").mkdir(parents=True)
    (repo / "results" / "quack_autotune" / "OLD" / "rmsnorm_fwd_tuned.autotune.json").write_text('{"old": 1}')
    cache, out = tmp_path / "cache", tmp_path / "out"
    script = f"""
        . {REPO}/experiments/device/device_lib.sh
        export QUACK_CACHE_DIR={cache} OUT={out}
        quack_autotune_restore
        mkdir -p {cache}/NEW && echo '{{}}' > {cache}/NEW/rmsnorm_fwd_tuned.autotune.json && : > {cache}/NEW/kernel.o
        quack_autotune_save
    """
    res = subprocess.run(["bash", "-c", script], cwd=repo, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "QuACK autotune cache: 1 shapes" in res.stdout
    assert "QuACK autotune cache saved: 2 shapes" in res.stdout
    with tarfile.open(out / "quack_autotune.tgz") as archive:
        saved = sorted(Path(m.name).as_posix().removeprefix("./") for m in archive.getmembers() if m.isfile())
    assert saved == ["NEW/rmsnorm_fwd_tuned.autotune.json", "OLD/rmsnorm_fwd_tuned.autotune.json"]
    assert sorted(p.name for p in out.iterdir()) == ["quack_autotune.tgz"]   # one file: the device returns 8 at most
    assert (cache / "OLD" / "rmsnorm_fwd_tuned.autotune.json").read_text() == '{"old": 1}'


def test_require_peers_ends_a_call_whose_peers_cannot_be_imported(tmp_path):
    """Session 12 lost INT21's checkout for two calls and QuACK's libs-core wheel for all of them;
    `require_peers` (device_lib.sh) says which peer is missing and why, and returns 4, so a call
    stops before it records a search or a table without them."""
    if shutil.which("bash") is None:
        pytest.skip("bash not found")
    script = f"""
        cd {REPO} && . experiments/device/device_lib.sh
        export EVO_INT21_ROOT={tmp_path}/no-checkout PYTHONPATH={REPO}
        require_peers json int21 no_such_peer_module; echo "rc=$?"
        require_peers json; echo "rc=$?"
    """
    res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
    lines = res.stdout.splitlines()
    assert lines[0] == "peer json: ok"
    assert lines[1].startswith("peer int21: MISSING (RuntimeError: INT21's RMSNorm-H100 checkout is missing")
    assert lines[2].startswith("peer no_such_peer_module: MISSING (ModuleNotFoundError")
    assert lines[3:] == ["rc=4", "peer json: ok", "rc=0"], res.stdout + res.stderr


def test_out_within_limit_packs_the_small_files_beyond_eight_into_one(tmp_path):
    """The device returns at most 8 files from $OUT and drops the rest ("count": session 27 lost a probe
    log that way). `out_within_limit` leaves 8 alone; of 11 (one in a folder, one with a space in its
    name) it keeps the 7 largest and packs the other 4 into $OUT/more_files.tgz, a name not yet taken."""
    if shutil.which("bash") is None:
        pytest.skip("bash not found")
    for n, packed in ((8, False), (11, True)):
        out = tmp_path / f"out{n}"
        (out / "sub").mkdir(parents=True)
        names = [f"f{i}.log" for i in range(n - 2)] + ["sub/deep.log", "a name.log"]
        for i, name in enumerate(names):
            (out / name).write_text("x" * (100 * (i + 1)))          # f0.log the smallest, "a name.log" the largest
        if packed:
            (out / "more_files.tgz").write_text("an archive of the script's own")
            names.append("more_files.tgz")
        res = subprocess.run(["bash", "-c", f". {REPO}/experiments/device/device_lib.sh && OUT={out} out_within_limit"],
                             capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        left = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
        if not packed:
            assert left == sorted(names) and res.stdout == ""
            continue
        assert "12 files under $OUT" in res.stdout and "5 in $OUT/more_files_2.tgz" in res.stdout
        with tarfile.open(out / "more_files_2.tgz") as archive:      # the name taken: a new one, the old packed
            assert sorted(m.name for m in archive.getmembers()) == ["f0.log", "f1.log", "f2.log", "f3.log",
                                                                    "more_files.tgz"]
            assert archive.extractfile("f0.log").read() == b"x" * 100
            assert archive.extractfile("more_files.tgz").read() == b"an archive of the script's own"
        assert left == sorted(["a name.log", "sub/deep.log", "f4.log", "f5.log", "f6.log", "f7.log", "f8.log",
                               "more_files_2.tgz"])
