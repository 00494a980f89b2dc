"""Unit and property tests for genomes/: gene kinds, spaces, validation, repair, keys."""

from __future__ import annotations

import copy
import json
import math
import pickle
import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from genomes import (
    Choice, Flag, GeneError, GeneSpace, Genome, IntRange, InvalidGenome, PowerOfTwo,
    gene_from_spec, genome_key, require,
)
from genomes.synthetic import SPACE

FIXED = dict(vector_bytes=8, load_cache="cg", streaming_store=True, threads_per_row=128,
             rows_per_cta=2, cluster=2, stages=3, unroll=2)
# Never change this: the store, the compile cache and deduplication rely on keys being stable.
FIXED_KEY = "3ab62226a1865b4a4273"


# -- gene kinds ------------------------------------------------------------------------------
def test_choice_values_neighbours_distance():
    g = Choice("cache", options=("ca", "cg", "nc"))
    assert g.kind == "choice" and g.values() == ("ca", "cg", "nc")
    assert set(g.neighbours("cg")) == {"ca", "nc"}
    assert g.distance("ca", "ca") == 0.0 and g.distance("ca", "nc") == 1.0
    assert g.validate("nc") == "nc"


def test_choice_rejects_empty_and_repeated_options():
    with pytest.raises(GeneError, match="at least one option"):
        Choice("c", options=())
    with pytest.raises(GeneError, match="repeat"):
        Choice("c", options=("a", "a"))


def test_choice_canonical_value_gives_one_key():
    s = GeneSpace("t", (Choice("c", options=(1, 2, 3)),))
    assert s.make({"c": 1}).key == s.make({"c": 1.0}).key == s.make({"c": True}).key
    assert s.make({"c": 1.0})["c"] == 1 and type(s.make({"c": 1.0})["c"]) is int


def test_flag():
    g = Flag("streaming")
    assert g.values() == (False, True)
    assert g.neighbours(True) == (False,)
    assert g.contains(False) and not g.contains(0) and not g.contains(1)
    assert g.mutate(False, random.Random(0)) is True


def test_int_range():
    g = IntRange("unroll", low=1, high=9, step=2)
    assert g.values() == (1, 3, 5, 7, 9)
    assert g.neighbours(1) == (3,) and g.neighbours(5) == (3, 7)
    assert g.contains(7) and not g.contains(4) and not g.contains(11) and not g.contains(True)
    assert not g.contains(3.0)
    assert g.distance(1, 9) == 4.0
    rng = random.Random(3)
    for _ in range(200):
        v = g.mutate(5, rng)
        assert v != 5 and g.contains(v)
    with pytest.raises(GeneError, match="multiple of step"):
        IntRange("bad", low=0, high=5, step=2)
    with pytest.raises(GeneError, match="low <= high"):
        IntRange("bad", low=5, high=1)


def test_power_of_two():
    g = PowerOfTwo("threads", low=32, high=512)
    assert g.values() == (32, 64, 128, 256, 512)
    assert g.neighbours(32) == (64,) and g.neighbours(128) == (64, 256)
    assert g.distance(32, 512) == 4.0
    assert not g.contains(96) and not g.contains(1024) and not g.contains(True)
    with pytest.raises(GeneError, match="powers of two"):
        PowerOfTwo("bad", low=3, high=8)
    with pytest.raises(GeneError, match="high 4 < low 8"):
        PowerOfTwo("bad", low=8, high=4)


def test_single_valued_genes_do_not_mutate():
    rng = random.Random(0)
    assert Choice("c", options=("only",)).mutate("only", rng) == "only"
    assert IntRange("i", low=2, high=2).mutate(2, rng) == 2


def test_validation_message_names_gene_and_legal_values():
    g = PowerOfTwo("vector_bytes", low=4, high=16)
    with pytest.raises(GeneError, match=r"gene 'vector_bytes': 5 is not one of \[4, 8, 16\]"):
        g.validate(5)
    big = IntRange("regs", low=0, high=255)
    assert "(256 values)" in big.describe_values()


