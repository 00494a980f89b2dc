"""The store contract: runs and their append-only evaluation records.

Every backend (in-memory, SQLite, PostgreSQL through SQLAlchemy) passes the same contract
suite (tests/store_contract.py), in the way Optuna tests its storages. Records are append-only
and unique per (run, genome key): a resumed run can never record the same evaluation twice, and
nothing recorded is ever rewritten.
"""

from __future__ import annotations

import abc
import time
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from fitness.records import Evaluation, Status


class StoreError(RuntimeError):
    """The store cannot be reached or used; the message says which URL and why."""


class RunNotFound(KeyError):
    pass


class DuplicateRecord(ValueError):
    """An evaluation of this genome is already recorded in this run."""


RUN_STATES = ("running", "finished", "interrupted", "failed")


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    name: str
    family: str
    seed: int
    config: Mapping[str, Any] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)
    state: str = "running"
    elapsed_s: float = 0.0      # wall time spent in all sessions of the run (resume adds to it)
    notes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Record:
    """An Evaluation plus where it came from in the search."""

    run_id: str
    evaluation: Evaluation
    generation: int = 0
    stage: str = "ga"
    operator: str = "init"
    parents: tuple[str, ...] = ()
    seq: int = -1              # position in the run, assigned by the store on append
    recorded_at: float = 0.0   # assigned by the store on append

    @property
    def key(self) -> str:
        return self.evaluation.key

    @property
    def status(self) -> Status:
        return self.evaluation.status

    def fitness(self, metric: str) -> float | None:
        return self.evaluation.fitness(metric)

    def stamped(self, seq: int, recorded_at: float) -> "Record":
        return replace(self, seq=seq, recorded_at=recorded_at)


@dataclass(frozen=True)
class LessonRecord:
    """What earlier runs taught about one (family, space version, GPU architecture, shape class):
    the payload evo.lesson_build writes (elites with their per-case evidence, failure signatures,
    gene effects with the surrogate's cross-validated error) and the runs it was built from.

    Lessons are append-only like records: building them again appends a newer record for the
    same key, and readers take the newest (`Store.lessons(latest=True)`), so what a run used can
    always be found again by its `seq`."""

    family: str
    space_version: str
    arch: str
    shape_class: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    sources: tuple[str, ...] = ()        # run ids / files the lessons were built from
    created_at: float = field(default_factory=time.time)
    seq: int = -1                        # assigned by the store on append: increases with every lesson

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.family, self.space_version, self.arch, self.shape_class)


def newest_lessons(lessons: Iterable[LessonRecord], *, family: str | None = None, space_version: str | None = None,
                   arch: str | None = None, shape_class: str | None = None,
                   latest: bool = True) -> list[LessonRecord]:
    """The lessons matching every given key field, in append order; with `latest`, only the
    newest of each key (every backend filters through this, so they agree)."""
    want = {"family": family, "space_version": space_version, "arch": arch, "shape_class": shape_class}
    out = [x for x in lessons if all(v is None or getattr(x, k) == v for k, v in want.items())]
    out.sort(key=lambda x: x.seq)
    if latest:
        newest = {x.key: x for x in out}
        out = [x for x in out if newest[x.key] is x]
    return out


def best_record(records: Iterable[Record], metric: str) -> Record | None:
    """The record with the highest fitness; the earliest wins a tie. None if none has a fitness."""
    scored = [r for r in records if r.fitness(metric) is not None]
    return max(scored, key=lambda r: (r.fitness(metric), -r.seq)) if scored else None


class Store(abc.ABC):
    """Runs and their records. Implementations must be safe to reopen after a crash."""

    url: str = ""

    # runs -----------------------------------------------------------------------------------
    @abc.abstractmethod
    def create_run(self, info: RunInfo) -> RunInfo:
        """Register a new run; ValueError if the id is taken."""

    @abc.abstractmethod
    def get_run(self, run_id: str) -> RunInfo:
        """RunNotFound if absent."""

    @abc.abstractmethod
    def list_runs(self) -> list[RunInfo]:
        """All runs, oldest first."""

    @abc.abstractmethod
    def update_run(self, run_id: str, *, state: str | None = None, elapsed_s: float | None = None,
                   notes: Mapping[str, Any] | None = None) -> RunInfo:
        """Change a run's mutable fields (never its records); notes are merged."""

    # records ----------------------------------------------------------------------------------
    @abc.abstractmethod
    def append(self, record: Record) -> Record:
        """Add one record atomically; returns it with seq and recorded_at set.

        RunNotFound for an unknown run, DuplicateRecord if the key is already in the run.
        """

    @abc.abstractmethod
    def records(self, run_id: str, *, since_seq: int = -1) -> list[Record]:
        """The run's records with seq > since_seq, in append order."""

    @abc.abstractmethod
    def get_record(self, run_id: str, key: str) -> Record | None:
        """The run's record for a genome key, if any."""

    # events -----------------------------------------------------------------------------------
    # What a run's proposers did besides evaluations: every proposal (valid or not) and every LLM
    # exchange (prompt, answer, tokens, cost), append-only, as JSON-able payloads in append order.
    def append_event(self, run_id: str, kind: str, payload: Mapping[str, Any]) -> int:
        """Append one event of `kind` ("proposal", "llm", ...); returns its index among the run's
        events of that kind. RunNotFound for an unknown run."""
        raise NotImplementedError(f"{type(self).__name__} does not keep events")

    def events(self, run_id: str, kind: str | None = None) -> list[dict[str, Any]]:
        """The run's events (of one kind), in append order, each as {"kind", "index", **payload}."""
        raise NotImplementedError(f"{type(self).__name__} does not keep events")

    # lessons ----------------------------------------------------------------------------------
    # Distilled evidence per (family, space version, architecture, shape class), across runs.
    def append_lesson(self, lesson: LessonRecord) -> LessonRecord:
        """Add one lesson record; returns it with seq set (larger than every earlier lesson's)."""
        raise NotImplementedError(f"{type(self).__name__} does not keep lessons")

    def lessons(self, *, family: str | None = None, space_version: str | None = None, arch: str | None = None,
                shape_class: str | None = None, latest: bool = True) -> list[LessonRecord]:
        """The lessons matching every given key field, in append order; `latest`: only the newest
        record of each key."""
        raise NotImplementedError(f"{type(self).__name__} does not keep lessons")

    def count(self, run_id: str) -> int:
        return len(self.records(run_id))

    def keys(self, run_id: str) -> set[str]:
        return {r.key for r in self.records(run_id)}

    def append_many(self, records: Iterable[Record]) -> list[Record]:
        return [self.append(r) for r in records]

    def best(self, run_id: str, metric: str) -> Record | None:
        return best_record(self.records(run_id), metric)

    def close(self) -> None:
        """Release connections."""

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
