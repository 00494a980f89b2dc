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
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fitness.objectives import geomean
from fitness.records import Evaluation, read_json
from fitness.replay import ReplayEvaluator
from genomes import GeneSpace, Genome
from genomes.space import InvalidGenome
from operators.failures import FailureModel, Signature
from evo.config import Config, ConfigError
from evo.evaluators import load_evidence
from evo.store import LessonRecord, open_store


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
    have = {e.key for e in ordered}
    suspects = [e for e in suspects_to_judge_again(evidence.evaluations(), space, metric, cfg.search.seed_suspects)
                if e.key not in have]
    if suspects:                     # after the champions, or after the best verified genome: never all of them
        n = len(champions) if cfg.search.seed_champions else min(1, len(ordered))
        ordered = ordered[:n] + suspects + ordered[n:]
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


def suspects_to_judge_again(evaluations, space: GeneSpace, metric: str, limit: int) -> list:
    """Up to `limit` suspect evaluations (verified; only their speed was beyond the ceiling measured
    then), best first by the metric they would have had: seeds judged again, never carried
    (carried_evaluations takes verified verdicts only)."""
    if limit <= 0:
        return []
    found = [e for e in evaluations if e.suspect and e.status.value == "OK" and e.space == space.name
             and isinstance(e.objectives.get(metric), (int, float))]
    found.sort(key=lambda e: (-float(e.objectives[metric]), e.key))
    return found[:limit]


def read_seeds_file(path: str | Path, where: str = "") -> list[dict]:
    """The genomes of a seeds file as written: {"genomes": [...]}, each a genome or an object whose
    "genome" is one (experiments/seeds/*.json, with their names, keys and predictions beside). A
    ValueError beginning with `where` (default: the path) says what is wrong with the file;
    FileNotFoundError where it is missing."""
    where = where or str(path)
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where} is not valid JSON: {exc}") from None
    items = data.get("genomes") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ValueError(f'{where} must hold an object with a "genomes" list')
    genomes = [item.get("genome", item) if isinstance(item, dict) else item for item in items]
    bad = [i for i, g in enumerate(genomes) if not isinstance(g, dict)]
    if bad:
        raise ValueError(f"{where}: entries {bad} are not genomes (objects of gene = value)")
    return genomes


