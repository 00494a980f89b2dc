"""SQLStore: the store contract on SQLAlchemy Core, for SQLite files and PostgreSQL.

One schema for every database. Evaluations are stored whole as JSON text, so a record reads back
exactly as it was appended whatever the record types grow; the few columns a query filters on
(key, status, space, generation, stage) are copied out beside it. Table names start with `evo_`
because Optuna's RDBStorage keeps its studies in the same database.

SQLite is tuned for one writer (the run) and readers in other processes (`evo status`, a
notebook): WAL journal, a busy timeout, `BEGIN IMMEDIATE` for writes so two writers queue
instead of failing, and `synchronous=FULL` so a commit survives a crash of the process or the
machine. Evaluations take seconds each, so an fsync per record costs nothing that matters.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import numbers
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator, Mapping

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine

from evo.store.base import (RUN_STATES, DuplicateRecord, LessonRecord, Record, RunInfo, RunNotFound, Store,
                            StoreError, newest_lessons)
from fitness.records import Evaluation, Status

SQLITE_BUSY_TIMEOUT_S = 30.0     # how long a writer waits for another process's transaction
CONNECT_TIMEOUT_S = 10           # PostgreSQL: fail fast when the host does not answer

_POSTGRES_HINT = "is the PostgreSQL server running and reachable, and do the user, password and database exist?"
_DRIVER_HINT = "is the driver installed? For PostgreSQL: pip install 'ptx-kernel-factory[postgres]' (psycopg2-binary)"
_URL_HINT = "use memory://, sqlite:///PATH or postgresql+psycopg2://USER@HOST:PORT/DB"

# The schema is a constant declaration, shared by every SQLStore; each store has its own engine.
_metadata = sa.MetaData()
_Id = sa.String(255)
_Float = sa.Double()

RUNS = sa.Table(
    "evo_runs", _metadata,
    sa.Column("run_id", _Id, primary_key=True),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("family", sa.String(255), nullable=False),
    sa.Column("seed", sa.BigInteger, nullable=False),
    sa.Column("config", sa.Text, nullable=False),        # JSON
    sa.Column("created_at", _Float, nullable=False),     # epoch seconds, as in RunInfo
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("elapsed_s", _Float, nullable=False),
    sa.Column("notes", sa.Text, nullable=False),         # JSON
)

RECORDS = sa.Table(
    "evo_records", _metadata,
    # SQLite only autoincrements a column declared exactly INTEGER PRIMARY KEY.
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("run_id", _Id, sa.ForeignKey("evo_runs.run_id"), nullable=False),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("key", sa.String(255), nullable=False, index=True),   # cross-run lookups of a genome
    sa.Column("genome", sa.Text, nullable=False),                   # JSON, copied out for queries
    sa.Column("space", sa.String(255), nullable=False),
    sa.Column("generation", sa.Integer, nullable=False),
    sa.Column("stage", sa.String(64), nullable=False),
    sa.Column("operator", sa.String(255), nullable=False),
    sa.Column("parents", sa.Text, nullable=False),                  # JSON list of keys
    sa.Column("status", sa.String(32), nullable=False, index=True),
    sa.Column("evaluation", sa.Text, nullable=False),               # JSON, the whole Evaluation
    sa.Column("recorded_at", _Float, nullable=False),
    sa.UniqueConstraint("run_id", "key", name="uq_evo_records_run_key"),
    sa.UniqueConstraint("run_id", "seq", name="uq_evo_records_run_seq"),
)

EVENTS = sa.Table(
    "evo_events", _metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("run_id", _Id, sa.ForeignKey("evo_runs.run_id"), nullable=False, index=True),
    sa.Column("kind", sa.String(64), nullable=False),
    sa.Column("idx", sa.Integer, nullable=False),                   # position among the run's events of its kind
    sa.Column("payload", sa.Text, nullable=False),                  # JSON
    sa.Column("recorded_at", _Float, nullable=False),
    sa.UniqueConstraint("run_id", "kind", "idx", name="uq_evo_events_run_kind_idx"),
)

LESSONS = sa.Table(
    "evo_lessons", _metadata,
    # the id orders lessons (Record.seq for lessons): a newer build of a key has a larger one
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("family", sa.String(255), nullable=False, index=True),
    sa.Column("space_version", sa.String(64), nullable=False),
    sa.Column("arch", sa.String(64), nullable=False),
    sa.Column("shape_class", sa.String(255), nullable=False),
    sa.Column("sources", sa.Text, nullable=False),                  # JSON list
    sa.Column("payload", sa.Text, nullable=False),                  # JSON (evo.lesson_build)
    sa.Column("created_at", _Float, nullable=False),
)

_RECORD_COLUMNS = (RECORDS.c.run_id, RECORDS.c.seq, RECORDS.c.generation, RECORDS.c.stage,
                   RECORDS.c.operator, RECORDS.c.parents, RECORDS.c.evaluation, RECORDS.c.recorded_at)


class SQLStore(Store):
    """A store in any database SQLAlchemy reaches. Connects in the constructor, so a bad URL fails
    at once with a StoreError that names it, rather than deep inside a run.

    `url` keeps the URL as given (a worker process needs it to reopen the store); messages and
    repr() show it with the password masked.
    """

    def __init__(self, url: str, *, echo: bool = False) -> None:
        self.url = url
        parsed = _parse(url)
        self._shown = parsed.render_as_string(hide_password=True)
        self._engine, shared = _engine(parsed, self._shown, echo)
        # An in-memory SQLite database lives in one connection that all threads share.
        self._lock: contextlib.AbstractContextManager = threading.RLock() if shared else contextlib.nullcontext()
        try:
            self._create_tables()
        except sa.exc.DBAPIError as e:
            self._engine.dispose()
            raise StoreError(_cannot_open(self._shown, parsed, e)) from None

    def __repr__(self) -> str:
        return f"SQLStore({self._shown!r})"

    def close(self) -> None:
        self._engine.dispose()

    # runs -----------------------------------------------------------------------------------
    def create_run(self, info: RunInfo) -> RunInfo:
        _check_state(info.state)
        row = dict(run_id=info.run_id, name=info.name, family=info.family, seed=int(info.seed),
                   config=_dumps(info.config), created_at=float(info.created_at), state=info.state,
                   elapsed_s=float(info.elapsed_s), notes=_dumps(info.notes))
        try:
            with self._tx(write=True) as conn:
                if conn.execute(sa.select(RUNS.c.run_id).where(RUNS.c.run_id == info.run_id)).first():
                    raise ValueError(f"run id {info.run_id!r} is already taken")
                conn.execute(sa.insert(RUNS).values(**row))
        except sa.exc.IntegrityError:
            # Another process created the same id between our check and our insert.
            raise ValueError(f"run id {info.run_id!r} is already taken") from None
        return _run_info(row)

    def get_run(self, run_id: str) -> RunInfo:
        with self._tx() as conn:
            row = conn.execute(sa.select(RUNS).where(RUNS.c.run_id == run_id)).mappings().first()
        if row is None:
            raise RunNotFound(run_id)
        return _run_info(row)

    def list_runs(self) -> list[RunInfo]:
        with self._tx() as conn:
            rows = conn.execute(sa.select(RUNS).order_by(RUNS.c.created_at, RUNS.c.run_id)).mappings().all()
        return [_run_info(r) for r in rows]

    def update_run(self, run_id: str, *, state: str | None = None, elapsed_s: float | None = None,
                   notes: Mapping[str, Any] | None = None) -> RunInfo:
        if state is not None:
            _check_state(state)
        with self._tx(write=True) as conn:
            row = conn.execute(sa.select(RUNS).where(RUNS.c.run_id == run_id).with_for_update()).mappings().first()
            if row is None:
                raise RunNotFound(run_id)
            info = _run_info(row)
            changes: dict[str, Any] = {}
            if state is not None:
                changes["state"] = state
            if elapsed_s is not None:
                changes["elapsed_s"] = float(elapsed_s)
            if notes is not None:
                changes["notes"] = json.loads(_dumps({**info.notes, **notes}))
            if changes:
                values = dict(changes)
                if "notes" in values:
                    values["notes"] = _dumps(values["notes"])
                conn.execute(sa.update(RUNS).where(RUNS.c.run_id == run_id).values(**values))
        return replace(info, **changes)

    # records --------------------------------------------------------------------------------
    def append(self, record: Record) -> Record:
        ev = record.evaluation
        recorded_at = time.time()
        duplicate = f"genome {record.key} is already recorded in run {record.run_id!r}"
        try:
            with self._tx(write=True) as conn:
                # Locking the run row serialises appends to one run on PostgreSQL, so the
                # max(seq)+1 below cannot race (SQLite already serialises writers).
                if conn.execute(sa.select(RUNS.c.run_id).where(RUNS.c.run_id == record.run_id)
                                .with_for_update()).first() is None:
                    raise RunNotFound(record.run_id)
                if conn.execute(sa.select(RECORDS.c.id).where(RECORDS.c.run_id == record.run_id,
                                                              RECORDS.c.key == ev.key)).first():
                    raise DuplicateRecord(duplicate)
                seq = conn.execute(sa.select(sa.func.coalesce(sa.func.max(RECORDS.c.seq), -1) + 1)
                                   .where(RECORDS.c.run_id == record.run_id)).scalar_one()
                conn.execute(sa.insert(RECORDS).values(
                    run_id=record.run_id, seq=seq, key=ev.key, genome=_dumps(ev.genome), space=ev.space,
                    generation=int(record.generation), stage=record.stage, operator=record.operator,
                    parents=_dumps(list(record.parents)), status=Status(ev.status).value,
                    evaluation=_dumps(ev.to_dict()), recorded_at=recorded_at))
        except sa.exc.IntegrityError as e:
            # Only reachable when a writer that bypasses the run lock got there first.
            if self.get_record(record.run_id, ev.key) is not None:
                raise DuplicateRecord(duplicate) from None
            raise StoreError(f"store {self._shown}: cannot append to run {record.run_id!r}: {_first_line(e)}") from None
        return record.stamped(seq=seq, recorded_at=recorded_at)

    def records(self, run_id: str, *, since_seq: int = -1) -> list[Record]:
        return self._select(run_id, RECORDS.c.seq > since_seq)

    def get_record(self, run_id: str, key: str) -> Record | None:
        found = self._select(run_id, RECORDS.c.key == key)
        return found[0] if found else None

    def count(self, run_id: str) -> int:
        with self._tx() as conn:
            n = conn.execute(sa.select(sa.func.count()).select_from(RECORDS)
                             .where(RECORDS.c.run_id == run_id)).scalar_one()
            if n == 0:
                self._require_run(conn, run_id)
        return int(n)

    def keys(self, run_id: str) -> set[str]:
        with self._tx() as conn:
            keys = set(conn.execute(sa.select(RECORDS.c.key).where(RECORDS.c.run_id == run_id)).scalars())
            if not keys:
                self._require_run(conn, run_id)
        return keys

    def best(self, run_id: str, metric: str) -> Record | None:
        # Only OK records can have a fitness; skip decoding the failures. Same rule as Store.best.
        scored = [r for r in self._select(run_id, RECORDS.c.status == Status.OK.value)
                  if r.fitness(metric) is not None]
        return max(scored, key=lambda r: (r.fitness(metric), -r.seq)) if scored else None

    # events ---------------------------------------------------------------------------------
    def append_event(self, run_id: str, kind: str, payload: Mapping[str, Any]) -> int:
        with self._tx(write=True) as conn:
            if conn.execute(sa.select(RUNS.c.run_id).where(RUNS.c.run_id == run_id).with_for_update()).first() is None:
                raise RunNotFound(run_id)
            index = conn.execute(sa.select(sa.func.coalesce(sa.func.max(EVENTS.c.idx), -1) + 1)
                                 .where(EVENTS.c.run_id == run_id, EVENTS.c.kind == kind)).scalar_one()
            conn.execute(sa.insert(EVENTS).values(run_id=run_id, kind=kind, idx=int(index),
                                                  payload=_dumps(dict(payload)), recorded_at=time.time()))
        return int(index)

    def events(self, run_id: str, kind: str | None = None) -> list[dict[str, Any]]:
        where = [EVENTS.c.run_id == run_id] + ([EVENTS.c.kind == kind] if kind is not None else [])
        with self._tx() as conn:
            rows = conn.execute(sa.select(EVENTS.c.kind, EVENTS.c.idx, EVENTS.c.payload).where(*where)
                                .order_by(EVENTS.c.id)).all()
            if not rows:
                self._require_run(conn, run_id)
        return [{**json.loads(r.payload), "kind": r.kind, "index": int(r.idx)} for r in rows]

    # lessons --------------------------------------------------------------------------------
    def append_lesson(self, lesson: LessonRecord) -> LessonRecord:
        with self._tx(write=True) as conn:
            result = conn.execute(sa.insert(LESSONS).values(
                family=lesson.family, space_version=lesson.space_version, arch=lesson.arch,
                shape_class=lesson.shape_class, sources=_dumps(list(lesson.sources)),
                payload=_dumps(dict(lesson.payload)), created_at=float(lesson.created_at)))
            seq = int(result.inserted_primary_key[0])
        return replace(lesson, payload=json.loads(_dumps(dict(lesson.payload))), sources=tuple(lesson.sources),
                       seq=seq)

    def lessons(self, *, family: str | None = None, space_version: str | None = None, arch: str | None = None,
                shape_class: str | None = None, latest: bool = True) -> list[LessonRecord]:
        where = [col == v for col, v in ((LESSONS.c.family, family), (LESSONS.c.space_version, space_version),
                                          (LESSONS.c.arch, arch), (LESSONS.c.shape_class, shape_class))
                 if v is not None]
        with self._tx() as conn:
            rows = conn.execute(sa.select(LESSONS).where(*where).order_by(LESSONS.c.id)).mappings().all()
        found = [LessonRecord(family=r["family"], space_version=r["space_version"], arch=r["arch"],
                              shape_class=r["shape_class"], payload=json.loads(r["payload"]),
                              sources=tuple(json.loads(r["sources"])), created_at=float(r["created_at"]),
                              seq=int(r["id"])) for r in rows]
        return newest_lessons(found, latest=latest)

    # helpers --------------------------------------------------------------------------------
    def _select(self, run_id: str, *where: Any) -> list[Record]:
        """The run's records matching `where`, in seq order; RunNotFound if the run is absent."""
        with self._tx() as conn:
            rows = conn.execute(sa.select(*_RECORD_COLUMNS).where(RECORDS.c.run_id == run_id, *where)
                                .order_by(RECORDS.c.seq)).all()
            if not rows:
                self._require_run(conn, run_id)
        return [_record(r) for r in rows]

    @staticmethod
    def _require_run(conn: Connection, run_id: str) -> None:
        if conn.execute(sa.select(RUNS.c.run_id).where(RUNS.c.run_id == run_id)).first() is None:
            raise RunNotFound(run_id)

    @contextlib.contextmanager
    def _tx(self, *, write: bool = False) -> Iterator[Connection]:
        """One transaction, committed on normal exit. `write` asks SQLite for the write lock up
        front (BEGIN IMMEDIATE): a read that later upgrades to a write could otherwise fail with
        SQLITE_BUSY when another process wrote in between, and the busy timeout cannot help."""
        with self._lock:
            try:
                with self._engine.connect() as conn:
                    if write:
                        conn = conn.execution_options(evo_write=True)
                    with conn.begin():
                        yield conn
            except (sa.exc.OperationalError, sa.exc.InterfaceError) as e:
                raise StoreError(f"store {self._shown}: {_first_line(e)}") from None

    def _create_tables(self) -> None:
        # In one write transaction: on SQLite a deferred read-then-CREATE fails at once (no busy
        # wait) when another process, e.g. `evo status` or a test polling the store, holds a lock.
        def create() -> None:
            with self._engine.connect() as conn:
                conn = conn.execution_options(evo_write=True)
                with conn.begin():
                    _metadata.create_all(conn, checkfirst=True)

        try:
            create()
        except sa.exc.DBAPIError as e:
            # Another process created them between our check and our CREATE; check again.
            if "already exists" not in str(e.orig):
                raise
            create()


