"""Run: the ask/tell loop between strategies, the evaluator and the store.

`optimize()` is only a loop over `ask()` / `evaluate()` / `tell()`, which researchers may also
call themselves from a notebook. Every evaluation is appended to the store the moment it
completes, so a crash loses at most the evaluations in flight.

Resuming is replay: a run is a deterministic function of its seed and of the verdicts it
receives, so `Run.resume` rebuilds the strategies with the same seed and runs them again from
the start; every genome already in the store is answered from the store (no GPU time, no second
record) and only the missing evaluations are computed. The resumed run therefore ends exactly
where an uninterrupted one would, with each evaluation recorded once.
"""

from __future__ import annotations

import dataclasses

import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from fitness.evaluator import Evaluator
from fitness.records import Evaluation
from fitness.replay import NotRecorded
from genomes import GeneSpace, Genome
from operators import Candidate
from evo.config import Config
from evo.store import DuplicateRecord, Record, RunInfo, Store, best_record
from evo.strategies.base import Strategy
from evo.strategies.ga import GeneticAlgorithm
from evo.strategies.grid import GridSearch
from evo.strategies.optuna_stage import OptunaStage
from evo.strategies.random_search import RandomSearch

if TYPE_CHECKING:
    from evo.lessons import RunLessons


class _RecordingEnded(Exception):
    """The replay evaluator has no verdict for the next genome."""


@dataclass
class Stage:
    strategy: Strategy
    budget: int                 # evaluations this stage may add
    used: int = 0


@dataclass
class RunSummary:
    run_id: str
    evaluations: int
    new_evaluations: int
    best: Record | None
    stop_reason: str
    by_status: dict[str, int] = field(default_factory=dict)
    #: the replay had no verdict for a genome the run asked (a recording that ends there; on a whole
    #: recorded slice, a strategy that left it)
    replay_ended: bool = False


def build_stages(cfg: Config, space: GeneSpace, rng: random.Random, *, storage_url: str | None,
                 run_id: str, seeds: Sequence[Genome] = (),
                 prior: Sequence[tuple[Genome, float | None]] = (),
                 avoid: Callable[[Genome], str | None] | None = None,
                 init_within: Mapping[str, Sequence] | None = None,
                 choosing: Callable[[Callable[[list[Genome], Any], Strategy]], Strategy] | None = None) -> list[Stage]:
    """The run's strategies in order, each with its share of the evaluation budget. `choosing`:
    the online lesson choice (evo.lesson_choice) that builds the GA itself once it has chosen,
    from a (seeds, region) -> GA factory."""
    metric = cfg.objective.metric
    opt = cfg.search.optuna
    main_budget = cfg.budget.evaluations - (opt.trials if opt.enabled else 0)
    if cfg.search.strategy == "ga":
        def make(first: Sequence[Genome], region: Mapping[str, Sequence] | None) -> Strategy:
            return GeneticAlgorithm(space, rng, metric, cfg.search.ga, seeds=first,
                                    init_within=region or init_within or cfg.search.init_within, prior=prior,
                                    avoid=avoid)

        main: Strategy = make(seeds, None) if choosing is None else choosing(make)
    elif cfg.search.strategy == "grid":
        grid = cfg.search.grid
        main = GridSearch(space, grid.fixed, grid.vary, batch=grid.batch)
    else:
        main = RandomSearch(space, rng, batch=cfg.search.random.batch)
    stages = [Stage(main, main_budget)]
    if opt.enabled:
        stages.append(Stage(OptunaStage(space, rng, metric, sampler=opt.sampler, top_k=opt.top_k,
                                        batch=opt.batch, storage=storage_url, study_prefix=run_id),
                            opt.trials))
    return stages


