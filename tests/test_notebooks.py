"""Every notebook under experiments/notebooks runs top to bottom without a cell error.

The notebooks are executed with nbclient (kernel python3, 120 s per cell, working directory the
repository root). Without nbclient/nbformat/ipykernel (the `dev` extra) the test skips locally
with the reason, but fails in CI (CI=true), so that notebooks can never rot unexecuted there.
"""

from __future__ import annotations

import os

import pytest

from tests.conftest import REPO

NOTEBOOKS = sorted((REPO / "experiments" / "notebooks").glob("*.ipynb"))
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _require(module: str):
    try:
        return __import__(module)
    except ImportError as exc:
        msg = (f"{module} is not installed ({exc}); `pip install -e '.[dev]'` installs nbclient, "
               "nbformat and ipykernel")
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)


def test_there_are_notebooks():
    assert NOTEBOOKS, "experiments/notebooks holds no notebook"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes(path, monkeypatch):
    nbformat = _require("nbformat")
    _require("nbclient")
    _require("ipykernel")
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    # the kernel inherits the environment: make the repository importable
    monkeypatch.setenv("PYTHONPATH", str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, kernel_name="python3", timeout=120, allow_errors=False,
                            resources={"metadata": {"path": str(REPO)}})
    try:
        client.execute(cwd=str(REPO))
    except CellExecutionError as exc:
        pytest.fail(f"{path.relative_to(REPO)}: a cell failed:\n{exc}")
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", ())
              if o.get("output_type") == "error"]
    assert not errors, errors
