"""The store contract on MemoryStore."""

import pytest

pytest.register_assert_rewrite("store_contract")

from store_contract import StoreContract  # noqa: E402

from evo.store import MemoryStore, open_store  # noqa: E402


class TestMemoryStore(StoreContract):
    persistent = False

    @pytest.fixture
    def make_store(self):
        return MemoryStore


def test_open_store_memory_url():
    store = open_store("memory://")
    assert isinstance(store, MemoryStore) and store.url == "memory://"
    assert open_store("memory://") is not store     # every open is a fresh, empty store
