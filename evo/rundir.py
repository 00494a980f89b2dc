"""Run directories: where a run's config, metadata and (by default) SQLite store live.

    runs/<name>-<YYYYmmdd-HHMMSS>-<4 hex>/
        config.toml   the config as written (for people)
        run.json      run id, store URL and the resolved config (for `evo resume`)
        store.sqlite  the store, unless store.url points elsewhere

A run moves between hosts by its store (`evo resume URL#RUN_ID`, adopt_run_dir) or by its dump
(`evo resume DUMP.json.gz`, restore_run_dir: a machine that keeps nothing between sessions).

The resolved config (absolute paths) is what resume uses, so a run can be resumed from any
working directory, even after its original config file changed.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evo.config import Config, ConfigError, from_dict
from evo.store import sqlite_url


@dataclass(frozen=True)
class RunDir:
    path: Path
    run_id: str
    store_url: str
    config: Config

    @property
    def optuna_storage(self) -> str | None:
        return None if self.store_url.startswith("memory://") else self.store_url


def _resolved(cfg: Config) -> dict:
    data = cfg.to_dict()
    ev = data["evaluator"]
    if ev["kind"] == "replay" and ev["replay"] and "://" not in ev["replay"]:
        ev["replay"] = str(cfg.resolve(ev["replay"]))
    seed = data["search"]["seed_from"]
    if seed and "://" not in seed:
        data["search"]["seed_from"] = str(cfg.resolve(seed))
    return data


def create_run_dir(cfg: Config, runs_dir: str | Path | None = None) -> RunDir:
    root = Path(runs_dir or cfg.output.runs_dir)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_id = f"{cfg.experiment.name}-{stamp}-{os.urandom(2).hex()}"
    path = root / run_id
    path.mkdir(parents=True, exist_ok=False)
    store_url = cfg.store.url or sqlite_url(path / "store.sqlite")
    if cfg.source and Path(cfg.source).is_file():
        (path / "config.toml").write_text(Path(cfg.source).read_text())
    meta = {"run_id": run_id, "store_url": store_url, "config": _resolved(cfg),
            "config_source": str(Path(cfg.source).resolve()) if cfg.source else "",
            "created_at": time.time()}
    (path / "run.json").write_text(json.dumps(meta, indent=2))
    # the run goes on with the resolved config (the one run.json keeps), which the store records too:
    # a host that resumes the run from the store alone (adopt_run_dir) finds absolute paths
    return RunDir(path, run_id, store_url, from_dict(meta["config"], source=cfg.source))


def adopt_run_dir(source: str, runs_dir: str | Path = "runs") -> Path:
    """A run directory on this host for a run another host started, from its store alone
    (`evo resume URL#RUN_ID`): runs/<run id>/run.json with the store's URL and the config the store
    recorded, made once and reused. With a store every host reaches (PostgreSQL) and the config's
    files on a path every host sees, the run, its Optuna studies included, resumes here."""
    from evo.store import RunNotFound, open_store

    url, _, run_id = source.partition("#")
    if not run_id:
        raise ConfigError([f"{source!r} names a store but no run; write URL#RUN_ID (`evo status URL` lists none: "
                           f"the run ids are in the URL#RUN_ID that `evo status` of the run directory prints)"], source)
    store = open_store(url)
    try:
        info = store.get_run(run_id)
    except RunNotFound:
        raise ConfigError([f"the store has no run {run_id!r}"], url) from None
    finally:
        store.close()
    path = Path(runs_dir) / run_id
    meta_path = path / "run.json"
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        if meta.get("run_id") != run_id or meta.get("store_url") != url:
            raise ConfigError([f"{path} holds another run ({meta.get('run_id')!r} in {meta.get('store_url')!r}); "
                               f"pass --runs-dir elsewhere"], str(path))
        return path
    config = without_nulls(info.config)
    from_dict(config)                           # the recorded config must still be valid here
    path.mkdir(parents=True, exist_ok=True)
    meta = {"run_id": run_id, "store_url": url, "config": config, "config_source": "",
            "created_at": info.created_at, "adopted_at": time.time()}
    meta_path.write_text(json.dumps(meta, indent=2))
    return path


def restore_store(dump: Any, store_url: str) -> tuple[str, float]:
    """The run of an `evo dump` file (or its frames, evo.analysis.load_run's, already read), its
    records in their order, into a fresh store: (run id, seconds it had run). The run comes back
    interrupted, so `evo resume` goes on."""
    from evo.analysis import load_run
    from evo.store import Record, RunInfo, open_store

    frames = load_run(dump) if isinstance(dump, (str, Path)) else dump
    run = frames.run
    with open_store(store_url) as store:
        store.create_run(RunInfo(run["run_id"], run.get("name") or run["run_id"], run["family"], int(run["seed"]),
                                 config=run["config"], state="interrupted", elapsed_s=float(run["elapsed_s"]),
                                 notes=run.get("notes") or {}))
        for r in sorted(frames.records, key=lambda r: r.seq):
            store.append(Record(run["run_id"], r.evaluation, generation=r.generation, stage=r.stage,
                                operator=r.operator, parents=r.parents))
    return run["run_id"], float(run["elapsed_s"])


def restore_run_dir(dump: str | Path, runs_dir: str | Path = "runs", config_dir: str | Path = ".") -> Path:
    """A run directory on this host for a run `evo dump` wrote on another (`evo resume DUMP`): the
    dump's records in a fresh SQLite store, run.json with the config the run recorded. A dump does
    not know the folder of the config it was run from, so the config's relative paths (seed files,
    a replay table) resolve against `config_dir`; one that is missing there is a ConfigError
    naming the field. Made once: resuming the same dump again reuses the directory (and whatever
    its store has gained since), so a second call never records a genome twice.

    What comes back is the records: a stage's own state that lives beside them (an Optuna study in
    the store's tables) starts afresh, and answers from the records what it asks again."""
    from evo.analysis import load_run

    try:
        frames = load_run(dump)
    except ValueError as exc:
        raise ConfigError([str(exc)], str(dump)) from None
    run_id = frames.run["run_id"]
    path = Path(runs_dir) / run_id
    meta_path = path / "run.json"
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        if meta.get("run_id") != run_id or meta.get("restored_from") is None:
            raise ConfigError([f"{path} holds another run ({meta.get('run_id')!r}); pass --runs-dir elsewhere"],
                              str(path))
        return path
    config = without_nulls(frames.run["config"])
    source = Path(config_dir).resolve() / "restored.toml"
    cfg = from_dict(config, source=str(source))         # the recorded config must still be valid here
    for field, value in (("search.seed_genomes", cfg.search.seed_genomes), ("search.seed_from", cfg.search.seed_from),
                         ("evaluator.replay", cfg.evaluator.replay)):
        if value and "://" not in value and not cfg.resolve(value).exists():
            raise ConfigError([f"{field}: {cfg.resolve(value)} does not exist (the dump's config names {value!r}; "
                               f"pass --config-dir, the folder of the config the run was started from)"], str(dump))
    path.mkdir(parents=True, exist_ok=True)
    store_url = sqlite_url(path / "store.sqlite")
    restore_store(frames, store_url)
    meta = {"run_id": run_id, "store_url": store_url, "config": config, "config_source": str(source),
            "created_at": time.time(), "restored_from": str(Path(dump).resolve())}
    meta_path.write_text(json.dumps(meta, indent=2))
    return path


def open_run_dir(path: str | Path) -> RunDir:
    path = Path(path)
    meta_path = path / "run.json"
    if not meta_path.is_file():
        raise ConfigError([f"{path} is not a run directory (no run.json); `evo run CONFIG` makes one"], str(path))
    meta = json.loads(meta_path.read_text())
    cfg = from_dict(meta["config"], source=meta.get("config_source", ""))
    return RunDir(path, meta["run_id"], meta["store_url"], cfg)


def without_nulls(config: dict) -> dict:
    """The store keeps configs as strict JSON, where a non-finite number (budget.target = inf, the
    default) becomes null; TOML has no null, so a null is always such a number: leave it out and
    the field's default (inf) comes back."""
    return {k: without_nulls(v) if isinstance(v, dict) else v for k, v in config.items() if v is not None}
