"""The memory backend: nothing survives the process (tests, demos, a guard
whose every restart warms)."""

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


class MemoryOptions(msgspec.Struct, frozen=True, kw_only=True):
    """The memory backend has no settings of its own; the reconciler keeps
    its store in the SQLite file `reconcile.state_path`."""

    reconcile_path: Path
    synchronous: str = "FULL"


class MemoryBackend:
    name: Final = "memory"
    durable: Final = False
    reconcile_where: Final = "reconcile.state_path"
    where: Final = "state.backend"

    def options(self, state: Any, resolve: Callable[[str], Path], reconcile_path: str) -> MemoryOptions:
        return MemoryOptions(reconcile_path=resolve(reconcile_path), synchronous=state.synchronous.upper())

    def open(self, options: MemoryOptions, common: StoreOptions) -> StateStore:
        from busguard.state.memory.store import MemoryStore

        return MemoryStore(
            common.now_ms,
            genesis=common.genesis,
            task_retention_ms=common.task_retention_ms,
            decision_retention_ms=common.decision_retention_ms,
        )

    def view(self, options: MemoryOptions, common: StoreOptions) -> StoreView:
        return self.open(options, common)  # its store admits other processes beside a running guard

    def exists(self, options: MemoryOptions) -> bool:
        return False

    def location(self, options: MemoryOptions) -> str | None:
        return None

    def place(self, options: MemoryOptions) -> str:
        return "memory"

    def open_reconcile(self, options: MemoryOptions, *, output: type[Out], state: type[S]) -> ReconcileStateStore[Out, S]:
        from busguard.state.sqlite.reconcile import SqliteReconcileStore

        return SqliteReconcileStore(options.reconcile_path, output=output, state=state, synchronous=options.synchronous)


BACKEND: Final = MemoryBackend()
