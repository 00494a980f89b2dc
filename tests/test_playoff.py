"""evo/playoff.py: near-tied genomes of a row width judged again in one process, and the dispatch
built from the playoff's winners. The judge runs only on the device; here evaluate_cases is a
labelled test double with scripted times, and the contests come from the H200 recording."""

from __future__ import annotations

import json

import pytest

from evo.dispatch import build_dispatch, complete_evidence, lookup
from evo.playoff import Contest, Playoff, contenders, markdown, run_playoff, winners_from_dict
from fitness.family import KeyPoint, dispatch_key_of
from fitness.records import CaseResult, Evaluation, Status, read_json
from tests.conftest import REPO, subprocess_env

RUN = REPO / "results" / "rmsnorm_fwd_h200_run.json"
KEYS = dispatch_key_of("rmsnorm")          # (dtype, N): the forward family's dispatch key


def P(dtype, n):
    return KeyPoint((dtype,), n)


@pytest.fixture(scope="module")
def evaluations():
    return [Evaluation.from_dict(e) for e in read_json(RUN)["evaluations"]]


def test_contenders_are_the_genomes_within_the_margin_of_each_widths_fastest(evaluations):
    table = {KeyPoint(e.group, n): e.key for e in build_dispatch(evaluations, KEYS)
             for n in {int(c["N"]) for c in e.cases.values()}}
    evidence = complete_evidence(evaluations, KEYS)
    contests = contenders(evaluations, KEYS, margin=0.03, limit=3)
    assert 20 <= len(contests) <= len(evidence)            # session 8: 30 of 33 widths within 3 %
    for c in contests:
        assert c.contenders[0] == table[c.point]           # the run's own winner first
        assert 2 <= len(c.contenders) <= 3 and len(set(c.contenders)) == len(c.contenders)
        best = c.recorded_us[c.contenders[0]]
        assert all(best <= c.recorded_us[k] <= best * 1.03 for k in c.contenders)
        assert set(c.cases) == set(next(iter(evidence[c.point].values())))
    tight = contenders(evaluations, KEYS, margin=0.001, limit=2)
    assert len(tight) < len(contests) and all(len(c.contenders) == 2 for c in tight)
    with pytest.raises(ValueError, match="limit >= 2"):
        contenders(evaluations, KEYS, limit=1)


def _judge(times, fail=()):
    """Test double of GPUEvaluator.evaluate_cases: key -> list of times, one per call, in call order;
    keys in `fail` come back WRONG_RESULT."""
    calls = []

    def evaluate(genomes, cases):
        (g,) = genomes
        key = g["key"]
        calls.append(key)
        if key in fail:
            return [Evaluation(key=key, genome=dict(g), space="t", status=Status.WRONG_RESULT, message="y differs")]
        t = times[key][sum(1 for c in calls if c == key) - 1]
        return [Evaluation(key=key, genome=dict(g), space="t", status=Status.OK,
                           cases=tuple(CaseResult(case=c, time_us=t) for c in cases))]
    return evaluate, calls


def _contest(keys, recorded):
    return Contest(KEYS, P("bf16", 256), ("bf16/32768x256",), tuple(keys), dict(zip(keys, recorded)))


def test_the_playoff_rotates_the_order_and_takes_the_smallest_median():
    contest = _contest(["A", "B", "C"], [13.8, 13.9, 14.0])
    genomes = {k: {"key": k} for k in "ABC"}
    evaluate, calls = _judge({"A": [14.0, 14.1, 13.9], "B": [13.6, 13.7, 14.5], "C": [14.2, 14.2, 14.2]})
    (res,) = run_playoff(evaluate, genomes, [contest], repeats=3)
    assert calls == ["A", "B", "C", "B", "C", "A", "C", "A", "B"]
    assert res.medians == pytest.approx({"A": 14.0, "B": 13.7, "C": 14.2})
    assert res.winner == "B"
    playoff = Playoff([res], margin=0.03, repeats=3, keys=KEYS, meta={"command": "cmd", "run_id": "r", "device": "H200"})
    assert playoff.winners() == {P("bf16", 256): "B"} and playoff.changed() == [res]
    text = markdown(playoff)
    assert "| dtype | N | genome | recorded us | playoff us | repeats | |\n|---|---:|---|---:|---:|---:|---|" in text
    assert "| bf16 | 256 | `B` | 13.9 | 13.7 | 3 | winner |" in text and "| bf16 | 256 | `A` | 13.8 | 14.0 | 3 | (run's) |" in text
    assert "changed the winner on 1: bf16 256." in text


