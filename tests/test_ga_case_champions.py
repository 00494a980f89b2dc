"""Case champions: the GA keeps, per benchmark case, the genomes fastest on that case as parents,
because the product of a search is a dispatch table of per-case specialists (evo/dispatch.py)."""

from __future__ import annotations

import hashlib
import random
from dataclasses import replace

import pytest

from evo.config import ConfigError, GASection, describe_fields, from_dict
from evo.run import Run, new_run_info
from evo.store import Record, open_store
from evo.strategies.ga import GeneticAlgorithm, case_champions, case_times
from fitness.evaluator import Evaluator
from fitness.records import CaseResult, Evaluation, Status
from operators import Candidate, individual
from tests.conftest import make_config

METRIC = "geomean_speedup"
CASES = ("bf16/32768x256", "bf16/32768x4096", "bf16/8192x262144")
LONG = CASES[-1]


def genomes(space, n, seed=0):
    rng, out, seen = random.Random(seed), [], set()
    while len(out) < n:
        g = space.sample(rng)
        if g.key not in seen:
            seen.add(g.key)
            out.append(g)
    return out


def ev(genome, speedup, times, *, status=Status.OK, suspect=False, case_status=None):
    """An Evaluation with `times` ({case: time_us}); every case OK unless named in case_status."""
    case_status = case_status or {}
    cases = tuple(CaseResult(c, status=case_status.get(c, Status.OK), time_us=t, baselines_us={"torch": 10.0})
                  for c, t in times.items())
    return Evaluation(key=genome.key, genome=genome.as_dict(), space=genome.space, status=status,
                      objectives={METRIC: speedup} if status is Status.OK else {}, cases=cases, suspect=suspect)


def times(long, other):
    return {c: (long if c == LONG else other) for c in CASES}


def parents_after_two_generations(space, seed, first, kid_evals, **cfg):
    """Seeds the GA with the genomes of `first` (genome, evaluation) pairs (any further initial
    genome is slow everywhere), tells them, asks one generation of children and tells
    `kid_evals(children)`; returns the island's parent keys."""
    ga_cfg = GASection(**{"population": 2, "offspring": 6, "elites": 1, "tournament_size": 2, **cfg})
    ga = GeneticAlgorithm(space, random.Random(seed), METRIC, ga_cfg, seeds=[g for g, _ in first])
    init = ga.ask()                      # the seeds, then random genomes up to the population
    assert [c.key for c in init][: len(first)] == [g.key for g, _ in first]
    given = {g.key: e for g, e in first}
    ga.tell(init, [given.get(c.key) or ev(c.genome, 0.1, times(long=99.0, other=99.0)) for c in init])
    kids = ga.ask()
    assert kids and all(k.key not in {g.key for g, _ in first} for k in kids)
    ga.tell(kids, kid_evals(kids))
    return [p.key for p in ga.islands[0]]


@pytest.mark.parametrize("seed", range(5))
def test_a_specialist_survives_only_with_case_champions(synthetic_space, seed):
    a, b = genomes(synthetic_space, 2)
    # A: the best geomean, fastest everywhere but on the longest rows; B: the fastest on the longest
    # rows and the worst geomean; every child is better than B on the geomean, slower on LONG.
    first = [(a, ev(a, 2.0, times(long=50.0, other=5.0))), (b, ev(b, 0.5, times(long=20.0, other=40.0)))]

    def kid_evals(kids):
        return [ev(k.genome, 1.0, times(long=60.0, other=10.0)) for k in kids]

    with_champions = parents_after_two_generations(synthetic_space, seed, first, kid_evals, case_champions=1)
    without = parents_after_two_generations(synthetic_space, seed, first, kid_evals, case_champions=0)
    assert with_champions == [a.key, b.key]
    assert without[0] == a.key and b.key not in without and len(without) == 2


def test_champions_take_tournament_slots_and_population_stays(synthetic_space):
    a, b = genomes(synthetic_space, 2)
    first = [(a, ev(a, 2.0, times(long=50.0, other=5.0))), (b, ev(b, 0.5, times(long=20.0, other=40.0)))]
    keys = parents_after_two_generations(
        synthetic_space, 0, first, lambda kids: [ev(k.genome, 1.0, times(long=60.0, other=10.0)) for k in kids],
        population=4, elites=1, case_champions=1)
    assert keys[:2] == [a.key, b.key] and len(keys) == 4 and len(set(keys)) == 4


