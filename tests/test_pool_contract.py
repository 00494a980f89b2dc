"""The pool contract (tests/pool_contract.py) against both pools: the local WorkerPool and the
RayPool on a local Ray cluster of 2 CPUs and 2 GPUs that are only a resource count."""

from __future__ import annotations

import pytest

pytest.register_assert_rewrite("pool_contract")

from pool_contract import PoolContract  # noqa: E402

from fitness.pool import Pool  # noqa: E402
from fitness.workers import WorkerPool  # noqa: E402


class TestLocalPool(PoolContract):
    @pytest.fixture
    def make_pool(self):
        return lambda size, **kw: WorkerPool(size, devices=[str(i) for i in range(size)], **kw)


class TestRayPool(PoolContract):
    @pytest.fixture
    def make_pool(self, ray_cluster):
        from fitness.ray_pool import RayPool

        return lambda size, **kw: RayPool(size, **kw)


def test_both_pools_implement_the_contract():
    from fitness.ray_pool import RayPool

    assert issubclass(WorkerPool, Pool) and issubclass(RayPool, Pool)
