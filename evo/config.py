"""Experiment configs: TOML into validated, frozen dataclasses.

Every field is declared once, with its type, default, range and a one-line doc; the validator
walks those declarations, so a bad config gets one clear line per bad field ("search.ga.population:
expected an integer >= 2, got 1") and never a traceback. Semantic checks that need the outside
world (does the kernel family exist, can the database be reached, does the replay table exist)
are in `check_environment`, run by the CLI before anything is created on disk.
"""

from __future__ import annotations

import dataclasses
import difflib
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping


class ConfigError(ValueError):
    """One or more bad fields; `problems` holds one line per field."""

    def __init__(self, problems: list[str], source: str = ""):
        self.problems = problems
        self.source = source
        head = f"{source}: " if source else ""
        super().__init__(head + ("invalid config:\n  " if len(problems) > 1 else "") + "\n  ".join(problems))


def _f(default: Any = dataclasses.MISSING, *, doc: str = "", min: float | None = None,
       max: float | None = None, choices: tuple[Any, ...] | None = None, factory: Any = None) -> Any:
    meta = {"doc": doc, "min": min, "max": max, "choices": choices}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class ExperimentSection:
    name: str = _f(doc="run name; runs are stored under runs/<name>-<time>")
    family: str = _f(doc="kernel family: genomes/<family>.py and kernels/<family>/")
    space_version: str = _f("", doc="version of the family's gene space (genomes/<family>.py SPACES); "
                                    "empty: the latest. A recorded search replays under the version it ran with")
    seed: int = _f(0, min=0, doc="seeds every random choice of the run")
    description: str = _f("", doc="free text")


@dataclass(frozen=True)
class TargetSection:
    gpu: str = _f("H200", doc="the GPU the results are for (recorded; a GPU run stops at its start on another GPU)")
    arch: str = _f("sm_90a", choices=("sm_90a", "sm_90"), doc="nvcc target")


@dataclass(frozen=True)
class BenchmarkSection:
    matrix: str = _f("default", doc="benchmark matrix name understood by the family (its benchmark_cases())")
    check: bool = _f(True, doc="run the cheap verification stage before the full matrix")


@dataclass(frozen=True)
class ObjectiveSection:
    metric: str = _f("geomean_speedup", doc="objective to maximise (a key of Evaluation.objectives)")
    baseline: str = _f("torch", doc="baseline the speedups are measured against")


@dataclass(frozen=True)
class GASection:
    population: int = _f(24, min=2, doc="parents kept per island (mu)")
    offspring: int = _f(24, min=1, doc="children per island per generation (lambda)")
    elites: int = _f(2, min=0, doc="best genomes always kept")
    tournament_size: int = _f(3, min=1, doc="tournament size for parent selection")
    crossover: str = _f("uniform", choices=("uniform", "group"), doc="crossover operator")
    crossover_prob: float = _f(0.6, min=0.0, max=1.0, doc="chance a child comes from crossover")
    mutation_prob: float = _f(0.5, min=0.0, max=1.0, doc="chance a crossover child is also mutated")
    mutation_indpb: float = _f(0.0, min=0.0, max=1.0, doc="per-gene mutation chance (0: 1/len(genes))")
    islands: int = _f(1, min=1, max=64, doc="independent populations with ring migration")
    migration_interval: int = _f(5, min=1, doc="generations between migrations")
    migrants: int = _f(1, min=1, doc="genomes sent to the next island per migration")
    generations: int = _f(0, min=0, doc="stop after this many generations (0: only the budget stops it)")
    case_champions: int = _f(1, min=0, doc="also keep, per benchmark case, this many genomes fastest on that "
                                         "case (specialists for the dispatch table; 0: off)")
    screen: int = _f(1, min=1, max=16, doc="draw this many times `offspring` children (and random first "
                                          "genomes) and let a ridge model of fitness from genes, fitted on "
                                          "everything measured, keep the predicted best (1: off)")
    screen_explore: float = _f(0.25, min=0.0, max=1.0, doc="share of the kept children drawn at random from "
                                                          "the rest instead (the model's blind spots)")
    screen_ridge: float = _f(1.0, min=1e-6, doc="ridge penalty of the screening model")
    screen_history: bool = _f(True, doc="fit the screening model on search.seed_from's evaluations too")


