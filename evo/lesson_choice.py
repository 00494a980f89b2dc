"""Which transfer lessons a run follows, chosen online from the run's own first verdicts.

A run with no lesson of its own shape class takes every other class's lesson as a transfer
(evo.lessons). They disagree: on the dtype held out (results/warm_start_dtype.md) the lesson of
the same regime orders the held-out class almost exactly (Spearman +0.94 to +0.99) while the
others' orders are noise (about 0), and a run that interleaves all of them, or draws its first
population within the genes all of them agree on, wastes most of what the right one knows. Which
one is right cannot be read off the shape-class names: "the nearest classes" was tried as a fixed
rule and made the mid rows of the dtype held out worse (results/archive/NOTES.md, session 19).

So the run asks. `search.lessons.choice = "online"`:

1. the first batch (the probe) is the best `probe` genomes of every transfer lesson's own order,
   restricted to the run's space (a lesson's recorded samples valid there, best first: its elites
   alone may all fall outside a narrower space), interleaved, judged like any candidate (they
   count against the budget);
2. every lesson predicts every judged genome (its recorded fitness, or a ridge model of its
   samples for a genome it did not record; a failure ranks last on both sides), and is scored by
   the Spearman correlation of its predictions with the verdicts, as a Fisher z in standard errors,
   z = atanh(rho) * sqrt((n - 3) / 1.06);
3. the lessons get softmax weights exp(z) / sum exp(z): the lessons are scored on the same
   verdicts at once (each predicts every probe genome), so a bandit, which learns an arm by pulling
   it, would spend evaluations to learn what one shared batch already shows; and with z normal
   with unit variance around each lesson's true agreement, exp(z) is the likelihood ratio of the
   lesson's order against an order that knows nothing, which is what a weight should be;
4. a lesson whose weight is below `KEEP_SHARE` of the best one's is dropped for the run: the rest
   of the first population comes from the kept lessons' orders in proportion to their weights
   (their next genomes are better bets than random draws once their order has been seen to
   predict this class: on the dtype held out's short rows the chosen lesson's 12th genome is the
   first within 99 %, past the `seeds` elites a run takes otherwise), random genomes left to draw
   come from within the genes the kept lessons agree on, and the kept lessons are what the notes
   name, with their scores.
   With `search.lessons.order = "model"` the kept lessons' genomes after the probe come in the
   order of each lesson's own surrogate (refitted on its samples) rather than its recorded one:
   on the dtype held out's short rows that moves the first genome within 99 % from the chosen
   lesson's 12th to its 6th, but over the fifteen (held-out class, lesson) pairs of the two
   recorded slices the model's order reaches the target sooner in 4, later in 9 and with the
   recorded one in 2 (evo.race.order_limits, results/warm_start*.md): not the default.

No choice is made (every lesson kept, as with choice = "all") when the evidence is too thin (fewer
than `MIN_VERDICTS` verdicts, or all of them equal) or when no lesson predicts the verdicts better
than `MIN_RHO`: then the lessons are no worse than before the probe, only a few evaluations later.
Everything is decided from the verdicts the run was told, in a fixed order: the same verdicts give
the same choice (resume), and no verdict the run did not pay for is ever read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from fitness.records import Evaluation
from genomes import GeneSpace, Genome
from operators.candidate import Candidate
from operators.effects import spearman
from operators.surrogate import RidgeSurrogate
from evo.store import LessonRecord
from evo.strategies.base import Strategy

if TYPE_CHECKING:
    from evo.config import Config
    from evo.lessons import RunLessons

#: search.lessons.choice values: "online" (this module) or "all" (every lesson, interleaved)
CHOICES = ("online", "all")
#: how the notes' line of a choice starts (evo.race collects them per seed)
CHOICE_LINE = "online lesson choice"
#: fewest judged genomes a choice is made on (below: every lesson kept)
MIN_VERDICTS = 5
#: no lesson is chosen unless the best predicts the verdicts at least this well (Spearman)
MIN_RHO = 0.3
#: a lesson is kept while its weight is at least this share of the best lesson's
KEEP_SHARE = 0.25


def lesson_order(lesson: LessonRecord, space: GeneSpace) -> list[Genome]:
    """The lesson's verified genomes valid in `space`, best first (ties by key): its recorded
    samples, or its elites when it recorded none."""
    p = lesson.payload
    rows = [(k, g, f) for k, g, f in (p.get("samples") or [])]
    if not rows:
        rows = [(e["key"], e["genome"], e["fitness"]) for e in p.get("elites") or []]
    ranked = sorted(((k, g, f) for k, g, f in rows if f is not None and f > 0 and space.is_valid(g)),
                    key=lambda r: (-r[2], r[0]))
    return [space.make(g) for _, g, _ in ranked]


def model_order(lesson: LessonRecord, space: GeneSpace, genomes: Sequence[Genome]) -> list[Genome]:
    """`genomes` best first by the lesson's own surrogate (the cross-validated kind its payload
    names, ridge when it names none or scikit-learn is missing), refitted on its samples valid in
    `space`, ties by key; `genomes` unchanged when no model fits. What `order = "model"` follows:
    a genome's prediction pools its neighbours' recorded fitness, where its recorded value is its
    own alone (measured on the dtype held out: results/warm_start_dtype_model.md)."""
    from operators.effects import make_surrogate

    rows = [(space.make(g), f) for _, g, f in lesson.payload.get("samples") or [] if space.is_valid(g)]
    kind = lesson.payload.get("surrogate") or "ridge"
    try:
        model = make_surrogate(kind, space, seed=0)
    except ImportError:
        model = RidgeSurrogate(space)
    if not genomes or not model.fit([g for g, _ in rows], [f for _, f in rows]):
        return list(genomes)
    pred = model.predict(list(genomes))
    return [genomes[i] for i in sorted(range(len(genomes)), key=lambda i: (-round(float(pred[i]), 9), genomes[i].key))]


def predictions(lesson: LessonRecord, space: GeneSpace, genomes: Sequence[Genome]) -> list[float] | None:
    """log fitness the lesson predicts per genome (-inf: it failed there); None when the lesson
    can predict none it did not record (no samples to fit a model on)."""
    recorded = {k: f for k, _, f in lesson.payload.get("samples") or []}
    out: list[float | None] = [(math.log(recorded[g.key]) if recorded[g.key] else -math.inf)
                               if g.key in recorded else None for g in genomes]
    missing = [i for i, v in enumerate(out) if v is None]
    if missing:
        rows = [(g, f) for _, g, f in lesson.payload.get("samples") or [] if space.is_valid(g)]
        model = RidgeSurrogate(space)
        if not model.fit([space.make(g) for g, _ in rows], [f for _, f in rows]):
            return None
        for i, v in zip(missing, model.predict([genomes[i] for i in missing])):
            out[i] = math.log(float(v))
    return [float(v) for v in out]


@dataclass(frozen=True)
class LessonScore:
    """How well one lesson predicted the run's first verdicts."""

    shape_class: str
    rho: float | None        # Spearman of its predictions with the verdicts (None: no model, or constant)
    z: float                 # Fisher z in standard errors (0 without rho)
    weight: float
    kept: bool

    def describe(self) -> str:
        rho = "-" if self.rho is None else f"{self.rho:+.2f}"
        return f"{self.shape_class} (Spearman {rho}, weight {self.weight:.2f})"


