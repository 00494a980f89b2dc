"""The dense slice's next device calls (issue 19) go on the committed record unchanged: restored from
results/slice/rmsnorm_fwd_slice_h200.json.gz with the slice's own config, the run answers its
recorded genomes from the store (none judged again, none recorded twice), judges the rest in the
grid's fixed order, and the judge's prefetch (stage 0 of the next chunk while one is on the GPU,
and the grid's next ask handed over on an ask's last chunk) never names a recorded genome.

No GPU: the evaluator here only records what it is asked (it answers WRONG_RESULT, into a
temporary store)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evo.config import load_config
from evo.rundir import restore_store
from evo.run import Run
from evo.store import open_store
from evo.strategies.grid import grid_points, subspace
from fitness.records import Status, failed
from genomes import load_space

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "experiments" / "rmsnorm_fwd_slice_h200.toml"
DUMP = REPO / "results" / "slice" / "rmsnorm_fwd_slice_h200.json.gz"


class Asked:
    """Stands in for the GPU judge: the chunk size of one GPU worker (GPUEvaluator.batch_size)."""

    batch_size = 4

    def __init__(self):
        self.judged: list[str] = []
        self.hints: list[str] = []

    def evaluate(self, genomes):
        self.judged += [g.key for g in genomes]
        return [failed(g, Status.WRONG_RESULT, "stand-in") for g in genomes]

    def evaluate_in_full(self, genomes):
        return self.evaluate(genomes)

    def prefetch(self, genomes):
        self.hints += [g.key for g in genomes]

    def accepts_evidence(self, evaluation):
        return "stand-in"


def _prefix_dump(tmp_path: Path, n: int) -> Path:
    """The committed record cut to its first n evaluations: the slice as it stood part-way through its
    recording (sessions 13-17 restored such a record before every device call)."""
    import gzip
    import json

    data = json.loads(gzip.decompress(DUMP.read_bytes()))
    data["evaluations"] = data["evaluations"][:n]
    out = tmp_path / "prefix.json.gz"
    out.write_bytes(gzip.compress(json.dumps(data).encode()))
    return out


@pytest.mark.skipif(not DUMP.is_file(), reason="the slice's record is not in this checkout")
def test_the_restored_slice_judges_only_what_is_left_in_grid_order(tmp_path):
    url = f"sqlite:///{tmp_path / 'slice.db'}"
    run_id, elapsed = restore_store(_prefix_dump(tmp_path, 768), url)
    cfg = load_config(CONFIG)
    space = load_space(cfg.experiment.family, cfg.experiment.space_version)
    points = list(grid_points(space, subspace(space, cfg.search.grid.fixed, cfg.search.grid.vary)))
    with open_store(url) as store:
        recorded = [r.key for r in store.records(run_id)]
        n = len(recorded)
        assert n == 768 and recorded == [g.key for g in points[:n]]    # the record is a prefix of the order
        extra = 24
        cfg = cfg.with_overrides({"budget.evaluations": n + extra})
        asked = Asked()
        run = Run(cfg, space, store, asked, run_id)
        run.optimize()
        assert asked.judged == [g.key for g in points[n:n + extra]]
        assert not set(asked.hints) & set(recorded)
        assert asked.hints == [g.key for g in points[n + 4:n + extra]]     # each chunk's successor, once
        assert [r.key for r in store.records(run_id)] == [g.key for g in points[:n + extra]]
        assert run.new_evaluations == extra and run.duplicates_dropped == 0


@pytest.mark.skipif(not DUMP.is_file(), reason="the slice's record is not in this checkout")
def test_the_whole_slice_restored_judges_nothing(tmp_path):
    """Session 18 recorded the last genome: the committed record is every valid genome of the
    sub-space in grid order, and a device call on it would ask the GPU for nothing."""
    url = f"sqlite:///{tmp_path / 'slice.db'}"
    run_id, _ = restore_store(DUMP, url)
    cfg = load_config(CONFIG)
    space = load_space(cfg.experiment.family, cfg.experiment.space_version)
    points = list(grid_points(space, subspace(space, cfg.search.grid.fixed, cfg.search.grid.vary)))
    with open_store(url) as store:
        assert [r.key for r in store.records(run_id)] == [g.key for g in points]
        asked = Asked()
        run = Run(cfg, space, store, asked, run_id)
        run.optimize()
        assert asked.judged == [] and asked.hints == [] and run.new_evaluations == 0
