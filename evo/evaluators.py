"""Build the evaluator a config asks for: the GPU judge, or a replay of a recording (and read the
recorded evidence a replay or evo.lessons draws on)."""

from __future__ import annotations

import random
import re
from pathlib import Path

from fitness.evaluator import Evaluator
from fitness.replay import ReplayEvaluator
from genomes import GeneSpace
from evo.config import Config, ConfigError
from evo.store import StoreError, open_store


def target_device_problem(target_gpu: str, device: str) -> str | None:
    """One line when a GPU of `device` (the judge's device names, " | " between several) is not a
    `target_gpu`, else None. The target matches as a word of the name, case-insensitively: "H200" is
    "NVIDIA H200" but not "NVIDIA H100 80GB HBM3". An empty target or device (a judge that does not
    say) is no problem."""
    target, names = target_gpu.strip(), [d.strip() for d in device.split(" | ") if d.strip()]
    if not target or not names:
        return None
    word = re.compile(rf"(?<![A-Za-z0-9]){re.escape(target)}(?![A-Za-z0-9])", re.IGNORECASE)
    others = [n for n in names if not word.search(n)]
    if not others:
        return None
    return (f"target.gpu = {target!r}, but the judge's GPU is {' | '.join(others)!r}: run on a {target}, or set "
            f"[target] gpu to the GPU the results are for (each evaluation records the GPU that judged it)")


def check_target_device(cfg: Config, evaluator: Evaluator) -> str | None:
    """target_device_problem for a GPU judge's workers (started here: their device is the question);
    None for a replay, which answers from what another GPU measured and says so."""
    if cfg.evaluator.kind != "gpu" or not callable(getattr(evaluator, "pool", None)):
        return None
    evaluator.pool()
    return target_device_problem(cfg.target.gpu, str(evaluator.describe().get("device") or ""))


def replay_source(cfg: Config, src: str | None = None) -> tuple[str, str]:
    """("file", path) or ("store", url#run_id) for evaluator.replay (or another source field)."""
    src = cfg.evaluator.replay if src is None else src
    if "://" in src:
        return "store", src
    return "file", str(cfg.resolve(src))


def load_evidence(cfg: Config, source: str, space: GeneSpace, **kw) -> ReplayEvaluator:
    """Recorded evaluations from a table/dump file or a store URL#RUN_ID."""
    kind, src = replay_source(cfg, source)
    if kind == "store":
        url, _, run_id = src.partition("#")
        if not run_id:
            raise ConfigError([f"{src!r} names a store but no run; write URL#RUN_ID"], cfg.source)
        store = open_store(url)
        try:
            records = store.records(run_id)
        finally:
            store.close()
        return ReplayEvaluator((r.evaluation for r in records), source=src, **kw)
    return ReplayEvaluator.from_file(src, space=space, **kw)


def build_evaluator(cfg: Config, space: GeneSpace) -> Evaluator:
    from evo.pools import build_compiler, build_pool, pooled_replay

    ev = cfg.evaluator
    if ev.kind == "replay":
        if ev.pool == "ray":                          # the recording answered by the cluster's actors
            return pooled_replay(cfg, space, replay_source(cfg)[1])
        return load_evidence(cfg, ev.replay, space, missing=ev.missing, latency_s=ev.latency_s)
    from fitness.gpu_evaluator import GPUEvaluator   # imports the GPU stack only when asked

    # During a search only the objective's baseline is timed beside each candidate (it is what the
    # fitness is measured against); final result tables time every baseline.

    from fitness.jobs import TimingConfig
    timing = TimingConfig(reps=ev.reps, warmup=ev.warmup, flush_l2=ev.flush_l2, rotate_inputs=ev.rotate_inputs,
                          max_case_seconds=ev.max_case_seconds, baseline_reps=ev.baseline_reps or None)
    return GPUEvaluator(cfg.experiment.family, space, matrix=cfg.benchmark.matrix, check=cfg.benchmark.check,
                        baseline=cfg.objective.baseline, baselines=[cfg.objective.baseline],
                        metric=cfg.objective.metric, timing=timing,
                        workers=ev.workers or None, timeout_s=ev.timeout_s, cache_dir=ev.cache_dir,
                        arch=cfg.target.arch, seed=cfg.experiment.seed,
                        hopeless_below=ev.hopeless_below or None, hopeless_cases=ev.hopeless_cases,
                        hopeless_group=ev.hopeless_group or None,
                        unsupported_speedup=ev.unsupported_speedup or None,
                        bench_case_timeout_s=ev.bench_case_timeout_s or None,
                        startup_timeout_s=ev.startup_timeout_s, compile_jobs=ev.compile_jobs or None,
                        stage0_ahead=ev.judge_ahead,
                        pool=build_pool(cfg), compiler=build_compiler(cfg))