def test_a_contender_the_judge_rejects_is_disqualified_with_its_reason():
    contest = _contest(["A", "B"], [13.8, 13.9])
    evaluate, calls = _judge({"A": [14.0, 14.0], "B": []}, fail={"B"})
    (res,) = run_playoff(evaluate, {"A": {"key": "A"}, "B": {"key": "B"}}, [contest], repeats=2)
    assert calls == ["A", "B", "A"]                     # not judged again once it failed
    assert res.winner == "A" and "WRONG_RESULT y differs" in res.failures["B"]


def test_ties_keep_the_runs_winner():
    contest = _contest(["A", "B"], [13.8, 13.9])
    evaluate, _ = _judge({"A": [14.0, 14.0], "B": [14.0, 14.0]})
    (res,) = run_playoff(evaluate, {"A": {"key": "A"}, "B": {"key": "B"}}, [contest], repeats=2)
    assert res.winner == "A"


def test_the_dispatch_takes_the_playoffs_winners_and_refuses_foreign_ones(evaluations):
    contests = contenders(evaluations, KEYS, margin=0.03, limit=3)
    pick = next(c for c in contests if c.point == P("bf16", 1024))
    runner_up = pick.contenders[1]
    table = build_dispatch(evaluations, KEYS, winners={P("bf16", 1024): runner_up})
    assert [e.key for e in table if e.covers(P("bf16", 1024))] == [runner_up]
    plain = build_dispatch(evaluations, KEYS)
    for point in complete_evidence(evaluations, KEYS):     # every other width keeps the recorded winner
        if point != P("bf16", 1024):
            assert lookup(table, point).key == lookup(plain, point).key
    with pytest.raises(ValueError, match="no complete verified evidence"):
        build_dispatch(evaluations, KEYS, winners={P("bf16", 1024): "0" * 20})
    with pytest.raises(ValueError, match=r"points \['bf16 N=12345'\] were not measured in this run"):
        build_dispatch(evaluations, KEYS, winners={P("bf16", 12345): pick.contenders[0]})


def test_a_playoff_file_round_trips_its_winners(tmp_path):
    contest = _contest(["A", "B"], [13.8, 13.9])
    evaluate, _ = _judge({"A": [14.0], "B": [13.0]})
    playoff = Playoff(run_playoff(evaluate, {"A": {"key": "A"}, "B": {"key": "B"}}, [contest], repeats=1), 0.03, 1, KEYS)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(playoff.to_dict()))
    assert [(w["dtype"], w["N"]) for w in read_json(path)["widths"]] == [("bf16", 256)]   # the committed format
    assert winners_from_dict(read_json(path), KEYS) == {P("bf16", 256): "B"}
    assert winners_from_dict(read_json(REPO / "results" / "playoff.json"), KEYS)       # the committed file reads
    with pytest.raises(ValueError, match="not a dispatch playoff file"):
        winners_from_dict(read_json(REPO / "results" / "rmsnorm_dispatch.json"), KEYS)


def test_evo_dispatch_and_export_take_a_playoff_file(evaluations, tmp_path):
    """Through the CLI on a run directory replayed from the H200 recording: the playoff's winner
    replaces the recorded one in the table; a file that is not a playoff is a one-line error."""
    import subprocess
    import sys

    from evo.config import load_config
    from evo.rundir import create_run_dir
    from evo.session import execute

    cfg = load_config(REPO / "experiments" / "rmsnorm_fwd_h200.toml").with_overrides(
        {"evaluator.kind": "replay", "evaluator.replay": str(RUN), "output.progress": False})
    rd = create_run_dir(cfg, tmp_path / "runs")
    execute(rd, quiet=True)
    pick = next(c for c in contenders(evaluations, KEYS, margin=0.03) if c.point == P("fp16", 2048))
    res = run_playoff(_judge({k: [10.0 + i] for i, k in enumerate(reversed(pick.contenders))})[0],
                      {k: {"key": k} for k in pick.contenders}, [pick], repeats=1)
    playoff = tmp_path / "playoff.json"
    playoff.write_text(json.dumps(Playoff(res, 0.03, 1, KEYS).to_dict()))
    out = tmp_path / "d.json"
    p = subprocess.run([sys.executable, "-m", "evo.cli", "dispatch", str(rd.path), "--playoff", str(playoff),
                        "--out", str(out)], capture_output=True, text=True, env=subprocess_env(), cwd=REPO, timeout=120)
    assert p.returncode == 0, p.stderr
    table = json.loads(out.read_text())
    assert table["playoff"] == str(playoff)
    assert [e["key"] for e in table["entries"] if e["dtype"] == "fp16" and e["n_min"] <= 2048 <= (e["n_max"] or 1e9)] \
        == [pick.contenders[-1]]
    bad = subprocess.run([sys.executable, "-m", "evo.cli", "dispatch", str(rd.path), "--playoff",
                          str(REPO / "results" / "rmsnorm_dispatch.json")], capture_output=True, text=True,
                         env=subprocess_env(), cwd=REPO, timeout=120)
    assert bad.returncode != 0 and "not a dispatch playoff file" in bad.stderr and "Traceback" not in bad.stderr


