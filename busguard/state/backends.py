"""The one place a state backend is chosen by name (`[state] backend`).

Adding a backend is its module plus one entry in `BACKENDS` (and the name in
`busguard.config.StateConfig.backend`); nothing else names a backend class.
Openers import their module lazily, so a deployment loads only its own
backend's driver.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

import msgspec

from busguard.state.store import StateStore


class StoreOptions(msgspec.Struct, frozen=True, kw_only=True):
    """What every backend is opened with; a backend ignores what it has no use for."""

    now_ms: int
    path: Path | None = None
    synchronous: str = "FULL"
    task_retention_ms: int = 7 * 86_400_000
    decision_retention_ms: int = 7 * 86_400_000
    #: SQLite: sizes the nonce buckets (state/buckets.py)
    nonce_retention_ms: int = 600_000
    genesis: bool = False
    dsn: str = ""
    schema: str = "busguard"
    retry_s: float = 120.0
    #: PostgreSQL: the most advisory locks a batch holds on policy rows
    max_policy_locks: int = 64
    #: SQLite: checkpoint on a thread of its own this often (None: on the commits)
    checkpoint_every_s: float | None = None


def _memory(o: StoreOptions) -> StateStore:
    from busguard.state.memory import MemoryStore

    return MemoryStore(o.now_ms, genesis=o.genesis, task_retention_ms=o.task_retention_ms, decision_retention_ms=o.decision_retention_ms)


def _sqlite(o: StoreOptions) -> StateStore:
    from busguard.state.sqlite import SqliteStore

    if o.path is None:
        raise ValueError("the sqlite backend needs a path ([state] path)")
    return SqliteStore(
        o.path,
        now_ms=o.now_ms,
        synchronous=o.synchronous,
        task_retention_ms=o.task_retention_ms,
        decision_retention_ms=o.decision_retention_ms,
        nonce_retention_ms=o.nonce_retention_ms,
        genesis=o.genesis,
        checkpoint_every_s=o.checkpoint_every_s,
    )


def _postgres(o: StoreOptions) -> StateStore:
    from busguard.state.postgres import PostgresStore

    if not o.dsn:
        raise ValueError("the postgres backend needs a DSN ([state] dsn)")
    return PostgresStore(
        o.dsn,
        now_ms=o.now_ms,
        schema=o.schema,
        task_retention_ms=o.task_retention_ms,
        decision_retention_ms=o.decision_retention_ms,
        retry_s=o.retry_s,
        genesis=o.genesis,
        max_policy_locks=o.max_policy_locks,
    )


BACKENDS: Final[Mapping[str, Callable[[StoreOptions], StateStore]]] = {
    "memory": _memory,
    "sqlite": _sqlite,
    "postgres": _postgres,
}


def open_store(backend: str, options: StoreOptions) -> StateStore:
    opener = BACKENDS.get(backend)
    if opener is None:
        raise ValueError(f"unknown state backend {backend!r}; allowed: {', '.join(sorted(BACKENDS))}")
    return opener(options)
