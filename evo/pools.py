"""The pool a config asks for (`[evaluator] pool`), for the GPU judge and for a pooled replay.

`pool = "local"` leaves everything as on one host: the GPU judge builds its own local pool (one
worker process per visible GPU, `workers`) and a replay answers in the driver. `pool = "ray"`
gives the judge a RayPool (one actor per GPU of the cluster at `ray_address`, `gpus` of them)
and a ClusterCompiler (nvcc on the cluster's CPUs, through the compile cache at `cache_dir`), and
sends a replay's genomes through the actors (fitness.pooled_replay), a rehearsal of the cluster
that costs no GPU time.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from evo.config import Config, ConfigError
from fitness.workers import DEFAULT_RUNNER
from genomes import GeneSpace


def pool_problems(cfg: Config, replay_kind: str = "file") -> list[str]:
    """What keeps this machine from building the configured pool, one line each (Ray missing, a
    replay the actors cannot read)."""
    ev = cfg.evaluator
    if ev.pool != "ray":
        return []
    problems = []
    if importlib.util.find_spec("ray") is None:
        problems.append("evaluator.pool: 'ray' needs Ray, which is not installed: pip install "
                        "'ptx-kernel-factory[ray]'")
    if ev.kind == "replay" and replay_kind != "file":
        problems.append("evaluator.replay: with pool = 'ray' the actors read the recording from a file (a table or "
                        "an `evo dump` JSON, on a path every node sees); `evo dump URL#RUN_ID --out FILE` makes one")
    return problems


def build_pool(cfg: Config, runner: str = DEFAULT_RUNNER, runner_kwargs: dict[str, Any] | None = None) -> Any:
    """The RayPool of a `pool = "ray"` config (not started: it joins the cluster at first use);
    None for the local pool, which the GPU judge builds itself."""
    ev = cfg.evaluator
    if ev.pool != "ray":
        return None
    problems = pool_problems(cfg)
    if problems:
        raise ConfigError(problems, cfg.source)
    from fitness.ray_pool import RayPool

    return RayPool(ev.gpus or None, address=ev.ray_address, runner=runner, runner_kwargs=runner_kwargs,
                   timeout_s=ev.timeout_s, startup_timeout_s=ev.startup_timeout_s, max_retries=ev.ray_retries)


def build_compiler(cfg: Config) -> Any:
    """The cluster compiler of a `pool = "ray"` config; None: the judge's own local Compiler."""
    if cfg.evaluator.pool != "ray":
        return None
    from fitness.ray_compile import ClusterCompiler

    return ClusterCompiler(cfg.evaluator.cache_dir, arch=cfg.target.arch, address=cfg.evaluator.ray_address)


def pooled_replay(cfg: Config, space: GeneSpace, table: str) -> Any:
    """`kind = "replay"` with `pool = "ray"`: the recording answered by the cluster's actors."""
    from fitness.pooled_replay import PooledReplayEvaluator

    ev = cfg.evaluator
    kwargs = {"table": table, "space": cfg.experiment.family, "space_version": cfg.experiment.space_version,
              "latency_s": ev.latency_s}
    pool = build_pool(cfg, runner="fitness.pooled_replay:ReplayRunner", runner_kwargs=kwargs)
    return PooledReplayEvaluator(table, space, pool, missing=ev.missing, latency_s=ev.latency_s,
                                 timeout_s=ev.timeout_s, space_family=cfg.experiment.family,
                                 space_version=cfg.experiment.space_version)
