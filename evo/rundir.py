"""Run directories: where a run's config, metadata and (by default) SQLite store live.

    runs/<name>-<YYYYmmdd-HHMMSS>-<4 hex>/
        config.toml   the config as written (for people)
        run.json      run id, store URL and the resolved config (for `evo resume`)
        store.sqlite  the store, unless store.url points elsewhere

The resolved config (absolute paths) is what resume uses, so a run can be resumed from any
working directory, even after its original config file changed.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

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
    return RunDir(path, run_id, store_url, cfg)


def open_run_dir(path: str | Path) -> RunDir:
    path = Path(path)
    meta_path = path / "run.json"
    if not meta_path.is_file():
        raise ConfigError([f"{path} is not a run directory (no run.json); `evo run CONFIG` makes one"], str(path))
    meta = json.loads(meta_path.read_text())
    cfg = from_dict(meta["config"], source=meta.get("config_source", ""))
    return RunDir(path, meta["run_id"], meta["store_url"], cfg)
