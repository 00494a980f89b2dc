"""A generational genetic algorithm: (mu + lambda) with elitism and optional islands.

Each island keeps `population` parents. Every generation each island produces `offspring`
children by crossover and mutation (operators.vary), and the next parents are the elites of
parents + children plus tournament winners from the same pool. Islands exchange their best
genomes in a ring every `migration_interval` generations, which keeps diversity without
slowing convergence much. Failed candidates stay in the pool with fitness -inf, so they are
never chosen while anything that ran is available.
"""

from __future__ import annotations

import random
from typing import Sequence

from fitness.records import Evaluation
from genomes import GeneSpace, Genome
from operators import Candidate, Individual, best_unique, individual, make_toolbox, tournament, vary
from evo.config import GASection
from evo.strategies.base import Strategy


class GeneticAlgorithm(Strategy):
    name = "ga"

    def __init__(self, space: GeneSpace, rng: random.Random, metric: str, cfg: GASection,
                 seeds: Sequence[Genome] = ()):
        super().__init__()
        self.space, self.rng, self.metric, self.cfg = space, rng, metric, cfg
        self.toolbox = make_toolbox(space, rng, crossover=cfg.crossover,
                                    mut_indpb=cfg.mutation_indpb or None, tournsize=cfg.tournament_size)
        self.seeds = list(seeds)
        self.islands: list[list[Individual]] = []
        self._pending_islands: list[int] = []   # island of each candidate of the last ask
        self._evaluated: set[str] = set()        # keys told so far: children should be new

    # -- ask ---------------------------------------------------------------------------------
    def ask(self) -> list[Candidate]:
        if self.cfg.generations and self.generation > self.cfg.generations:
            return []
        if not self.islands:
            return self._initial()
        out: list[Candidate] = []
        self._pending_islands = []
        for i, pop in enumerate(self.islands):
            runnable = [p for p in pop if not p.failed] or pop
            kids = vary(runnable, self.cfg.offspring, self.toolbox, self.rng,
                        self.cfg.crossover_prob, self.cfg.mutation_prob, exclude=self._evaluated)
            out.extend(kids)
            self._pending_islands.extend([i] * len(kids))
        return out

    def _initial(self) -> list[Candidate]:
        n = self.cfg.population * self.cfg.islands
        genomes: list[Genome] = []
        seen: set[str] = set()
        for g in self.seeds[:n]:
            if g.key not in seen:
                seen.add(g.key)
                genomes.append(g)
        misses = 0
        while len(genomes) < n and misses < 100 * n:
            g = self.space.sample(self.rng)
            if g.key in seen:
                misses += 1
                continue
            seen.add(g.key)
            genomes.append(g)
        self._pending_islands = [j % self.cfg.islands for j in range(len(genomes))]
        return [Candidate(g, (), "seed" if g in self.seeds else "init") for g in genomes]

    # -- tell --------------------------------------------------------------------------------
    def tell(self, candidates: Sequence[Candidate], evaluations: Sequence[Evaluation]) -> None:
        scored = [individual(c.genome, e.fitness(self.metric), c.parents, c.operator)
                  for c, e in zip(candidates, evaluations)]
        islands = self._pending_islands[: len(scored)]
        self._evaluated.update(c.key for c in candidates[: len(scored)])
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