@pytest.mark.parametrize("gene", list(SPACE.genes) + [IntRange("u", low=1, high=9, step=2)])
def test_gene_spec_round_trip(gene):
    rebuilt = gene_from_spec(json.loads(json.dumps(gene.spec())))
    assert rebuilt == gene


def test_unknown_gene_kind():
    with pytest.raises(GeneError, match="unknown gene kind 'float'"):
        gene_from_spec({"name": "x", "kind": "float"})


def test_sample_and_mutate_stay_legal():
    rng = random.Random(11)
    for gene in SPACE.genes:
        for _ in range(50):
            v = gene.sample(rng)
            assert gene.contains(v)
            m = gene.mutate(v, rng)
            assert gene.contains(m) and m != v


# -- spaces ----------------------------------------------------------------------------------
def test_space_structure():
    assert SPACE.names[0] == "vector_bytes" and len(SPACE.names) == 8
    assert SPACE.groups() == {
        "memory": ("vector_bytes", "load_cache", "streaming_store"),
        "geometry": ("threads_per_row", "rows_per_cta", "cluster"),
        "pipeline": ("stages", "unroll"),
    }
    assert SPACE.size() == 9720


def test_enumerate_count_synthetic():
    all_valid = list(SPACE.enumerate())
    assert len(all_valid) == 5940
    assert len({g.key for g in all_valid}) == 5940
    assert all(SPACE.is_valid(g) for g in all_valid)


def test_enumerate_refuses_large_space():
    with pytest.raises(GeneError, match="more than limit"):
        next(SPACE.enumerate(limit=100))


def test_duplicate_gene_names_and_unknown_constraint_genes():
    with pytest.raises(GeneError, match="repeat"):
        GeneSpace("d", (Flag("a"), Flag("a")))
    with pytest.raises(GeneError, match="unknown genes"):
        GeneSpace("d", (Flag("a"),), (require("r", ("b",), lambda v: True),))


def test_unknown_gene_lookup():
    with pytest.raises(GeneError, match="has no gene 'nope'"):
        SPACE.gene("nope")


def test_constraint_violations_listed_by_name():
    bad = dict(FIXED, threads_per_row=32, cluster=4, stages=3, unroll=1)
    problems = SPACE.violations(bad)
    assert [p.split(":")[0] for p in problems] == [
        "constraint cluster_needs_wide_rows", "constraint deep_staging_needs_unroll"]
    with pytest.raises(InvalidGenome) as exc:
        SPACE.make(bad)
    msg = str(exc.value)
    assert "cluster_needs_wide_rows" in msg and "deep_staging_needs_unroll" in msg
    assert "cta_size" not in msg
    assert "at least two loads per stage" in msg


def test_gene_problems_listed_together():
    bad = dict(FIXED, vector_bytes=3, load_cache="xx", bogus=1)
    del bad["unroll"]
    problems = SPACE.violations(bad)
    text = "; ".join(problems)
    assert "unknown genes ['bogus']" in text
    assert "gene 'unroll' is missing" in text
    assert "gene 'vector_bytes': 3" in text and "gene 'load_cache': 'xx'" in text


def test_neighbours_are_valid_one_step_moves():
    g = SPACE.make(FIXED)
    near = SPACE.neighbours(g)
    assert near and all(SPACE.is_valid(n) for n in near)
    for n in near:
        diff = [k for k in SPACE.names if n[k] != g[k]]
        assert len(diff) == 1
        assert n[diff[0]] in SPACE.gene(diff[0]).neighbours(g[diff[0]])
    # threads_per_row=64 would break the cluster constraint; it is not a neighbour
    assert all(n["threads_per_row"] != 64 for n in near)


def test_sample_is_seeded():
    a = [SPACE.sample(random.Random(5)) for _ in range(3)]
    b = [SPACE.sample(random.Random(5)) for _ in range(3)]
    assert a == b and all(SPACE.is_valid(g) for g in a)


# -- genomes ---------------------------------------------------------------------------------
def test_key_is_stable_across_versions():
    g = SPACE.make(FIXED)
    assert g.key == FIXED_KEY
    assert genome_key("synthetic", dict(reversed(list(FIXED.items())))) == FIXED_KEY


