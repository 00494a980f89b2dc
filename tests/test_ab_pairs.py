"""evo ab (evo/ab.py): same-process A/B of genome pairs. The judge itself runs only on
the device; here its evaluate_cases is replaced by a test double that returns scripted times, to
check the pairing, the alternating order, the ratios and the errors for bad specs."""

from __future__ import annotations

import json

import pytest

from fitness.records import CaseResult, Evaluation, Status
from tests.conftest import REPO

import evo.ab as ab_pairs
from evo.ab import ABError
from evo.cli import main as evo

RUN = REPO / "results" / "rmsnorm_fwd_h200_run.json"


@pytest.fixture(scope="module")
def space_and_genomes():
    from genomes.rmsnorm import SPACE_V5
    genomes = {e["key"]: e["genome"] for e in json.loads(RUN.read_text())["evaluations"]}
    return SPACE_V5, genomes


def test_a_side_is_a_recorded_genome_with_optional_gene_changes(space_and_genomes):
    space, genomes = space_and_genomes
    name, g = ab_pairs.parse_genome("ed8f41a1+lean_groups=true", genomes, space)
    assert name == "ed8f41a1+lean_groups=true" and g["lean_groups"] is True
    assert {k for k in g if g[k] != space.make(genomes["ed8f41a1daee0c283048"])[k]} == {"lean_groups"}
    _, g32 = ab_pairs.parse_genome("ed8f41a1+cta_threads=32+chunks=4", genomes, space)
    assert (g32["cta_threads"], g32["chunks"]) == (32, 4)
    with pytest.raises(ABError, match="matches no genome"):
        ab_pairs.parse_genome("zzzz", genomes, space)
    with pytest.raises(ABError, match="GENE=VALUE"):
        ab_pairs.parse_genome("ed8f41a1+lean=true", genomes, space)
    with pytest.raises(ABError, match="not a valid genome"):
        ab_pairs.parse_genome("ed8f41a1+cluster=8", genomes, space)     # clusters need 128 threads
    with pytest.raises(ABError, match="is not A:B"):
        ab_pairs.parse_pairs("ed8f41a1")


def _double(times):
    """Test double of GPUEvaluator.evaluate_cases: scripted times per (genome, call), in call order."""
    calls = []

    def evaluate(genomes, cases):
        (g,) = genomes
        calls.append(g["lean_groups"])
        t = times[g["lean_groups"]][sum(1 for c in calls if c == g["lean_groups"]) - 1]
        return [Evaluation(key=g.key, genome=dict(g), space="rmsnorm", status=Status.OK,
                           cases=tuple(CaseResult(case=c, time_us=t, baselines_us={"torch": 27.0}) for c in cases))]
    return evaluate, calls


def test_pairs_are_timed_adjacently_in_alternating_order_and_ratios_are_b_over_a(space_and_genomes):
    space, genomes = space_and_genomes
    _, a = ab_pairs.parse_genome("ed8f41a1", genomes, space)
    _, b = ab_pairs.parse_genome("ed8f41a1+lean_groups=true", genomes, space)
    evaluate, calls = _double({False: [14.0, 14.2, 13.8], True: [13.3, 13.5, 13.6]})
    rows = ab_pairs.ab(evaluate, [("A", a, "B", b)], ["bf16/32768x256", "bf16/32768x512"], repeats=3)
    assert calls == [False, True, True, False, False, True]         # A B, B A, A B
    r = rows[0]
    assert r["case"] == "bf16/32768x256" and len(rows) == 2
    assert r["ratios"] == pytest.approx([13.3 / 14.0, 13.5 / 14.2, 13.6 / 13.8])
    assert r["median_ratio"] == pytest.approx(13.5 / 14.2) and r["torch_us"] == [27.0] * 6
    text = ab_pairs.markdown(rows, "cmd", "NVIDIA H200")
    assert "| A | B | bf16/32768x256 | 14.00 | 13.50 | 27.00 | 0.9507 | 0.9500 | 0.9855 | 3 |" in text


def test_a_failed_evaluation_is_reported_not_averaged(space_and_genomes):
    space, genomes = space_and_genomes
    _, a = ab_pairs.parse_genome("ed8f41a1", genomes, space)

    def evaluate(genomes_, cases):
        (g,) = genomes_
        return [Evaluation(key=g.key, genome=dict(g), space="rmsnorm", status=Status.WRONG_RESULT, message="wrong output")]
    rows = ab_pairs.ab(evaluate, [("A", a, "B", a)], ["bf16/32768x256"], repeats=2)
    assert rows[0]["ratios"] == [] and rows[0]["median_ratio"] is None
    assert "a repeat 0: WRONG_RESULT wrong output" in rows[0]["failures"]
    assert "Failures:" in ab_pairs.markdown(rows, "cmd", "dev") and "| - | - | - | 0 |" in ab_pairs.markdown(rows, "cmd", "dev")