@dataclass(frozen=True)
class Choice:
    scores: tuple[LessonScore, ...]
    verdicts: int
    chosen: bool             # False: every lesson kept (evidence too thin, or none predicts)
    why: str

    @property
    def kept(self) -> list[str]:
        return [s.shape_class for s in self.scores if s.kept]

    def describe(self) -> str:
        head = f"{CHOICE_LINE} on the first {self.verdicts} verdicts: "
        if self.chosen:
            kept = ", ".join(s.describe() for s in self.scores if s.kept)
            dropped = ", ".join(s.describe() for s in self.scores if not s.kept) or "none"
            return head + f"chose {kept}; dropped {dropped}"
        return head + f"every lesson kept ({self.why}): " + ", ".join(s.describe() for s in self.scores)


def choose(lessons: Sequence[LessonRecord], space: GeneSpace, judged: Sequence[tuple[Genome, float | None]], *,
           min_verdicts: int = MIN_VERDICTS, min_rho: float = MIN_RHO, keep_share: float = KEEP_SHARE) -> Choice:
    """Score each lesson on the judged (genome, fitness or None) pairs and keep those that predict
    them (module docstring). Only `judged` is read."""
    genomes = [g for g, _ in judged]
    seen = [math.log(f) if f is not None and f > 0 else -math.inf for _, f in judged]
    n = len(judged)
    rhos: list[float | None] = []
    for x in lessons:
        pred = predictions(x, space, genomes) if n >= 3 else None
        rhos.append(spearman(pred, seen) if pred is not None else None)
    scale = math.sqrt(max(n - 3, 0) / 1.06)
    zs = [math.atanh(max(-0.999, min(0.999, r))) * scale if r is not None else 0.0 for r in rhos]
    top = max(zs, default=0.0)
    exps = [math.exp(z - top) for z in zs]
    weights = [e / sum(exps) for e in exps] if exps else []
    distinct = len(set(seen)) > 1
    best = max((r for r in rhos if r is not None), default=None)
    if n < min_verdicts or not distinct:
        why = f"too thin: {n} verdicts{'' if distinct else ', all equal'}, a choice needs {min_verdicts} that differ"
    elif best is None or best < min_rho:
        why = f"no lesson predicts them (best Spearman {'-' if best is None else f'{best:+.2f}'} < {min_rho:+.2f})"
    else:
        why = ""
    chosen = not why
    wmax = max(weights, default=0.0)
    scores = tuple(LessonScore(x.shape_class, r, z, w, (not chosen) or w >= keep_share * wmax)
                   for x, r, z, w in zip(lessons, rhos, zs, weights))
    return Choice(scores, n, chosen, why)