def test_json_round_trip():
    g = SPACE.make(FIXED)
    assert SPACE.from_json(g.to_json()) == g
    assert SPACE.from_json(json.loads(g.to_json())) == g
    assert SPACE.from_json(json.dumps(FIXED)) == g
    assert SPACE.to_json(g) == g.to_json()


def test_from_json_rejects_other_space_and_bad_values():
    g = SPACE.make(FIXED)
    other = g.to_json().replace('"space":"synthetic"', '"space":"rmsnorm"')
    with pytest.raises(InvalidGenome, match="belongs to space 'rmsnorm'"):
        SPACE.from_json(other)
    with pytest.raises(GeneError, match="vector_bytes"):
        SPACE.from_json(json.dumps(dict(FIXED, vector_bytes=5)))


def test_pickle_and_copy():
    g = SPACE.make(FIXED)
    for clone in (pickle.loads(pickle.dumps(g)), copy.copy(g), copy.deepcopy(g)):
        assert clone == g and clone.key == g.key and dict(clone) == dict(g)
        assert clone.space == "synthetic"


def test_pickle_and_copy_keep_the_key_of_a_genome_with_genes_at_their_legacy_value():
    """A space keeps genes added later, at their legacy value, out of the key (so old keys stay
    valid): a pickled or deep-copied genome must keep that key, not recompute it from every gene."""
    from genomes.kda import NAMED, SPACES

    g = NAMED["split-bf16-v2-tight"]                      # rec_min_blocks (v9) at its legacy 1
    v8 = SPACES["v8"].make({k: g[k] for k in SPACES["v8"].names})
    assert g.key == v8.key
    for clone in (pickle.loads(pickle.dumps(g)), copy.deepcopy(g)):
        assert clone.key == g.key and clone == g and hash(clone) == hash(g) and dict(clone) == dict(g)


def test_immutability():
    g = SPACE.make(FIXED)
    with pytest.raises(AttributeError):
        g._key = "x"
    with pytest.raises(AttributeError):
        g.extra = 1
    with pytest.raises(AttributeError):
        del g._key
    with pytest.raises(TypeError):
        g["unroll"] = 3  # type: ignore[index]
    assert g.key == FIXED_KEY


def test_mapping_behaviour_and_changed():
    g = SPACE.make(FIXED)
    assert list(g) == list(SPACE.names) and len(g) == 8 and g["unroll"] == 2
    with pytest.raises(KeyError, match="not in space"):
        g["nope"]
    ch = g.changed(unroll=3)
    assert ch["unroll"] == 3 and g["unroll"] == 2 and isinstance(ch, dict)
    with pytest.raises(KeyError, match="nope"):
        g.changed(nope=1)
    assert g.as_dict() == FIXED
    assert hash(g) == hash(SPACE.make(dict(FIXED)))
    assert {g: 1}[SPACE.make(FIXED)] == 1
    assert g != FIXED  # a genome is not a plain dict
    assert "synthetic" in repr(g)


# -- repair ----------------------------------------------------------------------------------
def test_repair_fixes_constraint_with_smallest_change():
    start = dict(FIXED, threads_per_row=64, cluster=2)  # cluster>1 needs >=128 threads
    fixed = SPACE.repair(start, random.Random(0))
    assert SPACE.is_valid(fixed)
    changed = {k for k in SPACE.names if fixed[k] != start[k]}
    assert changed in ({"cluster"}, {"threads_per_row"})


def _legacy_space(legacy_retry: bool) -> GeneSpace:
    """A later gene (`late`, legacy "off") whose "on" needs a = 0, and b = "small"; a repair budget of two
    expansions: the nearest-valid search fixes one broken constraint and gives up on two."""
    from genomes.constraints import implies  # noqa: PLC0415
    genes = (IntRange("a", low=0, high=1), Choice("b", options=("small", "big")),
             Choice("late", options=("off", "on"), legacy="off"))
    rules = (implies("late_needs_a0", ("late", "a"), lambda v: v["late"] == "on", lambda v: v["a"] == 0, "late: a = 0"),
             require("b_small", ("b",), lambda v: v["b"] == "small", "b small"))
    return GeneSpace(name="legacy", genes=genes, constraints=rules, repair_budget=2, legacy_retry=legacy_retry)


