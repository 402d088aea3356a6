"""Fixtures shared by unit tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from busguard.state.memory.store import MemoryStore
from busguard.state.rocksdb.store import RocksStore
from busguard.state.sqlite.store import SqliteStore
from busguard.state.store import StateStore

from .harness import NOW


@pytest.fixture(params=["memory", "sqlite", "rocksdb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StateStore:
    """A fresh store of each single-host backend, created an hour before the
    harness's clock (a test module with its own `store` fixture overrides it)."""
    if request.param == "memory":
        return MemoryStore(created_at=NOW - 3_600_000, genesis=True)
    if request.param == "rocksdb":
        return RocksStore(tmp_path / "state.rocksdb", now_ms=NOW - 3_600_000, synchronous="NORMAL", genesis=True)
    return SqliteStore(tmp_path / "state.db", now_ms=NOW - 3_600_000, synchronous="NORMAL", genesis=True)
