"""Unit tests for operators/: mutation, crossover, selection, toolbox, vary, DEAP integration."""

from __future__ import annotations

import copy
import math
import random

import deap.creator
import pytest
from deap import tools

import operators as op
from fitness.records import Evaluation, Status
from genomes import Choice, Flag, GeneSpace, IntRange, PowerOfTwo, require
from genomes.synthetic import SPACE

# no constraints: children need no repair, so crossover structure can be checked exactly
FREE = GeneSpace("free", (
    PowerOfTwo("vec", low=1, high=16, group="memory"),
    Choice("cache", options=("ca", "cg", "nc"), group="memory"),
    Flag("stream", group="memory"),
    PowerOfTwo("threads", low=32, high=512, group="geometry"),
    IntRange("rows", low=1, high=4, group="geometry"),
    IntRange("stages", low=1, high=5, group="pipeline"),
    IntRange("unroll", low=1, high=8, group="pipeline"),
))


def _pop(space, rng, n, values=None):
    return [op.individual(space.sample(rng), rng.random() if values is None else values[i])
            for i in range(n)]


# -- mutation --------------------------------------------------------------------------------
@pytest.mark.parametrize("space", [SPACE, FREE])
def test_mutation_changes_at_least_one_gene_and_stays_valid(space):
    rng = random.Random(0)
    for _ in range(300):
        g = space.sample(rng)
        child = op.mutate(g, space, rng)
        assert space.is_valid(child)
        assert child != g
        assert any(child[n] != g[n] for n in space.names)


def test_mutation_default_rate_changes_few_genes():
    rng = random.Random(1)
    changed = []
    for _ in range(300):
        g = FREE.sample(rng)
        child = op.mutate(g, FREE, rng)
        changed.append(sum(child[n] != g[n] for n in FREE.names))
    assert min(changed) >= 1
    assert sum(changed) / len(changed) < 2.0  # about one gene per child


def test_mutation_full_rate_changes_every_gene_in_free_space():
    rng = random.Random(2)
    g = FREE.sample(rng)
    child = op.mutate(g, FREE, rng, indpb=1.0)
    assert all(child[n] != g[n] for n in FREE.names)


def test_mutation_uses_typed_steps():
    # one gene, ordered: a power-of-two mutation moves to an adjacent power
    space = GeneSpace("one", (PowerOfTwo("t", low=32, high=512),))
    rng = random.Random(4)
    for _ in range(50):
        child = op.mutate(space.make({"t": 128}), space, rng)
        assert child["t"] in (64, 256)


def test_mutation_of_a_single_point_space_returns_it():
    space = GeneSpace("pt", (Choice("c", options=("only",)), IntRange("i", low=3, high=3)))
    g = space.make({"c": "only", "i": 3})
    assert op.mutate(g, space, random.Random(0)) == g


def test_mutation_when_repair_always_reverts_still_moves():
    # x and y must be equal: a one-gene mutation is always undone by repair
    space = GeneSpace("tied", (IntRange("x", low=0, high=3), IntRange("y", low=0, high=3)),
                      (require("eq", ("x", "y"), lambda v: v["x"] == v["y"]),))
    rng = random.Random(0)
    for _ in range(30):
        g = space.sample(rng)
        child = op.mutate(g, space, rng)
        assert child != g and space.is_valid(child)


def test_mutation_argument_checks():
    g = SPACE.sample(random.Random(0))
    with pytest.raises(ValueError, match="indpb"):
        op.mutate(g, SPACE, random.Random(0), indpb=1.5)
    with pytest.raises(ValueError, match="space"):
        op.mutate(g, FREE, random.Random(0))


# -- crossover -------------------------------------------------------------------------------
def test_uniform_children_take_every_gene_from_a_parent():
    rng = random.Random(0)
    for _ in range(200):
        a, b = SPACE.sample(rng), SPACE.sample(rng)
        c1, c2 = op.mix_uniform(a, b, SPACE, rng)
        for n in SPACE.names:
            assert (c1[n], c2[n]) in ((a[n], b[n]), (b[n], a[n]))


def test_uniform_is_mix_then_repair_and_valid():
    for seed in range(50):
        r1, r2 = random.Random(seed), random.Random(seed)
        a, b = SPACE.sample(r1), SPACE.sample(r1)
        SPACE.sample(r2), SPACE.sample(r2)
        k1, k2 = op.uniform(a, b, SPACE, r1)
        m1, m2 = op.mix_uniform(a, b, SPACE, r2)
        assert (k1, k2) == (SPACE.repair(m1, r2), SPACE.repair(m2, r2))
        assert SPACE.is_valid(k1) and SPACE.is_valid(k2)


