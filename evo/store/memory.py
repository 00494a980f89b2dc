"""MemoryStore: the store contract in plain dicts, for tests, notebooks and throwaway runs.

It passes the same contract suite as the SQL backends, so code tested against it behaves the
same on SQLite or PostgreSQL. Everything is lost when the process ends.
"""

from __future__ import annotations

import copy
import threading
import time
from dataclasses import replace
from typing import Any, Mapping

from evo.store.base import (RUN_STATES, DuplicateRecord, LessonRecord, Record, RunInfo, RunNotFound, Store,
                            newest_lessons)


class MemoryStore(Store):
    """Runs and records in dicts behind one lock (several worker threads may append at once).

    Inputs are deep-copied on the way in, so a caller mutating a dict after `append` or
    `create_run` cannot rewrite history, just as it could not in a database.
    """

    url = "memory://"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, RunInfo] = {}
        self._records: dict[str, list[Record]] = {}          # run_id -> records in seq order
        self._by_key: dict[str, dict[str, Record]] = {}      # run_id -> key -> record
        self._events: dict[str, list[dict[str, Any]]] = {}   # run_id -> events in append order
        self._lessons: list[LessonRecord] = []                # in append order (seq = index)

    def __repr__(self) -> str:
        return "MemoryStore()"

    # runs -----------------------------------------------------------------------------------
    def create_run(self, info: RunInfo) -> RunInfo:
        _check_state(info.state)
        info = replace(info, config=copy.deepcopy(dict(info.config)), notes=copy.deepcopy(dict(info.notes)))
        with self._lock:
            if info.run_id in self._runs:
                raise ValueError(f"run id {info.run_id!r} is already taken")
            self._runs[info.run_id] = info
            self._records[info.run_id] = []
            self._by_key[info.run_id] = {}
        return info

    def get_run(self, run_id: str) -> RunInfo:
        with self._lock:
            return self._run(run_id)

    def list_runs(self) -> list[RunInfo]:
        with self._lock:
            runs = list(self._runs.values())
        # Same order as the SQL backends: creation time, then id for runs created in one tick.
        return sorted(runs, key=lambda r: (r.created_at, r.run_id))

    def update_run(self, run_id: str, *, state: str | None = None, elapsed_s: float | None = None,
                   notes: Mapping[str, Any] | None = None) -> RunInfo:
        if state is not None:
            _check_state(state)
        with self._lock:
            info = self._run(run_id)
            changes: dict[str, Any] = {}
            if state is not None:
                changes["state"] = state
            if elapsed_s is not None:
                changes["elapsed_s"] = float(elapsed_s)
            if notes is not None:
                changes["notes"] = {**info.notes, **copy.deepcopy(dict(notes))}
            info = replace(info, **changes)
            self._runs[run_id] = info
            return info

    # records --------------------------------------------------------------------------------
    def append(self, record: Record) -> Record:
        record = copy.deepcopy(record)
        with self._lock:
            self._run(record.run_id)
            by_key = self._by_key[record.run_id]
            if record.key in by_key:
                raise DuplicateRecord(f"genome {record.key} is already recorded in run {record.run_id!r}")
            records = self._records[record.run_id]
            stamped = record.stamped(seq=len(records), recorded_at=time.time())
            records.append(stamped)
            by_key[stamped.key] = stamped
        return stamped

    def records(self, run_id: str, *, since_seq: int = -1) -> list[Record]:
        with self._lock:
            self._run(run_id)
            # seq equals the list index, so the tail after since_seq is a slice.
            return self._records[run_id][max(since_seq + 1, 0):]

    def get_record(self, run_id: str, key: str) -> Record | None:
        with self._lock:
            self._run(run_id)
            return self._by_key[run_id].get(key)

    def count(self, run_id: str) -> int:
        with self._lock:
            self._run(run_id)
            return len(self._records[run_id])

    def keys(self, run_id: str) -> set[str]:
        with self._lock:
            self._run(run_id)
            return set(self._by_key[run_id])

    def append_event(self, run_id: str, kind: str, payload: Mapping[str, Any]) -> int:
        payload = copy.deepcopy(dict(payload))
        with self._lock:
            self._run(run_id)
            events = self._events.setdefault(run_id, [])
            index = sum(1 for e in events if e["kind"] == kind)
            events.append({**payload, "kind": kind, "index": index})
            return index

    def events(self, run_id: str, kind: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            self._run(run_id)
            return [copy.deepcopy(e) for e in self._events.get(run_id, []) if kind is None or e["kind"] == kind]

    def append_lesson(self, lesson: LessonRecord) -> LessonRecord:
        lesson = replace(copy.deepcopy(lesson), payload=copy.deepcopy(dict(lesson.payload)),
                         sources=tuple(lesson.sources))
        with self._lock:
            lesson = replace(lesson, seq=len(self._lessons))
            self._lessons.append(lesson)
        return copy.deepcopy(lesson)

    def lessons(self, *, family: str | None = None, space_version: str | None = None, arch: str | None = None,
                shape_class: str | None = None, latest: bool = True) -> list[LessonRecord]:
        with self._lock:
            found = newest_lessons(self._lessons, family=family, space_version=space_version, arch=arch,
                                   shape_class=shape_class, latest=latest)
            return copy.deepcopy(found)

    # helpers --------------------------------------------------------------------------------
    def _run(self, run_id: str) -> RunInfo:
        """The run's info; the caller holds the lock."""
        try:
            return self._runs[run_id]
        except KeyError:
            raise RunNotFound(run_id) from None


def _check_state(state: str) -> None:
    if state not in RUN_STATES:
        raise ValueError(f"run state {state!r} is not one of {', '.join(RUN_STATES)}")
