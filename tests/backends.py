"""The per-backend fixture hook: how a test opens each registered state backend.

A new backend (docs/design.md, "Adding a state backend") adds one entry here:
the options a test store of that backend is opened with, given the pytest
request (to start a server through its fixture) and a temporary directory.
`tests/unit/test_state_contract.py` fails while a registered backend has no
entry, and every contract and store test then runs on it too."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from busguard.state.memory.backend import MemoryOptions
from busguard.state.postgres.backend import PostgresOptions
from busguard.state.rocksdb.backend import RocksOptions
from busguard.state.sqlite.backend import SqliteOptions


def _postgres(request: pytest.FixtureRequest, tmp: Path) -> PostgresOptions:
    return PostgresOptions(dsn=request.getfixturevalue("postgres").dsn, schema=request.getfixturevalue("pg_schema"))


TEST_OPTIONS: dict[str, Callable[[pytest.FixtureRequest, Path], Any]] = {
    "memory": lambda request, tmp: MemoryOptions(reconcile_path=tmp / "reconcile.db"),
    "sqlite": lambda request, tmp: SqliteOptions(path=tmp / "state.db", reconcile_path=tmp / "reconcile.db"),
    "postgres": _postgres,
    "rocksdb": lambda request, tmp: RocksOptions(path=tmp / "state.rocksdb", reconcile_path=tmp / "reconcile.db"),
}
