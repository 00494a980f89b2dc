"""Lessons: failure signatures, cross-validated gene effects, lesson records per shape class, and
runs that use them (seeds, skipped predicted failures, the screen's prior, the prompt) while
refusing lessons of another family, space version or GPU architecture.

Everything here runs on the SYNTHETIC slice (tests/data/make_synthetic_slice.py): no figure is a
measurement."""

from __future__ import annotations

import logging
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from evo.lesson_build import Source, build_lessons, class_fitness
from evo.lessons import RunKey, RunLessons
from evo.run import Run, new_run_info
from evo.store import LessonRecord, open_store
from fitness.replay import ReplayEvaluator
from operators import effects as fx
from operators.failures import Verdict, backtest, learn
from tests.conftest import make_config

sys.path.insert(0, str(Path(__file__).parent / "data"))
import make_synthetic_slice  # noqa: E402


@pytest.fixture(scope="module")
def slice_evals():
    return make_synthetic_slice.evaluations()


@pytest.fixture(scope="module")
def slice_source(slice_evals):
    # a quarter of the slice keeps the builds fast; every class and failure kind is in it
    return Source("synthetic-slice", "synthetic", "", "sm_90a", "geomean_speedup", "torch",
                  tuple(e for i, e in enumerate(slice_evals) if i % 4 == 0))


@pytest.fixture(scope="module")
def lessons(slice_source):
    return build_lessons([slice_source], surrogate="ridge", seed=1)


def test_failure_signatures_name_the_cause(slice_evals):
    model = learn(Verdict.of(e) for e in slice_evals)
    wrong = [s for s in model.signatures if s.category == "wrong"]
    assert wrong and dict(wrong[0].genes) == {"cluster": 4, "load_cache": "ca"}
    matching = [e for e in slice_evals if wrong[0].matches(e.genome)]
    assert len(matching) == wrong[0].seen and not any(e.status.ok for e in matching)   # none of them ran
    # genes that merely co-occur with the cause are not signatures of their own
    assert all(dict(s.genes).get("load_cache") == "ca" or s.category != "wrong" for s in model.signatures)
    ok = next(e for e in slice_evals if e.status.ok)
    assert model.predict(ok.genome) is None
    assert model.counts["wrong"] == sum(1 for e in slice_evals if e.status.value == "WRONG_RESULT")


def test_skip_backtest_counts_wrong_skips(slice_evals):
    verdicts = [Verdict.of(e, metric="geomean_speedup") for e in slice_evals[::3]]
    order = list(range(len(verdicts)))
    check = backtest(verdicts, 4, order)
    assert check.judged == len(verdicts) and check.skipped >= check.caught > 0
    assert check.wrong == check.skipped - check.caught == 0
    # a rule that fires on a verified genome's pattern is caught out as a wrong skip
    lax = backtest(verdicts, 4, order, min_rate=0.05, size=1)
    assert lax.wrong > 0 and lax.wrong_good >= 0 and lax.to_dict()["wrong_share"] > 0


def test_cross_validated_error_beats_the_mean(synthetic_space, slice_evals):
    rows = [(synthetic_space.make(e.genome), class_fitness(e, ["long/8192x262144"], "torch", "geomean_speedup"))
            for e in slice_evals[::5]]
    cv = fx.cross_validate("ridge", synthetic_space, [g for g, _ in rows], [f for _, f in rows], folds=4, seed=0)
    assert cv.samples == sum(f is not None for _, f in rows)
    assert cv.rmse_log < 0.5 * cv.baseline_rmse_log and cv.spearman > 0.8
    model = fx.make_surrogate("ridge", synthetic_space)
    assert model.fit([g for g, _ in rows], [f for _, f in rows])
    effects = {(e.gene, e.value): e.effect for e in fx.gene_effects(model, synthetic_space, [g for g, _ in rows])}
    # long rows want many threads per row and clusters (the synthetic landscape says so)
    assert effects[("threads_per_row", 512)] > effects[("threads_per_row", 32)]
    assert effects[("cluster", 4)] > effects[("cluster", 1)]


