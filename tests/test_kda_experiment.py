"""experiments/kda_fwd_h200.toml, the KDA search's config, on the CPU: it loads and passes the
engine's environment checks, judges what the issue asks (FlashKDA's six scenarios, the worst
one's speedup over FlashKDA, a stop at 1.3x), and its first population's region is the compact
split pair on mma.sync, all-bf16, overlapped (v7 pdl, v10 tail) or not, the table's genomes included."""

from __future__ import annotations

import random

from fitness.family import load_family
from genomes.kda import NAMED, SPACES

from tests.conftest import REPO

CONFIG = REPO / "experiments" / "kda_fwd_h200.toml"


def test_config_loads_and_names_the_issues_target():
    from evo.config import load_config
    from evo.evaluators import check_environment

    cfg = load_config(CONFIG)
    check_environment(cfg)
    family = load_family(cfg.experiment.family)
    cases = family.benchmark_cases(cfg.benchmark.matrix)
    assert sorted(c.id for c in cases) == sorted(c.id for c in family.benchmark_cases("flashkda")) and len(cases) == 6
    assert cfg.objective.metric == "min_speedup" and cfg.budget.target == 1.3
    assert cfg.objective.baseline in {b.name for b in family.baselines()}
    assert cfg.experiment.space_version == "v10" and cfg.evaluator.kind == "gpu" and cfg.benchmark.check


def test_first_population_region_is_the_compact_split_pair_overlapped_or_not():
    from evo.config import load_config

    cfg = load_config(CONFIG)
    space = SPACES[cfg.experiment.space_version]          # the version the search runs under (v10)
    region = cfg.search.init_within
    inside = [g for g in space.enumerate() if all(g[k] in v for k, v in region.items())]
    # all-bf16 (split_s = split_u = false since v10): without the overlap, order (2) at rec_v_split 1, 2,
    # 4 for each prep (compact, tight); with v7's (index order): pdl2 at 1, 2, 4 and pdl3 at 2, 4, what
    # the budget allows (compact only); v9's kda_rec at 128 registers at rec_v_split 1 and 2 (2 orders x
    # 2 splits x 2 preps); v10's tail on every one of them without the overlap
    none = 2 * 6 + 8
    assert len(inside) == none + 5 + none and all(g["kernels"] == "split" and g["prep"] in ("compact", "tight") for g in inside)
    assert {g["prep_overlap"] for g in inside} == {"none", "pdl", "tail"}
    assert not any(g["split_s"] or g["split_u"] for g in inside)
    keys = {g.key for g in inside}
    for name in ("split-bf16-compact", "split-bf16-v2-compact", "split-bf16-v2-compact-pdl3",
                 "split-bf16-v4-compact-pdl3", "split-bf16-v2-compact-pdl2", "split-bf16-v2-tight",
                 "split-bf16-v2-compact-longest", "split-bf16-v2-tight-r4", "split-bf16-tight-r2",
                 "split-bf16-tight-r2-tail", "split-bf16-v2-tight-tail", "split-bf16-v2-tight-longest-tail", "split-bf16-tight-r2-longest"):
        assert NAMED[name].key in keys, name
    drawn = [space.sample(random.Random(cfg.experiment.seed + i), within=region) for i in range(8)]
    assert all(g.key in keys for g in drawn)
