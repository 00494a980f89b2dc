"""A DEAP toolbox made per run, and `vary`: children from selected parents.

Why the random operators are not DEAP's: `tools.cxUniform`, `tools.mutUniformInt`,
`tools.selTournament` and `algorithms.varOr` draw from Python's global `random` module, so two
runs in one process disturb each other and "same seed, same sequence" would depend on whatever
else touched `random`. The framework passes one seeded `random.Random` explicitly instead; the
toolbox binds that generator into every operator it registers. DEAP still provides the toolbox,
the fitness base class, `selBest`, `HallOfFame`, `Statistics` and `Logbook`; nothing here uses
`deap.creator`, whose classes are process-wide globals.
"""

from __future__ import annotations

import random
from typing import Collection, Sequence

from deap import base

from genomes import GeneSpace, Genome
from operators.candidate import Candidate
from operators.crossover import CROSSOVERS
from operators.individual import Individual
from operators.mutation import mutate as _mutate
from operators.selection import elite, tournament

#: attempts per child at something not already among the parents or earlier children
VARY_TRIES = 16


def _probability(name: str, p: object) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {p!r}")
    return float(p)


def make_toolbox(space: GeneSpace, rng: random.Random, *, crossover: str = "uniform",
                 cx_indpb: float = 0.5, mut_indpb: float | None = None,
                 tournsize: int = 3) -> base.Toolbox:
    """Register `sample()`, `mate(a, b)`, `mutate(g)`, `select(inds, k)` and `elite(inds, k)`.

    Every registered operator draws from `rng`; build a new toolbox (and generator) per run.
    The toolbox also carries `space`, `rng` and `crossover_kind` for `vary`.
    """
    if not isinstance(space, GeneSpace):
        raise TypeError(f"space must be a GeneSpace, got {type(space).__name__}")
    if not isinstance(rng, random.Random):
        raise TypeError(f"rng must be a random.Random, got {type(rng).__name__}")
    if crossover not in CROSSOVERS:
        raise ValueError(f"crossover must be one of {sorted(CROSSOVERS)}, got {crossover!r}")
    _probability("cx_indpb", cx_indpb)
    if mut_indpb is not None:
        _probability("mut_indpb", mut_indpb)
    if isinstance(tournsize, bool) or not isinstance(tournsize, int) or tournsize < 1:
        raise ValueError(f"tournsize must be a positive integer, got {tournsize!r}")

    tb = base.Toolbox()
    tb.register("sample", space.sample, rng)
    if crossover == "uniform":
        tb.register("mate", CROSSOVERS["uniform"], space=space, rng=rng, indpb=cx_indpb)
    else:
        tb.register("mate", CROSSOVERS[crossover], space=space, rng=rng)
    tb.register("mutate", _mutate, space=space, rng=rng, indpb=mut_indpb)
    tb.register("select", tournament, rng=rng, tournsize=tournsize)
    tb.register("elite", elite)
    tb.space = space
    tb.rng = rng
    tb.crossover_kind = crossover
    return tb


def vary(parents: Sequence[Individual], n_children: int, toolbox: base.Toolbox,
         rng: random.Random, cxpb: float, mutpb: float,
         exclude: Collection[str] = ()) -> list[Candidate]:
    """`n_children` new candidates from `parents` (DEAP's varOr idea, without reproduction).

    For each child: with probability `cxpb` two distinct parents (by genome key) are crossed with
    `toolbox.mate` and the first child kept, then mutated with probability `mutpb` (operator
    "crossover:<kind>+mutation"); otherwise one parent is mutated ("mutation"). A child equal to
    a parent or to an earlier child is mutated/redrawn, up to a bounded number of attempts, so
    every child is new whenever the space allows. Keys in `exclude` (genomes the run has already
    evaluated) count as taken too, so a converged population keeps proposing unmeasured genomes
    instead of repeats that cost nothing but teach nothing.
    """
    cxpb = _probability("cxpb", cxpb)
    mutpb = _probability("mutpb", mutpb)
    if isinstance(n_children, bool) or not isinstance(n_children, int) or n_children < 0:
        raise ValueError(f"n_children must be a non-negative integer, got {n_children!r}")
    if n_children and not parents:
        raise ValueError("parents must not be empty")
    for p in parents:
        if not isinstance(getattr(p, "genome", None), Genome):
            raise ValueError(f"parents must be Individuals with a genome, got {p!r}")
    kind = getattr(toolbox, "crossover_kind", "custom")

    distinct: dict[str, Individual] = {}
    for p in parents:
        distinct.setdefault(p.genome.key, p)
    unique = list(distinct.values())
    taken = set(distinct) | set(exclude)

    out: list[Candidate] = []
    for _ in range(n_children):
        cand = None
        for _ in range(VARY_TRIES):
            cand = _one_child(parents, unique, toolbox, rng, cxpb, mutpb, kind)
            if cand.genome.key not in taken:
                break
        taken.add(cand.genome.key)
        out.append(cand)
    return out


def _one_child(parents: Sequence[Individual], unique: list[Individual], toolbox: base.Toolbox,
               rng: random.Random, cxpb: float, mutpb: float, kind: str) -> Candidate:
    if len(unique) >= 2 and rng.random() < cxpb:
        a, b = rng.sample(unique, 2)
        child, _ = toolbox.mate(a.genome, b.genome)
        keys = (a.genome.key, b.genome.key)
        # a child identical to a parent is not new: mutate it as well
        if rng.random() < mutpb or child.key in keys:
            return Candidate(toolbox.mutate(child), keys, f"crossover:{kind}+mutation")
        return Candidate(child, keys, f"crossover:{kind}")
    p = parents[rng.randrange(len(parents))]
    return Candidate(toolbox.mutate(p.genome), (p.genome.key,), "mutation")
