"""The RocksDB backend: one directory on one host, held by one process."""

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


class RocksOptions(msgspec.Struct, frozen=True, kw_only=True):
    """`[state] path` (a directory) and `synchronous`; the reconciler keeps
    its store in the SQLite file `reconcile.state_path`, as with the memory
    backend (it is a process of its own, and a RocksDB store admits one)."""

    path: Path
    synchronous: str = "FULL"
    reconcile_path: Path


class RocksBackend:
    name: Final = "rocksdb"
    durable: Final = True
    reconcile_where: Final = "reconcile.state_path"
    where: Final = "state.path"

    def options(self, state: Any, resolve: Callable[[str], Path], reconcile_path: str) -> RocksOptions:
        return RocksOptions(path=resolve(state.path), synchronous=state.synchronous.upper(), reconcile_path=resolve(reconcile_path))

    def open(self, options: RocksOptions, common: StoreOptions) -> StateStore:
        from busguard.state.rocksdb.store import RocksStore

        return RocksStore(
            options.path,
            now_ms=common.now_ms,
            synchronous=options.synchronous,
            task_retention_ms=common.task_retention_ms,
            decision_retention_ms=common.decision_retention_ms,
            nonce_retention_ms=common.nonce_retention_ms,
            genesis=common.genesis,
        )

    def view(self, options: RocksOptions, common: StoreOptions) -> StoreView:
        """A secondary instance (state/rocksdb/view.py): the guard holding the store keeps running."""
        from busguard.state.rocksdb.view import RocksView

        return RocksView(options.path)

    def exists(self, options: RocksOptions) -> bool:
        """Something to look at: busguard's marker, or a RocksDB `CURRENT`
        (a store an earlier busguard made, or another application's, which
        the view then refuses by name)."""
        from busguard.state.rocksdb.directory import MARKER

        return (options.path / MARKER).is_file() or (options.path / "CURRENT").is_file()

    def location(self, options: RocksOptions) -> str | None:
        return str(options.path)

    def place(self, options: RocksOptions) -> str:
        return str(options.path)

    def open_reconcile(self, options: RocksOptions, *, output: type[Out], state: type[S]) -> ReconcileStateStore[Out, S]:
        from busguard.state.sqlite.reconcile import SqliteReconcileStore

        return SqliteReconcileStore(options.reconcile_path, output=output, state=state, synchronous=options.synchronous)


BACKEND: Final = RocksBackend()