def test_neighbours_pair_a_genome_with_every_valid_one_step_variant(space_and_genomes):
    space, genomes = space_and_genomes
    pairs = ab_pairs.neighbour_pairs("ed8f41a1", genomes, space)
    base = space.make(genomes["ed8f41a1daee0c283048"])
    assert len(pairs) == len(space.neighbours(base)) > 10 and all(a == "ed8f41a1" for a, _ in pairs)
    for _, b in pairs:       # each B parses back to exactly the one-gene variant it names
        _, g = ab_pairs.parse_genome(b, genomes, space)
        changed = [k for k in space.names if g[k] != base[k]]
        assert len(changed) == 1 and f"+{changed[0]}=" in b
    assert "ed8f41a1+chunks=8" in {b for _, b in pairs} and "ed8f41a1+chunks=4" not in {b for _, b in pairs}
    with pytest.raises(ABError, match="matches no genome"):
        ab_pairs.neighbour_pairs("zzzz", genomes, space)


def test_pairs_are_ranked_by_their_cases_ratios_against_their_own_spread():
    def row(b, case, ratios):
        import statistics
        return {"a": "A", "b": b, "case": case, "ratios": ratios, "median_ratio": statistics.median(ratios),
                "a_us": [10.0], "b_us": [10.0], "torch_us": [20.0], "failures": []}
    rows = [row("B1", "c1", [0.97, 0.98, 0.975]), row("B1", "c2", [0.99, 1.0, 0.995]),   # c1 faster beyond spread
            row("B2", "c1", [1.03, 1.0, 0.97]), row("B2", "c2", [1.02, 1.021, 1.02])]      # c1 noise, c2 slower
    order = ab_pairs.ranked(rows)
    assert [b for _, b, *_ in order] == ["B1", "B2"]
    (_, _, g1, f1, s1), (_, _, g2, f2, s2) = order
    assert g1 == pytest.approx((0.975 * 0.995) ** 0.5) and (f1, s1) == (1, 0)
    assert (f2, s2) == (0, 1)
    text = ab_pairs.markdown(rows, "cmd", "dev")
    assert "| A | B1 | 0.9849 | 1 | 0 |" in text and "| A | B2 | 1.0100 | 0 | 1 |" in text


def test_main_needs_pairs_or_neighbours(capsys):
    assert evo(["ab", str(RUN), "--cases", "bf16/32768x256", "--out", "/tmp/x"]) == 2
    assert "error: give --pairs A:B" in capsys.readouterr().err


def test_main_writes_after_every_pair_and_max_s_keeps_what_is_done(monkeypatch, tmp_path):
    """The script end to end with the judge replaced by a labelled test double (the real one needs
    the GPU): the files name the device the judge learned from its first evaluation, and with
    --max-s the pairs started before the limit are kept and the cut is said in the markdown."""
    import fitness.gpu_evaluator

    from tests.judge_double import judge_double

    # B (lean_groups on) 2 % faster than A
    JudgeDouble = judge_double(lambda g: 9.8 if g["lean_groups"] else 10.0, baselines_us={"torch": 27.0})
    monkeypatch.setattr(fitness.gpu_evaluator, "GPUEvaluator", JudgeDouble)
    out = tmp_path / "ab"
    pairs = "ed8f41a1:ed8f41a1+lean_groups=true,ed8f41a1:ed8f41a1+chunks=4+lean_groups=true,ed8f41a1:ed8f41a1+unroll=1"
    assert evo(["ab", str(RUN), "--pairs", pairs, "--cases", "bf16/32768x256", "--repeats", "2",
                "--out", str(out)]) == 0
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["device"] == "test double" and data["pairs_asked"] == 3 and len(data["rows"]) == 3
    assert [r["median_ratio"] for r in data["rows"]] == pytest.approx([0.98, 0.98, 1.0])
    assert "Pairs timed" not in out.with_suffix(".md").read_text()
    monkeypatch.setattr(ab_pairs.time, "time", iter(range(0, 10**6, 100)).__next__)   # 100 s per call
    assert evo(["ab", str(RUN), "--pairs", pairs, "--cases", "bf16/32768x256", "--max-s", "150",
                "--out", str(out)]) == 0
    cut = json.loads(out.with_suffix(".json").read_text())
    assert 0 < len(cut["rows"]) < 3 and cut["pairs_asked"] == 3
    assert f"Pairs timed: {len(cut['rows'])} of 3 asked" in out.with_suffix(".md").read_text()