@dataclass(frozen=True)
class RandomSection:
    batch: int = _f(32, min=1, doc="genomes drawn per round")


@dataclass(frozen=True)
class OptunaSection:
    enabled: bool = _f(False, doc="after the GA, tune the numeric genes of the best genomes")
    sampler: str = _f("tpe", choices=("tpe", "cmaes", "random"), doc="Optuna sampler")
    trials: int = _f(0, min=0, doc="evaluations reserved for this stage (taken from budget.evaluations)")
    top_k: int = _f(2, min=1, doc="how many distinct structures (frozen structural genes) to tune")
    batch: int = _f(4, min=1, doc="trials asked at once")


@dataclass(frozen=True)
class LessonsSection:
    """[search.lessons]: lessons of earlier runs (evo lessons build) that start this one."""

    source: str = _f("", doc="a store URL holding lessons, or an `evo lessons export` JSON file (path relative to "
                             "the config file); lessons of another family, space version or GPU architecture are "
                             "refused with a logged reason")
    seeds: int = _f(8, min=0, doc="elites of the lessons that start the first population (own shape classes first; "
                                  "0: none)")
    skip: bool = _f(True, doc="skip candidates that match a lesson's failure signature (never judged, no budget)")
    screen: bool = _f(True, doc="the lessons' recorded evaluations train the GA's screening model "
                                "(search.ga.screen > 1)")
    prompt: bool = _f(True, doc="quote the lessons in the LLM prompt's lessons slot")
    region: bool = _f(True, doc="draw the first population's random genomes with the genes every used lesson "
                                "agrees on at their best value (unless search.init_within is set)")
    transfer: bool = _f(True, doc="use lessons of the same family/version/architecture but other shape classes "
                                  "(after the run's own; logged as a transfer)")
    choice: str = _f("online", choices=("online", "all"),
                     doc="with no lesson of the run's own classes: 'online' judges the best `probe` genomes of every "
                         "transfer lesson first and follows the lessons whose order predicts those verdicts "
                         "(evo.lesson_choice); 'all': every transfer lesson, interleaved")
    probe: int = _f(2, min=1, max=16, doc="choice = 'online': genomes of each transfer lesson judged first, the "
                                          "evidence the choice is made on (they count against the budget)")
    order: str = _f("recorded", choices=("recorded", "model"),
                    doc="choice = 'online', once lessons are chosen: the rest of the first population comes from "
                        "the kept lessons' genomes best first by their recorded fitness ('recorded'), or by the "
                        "prediction of each lesson's own surrogate refitted on its samples ('model'; the probe "
                        "is always the recorded best); evo.lesson_choice")


@dataclass(frozen=True)
class GridSection:
    """[search.grid]: strategy = 'grid' judges every valid genome of a sub-space, in a fixed order."""

    fixed: dict = _f(factory=dict, doc="[search.grid.fixed] gene = value: genes held at one value")
    vary: dict = _f(factory=dict, doc="[search.grid.vary] gene = [values]: genes that take every listed value "
                                      "(every gene is fixed or varied)")
    batch: int = _f(16, min=1, doc="genomes asked per round")


