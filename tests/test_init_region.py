"""Where a search starts: at most `search.seed_limit` genomes of earlier evidence, the rest drawn
from `search.init_within` (a region of the gene space). Session 2's 52 RMSNorm candidates all
descended from register-staged seeds and never tried shared-memory staging; the region is how a
config starts part of the population where uniform sampling and mutation rarely go."""

from __future__ import annotations

import random

import pytest

from evo.config import ConfigError
from evo.evaluators import check_environment
from evo.lessons import seed_genomes
from evo.run import Run, new_run_info
from evo.store import open_store
from evo.strategies.ga import GeneticAlgorithm
from genomes.genes import GeneError
from tests.conftest import make_config

REGION = {"cluster": [2, 4], "load_cache": "nc"}


def test_samples_within_a_region_stay_inside_it_and_are_valid(synthetic_space):
    rng = random.Random(1)
    got = [synthetic_space.sample(rng, within=REGION) for _ in range(200)]
    assert all(g["cluster"] in (2, 4) and g["load_cache"] == "nc" for g in got)
    assert all(synthetic_space.is_valid(g.as_dict()) for g in got)
    assert {g["cluster"] for g in got} == {2, 4}          # both allowed values are drawn
    assert len({g["threads_per_row"] for g in got}) > 1   # genes outside the region still vary


def test_a_region_naming_an_unknown_gene_or_value_is_refused(synthetic_space):
    rng = random.Random(0)
    with pytest.raises(GeneError, match="no gene 'clusterr'"):
        synthetic_space.sample(rng, within={"clusterr": [2]})
    with pytest.raises(GeneError, match=r"gene 'cluster': 3 is not one of \[1, 2, 4\]"):
        synthetic_space.sample(rng, within={"cluster": [3]})
    with pytest.raises(GeneError, match="empty list"):
        synthetic_space.sample(rng, within={"cluster": []})


def test_a_region_the_constraints_exclude_is_an_error_not_a_silent_repair(monkeypatch):
    import genomes.space
    from genomes.rmsnorm import SPACE

    monkeypatch.setattr(genomes.space, "REGION_REPAIRS", 3)     # each repair of this space is a search

    # staging smem_async takes only default/cg/nc_ef loads (constraint async_copy_cache_ops)
    with pytest.raises(GeneError, match="no valid genome"):
        SPACE.sample(random.Random(0), tries=200, within={"staging": ["smem_async"], "load_cache": ["nc"]})


def test_rmsnorm_region_reaches_shared_memory_staging_uniform_sampling_rarely_does():
    from genomes.rmsnorm import SPACE

    rng = random.Random(3)
    region = {"staging": ["smem_async", "smem_bulk"], "cluster": [4, 8, 16]}
    got = [SPACE.sample(rng, within=region) for _ in range(40)]
    assert all(g["staging"] in region["staging"] and g["cluster"] in (4, 8, 16) for g in got)
    uniform = [SPACE.sample(rng) for _ in range(200)]
    share = sum(g["staging"] in region["staging"] and g["cluster"] >= 4 for g in uniform) / len(uniform)
    assert share < 0.25


def test_config_reads_the_region_as_lists_and_rejects_bad_shapes():
    cfg = make_config(search={"init_within": {"cluster": [2, 4], "load_cache": "nc"}, "seed_limit": 3})
    assert cfg.search.init_within == {"cluster": [2, 4], "load_cache": ["nc"]}
    assert cfg.search.seed_limit == 3
    assert make_config().search.init_within == {}
    with pytest.raises(ConfigError, match=r"search.init_within: expected a table"):
        make_config(search={"init_within": ["cluster"]})
    with pytest.raises(ConfigError, match=r"search.init_within.cluster: expected a non-empty list"):
        make_config(search={"init_within": {"cluster": [[2]]}})
    with pytest.raises(ConfigError, match=r"search.init_within.cluster: expected a non-empty list"):
        make_config(search={"init_within": {"cluster": []}})
    with pytest.raises(ConfigError, match=r"search.seed_limit: must be >= 0"):
        make_config(search={"seed_limit": -1})
    with pytest.raises(ConfigError, match=r"search.init_within: only search.strategy = 'ga'"):
        make_config(search={"strategy": "random", "init_within": {"cluster": [2]}})


