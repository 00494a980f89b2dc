"""operators/surrogate.py and the GA's screening (search.ga.screen): the encoding, the ridge model,
the choice of children, determinism, and that it finds better genomes on a recorded space within
the small budgets a GPU search has."""

from __future__ import annotations

import math
import random
import statistics

import numpy as np
import pytest

from evo.config import ConfigError
from evo.run import Run, new_run_info
from evo.store import open_store
from genomes.rmsnorm import SPACE as RMSNORM
from operators import Candidate
from operators.surrogate import MIN_SAMPLES, GeneEncoder, RidgeSurrogate, screen
from tests.conftest import make_config


def _linear_fitness(space, genome) -> float:
    """A separable landscape the model can represent exactly (log-linear in the encoding)."""
    x = GeneEncoder(space).encode(genome)
    return math.exp(float(np.sin(np.arange(len(x)) + 1.0) @ x) * 0.1)


def test_the_encoding_is_one_hot_for_choices_and_scaled_for_ranges():
    enc = GeneEncoder(RMSNORM)
    g = RMSNORM.sample(random.Random(0))
    x = enc.encode(g)
    assert x.shape == (len(enc.columns),) and ((0.0 <= x) & (x <= 1.0)).all()
    for gene in RMSNORM.genes:
        if hasattr(gene, "options"):
            cols = [i for i, c in enumerate(enc.columns) if c.startswith(gene.name + "=")]
            assert len(cols) == len(gene.options) and x[cols].sum() == 1.0
            assert enc.columns[cols[gene.options.index(g[gene.name])]] == f"{gene.name}={g[gene.name]}"
    vb = enc.columns.index("vec_bytes")       # 8, 16, 32 on a log scale: 0, 0.5, 1
    assert x[vb] == {8: 0.0, 16: 0.5, 32: 1.0}[g["vec_bytes"]]


def test_the_model_learns_a_landscape_it_can_represent():
    rng = random.Random(1)
    train = [RMSNORM.sample(rng) for _ in range(150)]
    test = [RMSNORM.sample(rng) for _ in range(50)]
    model = RidgeSurrogate(RMSNORM, ridge=0.01)
    assert model.fit(train, [_linear_fitness(RMSNORM, g) for g in train])
    pred = model.predict(test)
    truth = np.array([_linear_fitness(RMSNORM, g) for g in test])
    assert np.corrcoef(np.log(pred), np.log(truth))[0, 1] > 0.95


def test_failures_are_not_training_data_and_too_few_samples_fit_nothing():
    rng = random.Random(2)
    genomes = [RMSNORM.sample(rng) for _ in range(MIN_SAMPLES + 6)]
    bad = [None, float("-inf"), 0.0, float("nan")]
    fits = bad + [1.0] * (MIN_SAMPLES - 1)
    model = RidgeSurrogate(RMSNORM)
    assert not model.fit(genomes[: len(fits)], fits) and model.samples == MIN_SAMPLES - 1
    with pytest.raises(RuntimeError, match="not been fitted"):
        model.predict(genomes[:1])
    assert model.fit(genomes, bad + [1.0] * (len(genomes) - len(bad))) and model.samples == len(genomes) - 4


def _candidates(n, seed=3):
    rng = random.Random(seed)
    return [Candidate(RMSNORM.sample(rng), (), "mutation") for _ in range(n)]


def _fitted(seed=4):
    rng = random.Random(seed)
    train = [RMSNORM.sample(rng) for _ in range(120)]
    model = RidgeSurrogate(RMSNORM, ridge=0.01)
    model.fit(train, [_linear_fitness(RMSNORM, g) for g in train])
    return model


def test_screening_keeps_the_predicted_best_and_a_random_share_in_drawing_order():
    cands, model = _candidates(40), _fitted()
    pred = model.predict([c.genome for c in cands])
    res = screen(cands, 8, model, random.Random(0), explore=0.25)
    assert len(res.kept) == 8 and (res.by_model, res.at_random, res.drawn) == (6, 2, 40)
    top6 = set(np.argsort(-pred)[:6])
    keys = [c.key for c in cands]
    idx = [keys.index(c.key) for c in res.kept]
    assert top6 <= set(idx) and idx == sorted(idx)
    assert sorted(c.operator for c in res.kept) == ["mutation@explore"] * 2 + ["mutation@model"] * 6
    assert {keys.index(c.key) for c in res.kept if c.operator.endswith("@model")} == top6
    assert res.predicted_kept > res.predicted_dropped
    greedy = screen(cands, 8, model, random.Random(0), explore=0.0)
    assert {keys.index(c.key) for c in greedy.kept} == set(np.argsort(-pred)[:8])
    again = screen(cands, 8, model, random.Random(0), explore=0.25)
    assert [c.key for c in again.kept] == [c.key for c in res.kept]        # same rng, same choice