@dataclass(frozen=True)
class SearchSection:
    strategy: str = _f("ga", choices=("ga", "random", "grid"), doc="main search strategy ('grid': every valid "
                                                                   "genome of [search.grid]'s sub-space)")
    seed_from: str = _f("", doc="earlier evidence (replay table, dump JSON or URL#RUN_ID) whose best "
                                "verified genomes start the GA; path relative to the config file")
    seed_champions: bool = _f(True, doc="seed_from: first the genome fastest on each benchmark case (the "
                                        "specialists a dispatch table is made of), then the best by the metric")
    seed_limit: int = _f(0, min=0, doc="at most this many seed_from genomes start the population (0: up to a "
                                       "whole population); the rest are drawn at random, from init_within if set")
    seed_suspects: int = _f(0, min=0, doc="seed_from: at most this many of its suspects (verified, but faster than "
                                          "the streaming ceiling the judge measured then) judged again, best first, "
                                          "right after the champions: the ceiling is a measurement that can come out "
                                          "low (session 28); a real cheat is flagged again and never carried")
    seeds_in_full: bool = _f(True, doc="seed genomes are judged on every case, never stopped early by "
                                       "evaluator.hopeless_below (earlier champions are often specialists)")
    carry_seeds: bool = _f(False, doc="a seed whose seed_from evaluation is what the GPU judge would measure now "
                                      "(same device, driver, toolkit, cases, baseline; verified) is answered from it "
                                      "instead of judged again; the record says where it came from")
    seed_variants: dict = _f(factory=dict, doc="[search.seed_variants] gene = [values]: each seed also starts the "
                                              "population with one of these genes changed to each listed value "
                                              "(where valid), judged in full beside its carried parent: how a gene "
                                              "added to the space reaches the genomes that already win")
    seed_variants_of: int = _f(0, min=0, doc="only the first this many seeds get variants (0: every seed)")
    seed_variants_within: dict = _f(factory=dict, doc="[search.seed_variants_within] gene = [values]: only seeds "
                                                     "inside this region get variants (e.g. staging = ['smem_async'] "
                                                     "where the new gene is expected to matter)")
    seed_variants_relax: dict = _f(factory=dict, doc="[search.seed_variants_relax] gene = [values]: a variant the "
                                                    "constraints reject is tried again with one of these genes set "
                                                    "to each listed value in turn (e.g. maxrreg = [0]: lift a register "
                                                    "cap the new gene does not fit); the first valid one is kept")
    seed_genomes: str = _f("", doc="a JSON file of genomes ({\"genomes\": [genome or {\"genome\": genome, ...}]}) "
                                   "that start the population after the seed_from seeds and their variants, judged "
                                   "in full: genomes chosen outside the run (e.g. by experiments/scripts/"
                                   "occupancy_variants.py); path relative to the config file")
    init_within: dict = _f(factory=dict, doc="[search.init_within] gene = [values]: the random genomes of the first "
                                            "population are drawn from this region (mutation then explores the "
                                            "whole space), e.g. staging = ['smem_async', 'smem_bulk']")
    ga: GASection = _f(factory=GASection)
    random: RandomSection = _f(factory=RandomSection)
    grid: GridSection = _f(factory=GridSection)
    lessons: LessonsSection = _f(factory=LessonsSection)
    optuna: OptunaSection = _f(factory=OptunaSection)


@dataclass(frozen=True)
class BudgetSection:
    evaluations: int = _f(500, min=1, doc="unique genomes evaluated, all stages together")
    wall_time_s: float = _f(0.0, min=0.0, doc="stop after this much wall time over all sessions (0: no limit)")
    stall_rounds: int = _f(50, min=1, doc="stop after this many rounds in a row that found nothing new")
    target: float = _f(float("inf"), doc="stop once the best value of the metric reaches this (inf: never)")