def test_check_environment_names_the_bad_gene_and_its_legal_values():
    with pytest.raises(ConfigError) as info:
        check_environment(make_config(search={"init_within": {"clusterr": [2], "unroll": [9]}}))
    text = str(info.value)
    assert "search.init_within.clusterr: space 'synthetic' has no gene 'clusterr'" in text
    assert "search.init_within.unroll: gene 'unroll': 9 is not one of [1, 2, 3, 4]" in text
    check_environment(make_config(search={"init_within": REGION}))   # a good region passes


def test_seed_limit_keeps_the_first_seeds_and_the_region_fills_the_rest(synthetic_space, synthetic_table):
    cfg = make_config(search={"seed_from": str(synthetic_table.source), "seed_limit": 3, "init_within": REGION,
                              "ga": {"population": 8, "offspring": 8}},
                      budget={"evaluations": 24})
    seeds = seed_genomes(cfg, synthetic_space)
    unlimited = seed_genomes(make_config(search={"seed_from": str(synthetic_table.source),
                                                 "ga": {"population": 8, "offspring": 8}}), synthetic_space)
    assert len(seeds) == 3 and [g.key for g in seeds] == [g.key for g in unlimited[:3]]
    store = open_store("memory://")
    store.create_run(new_run_info(cfg, "region"))
    Run(cfg, synthetic_space, store, synthetic_table, "region", seeds=seeds).optimize()
    first = store.records("region")[:8]
    assert [r.operator for r in first] == ["seed"] * 3 + ["init"] * 5
    assert [r.key for r in first[:3]] == [g.key for g in seeds]
    for r in first[3:]:
        g = r.evaluation.genome
        assert g["cluster"] in (2, 4) and g["load_cache"] == "nc"


def test_ga_without_a_region_samples_the_whole_space(synthetic_space):
    ga = GeneticAlgorithm(synthetic_space, random.Random(0), "geomean_speedup",
                          make_config(search={"ga": {"population": 24, "offspring": 4}}).search.ga)
    init = ga.ask()
    assert len({c.genome["cluster"] for c in init}) == 3


def test_seed_variants_change_one_gene_of_each_seed_and_fill_the_room(synthetic_space, synthetic_table):
    cfg = make_config(search={"seed_from": str(synthetic_table.source), "seed_limit": 3,
                              "seed_variants": {"unroll": [1, 4]}, "seed_variants_of": 2,
                              "ga": {"population": 8, "offspring": 8}})
    seeds = seed_genomes(cfg, synthetic_space)
    plain = seeds[:3]
    variants = seeds[3:]
    expected = []
    for g in plain[:2]:
        for u in (1, 4):
            changed = {**dict(g), "unroll": u}
            if changed != dict(g) and synthetic_space.is_valid(changed):
                expected.append(synthetic_space.make(changed).key)
    seed_keys = {g.key for g in plain}      # a variant that is already a seed is not repeated
    assert [v.key for v in variants] == [k for k in dict.fromkeys(expected) if k not in seed_keys]
    assert len(variants) == 3
    for v in variants:      # exactly one gene differs from one of the first two seeds
        assert any(sum(dict(v)[k] != dict(g)[k] for k in dict(g)) == 1 for g in plain[:2])
    room = make_config(search={"seed_from": str(synthetic_table.source), "seed_limit": 3,
                               "seed_variants": {"unroll": [1, 2, 3, 4]}, "ga": {"population": 4, "offspring": 4}})
    assert len(seed_genomes(room, synthetic_space)) == 4          # never more than a population


def test_seed_variants_are_checked_against_the_space_and_need_seeds():
    with pytest.raises(ConfigError) as info:
        check_environment(make_config(search={"seed_from": "x.json", "seed_variants": {"unroll": [9]}}))
    assert "search.seed_variants.unroll: gene 'unroll': 9 is not one of [1, 2, 3, 4]" in str(info.value)
    with pytest.raises(ConfigError, match="search.seed_variants: variants are made of seeds"):
        make_config(search={"seed_variants": {"unroll": [2]}})


