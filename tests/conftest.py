"""Shared fixtures: the synthetic space, its recorded replay table, and config builders."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TABLE = REPO / "tests" / "data" / "synthetic_table.csv"


def pytest_collection_modifyitems(config, items):
    """GPU tests skip cleanly without a GPU stack; run them on the device with `pytest -m gpu`."""
    try:
        import cupy  # noqa: F401

        has_gpu = cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        has_gpu = False
    if has_gpu:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with cupy (run `pytest -m gpu` on the device)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def synthetic_space():
    from genomes.synthetic import SPACE

    return SPACE


@pytest.fixture(scope="session")
def synthetic_table(synthetic_space):
    from fitness.replay import ReplayEvaluator

    return ReplayEvaluator.from_file(TABLE, space=synthetic_space)


def make_config(**sections):
    """A replay config of the synthetic family with sections overridden, e.g. budget={...}."""
    from evo.config import from_dict

    data = {
        "experiment": {"name": "t", "family": "synthetic", "seed": 0},
        "evaluator": {"kind": "replay", "replay": str(TABLE)},
        "output": {"progress": False},
    }
    for name, value in sections.items():
        data.setdefault(name, {}).update(value)
    return from_dict(data)


def have_nvcc() -> bool:
    """Whether nvcc is on this machine (compile-heavy tests skip without it)."""
    from fitness.toolchain import ToolchainError, find_nvcc

    try:
        find_nvcc()
        return True
    except ToolchainError:
        return False


def gpu_or_skip() -> None:
    """Skip the calling GPU test unless cupy sees a CUDA device (the `gpu` marker selects the tests;
    this keeps them a skip, not an error, where one is selected on a machine without a GPU)."""
    cupy = pytest.importorskip("cupy")
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"no usable CUDA device: {exc}")
    if n < 1:
        pytest.skip("no CUDA device")


def subprocess_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.fixture(scope="session")
def ray_cluster():
    """A Ray of this machine for the Ray pool's tests, shared by them: 2 CPUs and 2 GPUs that are
    only a resource count (no GPU is touched: the runners are CPU stand-ins), the tests folder on
    the workers' path (tests/fake_runners.py). Yields the address other driver processes join
    (what `[evaluator] ray_address` takes); shut down at the end of the session."""
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[ray]' (the dev extra has it)")
    if ray.is_initialized():
        ray.shutdown()
    paths = os.pathsep.join([str(REPO), str(REPO / "tests")])
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": paths}})
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