def test_legacy_retry_puts_a_later_gene_back_where_the_search_gives_up():
    start = {"a": 1, "b": "big", "late": "on"}
    for seed in range(10):
        assert _legacy_space(True).repair(start, random.Random(seed)).as_dict() == {"a": 1, "b": "small", "late": "off"}
    seen = {tuple(_legacy_space(False).repair(start, random.Random(s)).as_dict().items()) for s in range(20)}
    assert len(seen) > 1                         # without it: the random fallback's nearest draws
    easy = {"a": 1, "b": "small", "late": "on"}  # one broken constraint: the search itself moves a or late
    got = {_legacy_space(True).repair(easy, random.Random(s))["late"] for s in range(20)}
    assert got == {"on", "off"}


def test_legacy_retry_repairs_a_uniform_draw_from_its_later_genes_at_legacy():
    space, reset = _legacy_space(True), 0
    for seed in range(40):
        rng = random.Random(seed)
        draw = {g.name: g.sample(rng) for g in space.genes}       # sample's one draw (tries=1)
        if space.is_valid(draw):
            want = space.make(draw)
        else:
            start = space._at_legacy_where_broken(draw)
            reset += start != draw
            want = space.repair(start, rng)
        assert space.sample(random.Random(seed), tries=1) == want, seed
    assert reset > 0


def test_repair_snaps_out_of_range_numbers():
    fixed = SPACE.repair(dict(FIXED, vector_bytes=7, unroll=99, stages=-4), random.Random(0))
    assert fixed["vector_bytes"] == 8 and fixed["unroll"] == 4
    assert SPACE.is_valid(fixed)


def test_repair_is_seeded():
    start = dict(FIXED, threads_per_row=32, cluster=4, stages=3, unroll=1, load_cache=None)
    a = [SPACE.repair(start, random.Random(s)) for s in range(5)]
    b = [SPACE.repair(start, random.Random(s)) for s in range(5)]
    assert a == b


_WILD = st.one_of(
    st.integers(-10_000, 10_000), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
    st.none(), st.text(max_size=3), st.sampled_from(["ca", "cg", "nc"]),
    st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 256, 512]), st.lists(st.integers(), max_size=2),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.dictionaries(st.sampled_from(list(SPACE.names) + ["bogus"]), _WILD),
       seed=st.integers(0, 2**32 - 1))
def test_repair_of_anything_is_valid_and_idempotent(values, seed):
    fixed = SPACE.repair(values, random.Random(seed))
    assert isinstance(fixed, Genome) and SPACE.is_valid(fixed)
    assert SPACE.repair(fixed, random.Random(seed + 1)) == fixed
    assert SPACE.repair(values, random.Random(seed)) == fixed  # same seed, same repair


_VALID = list(SPACE.enumerate())


@settings(max_examples=60, deadline=None)
@given(i=st.integers(0, len(_VALID) - 1), seed=st.integers(0, 2**32 - 1))
def test_repair_is_identity_on_valid_genomes(i, seed):
    g = _VALID[i]
    assert SPACE.repair(g, random.Random(seed)) == g
    assert SPACE.repair(g.as_dict(), random.Random(seed)) == g
    assert SPACE.from_json(g.to_json()) == g
    assert not math.isnan(SPACE.distance(g, g)) and SPACE.distance(g, g) == 0


