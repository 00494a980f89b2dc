"""The online lesson choice (evo.lesson_choice): scoring transfer lessons by how well their order
predicts a run's first verdicts, keeping the ones that do, and doing so from judged verdicts only.

Synthetic lessons and the SYNTHETIC slice (tests/data/make_synthetic_slice.py): no figure here
is a measurement."""

from __future__ import annotations

import math
import random
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from evo.config import ConfigError
from evo.lesson_build import Source, build_lessons
from evo.lesson_choice import ChoosingStrategy, allot, choice_summary, choose, lesson_order, predictions
from evo.lessons import RunKey, RunLessons
from evo.store import LessonRecord
from fitness.replay import ReplayEvaluator
from tests.conftest import make_config
from tests.test_lessons import _run

sys.path.insert(0, str(Path(__file__).parent / "data"))
import make_synthetic_slice  # noqa: E402


def _truth(g) -> float:
    """A landscape of the held-out class: smooth in the genes, so a ridge model can learn it."""
    return 1.0 + 0.2 * math.log2(g["vector_bytes"]) + 0.1 * math.log2(g["threads_per_row"]) - 0.05 * g["stages"]


def _lesson(cls: str, genomes, fit) -> LessonRecord:
    samples = [[g.key, dict(g), fit(g)] for g in genomes]
    return LessonRecord("synthetic", "", "sm_90a", cls, {"samples": samples, "elites": []})


@pytest.fixture(scope="module")
def genomes(synthetic_space):
    return synthetic_space.sample_distinct(80, seed=3)


@pytest.fixture(scope="module")
def three(genomes):
    noise = random.Random(7)
    right = _lesson("right", genomes, lambda g: 1.3 * _truth(g))       # another scale, the same order
    wrong = _lesson("wrong", genomes, lambda g: 1.0 / _truth(g))        # the order reversed
    rand = _lesson("noise", genomes, lambda g: 1.0 + noise.random())    # no order at all
    return [wrong, rand, right]


def _judged(genomes, n, start=0):
    return [(g, _truth(g)) for g in genomes[start:start + n]]


def test_the_lesson_whose_order_is_right_is_chosen(synthetic_space, genomes, three):
    c = choose(three, synthetic_space, _judged(genomes, 8))
    assert c.chosen and c.kept == ["right"] and c.verdicts == 8
    by = {s.shape_class: s for s in c.scores}
    assert by["right"].rho > 0.9 and by["wrong"].rho < -0.9 and by["right"].weight > 0.9
    assert "chose right (Spearman +" in c.describe() and "dropped wrong" in c.describe()


def test_no_choice_on_thin_evidence(synthetic_space, genomes, three):
    thin = choose(three, synthetic_space, _judged(genomes, 3))
    assert not thin.chosen and thin.kept == ["wrong", "noise", "right"] and "too thin" in thin.why
    same = choose(three, synthetic_space, [(g, 1.0) for g in genomes[:8]])       # verdicts that say nothing
    assert not same.chosen and "all equal" in same.why
    failed = choose(three, synthetic_space, [(g, None) for g in genomes[:8]])
    assert not failed.chosen


def test_no_choice_when_no_lesson_predicts(synthetic_space, genomes, three):
    c = choose(three[:2], synthetic_space, _judged(genomes, 8))
    assert not c.chosen and "no lesson predicts" in c.why and c.kept == ["wrong", "noise"]


def test_a_genome_a_lesson_did_not_record_is_predicted_by_its_model(synthetic_space, genomes):
    part = _lesson("part", genomes[:60], _truth)
    pred = predictions(part, synthetic_space, genomes[60:70])
    assert pred is not None and len(pred) == 10
    got = [math.exp(p) for p in pred]
    assert max(abs(a - _truth(g)) / _truth(g) for a, g in zip(got, genomes[60:70])) < 0.1
    failing = _lesson("fails", genomes[:2], lambda g: None)
    assert predictions(failing, synthetic_space, genomes[:1]) == [-math.inf]
    assert predictions(failing, synthetic_space, genomes[5:6]) is None      # nothing to fit a model on


def test_lesson_order_and_allot(synthetic_space, genomes, three):
    order = lesson_order(three[2], synthetic_space)
    assert [_truth(g) for g in order] == pytest.approx(sorted((_truth(g) for g in genomes), reverse=True))
    a, b = [synthetic_space.make(dict(g)) for g in genomes[:10]], [synthetic_space.make(dict(g)) for g in genomes[10:20]]
    got = allot([a, b], [0.75, 0.25], 8, taken=a[:1])
    assert sum(g in a for g in got) == 6 and sum(g in b for g in got) == 2 and a[0] not in got
    assert allot([a, b], [1.0, 0.0], 3) == a[:3]