def read_seed_genomes(cfg: Config) -> list[dict]:
    """The genomes of search.seed_genomes (read_seeds_file); a clear error naming the field for a bad file."""
    if not cfg.search.seed_genomes:
        return []
    path = cfg.resolve(cfg.search.seed_genomes)
    where = f"search.seed_genomes: {path}"
    try:
        return read_seeds_file(path, where)
    except FileNotFoundError:
        raise ConfigError([f"{where} does not exist (paths are relative to the config file)"], cfg.source) from None
    except ValueError as exc:
        raise ConfigError([str(exc)], cfg.source) from None


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
    Evaluator.accepts_evidence). A replay evaluator gets them too: it carries exactly what the recorded
    run carried, so that its asks come in the recorded order (carried seeds are recorded before the
    judged ones). Empty without carry_seeds."""
    if not cfg.search.carry_seeds or not cfg.search.seed_from:
        return {}
    evidence = evidence if evidence is not None else seed_evidence(cfg, space)
    return {e.key: e for e in evidence.evaluations() if e.space == space.name and space.is_valid(e.genome)}


# -- distilled lessons ([search.lessons]) ------------------------------------------------------

log = logging.getLogger("evo.lessons")

#: a gene "matters" to a lesson when its values' effects span at least this much (agreed_region)
AGREED_SPAN = 0.02


@dataclass(frozen=True)
class RunKey:
    """What a run's lessons must match: family, gene-space version and GPU architecture exactly;
    its shape classes say which lessons are its own and which would be a transfer."""

    family: str
    space_version: str
    arch: str
    classes: tuple[str, ...]


def read_lessons(source: str) -> list[LessonRecord]:
    """The newest lessons of a store URL, or those of an `evo lessons export` JSON file."""
    if "://" in source:
        store = open_store(source.partition("#")[0])
        try:
            return store.lessons(latest=True)
        except NotImplementedError:
            return []
        finally:
            store.close()
    path = Path(source)
    if not path.is_file():
        raise ValueError(f"lessons {source}: no such file (an `evo lessons export` JSON file or a store URL)")
    data = read_json(path)
    items = data.get("lessons") if isinstance(data, Mapping) else None
    if not isinstance(items, list):
        raise ValueError(f"lessons {source}: not an `evo lessons export` file (no 'lessons' list)")
    return [lesson_from_dict(d) for d in items]


def lesson_to_dict(lesson: LessonRecord) -> dict[str, Any]:
    return {"family": lesson.family, "space_version": lesson.space_version, "arch": lesson.arch,
            "shape_class": lesson.shape_class, "sources": list(lesson.sources), "created_at": lesson.created_at,
            "seq": lesson.seq, "payload": dict(lesson.payload)}


def lesson_from_dict(d: Mapping[str, Any]) -> LessonRecord:
    return LessonRecord(family=str(d["family"]), space_version=str(d.get("space_version", "")),
                        arch=str(d["arch"]), shape_class=str(d["shape_class"]), payload=dict(d.get("payload") or {}),
                        sources=tuple(d.get("sources") or ()), created_at=float(d.get("created_at", 0.0)),
                        seq=int(d.get("seq", -1)))


class RunLessons:
    """The lessons one run uses, and why it uses none of the others.

    A lesson of another family, gene-space version or GPU architecture is refused, with the reason
    logged and kept in `log` (the run's notes record it): evidence from another space or device is
    never used silently. A lesson of the same key but another shape class is used as a transfer
    when `transfer` is on (the run's own classes come first everywhere), ignored otherwise.
    """

    def __init__(self, used: Sequence[tuple[LessonRecord, str]], log_lines: Sequence[str], key: RunKey):
        self.used = list(used)          # (lesson, "own" | "transfer")
        self.log = list(log_lines)
        self.key = key
        self.failures = _merged_failures(lesson for lesson, _ in self.used)
        self.skipped: list[tuple[str, str]] = []      # (genome key, signature) the run did not judge

    @classmethod
    def select(cls, lessons: Sequence[LessonRecord], key: RunKey, *, transfer: bool = True) -> "RunLessons":
        used, lines = [], []
        for x in lessons:
            where = f"lesson {x.family}/{x.space_version or '-'}/{x.arch}/{x.shape_class} (seq {x.seq})"
            if x.family != key.family:
                why = f"refused: family {x.family!r}, this run's is {key.family!r}"
            elif x.space_version != key.space_version:
                why = (f"refused: gene space version {x.space_version or '(unnamed)'!r}, this run's is "
                       f"{key.space_version or '(unnamed)'!r}")
            elif x.arch != key.arch:
                why = f"refused: GPU architecture {x.arch!r}, this run targets {key.arch!r}"
            elif x.shape_class in key.classes:
                used.append((x, "own"))
                why = "used: one of this run's shape classes"
            elif transfer:
                used.append((x, "transfer"))
                why = f"used as a transfer: shape class {x.shape_class!r} is not among this run's {list(key.classes)}"
            else:
                why = f"ignored: shape class {x.shape_class!r} is not among this run's {list(key.classes)} " \
                      "(search.lessons.transfer = false)"
            line = f"{where}: {why}"
            (log.warning if why.startswith("refused") else log.info)("%s", line)
            lines.append(line)
        used.sort(key=lambda u: (u[1] != "own", u[0].shape_class))
        return cls(used, lines, key)

    def _own_first(self) -> list[LessonRecord]:
        own = [x for x, how in self.used if how == "own"]
        return own or [x for x, _ in self.used]

    def seeds(self, space: GeneSpace, limit: int, taken: Sequence[Genome] = ()) -> list[Genome]:
        """Up to `limit` elites valid in `space`: the run's own classes' first, then the transferred
        ones', the classes' ranks interleaved within each (every class's best before any class's
        second), skipping genomes already in `taken`."""
        seen = {g.key for g in taken}
        out: list[Genome] = []
        for kind in ("own", "transfer"):
            ranked = [x.payload.get("elites") or [] for x, how in self.used if how == kind]
            for rank in range(max((len(r) for r in ranked), default=0)):
                for elites in ranked:
                    if len(out) >= limit:
                        return out
                    if rank < len(elites) and space.is_valid(elites[rank]["genome"]):
                        g = space.make(elites[rank]["genome"])
                        if g.key not in seen:
                            seen.add(g.key)
                            out.append(g)
        return out

    def prior(self, space: GeneSpace) -> list[tuple[Genome, float | None]]:
        """(genome, fitness) of every recorded sample of the run's own-class lessons, for the GA's
        screen: a genome's fitness is the geomean of its class fitnesses (None when it failed or is
        missing in one). Transferred classes give none: their fitness is another objective, and
        on the synthetic slice a screen trained on it steered a warm run away from its own
        class's optimum (4 of 5 seeds never reached the cold run's best; without it they did)."""
        by_key: dict[str, tuple[dict, list[float | None]]] = {}
        chosen = [x for x, how in self.used if how == "own"]
        for x in chosen:
            for key, genome, fitness in x.payload.get("samples") or []:
                by_key.setdefault(key, (genome, []))[1].append(fitness)
        out = []
        for genome, fits in by_key.values():
            if not space.is_valid(genome):
                continue
            ok = len(fits) == len(chosen) and all(f is not None and f > 0 for f in fits)
            out.append((space.make(genome), geomean([float(f) for f in fits]) if ok else None))
        return out

    def agreed_region(self, space: GeneSpace, min_span: float = AGREED_SPAN,
                      among: Iterable[str] | None = None) -> dict[str, list[Any]]:
        """gene -> [value] for the genes on whose best value every used lesson agrees, where
        choosing the gene matters in each (its values' effects span at least `min_span`): what
        holds across shape classes (e.g. wide vectors, the .nc path) while the geometry differs.
        The first population's random genomes are drawn with these genes at that value
        (search.init_within, unless the config sets its own); mutation still explores them.
        `among`: only the lessons of these shape classes (those an online choice kept,
        evo.lesson_choice)."""
        best: list[dict[str, Any]] = []
        classes = None if among is None else set(among)
        for x, _ in self.used:
            if classes is not None and x.shape_class not in classes:
                continue
            eff: dict[str, tuple[float, Any]] = {}
            for e in x.payload.get("effects") or []:
                if e["gene"] not in eff or e["effect"] > eff[e["gene"]][0]:
                    eff[e["gene"]] = (e["effect"], e["value"])
            spans = x.payload.get("effect_spans") or {}
            best.append({g: v for g, (_, v) in eff.items() if spans.get(g, 0.0) >= min_span})
        if len(best) < 1:
            return {}
        agreed = {g: v for g, v in best[0].items() if all(b.get(g, object()) == v for b in best[1:])}
        region = {g: [v] for g, v in agreed.items() if g in space.names and space.gene(g).contains(v)}
        try:
            space.region(region)
        except Exception:  # noqa: BLE001 - a region the space rejects is no lesson for it
            return {}
        return region

    def predicted_failure(self, genome: Mapping[str, Any]) -> str | None:
        """The failure signature a genome matches ("" never: None when it matches none)."""
        sig = self.failures.predict(genome)
        return sig.describe() if sig is not None else None

    def prompt_text(self, top: int = 3, effects: int = 6) -> str:
        """The lessons slot of the LLM prompt: per lesson its best genomes, its failure signatures
        and its strongest gene effects, with how sure they are (cross-validated error)."""
        lines = []
        for x, how in self.used:
            p = x.payload
            cv = (p.get("cv") or {}).get(p.get("surrogate", ""), {})
            rmse = cv.get("rmse_log")
            sure = (f"surrogate {p.get('surrogate')} cross-validated error ~{100 * rmse:.0f}% "
                    f"(predicting the mean: ~{100 * (cv.get('baseline_rmse_log') or 0):.0f}%)") if rmse else "no model"
            lines.append(f"shape class {x.shape_class} ({how}; {p.get('evaluations', 0)} evaluations from "
                         f"{', '.join(x.sources) or '?'}; {sure}):")
            for e in (p.get("elites") or [])[:top]:
                lines.append(f"  elite {e['key']}: {e['fitness']:.4g}, genes {json.dumps(e['genome'], sort_keys=True)}")
            for s in (p.get("failures") or {}).get("signatures", [])[:top]:
                genes = " and ".join(f"{k} = {v!r}" for k, v in s["genes"].items())
                lines.append(f"  fails: {genes} ({s['category']} in {s['failed']} of {s['seen']})")
            for e in (p.get("effects") or [])[:effects]:
                lines.append(f"  effect: {e['gene']} = {e['value']!r} {100 * e['effect']:+.1f}% (seen {e['support']})")
        return "\n".join(lines)

    def notes(self) -> dict[str, Any]:
        return {"lessons": self.log, "lessons_skipped": len(self.skipped)}


def _merged_failures(lessons: Iterable[LessonRecord]) -> FailureModel:
    sigs: dict[tuple, Signature] = {}
    counts: dict[str, int] = {}
    for x in lessons:
        model = FailureModel.from_dict(x.payload.get("failures") or {})
        for s in model.signatures:
            sigs.setdefault((s.category, s.genes), s)
        for k, v in model.counts.items():
            counts[k] = counts.get(k, 0) + v
    ordered = sorted(sigs.values(), key=lambda s: (-s.failed, -s.rate, len(s.genes), s.category, repr(s.genes)))
    return FailureModel(tuple(ordered), counts)


def run_key(cfg: Config, classes: Sequence[str]) -> RunKey:
    from evo.lesson_build import latest_version

    family = cfg.experiment.family
    return RunKey(family, cfg.experiment.space_version or latest_version(family), cfg.target.arch, tuple(classes))


def run_classes(cfg: Config, evaluator: Any = None) -> tuple[str, ...]:
    """The shape classes of a run's benchmark: the family's benchmark matrix when kernels/ has the
    family, else the cases a replay recording holds (each its own class, as lessons file them)."""
    from evo.lesson_build import shape_classifier
    from fitness.family import FamilyNotFound, load_family

    classify = shape_classifier(cfg.experiment.family)
    try:
        cases = [(c.id, c.params) for c in load_family(cfg.experiment.family).benchmark_cases(cfg.benchmark.matrix)]
    except FamilyNotFound:
        cases = {}
        for ev in (evaluator.evaluations() if isinstance(evaluator, ReplayEvaluator) else ()):
            for c in ev.cases:
                if c.time_us:
                    cases.setdefault(c.case, c.params)
        cases = list(cases.items())
    return tuple(sorted({classify(cid, params) for cid, params in cases})) or ("all",)


def run_lessons(cfg: Config, evaluator: Any = None) -> RunLessons | None:
    """The lessons `[search.lessons] source` offers this run, selected (None without a source)."""
    section = cfg.search.lessons
    if not section.source:
        return None
    src = section.source if "://" in section.source else str(cfg.resolve(section.source))
    try:
        lessons = read_lessons(src)
    except ValueError as exc:
        raise ConfigError([f"search.lessons.source: {exc}"], cfg.source) from None
    return RunLessons.select(lessons, run_key(cfg, run_classes(cfg, evaluator)), transfer=section.transfer)


def with_lessons(cfg: Config, space: GeneSpace, lessons: RunLessons | None, seeds: Sequence[Genome],
                 prior: Sequence[tuple[Genome, float | None]]):
    """(seeds, prior, avoid, init region) of a run with its lessons applied as `[search.lessons]`
    says: the lessons' elites after the given seeds (within one population), their own-class
    samples after the prior (when the GA screens), the failure-signature filter (None: nothing
    skipped) and the genes they agree on for the first population (None: no region). A run that
    chooses among its transfer lessons online (evo.lesson_choice.for_run) gets neither seeds nor
    region here: the choice adds them once it has seen the first verdicts."""
    if lessons is None:
        return list(seeds), list(prior), None, None
    from evo.lesson_choice import for_run

    section = cfg.search.lessons
    online = not for_run(cfg, lessons)       # the online choice takes the lessons' seeds and region itself
    room = cfg.search.ga.population * cfg.search.ga.islands - len(seeds)
    if not online:
        seeds = list(seeds) + lessons.seeds(space, min(section.seeds, max(0, room)), taken=seeds)
    prior = list(prior)
    if section.screen and cfg.search.strategy == "ga" and cfg.search.ga.screen > 1:
        known = {g.key for g, _ in prior}
        prior += [(g, f) for g, f in lessons.prior(space) if g.key not in known]
    avoid = lessons.predicted_failure if section.skip and lessons.failures.signatures else None
    region = None
    if section.region and not cfg.search.init_within and cfg.search.strategy == "ga" and not online:
        region = lessons.agreed_region(space) or None
        line = f"first population drawn within the genes the lessons agree on: {region}"
        if region and line not in lessons.log:
            lessons.log.append(line)
    return seeds, prior, avoid, region
