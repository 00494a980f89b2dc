"""Recordings of finished sessions are kept gzipped (results/archive/sessionN/rmsnorm_fwd_h200_run.json.gz):
every device call carries the whole working tree within 64 MiB, and seven sessions' runs had grown
to 19 MB of it. Whatever reads a recording (replay, seed_from, load_run, the scripts) reads either
form and gets the same thing."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

from evo.analysis import load_run
from fitness.records import is_json_name, read_json
from fitness.replay import ReplayEvaluator
from tests.conftest import REPO

@pytest.fixture(scope="module")
def gz_recording(tmp_path_factory):
    """A gzipped recording made here (a synthetic run dumped by `evo dump --out X.json.gz`), so these
    tests do not depend on which sessions results/archive/ keeps."""
    from evo.config import load_config
    from evo.rundir import create_run_dir
    from evo.session import dump_run, execute

    tmp = tmp_path_factory.mktemp("recording")
    cfg = load_config(REPO / "experiments" / "synthetic_replay.toml").with_overrides(
        {"budget.evaluations": 32, "search.optuna.trials": 8, "output.progress": False,
         "output.runs_dir": str(tmp / "runs"), "evaluator.replay": str(REPO / "tests" / "data" / "synthetic_table.csv")})
    rd = create_run_dir(cfg)
    execute(rd, quiet=True)
    out = tmp / "rmsnorm_fwd_h200_run.json.gz"
    assert dump_run(rd.path, out) == 0
    return out


def test_a_gzipped_recording_reads_as_its_json(tmp_path, gz_recording):
    plain = tmp_path / "run.json"
    with gzip.open(gz_recording, "rt", encoding="utf-8") as fh:
        plain.write_text(fh.read())
    assert read_json(gz_recording) == read_json(plain) == json.loads(plain.read_text())
    assert is_json_name(plain) and is_json_name(gz_recording) and not is_json_name(tmp_path / "run.csv")


def test_replay_and_load_run_take_either_form(tmp_path, gz_recording):
    plain = tmp_path / "run.json"
    plain.write_text(json.dumps(read_json(gz_recording)))
    a, b = ReplayEvaluator.from_file(gz_recording), ReplayEvaluator.from_file(plain)
    assert a.describe()["device"] == b.describe()["device"] and len(a) == len(b) == 32
    assert [e.key for e in a.evaluations()] == [e.key for e in b.evaluations()]
    fa, fb = load_run(gz_recording), load_run(plain)
    assert fa.evaluations["key"].tolist() == fb.evaluations["key"].tolist()
    assert fa.run["run_id"] == fb.run["run_id"]


def test_a_file_that_is_not_gzip_behind_a_gz_name_is_a_clear_error(tmp_path):
    bad = tmp_path / "run.json.gz"
    shutil.copy(REPO / "results" / "rmsnorm_dispatch.json", bad)
    with pytest.raises(ValueError, match="not an `evo dump` JSON file"):
        load_run(bad)
    with pytest.raises(OSError):
        ReplayEvaluator.from_file(bad)


def test_archived_recordings_are_gzipped_and_the_current_one_is_not():
    """The README's main job replays results/rmsnorm_fwd_h200_run.json as plain JSON (readable, diffable);
    earlier sessions' runs are archived compressed, and nothing of them is left uncompressed."""
    archived = sorted((REPO / "results" / "archive").glob("session*/rmsnorm_fwd_h200_run.json*"))
    assert archived and all(p.name.endswith(".json.gz") for p in archived)
    assert (REPO / "results" / "rmsnorm_fwd_h200_run.json").is_file()
