"""A generational genetic algorithm: (mu + lambda) with elitism, case champions and optional islands.

Each island keeps `population` parents. Every generation each island produces `offspring`
children by crossover and mutation (operators.vary), and the next parents are the elites of
parents + children, the case champions of that pool, and tournament winners from the same pool.
Islands exchange their best genomes in a ring every `migration_interval` generations, which
keeps diversity without slowing convergence much. Failed candidates stay in the pool with
fitness -inf, so they are never chosen while anything that ran is available.

Why case champions: the product of a search is a dispatch table (evo/dispatch.py), the best
genome for each benchmark case (row width), not one genome. Selection on the scalar objective
(e.g. the geomean speedup over all cases) alone would drop a genome that is the fastest on the
very long rows but mediocre elsewhere, and with it the lineage that could improve that entry of
the table. So, besides the elites, the `case_champions` fastest verified genomes of every case
(status OK, not suspect, the case itself OK and timed) stay parents too. They take their slots
from the tournament part, so the population size does not change; if elites and champions do
not all fit, the elites stay, then the champions that beat the pool's runner-up on their case
by the widest margin (the most unique specialists) first. Everything is decided from the
evaluations told, in a fixed order, so the same evaluations give the same parents (resume).

Screening (`screen` > 1, operators/surrogate.py): each island draws `screen` times its offspring,
and the first population `screen` times its random genomes; a ridge model of log(fitness) from
the genes, refitted before every ask on everything told so far (plus `prior`, the evaluations
of the run the seeds came from), keeps the predicted best and a random `screen_explore` share.
A GPU evaluation costs seconds; a prediction costs microseconds.

Lessons (`avoid`, evo.lessons): children and random first genomes matching a failure signature of
the run's lessons are dropped and drawn again, so the GPU never judges what is known to fail.
"""

from __future__ import annotations

import logging
import math
import random
from typing import Any, Callable, Mapping, Sequence

from fitness.records import Evaluation
from genomes import GeneSpace, Genome
from operators import Candidate, Individual, best_unique, individual, make_toolbox, tournament, vary
from operators.surrogate import RidgeSurrogate, ScreenResult, screen
from evo.config import GASection
from evo.strategies.base import Strategy

log = logging.getLogger(__name__)

#: rounds of further children drawn when lessons' failure signatures dropped some
AVOID_REDRAWS = 4