# -- in a run ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def slice_evals():
    return make_synthetic_slice.evaluations()


@pytest.fixture(scope="module")
def built(slice_evals):
    src = Source("synthetic-slice", "synthetic", "", "sm_90a", "geomean_speedup", "torch",
                 tuple(e for i, e in enumerate(slice_evals) if i % 6 == 0))
    return build_lessons([src], surrogate="ridge", seed=1)


class CountingReplay(ReplayEvaluator):
    """A replay that remembers every genome it was asked to judge."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.asked: list[str] = []

    def evaluate(self, genomes):
        self.asked += [g.key for g in genomes]
        return super().evaluate(genomes)         # evaluate_in_full (seeds) comes here too


def test_the_choice_reads_only_what_the_run_judged(synthetic_space, slice_evals, built):
    table = CountingReplay(slice_evals, source="synthetic slice")
    cfg = make_config(search={"ga": {"population": 12, "offspring": 12, "screen": 2},
                              "lessons": {"source": "unused-in-this-test", "probe": 2}},
                      budget={"evaluations": 40})
    lessons = RunLessons.select(built, RunKey("synthetic", "", "sm_90a", ("held-out",)))
    assert [how for _, how in lessons.used] == ["transfer"] * 3
    run, store = _run(cfg, synthetic_space, table, lessons)
    strategy = run.stages[0].strategy
    assert isinstance(strategy, ChoosingStrategy) and strategy.choice is not None
    records = store.records("r")
    probe = [g.key for g in strategy.probe]
    assert len(probe) == 6 and [r.key for r in records[:6]] == probe
    # the choice was made on the probe's verdicts, each judged (and paid for) once, and on nothing else
    assert [g.key for g, _ in strategy.judged] == probe == table.asked[:6]
    assert strategy.choice.verdicts == 6 and len(table.asked) == len(set(table.asked)) == len(records) == 40
    assert [f for _, f in strategy.judged] == [r.fitness("geomean_speedup") for r in records[:6]]
    notes = store.get_run("r").notes["lessons"]
    assert sum(x.startswith("online lesson choice on the first 6 verdicts") for x in notes) == 1
    assert choice_summary([notes, notes])[0].startswith("online lesson choice: ")


def test_choice_all_interleaves_every_lesson(synthetic_space, slice_evals, built):
    table = ReplayEvaluator(slice_evals, source="synthetic slice")
    cfg = make_config(search={"ga": {"population": 8, "offspring": 8},
                              "lessons": {"source": "x", "choice": "all", "seeds": 3}}, budget={"evaluations": 16})
    lessons = RunLessons.select(built, RunKey("synthetic", "", "sm_90a", ("held-out",)))
    run, store = _run(cfg, synthetic_space, table, lessons)
    assert not isinstance(run.stages[0].strategy, ChoosingStrategy)
    assert [r.key for r in store.records("r") if r.operator == "seed"] == [x.payload["elites"][0]["key"]
                                                                           for x, _ in lessons.used]


def test_refused_lessons_are_never_scored(synthetic_space, slice_evals, built):
    foreign = [replace(built[0], family="rmsnorm"), replace(built[1], arch="sm_100a")]
    lessons = RunLessons.select(foreign + [built[2]], RunKey("synthetic", "", "sm_90a", ("held-out",)))
    assert sum(": refused:" in x for x in lessons.log) == 2 and len(lessons.used) == 1
    table = ReplayEvaluator(slice_evals, source="synthetic slice")
    cfg = make_config(search={"ga": {"population": 8, "offspring": 8}, "lessons": {"source": "x"}},
                      budget={"evaluations": 16})
    run, _ = _run(cfg, synthetic_space, table, lessons)           # one lesson left: nothing to choose among
    assert not isinstance(run.stages[0].strategy, ChoosingStrategy)
    two = RunLessons.select(foreign + list(built[1:]), RunKey("synthetic", "", "sm_90a", ("held-out",)))
    run, _ = _run(cfg, synthetic_space, table, two)
    scored = [s.shape_class for s in run.stages[0].strategy.choice.scores]
    assert scored == [x.shape_class for x in built[1:]]


def test_the_settings_are_validated():
    with pytest.raises(ConfigError, match=r"search.lessons.choice: 'onlin' is not one of \['online', 'all'\]"):
        make_config(search={"lessons": {"source": "x", "choice": "onlin"}})
    with pytest.raises(ConfigError, match="search.lessons.probe"):
        make_config(search={"lessons": {"source": "x", "probe": 0}})
    with pytest.raises(ConfigError, match=r"search.lessons.probe: 12 is more than the first population \(8\)"):
        make_config(search={"ga": {"population": 8}, "lessons": {"source": "x", "probe": 12}})


def test_a_probe_of_three_chooses_where_a_probe_of_one_cannot(synthetic_space, genomes, three):
    """Three lessons (reversed, noise, right): one genome of each is three verdicts, too thin to
    choose on; three of each make the choice, and it is the right lesson."""
    orders = [lesson_order(x, synthetic_space) for x in three]
    picks = {}
    for probe in (1, 3):
        first = allot(orders, [1.0] * 3, probe * 3)
        picks[probe] = choose(three, synthetic_space, [(g, _truth(g)) for g in first])
    assert not picks[1].chosen and "too thin: 3 verdicts" in picks[1].why
    assert picks[3].chosen and picks[3].kept == ["right"] and picks[3].verdicts == 9


def test_model_order_pools_a_genomes_neighbours(synthetic_space, genomes):
    """search.lessons.order = 'model': a lesson whose recorded best is one mediocre genome measured
    far too high (an isolated spike) puts it first in its recorded order; its surrogate, fitted on
    all its samples, ranks by the smooth landscape the spike does not belong to."""
    from evo.lesson_choice import model_order
    from operators.effects import spearman as rho

    spiked = min(genomes, key=_truth)
    lesson = _lesson("spiky", genomes, lambda g: _truth(g) * (3.0 if g.key == spiked.key else 1.0))
    recorded = lesson_order(lesson, synthetic_space)
    by_model = model_order(lesson, synthetic_space, recorded)
    assert recorded[0].key == spiked.key and sorted(g.key for g in by_model) == sorted(g.key for g in recorded)
    assert spiked.key not in [g.key for g in by_model[:10]]
    assert rho([_truth(g) for g in by_model], list(range(len(by_model), 0, -1))) > 0.8
    # no samples to fit on: the genomes as given
    assert model_order(_lesson("none", genomes[:2], _truth), synthetic_space, recorded[:5]) == recorded[:5]


def test_order_model_fills_the_rest_from_the_kept_lessons_model_and_reads_only_verdicts(
        synthetic_space, slice_evals, built):
    from evo.lesson_choice import model_order

    runs = {}
    for order in ("recorded", "model"):
        table = CountingReplay(slice_evals, source="synthetic slice")
        cfg = make_config(search={"ga": {"population": 12, "offspring": 12, "screen": 2},
                                  "lessons": {"source": "x", "probe": 2, "order": order}},
                          budget={"evaluations": 40})
        lessons = RunLessons.select(built, RunKey("synthetic", "", "sm_90a", ("held-out",)))
        run, store = _run(cfg, synthetic_space, table, lessons)
        runs[order] = (run.stages[0].strategy, store.records("r"), table)
    for order, (strategy, records, table) in runs.items():
        assert strategy.choice.chosen, strategy.choice.describe()
        weights = [s.weight if s.kept else 0.0 for s in strategy.choice.scores]
        orders = strategy.orders if order == "recorded" else [
            model_order(x, synthetic_space, o) if w > 0 else o
            for x, o, w in zip(strategy.transfers, strategy.orders, weights)]
        rest = allot(orders, weights, 12 - len(strategy.first), taken=strategy.first)
        seeds = [r.key for r in records if r.operator == "seed"]
        assert seeds == [g.key for g in strategy.first] + [g.key for g in rest]
        # the choice read the probe's verdicts only, each judged once
        assert [g.key for g, _ in strategy.judged] == [g.key for g in strategy.probe] == table.asked[:6]
        assert len(table.asked) == len(set(table.asked)) == len(records)
    assert runs["recorded"][0].choice.describe() == runs["model"][0].choice.describe()    # same verdicts, same choice
    assert [r.key for r in runs["recorded"][1][:6]] == [r.key for r in runs["model"][1][:6]]
    assert [r.key for r in runs["recorded"][1][6:12]] != [r.key for r in runs["model"][1][6:12]]
    assert any("search.lessons.order = 'model'" in x for x in runs["model"][0].choice_log)
