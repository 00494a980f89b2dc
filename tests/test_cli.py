"""The command line as a newcomer meets it: --version, help on every argument, one-line errors
(no GPU, a bad --replay path), a small --evaluations, any run source for status/dump, a closed
pipe, and progress that is readable in a log."""

from __future__ import annotations

import argparse
import gzip
import io
import json
import subprocess
import sys

import pytest

from evo.cli import parser
from evo.progress import Progress
from tests.conftest import REPO, subprocess_env

SYNTHETIC = REPO / "experiments" / "synthetic_replay.toml"
MAIN = REPO / "experiments" / "rmsnorm_fwd_h200.toml"


def cli(*args, cwd, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "evo.cli", *args], cwd=cwd, env=env or subprocess_env(),
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory):
    """A finished synthetic run directory (no report: the CLI tests do not need figures)."""
    tmp = tmp_path_factory.mktemp("runs")
    res = cli("run", str(SYNTHETIC), "--runs-dir", str(tmp), "--evaluations", "60", "--no-report", cwd=tmp)
    assert res.returncode == 0, res.stderr
    (run_dir,) = [p for p in tmp.iterdir() if p.is_dir()]
    return run_dir


def test_version():
    res = cli("--version", cwd=REPO)
    assert res.returncode == 0 and res.stdout.startswith("evo ")


def test_every_argument_has_help():
    def walk(p: argparse.ArgumentParser, where: str):
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    assert choice.help, f"{where} {choice.dest}: subcommand without help"
                for name, sub in action.choices.items():
                    yield from walk(sub, f"{where} {name}")
            elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                yield where, action

    missing = [f"{where} {a.dest}" for where, a in walk(parser(), "evo") if not a.help]
    assert not missing


def test_status_and_dump_take_a_run_dir_a_dump_or_a_store_url(synthetic_run, tmp_path):
    url = f"sqlite:///{synthetic_run / 'store.sqlite'}"
    out = tmp_path / "dump.json.gz"
    res = cli("dump", url, "--out", str(out), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    dumped = json.loads(gzip.decompress(out.read_bytes()))
    assert len(dumped["evaluations"]) == 60 and dumped["state"] == "finished"
    lines = []
    for source in (str(synthetic_run), url, str(out)):
        res = cli("status", source, cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        lines.append(res.stdout.splitlines()[0])
    assert all(line == lines[0] for line in lines), lines
    assert "finished, 60/60 evaluations" in lines[0]
    res = cli("status", str(tmp_path / "nothing"), cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "Traceback" not in res.stderr


def test_a_closed_pipe_ends_quietly(synthetic_run):
    res = subprocess.run(f"{sys.executable} -m evo.cli status {synthetic_run} | true", shell=True, cwd=REPO,
                         env=subprocess_env(), capture_output=True, text=True, timeout=60)
    assert "Traceback" not in res.stderr and "BrokenPipe" not in res.stderr, res.stderr


def test_no_gpu_is_one_line_naming_the_config_key_and_the_run_says_failed(tmp_path):
    env = dict(subprocess_env(), CUDA_VISIBLE_DEVICES="")
    res = cli("run", str(MAIN), "--runs-dir", str(tmp_path), cwd=tmp_path, env=env)
    assert res.returncode == 3
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in res.stderr
    assert "[evaluator] workers" in errors[0] and 'kind = "replay"' in errors[0] and "workers=N" not in errors[0]
    (run_dir,) = list(tmp_path.iterdir())
    status = cli("status", str(run_dir), cwd=tmp_path)
    assert ": failed, 0/300 evaluations" in status.stdout and "[evaluator] workers" in status.stdout


def test_a_bad_replay_path_says_how_it_was_resolved(tmp_path):
    res = cli("run", str(MAIN), "--replay", "nope.json", "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip() == (f"error: --replay nope.json: no such file ({(tmp_path / 'nope.json').resolve()}: "
                                  "--replay paths are relative to the working directory)")
    assert not (tmp_path / "runs").exists()
    # and it is resolved as it says: the same relative path from the folder that holds it works
    (tmp_path / "sub").mkdir()
    table = tmp_path / "sub" / "t.csv"
    table.write_text((REPO / "tests" / "data" / "synthetic_table.csv").read_text())
    res = cli("run", str(SYNTHETIC), "--replay", "sub/t.csv", "--evaluations", "30", "--no-report",
              "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert res.returncode == 0, res.stderr


def test_a_missing_config_file_is_named_once(tmp_path):
    res = cli("run", "missing.toml", cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.count("missing.toml") == 1, res.stderr


def test_a_small_evaluation_budget_scales_the_optuna_stage_down(tmp_path):
    recording = REPO / "results" / "rmsnorm_fwd_h200_run.json"
    res = cli("run", str(MAIN), "--replay", str(recording), "--evaluations", "20", "--no-report",
              "--runs-dir", str(tmp_path), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "search.optuna.trials scaled from 40 to 10" in res.stderr
    assert "10 evaluations" in res.stdout and "10 of the 128 recorded evaluations replayed" in res.stdout


def test_progress_is_periodic_lines_when_not_a_terminal():
    out = io.StringIO()
    p = Progress(4, "evo export", "kernels compiled", stream=out, every_s=0.0)
    for _ in range(4):
        p.advance(info={"cached": 1})
    p.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 5 and "\r" not in out.getvalue()
    assert lines[-1].startswith("evo export: 4/4 kernels compiled (100%, ") and lines[-1].endswith(", cached 1)")
    quiet = io.StringIO()
    p = Progress(4, "x", stream=quiet, every_s=3600.0)
    p.advance()
    p.close()
    assert quiet.getvalue().count("\n") == 1      # only the closing line within the period


def test_ctrl_c_outside_a_run_is_exit_130_without_a_traceback(monkeypatch, capsys):
    import evo.session
    from evo.cli import main

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(evo.session, "report_run", interrupted)
    assert main(["report", "x", "--out", "y"]) == 130
    assert capsys.readouterr().err.strip() == "interrupted"
