"""The store contract on PostgreSQL. Needs a server: set EVO_TEST_POSTGRES_URL, e.g.

    eval "$(bash .ci/postgres.sh)"      # starts one and exports the variable

Each test works in a schema of its own (through the connection's search_path), dropped
afterwards, so tests are independent and reruns start clean.
"""

import os
import uuid

import pytest
import sqlalchemy as sa

pytest.register_assert_rewrite("store_contract")

from store_contract import StoreContract, record, run_info  # noqa: E402

from evo.store import SQLStore, StoreError  # noqa: E402

pytestmark = pytest.mark.postgres

URL = os.environ.get("EVO_TEST_POSTGRES_URL", "")
_HOW = "set EVO_TEST_POSTGRES_URL; .ci/postgres.sh starts one"


def _unreachable_reason() -> str | None:
    """Why the server cannot be used, or None. Only connects: creates nothing outside test schemas."""
    if not URL:
        return "PostgreSQL not reachable: EVO_TEST_POSTGRES_URL is not set; .ci/postgres.sh starts one"
    try:
        url = sa.make_url(URL)
        engine = sa.create_engine(url, connect_args={"connect_timeout": 5})
        try:
            with engine.connect():
                return None
        finally:
            engine.dispose()
    except Exception as e:  # any failure to connect means: skip, and say why
        shown = URL if isinstance(e, sa.exc.ArgumentError) else url.render_as_string(hide_password=True)
        detail = str(getattr(e, "orig", None) or e).strip().splitlines()[0]
        return f"PostgreSQL not reachable at {shown}: {_HOW} ({detail})"


_reason = _unreachable_reason()
if _reason:
    pytest.skip(_reason, allow_module_level=True)


@pytest.fixture
def schema_url():
    """A URL whose connections live in a fresh schema, and the schema dropped after the test."""
    schema = f"evo_test_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(URL)
    try:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        yield sa.make_url(URL).update_query_dict({"options": f"-csearch_path={schema}"}) \
            .render_as_string(hide_password=False)
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
    finally:
        admin.dispose()


class TestPostgresStore(StoreContract):
    persistent = True

    @pytest.fixture
    def make_store(self, schema_url):
        return lambda: SQLStore(schema_url)


def test_tables_live_in_their_schema(schema_url):
    with SQLStore(schema_url) as store:
        store.create_run(run_info())
        store.append(record("run-1", "k0"))
        with store._engine.connect() as conn:
            schema = conn.exec_driver_sql("SELECT current_schema()").scalar_one()
            tables = set(conn.exec_driver_sql(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()").scalars())
    assert schema.startswith("evo_test_") and tables == {"evo_runs", "evo_records", "evo_events", "evo_lessons"}


def test_shares_database_with_optuna(schema_url):
    optuna = pytest.importorskip("optuna")
    with SQLStore(schema_url) as store:
        store.create_run(run_info())
        study = optuna.create_study(storage=optuna.storages.RDBStorage(schema_url), study_name="knobs")
        study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
        store.append(record("run-1", "k0"))
        assert store.count("run-1") == 1 and len(study.trials) == 2


def test_missing_database_is_store_error():
    url = sa.make_url(URL).set(database=f"evo_missing_{uuid.uuid4().hex[:8]}")
    with pytest.raises(StoreError) as info:
        SQLStore(url.render_as_string(hide_password=False))
    assert url.database in str(info.value) and "does not exist" in str(info.value)