def region_problems(cfg: Config, space: GeneSpace) -> list[str]:
    """search.init_within and search.seed_variants checked against the gene space: one line per
    unknown gene or value."""
    from genomes.genes import GeneError

    problems = []
    for section, table in (("init_within", cfg.search.init_within), ("seed_variants", cfg.search.seed_variants),
                           ("seed_variants_relax", cfg.search.seed_variants_relax),
                           ("seed_variants_within", cfg.search.seed_variants_within)):
        for name, values in table.items():
            try:
                space.region({name: values})
            except GeneError as exc:
                problems.append(f"search.{section}.{name}: {exc}")
    if not problems and cfg.search.init_within:
        try:
            space.sample(random.Random(cfg.experiment.seed), within=cfg.search.init_within)
        except GeneError as exc:
            problems.append(f"search.init_within: {exc}")
    if cfg.search.strategy == "grid":
        from evo.strategies.grid import subspace

        try:
            subspace(space, cfg.search.grid.fixed, cfg.search.grid.vary)
        except GeneError as exc:
            problems.append(f"search.grid: {exc}")
    return problems


def check_environment(cfg: Config, store_url: str | None = None) -> None:
    """Problems a config cannot show by itself: missing family, replay table, database."""
    from genomes import available_families, load_space
    from genomes.registry import space_versions

    problems = []
    family = cfg.experiment.family
    try:
        load_space(family)
    except LookupError:
        problems.append(f"experiment.family: no gene space {family!r} (genomes/{family}.py); "
                        f"available: {available_families()}")
    else:
        version = cfg.experiment.space_version
        if version and version not in space_versions(family):
            problems.append(f"experiment.space_version: {family!r} has no gene space version {version!r}; "
                            f"versions: {space_versions(family)} (empty: the latest)")
        else:
            problems.extend(region_problems(cfg, load_space(family, version)))
            from evo.proposers import operator_problems

            problems.extend(operator_problems(cfg, load_space(family, version)))
            from evo.lessons import listed_seeds   # evo.lessons reads evidence through this module

            try:
                listed_seeds(cfg, load_space(family, version), [], room=1 << 30)
            except ConfigError as exc:
                problems.extend(exc.problems)
    from evo.pools import pool_problems

    problems.extend(pool_problems(cfg, replay_source(cfg)[0] if cfg.evaluator.kind == "replay" else "file"))
    if cfg.evaluator.kind == "gpu":
        from fitness.family import KERNELS_DIR, available_families as kernel_families

        if not (KERNELS_DIR / family / "family.py").is_file():
            problems.append(f"experiment.family: no kernel folder kernels/{family}/family.py for the GPU "
                            f"evaluator; available: {kernel_families()} (or use evaluator.kind = 'replay')")
    else:
        kind, src = replay_source(cfg)
        if kind == "file":
            if not Path(src).is_file():
                problems.append(f"evaluator.replay: {src} does not exist (paths are relative to the config file)")
        else:
            try:
                open_store(src.partition("#")[0]).close()
            except StoreError as exc:
                problems.append(f"evaluator.replay: {exc}")
    if cfg.search.seed_from:
        kind, src = replay_source(cfg, cfg.search.seed_from)
        if kind == "file" and not Path(src).is_file():
            problems.append(f"search.seed_from: {src} does not exist (paths are relative to the config file)")
    lessons = cfg.search.lessons.source
    if lessons and "://" not in lessons and not cfg.resolve(lessons).is_file():
        problems.append(f"search.lessons.source: {cfg.resolve(lessons)} does not exist (an `evo lessons export` "
                        "file or a store URL; paths are relative to the config file)")
    if store_url:
        try:
            open_store(store_url).close()
        except StoreError as exc:
            problems.append(f"store.url: {exc}")
    if problems:
        raise ConfigError(problems, cfg.source)
