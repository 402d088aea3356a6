"""The one place a state backend is chosen by name (`[state] backend`).

A backend is a package `busguard/state/<name>/` whose `backend.py` defines
`BACKEND`, an object of the `Backend` protocol below, and one line in
`BACKENDS` here (plus its name in `busguard.config.StateConfig.backend`).
Everything outside `state/` opens, inspects and names stores through the
functions of this module, never through a backend's own modules
(tests/unit/test_layers.py enforces it). Backend modules are imported when
first chosen, so a deployment loads only its own backend's driver.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar

import msgspec

from busguard.state.reconcile import ReconcileStateStore
from busguard.state.store import StateStore

Out = TypeVar("Out")
S = TypeVar("S")

#: name -> the module holding its BACKEND
BACKENDS: Final[Mapping[str, str]] = {
    "memory": "busguard.state.memory.backend",
    "sqlite": "busguard.state.sqlite.backend",
    "postgres": "busguard.state.postgres.backend",
    "rocksdb": "busguard.state.rocksdb.backend",
}


class StoreOptions(msgspec.Struct, frozen=True, kw_only=True):
    """What every backend's guard store is opened with, whatever the backend."""

    now_ms: int
    task_retention_ms: int = 7 * 86_400_000
    decision_retention_ms: int = 7 * 86_400_000
    nonce_retention_ms: int = 600_000
    genesis: bool = False


class StoreView(Protocol):
    """What `busguard state show` reads of a store, while a guard may hold
    it: a StateStore is one; a backend whose store admits one process
    (RocksDB) gives a reader that takes no lock."""

    @property
    def origin(self) -> str: ...

    @property
    def created_at(self) -> int: ...

    @property
    def trusted_from(self) -> int | None: ...

    def location(self) -> str | None: ...

    def partition_watermarks(self) -> dict[tuple[str, int], int]: ...

    def close(self) -> None: ...


class Backend(Protocol):
    """A state backend. `Options` is its own settings struct, built by
    `options()` from the `[state]` section (any object with the attributes
    the backend reads) and `resolve` (a config-relative path to a Path)."""

    name: str
    #: survives a restart: `busguard state init` may declare it genesis
    durable: bool
    #: the config field an error about where the store is should name, and
    #: `place(options)` its value (a path, a schema)
    where: str
    #: the config field an error about the reconciler's store should name
    reconcile_where: str

    def options(self, state: Any, resolve: Callable[[str], Path], reconcile_path: str) -> Any: ...

    def open(self, options: Any, common: StoreOptions) -> StateStore: ...

    def view(self, options: Any, common: StoreOptions) -> StoreView: ...

    def exists(self, options: Any) -> bool: ...

    def location(self, options: Any) -> str | None: ...

    def place(self, options: Any) -> str: ...

    def open_reconcile(self, options: Any, *, output: type[Out], state: type[S]) -> ReconcileStateStore[Out, S]: ...


def backend(name: str) -> Backend:
    module = BACKENDS.get(name)
    if module is None:
        raise ValueError(f"unknown state backend {name!r}; allowed: {', '.join(sorted(BACKENDS))}")
    found: Backend = importlib.import_module(module).BACKEND
    return found


def open_store(name: str, options: Any, common: StoreOptions) -> StateStore:
    return backend(name).open(options, common)