@dataclass(frozen=True)
class EvaluatorSection:
    kind: str = _f("gpu", choices=("gpu", "replay"), doc="'gpu' judges on the device, 'replay' answers from a recording")
    replay: str = _f("", doc="replay table (.csv/.json) or store URL#run_id; path relative to the config file")
    missing: str = _f("error", choices=("error", "invalid"), doc="replay: genome not in the table")
    latency_s: float = _f(0.0, min=0.0, doc="replay: simulated seconds per evaluation")
    workers: int = _f(0, min=0, doc="GPU workers (0: one per visible GPU)")
    timeout_s: float = _f(60.0, min=1.0, doc="hard limit per GPU job; a hung kernel is killed")
    cache_dir: str = _f(".cache/evo-compile", doc="compile cache (relative to the working directory)")
    hopeless_below: float = _f(0.0, min=0.0, doc="stop timing a candidate below this speedup on its first cases (0: off)")
    hopeless_cases: int = _f(2, min=1, doc="hopeless_below: how many of the largest cases are timed first (per group)")
    unsupported_speedup: float = _f(0.0, min=0.0, doc="0: a genome that cannot run a benchmark case is INVALID; "
                                    "> 0: such a case counts as this speedup (e.g. 0.01) and the genome "
                                    "competes on the cases it runs (specialists for a dispatch table)")
    hopeless_group: str = _f("", doc="hopeless_below: a case parameter (e.g. 'dtype') whose groups are probed "
                                     "separately; a candidate is cut only if hopeless in every group")
    reps: int = _f(50, min=5, doc="timed launches per case and implementation (median and spread recorded)")
    warmup: int = _f(5, min=1, doc="warm-up rounds before timing (fewer when a round is long)")
    baseline_reps: int = _f(0, min=0, doc="timed launches of each baseline per case and job, spread over the "
                                          "candidate's rounds (0: as many as reps); always on the job's own inputs")
    max_case_seconds: float = _f(10.0, min=0.01, doc="a single launch longer than this is a TIMEOUT")
    flush_l2: bool = _f(True, doc="flush the L2 before every timed launch")
    rotate_inputs: bool = _f(True, doc="rotate several input sets when a case fits in L2")
    bench_case_timeout_s: float = _f(0.0, min=0.0, doc="hard limit of a BENCH job per case (0: timeout_s); "
                                                       "never less than timeout_s")
    startup_timeout_s: float = _f(120.0, min=1.0, doc="how long a GPU worker may take to start")
    compile_jobs: int = _f(0, min=0, doc="parallel nvcc processes (0: one per CPU)")
    judge_ahead: bool = _f(True, doc="while a chunk is on the GPU, the next chunk's stage 0 (render, nvcc, static "
                                     "checks) runs in the background, and a grid hands its next ask over on an "
                                     "ask's last chunk; false: only the next chunk of the same ask is compiled "
                                     "ahead, its static checks in line (the judge before session 16)")
    pool: str = _f("local", choices=("local", "ray"), doc="where jobs run: 'local' (one worker process per GPU "
                                                          "of this host) or 'ray' (one actor per GPU of a Ray "
                                                          "cluster, compiles spread over its CPUs; with kind = "
                                                          "'replay', the recording answered by the actors)")
    ray_address: str = _f("", doc="pool = 'ray': the cluster to join, e.g. 'head-node:6379' (`ray start --head` "
                                  "there); empty: RAY_ADDRESS if set, else a Ray started on this host")
    gpus: int = _f(0, min=0, doc="pool = 'ray': GPUs (actors) this run judges on (0: every GPU of the cluster); "
                                 "the local pool's count is workers")
    ray_retries: int = _f(2, min=0, max=20, doc="pool = 'ray': times a job is run again when its actor or node "
                                               "died under it (never the candidate's fault); then RUNTIME_ERROR")


@dataclass(frozen=True)
class StoreSection:
    url: str = _f("", doc="SQLAlchemy URL; empty: a SQLite file in the run directory")


@dataclass(frozen=True)
class OutputSection:
    runs_dir: str = _f("runs", doc="where run directories are made (relative to the working directory)")
    progress: bool = _f(True, doc="show progress (a bar on a terminal, a line every 10 s otherwise)")
    report: bool = _f(True, doc="write report.md and its figures into the run directory when the run ends")


