"""State stores behind one interface: memory (tests) and SQLite (embedded default)."""

from __future__ import annotations

from pathlib import Path

from busguard.state.base import StateStore
from busguard.state.memory import MemoryStore
from busguard.state.sqlite import SqliteStore


def open_store(backend: str, path: str | Path | None, now_ms: int) -> StateStore:
    if backend == "memory":
        return MemoryStore(created_at=now_ms)
    if backend == "sqlite":
        if path is None:
            raise ValueError("the sqlite backend needs a path")
        return SqliteStore(path, now_ms=now_ms)
    raise ValueError(f"unknown state backend {backend!r}; allowed: memory, sqlite")


__all__ = ["MemoryStore", "SqliteStore", "StateStore", "open_store"]