def allot(orders: Sequence[Sequence[Genome]], weights: Sequence[float], limit: int,
          taken: Sequence[Genome] = ()) -> list[Genome]:
    """Up to `limit` genomes from the orders, each order's share in proportion to its weight
    (D'Hondt: the next genome comes from the order with the highest weight / (taken + 1)),
    skipping genomes in `taken` and duplicates."""
    seen = {g.key for g in taken}
    pos = [0] * len(orders)
    got = [0] * len(orders)
    out: list[Genome] = []
    while len(out) < limit:
        live = [i for i in range(len(orders)) if pos[i] < len(orders[i]) and weights[i] > 0]
        if not live:
            break
        i = max(live, key=lambda j: (weights[j] / (got[j] + 1), -j))
        g = orders[i][pos[i]]
        pos[i] += 1
        if g.key in seen:
            continue
        seen.add(g.key)
        got[i] += 1
        out.append(g)
    return out


class ChoosingStrategy(Strategy):
    """The GA behind an online lesson choice: first the probe (the given seeds, then each lesson's
    best `probe` in-space genomes, interleaved), then, once its verdicts are told, the GA built
    with the probe and the chosen lessons' seeds as its first population's seeds and their agreed
    genes as its region. The probe's genomes are asked again by the GA and answered free (the run
    answers a genome once)."""

    name = "ga"

    def __init__(self, lessons: "RunLessons", space: GeneSpace, metric: str,
                 make: Callable[[list[Genome], Any], Strategy], *, seeds: Sequence[Genome], probe: int, room: int,
                 population: int, region: bool, order: str = "recorded"):
        self._gen = 0
        super().__init__()
        self.lessons, self.space, self.metric, self.make = lessons, space, metric, make
        self.transfers = [x for x, _ in lessons.used]
        self.orders = [lesson_order(x, space) for x in self.transfers]
        self.given = list(seeds)
        self.probe = allot(self.orders, [1.0] * len(self.orders), probe * len(self.orders), taken=self.given)
        self.first = self.given + self.probe
        self.room = room                  # lesson seeds in all (the probe's among them) when none is chosen
        self.population = population      # ... and when one is: the rest of the first population
        self.region = region
        self.order = order                # "model": the kept lessons' rest in their surrogate's order
        self.ga: Strategy | None = None
        self.judged: list[tuple[Genome, float | None]] = []
        self.choice: Choice | None = None
        self.choice_log: list[str] = []
        self._asked = False

    # the GA's attributes (skipped, _measured, ...) once it exists
    def __getattr__(self, name: str) -> Any:
        ga = self.__dict__.get("ga")
        if ga is None:
            raise AttributeError(name)
        return getattr(ga, name)

    @property
    def generation(self) -> int:           # type: ignore[override]
        return self.ga.generation if self.ga is not None else self._gen

    @generation.setter
    def generation(self, value: int) -> None:
        self._gen = value

    @property
    def skipped(self) -> list:
        return self.ga.skipped if self.ga is not None else []

    def ask(self) -> list[Candidate]:
        if self.ga is None and not self._asked and self.first:
            self._asked = True
            return [Candidate(g, (), "seed") for g in self.first]
        if self.ga is None:
            self._decide()
        return self.ga.ask()

    def tell(self, candidates: Sequence[Candidate], evaluations: Sequence[Evaluation]) -> None:
        if self.ga is not None:
            self.ga.tell(candidates, evaluations)
            return
        self.judged += [(c.genome, e.fitness(self.metric)) for c, e in zip(candidates, evaluations)]
        self._decide()

    def _decide(self) -> None:
        """The choice on what was judged, then the GA with the chosen lessons' seeds and region."""
        self.choice = choose(self.transfers, self.space, self.judged)
        weights = [s.weight if s.kept else 0.0 for s in self.choice.scores]
        if not self.choice.chosen:
            weights = [1.0] * len(self.orders)
        done = [g for g, _ in self.judged]
        orders = self.orders
        if self.choice.chosen and self.order == "model":
            orders = [model_order(x, self.space, o) if w > 0 else o
                      for x, o, w in zip(self.transfers, self.orders, weights)]
            self.choice_log.append("the kept lessons' genomes after the probe in their surrogate's order "
                                   "(search.lessons.order = 'model')")
        # no choice: `seeds` lesson genomes in all, interleaved, as with choice = "all"
        room = self.population - len(self.first) if self.choice.chosen else self.room - len(self.probe)
        rest = allot(orders, weights, max(0, room), taken=self.given + self.probe)
        kept = {s.shape_class for s in self.choice.scores if s.kept}
        region = None
        if self.region:
            region = self.lessons.agreed_region(self.space, among=kept) or None
        self.choice_log.append(self.choice.describe())
        if region:
            self.choice_log.append(f"first population drawn within the genes the kept lessons agree on: {region}")
        self.ga = self.make(done + [g for g in self.first if g.key not in {d.key for d in done}] + rest, region)

    def close(self) -> None:
        if self.ga is not None:
            self.ga.close()


