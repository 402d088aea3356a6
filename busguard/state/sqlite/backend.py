"""The SQLite backend: one file on one host (the default)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TypeVar

import msgspec

from busguard.state.backends import StoreOptions, StoreView
from busguard.state.reconcile import ReconcileStateStore
from busguard.state.store import StateStore

Out = TypeVar("Out")
S = TypeVar("S")


class SqliteOptions(msgspec.Struct, frozen=True, kw_only=True):
    """`[state] path` and `synchronous`; the reconciler's own file
    `reconcile.state_path`; `checkpoint_every_s` (None: checkpoint on the
    commits; the guard passes 1.0, a thread of its own, state/sqlite/db.py)."""

    path: Path
    synchronous: str = "FULL"
    reconcile_path: Path
    checkpoint_every_s: float | None = None


class SqliteBackend:
    name: Final = "sqlite"
    durable: Final = True
    reconcile_where: Final = "reconcile.state_path"
    where: Final = "state.path"

    def options(self, state: Any, resolve: Callable[[str], Path], reconcile_path: str) -> SqliteOptions:
        return SqliteOptions(
            path=resolve(state.path), synchronous=state.synchronous.upper(), reconcile_path=resolve(reconcile_path), checkpoint_every_s=1.0
        )

    def open(self, options: SqliteOptions, common: StoreOptions) -> StateStore:
        from busguard.state.sqlite.store import SqliteStore

        return SqliteStore(
            options.path,
            now_ms=common.now_ms,
            synchronous=options.synchronous,
            task_retention_ms=common.task_retention_ms,
            decision_retention_ms=common.decision_retention_ms,
            nonce_retention_ms=common.nonce_retention_ms,
            genesis=common.genesis,
            checkpoint_every_s=options.checkpoint_every_s,
        )

    def view(self, options: SqliteOptions, common: StoreOptions) -> StoreView:
        return self.open(options, common)  # its store admits other processes beside a running guard

    def exists(self, options: SqliteOptions) -> bool:
        return options.path.exists()

    def location(self, options: SqliteOptions) -> str | None:
        return str(options.path)

    def place(self, options: SqliteOptions) -> str:
        return str(options.path)

    def open_reconcile(self, options: SqliteOptions, *, output: type[Out], state: type[S]) -> ReconcileStateStore[Out, S]:
        from busguard.state.sqlite.reconcile import SqliteReconcileStore

        return SqliteReconcileStore(options.reconcile_path, output=output, state=state, synchronous=options.synchronous)


BACKEND: Final = SqliteBackend()
