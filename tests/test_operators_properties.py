"""Property tests: every operator output is a valid genome, and the same seed repeats itself.

Parents are drawn from the synthetic space and from TIGHT, a small space whose constraints rule
out most combinations (so repair does real work on nearly every child).
"""

from __future__ import annotations

import math
import random

from hypothesis import given, settings, strategies as st

import operators as op
from genomes import Choice, Flag, GeneSpace, IntRange, PowerOfTwo, forbid, implies, require
from genomes.synthetic import SPACE

TIGHT = GeneSpace(
    name="tight",
    genes=(
        IntRange("a", low=0, high=7, group="g1"),
        PowerOfTwo("b", low=1, high=64, group="g1"),
        Choice("c", options=("x", "y", "z"), group="g2"),
        Flag("d", group="g2"),
        Choice("fixed", options=("only",), group="g3"),
        IntRange("e", low=0, high=12, step=3, group="g3"),
    ),
    constraints=(
        require("budget", ("a", "b"), lambda v: 5 <= v["a"] + int(math.log2(v["b"])) <= 6),
        implies("d_needs_x", ("d", "c"), lambda v: v["d"], lambda v: v["c"] == "x"),
        forbid("z_with_odd_a", ("c", "a"), lambda v: v["c"] == "z" and v["a"] % 2 == 1),
        require("e_tracks_a", ("e", "a"), lambda v: abs(v["e"] - v["a"]) <= 3),
    ),
)

VALID = {s.name: list(s.enumerate()) for s in (SPACE, TIGHT)}
SPACES = {"synthetic": SPACE, "tight": TIGHT}
PROPS = settings(max_examples=60, deadline=None)


def test_tight_space_is_tight_but_not_empty():
    n = len(VALID["tight"])
    assert 5 <= n <= TIGHT.size() // 10


@st.composite
def parents(draw, k=2):
    space = SPACES[draw(st.sampled_from(sorted(SPACES)))]
    pool = VALID[space.name]
    gs = [pool[draw(st.integers(0, len(pool) - 1))] for _ in range(k)]
    return space, gs


seeds = st.integers(0, 2**63 - 1)
probs = st.floats(0.0, 1.0)


@PROPS
@given(sp=parents(k=1), seed=seeds, indpb=st.one_of(st.none(), probs))
def test_mutate_valid_new_and_reproducible(sp, seed, indpb):
    space, (g,) = sp
    child = op.mutate(g, space, random.Random(seed), indpb)
    assert space.is_valid(child)
    assert child != g  # both spaces have more than one valid genome
    assert op.mutate(g, space, random.Random(seed), indpb) == child


@PROPS
@given(sp=parents(), seed=seeds, indpb=probs)
def test_uniform_valid_and_reproducible(sp, seed, indpb):
    space, (a, b) = sp
    kids = op.uniform(a, b, space, random.Random(seed), indpb)
    assert all(space.is_valid(k) for k in kids)
    assert op.uniform(a, b, space, random.Random(seed), indpb) == kids
    # before repair every gene came from a parent; a valid mix is kept as is
    m1, m2 = op.mix_uniform(a, b, space, random.Random(seed), indpb)
    for n in space.names:
        assert (m1[n], m2[n]) in ((a[n], b[n]), (b[n], a[n]))
    if space.is_valid(m1):
        assert kids[0] == space.make(m1)


@PROPS
@given(sp=parents(), seed=seeds)
def test_by_group_valid_and_reproducible(sp, seed):
    space, (a, b) = sp
    kids = op.by_group(a, b, space, random.Random(seed))
    assert all(space.is_valid(k) for k in kids)
    assert op.by_group(a, b, space, random.Random(seed)) == kids
    m1, m2 = op.mix_groups(a, b, space, random.Random(seed))
    for names in space.groups().values():
        assert all(m1[n] == a[n] and m2[n] == b[n] for n in names) or \
            all(m1[n] == b[n] and m2[n] == a[n] for n in names)
    if space.is_valid(m1) and space.is_valid(m2):
        assert kids == (space.make(m1), space.make(m2))


@PROPS
@given(sp=parents(k=4), seed=seeds, values=st.lists(st.one_of(st.none(), st.floats(-10, 10)),
                                                    min_size=4, max_size=4),
       cxpb=probs, mutpb=probs, n=st.integers(0, 8),
       crossover=st.sampled_from(["uniform", "group"]))
def test_vary_valid_and_reproducible(sp, seed, values, cxpb, mutpb, n, crossover):
    space, gs = sp

    def run():
        rng = random.Random(seed)
        tb = op.make_toolbox(space, rng, crossover=crossover)
        pop = [op.individual(g, v) for g, v in zip(gs, values)]
        return op.vary(tb.select(pop, 4), n, tb, rng, cxpb, mutpb)

    kids = run()
    assert len(kids) == n
    keys = {g.key for g in gs}
    for k in kids:
        assert space.is_valid(k.genome)
        assert set(k.parents) <= keys
    assert [(k.genome, k.parents, k.operator) for k in kids] == \
        [(k.genome, k.parents, k.operator) for k in run()]


@PROPS
@given(sp=parents(k=6), seed=seeds, k=st.integers(0, 10),
       values=st.lists(st.one_of(st.none(), st.floats(-5, 5)), min_size=6, max_size=6))
def test_selection_properties(sp, seed, k, values):
    _, gs = sp
    pop = [op.individual(g, v) for g, v in zip(gs, values)]
    picks = op.tournament(pop, k, random.Random(seed))
    assert len(picks) == k and all(p in pop for p in picks)
    assert [id(p) for p in picks] == [id(p) for p in op.tournament(pop, k, random.Random(seed))]
    best = op.elite(pop, k)
    fits = [b.fitness.values[0] for b in best]
    assert fits == sorted(fits, reverse=True) and len(best) == min(k, len(pop))
    if best:
        assert fits[0] == max(p.fitness.values[0] for p in pop)
    uniq = op.best_unique(pop, k)
    assert len({u.genome.key for u in uniq}) == len(uniq)
