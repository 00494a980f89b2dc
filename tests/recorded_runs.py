"""One replay of a run recorded on the device (a dump of `evo dump`), for the tests that check a
committed record replays ask for ask: the record's own config (stored in it; relative paths, such
as seed files, resolved against `config_source`'s folder), the evaluator switched to the record, a
fresh in-memory store. Shared by tests/test_recorded_rmsnorm_bwd_run.py and test_recorded_kda_run.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evo.config import from_dict
from evo.lessons import carried_evaluations, prior_evaluations, seed_genomes
from evo.run import Run, new_run_info
from evo.rundir import without_nulls
from evo.store import open_store
from fitness.replay import ReplayEvaluator
from genomes import load_space


def recorded_config(recording: dict[str, Any], path: Path, config_source: Path, **overrides: Any):
    """The record's config with its evaluator replaying `path` (progress off)."""
    cfg = from_dict(without_nulls(recording["config"]), source=str(config_source))
    return cfg.with_overrides({"evaluator.kind": "replay", "evaluator.replay": str(path),
                               "output.progress": False, **overrides})


def replay_recording(recording: dict[str, Any], path: Path, config_source: Path, **overrides: Any):
    """(store, summary, recorded asks, replayed asks): each ask as (key, generation, operator, parents).
    `overrides`: config fields (dotted) for what moved since, e.g. the seed_from record, now archived."""
    cfg = recorded_config(recording, path, config_source, **overrides)
    space = load_space(cfg.experiment.family, cfg.experiment.space_version)
    store = open_store("memory://")
    store.create_run(new_run_info(cfg, "replay"))
    summary = Run(cfg, space, store, ReplayEvaluator.from_file(path), "replay",
                  seeds=seed_genomes(cfg, space), prior=prior_evaluations(cfg, space),
                  carried=carried_evaluations(cfg, space)).optimize()
    recorded = [(x["key"], x["generation"], x["operator"], tuple(x["parents"])) for x in recording["lineage"]]
    replayed = [(r.key, r.generation, r.operator, r.parents) for r in store.records("replay")]
    return store, summary, recorded, replayed