@dataclass(frozen=True)
class LLMSection:
    rate: float = _f(0.0, min=0.0, max=1.0, doc="share of the strategy's children replaced by an LLM proposal on "
                                                "the same parent (a source proposal is judged beside them)")
    base_url: str = _f("", doc="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1 (vLLM, SGLang, Ollama, "
                               "llama.cpp's server, a hosted API); empty with replay set: answers come from replay")
    model: str = _f("", doc="model name the endpoint serves")
    api_key_env: str = _f("OPENAI_API_KEY", doc="environment variable holding the API key (never the key itself; "
                                                 "the key reaches no store, log or prompt)")
    temperature: float = _f(0.2, min=0.0, max=2.0, doc="sampling temperature")
    max_tokens: int = _f(2048, min=16, doc="most tokens of one answer")
    timeout_s: float = _f(120.0, min=0.01, doc="seconds one request may take")
    retries: int = _f(3, min=0, max=20, doc="retries of a request after a 429, a 5xx, a timeout or a connection error")
    backoff_s: float = _f(2.0, min=0.0, doc="first wait before a retry (doubled each time) when no Retry-After is given")
    retry_after_max_s: float = _f(60.0, min=0.0, doc="longest wait a Retry-After header may ask for")
    concurrency: int = _f(1, min=1, max=64, doc="requests in flight at once")
    budget_tokens: int = _f(0, min=0, doc="stop asking after this many tokens (prompt + answer) in the run (0: no limit)")
    budget_usd: float = _f(0.0, min=0.0, doc="stop asking after this much money in the run (0: no limit)")
    price_per_1k_prompt: float = _f(0.0, min=0.0, doc="USD per 1000 prompt tokens (the cost recorded per exchange)")
    price_per_1k_completion: float = _f(0.0, min=0.0, doc="USD per 1000 answer tokens")
    prompt: str = _f("proposal_v1", doc="prompt template: a name in operators/prompts/ or a .md path")
    source_edits: bool = _f(True, doc="offer the family's editable regions (kernels/<family>/raw_launch.py) for "
                                      "rewriting; judged only by an evaluator that takes source (evaluate_raw)")
    kernel_rate: float = _f(0.0, min=0.0, max=1.0, doc="share of LLM requests that also offer writing a whole "
                                                       "kernel from scratch (the family's entry convention, the "
                                                       "launch language and the parent's whole source in the "
                                                       "prompt; kernels/<family>/raw_launch.py KERNEL; needs "
                                                       "evaluate_raw)")
    replay: str = _f("", doc="a transcript JSON (operators.llm.write_transcript / evo transcript) that answers "
                             "instead of an endpoint, prompt for prompt; path relative to the config file")
    graft: float = _f(0.0, min=0.0, max=1.0, doc="share of the strategy's children that, once a region rewrite has "
                                                 "beaten its parent, are also judged with that rewrite grafted onto "
                                                 "them (a source candidate beside the child; needs evaluate_raw)")


@dataclass(frozen=True)
class GuidedSection:
    rate: float = _f(0.0, min=0.0, max=1.0, doc="share of the strategy's children (mutation/crossover) replaced by "
                                                "a guided proposal on the same parent (operators/guided.py)")
    rules: str = _f("", doc="guided rules file (TOML); empty: operators/rules/<family>_v<N>.toml, the latest; "
                            "path relative to the config file")


@dataclass(frozen=True)
class OperatorsSection:
    """[operators.guided] and [operators.llm]: proposers mixed into the strategy's children by rate;
    the remaining 1 - guided.rate - llm.rate stay the strategy's own (search.ga's mutation and crossover)."""

    guided: GuidedSection = _f(factory=GuidedSection)
    llm: LLMSection = _f(factory=LLMSection)
    seed: int = _f(0, min=0, doc="added to experiment.seed for the proposers' own random choices")


@dataclass(frozen=True)
class Config:
    experiment: ExperimentSection
    target: TargetSection = _f(factory=TargetSection)
    benchmark: BenchmarkSection = _f(factory=BenchmarkSection)
    objective: ObjectiveSection = _f(factory=ObjectiveSection)
    search: SearchSection = _f(factory=SearchSection)
    budget: BudgetSection = _f(factory=BudgetSection)
    evaluator: EvaluatorSection = _f(factory=EvaluatorSection)
    store: StoreSection = _f(factory=StoreSection)
    output: OutputSection = _f(factory=OutputSection)
    operators: OperatorsSection = _f(factory=OperatorsSection)
    source: str = field(default="", compare=False, metadata={"internal": True})

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("source", None)
        return d

    def with_overrides(self, overrides: Mapping[str, Any]) -> "Config":
        """A copy with dotted-path overrides applied (CLI flags), validated like the file."""
        data = self.to_dict()
        for path, value in overrides.items():
            node = data
            *parents, leaf = path.split(".")
            for p in parents:
                node = node[p]
            node[leaf] = value
        return from_dict(data, source=self.source)

    def resolve(self, path: str) -> Path:
        """A path from the config, relative to the config file's folder."""
        p = Path(path).expanduser()
        if not p.is_absolute() and self.source:
            p = Path(self.source).resolve().parent / p
        return p


# -- validation ------------------------------------------------------------------------------

def _type_name(tp: Any) -> str:
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(tp, str(tp))


