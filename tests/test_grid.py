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


class PrefetchRecording:
    """An evaluator of the synthetic table that records what it judged and every prefetch hint,
    as (genomes judged before the hint, the hint's keys); 3 a chunk (7 per ask: 3, 3, 1)."""

    batch_size = 3

    def __init__(self, table):
        self.table = table
        self.judged: list[str] = []
        self.hints: list[tuple[int, list[str]]] = []

    def evaluate(self, genomes):
        self.judged += [g.key for g in genomes]
        return self.table.evaluate(genomes)

    def prefetch(self, genomes):
        self.hints.append((len(self.judged), [g.key for g in genomes]))


def _grid_run_with_prefetch(synthetic_space, synthetic_table, evaluations):
    """A grid run of `evaluations` on a recording that notes its prefetch hints: (the recording,
    the store, the grid's keys in its order)."""
    points = list(grid_points(synthetic_space, subspace(synthetic_space, FIXED, VARY)))
    store = open_store("memory://")
    cfg = grid_cfg(evaluations=evaluations)
    store.create_run(new_run_info(cfg, "slice"))
    rec = PrefetchRecording(synthetic_table)
    Run(cfg, synthetic_space, store, rec, "slice").optimize()
    return rec, store, [g.key for g in points]


def test_grid_hands_the_next_asks_genomes_over_before_they_are_asked(synthetic_space, synthetic_table):
    """The last chunk of an ask used to start with nothing compiling: the grid's next ask is known
    (a fixed order), so the run hands its first chunk to prefetch while that chunk is judged.
    Only a hint: what is judged, in what order, and what is recorded stay the same, and genomes
    already recorded (a resumed slice) are never handed over."""
    rec, store, keys = _grid_run_with_prefetch(synthetic_space, synthetic_table, 20)
    assert rec.judged == keys[:20] and [r.key for r in store.records("slice")] == keys[:20]
    # within an ask: the next chunk; on an ask's last chunk (1 genome at 6, 13): the next ask's first 3
    assert rec.hints == [(0, keys[3:6]), (3, keys[6:7]), (6, keys[7:10]), (7, keys[10:13]), (10, keys[13:14]),
                         (13, keys[14:17]), (14, keys[17:20])]
    # (at 17 the budget ends with the chunk in flight: no hint past it)

    # a resumed call: the recorded part is answered by the store, and never handed over
    rec2 = PrefetchRecording(synthetic_table)
    Run(grid_cfg(evaluations=27), synthetic_space, store, rec2, "slice").optimize()
    assert rec2.judged == keys[20:27]
    assert all(k not in keys[:20] for _, hint in rec2.hints for k in hint)
    assert rec2.hints[0] == (0, keys[21:24])          # 20, the first left, is the last of its ask (14-20)


def test_grid_lookahead_is_off_without_judge_ahead(synthetic_space, synthetic_table):
    from evo.config import from_dict

    hints = []

    class Hinted:
        batch_size = 3

        def evaluate(self, genomes):
            return synthetic_table.evaluate(genomes)

        def prefetch(self, genomes):
            hints.append(len(genomes))

    data = grid_cfg(evaluations=14).to_dict()
    data["evaluator"]["judge_ahead"] = False
    cfg = from_dict(data)
    store = open_store("memory://")
    store.create_run(new_run_info(cfg, "slice"))
    Run(cfg, synthetic_space, store, Hinted(), "slice").optimize()
    assert hints == [3, 1, 3, 1]                      # within each ask only, as before session 16
    assert len(store.records("slice")) == 14


def test_grid_lookahead_stops_when_the_wall_time_would_not_reach_another_chunk(synthetic_space, synthetic_table):
    import time

    class Slow:
        batch_size = 7

        def __init__(self):
            self.hints = 0

        def evaluate(self, genomes):
            time.sleep(0.3)
            return synthetic_table.evaluate(genomes)

        def prefetch(self, genomes):
            self.hints += 1

    store = open_store("memory://")
    cfg = grid_cfg(wall_time_s=0.5)
    store.create_run(new_run_info(cfg, "slice"))
    slow = Slow()
    Run(cfg, synthetic_space, store, slow, "slice").optimize()
    # the first chunk's lookahead was asked before any chunk had a duration; after 0.3 s, another
    # 2 x 0.3 s would pass the 0.5 s budget: no compile for a chunk that is never judged
    assert slow.hints == 1 and len(store.records("slice")) == 14


def test_grid_lookahead_hands_over_no_more_than_the_budget_will_judge(synthetic_space, synthetic_table):
    """On an ask's last chunk the next ask's first chunk is handed over, but only as much of it as
    the evaluation budget leaves after the chunk in flight: a stage 0 nobody judges is wasted CPU
    and keeps the evaluator's close waiting for it."""
    rec, store, keys = _grid_run_with_prefetch(synthetic_space, synthetic_table, 15)
    assert rec.judged == keys[:15]
    # at 13 (the second ask's last chunk, 1 genome) the budget leaves one more genome: 14 alone
    assert rec.hints[-1] == (13, keys[14:15])
    assert all(k in rec.judged for _, hint in rec.hints for k in hint)