def test_failed_and_suspect_evaluations_never_become_champions(synthetic_space):
    a, good, sus, wrong, bad_case = genomes(synthetic_space, 5)
    evs = {
        a.key: ev(a, 2.0, times(long=50.0, other=5.0)),
        good.key: ev(good, 0.5, times(long=30.0, other=40.0)),
        # faster than everyone on LONG, but cannot be trusted
        sus.key: ev(sus, 9.0, times(long=1.0, other=1.0), suspect=True),
        wrong.key: ev(wrong, 9.0, times(long=1.0, other=1.0), status=Status.WRONG_RESULT),
        # verified overall, but its LONG case failed: it may not champion that case
        bad_case.key: ev(bad_case, 0.4, times(long=1.0, other=45.0), case_status={LONG: Status.WRONG_RESULT}),
    }
    assert case_times(evs[sus.key], METRIC) == {}
    assert case_times(evs[wrong.key], METRIC) == {}
    assert LONG not in case_times(evs[bad_case.key], METRIC)
    assert case_times(replace(evs[good.key], cases=evs[good.key].cases[:1] + (
        CaseResult(LONG, time_us=None),)), METRIC) == {CASES[0]: 40.0}

    pool = [individual(g, evs[g.key].fitness(METRIC)) for g in (a, good, sus, wrong, bad_case)]
    table = {k: t for k, e in evs.items() if (t := case_times(e, METRIC))}
    champs = [c.key for c in case_champions(pool, table, 1)]
    assert sus.key not in champs and wrong.key not in champs
    # A wins the short cases by 8x over the runner-up, `good` (not sus/wrong/bad_case) wins LONG by 50/30
    assert champs == [a.key, good.key]

    # through tell: one pool of all five, population 3, elites 1 -> A, then LONG's verified
    # champion; the suspect and the wrong one (fastest on every case) never fill a champion slot
    ga_cfg = GASection(population=3, offspring=2, elites=1, tournament_size=1, case_champions=1)
    order = [a, sus, wrong, bad_case, good]
    for seed in range(5):
        ga = GeneticAlgorithm(synthetic_space, random.Random(seed), METRIC, ga_cfg)
        ga._pending_islands = [0] * len(order)
        ga.tell([Candidate(g) for g in order], [evs[g.key] for g in order])
        kept = [p.key for p in ga.islands[0]]
        assert kept[:2] == [a.key, good.key] and len(kept) == 3
        assert sus.key not in ga._case_times and wrong.key not in ga._case_times


def test_when_champions_do_not_fit_the_most_unique_specialists_come_first(synthetic_space):
    a, b1, b2, b3, slow = genomes(synthetic_space, 5)
    c1, c2, c3 = CASES
    t = {  # A is fastest nowhere; b_i is fastest on case c_i by a margin of 1.1x, 3x and 2x
        a.key: {c1: 11.0, c2: 30.0, c3: 20.0},
        b1.key: {c1: 10.0, c2: 90.0, c3: 90.0},
        b2.key: {c1: 90.0, c2: 10.0, c3: 90.0},
        b3.key: {c1: 90.0, c2: 90.0, c3: 10.0},
        slow.key: {c1: 99.0, c2: 99.0, c3: 99.0},
    }
    pool = [individual(g, v) for g, v in ((a, 3.0), (b1, 1.0), (b2, 1.0), (b3, 1.0), (slow, 0.1))]
    assert [c.key for c in case_champions(pool, t, 1)] == [b2.key, b3.key, b1.key]
    # second places come after every first place (A is second on all three cases)
    assert [c.key for c in case_champions(pool, t, 2)] == [b2.key, b3.key, b1.key, a.key]
    assert case_champions(pool, t, 0) == []

    ga = GeneticAlgorithm(synthetic_space, random.Random(0), METRIC,
                          GASection(population=3, offspring=1, elites=1, tournament_size=1, case_champions=1))
    ga._case_times = t
    assert [p.key for p in ga._survivors(pool)] == [a.key, b2.key, b3.key]
    ga.cfg = replace(ga.cfg, elites=3)                    # elites fill the population: no champion fits
    assert [p.key for p in ga._survivors(pool)] == [a.key, b1.key, b2.key]


