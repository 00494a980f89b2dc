"""The Optuna stage: freeze the structure of the best genomes, tune their numeric genes.

A GA is good at finding the right *kind* of kernel (which cache operators, staging, cluster
mode); a model-based sampler is better at the last few percent over unroll depths, register
caps and thread counts. This stage takes the `top_k` best distinct structures found so far
(structural genes = choices and flags), and for each runs an Optuna study over the numeric genes
(integer ranges and powers of two, the latter as an integer exponent so CMA-ES can use them).
Studies live in the run's own database (Optuna's RDBStorage on the same SQLAlchemy URL), so
`optuna-dashboard <store url>` shows them beside nothing else.

Determinism: the samplers are seeded from the run's generator, and a resumed run recreates the
studies and replays them from the store, so the stage asks the same trials again.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Sequence

import optuna

from fitness.records import Evaluation
from genomes import GeneSpace, Genome, IntRange, PowerOfTwo
from operators import Candidate
from evo.strategies.base import Strategy

optuna.logging.set_verbosity(optuna.logging.WARNING)


def numeric_genes(space: GeneSpace) -> list[str]:
    return [g.name for g in space.genes if isinstance(g, (IntRange, PowerOfTwo))]


def structural_genes(space: GeneSpace) -> list[str]:
    numeric = set(numeric_genes(space))
    return [n for n in space.names if n not in numeric]


def make_sampler(kind: str, seed: int) -> optuna.samplers.BaseSampler:
    if kind == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=5)
    if kind == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    if kind == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(f"unknown Optuna sampler {kind!r}")


@dataclass
class _Study:
    study: optuna.Study
    frozen: dict
    open_trials: list


class OptunaStage(Strategy):
    name = "optuna"

    def __init__(self, space: GeneSpace, rng: random.Random, metric: str, *, sampler: str = "tpe",
                 top_k: int = 2, batch: int = 4, storage: str | None = None, study_prefix: str = "evo"):
        super().__init__()
        self.space, self.rng, self.metric = space, rng, metric
        self.sampler_kind, self.top_k, self.batch = sampler, top_k, batch
        self.storage = storage            # SQLAlchemy URL, or None for in-memory
        self.study_prefix = study_prefix
        self.numeric = numeric_genes(space)
        self.studies: list[_Study] = []
        self._next = 0

    @property
    def operator(self) -> str:
        return f"optuna:{self.sampler_kind}"

    def start(self, history: Sequence[tuple[Candidate, Evaluation]]) -> None:
        if not self.numeric:
            return
        scored = sorted(((e.fitness(self.metric), c.genome) for c, e in history
                         if e.fitness(self.metric) is not None), key=lambda t: (-t[0], t[1].key))
        structures: list[Genome] = []
        seen: set[tuple] = set()
        for _, g in scored:
            sig = tuple(g[n] for n in structural_genes(self.space))
            if sig not in seen:
                seen.add(sig)
                structures.append(g)
            if len(structures) == self.top_k:
                break
        for i, elite in enumerate(structures):
            name = f"{self.study_prefix}:optuna:{i}"
            if self.storage:
                try:   # a resumed run replays the stage from the store, so start the study afresh
                    optuna.delete_study(study_name=name, storage=self.storage)
                except KeyError:
                    pass
            study = optuna.create_study(study_name=name, storage=self.storage, direction="maximize",
                                        sampler=make_sampler(self.sampler_kind, self.rng.randrange(2**31)))
            frozen = {n: elite[n] for n in structural_genes(self.space)}
            study.set_user_attr("frozen", frozen)
            study.set_user_attr("elite_key", elite.key)
            study.enqueue_trial(self._params_of(elite))
            self.studies.append(_Study(study, frozen, []))

    def _params_of(self, genome: Genome) -> dict:
        out = {}
        for n in self.numeric:
            gene = self.space.gene(n)
            out[n] = int(math.log2(genome[n])) if isinstance(gene, PowerOfTwo) else genome[n]
        return out

    def _suggest(self, trial: optuna.trial.Trial) -> dict:
        values = {}
        for n in self.numeric:
            gene = self.space.gene(n)
            if isinstance(gene, PowerOfTwo):
                e = trial.suggest_int(n, int(math.log2(gene.low)), int(math.log2(gene.high)))
                values[n] = 2 ** e
            else:
                values[n] = trial.suggest_int(n, gene.low, gene.high, step=gene.step)
        return values

    def ask(self) -> list[Candidate]:
        if not self.studies:
            return []
        out = []
        for _ in range(self.batch):
            st = self.studies[self._next % len(self.studies)]
            self._next += 1
            trial = st.study.ask()
            genome = self.space.repair({**st.frozen, **self._suggest(trial)}, self.rng)
            trial.set_user_attr("genome_key", genome.key)
            out.append(Candidate(genome, (st.study.user_attrs["elite_key"],), self.operator))
            st.open_trials.append((trial, genome))
        return out

    def tell(self, candidates: Sequence[Candidate], evaluations: Sequence[Evaluation]) -> None:
        told = {c.genome.key: e for c, e in zip(candidates, evaluations)}
        for st in self.studies:
            still_open = []
            for trial, genome in st.open_trials:
                ev = told.get(genome.key)
                if ev is None:
                    still_open.append((trial, genome))   # budget ran out before it was evaluated
                    continue
                trial.set_user_attr("status", ev.status.value)
                value = ev.fitness(self.metric)
                if value is None:
                    st.study.tell(trial, state=optuna.trial.TrialState.FAIL)
                else:
                    st.study.tell(trial, value)
            st.open_trials = still_open
        self.generation += 1

    def close(self) -> None:
        for st in self.studies:
            for trial, _ in st.open_trials:
                try:
                    st.study.tell(trial, state=optuna.trial.TrialState.FAIL)
                except Exception:   # already finished; nothing to release
                    pass
            st.open_trials = []
