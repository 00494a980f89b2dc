"""A cheap model of fitness from genes, used to screen offspring before the GPU judges them.

Why: on the H200 a full evaluation of one RMSNorm genome costs ~7 GPU-seconds (verification plus
50 flushed launches of 33 cases beside torch), so a 13-minute search judges ~100 genomes, and
most offspring of a generation are worse than their parents. Drawing several times more children
than the judge will see and keeping those a model predicts best spends nothing on the GPU.

The model is ridge regression of log(fitness) on an encoding of the genes (one-hot choices,
flags as 0/1, ranges scaled to [0, 1], powers of two on a log scale). Backtested on the recorded
H200 runs (experiments/scripts/surrogate_backtest.py, results/surrogate_backtest.md): trained on
everything measured before a generation, the half of that generation's offspring it ranks first
had a clearly higher mean fitness than the whole generation in every generation of session 4.
It is deliberately simple: a hundred-odd samples do not support more, it needs nothing beyond
numpy, and its ranking is deterministic (predictions are rounded before sorting, ties broken by
genome key) so a run that used it replays verdict for verdict.

Screening keeps an `explore` share of the kept children at random from the rest, so the model's
blind spots (genes it has never seen vary) are still sampled and it keeps learning; the labels
"<operator>@model" and "<operator>@explore" let a run's operator table compare the two.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from genomes import GeneSpace, Genome
from genomes.genes import Choice, Flag, IntRange, PowerOfTwo
from operators.candidate import Candidate

#: fewest finite samples the model is fitted on; below it screening keeps the first children
MIN_SAMPLES = 8
#: significant digits of a prediction used for ranking (float noise across BLAS builds stays below)
RANK_DIGITS = 9


class GeneEncoder:
    """Genome -> feature vector; every gene kind of genomes.genes has an encoding."""

    def __init__(self, space: GeneSpace):
        self.space = space
        self.columns: list[str] = []
        for gene in space.genes:
            if isinstance(gene, Choice):
                self.columns += [f"{gene.name}={o}" for o in gene.options]
            elif isinstance(gene, (Flag, IntRange, PowerOfTwo)):
                self.columns.append(gene.name)
            else:
                raise TypeError(f"gene {gene.name!r}: no encoding for {type(gene).__name__}")

    def encode(self, genome: Genome | dict[str, Any]) -> np.ndarray:
        out: list[float] = []
        for gene in self.space.genes:
            v = genome[gene.name]
            if isinstance(gene, Choice):
                out += [1.0 if v == o else 0.0 for o in gene.options]
            elif isinstance(gene, Flag):
                out.append(1.0 if v else 0.0)
            elif isinstance(gene, PowerOfTwo):
                lo, hi = math.log2(gene.low), math.log2(gene.high)
                out.append((math.log2(v) - lo) / (hi - lo) if hi > lo else 0.0)
            else:
                out.append((v - gene.low) / (gene.high - gene.low) if gene.high > gene.low else 0.0)
        return np.asarray(out, dtype=np.float64)

    def matrix(self, genomes: Sequence[Genome | dict[str, Any]]) -> np.ndarray:
        # a plain dict per genome first: Genome's item lookup walks its genes
        rows = [self.encode(g.as_dict() if isinstance(g, Genome) else g) for g in genomes]
        return np.vstack(rows) if rows else np.zeros((0, len(self.columns)))


class RidgeSurrogate:
    """log(fitness) ~ w . encode(genome) + b, fitted by ridge regression (the bias unpenalised)."""

    def __init__(self, space: GeneSpace, ridge: float = 1.0):
        if not ridge > 0:
            raise ValueError(f"ridge must be > 0, got {ridge!r}")
        self.encoder = GeneEncoder(space)
        self.ridge = float(ridge)
        self.weights: np.ndarray | None = None
        self.samples = 0

    @staticmethod
    def usable(fitness: float | None) -> bool:
        return fitness is not None and math.isfinite(fitness) and fitness > 0

    def fit(self, genomes: Sequence[Genome], fitnesses: Sequence[float | None]) -> bool:
        """Fit on the genomes with a positive, finite fitness; False (and no model) when fewer
        than MIN_SAMPLES remain. Failed candidates carry no fitness and are left out: the gene
        space's constraints, not the model, keep invalid genomes away."""
        pairs = [(g, f) for g, f in zip(genomes, fitnesses) if self.usable(f)]
        self.samples = len(pairs)
        if len(pairs) < MIN_SAMPLES:
            self.weights = None
            return False
        x = self.encoder.matrix([g for g, _ in pairs])
        x1 = np.hstack([x, np.ones((len(pairs), 1))])
        y = np.log(np.asarray([f for _, f in pairs], dtype=np.float64))
        penalty = self.ridge * np.eye(x1.shape[1])
        penalty[-1, -1] = 0.0
        self.weights = np.linalg.solve(x1.T @ x1 + penalty, x1.T @ y)
        return True

    @property
    def fitted(self) -> bool:
        return self.weights is not None

    def predict(self, genomes: Sequence[Genome]) -> np.ndarray:
        """Predicted fitness (not its log) per genome."""
        if self.weights is None:
            raise RuntimeError("the surrogate has not been fitted (too few samples?)")
        x = self.encoder.matrix(genomes)
        return np.exp(np.hstack([x, np.ones((len(genomes), 1))]) @ self.weights)


