"""The store: runs and their append-only evaluation records, chosen by URL as in Optuna.

    open_store("memory://")                                   # MemoryStore, gone with the process
    open_store(sqlite_url("runs/evo.db"))                      # SQLite file, the default
    open_store("postgresql+psycopg2://user@host:5432/evo")     # shared by many machines
"""

from __future__ import annotations

import os
from pathlib import Path

from evo.store.base import DuplicateRecord, LessonRecord, Record, RunInfo, RunNotFound, Store, StoreError, best_record
from evo.store.memory import MemoryStore
from evo.store.sql import SQLStore

__all__ = ["best_record", "DuplicateRecord", "LessonRecord", "MemoryStore", "Record", "RunInfo", "RunNotFound",
           "SQLStore", "Store", "StoreError", "open_store", "sqlite_url"]

MEMORY_URL = "memory://"


def open_store(url: str) -> Store:
    """The store for a URL. Connects at once: a bad or unreachable URL raises StoreError with a
    one-line message naming the URL (password masked) and what to check."""
    if not isinstance(url, str) or not url.strip():
        raise StoreError(f"store URL {url!r} is empty: use memory://, sqlite:///PATH or "
                         "postgresql+psycopg2://USER@HOST:PORT/DB")
    url = url.strip()
    if url == MEMORY_URL:
        return MemoryStore()
    return SQLStore(url)


def sqlite_url(path: str | os.PathLike[str]) -> str:
    """The SQLAlchemy URL of an SQLite file, made absolute so that worker processes with another
    working directory open the same file."""
    return "sqlite:///" + str(Path(path).expanduser().resolve())