def _convert(value: Any, tp: Any, path: str, meta: Mapping[str, Any], problems: list[str]) -> Any:
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            problems.append(f"{path}: expected a table [{path}], got {type(value).__name__} {value!r}")
            return None
        return _build(tp, value, path, problems)
    if tp is dict:
        return _convert_table(value, path, problems)
    ok = (
        (tp is bool and isinstance(value, bool))
        or (tp is int and isinstance(value, int) and not isinstance(value, bool))
        or (tp is float and isinstance(value, (int, float)) and not isinstance(value, bool))
        or (tp is str and isinstance(value, str))
    )
    if not ok:
        problems.append(f"{path}: expected {_type_name(tp)}, got {type(value).__name__} {value!r}")
        return None
    if tp is float:
        value = float(value)
    lo, hi, choices = meta.get("min"), meta.get("max"), meta.get("choices")
    if choices is not None and value not in choices:
        close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        problems.append(f"{path}: {value!r} is not one of {list(choices)}{hint}")
    if lo is not None and value < lo:
        problems.append(f"{path}: must be >= {lo}, got {value!r}")
    if hi is not None and value > hi:
        problems.append(f"{path}: must be <= {hi}, got {value!r}")
    return value


def _convert_table(value: Any, path: str, problems: list[str]) -> Any:
    """A table of name -> list of scalars (a scalar stands for a one-item list); what the names
    and values mean is checked later, against the thing they name (check_environment)."""
    if not isinstance(value, Mapping):
        problems.append(f"{path}: expected a table [{path}] of name = [values], got {type(value).__name__} {value!r}")
        return None
    out: dict[str, list[Any]] = {}
    for name, vals in value.items():
        vals = list(vals) if isinstance(vals, (list, tuple)) else [vals]
        bad = [v for v in vals if isinstance(v, (dict, list, tuple))]
        if not vals or bad:
            problems.append(f"{path}.{name}: expected a non-empty list of values, got {value[name]!r}")
            continue
        out[str(name)] = vals
    return out


def _build(cls: type, data: Mapping[str, Any], prefix: str, problems: list[str]) -> Any:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    for key in data:
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known keys: {sorted(fields)}"
            problems.append(f"{prefix + '.' if prefix else ''}{key}: unknown key ({hint})")
    kwargs = {}
    for name, f in fields.items():
        path = f"{prefix}.{name}" if prefix else name
        tp = hints[name]
        if isinstance(tp, types.UnionType):
            tp = next(t for t in typing.get_args(tp) if t is not type(None))
        if name in data:
            kwargs[name] = _convert(data[name], tp, path, f.metadata, problems)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            if dataclasses.is_dataclass(tp):
                kwargs[name] = _build(tp, {}, path, problems)
            else:
                problems.append(f"{path}: required ({f.metadata.get('doc', '')}); add `{name} = ...` under [{prefix}]")
    if any(v is None for v in kwargs.values()):
        return None
    try:
        return cls(**kwargs)
    except TypeError:
        return None