def test_without_a_model_screening_keeps_the_first_children():
    cands = _candidates(12)
    res = screen(cands, 5, None, random.Random(0))
    assert res.kept == cands[:5] and res.by_model == 0
    assert screen(cands, 5, RidgeSurrogate(RMSNORM), random.Random(0)).kept == cands[:5]   # not fitted
    with pytest.raises(ValueError, match="explore"):
        screen(cands, 5, None, random.Random(0), explore=1.5)


def _run(space, table, seed, n, **ga):
    cfg = make_config(experiment={"seed": seed}, search={"strategy": "ga", "ga": ga},
                      budget={"evaluations": n, "stall_rounds": 500})
    store = open_store("memory://")
    store.create_run(new_run_info(cfg, "r"))
    run = Run(cfg, space, store, table, "r")
    run.optimize()
    return run, store


def test_a_screened_run_is_reproducible_and_judges_only_offspring_count(synthetic_space, synthetic_table):
    a, sa = _run(synthetic_space, synthetic_table, 5, 64, population=16, offspring=16, screen=4)
    b, sb = _run(synthetic_space, synthetic_table, 5, 64, population=16, offspring=16, screen=4)
    keys = [(r.key, r.generation, r.operator, r.parents) for r in sa.records("r")]
    assert keys == [(r.key, r.generation, r.operator, r.parents) for r in sb.records("r")]
    gens = [r.generation for r in sa.records("r")]
    assert [gens.count(g) for g in range(4)] == [16, 16, 16, 16]
    ga = a.stages[0].strategy
    assert len(ga.screen_log) == 4 and all(s.drawn == 64 and len(s.kept) == 16 for s in ga.screen_log[1:])
    assert ga.screen_log[0].by_model == 0      # first population: nothing measured yet, no model
    assert all(s.by_model == 12 and s.at_random == 4 for s in ga.screen_log[1:])
    ops = [r.operator for r in sa.records("r")]
    assert all(op == "init" for op in ops[:16])          # nothing to screen with: labels unchanged
    assert sum(op.endswith("@model") for op in ops[16:]) == 36 and sum(op.endswith("@explore") for op in ops[16:]) == 12


def test_screening_finds_better_genomes_within_a_gpu_sized_budget(synthetic_space, synthetic_table):
    """On the recorded synthetic space (a row-reduction-like landscape), after 48 and 64
    evaluations, averaged over 20 seeds, the screened GA's best is clearly closer to the optimum."""
    best = synthetic_table.best("geomean_speedup").fitness("geomean_speedup")
    for n in (48, 64):
        plain = [_run(synthetic_space, synthetic_table, s, n, population=16, offspring=16)[0].best_value / best
                 for s in range(20)]
        screened = [_run(synthetic_space, synthetic_table, s, n, population=16, offspring=16,
                         screen=4)[0].best_value / best for s in range(20)]
        print(f"\n{n} evaluations: best / optimum, mean of 20 seeds: plain {statistics.mean(plain):.4f}, "
              f"screen=4 {statistics.mean(screened):.4f}")
        assert statistics.mean(screened) >= statistics.mean(plain) + 0.015


def test_prior_evaluations_train_the_first_population_s_screen(synthetic_space, synthetic_table):
    prior = [(e.genome if hasattr(e.genome, "key") else synthetic_space.make(e.genome), e.fitness("geomean_speedup"))
             for e in list(synthetic_table.evaluations())[:200]]
    cfg = make_config(search={"ga": {"population": 16, "offspring": 16, "screen": 3}}, budget={"evaluations": 16})
    store = open_store("memory://")
    store.create_run(new_run_info(cfg, "r"))
    run = Run(cfg, synthetic_space, store, synthetic_table, "r", prior=prior)
    run.optimize()
    first = run.stages[0].strategy.screen_log[0]
    assert first.drawn == 48 and first.by_model == 12 and len(first.kept) == 16