# engine -------------------------------------------------------------------------------------
def _parse(url: str) -> URL:
    try:
        parsed = sa.make_url(url)
    except (sa.exc.ArgumentError, ValueError, TypeError):
        raise StoreError(f"cannot parse store URL {url!r}: {_URL_HINT}") from None
    if parsed.drivername == "postgresql" and _importable("psycopg2"):
        # SQLAlchemy 2.1 defaults to psycopg 3; our [postgres] extra installs psycopg2.
        parsed = parsed.set(drivername="postgresql+psycopg2")
    return parsed


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _engine(url: URL, shown: str, echo: bool) -> tuple[Engine, bool]:
    """The engine for a URL, and whether all threads share one connection (in-memory SQLite)."""
    kw: dict[str, Any] = {"echo": echo}
    backend = url.get_backend_name()
    shared = False
    if backend == "sqlite":
        shared = url.database in (None, "", ":memory:") or url.query.get("mode") == "memory"
        if shared:
            kw.update(poolclass=sa.pool.StaticPool, connect_args={"check_same_thread": False})
        else:
            _make_parent_dir(url, shown)
    else:
        kw["pool_pre_ping"] = True      # a long run outlives server restarts and idle timeouts
    try:
        if url.get_driver_name() == "psycopg2" and "connect_timeout" not in url.query:
            kw["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT_S}
        engine = sa.create_engine(url, **kw)
    except sa.exc.NoSuchModuleError:
        raise StoreError(f"cannot open store {shown}: unknown database or driver {url.drivername!r}; {_URL_HINT}") from None
    except ImportError as e:
        raise StoreError(f"cannot open store {shown}: cannot import the driver for {url.drivername!r} "
                         f"({e.name or e}); {_DRIVER_HINT}") from None
    if backend == "sqlite":
        _tune_sqlite(engine)
    return engine, shared


def _make_parent_dir(url: URL, shown: str) -> None:
    if url.query.get("uri") or str(url.database).startswith("file:"):
        return
    try:
        Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(f"cannot open store {shown}: cannot create its directory: {e.strerror or e}; "
                         "is the path writable?") from None


def _tune_sqlite(engine: Engine) -> None:
    """Pragmas on every new connection, and explicit BEGINs (pysqlite's own implicit
    transactions start late and would make BEGIN IMMEDIATE impossible)."""

    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        cur.execute("PRAGMA journal_mode=WAL")     # readers never block the writer, nor it them
        cur.execute("PRAGMA synchronous=FULL")     # a commit is on disk when append returns
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    def on_begin(conn: Connection) -> None:
        mode = "IMMEDIATE" if conn.get_execution_options().get("evo_write") else "DEFERRED"
        conn.exec_driver_sql(f"BEGIN {mode}")

    sa.event.listen(engine, "connect", on_connect)
    sa.event.listen(engine, "begin", on_begin)


def _cannot_open(shown: str, url: URL, e: Exception) -> str:
    backend = url.get_backend_name()
    if backend == "postgresql":
        hint = _POSTGRES_HINT
    elif backend == "sqlite":
        hint = "is the path a writable SQLite file?"
    else:
        hint = "is the database server running and the URL right?"
    return f"cannot open store {shown}: {_first_line(e)}; {hint}"


def _first_line(e: Exception) -> str:
    """The driver's own message without SQLAlchemy's statement dump and links."""
    text = str(getattr(e, "orig", None) or e).strip()
    return text.splitlines()[0].strip() if text else type(e).__name__


# rows <-> records ---------------------------------------------------------------------------
def _check_state(state: str) -> None:
    if state not in RUN_STATES:
        raise ValueError(f"run state {state!r} is not one of {', '.join(RUN_STATES)}")


def _jsonable(obj: Any) -> Any:
    """Plain JSON values: numpy scalars become Python numbers, tuples lists, and non-finite
    floats None (JSON has no NaN; a non-finite objective has no fitness anyway)."""
    if obj is None or isinstance(obj, (str, bool)):
        return obj
    if isinstance(obj, numbers.Integral):
        return int(obj)
    if isinstance(obj, numbers.Real):
        f = float(obj)
        return f if math.isfinite(f) else None
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in obj]
    raise TypeError(f"cannot store a {type(obj).__name__} as JSON: {obj!r}")


def _dumps(obj: Any) -> str:
    return json.dumps(_jsonable(obj), allow_nan=False, separators=(",", ":"))


def _run_info(row: Mapping[str, Any]) -> RunInfo:
    return RunInfo(run_id=row["run_id"], name=row["name"], family=row["family"], seed=int(row["seed"]),
                   config=json.loads(row["config"]), created_at=float(row["created_at"]),
                   state=row["state"], elapsed_s=float(row["elapsed_s"]), notes=json.loads(row["notes"]))


def _record(row: Any) -> Record:
    d = json.loads(row.evaluation)
    # An objective stored as null was not finite; dropping it keeps its fitness None.
    d["objectives"] = {k: v for k, v in (d.get("objectives") or {}).items() if v is not None}
    return Record(run_id=row.run_id, evaluation=Evaluation.from_dict(d), generation=row.generation,
                  stage=row.stage, operator=row.operator, parents=tuple(json.loads(row.parents)),
                  seq=row.seq, recorded_at=float(row.recorded_at))