def test_evo_playoff_writes_the_evidence_and_the_winners(monkeypatch, tmp_path):
    """`evo playoff` end to end with the judge replaced by a labelled test double
    (the real one needs the GPU): every contested width judged, the file readable by
    winners_from_dict, --max-s keeping the run's winner on the widths it did not reach."""
    import fitness.gpu_evaluator

    from tests.judge_double import judge_double

    prefetched = []
    # stable and different per genome: the fastest contender is the one with the smallest key prefix
    JudgeDouble = judge_double(lambda g: 10.0 + int(g.key[:4], 16) / 65536, prefetched)
    monkeypatch.setattr(fitness.gpu_evaluator, "GPUEvaluator", JudgeDouble)
    from evo.cli import main as evo_cli

    out = tmp_path / "p"
    assert evo_cli(["playoff", str(RUN), "--margin", "0.01", "--repeats", "2", "--out", str(out)]) == 0
    data = read_json(out.with_suffix(".json"))
    assert data["kind"] == "dispatch-playoff" and data["device"] == "test double" and data["repeats"] == 2
    winners = winners_from_dict(data, KEYS)
    assert len(winners) == len(data["widths"]) == data["contested"] > 0
    for w in data["widths"]:   # the double's fastest contender is the one with the smallest key prefix
        assert w["winner"] == min(w["contenders"], key=lambda k: int(k[:4], 16))
        assert all(len(v) == 2 for v in w["geomean_us"].values())
    assert "# Dispatch playoff" in out.with_suffix(".md").read_text()
    assert sorted(prefetched) == sorted({k for w in data["widths"] for k in w["contenders"]})   # each once, up front
    evs = [Evaluation.from_dict(e) for e in read_json(RUN)["evaluations"]]
    build_dispatch(evs, KEYS, winners=winners)                  # the run accepts every winner
    import evo.playoff

    monkeypatch.setattr(evo.playoff.time, "time", iter(range(0, 10**6, 100)).__next__)   # 100 s per call
    assert evo_cli(["playoff", str(RUN), "--margin", "0.01", "--max-s", "150", "--out", str(out)]) == 0
    assert 0 < len(read_json(out.with_suffix(".json"))["widths"]) < data["contested"]


def test_export_refuses_a_playoff_that_is_not_one_or_not_this_runs(tmp_path):
    """Checked before anything is compiled: a package must not ship a table its run cannot explain."""
    from evo.export import ExportError, export_run

    with pytest.raises(ExportError, match="not a dispatch playoff file"):
        export_run(RUN, tmp_path / "pkg", playoff=REPO / "results" / "rmsnorm_dispatch.json")
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({"kind": "dispatch-playoff", "widths": [
        {"dtype": "bf16", "N": 256, "winner": "0" * 20}]}))
    with pytest.raises(ExportError, match="no complete verified evidence"):
        export_run(RUN, tmp_path / "pkg", playoff=foreign)
    assert not (tmp_path / "pkg").exists()


def test_the_committed_dispatch_is_what_evo_dispatch_makes_of_the_recording_and_its_playoff(tmp_path):
    """`evo dispatch` takes a dump (the committed recordings are dumps) as well as a run directory;
    `evo report --playoff` refuses a file that is not a playoff in one line."""
    import subprocess
    import sys

    committed = json.loads((REPO / "results" / "rmsnorm_dispatch.json").read_text())
    args = ["--playoff", str(REPO / "results" / "playoff.json")] if committed.get("playoff") else []
    out = tmp_path / "d.json"
    p = subprocess.run([sys.executable, "-m", "evo.cli", "dispatch", str(RUN), *args, "--out", str(out)],
                       capture_output=True, text=True, env=subprocess_env(), cwd=REPO, timeout=120)
    assert p.returncode == 0, p.stderr
    made = json.loads(out.read_text())
    assert (made["run_id"], made["entries"]) == (committed["run_id"], committed["entries"])
    bad = subprocess.run([sys.executable, "-m", "evo.cli", "report", str(RUN), "--out", str(tmp_path / "r"),
                          "--playoff", str(REPO / "results" / "rmsnorm_dispatch.json")], capture_output=True,
                         text=True, env=subprocess_env(), cwd=REPO, timeout=120)
    assert bad.returncode == 2 and "not a dispatch playoff file" in bad.stderr and "Traceback" not in bad.stderr
    missing = subprocess.run([sys.executable, "-m", "evo.cli", "dispatch", str(tmp_path / "nothing.json")],
                             capture_output=True, text=True, env=subprocess_env(), cwd=REPO, timeout=120)
    assert missing.returncode == 2 and missing.stderr.startswith("error:") and "Traceback" not in missing.stderr
