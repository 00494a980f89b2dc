"""Build the evaluator a config asks for: the GPU judge, or a replay of a recording."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path

from fitness.evaluator import Evaluator
from fitness.records import Evaluation
from fitness.replay import ReplayEvaluator
from genomes import GeneSpace, Genome
from genomes.space import InvalidGenome
from evo.config import Config, ConfigError
from evo.store import StoreError, open_store


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


def seed_evidence(cfg: Config, space: GeneSpace) -> ReplayEvaluator | None:
    """The recording `search.seed_from` names, loaded once for seed_genomes, prior_evaluations
    and carried_evaluations (a dump of a GPU run is a few MB); None without seed_from."""
    return load_evidence(cfg, cfg.search.seed_from, space) if cfg.search.seed_from else None


def seed_genomes(cfg: Config, space: GeneSpace, evidence: ReplayEvaluator | None = None) -> list:
    """Verified genomes of `search.seed_from` that are valid in today's space, at most one
    population's worth: what an earlier run learned starts this one. With search.seed_champions,
    first the fastest genome of every benchmark case (in case order; a dispatch table's genomes),
    then the rest best first by the metric."""
    if not cfg.search.seed_from:
        return listed_seeds(cfg, space, [], room=cfg.search.ga.population * cfg.search.ga.islands)
    evidence = evidence if evidence is not None else seed_evidence(cfg, space)
    metric = cfg.objective.metric
    scored = sorted((e for e in evidence.evaluations() if e.fitness(metric) is not None and e.space == space.name),
                    key=lambda e: (-e.fitness(metric), e.key))
    ordered = list(scored)
    if cfg.search.seed_champions:
        fastest: dict[str, tuple[float, str]] = {}
        by_key = {e.key: e for e in scored}
        for e in scored:
            for c in e.cases:
                if c.status.value == "OK" and c.time_us and (c.case not in fastest or c.time_us < fastest[c.case][0]):
                    fastest[c.case] = (c.time_us, e.key)
        champions = list(dict.fromkeys(key for _, key in (fastest[c] for c in sorted(fastest))))
        ordered = [by_key[k] for k in champions] + [e for e in scored if e.key not in set(champions)]
    out: list = []
    limit = cfg.search.ga.population * cfg.search.ga.islands
    if cfg.search.seed_limit:
        limit = min(limit, cfg.search.seed_limit)
    for e in ordered:
        if len(out) == limit:
            break
        if space.is_valid(e.genome):
            out.append(space.make(e.genome))
    room = cfg.search.ga.population * cfg.search.ga.islands
    out = out + seed_variants(cfg, space, out, room=room - len(out))
    return out + listed_seeds(cfg, space, out, room=room - len(out))


def read_seed_genomes(cfg: Config) -> list[dict]:
    """The genomes of search.seed_genomes, as written (a file of {"genomes": [...]}, each a genome
    or an object whose "genome" is one); a clear error naming the field for a bad file."""
    if not cfg.search.seed_genomes:
        return []
    path = cfg.resolve(cfg.search.seed_genomes)
    where = f"search.seed_genomes: {path}"
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError([f"{where} does not exist (paths are relative to the config file)"], cfg.source) from None
    except json.JSONDecodeError as exc:
        raise ConfigError([f"{where} is not valid JSON: {exc}"], cfg.source) from None
    items = data.get("genomes") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ConfigError([f'{where} must hold an object with a "genomes" list'], cfg.source)
    genomes = [item.get("genome", item) if isinstance(item, dict) else item for item in items]
    bad = [i for i, g in enumerate(genomes) if not isinstance(g, dict)]
    if bad:
        raise ConfigError([f"{where}: entries {bad} are not genomes (objects of gene = value)"], cfg.source)
    return genomes


def listed_seeds(cfg: Config, space: GeneSpace, seeds: Sequence[Genome], room: int) -> list[Genome]:
    """search.seed_genomes after the other seeds, in file order, skipping duplicates, at most
    `room`. A genome the space rejects is an error, not skipped: the file was written for this
    space, and silently dropping a chosen seed would hide a mistake."""
    out: list[Genome] = []
    seen = {g.key for g in seeds}
    for i, raw in enumerate(read_seed_genomes(cfg)):
        if len(out) >= room:
            break
        try:
            g = space.make(raw)
        except InvalidGenome as exc:
            raise ConfigError([f"search.seed_genomes: entry {i} is not valid in gene space "
                               f"{space.name!r}: {exc}"], cfg.source) from None
        if g.key not in seen:
            seen.add(g.key)
            out.append(g)
    return out


def seed_variants(cfg: Config, space: GeneSpace, seeds: Sequence[Genome], room: int) -> list[Genome]:
    """search.seed_variants: the seeds (the first seed_variants_of, those inside
    seed_variants_within) with one gene changed to each listed value, in seed order, skipping
    invalid and duplicate genomes, at most `room` of them.
    A gene new to the space otherwise reaches the winning genomes only by chance mutations."""
    if not cfg.search.seed_variants or room <= 0:
        return []
    base = list(seeds[:cfg.search.seed_variants_of] if cfg.search.seed_variants_of else seeds)
    within = cfg.search.seed_variants_within
    base = [g for g in base if all(g[name] in values for name, values in within.items())]
    seen = {g.key for g in seeds}
    out: list[Genome] = []
    for g in base:
        for name, values in cfg.search.seed_variants.items():
            for value in values:
                changed = {**dict(g), name: value}
                if changed == dict(g):
                    continue
                if not space.is_valid(changed):
                    changed = _relaxed(space, changed, cfg.search.seed_variants_relax)
                    if changed is None:
                        continue
                v = space.make(changed)
                if v.key not in seen:
                    seen.add(v.key)
                    out.append(v)
                if len(out) == room:
                    return out
    return out


def _relaxed(space: GeneSpace, genome: dict, relax: dict) -> dict | None:
    """search.seed_variants_relax: the variant with one relaxing gene changed (genes in table
    order, values in list order), the first that the constraints accept; None if none does."""
    for name, values in relax.items():
        for value in values:
            tried = {**genome, name: value}
            if space.is_valid(tried):
                return tried
    return None


def prior_evaluations(cfg: Config, space: GeneSpace,
                      evidence: ReplayEvaluator | None = None) -> list[tuple[Genome, float | None]]:
    """(genome, fitness) of every evaluation of `search.seed_from` valid in today's space, for the
    GA's screening model (search.ga.screen > 1 with screen_history); empty otherwise. Failed
    evaluations come with fitness None (the model leaves them out)."""
    ga = cfg.search.ga
    if not cfg.search.seed_from or cfg.search.strategy != "ga" or ga.screen <= 1 or not ga.screen_history:
        return []
    evidence = evidence if evidence is not None else seed_evidence(cfg, space)
    return [(space.make(e.genome), e.fitness(cfg.objective.metric)) for e in evidence.evaluations()
            if e.space == space.name and space.is_valid(e.genome)]


def carried_evaluations(cfg: Config, space: GeneSpace,
                        evidence: ReplayEvaluator | None = None) -> dict[str, Evaluation]:
    """search.carry_seeds: the seed_from evaluations a run may answer its seeds from (the GPU
    judge still decides, per evaluation, whether it is what it would measure now; see
    Evaluator.accepts_evidence). Empty without carry_seeds or with a replay evaluator (a replay
    answers every genome from its recording anyway)."""
    if not cfg.search.carry_seeds or not cfg.search.seed_from or cfg.evaluator.kind != "gpu":
        return {}
    evidence = evidence if evidence is not None else seed_evidence(cfg, space)
    return {e.key: e for e in evidence.evaluations() if e.space == space.name and space.is_valid(e.genome)}


def build_evaluator(cfg: Config, space: GeneSpace) -> Evaluator:
    ev = cfg.evaluator
    if ev.kind == "replay":
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
                        startup_timeout_s=ev.startup_timeout_s, compile_jobs=ev.compile_jobs or None)


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
            try:
                listed_seeds(cfg, load_space(family, version), [], room=1 << 30)
            except ConfigError as exc:
                problems.extend(exc.problems)
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
    if store_url:
        try:
            open_store(store_url).close()
        except StoreError as exc:
            problems.append(f"store.url: {exc}")
    if problems:
        raise ConfigError(problems, cfg.source)
