"""experiments/device/cluster_occupancy.py on the CPU: which launches it asks the driver about (the
clustered main kernel of each clustered backward genome, per case it can run); the question itself
(cuOccupancyMaxActiveClusters) is tests/test_driver_launch.py's against a stand-in libcuda and the
device's to answer."""

from __future__ import annotations

import importlib.util

from fitness.family import load_family
from genomes import load_space
from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("cluster_occupancy", REPO / "experiments/device/cluster_occupancy.py")
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)


def test_it_asks_about_every_clustered_genome_of_the_table_and_the_seeds():
    space = load_space("rmsnorm_bwd")
    genomes = probe.genomes_of(REPO / "results" / "archive" / "session14" / "rmsnorm_bwd_dispatch.json",
                               [REPO / "experiments" / "seeds" / "rmsnorm_bwd_v5_sched_probe.json"], space)
    assert {"d30696bb", "c82157f8", "b7d1aedd", "fb4fbace"} <= set(genomes)
    assert all(int(g["cluster"]) > 1 for k, g in genomes.items() if k not in ("b7d1aedd", "fb4fbace"))
    family = type(load_family("rmsnorm_bwd"))(dtypes=("bf16",))
    cases = {c.id: c for c in family.benchmark_cases("quack:bf16")}
    one = probe.clustered_launch(family, genomes["d30696bb"], cases["bf16/8192x262144"])
    assert one is not None and tuple(one.cluster) == (16, 1, 1) and one.grid[0] == 128      # 8 clusters of 16
    assert probe.clustered_launch(family, genomes["d30696bb"], cases["bf16/32768x256"]) is None   # unclustered there
    assert probe.clustered_launch(family, genomes["c82157f8"], cases["bf16/8192x262144"]) is None  # cannot run it