# -- genes added to a space later (legacy values) ---------------------------------------------------
def test_a_gene_added_later_keeps_old_keys_and_reads_old_genomes():
    from genomes import GeneSpace
    from genomes.genes import Choice, Flag, IntRange

    old = GeneSpace("evolving", genes=(IntRange("a", low=0, high=3), Choice("b", options=("x", "y"))))
    new = GeneSpace("evolving", genes=(IntRange("a", low=0, high=3), Choice("b", options=("x", "y")),
                                       Flag("c", legacy=False)))
    before = old.make({"a": 2, "b": "y"})
    after = new.make({"a": 2, "b": "y"})                  # a recorded genome without the new gene
    assert after["c"] is False and after.key == before.key
    assert new.make({"a": 2, "b": "y", "c": False}).key == before.key
    changed = new.make({"a": 2, "b": "y", "c": True})
    assert changed.key != before.key and changed["c"] is True
    assert new.from_json(before.to_json()).key == before.key
    assert new.repair({"a": 9, "b": "y"}, random.Random(0))["c"] is False
    assert not new.violations({"a": 1, "b": "x"})
    assert "gene 'a' is missing" in "; ".join(new.violations({"b": "x"}))   # original genes stay required
    spec = [g for g in new.spec()["genes"] if g["name"] == "c"][0]
    assert spec["legacy"] is False
    from genomes.space import genes_from_specs
    assert genes_from_specs(new.spec()["genes"])[2].legacy is False


def _nearest_valid_whole_repr(space, start, rng):
    """Space._nearest_valid as first written (each state's whole repr hashed): the specification the
    incremental version must match."""
    import heapq
    import itertools
    import zlib

    order = list(space.names)
    tiebreak = itertools.count()
    salt = rng.random()
    start_t = tuple(start[n] for n in order)
    heap = [(0.0, 0.0, next(tiebreak), start_t)]
    seen = {start_t}
    expansions = 0
    while heap and expansions < space.repair_budget:
        d, _, _, state = heapq.heappop(heap)
        values = dict(zip(order, state))
        broken = [c for c in space.constraints if not c.holds(values)]
        if not broken:
            return values
        expansions += 1
        touch = {g for c in broken for g in c.genes}
        for i, name in enumerate(order):
            if name not in touch:
                continue
            gene = space.gene(name)
            for v in gene.values():
                if v == state[i]:
                    continue
                nxt = state[:i] + (v,) + state[i + 1:]
                if nxt in seen:
                    continue
                seen.add(nxt)
                nd = d + gene.distance(state[i], v)
                heapq.heappush(heap, (nd, zlib.crc32(repr((salt, nxt)).encode()), next(tiebreak), nxt))
    return None


def test_incremental_repair_search_finds_what_the_whole_repr_search_finds():
    """Space._nearest_valid hashes each state's repr incrementally; its repairs must be the ones
    the first version (the whole repr hashed) made, or recorded searches would not replay. States
    one to three genes away from valid genomes of tangled spaces (both RMSNorm families)."""
    from genomes import rmsnorm, rmsnorm_bwd

    for space in (rmsnorm_bwd.SPACE, rmsnorm.SPACE):
        rng = random.Random(11)
        starts = []
        for _ in range(4):
            genome = dict(space.sample(rng))
            for _ in range(3):
                values = dict(genome)
                for gene in rng.sample(space.genes, rng.randint(1, 3)):
                    values[gene.name] = gene.sample(rng)
                starts.append(values)
        for i, s in enumerate(starts):
            assert space._nearest_valid(dict(s), random.Random(i)) == _nearest_valid_whole_repr(space, dict(s), random.Random(i))


def test_is_valid_says_what_violations_says():
    """is_valid stops at the first problem; it must agree with the full list of violations on any
    values: drawn ones, with a gene missing, an unknown gene or an illegal value."""
    from genomes import rmsnorm, rmsnorm_bwd

    rng = random.Random(1)
    for space in (rmsnorm_bwd.SPACE, rmsnorm.SPACE, SPACE):
        for _ in range(1500):
            values = {g.name: g.sample(rng) for g in space.genes}
            roll = rng.random()
            if roll < 0.1:
                values.pop(rng.choice(list(values)))
            elif roll < 0.15:
                values["not_a_gene"] = 1
            elif roll < 0.2:
                values[rng.choice(space.genes).name] = object()
            assert space.is_valid(values) == (not space.violations(values))
