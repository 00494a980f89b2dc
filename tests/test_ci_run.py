"""`.ci/run` runs the README's test command verbatim, exits with its status, and stops the
PostgreSQL server it started (a copy of the script with the test command replaced is run)."""

from __future__ import annotations

import glob
import re
import shutil
import subprocess

import pytest

from tests.conftest import REPO

CI = REPO / ".ci" / "run"


def readme_test_command() -> str:
    text = (REPO / "README.md").read_text()
    block = text[text.index("**Run the tests**"):]
    return re.search(r"```bash\n(.+?)\n```", block, re.S).group(1).strip()


def test_ci_runs_the_readme_test_command_verbatim_and_cleans_up_on_exit():
    script = CI.read_text()
    assert readme_test_command() in script.splitlines()
    assert "trap cleanup EXIT" in script and "postgres.sh stop" in script


@pytest.mark.skipif(not glob.glob("/usr/lib/postgresql/*/bin/postgres") or shutil.which("bash") is None,
                    reason="no PostgreSQL server binaries under /usr/lib/postgresql")
def test_ci_stops_its_server_and_keeps_the_tests_exit_status(tmp_path):
    (tmp_path / ".ci").mkdir()
    shutil.copy(REPO / ".ci" / "postgres.sh", tmp_path / ".ci" / "postgres.sh")
    fake = 'echo "url=$EVO_TEST_POSTGRES_URL dir=$EVO_PG_DIR"; exit 7'
    (tmp_path / ".ci" / "run").write_text(CI.read_text().replace(readme_test_command(), fake))
    res = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], capture_output=True, text=True, timeout=120)
    assert res.returncode == 7, res.stderr
    pg_dir = re.search(r"dir=(\S+)", res.stdout).group(1)
    assert "stopped the server" in res.stderr
    assert not glob.glob(pg_dir)          # the folder it made is gone, the server with it