def test_duplicates_in_the_pool_give_one_champion(synthetic_space):
    a, b = genomes(synthetic_space, 2)
    t = {a.key: {LONG: 5.0, CASES[0]: 1.0}, b.key: {LONG: 9.0, CASES[0]: 9.0}}
    pool = [individual(a, 1.0), individual(a, 1.0), individual(b, 0.5)]
    assert [c.key for c in case_champions(pool, t, 2)] == [a.key, b.key]


# -- config -----------------------------------------------------------------------------------

@pytest.mark.parametrize("value, line", [
    (-1, "search.ga.case_champions: must be >= 0, got -1"),
    (1.5, "search.ga.case_champions: expected an integer, got float 1.5"),
    (True, "search.ga.case_champions: expected an integer, got bool True"),
])
def test_case_champions_config_is_validated(value, line):
    with pytest.raises(ConfigError) as exc:
        from_dict({"experiment": {"name": "x", "family": "synthetic"}, "search": {"ga": {"case_champions": value}}})
    assert exc.value.problems == [line]


def test_case_champions_config_default_and_doc():
    base = {"experiment": {"name": "x", "family": "synthetic"}}
    assert from_dict(base).search.ga.case_champions == 1
    assert from_dict({**base, "search": {"ga": {"case_champions": 0}}}).search.ga.case_champions == 0
    row = next(r for r in describe_fields() if r[0] == "search.ga.case_champions")
    assert row[1:3] == ("int", 1) and "dispatch" in row[3]


# -- whole runs: per-case data from an evaluator, determinism and resume ------------------------

class CasesEvaluator(Evaluator):
    """The synthetic replay table with per-case times: each genome is a specialist somewhere."""

    batch_size = 4

    def __init__(self, table):
        self.table = table

    def evaluate(self, genomes):
        out = []
        for e in self.table.evaluate(genomes):
            if e.status is Status.OK:
                base = 10.0 / e.objectives[METRIC]
                cases = []
                for c in CASES:
                    h = int(hashlib.sha256(f"{e.key}/{c}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
                    cases.append(CaseResult(c, time_us=base * (0.5 + h), baselines_us={"torch": 10.0}))
                e = replace(e, cases=tuple(cases))
            out.append(e)
        return out


def run_records(space, table, store=None, **ga):
    cfg = make_config(experiment={"seed": 5}, search={"ga": {"population": 8, "offspring": 8, **ga}},
                      budget={"evaluations": 80, "stall_rounds": 500})
    if store is None:
        store = open_store("memory://")
        store.create_run(new_run_info(cfg, "r"))
    Run(cfg, space, store, CasesEvaluator(table), "r").optimize()
    return [(r.key, r.generation, r.operator, r.parents) for r in store.records("r")]


def test_runs_with_case_champions_are_deterministic_and_resume(synthetic_space, synthetic_table):
    full = run_records(synthetic_space, synthetic_table, case_champions=1)
    assert len(full) == 80
    assert full == run_records(synthetic_space, synthetic_table, case_champions=1)
    # the champions change the search path (so the feature is live in a whole run)
    assert full != run_records(synthetic_space, synthetic_table, case_champions=0)

    # resume: a store holding the first 37 records of the run ends exactly like the full run
    cfg = make_config(experiment={"seed": 5}, search={"ga": {"population": 8, "offspring": 8, "case_champions": 1}},
                      budget={"evaluations": 80, "stall_rounds": 500})
    first = open_store("memory://")
    first.create_run(new_run_info(cfg, "r"))
    Run(cfg, synthetic_space, first, CasesEvaluator(synthetic_table), "r").optimize()
    partial = open_store("memory://")
    partial.create_run(new_run_info(cfg, "r"))
    for r in first.records("r")[:37]:
        partial.append(Record("r", r.evaluation, generation=r.generation, stage=r.stage,
                              operator=r.operator, parents=r.parents))
    assert run_records(synthetic_space, synthetic_table, store=partial, case_champions=1) == full