def test_uniform_in_free_space_needs_no_repair():
    rng = random.Random(3)
    a, b = FREE.sample(rng), FREE.sample(rng)
    for _ in range(50):
        c1, c2 = op.uniform(a, b, FREE, rng)
        for n in FREE.names:
            assert (c1[n], c2[n]) in ((a[n], b[n]), (b[n], a[n]))


def test_uniform_indpb_extremes():
    rng = random.Random(0)
    a, b = FREE.sample(rng), FREE.sample(rng)
    assert op.uniform(a, b, FREE, rng, indpb=0.0) == (a, b)
    assert op.uniform(a, b, FREE, rng, indpb=1.0) == (b, a)
    with pytest.raises(ValueError, match="indpb"):
        op.uniform(a, b, FREE, rng, indpb=-0.1)


def test_by_group_keeps_groups_intact_without_repair():
    rng = random.Random(0)
    groups = FREE.groups()
    for _ in range(200):
        a, b = FREE.sample(rng), FREE.sample(rng)
        c1, c2 = op.by_group(a, b, FREE, rng)
        for names in groups.values():
            whole_a = all(c1[n] == a[n] and c2[n] == b[n] for n in names)
            whole_b = all(c1[n] == b[n] and c2[n] == a[n] for n in names)
            assert whole_a or whole_b


def test_mix_groups_swaps_some_but_not_all_groups():
    rng = random.Random(1)
    groups = list(SPACE.groups().values())
    for _ in range(200):
        a, b = SPACE.sample(rng), SPACE.sample(rng)
        c1, _ = op.mix_groups(a, b, SPACE, rng)
        swapped = [all(c1[n] == b[n] for n in names) and any(a[n] != b[n] for n in names)
                   for names in groups]
        kept = [all(c1[n] == a[n] for n in names) and any(a[n] != b[n] for n in names)
                for names in groups]
        for names in groups:
            assert all(c1[n] == a[n] for n in names) or all(c1[n] == b[n] for n in names)
        if all(any(a[n] != b[n] for n in names) for names in groups):
            assert any(swapped) and any(kept)


def test_by_group_children_valid_in_constrained_space():
    rng = random.Random(2)
    for _ in range(200):
        a, b = SPACE.sample(rng), SPACE.sample(rng)
        c1, c2 = op.by_group(a, b, SPACE, rng)
        assert SPACE.is_valid(c1) and SPACE.is_valid(c2)


def test_by_group_single_group_falls_back_to_uniform():
    space = GeneSpace("mono", (IntRange("x", low=0, high=9), IntRange("y", low=0, high=9)))
    rng = random.Random(0)
    a, b = space.make({"x": 0, "y": 0}), space.make({"x": 9, "y": 9})
    kids = {op.by_group(a, b, space, rng)[0] for _ in range(50)}
    assert len(kids) > 2  # mixed children exist


def test_crossover_rejects_genomes_of_another_space():
    a = SPACE.sample(random.Random(0))
    b = FREE.sample(random.Random(0))
    with pytest.raises(ValueError, match="space"):
        op.uniform(a, b, SPACE, random.Random(0))
    with pytest.raises(ValueError, match="space"):
        op.by_group(a, b, SPACE, random.Random(0))


# -- individuals and selection ---------------------------------------------------------------
def test_individual_failed_is_minus_inf_and_orderable():
    rng = random.Random(0)
    ok = op.individual(SPACE.sample(rng), 1.5)
    bad = op.individual(SPACE.sample(rng), None)
    nan = op.individual(SPACE.sample(rng), float("nan"))
    assert bad.fitness.values == (-math.inf,) and bad.failed and bad.value is None
    assert nan.failed and ok.value == 1.5 and not ok.failed
    assert bad.fitness < ok.fitness and nan.fitness < ok.fitness
    assert sorted([ok, bad, nan], key=lambda i: i.fitness, reverse=True)[0] is ok
    assert bad.fitness <= nan.fitness and nan.fitness <= bad.fitness


def test_individual_from_evaluation():
    g = SPACE.sample(random.Random(0))
    ev = Evaluation(key=g.key, genome=g.as_dict(), space=g.space, status=Status.OK,
                    objectives={"speedup": 1.25})
    assert op.from_evaluation(g, ev, "speedup").value == 1.25
    bad = Evaluation(key=g.key, genome=g.as_dict(), space=g.space, status=Status.WRONG_RESULT)
    assert op.from_evaluation(g, bad, "speedup").failed
    sus = Evaluation(key=g.key, genome=g.as_dict(), space=g.space, status=Status.OK,
                     objectives={"speedup": 99.0}, suspect=True)
    assert op.from_evaluation(g, sus, "speedup").failed
    other = SPACE.sample(random.Random(1))
    with pytest.raises(ValueError, match="not of genome"):
        op.from_evaluation(other, ev, "speedup")