class GeneticAlgorithm(Strategy):
    name = "ga"

    def __init__(self, space: GeneSpace, rng: random.Random, metric: str, cfg: GASection,
                 seeds: Sequence[Genome] = (), init_within: Mapping[str, Sequence[Any]] | None = None,
                 prior: Sequence[tuple[Genome, float | None]] = (),
                 avoid: Callable[[Genome], str | None] | None = None):
        super().__init__()
        # lessons' failure signatures (evo.lessons.RunLessons.predicted_failure): a drawn child or
        # random genome that matches one is dropped before any GPU time; seeds are never dropped
        self.avoid = avoid
        self.skipped: list[tuple[str, str]] = []     # (genome key, why), each genome once
        self._skipped_keys: set[str] = set()
        # the region the first population's random genomes come from (seeds aside); None: anywhere
        self.init_within = dict(init_within) if init_within else None
        self.space, self.rng, self.metric, self.cfg = space, rng, metric, cfg
        self.toolbox = make_toolbox(space, rng, crossover=cfg.crossover,
                                    mut_indpb=cfg.mutation_indpb or None, tournsize=cfg.tournament_size)
        self.seeds = list(seeds)
        self.islands: list[list[Individual]] = []
        self._pending_islands: list[int] = []   # island of each candidate of the last ask
        self._evaluated: set[str] = set()        # keys told so far: children should be new
        # genome key -> {case: time_us} of the verified evaluations told so far (case champions)
        self._case_times: dict[str, dict[str, float]] = {}
        # screening: genome key -> (genome, fitness) of everything measured (`prior`, the
        # evaluations of an earlier run, first; this run's verdicts replace them)
        self.surrogate = RidgeSurrogate(space, cfg.screen_ridge) if cfg.screen > 1 else None
        self._measured: dict[str, tuple[Genome, float | None]] = {g.key: (g, f) for g, f in prior}
        self.screen_log: list[ScreenResult] = []

    # -- ask ---------------------------------------------------------------------------------
    def ask(self) -> list[Candidate]:
        if self.cfg.generations and self.generation > self.cfg.generations:
            return []
        if not self.islands:
            return self._initial()
        out: list[Candidate] = []
        self._pending_islands = []
        self._fit_surrogate()
        for i, pop in enumerate(self.islands):
            runnable = [p for p in pop if not p.failed] or pop
            want = self.cfg.offspring * self.cfg.screen
            kids = self._avoided(vary(runnable, want, self.toolbox, self.rng, self.cfg.crossover_prob,
                                      self.cfg.mutation_prob, exclude=self._evaluated))
            for _ in range(AVOID_REDRAWS if self.avoid is not None else 0):
                if len(kids) >= want:
                    break
                taken = self._evaluated | {k.key for k in kids}
                kids += self._avoided(vary(runnable, want - len(kids), self.toolbox, self.rng, self.cfg.crossover_prob,
                                           self.cfg.mutation_prob, exclude=taken))
            kids = self._screen(kids, self.cfg.offspring)
            out.extend(kids)
            self._pending_islands.extend([i] * len(kids))
        return out

    def _avoided(self, cands: list[Candidate]) -> list[Candidate]:
        """`cands` without those a lesson predicts to fail (recorded in `skipped`)."""
        if self.avoid is None:
            return cands
        out = []
        for c in cands:
            why = self.avoid(c.genome)
            if why is None:
                out.append(c)
            elif c.key not in self._skipped_keys:
                self._skipped_keys.add(c.key)
                self.skipped.append((c.key, why))
        return out

    def _fit_surrogate(self) -> None:
        if self.surrogate is not None:
            measured = list(self._measured.values())
            self.surrogate.fit([g for g, _ in measured], [f for _, f in measured])

    def _screen(self, cands: list[Candidate], keep: int) -> list[Candidate]:
        if self.surrogate is None:
            return cands[:keep]
        res = screen(cands, keep, self.surrogate, self.rng, self.cfg.screen_explore)
        self.screen_log.append(res)
        if res.by_model:
            log.info("screened %d -> %d (model %d, random %d; predicted %.3g kept vs %.3g dropped, "
                     "model fitted on %d)", res.drawn, len(res.kept), res.by_model, res.at_random,
                     res.predicted_kept, res.predicted_dropped or float("nan"), self.surrogate.samples)
        return res.kept

    def _initial(self) -> list[Candidate]:
        n = self.cfg.population * self.cfg.islands
        genomes: list[Genome] = []
        seen: set[str] = set()
        for g in self.seeds[:n]:
            if g.key not in seen:
                seen.add(g.key)
                genomes.append(g)
        seeded = len(genomes)
        want = seeded + (n - seeded) * self.cfg.screen     # random genomes to draw (screen: more)
        misses = 0
        while len(genomes) < want and misses < 100 * want:
            g = self.space.sample(self.rng, within=self.init_within)
            if g.key in seen:
                misses += 1
                continue
            seen.add(g.key)
            why = self.avoid(g) if self.avoid is not None else None
            if why is not None:
                self._skipped_keys.add(g.key)
                self.skipped.append((g.key, why))
                misses += 1
                continue
            genomes.append(g)
        drawn = [Candidate(g, (), "init") for g in genomes[seeded:]]
        if drawn and self.surrogate is not None:
            self._fit_surrogate()
        out = [Candidate(g, (), "seed") for g in genomes[:seeded]] + self._screen(drawn, n - seeded)
        self._pending_islands = [j % self.cfg.islands for j in range(len(out))]
        return out

    # -- tell --------------------------------------------------------------------------------
    def tell(self, candidates: Sequence[Candidate], evaluations: Sequence[Evaluation]) -> None:
        scored = [individual(c.genome, e.fitness(self.metric), c.parents, c.operator)
                  for c, e in zip(candidates, evaluations)]
        islands = self._pending_islands[: len(scored)]
        self._evaluated.update(c.key for c in candidates[: len(scored)])
        for c, e in zip(candidates, evaluations):
            self._measured[c.key] = (c.genome, e.fitness(self.metric))
        if self.cfg.case_champions:
            for c, e in zip(candidates, evaluations):
                times = case_times(e, self.metric)
                if times:
                    self._case_times[c.key] = times
        if not self.islands:
            self.islands = [[] for _ in range(self.cfg.islands)]
            for ind, isl in zip(scored, islands):
                self.islands[isl].append(ind)
            self.islands = [self._survivors(pop) for pop in self.islands]
        else:
            for i in range(len(self.islands)):
                kids = [ind for ind, isl in zip(scored, islands) if isl == i]
                self.islands[i] = self._survivors(self.islands[i] + kids)
        self.generation += 1
        if self.cfg.islands > 1 and self.generation % self.cfg.migration_interval == 0:
            self._migrate()

    def _survivors(self, pool: list[Individual]) -> list[Individual]:
        mu = self.cfg.population
        if not pool:
            return pool
        keep = best_unique(pool, min(self.cfg.elites, mu))
        kept = {k.key for k in keep}
        if self.cfg.case_champions:
            for champ in case_champions(pool, self._case_times, self.cfg.case_champions):
                if len(keep) >= mu:
                    break
                if champ.key not in kept:
                    kept.add(champ.key)
                    keep.append(champ)
        rest = [p for p in pool if p.key not in kept]
        # prefer distinct genomes: a population of copies cannot explore
        distinct = list({p.key: p for p in rest}.values())
        if distinct and len(keep) < mu:
            keep += tournament(distinct, min(mu - len(keep), len(distinct)), self.rng, self.cfg.tournament_size)
        return keep

    def _migrate(self) -> None:
        bests = [best_unique(pop, self.cfg.migrants) for pop in self.islands]
        for i, pop in enumerate(self.islands):
            incoming = bests[i - 1]
            present = {p.key for p in pop}
            pop.sort(key=lambda p: p.fitness)   # worst first
            for m in incoming:
                if m.key in present:
                    continue
                pop[0] = Individual(m.genome, m.fitness, m.parents, "migration")
                pop.sort(key=lambda p: p.fitness)

    def best(self) -> Individual | None:
        everyone = [p for pop in self.islands for p in pop]
        top = best_unique(everyone, 1)
        return top[0] if top else None


