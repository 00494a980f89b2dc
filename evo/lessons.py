"""Lessons: what earlier evaluations teach a new run, and how a run uses them.

A run that knows the past should reach a good kernel sooner. The past comes in two forms:

- raw evidence, `search.seed_from`: an earlier run's recording whose best verified genomes start
  the population (seed_genomes, with their variants and listed seeds), whose evaluations train the
  GA's screening model (prior_evaluations), and whose verdicts may answer the seeds again without
  GPU time when the judge would measure the same (carried_evaluations);
- distilled lessons, `[search.lessons]`: records in the store per (family, space version, GPU
  architecture, shape class) holding elites with their per-case evidence, failure signatures and
  gene-effect estimates (evo.lesson_build makes them); `RunLessons` selects those that apply to a
  run (refusing, with a logged reason, any of another family, space version or architecture) and
  turns them into seeds, a filter that skips predicted failures, a prior for the screen and the
  lessons slot of the LLM prompt.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from fitness.records import Evaluation
from fitness.replay import ReplayEvaluator
from genomes import GeneSpace, Genome
from genomes.space import InvalidGenome
from evo.config import Config, ConfigError
from evo.evaluators import load_evidence


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
