"""Gene effects and how far to trust them: a surrogate of fitness from genes, cross-validated.

Two surrogates fit log(fitness) on operators.surrogate's gene encoding:

- "ridge": operators.surrogate.RidgeSurrogate, the GA's screening model (numpy only);
- "trees": gradient-boosted trees (scikit-learn's HistGradientBoostingRegressor, the optional
  `lessons` extra), which can learn the interactions a row kernel has (rows per CTA x threads,
  staging x cluster) that a linear model averages away.

`cross_validate` says how sure a lesson is: k-fold error of log(fitness) on held-out genomes
(RMSE, i.e. roughly the relative error of a predicted speedup), the same for always predicting the
training mean (what "no model" scores), and the rank correlation of predictions with the truth
(what screening needs). `gene_effects` is a partial dependence: for every gene value, the mean
predicted change of log(fitness) when the recorded genomes take that value (where the space's
constraints allow it), so an effect averages over the genomes actually seen, interactions
included. All random choices (fold assignment, trees) come from the seed passed in.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from genomes import GeneSpace, Genome
from operators.surrogate import MIN_SAMPLES, GeneEncoder, RidgeSurrogate

KINDS = ("ridge", "trees")
#: recorded genomes a partial dependence averages over (a seeded sample of them when more)
EFFECT_SAMPLE = 256


class TreeSurrogate:
    """log(fitness) ~ gradient-boosted trees on the gene encoding (same interface as RidgeSurrogate)."""

    def __init__(self, space: GeneSpace, seed: int = 0, max_iter: int = 200):
        try:
            from sklearn.ensemble import HistGradientBoostingRegressor
        except ImportError:
            raise ImportError("the 'trees' surrogate needs scikit-learn: pip install 'ptx-kernel-factory[lessons]'") \
                from None
        self.encoder = GeneEncoder(space)
        self._model = HistGradientBoostingRegressor(max_iter=max_iter, learning_rate=0.1, max_leaf_nodes=15,
                                                    min_samples_leaf=3, l2_regularization=1.0,
                                                    random_state=seed)
        self.samples = 0
        self.fitted = False

    def fit(self, genomes: Sequence[Genome], fitnesses: Sequence[float | None]) -> bool:
        pairs = [(g, f) for g, f in zip(genomes, fitnesses) if RidgeSurrogate.usable(f)]
        self.samples = len(pairs)
        self.fitted = False
        if len(pairs) < MIN_SAMPLES:
            return False
        x = self.encoder.matrix([g for g, _ in pairs])
        y = np.log(np.asarray([f for _, f in pairs], dtype=np.float64))
        with _one_thread():
            self._model.fit(x, y)
        self.fitted = True
        return True

    def predict(self, genomes: Sequence[Genome]) -> np.ndarray:
        if not self.fitted:
            raise RuntimeError("the surrogate has not been fitted (too few samples?)")
        with _one_thread():
            return np.exp(self._model.predict(self.encoder.matrix(genomes)))


def _one_thread():
    """scikit-learn's OpenMP threads on a few thousand rows: on a busy 2-core machine a fit took
    36 s with them and 0.9 s in one thread; every fit here is small."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1)


def make_surrogate(kind: str, space: GeneSpace, seed: int = 0) -> Any:
    """A fresh surrogate of `kind` ("ridge" or "trees")."""
    if kind == "ridge":
        return RidgeSurrogate(space)
    if kind == "trees":
        return TreeSurrogate(space, seed=seed)
    raise ValueError(f"unknown surrogate {kind!r}; one of {list(KINDS)}")


@dataclass(frozen=True)
class CVError:
    kind: str
    samples: int
    folds: int
    rmse_log: float | None          # held-out RMSE of log(fitness): ~ relative error of a prediction
    baseline_rmse_log: float | None  # the same for predicting the training mean
    spearman: float | None           # rank correlation of held-out predictions with the truth

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values))
    # ties share their mean rank
    for v in np.unique(values):
        idx = values == v
        if idx.sum() > 1:
            ranks[idx] = ranks[idx].mean()
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 3:
        return None
    ra, rb = _ranks(a), _ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return None
    return float(np.corrcoef(ra, rb)[0, 1])