def test_individual_copy_and_equality_by_genome():
    ind = op.individual(SPACE.sample(random.Random(0)), 2.0, parents=("a",), operator="mutation")
    clone = copy.deepcopy(ind)
    assert clone == ind and clone is not ind and clone.fitness.values == (2.0,)
    assert clone.parents == ("a",) and clone.operator == "mutation"
    assert not hasattr(ind, "__dict__")


def test_elite_is_selbest_and_puts_failed_last():
    rng = random.Random(0)
    pop = _pop(SPACE, rng, 6, [0.5, None, 2.0, 1.0, None, 3.0])
    best = op.elite(pop, 4)
    assert [i.value for i in best] == [3.0, 2.0, 1.0, 0.5]
    assert op.elite(pop, 6)[-2:] == [pop[1], pop[4]]
    assert op.elite(pop, 0) == []
    assert [id(i) for i in best] == [id(i) for i in tools.selBest(pop, 4)]
    with pytest.raises(ValueError, match="k"):
        op.elite(pop, -1)


def test_best_unique_skips_repeated_genomes():
    rng = random.Random(0)
    g1, g2, g3 = (SPACE.sample(rng) for _ in range(3))
    pop = [op.individual(g1, 5.0), op.individual(g1, 4.0), op.individual(g2, 3.0),
           op.individual(g3, None)]
    out = op.best_unique(pop, 3)
    assert [i.genome for i in out] == [g1, g2, g3]
    assert out[0].value == 5.0
    assert len(op.best_unique(pop, 10)) == 3


def test_tournament_prefers_fitter_and_never_picks_failed_over_ok():
    rng = random.Random(0)
    pop = _pop(SPACE, rng, 10, [float(i) for i in range(10)])
    picks = op.tournament(pop, 2000, random.Random(1), tournsize=3)
    mean = sum(p.value for p in picks) / len(picks)
    assert mean > 5.5  # uniform would give 4.5
    assert op.tournament(pop, 5, random.Random(1), tournsize=50) == [pop[9]] * 5

    mixed = _pop(SPACE, rng, 4, [None, None, None, 1.0])
    for p in op.tournament(mixed, 200, random.Random(2), tournsize=4):
        # a tournament that drew the OK one must choose it
        assert p.value in (None, 1.0)
    assert any(p.value == 1.0 for p in op.tournament(mixed, 50, random.Random(2)))


def test_tournament_is_seeded_and_validates():
    pop = _pop(SPACE, random.Random(0), 8)
    a = op.tournament(pop, 20, random.Random(7))
    b = op.tournament(pop, 20, random.Random(7))
    assert [id(x) for x in a] == [id(x) for x in b]
    with pytest.raises(ValueError, match="tournsize"):
        op.tournament(pop, 2, random.Random(0), tournsize=0)
    with pytest.raises(ValueError, match="at least one"):
        op.tournament([], 2, random.Random(0))
    assert op.tournament([], 0, random.Random(0)) == []


# -- toolbox and vary ------------------------------------------------------------------------
def _children(seed, crossover="uniform", n=40):
    rng = random.Random(seed)
    tb = op.make_toolbox(SPACE, rng, crossover=crossover)
    pop = [op.individual(tb.sample(), rng.random()) for _ in range(12)]
    parents = tb.select(pop, 12)
    return [(c.genome.key, c.parents, c.operator) for c in op.vary(parents, n, tb, rng, 0.6, 0.3)]


@pytest.mark.parametrize("crossover", ["uniform", "group"])
def test_same_seed_same_children(crossover):
    assert _children(42, crossover) == _children(42, crossover)


def test_different_seeds_differ():
    assert _children(1) != _children(2)


def test_toolbox_does_not_touch_global_random():
    random.seed(123)
    expected = random.random()
    random.seed(123)
    _children(5)
    assert random.random() == expected


def test_toolbox_registers_operators():
    rng = random.Random(0)
    tb = op.make_toolbox(SPACE, rng, crossover="group", mut_indpb=0.5, tournsize=2)
    for name in ("sample", "mate", "mutate", "select", "elite"):
        assert callable(getattr(tb, name))
    a, b = tb.sample(), tb.sample()
    c1, c2 = tb.mate(a, b)
    assert SPACE.is_valid(c1) and SPACE.is_valid(c2)
    assert tb.mutate(a) != a
    pop = [op.individual(a, 1.0), op.individual(b, 2.0)]
    assert tb.elite(pop, 1)[0].value == 2.0
    assert len(tb.select(pop, 5)) == 5
    assert tb.crossover_kind == "group" and tb.space is SPACE and tb.rng is rng


