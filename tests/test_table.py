"""`evo table`: the run's dispatch table through the judge beside the baselines, written after every
genome. The judge runs only on the device: here a labelled test double (tests/judge_double.py)
times every case of a genome alike, and the dispatch comes from the H200 recording."""

from __future__ import annotations

import json

import pytest

from evo.cli import main as evo
from evo.dispatch import build_dispatch, lookup
from evo.playoff import read_winners
from fitness.family import KeyPoint, dispatch_key_of
from fitness.records import Evaluation, read_json
from tests.conftest import REPO

RUN = REPO / "results" / "rmsnorm_fwd_h200_run.json"
PLAYOFF = REPO / "results" / "playoff.json"


@pytest.fixture
def double(monkeypatch):
    import fitness.gpu_evaluator

    from tests.judge_double import judge_double

    prefetched: list = []
    monkeypatch.setattr(fitness.gpu_evaluator, "GPUEvaluator",
                        judge_double(lambda g: 10.0, prefetched, baselines_us={"torch": 15.0, "quack": 10.5}))


def test_the_table_times_each_dispatch_genome_on_the_cases_it_serves(double, tmp_path, capsys):
    out = tmp_path / "table"
    assert evo(["table", str(RUN), "--playoff", str(PLAYOFF), "--out", str(out)]) == 0
    data = json.loads(out.with_suffix(".json").read_text())
    keys = dispatch_key_of("rmsnorm")
    entries = build_dispatch([Evaluation.from_dict(e) for e in read_json(RUN)["evaluations"]], keys,
                             winners=read_winners(PLAYOFF, keys))
    assert data["complete"] and data["gpu"] == "test double" and len(data["cases"]) == 33
    for r in data["cases"]:       # each case timed with the genome the table gives its width
        assert r["genome_key"] == lookup(entries, KeyPoint((r["dtype"],), r["N"])).key
        assert r["speedup_vs_torch"] == pytest.approx(1.5) and r["speedup_vs_quack"] == pytest.approx(1.05)
    assert data["baselines"] == ["torch", "quack"] and data["geomean_speedup_vs_torch"] == pytest.approx(1.5)
    text = out.with_suffix(".md").read_text()
    assert "| torch | 1.500 | 1.500 | 33 |" in text and "evo table" in text
    assert "evo table: " in capsys.readouterr().err          # progress
    # the file is what `evo export --bench` reads: every case names its genome of the table
    from evo.export import _find_bench

    found, path = _find_bench(entries, out.with_suffix(".json"))
    assert found is not None and path == out.with_suffix(".json")


