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


def subprocess_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env