@pytest.mark.parametrize("kw, name", [
    ({"crossover": "onepoint"}, "crossover"), ({"cx_indpb": 2}, "cx_indpb"),
    ({"mut_indpb": -1}, "mut_indpb"), ({"tournsize": 0}, "tournsize"),
])
def test_make_toolbox_validates(kw, name):
    with pytest.raises(ValueError, match=name):
        op.make_toolbox(SPACE, random.Random(0), **kw)


def test_make_toolbox_requires_explicit_rng():
    with pytest.raises(TypeError, match="rng"):
        op.make_toolbox(SPACE, 0)  # type: ignore[arg-type]


def test_vary_children_are_new_valid_and_recorded():
    rng = random.Random(9)
    tb = op.make_toolbox(SPACE, rng, crossover="group")
    parents = _pop(SPACE, rng, 6)
    keys = {p.genome.key for p in parents}
    kids = op.vary(parents, 30, tb, rng, cxpb=0.5, mutpb=0.5)
    assert len(kids) == 30
    assert all(isinstance(k, op.Candidate) and SPACE.is_valid(k.genome) for k in kids)
    assert not keys & {k.genome.key for k in kids}
    assert len({k.genome.key for k in kids}) == 30
    ops = {k.operator for k in kids}
    assert ops <= {"mutation", "crossover:group", "crossover:group+mutation"}
    assert "mutation" in ops and ops & {"crossover:group", "crossover:group+mutation"}
    for k in kids:
        assert set(k.parents) <= keys
        assert len(k.parents) == (1 if k.operator == "mutation" else 2)
        if len(k.parents) == 2:
            assert k.parents[0] != k.parents[1]


def test_vary_probability_extremes():
    rng = random.Random(3)
    tb = op.make_toolbox(SPACE, rng)
    parents = _pop(SPACE, rng, 5)
    assert {k.operator for k in op.vary(parents, 20, tb, rng, 0.0, 1.0)} == {"mutation"}
    assert {k.operator for k in op.vary(parents, 20, tb, rng, 1.0, 1.0)} == {"crossover:uniform+mutation"}
    # one distinct parent cannot be crossed: mutation only
    same = [parents[0], op.individual(parents[0].genome, 0.0)]
    assert {k.operator for k in op.vary(same, 5, tb, rng, 1.0, 0.0)} == {"mutation"}


@pytest.mark.parametrize("kw, name", [
    ({"cxpb": 1.2}, "cxpb"), ({"mutpb": -0.5}, "mutpb"), ({"cxpb": True}, "cxpb"),
    ({"n_children": -1}, "n_children"), ({"n_children": 2.5}, "n_children"),
])
def test_vary_validates(kw, name):
    rng = random.Random(0)
    tb = op.make_toolbox(SPACE, rng)
    args = dict(parents=_pop(SPACE, rng, 3), n_children=2, toolbox=tb, rng=rng, cxpb=0.5, mutpb=0.5)
    args.update(kw)
    with pytest.raises(ValueError, match=name):
        op.vary(**args)


def test_vary_empty_parents():
    rng = random.Random(0)
    tb = op.make_toolbox(SPACE, rng)
    with pytest.raises(ValueError, match="parents"):
        op.vary([], 3, tb, rng, 0.5, 0.5)
    assert op.vary([], 0, tb, rng, 0.5, 0.5) == []


def test_candidate():
    g = SPACE.sample(random.Random(0))
    c = op.Candidate(g, ["k1"], "mutation")
    assert c.parents == ("k1",) and c.key == g.key and op.Candidate(g).operator == "init"
    with pytest.raises(Exception):
        c.operator = "x"  # frozen
    with pytest.raises(TypeError, match="Genome"):
        op.Candidate(g.as_dict())  # type: ignore[arg-type]


# -- no deap.creator globals -----------------------------------------------------------------
def test_no_creator_globals():
    before = set(vars(deap.creator))
    _children(0, "uniform")
    _children(0, "group")
    assert not hasattr(deap.creator, "FitnessMax")
    assert not hasattr(deap.creator, "Individual")
    assert set(vars(deap.creator)) == before


def test_operators_import_only_allowed_packages():
    import ast
    import pathlib
    import sys
    # the LLM operator's client (optional extra `llm`, imported only for a live endpoint), and the
    # gradient-boosted-trees surrogate's scikit-learn with its thread limiter threadpoolctl (optional
    # extra `lessons`, imported only when a tree surrogate is asked for)
    allowed = {"genomes", "fitness", "deap", "numpy", "operators", "__future__", "openai", "sklearn", "threadpoolctl"}
    stdlib_ok = set(sys.stdlib_module_names)      # never `evo`: nothing below the engine imports it
    for path in pathlib.Path(op.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                roots = [(node.module or "").split(".")[0]]
            else:
                continue
            for r in roots:
                assert r in allowed | stdlib_ok, f"{path.name} imports {r}"