class Run:
    """One search: stages of strategies, an evaluator, a store and a budget."""

    def __init__(self, cfg: Config, space: GeneSpace, store: Store, evaluator: Evaluator, run_id: str,
                 *, optuna_storage: str | None = None, seeds: Sequence[Genome] = (),
                 prior: Sequence[tuple[Genome, float | None]] = (),
                 carried: Mapping[str, Evaluation] | None = None,
                 on_progress: Callable[["Run", Sequence[Record]], None] | None = None,
                 lessons: "RunLessons | None" = None):
        self.cfg, self.space, self.store, self.evaluator = cfg, space, store, evaluator
        self.run_id = run_id
        self.metric = cfg.objective.metric
        self.rng = random.Random(cfg.experiment.seed)
        # [search.lessons] (evo.lessons): elites after the seeds, recorded samples for the screen,
        # failure signatures that skip candidates, the LLM prompt's lessons slot
        from evo.lesson_choice import choosing
        from evo.lessons import with_lessons

        self.lessons = lessons
        seeds, prior, avoid, region = with_lessons(cfg, space, lessons, seeds, prior)
        self.stages = build_stages(cfg, space, self.rng, storage_url=optuna_storage, run_id=run_id, seeds=seeds,
                                   prior=prior, avoid=avoid, init_within=region,
                                   choosing=choosing(cfg, space, lessons, seeds))
        self.stage_index = 0
        self.on_progress = on_progress
        # what this run already knows: resumed runs start with their recorded evaluations
        self.recorded: dict[str, Record] = {r.key: r for r in store.records(run_id)}
        # keys answered in this session, in order: the budget counts these, so a resumed run
        # spends its budget exactly as the original did while it replays
        self.answered: dict[str, Evaluation] = {}
        self.best_value: float | None = None     # best metric among the answered
        self.history: list[tuple[Candidate, Evaluation]] = []
        self.new_evaluations = 0
        self.duplicates_dropped = 0      # verdicts another driver of the run had recorded first
        self.idle_rounds = 0
        self._session_start = time.time()
        self._elapsed_before = store.get_run(run_id).elapsed_s
        self._started_stage = -1
        self.stop_reason = ""
        self.replay_ended = False
        # search.carry_seeds: earlier verdicts the seeds may be answered from (evo.evaluators)
        self.carried: dict[str, Evaluation] = dict(carried or {})
        self.carry_log: list[tuple[str, str]] = []     # (genome key, "" carried | why judged again)
        # [operators]: guided and LLM proposals mixed into the strategy's children (evo.proposers)
        from evo.proposers import ProposalMixer

        self.mixer = ProposalMixer.build(cfg, space, store, run_id, evaluator)
        if self.mixer is not None and lessons is not None and cfg.search.lessons.prompt:
            self.mixer.known = lessons.prompt_text()
        self._strategy_slots: int | None = None       # how many of the last ask's candidates the strategy made
        self._chunk_s = 0.0                           # wall time of the last chunk judged

    # -- budget ------------------------------------------------------------------------------
    @property
    def evaluations(self) -> int:
        return len(self.answered)

    @property
    def elapsed_s(self) -> float:
        return self._elapsed_before + (time.time() - self._session_start)

    def _out_of_time(self) -> bool:
        limit = self.cfg.budget.wall_time_s
        return bool(limit) and self.elapsed_s >= limit

    def _remaining(self) -> int:
        """Evaluations the current stage may still add (cache hits are free)."""
        st = self.stages[self.stage_index]
        return min(st.budget - st.used, self.cfg.budget.evaluations - self.evaluations)

    # -- ask / tell --------------------------------------------------------------------------
    def ask(self) -> list[Candidate]:
        """The current stage's next candidates; advances to the next stage when one ends."""
        while self.stage_index < len(self.stages):
            st = self.stages[self.stage_index]
            if self._started_stage != self.stage_index:
                st.strategy.start(self.history)
                self._started_stage = self.stage_index
            if self._remaining() > 0:
                cands = st.strategy.ask()
                if cands:
                    self._strategy_slots = len(cands)
                    if self.mixer is not None:
                        cands, self._strategy_slots = self.mixer.mix(cands, self.answered)
                    return cands
            st.strategy.close()
            self.stage_index += 1
        return []

    def evaluate(self, candidates: Sequence[Candidate]) -> list[Evaluation]:
        """Evaluations for a prefix of `candidates`, within the budget.

        A genome already answered in this session is free. Any other genome costs one unit of
        budget; it is answered from the store if a previous session of this run recorded it,
        and otherwise by the evaluator, in the evaluator's batch size, each result appended to
        the store as soon as its batch returns. Stops early (shorter result) when the budget or
        the wall time is spent.
        """
        stage = self.stages[self.stage_index]
        fresh: list[Candidate] = []
        for c in candidates:
            if c.key not in self.answered and all(c.key != f.key for f in fresh):
                fresh.append(c)
        fresh = fresh[: 0 if self._out_of_time() else max(0, self._remaining())]
        todo = []
        for c in fresh:
            if c.key in self.recorded:
                self._answer(c, self.recorded[c.key].evaluation)
            else:
                todo.append(c)
        todo = self._carry(stage, todo)
        batch = max(1, getattr(self.evaluator, "batch_size", 1))
        for i in range(0, len(todo), batch):
            if self._out_of_time():
                break
            chunk = todo[i:i + batch]
            ahead = [c.genome for c in todo[i + batch:i + 2 * batch] if c.raw is None]
            if i + batch >= len(todo):
                ahead = self._lookahead(batch, len(todo) - i)    # the last chunk: the next ask's first
            if ahead:
                self.evaluator.prefetch(ahead)    # compiled (and statically checked) while this chunk runs
            t_chunk = time.time()
            try:
                evals = self._judge(chunk)
            except NotRecorded:
                # A replay cannot invent a verdict: the recording ends here (a recorded run that was
                # stopped by its wall-time budget ends exactly like this when replayed).
                raise _RecordingEnded(f"the replay table has no verdict for genome {chunk[0].key}: "
                                      "the recording ends here") from None
            self._chunk_s = time.time() - t_chunk
            new_records = [self._record(stage, c, ev) for c, ev in zip(chunk, evals)]
            # a run killed later must still count this session's time against its wall budget
            self.store.update_run(self.run_id, elapsed_s=self.elapsed_s)
            if self.on_progress:
                self.on_progress(self, new_records)
        self.idle_rounds = 0 if fresh else self.idle_rounds + 1
        if self.on_progress and not todo:
            self.on_progress(self, [])
        out = []
        for c in candidates:          # the longest prefix that has answers
            if c.key not in self.answered:
                break
            out.append(self.answered[c.key])
        return out

    def _lookahead(self, n: int, in_flight: int) -> list[Genome]:
        """Genomes the current strategy's next ask will bring (Strategy.upcoming), not yet
        answered or recorded: at most n, and no more than the budget judges after the chunk in
        flight, for the evaluator to compile while the last chunk of this ask is judged. None when the budget ends with the chunk in flight, or the wall time
        would run out before another chunk (a compile nobody judges only keeps the close waiting),
        or evaluator.judge_ahead is off."""
        left = self._remaining() - in_flight           # what the budget still judges after this chunk
        if not self.cfg.evaluator.judge_ahead or left <= 0:
            return []
        limit = self.cfg.budget.wall_time_s
        if limit and self.elapsed_s + 2 * self._chunk_s >= limit:
            return []
        strategy = self.stages[self.stage_index].strategy
        return [g for g in strategy.upcoming(4 * n)
                if g.key not in self.recorded and g.key not in self.answered][:min(n, left)]

    def _record(self, stage: Stage, c: Candidate, ev: Evaluation) -> Record:
        try:
            rec = self.store.append(Record(self.run_id, ev, generation=stage.strategy.generation,
                                           stage=stage.strategy.name, operator=c.operator, parents=c.parents))
        except DuplicateRecord:
            # another driver of this run (one resumed on another host while this one still ran)
            # recorded the genome first: its record stands and answers here too, so the
            # evaluation is recorded once and both drivers go on with the same verdict
            rec = self.store.get_record(self.run_id, c.key)
            assert rec is not None
            self.recorded[c.key] = rec
            self.duplicates_dropped += 1
            self._answer(c, rec.evaluation)
            return rec
        self.recorded[c.key] = rec
        self._answer(c, ev)
        self.new_evaluations += 1
        return rec

    def _carry(self, stage: Stage, todo: list[Candidate]) -> list[Candidate]:
        """search.carry_seeds: record the seeds whose earlier verdict the evaluator accepts as
        what it would measure now (same device, driver, toolkit, cases; verified); the others,
        and everything else, are left to judge."""
        left, carried = [], []
        for c in todo:
            ev = self.carried.get(c.key) if c.operator == "seed" else None
            why = self.evaluator.accepts_evidence(ev) if ev is not None else "not carried"
            if ev is not None:
                self.carry_log.append((c.key, why))
            if why:
                left.append(c)
            else:
                carried.append(self._record(stage, c, _carried(ev, self.cfg.search.seed_from, c.genome)))
        if carried:
            self.store.update_run(self.run_id, elapsed_s=self.elapsed_s)
            if self.on_progress:
                self.on_progress(self, carried)
        return left

    def _judge(self, chunk: Sequence[Candidate]) -> list[Evaluation]:
        """Evaluations in chunk order; seeds in full when search.seeds_in_full (session 3's
        hopeless cut stopped two of session 2's per-case champions on cases outside their
        specialty, so they never competed where they had won)."""
        full = [c for c in chunk if c.operator == "seed"] if self.cfg.search.seeds_in_full else []
        raws = [c for c in chunk if c.raw is not None]          # source proposals (evo.proposers)
        rest = [c for c in chunk if c not in full and c.raw is None]
        answers: dict[str, Evaluation] = {}
        if raws:
            answers.update(zip((c.key for c in raws), self.evaluator.evaluate_raw([c.raw for c in raws])))
        if full:
            answers.update(zip((c.key for c in full), self.evaluator.evaluate_in_full([c.genome for c in full])))
        if rest:
            answers.update(zip((c.key for c in rest), self.evaluator.evaluate([c.genome for c in rest])))
        return [answers[c.key] for c in chunk]

    def _answer(self, candidate: Candidate, evaluation: Evaluation) -> None:
        self.answered[candidate.key] = evaluation
        value = evaluation.fitness(self.metric)
        if value is not None and (self.best_value is None or value > self.best_value):
            self.best_value = value
        self.stages[self.stage_index].used += 1

    def tell(self, candidates: Sequence[Candidate], evaluations: Sequence[Evaluation]) -> None:
        st = self.stages[self.stage_index]
        # the strategy hears of its own slots only (a proposer may have taken some of them); source
        # proposals judged beside them are the run's, not the strategy's, and stay out of history
        n = len(evaluations) if self._strategy_slots is None else min(len(evaluations), self._strategy_slots)
        st.strategy.tell(candidates[:n], evaluations[:n])
        self.history.extend((c, e) for c, e in zip(candidates, evaluations) if c.raw is None)

    # -- the loop ----------------------------------------------------------------------------
    def optimize(self) -> RunSummary:
        self.store.update_run(self.run_id, state="running")
        state = "failed"
        try:
            while True:
                if self._out_of_time():
                    self.stop_reason = f"wall-time budget of {self.cfg.budget.wall_time_s:g} s reached"
                    break
                if self.evaluations >= self.cfg.budget.evaluations:
                    self.stop_reason = f"evaluation budget of {self.cfg.budget.evaluations} reached"
                    break
                cands = self.ask()
                if not cands:
                    self.stop_reason = "every stage finished"
                    break
                evals = self.evaluate(cands)
                self.tell(cands, evals)
                if len(evals) < len(cands) and self._remaining() <= 0 and self.stage_index == len(self.stages) - 1:
                    self.stop_reason = f"evaluation budget of {self.cfg.budget.evaluations} reached"
                    break
                if self.best_value is not None and self.best_value >= self.cfg.budget.target:
                    self.stop_reason = f"target {self.metric} >= {self.cfg.budget.target:g} reached"
                    break
                if self.idle_rounds >= self.cfg.budget.stall_rounds:
                    self.stop_reason = f"{self.idle_rounds} rounds in a row found nothing new"
                    break
            state = "finished"
        except _RecordingEnded as end:
            state = "finished"
            self.stop_reason = str(end)
            self.replay_ended = True
        except KeyboardInterrupt:
            state = "interrupted"
            self.stop_reason = "interrupted"
            raise
        except Exception as exc:
            # `evo status` says why the run stopped (the machine lost a baseline, a pool broke);
            # every evaluation recorded before stays, and `evo resume` goes on from there
            self.stop_reason = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            for st in self.stages[self.stage_index:]:
                st.strategy.close()
            notes = {"stop_reason": self.stop_reason}
            if self.lessons is not None:
                skipped = getattr(self.stages[0].strategy, "skipped", [])
                chose = getattr(self.stages[0].strategy, "choice_log", [])      # evo.lesson_choice's lines
                notes.update(lessons=self.lessons.log + list(chose), lessons_skipped=len(skipped))
            self.store.update_run(self.run_id, state=state, elapsed_s=self.elapsed_s, notes=notes)
        return self.summary()

    def best(self) -> Record | None:
        """The best record of the whole run (all sessions)."""
        return best_record(self.recorded.values(), self.metric)

    def summary(self) -> RunSummary:
        counts: dict[str, int] = {}
        for r in self.recorded.values():
            counts[r.status.value] = counts.get(r.status.value, 0) + 1
        return RunSummary(self.run_id, self.evaluations, self.new_evaluations, self.best(),
                          self.stop_reason, counts, replay_ended=self.replay_ended)


def new_run_info(cfg: Config, run_id: str) -> RunInfo:
    return RunInfo(run_id=run_id, name=cfg.experiment.name, family=cfg.experiment.family,
                   seed=cfg.experiment.seed, config=cfg.to_dict())



def _carried(evaluation: Evaluation, source: str, genome: Genome) -> Evaluation:
    """An earlier verdict answering a seed (search.carry_seeds): the same evidence, marked with
    where it came from; it cost this run no GPU time. The genome is written as this run's space
    spells it (genes added since at their legacy values; same key, same rendered source)."""
    arts = dict(evaluation.artifacts)
    arts["carried_from"] = source
    if "gpu_seconds" in arts:
        arts["carried_gpu_seconds"] = arts["gpu_seconds"]
    arts["gpu_seconds"] = 0.0
    return dataclasses.replace(evaluation, artifacts=arts, genome=dict(genome),
                               message=f"{evaluation.message} (carried from {source})".strip())
