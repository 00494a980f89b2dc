"""Build the evaluator a config asks for: the GPU judge, or a replay of a recording."""

from __future__ import annotations

from fitness.evaluator import Evaluator
from fitness.replay import ReplayEvaluator
from genomes import GeneSpace
from evo.config import Config, ConfigError
from evo.store import StoreError, open_store


def replay_source(cfg: Config) -> tuple[str, str]:
    """("file", path) or ("store", url#run_id) for evaluator.replay."""
    src = cfg.evaluator.replay
    if "://" in src:
        return "store", src
    return "file", str(cfg.resolve(src))


def build_evaluator(cfg: Config, space: GeneSpace) -> Evaluator:
    ev = cfg.evaluator
    if ev.kind == "replay":
        kind, src = replay_source(cfg)
        if kind == "store":
            url, _, run_id = src.partition("#")
            if not run_id:
                raise ConfigError([f"evaluator.replay: {src!r} names a store but no run; write URL#RUN_ID"], cfg.source)
            store = open_store(url)
            try:
                records = store.records(run_id)
            finally:
                store.close()
            return ReplayEvaluator((r.evaluation for r in records), missing=ev.missing,
                                   latency_s=ev.latency_s, source=src)
        return ReplayEvaluator.from_file(src, space=space, missing=ev.missing, latency_s=ev.latency_s)
    from fitness.gpu_evaluator import GPUEvaluator   # imports the GPU stack only when asked

    # During a search only the objective's baseline is timed beside each candidate (it is what the
    # fitness is measured against); final result tables time every baseline.

    return GPUEvaluator(cfg.experiment.family, space, matrix=cfg.benchmark.matrix, check=cfg.benchmark.check,
                        baseline=cfg.objective.baseline, baselines=[cfg.objective.baseline],
                        metric=cfg.objective.metric,
                        workers=ev.workers or None, timeout_s=ev.timeout_s, cache_dir=ev.cache_dir,
                        arch=cfg.target.arch, seed=cfg.experiment.seed,
                        hopeless_below=ev.hopeless_below or None)


def check_environment(cfg: Config, store_url: str | None = None) -> None:
    """Problems a config cannot show by itself: missing family, replay table, database."""
    from genomes import available_families, load_space

    problems = []
    family = cfg.experiment.family
    try:
        load_space(family)
    except LookupError:
        problems.append(f"experiment.family: no gene space {family!r} (genomes/{family}.py); "
                        f"available: {available_families()}")
    if cfg.evaluator.kind == "gpu":
        from fitness.family import KERNELS_DIR, available_families as kernel_families

        if not (KERNELS_DIR / family / "family.py").is_file():
            problems.append(f"experiment.family: no kernel folder kernels/{family}/family.py for the GPU "
                            f"evaluator; available: {kernel_families()} (or use evaluator.kind = 'replay')")
    else:
        kind, src = replay_source(cfg)
        if kind == "file":
            from pathlib import Path

            if not Path(src).is_file():
                problems.append(f"evaluator.replay: {src} does not exist (paths are relative to the config file)")
        else:
            try:
                open_store(src.partition("#")[0]).close()
            except StoreError as exc:
                problems.append(f"evaluator.replay: {exc}")
    if store_url:
        try:
            open_store(store_url).close()
        except StoreError as exc:
            problems.append(f"store.url: {exc}")
    if problems:
        raise ConfigError(problems, cfg.source)