def test_a_case_that_is_not_in_the_matrix_is_one_line(double, tmp_path, capsys):
    assert evo(["table", str(RUN), "--cases", "bf16/1x1", "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --cases: ['bf16/1x1'] are not cases of the matrix") and err.count("\n") == 1


def test_max_s_keeps_the_genomes_timed_before_the_limit(double, monkeypatch, tmp_path):
    from evo import table as table_module

    monkeypatch.setattr(table_module.time, "time", iter(range(0, 10**6, 100)).__next__)   # 100 s per call
    out = tmp_path / "t"
    assert evo(["table", str(RUN), "--max-s", "350", "--out", str(out)]) == 0
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["complete"] and 0 < len({r["genome_key"] for r in data["cases"]}) < 19


def test_a_baseline_the_table_asked_for_but_never_timed_is_named_with_the_reason(monkeypatch, tmp_path, capsys):
    """Session 12: QuACK's wheels lacked a part on the device, and the table came out without its
    column and without a word. Now the files and stderr say which baseline is missing, and why."""
    import fitness.gpu_evaluator

    from tests.judge_double import judge_double

    monkeypatch.setattr(fitness.gpu_evaluator, "GPUEvaluator", judge_double(lambda g: 10.0, baselines_us={"torch": 15.0}))
    out = tmp_path / "t"
    assert evo(["table", str(RUN), "--baselines", "torch,quack", "--out", str(out)]) == 0
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["baselines"] == ["torch"] and data["missing_baselines"] == {"quack": "not timed on any case"}
    assert "**Not timed: quack** (not timed on any case)" in out.with_suffix(".md").read_text()
    assert "warning: evo table: baseline quack was not timed on any case" in capsys.readouterr().err


def test_missing_baselines_quotes_the_judges_note():
    from evo.table import missing_baselines
    from fitness.records import CaseResult

    note = "baseline quack: unusable: ModuleNotFoundError: No module named 'cutlass.cutlass_dsl'"
    rows = {"a": {"key": "k", "cr": CaseResult("a", time_us=1.0, baselines_us={"torch": 2.0},
                                               message=f"{note}; 51 launches poisoned")},
            "b": {"key": "k", "cr": CaseResult("b", time_us=1.0, baselines_us={"torch": 2.0, "liger": 3.0})}}
    assert missing_baselines(["torch", "quack", "liger", "int21"], rows) == {
        "quack": note, "int21": "not timed on any case"}


def test_the_family_roofline_reference_gives_each_case_its_fraction_of_roofline(monkeypatch, tmp_path):
    """Issue 17's keys: `fraction_of_roofline` beside every time, from the family's one baseline that
    is not the operation (the forward's `copy`, the backward's `roofline`), found through the
    contract (Baseline.objective), not by name."""
    import fitness.gpu_evaluator

    from evo.table import roofline_reference
    from tests.judge_double import judge_double

    assert roofline_reference("rmsnorm") == "copy" and roofline_reference("rmsnorm_bwd") == "roofline"
    monkeypatch.setattr(fitness.gpu_evaluator, "GPUEvaluator",
                        judge_double(lambda g: 10.0, baselines_us={"torch": 15.0, "copy": 9.5}))
    out = tmp_path / "t"
    assert evo(["table", str(RUN), "--baselines", "torch,copy", "--out", str(out)]) == 0
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["roofline"] == "copy"
    assert all(r["fraction_of_roofline"] == pytest.approx(0.95) for r in data["cases"])
    assert data["geomean_fraction_of_roofline"] == pytest.approx(0.95) and data["min_fraction_of_roofline"] == 0.95


def test_cases_the_judge_ran_out_of_memory_on_are_judged_again_alone(monkeypatch, tmp_path, capsys):
    """Session 27, on an 80 GB H100: a genome's seven cases in one job, beside five baselines, and
    three of its 2**31-element cases found the judge's float64 reference without device memory
    (torch held 24-32 GB that freeing every cache did not give back), though the search had judged
    them on the same card. Such a case is the machine's gap, not the genome's: it is judged again
    alone, once more if that was not in a clean worker, and only a case that runs out in a clean
    worker stays a gap, with the judge's message in its row. The other cases are judged once."""
    import fitness.gpu_evaluator

    from fitness.records import JUDGE_OUT_OF_MEMORY
    from tests.judge_double import judge_double

    ids = [c["case"] for c in read_json(RUN)["evaluations"][0]["cases"]]
    never = ids[-1]
    short = frozenset(c for i, c in enumerate(ids[:-1]) if i % 3)     # two cases in three run out beside others
    double = judge_double(lambda g: 10.0, baselines_us={"torch": 15.0}, oom_beside_others=short,
                          oom_always=frozenset({never}))
    monkeypatch.setattr(fitness.gpu_evaluator, "GPUEvaluator", double)
    out = tmp_path / "t"
    assert evo(["table", str(RUN), "--out", str(out)]) == 0
    data = json.loads(out.with_suffix(".json").read_text())
    rows = {r["case"]: r for r in data["cases"]}
    assert len(rows) == len(ids) == 33
    assert all(r["status"] == "OK" and r["evolved_us"] == 10.0 for c, r in rows.items() if c != never)
    assert rows[never]["status"] == "RUNTIME_ERROR" and rows[never]["evolved_us"] is None
    assert rows[never]["notes"].startswith(JUDGE_OUT_OF_MEMORY)
    (judge,) = double.instances
    times = {c: sum(c in j for j in judge.jobs) for c in ids}
    assert all(times[c] == 1 for c in ids if c not in short and c != never)     # judged once: never again
    assert all(times[c] in (1, 2, 3) for c in short) and times[never] in (2, 3)
    assert 2 in times.values() and 3 in times.values()      # again alone; once more after a worker that judged one
    for c in ids:                                            # each judging again is of that case alone
        assert all(j == [c] for j in [j for j in judge.jobs if c in j][1:])
    assert "judged again alone" in capsys.readouterr().out


def test_the_markdown_says_why_a_case_has_no_time():
    """Session 27's H100 table showed five rows of dashes and no reason; the reasons (the judge's out of
    memory, a genome whose entries do not fit the row) were only in the JSON."""
    from evo.table import markdown

    rows = [{"case": "bf16/32768x65536", "genome_key": "93511870abc", "status": "RUNTIME_ERROR", "evolved_us": None,
             "evolved_tbps": None, "notes": "judge out of device memory: the float64 reference | for it\nfailed"},
            {"case": "bf16/32768x256", "genome_key": "aa8471eaabc", "status": "OK", "evolved_us": 24.9,
             "evolved_tbps": 2.03, "notes": "ok"}]
    text = markdown({"family": "f", "run_id": "r", "gpu": "g", "command": "c", "baselines": [], "cases": rows})
    assert ("Cases without a time (1):\n\n- bf16/32768x65536 (`93511870`): RUNTIME_ERROR: judge out of device memory: "
            "the float64 reference / for it failed\n") in text
    assert "bf16/32768x256 (" not in text
    full = markdown({"family": "f", "run_id": "r", "gpu": "g", "command": "c", "baselines": [], "cases": rows[1:]})
    assert "without a time" not in full


def test_a_case_keeps_its_verdict_when_the_judge_raises_past_the_deadline_or_it_is_not_served(capsys):
    from evo.table import judged_again_alone
    from fitness.records import JUDGE_OUT_OF_MEMORY, CaseResult, Evaluation, Status

    oom = CaseResult("a", status=Status.RUNTIME_ERROR, message=f"{JUDGE_OUT_OF_MEMORY}: the reference ...")
    e = Evaluation(key="k", genome={}, space="s", status=Status.RUNTIME_ERROR, cases=(oom, CaseResult("b", time_us=1.0)))

    class Raises:
        def evaluate_cases(self, genomes, cases):
            raise RuntimeError("the pool is down")

    class Never:
        def evaluate_cases(self, genomes, cases):
            raise AssertionError("nothing is judged again here")

    assert judged_again_alone(Raises(), None, e, ["a", "b"]) is e
    assert "a could not be judged again (RuntimeError: the pool is down): it keeps its verdict" in capsys.readouterr().out
    assert judged_again_alone(Never(), None, e, ["a", "b"], deadline=0.0) is e       # past --max-s
    assert judged_again_alone(Never(), None, e, ["b"]) is e                           # a check case: not the table's


def test_a_genome_that_fails_a_check_case_gets_its_verdict_on_the_cases_it_serves():
    """Session 31: a dispatch genome failed a check case when the table judged it again; its
    evaluation held the check cases it passed (no time), and the table listed those instead of the
    benchmark cases it serves. Rows are the asked benchmark cases only, with the genome's verdict."""
    from evo.dispatch import DispatchEntry
    from evo.table import case_rows, markdown, row
    from fitness.family import Case
    from fitness.records import CaseResult, Evaluation, Status

    keys = dispatch_key_of("rmsnorm_bwd")
    entries = [DispatchEntry(keys, ("bf16",), 1, 256, "aaaa", {}), DispatchEntry(keys, ("bf16",), 257, None, "bbbb", {})]
    bench = [Case("bf16/32768x256", {"M": 32768, "N": 256, "dtype": "bf16"}),
             Case("bf16/32768x4096", {"M": 32768, "N": 4096, "dtype": "bf16"})]
    failed = Evaluation("aaaa", {}, "v13", Status.WRONG_RESULT, message="WRONG_RESULT at check: fp32/512x1024",
                        cases=(CaseResult("bf16/7x256", params={"M": 7, "N": 256, "dtype": "bf16"}),))
    timed = Evaluation("bbbb", {}, "v13", Status.OK, cases=(
        CaseResult("bf16/32768x4096", params=dict(bench[1].params), time_us=10.0, baselines_us={"int21": 11.0}),))
    rows = case_rows(entries, {"aaaa": failed, "bbbb": timed}, bench)
    assert sorted(rows) == ["bf16/32768x256", "bf16/32768x4096"]
    assert rows["bf16/32768x256"]["cr"].status is Status.WRONG_RESULT
    text = markdown({"family": "f", "run_id": "r", "gpu": "g", "command": "c", "baselines": ["int21"],
                     "cases": [row(v["key"], v["cr"]) for _, v in sorted(rows.items())]})
    assert "- bf16/32768x256 (`aaaa`): WRONG_RESULT: WRONG_RESULT at check: fp32/512x1024" in text
    assert "7x256" not in text
