"""strategy = "grid": every valid genome of a sub-space, once, in a fixed order; an interrupted
recording resumes where it stopped without judging anything twice."""

from __future__ import annotations

import pytest

from evo.config import ConfigError
from evo.evaluators import check_environment
from evo.run import Run, new_run_info
from evo.store import open_store
from evo.strategies.grid import grid_points, grid_size, subspace
from genomes.genes import GeneError
from tests.conftest import make_config

FIXED = {"vector_bytes": 16, "load_cache": "nc", "unroll": 3}
VARY = {"streaming_store": [False, True], "threads_per_row": [32, 64, 128, 256, 512], "rows_per_cta": [1, 2, 4],
        "cluster": [1, 2, 4], "stages": [1, 2, 3]}


def grid_cfg(**budget):
    return make_config(search={"strategy": "grid", "grid": {"fixed": FIXED, "vary": VARY, "batch": 7}},
                       budget={"evaluations": 10_000, "stall_rounds": 3, **budget})


def test_subspace_is_every_valid_point(synthetic_space):
    values = subspace(synthetic_space, FIXED, VARY)
    points = list(grid_points(synthetic_space, values))
    assert grid_size(values) == 2 * 5 * 3 * 3 * 3
    brute = [g for g in synthetic_space.enumerate()
             if all(g[k] == v for k, v in FIXED.items()) and all(g[k] in v for k, v in VARY.items())]
    assert sorted(g.key for g in points) == sorted(g.key for g in brute) and len(set(points)) == len(points)


@pytest.mark.parametrize("fixed, vary, message", [
    ({"vector_bytes": 16}, VARY, "neither fixed nor varied"),
    ({**FIXED, "cluster": 1}, VARY, "both fixed and varied"),
    ({**FIXED, "nope": 1}, VARY, "no gene 'nope'"),
    ({**FIXED}, {**VARY, "stages": [1, 7]}, "stages"),
    ({**FIXED, "load_cache": ["nc", "cg"]}, VARY, "one value each"),
])
def test_bad_subspace_is_one_clear_line(synthetic_space, fixed, vary, message):
    with pytest.raises(GeneError, match=message):
        subspace(synthetic_space, fixed, vary)


def test_config_checks_the_grid():
    with pytest.raises(ConfigError, match="search.grid: strategy 'grid' needs the sub-space"):
        make_config(search={"strategy": "grid"})
    with pytest.raises(ConfigError, match="only search.strategy = 'grid' reads it"):
        make_config(search={"grid": {"fixed": FIXED}})
    bad = make_config(search={"strategy": "grid", "grid": {"fixed": {"vector_bytes": 16}, "vary": VARY}})
    with pytest.raises(ConfigError, match="search.grid: genes .* are neither fixed nor varied"):
        check_environment(bad)


def test_grid_records_every_point_once_and_resumes(synthetic_space, synthetic_table):
    points = list(grid_points(synthetic_space, subspace(synthetic_space, FIXED, VARY)))
    store = open_store("memory://")
    cfg = grid_cfg(evaluations=40)                    # the first "device call" stops after 40
    store.create_run(new_run_info(cfg, "slice"))
    Run(cfg, synthetic_space, store, synthetic_table, "slice").optimize()
    assert [r.key for r in store.records("slice")] == [g.key for g in points[:40]]

    class Counting:                                   # the evaluator of the next call counts what it judges
        batch_size = 1

        def __init__(self):
            self.judged = []

        def evaluate(self, genomes):
            self.judged += [g.key for g in genomes]
            return synthetic_table.evaluate(genomes)

        def prefetch(self, genomes):
            pass

    counting = Counting()
    summary = Run(grid_cfg(), synthetic_space, store, counting, "slice").optimize()
    assert counting.judged == [g.key for g in points[40:]]                 # nothing judged twice
    assert [r.key for r in store.records("slice")] == [g.key for g in points]
    assert summary.stop_reason == "every stage finished"
