"""[target] gpu is checked against the GPU that judges: a run for the H200 that lands on an H100 (a device
service may hand out either, session 25) stops at its start, marked failed with the reason, instead of
recording the H100's times under a config that says H200."""

from __future__ import annotations

import pytest

from evo.config import load_config
from evo.evaluators import target_device_problem
from evo.rundir import create_run_dir
from evo.store import open_store
from fitness.workers import WrongDeviceError
from tests.conftest import REPO

CONFIG = REPO / "experiments" / "rmsnorm_bwd_h200.toml"


@pytest.mark.parametrize("target,device", [
    ("H200", "NVIDIA H200"), ("h200", "NVIDIA H200"), ("H100", "NVIDIA H100 80GB HBM3"),
    ("H200", "NVIDIA H200 | NVIDIA H200"), ("H200", ""), ("", "NVIDIA H100 80GB HBM3"),
])
def test_the_same_gpu_or_an_unsaid_one_is_no_problem(target, device):
    assert target_device_problem(target, device) is None


@pytest.mark.parametrize("target,device,named", [
    ("H200", "NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"),
    ("H100", "NVIDIA H100x", "NVIDIA H100x"),                      # a word of the name, not a prefix of one
    ("H200", "NVIDIA H200 | NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"),   # every GPU of the judge
])
def test_another_gpu_is_one_line_naming_both_and_the_fix(target, device, named):
    problem = target_device_problem(target, device)
    assert problem is not None and "\n" not in problem
    assert f"target.gpu = {target!r}" in problem and repr(named) in problem and "[target] gpu" in problem
    assert "NVIDIA H200'" not in problem                            # the matching GPU is not blamed


class _PastTheCheck(Exception):
    """Raised by the stand-in judge for anything the search asks of it after the device check."""


class _JudgeOn:
    """A GPU judge as the session sees it: workers that report their device, and nothing else (the
    search's first question to it raises _PastTheCheck)."""

    def __init__(self, device: str) -> None:
        self.device, self.started = device, False

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def pool(self):
        self.started = True
        return self

    def describe(self) -> dict:
        return {"device": self.device if self.started else ""}

    def __getattr__(self, name: str):
        raise _PastTheCheck(name)


def _execute_on(tmp_path, monkeypatch, device: str):
    import evo.session

    judge = _JudgeOn(device)
    monkeypatch.setattr(evo.session, "build_evaluator", lambda cfg, space: judge)
    cfg = load_config(CONFIG).with_overrides({"output.progress": False, "budget.evaluations": 40})
    rd = create_run_dir(cfg, tmp_path / "runs")
    return rd, judge, evo.session


def test_a_run_for_the_h200_stops_on_an_h100_before_judging_and_says_why(tmp_path, monkeypatch):
    rd, judge, session = _execute_on(tmp_path, monkeypatch, "NVIDIA H100 80GB HBM3")
    with pytest.raises(WrongDeviceError, match="target.gpu = 'H200'"):
        session.execute(rd, quiet=True)
    assert judge.started
    store = open_store(rd.store_url)
    try:
        info = store.get_run(rd.run_id)
    finally:
        store.close()
    assert info.state == "failed" and "NVIDIA H100 80GB HBM3" in info.notes["stop_reason"]


def test_the_check_passes_on_the_target_gpu(tmp_path, monkeypatch):
    rd, judge, session = _execute_on(tmp_path, monkeypatch, "NVIDIA H200")
    with pytest.raises(_PastTheCheck):            # past the check: the search asks the judge
        session.execute(rd, quiet=True)
    assert judge.started