def test_seed_variants_relax_lifts_the_constraint_the_new_value_breaks(synthetic_space, synthetic_table):
    from evo.lessons import seed_variants

    seed = synthetic_space.make({"vector_bytes": 16, "load_cache": "nc", "streaming_store": True,
                                 "threads_per_row": 128, "rows_per_cta": 2, "cluster": 1, "stages": 1, "unroll": 1})
    base = {"seed_from": str(synthetic_table.source), "seed_variants": {"stages": [3]}}
    assert seed_variants(make_config(search=base), synthetic_space, [seed], room=4) == []   # 3 stages need unroll >= 2
    relaxed = seed_variants(make_config(search={**base, "seed_variants_relax": {"unroll": [1, 2, 4]}}),
                            synthetic_space, [seed], room=4)
    assert [(v["stages"], v["unroll"]) for v in relaxed] == [(3, 2)]          # the first value that fits
    assert {k for k in dict(seed) if dict(seed)[k] != relaxed[0][k]} == {"stages", "unroll"}
    with pytest.raises(ConfigError, match="search.seed_variants_relax: it qualifies seed variants"):
        make_config(search={"seed_from": "x.json", "seed_variants_relax": {"unroll": [2]}})


def test_seed_variants_within_picks_the_seeds_that_get_variants(synthetic_space, synthetic_table):
    from evo.lessons import seed_variants

    def seed(stages):
        return synthetic_space.make({"vector_bytes": 16, "load_cache": "nc", "streaming_store": True,
                                     "threads_per_row": 128, "rows_per_cta": 2, "cluster": 1, "stages": stages,
                                     "unroll": 3})
    cfg = make_config(search={"seed_from": str(synthetic_table.source), "seed_variants": {"unroll": [4]},
                              "seed_variants_within": {"stages": [2, 3]}})
    out = seed_variants(cfg, synthetic_space, [seed(1), seed(2), seed(3)], room=8)
    assert [(v["stages"], v["unroll"]) for v in out] == [(2, 4), (3, 4)]
    with pytest.raises(ConfigError) as info:
        check_environment(make_config(search={"seed_from": "x.json", "seed_variants": {"unroll": [4]},
                                              "seed_variants_within": {"stagess": [1]}}))
    assert "search.seed_variants_within.stagess" in str(info.value)


def _genome(space, **changes):
    return {**{"vector_bytes": 16, "load_cache": "nc", "streaming_store": True, "threads_per_row": 128,
               "rows_per_cta": 2, "cluster": 1, "stages": 1, "unroll": 1}, **changes}


def test_seed_genomes_follow_the_other_seeds_in_file_order(synthetic_space, synthetic_table, tmp_path):
    import json

    listed = [_genome(synthetic_space, unroll=2), {"genome": _genome(synthetic_space, unroll=3), "why": "kept"},
              _genome(synthetic_space, unroll=2)]                                   # a duplicate: once
    path = tmp_path / "seeds.json"
    path.write_text(json.dumps({"genomes": listed}))
    alone = seed_genomes(make_config(search={"seed_genomes": str(path)}), synthetic_space)
    assert [g["unroll"] for g in alone] == [2, 3]
    cfg = make_config(search={"seed_from": str(synthetic_table.source), "seed_limit": 2, "seed_genomes": str(path),
                              "ga": {"population": 3, "offspring": 3}})
    seeds = seed_genomes(cfg, synthetic_space)
    assert len(seeds) == 3 and seeds[2]["unroll"] == 2 and seeds[2] == synthetic_space.make(listed[0])  # room: 3


@pytest.mark.parametrize("content, message", [
    (None, "does not exist"),
    ("{", "is not valid JSON"),
    ('{"genome": []}', 'must hold an object with a "genomes" list'),
    ('{"genomes": [3]}', r"entries \[0\] are not genomes"),
    ('{"genomes": [{"unroll": 9}]}', "entry 0 is not valid in gene space"),
])
def test_a_bad_seed_genomes_file_is_a_config_error_naming_the_field(synthetic_space, tmp_path, content, message):
    path = tmp_path / "seeds.json"
    if content is not None:
        path.write_text(content)
    cfg = make_config(search={"seed_genomes": str(path)})
    with pytest.raises(ConfigError, match="search.seed_genomes") as info:
        seed_genomes(cfg, synthetic_space)
    assert info.match(message)


def test_check_environment_reports_a_bad_seed_genomes_file_before_the_run(tmp_path):
    with pytest.raises(ConfigError) as info:
        check_environment(make_config(search={"seed_genomes": str(tmp_path / "none.json")}))
    assert "search.seed_genomes" in str(info.value) and "does not exist" in str(info.value)
