"""experiments/scripts/ab_pairs.py: same-process A/B of genome pairs. The judge itself runs only on
the device; here its evaluate_cases is replaced by a test double that returns scripted times, to
check the pairing, the alternating order, the ratios and the errors for bad specs."""

from __future__ import annotations

import importlib.util
import json

import pytest

from fitness.records import CaseResult, Evaluation, Status
from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("ab_pairs", REPO / "experiments" / "scripts" / "ab_pairs.py")
ab_pairs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ab_pairs)
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
    with pytest.raises(SystemExit, match="matches no genome"):
        ab_pairs.parse_genome("zzzz", genomes, space)
    with pytest.raises(SystemExit, match="GENE=VALUE"):
        ab_pairs.parse_genome("ed8f41a1+lean=true", genomes, space)
    with pytest.raises(SystemExit, match="not a valid genome"):
        ab_pairs.parse_genome("ed8f41a1+cluster=8", genomes, space)     # clusters need 128 threads
    with pytest.raises(SystemExit, match="is not A:B"):
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