def test_trees_surrogate_when_scikit_learn_is_there(synthetic_space, slice_evals):
    pytest.importorskip("sklearn")
    rows = [(synthetic_space.make(e.genome), e.fitness("geomean_speedup")) for e in slice_evals[::6]]
    cv = fx.cross_validate("trees", synthetic_space, [g for g, _ in rows], [f for _, f in rows], folds=3, seed=0)
    assert cv.kind == "trees" and cv.rmse_log < cv.baseline_rmse_log


def test_lessons_per_shape_class(lessons):
    assert [x.shape_class for x in lessons] == ["long", "mid", "short"]
    for x in lessons:
        p = x.payload
        assert x.key == ("synthetic", "", "sm_90a", x.shape_class) and x.sources == ("synthetic-slice",)
        assert p["cases"] == [c for c in p["cases"] if c.startswith(x.shape_class + "/")] and len(p["cases"]) == 1
        fits = [e["fitness"] for e in p["elites"]]
        assert fits == sorted(fits, reverse=True) and p["best"] == fits[0]
        assert set(p["elites"][0]["cases"]) == set(p["cases"])          # per-case evidence of its own class
        assert p["cv"]["ridge"]["rmse_log"] < p["cv"]["ridge"]["baseline_rmse_log"]
        assert p["failures"]["signatures"] and p["skip_check"]["wrong"] == 0
        assert len(p["samples"]) == p["evaluations"]
    best = {x.shape_class: x.payload["elites"][0]["genome"] for x in lessons}
    assert best["short"]["threads_per_row"] < best["long"]["threads_per_row"]


def test_lessons_leave_out_a_class_on_request(slice_source):
    built = build_lessons([slice_source], surrogate="ridge", exclude_classes=["mid"])
    assert [x.shape_class for x in built] == ["long", "short"]


def _key(**kw):
    return replace(RunKey("synthetic", "", "sm_90a", ("long",)), **kw)


def test_lessons_of_another_family_version_or_gpu_are_refused(lessons, caplog):
    foreign = [replace(lessons[0], family="rmsnorm"), replace(lessons[0], space_version="v5"),
               replace(lessons[0], arch="sm_100a")]
    with caplog.at_level(logging.INFO, logger="evo.lessons"):
        chosen = RunLessons.select(foreign + list(lessons), _key())
    assert [(x.shape_class, how) for x, how in chosen.used] == [("long", "own"), ("mid", "transfer"),
                                                                ("short", "transfer")]
    refused = [line for line in chosen.log if ": refused:" in line]
    assert len(refused) == 3
    assert "family 'rmsnorm'" in refused[0] and "version 'v5'" in refused[1] and "'sm_100a'" in refused[2]
    assert sum("refused" in r.message for r in caplog.records if r.levelno == logging.WARNING) == 3
    only_own = RunLessons.select(lessons, _key(), transfer=False)
    assert [how for _, how in only_own.used] == ["own"] and sum("ignored" in x for x in only_own.log) == 2
    none = RunLessons.select(foreign, _key())
    assert none.used == [] and none.seeds(None, 10) == [] and none.failures.signatures == ()


def _run(cfg, space, table, lessons=None, run_id="r"):
    store = open_store("memory://")
    store.create_run(new_run_info(cfg, run_id))
    run = Run(cfg, space, store, table, run_id, lessons=lessons)
    run.optimize()
    return run, store


