"""DEAP's Statistics and HallOfFame set up for `Individual`s whose failures carry -inf."""

from __future__ import annotations

import math

import numpy as np
from deap import tools

from operators.individual import Individual


def _finite(values):
    return [v for v in values if math.isfinite(v)]


def _max(values):
    ok = _finite(values)
    return max(ok) if ok else None


def _mean(values):
    ok = _finite(values)
    return float(np.mean(ok)) if ok else None


def _median(values):
    ok = _finite(values)
    return float(np.median(ok)) if ok else None


def _failed(values):
    return sum(1 for v in values if not math.isfinite(v))


def make_statistics() -> tools.Statistics:
    """Per-generation max / mean / median of the candidates that ran, and the failed count."""
    stats = tools.Statistics(key=lambda ind: ind.fitness.values[0])
    stats.register("max", _max)
    stats.register("mean", _mean)
    stats.register("median", _median)
    stats.register("failed", _failed)
    stats.register("n", len)
    return stats


def same_genome(a: Individual, b: Individual) -> bool:
    return a.genome.key == b.genome.key


def hall_of_fame(maxsize: int) -> tools.HallOfFame:
    """DEAP's HallOfFame that never holds the same genome twice."""
    if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 1:
        raise ValueError(f"maxsize must be a positive integer, got {maxsize!r}")
    return tools.HallOfFame(maxsize, similar=same_genome)
