"""The store contract on an SQLite file, plus what a file shared by processes must survive."""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.register_assert_rewrite("store_contract")

from store_contract import StoreContract, record, run_info  # noqa: E402

from evo.store import SQLStore, open_store, sqlite_url  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def db_url(tmp_path):
    return sqlite_url(tmp_path / "runs" / "evo.db")


class TestSQLiteStore(StoreContract):
    persistent = True

    @pytest.fixture
    def make_store(self, db_url):
        return lambda: SQLStore(db_url)


def test_creates_parent_directory_and_uses_wal(tmp_path):
    path = tmp_path / "a" / "b" / "evo.db"
    with open_store(sqlite_url(path)) as store:
        assert isinstance(store, SQLStore)
        store.create_run(run_info())
    assert path.is_file()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert {"evo_runs", "evo_records"} <= {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}


def test_two_stores_on_one_file_see_each_others_writes(db_url):
    with SQLStore(db_url) as writer, SQLStore(db_url) as reader:
        writer.create_run(run_info())
        assert reader.get_run("run-1").family == "rmsnorm"
        writer.append(record("run-1", "k0"))
        assert [r.key for r in reader.records("run-1")] == ["k0"]
        reader.append(record("run-1", "k1"))
        assert writer.count("run-1") == 2 and writer.records("run-1", since_seq=0)[0].key == "k1"


def test_reader_not_blocked_by_open_write_transaction(tmp_path, db_url):
    """`evo status` must answer while the run holds the write lock."""
    with SQLStore(db_url) as store:
        store.create_run(run_info())
        other = sqlite3.connect(tmp_path / "runs" / "evo.db", isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("UPDATE evo_runs SET state = 'failed'")
            assert store.get_run("run-1").state == "running"     # sees the last commit, at once
            other.execute("ROLLBACK")
        finally:
            other.close()


def test_record_survives_sigkill_right_after_append(tmp_path, db_url):
    with SQLStore(db_url) as store:
        store.create_run(run_info())
    child = textwrap.dedent(f"""
        import os, signal
        from evo.store import SQLStore
        from fitness.records import Evaluation, Status
        from evo.store.base import Record
        store = SQLStore({db_url!r})
        ev = Evaluation(key="killed", genome={{"x": 1}}, space="s", status=Status.OK, objectives={{"tbps": 2.5}})
        store.append(Record("run-1", ev))
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    with SQLStore(db_url) as store:
        rec = store.get_record("run-1", "killed")
        assert rec is not None and rec.fitness("tbps") == 2.5 and rec.seq == 0


def test_shares_database_with_optuna(db_url):
    """The Optuna stage keeps its study in the run's database; neither may disturb the other."""
    optuna = pytest.importorskip("optuna")
    with SQLStore(db_url) as store:
        store.create_run(run_info())
        store.append(record("run-1", "k0"))
    study = optuna.create_study(storage=optuna.storages.RDBStorage(db_url), study_name="knobs",
                                direction="maximize")
    study.optimize(lambda t: -(t.suggest_float("x", -1, 1) ** 2), n_trials=3)
    with SQLStore(db_url) as store:
        store.append(record("run-1", "k1"))
        assert store.count("run-1") == 2
    assert len(optuna.load_study(study_name="knobs", storage=db_url).trials) == 3


def test_in_memory_sqlite_url():
    with open_store("sqlite://") as store:
        store.create_run(run_info())
        store.append(record("run-1", "k0"))
        assert store.keys("run-1") == {"k0"}


def test_sqlite_url_is_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert sqlite_url("runs/evo.db") == f"sqlite:///{tmp_path.resolve()}/runs/evo.db"
    assert sqlite_url(tmp_path / "x.db") == f"sqlite:///{tmp_path.resolve()}/x.db"