def test_screen_options_are_validated():
    with pytest.raises(ConfigError, match="search.ga.screen: must be >= 1"):
        make_config(search={"ga": {"screen": 0}})
    with pytest.raises(ConfigError, match="search.ga.screen_explore: must be <= 1"):
        make_config(search={"ga": {"screen_explore": 2.0}})


def test_the_committed_backtest_is_what_the_script_writes_from_the_recorded_runs(tmp_path):
    """results/surrogate_backtest.md: the model, fitted only on what was measured before each
    generation of the recorded H200 searches, ranks the better half of the offspring first."""
    import importlib.util

    from tests.conftest import REPO

    spec = importlib.util.spec_from_file_location("surrogate_backtest",
                                                  REPO / "experiments" / "scripts" / "surrogate_backtest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    committed = (REPO / "results" / "surrogate_backtest.md").read_text()
    argv = committed.split("Command: `python3 experiments/scripts/surrogate_backtest.py ", 1)[1].split("`", 1)[0].split()
    argv = [str(REPO / a) if a.startswith("results/") else a for a in argv]
    argv[argv.index("--out") + 1] = str(tmp_path / "again.md")
    mod.main(argv)
    rows = lambda text: [line for line in text.splitlines() if line.startswith("| session")]  # noqa: E731
    assert rows((tmp_path / "again.md").read_text()) == rows(committed) and len(rows(committed)) == 10
    assert "The model's half beats the whole generation in 9 of 10 generations." in committed
    assert mod.spearman(np.array([1.0, 2, 3]), np.array([3.0, 2, 1])) == pytest.approx(-1.0)


def test_an_interrupted_screened_run_resumes_to_the_same_records(synthetic_space, synthetic_table):
    """Resume replays the run from its seed and answers from the store: the model is refitted on
    the same verdicts in the same order, so it keeps the same children (and prior evaluations
    from seed_from, loaded again, train it the same way)."""
    from evo.lessons import prior_evaluations, seed_genomes

    def config():
        return make_config(experiment={"seed": 3},
                           search={"seed_from": str(synthetic_table.source), "seed_limit": 4,
                                   "ga": {"population": 12, "offspring": 12, "screen": 3}},
                           budget={"evaluations": 72, "stall_rounds": 500})

    def run(store, run_id, on_progress=None):
        cfg = config()
        return Run(cfg, synthetic_space, store, synthetic_table, run_id, seeds=seed_genomes(cfg, synthetic_space),
                   prior=prior_evaluations(cfg, synthetic_space), on_progress=on_progress)

    straight = open_store("memory://")
    straight.create_run(new_run_info(config(), "a"))
    run(straight, "a").optimize()

    def stop_after_41(r, new_records):
        if r.evaluations >= 41:
            raise KeyboardInterrupt

    store = open_store("memory://")
    store.create_run(new_run_info(config(), "b"))
    with pytest.raises(KeyboardInterrupt):
        run(store, "b", stop_after_41).optimize()
    assert store.count("b") == 41
    run(store, "b").optimize()
    lineage = lambda s, rid: [(r.key, r.generation, r.operator, r.parents) for r in s.records(rid)]  # noqa: E731
    assert lineage(store, "b") == lineage(straight, "a") and len(lineage(store, "b")) == 72
    assert any(op.endswith("@model") for _, _, op, _ in lineage(store, "b"))
    assert sum(op.endswith("@model") for _, g, op, _ in lineage(store, "b") if g == 0) == 6   # prior-trained


def test_status_says_what_screening_and_carrying_did(synthetic_space, synthetic_table):
    from evo.session import search_aids

    run, store = _run(synthetic_space, synthetic_table, 5, 64, population=16, offspring=16, screen=4)
    lines = search_aids(store.records("r"), "geomean_speedup")
    assert len(lines) == 1 and lines[0].startswith("screened children: 36 kept by the model (median geomean_speedup ")
    assert "; 12 kept by chance (median" in lines[0]
    plain, pstore = _run(synthetic_space, synthetic_table, 5, 64, population=16, offspring=16)
    assert search_aids(pstore.records("r"), "geomean_speedup") == []
