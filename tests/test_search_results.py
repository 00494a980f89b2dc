"""The committed race and warm-start results (experiments/scripts/search_efficiency.py wrote them)
say what they are and agree with themselves: the headline figures are the per-strategy medians of
the per-seed values they hold, a synthetic result says so, and the markdown quotes the JSON."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[1] / "results"


def _load(name):
    path = RESULTS / f"{name}.json"
    if not path.is_file():
        pytest.skip(f"{path} not written yet (experiments/scripts/search_efficiency.py)")
    return json.loads(path.read_text()), (RESULTS / f"{name}.md").read_text()


def _median(values, budget):
    xs = [v if v is not None else math.inf for v in values]
    m = statistics.median(xs)
    return None if math.isinf(m) else m


def test_search_efficiency_is_consistent():
    r, md = _load("search_efficiency")
    assert r["seeds"] >= 20 and r["space_size"] > 0 and r["budget"] <= r["space_size"]
    assert {"ga", "random", "ga+screen", "kt:genetic_algorithm", "kt:bayes_opt", "kt:simulated_annealing",
            "kt:random_sample"} <= set(r["strategies"])
    for name, s in r["strategies"].items():
        e = s["evals_to_99"]
        assert len(e["values"]) == e["seeds"] == r["seeds"], name
        assert e["median"] == _median(e["values"], r["budget"]), name
        assert e["reached"] == sum(v is not None for v in e["values"])
        assert all(v is None or 1 <= v <= r["budget"] for v in e["values"])
    ours = [n for n, s in r["strategies"].items() if s["side"] == "ours"]
    assert r["ours_best"] in ours
    assert r["ours_best_evals_to_99"] == r["strategies"][r["ours_best"]]["evals_to_99"]["median"]
    assert r["kernel_tuner_best_evals_to_99"] == r["strategies"][r["kernel_tuner_best"]]["evals_to_99"]["median"]
    medians = [s["evals_to_99"]["median"] for s in r["strategies"].values() if s["side"] == "ours"]
    best = r["ours_best_evals_to_99"]
    assert best is None or all(m is None or best <= m for m in medians)
    assert ("**Synthetic**" in md) == r["synthetic"]
    assert f"**{r['ours_best']}**" in md and f"{r['space_size']} genomes" in md


@pytest.mark.parametrize("name", ["warm_start", "warm_start_dtype", "warm_start_dtype_model", "warm_start_dtype_whole"])
def test_warm_start_is_consistent(name):
    w, md = _load(name)
    assert w["seeds"] >= 10 and set(w) >= {"cold_evals_to_99", "warm_evals_to_99", "ratio", "seeds"}
    per = w["per_seed"]
    assert w["cold_evals_to_99"] == _median(per["cold_evals_to_99"], w["budget"])
    assert w["warm_evals_to_99"] == _median(per["warm_evals_to_99"], w["budget"])
    if w["ratio"] is not None:
        assert w["ratio"] == pytest.approx(w["warm_evals_to_99"] / w["cold_evals_to_99"])
    assert w["holdout_class"] not in w["lessons_from_classes"]
    assert not set(w.get("holdout_classes") or ()) & set(w["lessons_from_classes"])     # a group held out: all of it
    assert ("Predicted before the run: " + w["prediction"] in md) if w.get("prediction") else True
    assert all("refused" not in line for line in w["lessons_log"])
    assert ("**Synthetic**" in md) == w["synthetic"]
    for h in (w.get("holdouts") or {w["holdout_class"]: w}).values():
        lim = h["order_limits"]          # the bound on what following the lessons' orders gives
        assert lim["cold_median"] == h["cold_evals_to_99"]
        for v in lim["orders"].values():
            assert v["ratio"] is None or v["ratio"] == pytest.approx(v["evals_to_99"] / lim["cold_median"])
    assert ("order = 'model'" in md) == (w.get("lesson_order", "recorded") == "model")
    assert f"--lesson-order {w['lesson_order']}" in md if w.get("lesson_order", "recorded") != "recorded" else True
