"""The GA must find the recorded optimum of a recorded space in clearly fewer evaluations than
random search (the replay table stands in for the GPU; Kernel Tuner's simulation mode)."""

from __future__ import annotations

import statistics

import pytest

from evo.run import Run, new_run_info
from evo.store import open_store
from tests.conftest import make_config

SEEDS = range(10)


def evaluations_to_optimum(strategy, seed, space, table, **ga):
    best = table.best("geomean_speedup").fitness("geomean_speedup")
    cfg = make_config(experiment={"seed": seed}, search={"strategy": strategy, "ga": ga},
                      budget={"evaluations": len(table), "stall_rounds": 500, "target": best})
    store = open_store("memory://")
    store.create_run(new_run_info(cfg, "r"))
    run = Run(cfg, space, store, table, "r")
    summary = run.optimize()
    assert run.best_value == best, f"{strategy} seed {seed} never reached the optimum"
    return summary.evaluations


@pytest.mark.slow
def test_ga_reaches_optimum_much_faster_than_random(synthetic_space, synthetic_table):
    ga = [evaluations_to_optimum("ga", s, synthetic_space, synthetic_table, population=16, offspring=16)
          for s in SEEDS]
    rnd = [evaluations_to_optimum("random", s, synthetic_space, synthetic_table) for s in SEEDS]
    ga_median, rnd_median = statistics.median(ga), statistics.median(rnd)
    print(f"\nevaluations to the optimum over {len(SEEDS)} seeds: GA {ga} (median {ga_median}); "
          f"random {rnd} (median {rnd_median})")
    # random needs about half the valid space on average; the GA must need under a fifth of that
    assert ga_median * 5 <= rnd_median
    assert max(ga) < statistics.median(rnd)
    # and the GA wins on most seeds individually, not just on the median
    assert sum(g < r for g, r in zip(ga, rnd)) >= 8


def test_same_seed_same_run(synthetic_space, synthetic_table):
    def keys(seed):
        cfg = make_config(experiment={"seed": seed}, budget={"evaluations": 120})
        store = open_store("memory://")
        store.create_run(new_run_info(cfg, "r"))
        Run(cfg, synthetic_space, store, synthetic_table, "r").optimize()
        return [(r.key, r.generation, r.operator, r.parents) for r in store.records("r")]

    assert keys(3) == keys(3)
    assert keys(3) != keys(4)
