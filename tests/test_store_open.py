"""open_store: the right backend for a URL, and a one-line StoreError naming the URL otherwise."""

import socket
import sys

import pytest

from evo.store import MemoryStore, SQLStore, StoreError, open_store, sqlite_url


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def open_error(url: str) -> str:
    with pytest.raises(StoreError) as info:
        open_store(url)
    message = str(info.value)
    assert "\n" not in message
    # no SQLAlchemy traceback chained under it
    assert info.value.__cause__ is None
    assert info.value.__context__ is None or info.value.__suppress_context__
    return message


def test_backends_by_url(tmp_path):
    assert isinstance(open_store("memory://"), MemoryStore)
    url = sqlite_url(tmp_path / "evo.db")
    with open_store(url) as store:
        assert isinstance(store, SQLStore) and store.url == url


@pytest.mark.parametrize("url", ["not a url", "://nothing", "sqlite:\\\\bad"])
def test_garbage_url(url):
    message = open_error(url)
    assert repr(url) in message and "sqlite:///" in message


@pytest.mark.parametrize("url", ["", "   "])
def test_empty_url(url):
    assert "empty" in open_error(url)


def test_unknown_dialect():
    message = open_error("nosuchdb://user@host/db")
    assert "nosuchdb://user@host/db" in message and "postgresql+psycopg2://" in message


def test_unknown_driver():
    message = open_error("postgresql+nosuchdriver://user@host/db")
    assert "postgresql+nosuchdriver://user@host/db" in message


def test_missing_postgres_driver(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg2", None)      # as if psycopg2-binary were not installed
    message = open_error("postgresql+psycopg2://evo@127.0.0.1/evo")
    assert "postgresql+psycopg2://evo@127.0.0.1/evo" in message and "pip install 'ptx-kernel-factory[postgres]'" in message


def test_plain_postgresql_url_uses_psycopg2():
    pytest.importorskip("psycopg2")
    message = open_error(f"postgresql://evo@127.0.0.1:{closed_port()}/evo")
    assert "Connection refused" in message       # reached the server with psycopg2, not psycopg 3


def test_unreachable_postgres_masks_password():
    port = closed_port()
    message = open_error(f"postgresql+psycopg2://evo:s3cret@127.0.0.1:{port}/evo")
    assert f"postgresql+psycopg2://evo:***@127.0.0.1:{port}/evo" in message
    assert "s3cret" not in message
    assert "Connection refused" in message and "server running" in message


def test_sqlite_path_that_cannot_be_a_directory(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    url = sqlite_url(tmp_path / "file" / "evo.db")
    assert url in open_error(url)


def test_sqlite_file_that_is_not_a_database(tmp_path):
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not an SQLite database" * 100)
    url = sqlite_url(path)
    message = open_error(url)
    assert url in message and "SQLite" in message