def cross_validate(kind: str, space: GeneSpace, genomes: Sequence[Genome], fitnesses: Sequence[float | None],
                   *, folds: int = 5, seed: int = 0) -> CVError:
    """k-fold error of a `kind` surrogate on the usable (positive, finite) fitnesses."""
    pairs = [(g, float(f)) for g, f in zip(genomes, fitnesses) if RidgeSurrogate.usable(f)]
    n = len(pairs)
    folds = min(folds, n)
    if n < MIN_SAMPLES + 2 or folds < 2:
        return CVError(kind, n, folds, None, None, None)
    order = list(range(n))
    random.Random(seed).shuffle(order)
    truth, pred, base = [], [], []
    for k in range(folds):
        held = set(order[k::folds])
        train = [pairs[i] for i in range(n) if i not in held]
        test = [pairs[i] for i in sorted(held)]
        model = make_surrogate(kind, space, seed=seed + k)
        if not model.fit([g for g, _ in train], [f for _, f in train]):
            continue
        mean = float(np.mean([math.log(f) for _, f in train]))
        p = np.log(model.predict([g for g, _ in test]))
        truth += [math.log(f) for _, f in test]
        pred += [float(v) for v in p]
        base += [mean] * len(test)
    if not truth:
        return CVError(kind, n, folds, None, None, None)
    t, p, b = np.asarray(truth), np.asarray(pred), np.asarray(base)
    return CVError(kind, n, folds, float(np.sqrt(np.mean((p - t) ** 2))), float(np.sqrt(np.mean((b - t) ** 2))),
                   spearman(p, t))


@dataclass(frozen=True)
class Effect:
    gene: str
    value: Any
    effect: float          # mean predicted change of fitness (a ratio - 1) when genomes take this value
    support: int           # recorded (usable) genomes that have this value
    compared: int          # genomes the partial dependence averaged over (valid with the value)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def gene_effects(model: Any, space: GeneSpace, genomes: Sequence[Genome], *, seed: int = 0,
                 sample: int = EFFECT_SAMPLE) -> list[Effect]:
    """Partial dependence of a fitted surrogate on every gene value, over (a seeded sample of) the
    recorded genomes; strongest effects first. Values no genome can take (constraints) are left out."""
    if not getattr(model, "fitted", False) or not genomes:
        return []
    ref = [g.as_dict() if isinstance(g, Genome) else dict(g) for g in genomes]
    support: dict[tuple[str, Any], int] = {}
    for g in ref:
        for name in space.names:
            support[(name, g[name])] = support.get((name, g[name]), 0) + 1
    if len(ref) > sample:
        ref = random.Random(seed).sample(ref, sample)
    # every (gene, value) variant of every reference genome the constraints allow, predicted at once
    variants: list[dict[str, Any]] = []
    spans: list[tuple[str, Any, list[int], int, int]] = []     # gene, value, reference indices, start, end
    for gene in space.genes:
        for value in gene.values():
            start, idx = len(variants), []
            for i, g in enumerate(ref):
                d = {**g, gene.name: value}
                if space.is_valid(d):
                    variants.append(d)
                    idx.append(i)
            if idx:
                spans.append((gene.name, value, idx, start, len(variants)))
    base = np.log(model.predict(ref))
    pred = np.log(model.predict(variants)) if variants else np.zeros(0)
    out = [Effect(name, value, math.expm1(float(np.mean(pred[a:b] - base[idx]))), support.get((name, value), 0),
                  len(idx)) for name, value, idx, a, b in spans]
    out.sort(key=lambda e: (-abs(e.effect), e.gene, str(e.value)))
    return out


def effects_by_gene(effects: Sequence[Effect]) -> Mapping[str, float]:
    """Per gene, the spread of its values' effects (max - min): how much choosing it matters."""
    spans: dict[str, list[float]] = {}
    for e in effects:
        spans.setdefault(e.gene, []).append(e.effect)
    return dict(sorted(((g, max(v) - min(v)) for g, v in spans.items()), key=lambda x: -x[1]))


__all__ = ["CVError", "Effect", "KINDS", "TreeSurrogate", "cross_validate", "effects_by_gene", "gene_effects",
           "make_surrogate", "spearman"]
