"""Build the guard and the reconciler, and what they stand on, from a config.

The one place that turns a `Config` into running parts: the key registry and
keys, the state stores, the `Guard` and the `Reconciler`. `busguard run`,
`busguard reconcile`, the demo and the benchmarks all come through here, so
they cannot drift apart (docs/design.md, "Layers": wiring sits above the
runtime, below the commands).

Order matters and is kept here: everything on disk is validated before
Kafka is touched, and the key registry before the state store, because
creating a store starts its warm-up fence.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeVar

import structlog

from busguard.config import Config
from busguard.errors import ConfigError, StoreUnreachable

if TYPE_CHECKING:
    from busguard.protocol.keyfile import Identity
    from busguard.protocol.registry import KeyRegistry
    from busguard.reconcile.operators import Operators
    from busguard.reconcile.store import ReconcileState
    from busguard.reconcile.worker import Reconciler
    from busguard.runtime.faults import Faults
    from busguard.runtime.guard import Guard
    from busguard.runtime.ops import Metrics
    from busguard.runtime.watched import WatchedFile
    from busguard.state.backends import Backend
    from busguard.state.store import BatchStore, StateStore

log = structlog.get_logger("busguard.wiring")
T = TypeVar("T")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class GuardKeys(NamedTuple):
    registry: WatchedFile[KeyRegistry]
    identity: Identity


class ReconcilerKeys(NamedTuple):
    identity: Identity  # seals what the reconciler writes
    guard_public_key: bytes  # verifies the escalations it reads


def guard_keys(cfg: Config) -> GuardKeys:
    """The key registry (followed while running) and the guard's own key,
    checked against `keys.guard_public_key` when the config declares it."""
    from busguard.protocol.keyfile import load_or_create
    from busguard.protocol.registry import KeyRegistry
    from busguard.runtime.watched import WatchedFile

    registry = WatchedFile(cfg.path(cfg.keys.registry), KeyRegistry.load, what="key registry", watch=cfg.keys.watch)
    identity = load_or_create(cfg.path(cfg.keys.guard_key), cfg.keys.create_guard_key)
    declared = cfg.keys.guard_public_key_bytes
    if declared is not None and declared != identity.public_key:
        raise ConfigError(
            cfg.source, "keys.guard_public_key", cfg.keys.guard_public_key, f"the public half of keys.guard_key ({identity.agent_id})"
        )
    return GuardKeys(registry, identity)


def reconciler_keys(cfg: Config) -> ReconcilerKeys:
    """`keys.reconciler_key` and the guard's public key; without a reconciler
    key, the guard key serves both roles (a one-key deployment)."""
    from busguard.protocol.keyfile import load_or_create

    k = cfg.keys
    guard_public_key = k.guard_public_key_bytes
    if k.reconciler_key is not None:
        identity = load_or_create(cfg.path(k.reconciler_key), k.create_reconciler_key)
        if guard_public_key is None:  # else the guard's private key need not be on this machine at all
            guard_public_key = load_or_create(cfg.path(k.guard_key), k.create_guard_key).public_key
    else:
        identity = load_or_create(cfg.path(k.guard_key), k.create_guard_key)  # one key for both roles
        guard_public_key = guard_public_key or identity.public_key
    return ReconcilerKeys(identity, guard_public_key)


def state_backend(cfg: Config) -> tuple[Backend, Any]:
    """The configured backend and its own options, built from `[state]`."""
    from busguard.state.backends import backend

    chosen = backend(cfg.state.backend)
    return chosen, chosen.options(cfg.state, cfg.path, cfg.reconcile.state_path)


def state_location(cfg: Config) -> str | None:
    """Where the guard's state lives, fit for logs: a DSN's password redacted."""
    chosen, options = state_backend(cfg)
    return chosen.location(options)


def open_guard_store(cfg: Config, at_ms: int, *, genesis: bool = False) -> StateStore:
    """The guard's state store, opened the one way every caller opens it.

    `genesis` is what `busguard state init` declares: a deployment with no
    history, trusted from its first record. Otherwise a store that did not
    exist is created fenced (it may be a lost one) and that is logged."""
    from busguard.state.backends import StoreOptions

    a, st = cfg.admission, cfg.state
    chosen, options = state_backend(cfg)
    common = StoreOptions(
        now_ms=at_ms,
        task_retention_ms=a.task_retention_ms,
        decision_retention_ms=a.decision_retention_ms,
        nonce_retention_ms=a.nonce_retention_ms,
        genesis=genesis,
    )
    try:
        store = reachable(cfg, chosen.where, lambda: chosen.open(options, common))
    except ImportError as exc:  # the backend's driver is an optional extra
        raise ConfigError(
            cfg.source, "state.backend", st.backend, f"its driver installed: pip install 'busguard[{st.backend}]' ({exc})"
        ) from None
    if store.created and not genesis:
        # A missing store may be a lost one: it warms (docs/operations.md,
        # "Store loss and store rollback"). Only `busguard state init` may
        # declare a deployment new.
        log.warning(
            "state store did not exist and was created fenced: records issued up to max_future_ms after now are refused "
            "(store_warming) for one freshness window; for a deployment with no history, create it with `busguard state init`",
            backend=st.backend,
            path=state_location(cfg),
            trusted_from_ms=store.trusted_from,
        )
    return store


def reachable(cfg: Config, path_field: str, opener: Callable[[], T]) -> T:
    """`opener()`, with a store that cannot be reached or opened turned into
    one StoreUnreachable line (exit status 3, docs/operations.md "Outages")
    instead of a traceback: PostgreSQL unreachable for `state.retry_s`; a
    SQLite file (at `path_field`) whose directory cannot be created or whose
    file cannot be opened for writing. FileExistsError is `state init`'s
    refusal of an existing store, not an outage: it passes through."""
    import sqlite3

    from busguard.state.redact import redact
    from busguard.state.store import StateUnavailable

    try:
        return opener()
    except StateUnavailable as exc:
        raise StoreUnreachable.postgres(
            cfg.source, redact(cfg.state.dsn), f"no answer to {exc.what!r}: {exc.error}", cfg.state.retry_s
        ) from None
    except FileExistsError:
        raise
    except (OSError, sqlite3.OperationalError) as exc:
        path = cfg.path(cfg.reconcile.state_path if path_field == "reconcile.state_path" else cfg.state.path)
        problem = f"cannot create or open it for writing ({type(exc).__name__}: {exc})"
        raise StoreUnreachable.unwritable(cfg.source, path_field, str(path), " ".join(problem.split())) from None


def open_guard(cfg: Config) -> tuple[GuardKeys, StateStore]:
    """Everything `busguard run` needs from disk, validated before touching
    Kafka (and the key registry before the state store)."""
    keys = guard_keys(cfg)
    return keys, open_guard_store(cfg, now_ms())


def init_state(cfg: Config, at_ms: int) -> Path:
    """`busguard state init`: a genesis store, trusted from its first record
    because the operator says this deployment has no history. Refuses a path
    (or PostgreSQL schema) that already holds a store (that would throw its
    fence away)."""
    chosen, options = state_backend(cfg)
    if not chosen.durable:
        raise ConfigError(
            cfg.source,
            "state.backend",
            cfg.state.backend,
            f"one of the durable backends ({', '.join(durable_backends())}): a {chosen.name} store is lost at every restart, so it always warms",
        )
    try:
        open_guard_store(cfg, at_ms, genesis=True).close()
    except FileExistsError:
        raise ConfigError(
            cfg.source,
            chosen.where,
            chosen.place(options),
            f"a {chosen.where.rpartition('.')[2]} with no state store yet: `state init` only creates new ones",
        ) from None
    return Path(chosen.location(options) or "")


def durable_backends() -> list[str]:
    from busguard.state.backends import BACKENDS, backend

    return [name for name in BACKENDS if backend(name).durable]


def open_reconcile_store(cfg: Config) -> ReconcileState:
    """The reconciler's store on the guard's backend: PostgreSQL (same DSN and
    schema), or the SQLite file `reconcile.state_path` for the others."""
    from busguard.reconcile.policy import EscalationState
    from busguard.runtime.outputs import Output

    chosen, options = state_backend(cfg)
    return reachable(cfg, chosen.reconcile_where, lambda: chosen.open_reconcile(options, output=Output, state=EscalationState))


def build_guard(
    cfg: Config,
    store: StateStore,
    keys: GuardKeys,
    *,
    faults: Faults | None = None,
    metrics: Metrics | None = None,
    clock_ms: Callable[[], int] | None = None,
) -> Guard:
    from busguard.runtime.guard import Guard

    return Guard(cfg, keys=keys.registry, identity=keys.identity, store=store, faults=faults, metrics=metrics, clock_ms=clock_ms)


#: The backends whose guard store a second process (the reconciler) can open
#: beside a running guard: a SQLite file, a PostgreSQL schema.
SHARED_BACKENDS: Final = ("sqlite", "postgres")


def open_kind_store(cfg: Config, at_ms: int) -> StateStore | None:
    """The guard's store, opened by the reconciler for the kinds that settle
    their own escalations (KindSpec.reconciliation, busguard.reconcile.kinds);
    None when no registered kind does. Refuses a backend only the guard's
    process can open (memory, RocksDB), naming the kinds."""
    from busguard.policies import KINDS

    kinds = sorted(k for k, spec in KINDS.items() if spec.reconciliation is not None)
    if not kinds:
        return None
    chosen, _ = state_backend(cfg)
    if chosen.name not in SHARED_BACKENDS:
        raise ConfigError(
            cfg.source,
            "state.backend",
            chosen.name,
            f"{' or '.join(SHARED_BACKENDS)}: kinds {', '.join(kinds)} settle their escalations in the guard's state store, "
            "which the reconciler must open beside the guard",
        )
    return open_guard_store(cfg, at_ms)


def build_reconciler(
    cfg: Config,
    store: ReconcileState,
    keys: ReconcilerKeys,
    operators: WatchedFile[Operators] | None,
    *,
    faults: Faults | None = None,
    metrics: Metrics | None = None,
    clock_ms: Callable[[], int] | None = None,
    kind_store: BatchStore | None = None,
) -> Reconciler:
    """`kind_store`: the guard's store (`open_kind_store`), for kinds that settle their own escalations."""
    from busguard.reconcile.worker import Reconciler

    return Reconciler(
        cfg,
        identity=keys.identity,
        guard_public_key=keys.guard_public_key,
        store=store,
        operators=operators,
        faults=faults,
        metrics=metrics,
        clock_ms=clock_ms,
        kind_store=kind_store,
    )


def guard_topics(cfg: Config) -> list[str]:
    """Every topic `busguard run` reads or writes (created when `kafka.create_topics`)."""
    return cfg.input_topics + cfg.output_topics


def reconciler_topics(cfg: Config) -> list[str]:
    t = cfg.topics
    return [t.reconciliation, t.audit, t.dead_letter, t.replies]


async def ensure_topics(cfg: Config, topics: list[str]) -> None:
    """Create `topics` when the config asks for it (`kafka.create_topics`),
    then check them, created or not (busguard.runtime.topic_checks): a
    mismatch is one ConfigError before anything is consumed or produced."""
    from busguard.runtime.topic_checks import check_topics, creation_configs

    if cfg.kafka.create_topics:
        from busguard.runtime.topics import create_topics

        await create_topics(cfg.kafka.bootstrap_servers, topics, cfg.kafka.topic_partitions, configs=creation_configs(cfg, topics))
    await check_topics(cfg, topics)