@dataclass(frozen=True)
class ScreenResult:
    kept: list[Candidate]
    drawn: int
    by_model: int          # kept because the model ranked them first
    at_random: int         # kept at random from the rest (exploration)
    predicted_kept: float | None      # mean predicted fitness of the kept, for the log
    predicted_dropped: float | None


def _rounded(v: float) -> float:
    return float(f"{v:.{RANK_DIGITS}g}")


def screen(candidates: Sequence[Candidate], keep: int, surrogate: RidgeSurrogate | None,
           rng: random.Random, explore: float = 0.25) -> ScreenResult:
    """`keep` of `candidates`: round(keep * (1 - explore)) predicted best, the rest drawn at random
    from the others; the kept keep their drawing order and their operator label gains "@model" or
    "@explore". Without a fitted model, the first `keep` unchanged (exactly what an unscreened
    generation would have judged)."""
    if not 0.0 <= explore <= 1.0:
        raise ValueError(f"explore must be in [0, 1], got {explore!r}")
    cands = list(candidates)
    if len(cands) <= keep or surrogate is None or not surrogate.fitted:
        return ScreenResult(cands[:keep], len(cands), 0, 0, None, None)
    pred = surrogate.predict([c.genome for c in cands])
    order = sorted(range(len(cands)), key=lambda i: (-_rounded(float(pred[i])), cands[i].genome.key))
    n_model = min(keep, max(0, round(keep * (1.0 - explore))))
    chosen = order[:n_model]
    rest = sorted(order[n_model:])
    chosen += rng.sample(rest, keep - n_model)
    chosen_set = set(chosen)
    by_model = set(chosen[:n_model])
    kept_pred = [float(pred[i]) for i in chosen]
    dropped = [float(pred[i]) for i in range(len(cands)) if i not in chosen_set]
    # the label says how the child was kept, so the run's operator table compares the two paths
    kept = [dataclasses.replace(cands[i], operator=f"{cands[i].operator}@{'model' if i in by_model else 'explore'}")
            for i in sorted(chosen)]
    return ScreenResult(kept, len(cands), n_model, keep - n_model,
                        sum(kept_pred) / len(kept_pred) if kept_pred else None,
                        sum(dropped) / len(dropped) if dropped else None)


__all__ = ["GeneEncoder", "RidgeSurrogate", "ScreenResult", "screen", "MIN_SAMPLES"]
