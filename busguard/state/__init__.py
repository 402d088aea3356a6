"""State stores behind one interface: memory (tests), SQLite (embedded
default) and PostgreSQL (shared by guards on several hosts; imported only when
chosen, since its driver is an optional extra)."""

from __future__ import annotations

from pathlib import Path

from busguard.state.base import StateStore
from busguard.state.memory import MemoryStore
from busguard.state.sqlite import SqliteStore


def open_store(backend: str, path: str | Path | None, now_ms: int, *, dsn: str = "", schema: str = "busguard") -> StateStore:
    if backend == "postgres":
        from busguard.state.postgres import PostgresStore

        return PostgresStore(dsn, now_ms=now_ms, schema=schema)
    if backend == "memory":
        return MemoryStore(created_at=now_ms)
    if backend == "sqlite":
        if path is None:
            raise ValueError("the sqlite backend needs a path")
        return SqliteStore(path, now_ms=now_ms)
    raise ValueError(f"unknown state backend {backend!r}; allowed: memory, sqlite, postgres")


__all__ = ["MemoryStore", "SqliteStore", "StateStore", "open_store"]
