"""Variation and selection: typed mutation, crossover, tournament and elitism, on DEAP's toolbox.

Built on `deap.base` and `deap.tools` without `deap.creator` (no process-wide classes) and without
DEAP's random operators (they use the global `random` module): every random draw comes from one
seeded `random.Random` passed explicitly, so the same seed gives the same sequence. Every child
is repaired by its gene space into a valid genome. Imports only `genomes`, the record types of
`fitness`, deap and numpy.
"""

from operators.candidate import Candidate
from operators.crossover import CROSSOVERS, by_group, mix_groups, mix_uniform, uniform
from operators.individual import FAILED, FitnessMax, Individual, from_evaluation, individual
from operators.mutation import mutate
from operators.selection import best_unique, elite, tournament
from operators.toolbox import make_toolbox, vary

__all__ = [
    "CROSSOVERS", "Candidate", "FAILED", "FitnessMax", "Individual", "best_unique", "by_group",
    "elite", "from_evaluation", "individual", "make_toolbox",
    "mix_groups", "mix_uniform", "mutate", "tournament", "uniform", "vary",
]
