"""The PostgreSQL backend: one schema shared by every guard, reconciler and
host of a deployment (the `postgres` extra)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TypeVar

import msgspec

from busguard.state.backends import StoreOptions, StoreView
from busguard.state.reconcile import ReconcileStateStore
from busguard.state.redact import redact
from busguard.state.store import StateStore

Out = TypeVar("Out")
S = TypeVar("S")


class PostgresOptions(msgspec.Struct, frozen=True, kw_only=True):
    """`[state] dsn`, `schema`, `retry_s` and `max_policy_locks`."""

    dsn: str
    schema: str = "busguard"
    retry_s: float = 120.0
    max_policy_locks: int = 64


class PostgresBackend:
    name: Final = "postgres"
    durable: Final = True
    reconcile_where: Final = "state.dsn"
    where: Final = "state.schema"

    def options(self, state: Any, resolve: Callable[[str], Path], reconcile_path: str) -> PostgresOptions:
        return PostgresOptions(dsn=state.dsn, schema=state.schema, retry_s=state.retry_s, max_policy_locks=state.max_policy_locks)

    def open(self, options: PostgresOptions, common: StoreOptions) -> StateStore:
        from busguard.state.postgres.store import PostgresStore

        if not options.dsn:
            raise ValueError("the postgres backend needs a DSN ([state] dsn)")
        return PostgresStore(
            options.dsn,
            now_ms=common.now_ms,
            schema=options.schema,
            task_retention_ms=common.task_retention_ms,
            decision_retention_ms=common.decision_retention_ms,
            retry_s=options.retry_s,
            genesis=common.genesis,
            max_policy_locks=options.max_policy_locks,
        )

    def view(self, options: PostgresOptions, common: StoreOptions) -> StoreView:
        return self.open(options, common)  # its store admits other processes beside a running guard

    def exists(self, options: PostgresOptions) -> bool:
        from busguard.state.postgres.store import store_exists

        return store_exists(options.dsn, schema=options.schema, retry_s=options.retry_s)

    def location(self, options: PostgresOptions) -> str | None:
        return f"{redact(options.dsn)} schema {options.schema}"

    def place(self, options: PostgresOptions) -> str:
        return options.schema

    def open_reconcile(self, options: PostgresOptions, *, output: type[Out], state: type[S]) -> ReconcileStateStore[Out, S]:
        from busguard.state.postgres.reconcile import PostgresReconcileStore

        return PostgresReconcileStore(options.dsn, output=output, state=state, schema=options.schema, retry_s=options.retry_s)


BACKEND: Final = PostgresBackend()