def choice_summary(per_run: Sequence[Sequence[str]]) -> list[str]:
    """Lines for a report of several runs (seeds) of one setting: how often each set of lessons
    was kept, with the median Spearman of each kept lesson, then one run's line in full."""
    import re
    import statistics

    lines = [next((x for x in run if x.startswith(CHOICE_LINE)), "") for run in per_run]
    lines = [x for x in lines if x]
    if not lines:
        return []
    outcome: dict[str, list[str]] = {}
    for x in lines:
        if " chose " in x:
            kept = x.split(" chose ", 1)[1].split("; dropped", 1)[0]
            outcome.setdefault("chose " + ", ".join(re.findall(r"(\S+) \(Spearman", kept)), []).append(x)
        else:
            outcome.setdefault("kept every lesson (" + x.split("every lesson kept (", 1)[1].split(")", 1)[0]
                               .split(":")[0] + ")", []).append(x)
    out = []
    for what, xs in sorted(outcome.items(), key=lambda kv: -len(kv[1])):
        rhos: dict[str, list[float]] = {}
        for x in xs:
            for cls, rho in re.findall(r"(\S+) \(Spearman ([+-][0-9.]+)", x):
                rhos.setdefault(cls, []).append(float(rho))
        med = ", ".join(f"{c} {statistics.median(v):+.2f}" for c, v in rhos.items())
        out.append(f"{CHOICE_LINE}: {what} in {len(xs)} of {len(per_run)} runs (median Spearman: {med})")
    return out + [f"e.g. seed 0: {lines[0]}"]


def choosing(cfg: "Config", space: GeneSpace, lessons: "RunLessons | None",
             seeds: Sequence[Genome]) -> Callable[[Callable[[list[Genome], Any], Strategy]], Strategy] | None:
    """The online choice for evo.run.build_stages (None when the run makes none: `for_run`)."""
    if lessons is None or for_run(cfg, lessons):
        return None
    section, ga = cfg.search.lessons, cfg.search.ga
    region = section.region and not cfg.search.init_within
    return lambda make: ChoosingStrategy(lessons, space, cfg.objective.metric, make, seeds=seeds,
                                         probe=section.probe, room=section.seeds,
                                         population=ga.population * ga.islands, region=region,
                                         order=section.order)


def for_run(cfg: "Config", lessons: "RunLessons | None") -> str:
    """Why a run makes no online choice ("" when it makes one): it needs choice = "online", the GA,
    at least two lessons to choose among and none of the run's own classes (an own lesson is the
    one to follow)."""
    section = cfg.search.lessons
    if lessons is None or section.choice != "online":
        return "search.lessons.choice is not 'online'" if lessons is not None else "no lessons"
    if cfg.search.strategy != "ga":
        return f"search.strategy {cfg.search.strategy!r} (only the GA makes the choice)"
    if any(how == "own" for _, how in lessons.used):
        return "the run has lessons of its own classes"
    if len(lessons.used) < 2:
        return f"{len(lessons.used)} transfer lesson(s): nothing to choose among"
    return ""


__all__ = ["CHOICE_LINE", "CHOICES", "choice_summary", "Choice", "ChoosingStrategy", "LessonScore", "allot", "choose", "choosing", "for_run", "lesson_order",
           "model_order", "predictions"]