# -- case champions ------------------------------------------------------------------------------

def case_times(evaluation: Evaluation, metric: str) -> dict[str, float]:
    """{case: time_us} of a verified evaluation; empty when it cannot compete.

    Verified: the evaluation is OK, not suspect and has a finite `metric` (so a champion is
    always a runnable parent); of its cases only those OK with a positive, finite time count.
    """
    if evaluation.fitness(metric) is None:
        return {}
    return {c.case: float(c.time_us) for c in evaluation.cases
            if c.status.ok and c.time_us is not None and math.isfinite(c.time_us) and c.time_us > 0}


def case_champions(pool: Sequence[Individual], times: Mapping[str, Mapping[str, float]],
                   k: int) -> list[Individual]:
    """The `k` fastest distinct genomes of `pool` on every case, most valuable first.

    Order: every case's fastest before any case's second fastest, and so on; within a rank,
    the genome that beats the next one on its case by the widest ratio first (one alone on a
    case: infinite margin), ties by case name. A genome that is champion of several cases
    appears once, at its best place. Genomes without times (failed, suspect, no cases) never
    appear. Deterministic: depends only on the pool's order and the times.
    """
    if k <= 0:
        return []
    distinct: dict[str, Individual] = {}
    for ind in pool:
        if ind.key in times and not ind.failed:
            distinct.setdefault(ind.key, ind)
    by_case: dict[str, list[tuple[float, int, Individual]]] = {}
    for order, (key, ind) in enumerate(distinct.items()):
        for case, t in times[key].items():
            by_case.setdefault(case, []).append((t, order, ind))
    ranked: list[tuple[int, float, str, int, Individual]] = []
    for case in sorted(by_case):
        entries = sorted(by_case[case], key=lambda x: (x[0], x[1]))
        for rank, (t, order, ind) in enumerate(entries[:k]):
            margin = entries[rank + 1][0] / t if rank + 1 < len(entries) else math.inf
            ranked.append((rank, -margin, case, order, ind))
    ranked.sort(key=lambda x: x[:4])
    out: list[Individual] = []
    seen: set[str] = set()
    for *_, ind in ranked:
        if ind.key not in seen:
            seen.add(ind.key)
            out.append(ind)
    return out