def test_a_run_uses_its_lessons(synthetic_space, slice_evals, lessons):
    table = ReplayEvaluator(slice_evals, source="synthetic slice")
    cfg = make_config(search={"ga": {"population": 12, "offspring": 12, "screen": 2},
                              "lessons": {"source": "unused-in-this-test", "seeds": 4}},
                      budget={"evaluations": 60})
    chosen = RunLessons.select(lessons, _key())
    run, store = _run(cfg, synthetic_space, table, chosen)
    records = store.records("r")
    seeds = [r.key for r in records if r.operator == "seed"]
    assert seeds == [x["key"] for x in lessons[0].payload["elites"][:4]]       # the own class's best first
    ga = run.stages[0].strategy
    assert ga.skipped and all(chosen.predicted_failure(dict(r.evaluation.genome)) is None for r in records)
    assert len(ga._measured) > len(records)                 # the lessons' samples train the screen
    notes = store.get_run("r").notes
    assert notes["lessons_skipped"] == len(ga.skipped) and any("used" in x for x in notes["lessons"])
    text = chosen.prompt_text()
    assert "shape class long (own" in text and "fails: cluster = 4 and load_cache = 'ca'" in text


def test_refused_lessons_change_nothing(synthetic_space, slice_evals, lessons):
    """Lessons of another family are refused: the run is the run without lessons, genome for genome."""
    table = ReplayEvaluator(slice_evals, source="synthetic slice")
    cfg = make_config(search={"ga": {"population": 8, "offspring": 8}, "lessons": {"source": "x"}},
                      budget={"evaluations": 40})
    foreign = RunLessons.select([replace(x, family="rmsnorm") for x in lessons], _key())
    with_foreign, store_a = _run(cfg, synthetic_space, table, foreign)
    plain, store_b = _run(cfg, synthetic_space, table, None)
    assert [r.key for r in store_a.records("r")] == [r.key for r in store_b.records("r")]
    assert with_foreign.stages[0].strategy.skipped == []


def test_lessons_read_back_from_a_store_and_a_file(tmp_path, lessons):
    from evo.lessons import lesson_to_dict, read_lessons

    url = f"sqlite:///{tmp_path / 'l.db'}"
    with open_store(url) as store:
        for x in lessons:
            store.append_lesson(x)
        store.append_lesson(LessonRecord("synthetic", "", "sm_90a", "long", {"elites": []}))     # a newer build
    got = read_lessons(url)
    assert [x.shape_class for x in got] == ["mid", "short", "long"] and got[-1].payload == {"elites": []}
    import json

    path = tmp_path / "lessons.json"
    path.write_text(json.dumps({"lessons": [lesson_to_dict(x) for x in got]}))
    assert [x.payload for x in read_lessons(str(path))] == [x.payload for x in got]
    with pytest.raises(ValueError, match="no such file"):
        read_lessons(str(tmp_path / "nope.json"))


def test_a_run_quotes_its_lessons_in_the_llm_prompt_and_not_refused_ones(httpserver, monkeypatch, lessons,
                                                                          synthetic_space, slice_evals):
    """[search.lessons] prompt: the run's lessons reach the prompt of every LLM request it makes (an
    endpoint on loopback playing answers written for this test); a refused lesson never does."""
    import json

    from tests.llm_doubles import ScriptedEndpoint, completion, genes_answer

    monkeypatch.setenv("EVO_TEST_LLM_KEY", "sk-test")
    endpoint = ScriptedEndpoint([("json", completion(genes_answer({"unroll": u}))) for u in (1, 2, 3, 4) * 4])
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(endpoint)
    cfg = make_config(search={"ga": {"population": 8, "offspring": 8}, "lessons": {"source": "given to the Run"}},
                      budget={"evaluations": 32},
                      operators={"llm": {"rate": 0.5, "base_url": httpserver.url_for("/v1"), "model": "test-model",
                                         "api_key_env": "EVO_TEST_LLM_KEY", "retries": 0, "timeout_s": 5.0}})
    foreign = replace(lessons[0], family="rmsnorm", shape_class="foreign-class")
    chosen = RunLessons.select([foreign, *lessons], _key())
    _run(cfg, synthetic_space, ReplayEvaluator(slice_evals, source="synthetic slice"), chosen)
    prompts = [json.dumps(r["body"]["messages"]) for r in endpoint.requests]
    assert prompts and all("lessons of earlier runs" in p and "shape class long (own" in p for p in prompts)
    assert not any("foreign-class" in p for p in prompts)