def _cross_checks(cfg: Config) -> list[str]:
    problems = []
    ga = cfg.search.ga
    if ga.elites > ga.population:
        problems.append(f"search.ga.elites: {ga.elites} is more than search.ga.population ({ga.population})")
    if ga.tournament_size > ga.population:
        problems.append(f"search.ga.tournament_size: {ga.tournament_size} is more than the population ({ga.population})")
    if cfg.search.carry_seeds and not cfg.search.seed_from:
        problems.append("search.carry_seeds: there is nothing to carry without search.seed_from; set seed_from "
                        "or remove carry_seeds")
    for name in ("seed_variants_relax", "seed_variants_within"):
        if getattr(cfg.search, name) and not cfg.search.seed_variants:
            problems.append(f"search.{name}: it qualifies seed variants; set [search.seed_variants] or remove it")
    if cfg.search.seed_variants and not cfg.search.seed_from:
        problems.append("search.seed_variants: variants are made of seeds; set search.seed_from or remove "
                        "[search.seed_variants]")
    les = cfg.search.lessons
    if les.source and les.choice == "online" and les.probe > ga.population * ga.islands:
        problems.append(f"search.lessons.probe: {les.probe} is more than the first population "
                        f"({ga.population * ga.islands}); lower probe or set search.lessons.choice = 'all'")
    if cfg.search.init_within and cfg.search.strategy != "ga":
        problems.append(f"search.init_within: only search.strategy = 'ga' draws a first population from a region "
                        f"(strategy is {cfg.search.strategy!r}); remove [search.init_within]")
    if cfg.search.strategy == "grid" and not (cfg.search.grid.fixed or cfg.search.grid.vary):
        problems.append("search.grid: strategy 'grid' needs the sub-space: [search.grid.fixed] gene = value and "
                        "[search.grid.vary] gene = [values]")
    if cfg.search.strategy != "grid" and (cfg.search.grid.fixed or cfg.search.grid.vary):
        problems.append(f"search.grid: only search.strategy = 'grid' reads it (strategy is {cfg.search.strategy!r})")
    opt = cfg.search.optuna
    if opt.enabled and opt.trials == 0:
        problems.append("search.optuna.trials: the Optuna stage is enabled but has no trials; set trials > 0")
    if opt.enabled and opt.trials >= cfg.budget.evaluations:
        problems.append(f"search.optuna.trials: {opt.trials} leaves nothing of budget.evaluations "
                        f"({cfg.budget.evaluations}) for the main strategy")
    ev = cfg.evaluator
    if ev.pool == "local":
        for name, value in (("ray_address", ev.ray_address), ("gpus", ev.gpus)):
            if value:
                problems.append(f"evaluator.{name}: only pool = 'ray' uses it (pool is 'local', whose GPU count is "
                                f"evaluator.workers); set pool = 'ray' or remove {name}")
    elif ev.workers:
        problems.append("evaluator.workers: the Ray pool runs one actor per GPU; set evaluator.gpus instead")
    if cfg.evaluator.kind == "replay" and not cfg.evaluator.replay:
        problems.append("evaluator.replay: required when evaluator.kind = 'replay' (a .csv/.json table or URL#run_id)")
    ops = cfg.operators
    if ops.guided.rate + ops.llm.rate > 1.0:
        problems.append(f"operators: guided.rate + llm.rate = {ops.guided.rate + ops.llm.rate:g} is more than 1 "
                        "(they are shares of the strategy's children)")
    if ops.llm.rate > 0 and not ops.llm.replay and not (ops.llm.base_url and ops.llm.model):
        problems.append("operators.llm: rate > 0 needs base_url and model (a live endpoint) or replay (a transcript); "
                        "set them or set operators.llm.rate = 0")
    if ops.llm.rate > 0 and ops.llm.base_url and not ops.llm.base_url.startswith(("http://", "https://")):
        problems.append(f"operators.llm.base_url: {ops.llm.base_url!r} is not an http(s) URL "
                        "(e.g. http://localhost:8000/v1)")
    if not cfg.experiment.name.replace("-", "").replace("_", "").isalnum():
        problems.append(f"experiment.name: {cfg.experiment.name!r} may use only letters, digits, '-' and '_'")
    return problems


def from_dict(data: Mapping[str, Any], source: str = "") -> Config:
    problems: list[str] = []
    cfg = _build(Config, data, "", problems)
    if cfg is not None and not problems:
        problems.extend(_cross_checks(cfg))
    if problems or cfg is None:
        raise ConfigError(problems or ["config could not be built"], source)
    return dataclasses.replace(cfg, source=source)


def load_config(path: str | Path) -> Config:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(["config file does not exist"], str(path))
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"not valid TOML: {exc}"], str(path)) from None
    return from_dict(data, source=str(path))


def describe_fields(cls: type = Config, prefix: str = "") -> list[tuple[str, str, Any, str]]:
    """(path, type, default, doc) for every field: the reference table in the README."""
    out = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        path = f"{prefix}.{f.name}" if prefix else f.name
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            out.extend(describe_fields(tp, path))
        else:
            if f.default is not dataclasses.MISSING:
                default = f.default
            elif f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            else:
                default = "(required)"
            out.append((path, getattr(tp, "__name__", str(tp)), default, f.metadata.get("doc", "")))
    return out
