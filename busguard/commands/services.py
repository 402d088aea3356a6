"""The long-running commands: `run`, `reconcile`, and the development tools `broker` and `demo`."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from busguard.config import Config, load_config
from busguard.errors import ConfigError, StoreUnreachable
from busguard.runtime.membership import Claim, claim_instance
from busguard.wiring import (
    build_guard,
    build_reconciler,
    ensure_topics,
    guard_topics,
    now_ms,
    open_guard,
    open_kind_store,
    open_reconcile_store,
    reconciler_keys,
    reconciler_topics,
)

#: The per-process override of `[ops] port` (busguard/config.py, "Environment overrides").
OPS_PORT_ENV = "BUSGUARD_OPS__PORT"

if TYPE_CHECKING:
    from busguard.reconcile.worker import Reconciler
    from busguard.runtime.guard import Guard


def _release(claim: Claim | None) -> None:
    if claim is not None:
        claim.close()


def _closing(close_store: Callable[[], None], claim: Claim | None) -> Callable[[], None]:
    """Close the store, then let the member name go (a successor may take it)."""

    def close() -> None:
        try:
            close_store()
        finally:
            _release(claim)

    return close


def _install_stop(stop: Callable[[], None]) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)


def _serve(service: Guard | Reconciler, topics: list[str], cfg: Config, close: Callable[[], None]) -> int:
    """Create the topics if asked, run `service` until SIGTERM/SIGINT, close its store."""

    async def main() -> None:
        await ensure_topics(cfg, topics)
        _install_stop(service.request_stop)
        await service.run()

    from busguard.runtime.ops import OpsPortUnavailable
    from busguard.state.redact import redact
    from busguard.state.store import StateUnavailable

    try:
        asyncio.run(main())
    except OpsPortUnavailable as exc:  # a guard and a reconciler from one config on one host: one line, exit 2
        where = f"${OPS_PORT_ENV}" if OPS_PORT_ENV in os.environ else cfg.source
        raise ConfigError(where, "ops.port", exc.port, exc.explain()) from None
    except StateUnavailable as exc:  # a batch waited state.retry_s for PostgreSQL: stop, in one line
        raise StoreUnreachable.postgres(
            cfg.source, redact(cfg.state.dsn), f"no answer to {exc.what!r}: {exc.error}", cfg.state.retry_s
        ) from None
    finally:
        close()
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from busguard.runtime.faults import Faults
    from busguard.runtime.logs import configure
    from busguard.runtime.tuning import tune_gc

    cfg = load_config(args.config)
    configure(cfg.log.format, cfg.log.level)
    claim = claim_instance(cfg, group_id=cfg.kafka.group_id, role="guard")
    try:
        keys, store = open_guard(cfg)
    except BaseException:
        _release(claim)
        raise
    tune_gc()
    try:
        guard = build_guard(cfg, store, keys, faults=Faults.from_env())
    except BaseException:
        store.close()
        _release(claim)
        raise
    return _serve(guard, guard_topics(cfg), cfg, _closing(store.close, claim))


def cmd_reconcile(args: argparse.Namespace) -> int:
    from busguard.reconcile.worker import operators_file
    from busguard.runtime.faults import Faults
    from busguard.runtime.logs import configure

    cfg = load_config(args.config)
    configure(cfg.log.format, cfg.log.level)
    operators = operators_file(cfg)
    keys = reconciler_keys(cfg)
    claim = claim_instance(cfg, group_id=cfg.reconcile.group_id, role="reconciler")
    try:
        store = open_reconcile_store(cfg)
    except BaseException:
        _release(claim)
        raise
    kind_store = None
    try:
        kind_store = open_kind_store(cfg, now_ms())  # only while a registered kind settles its own escalations
        worker = build_reconciler(cfg, store, keys, operators, faults=Faults.from_env(), kind_store=kind_store)
    except BaseException:
        store.close()
        if kind_store is not None:
            kind_store.close()
        _release(claim)
        raise

    def close_stores() -> None:
        try:
            store.close()
        finally:
            if kind_store is not None:
                kind_store.close()

    return _serve(worker, reconciler_topics(cfg), cfg, _closing(close_stores, claim))


def _embedded_missing() -> bool:
    """`demo` and `broker` need the optional extra; say so in one line instead of a traceback."""
    from busguard.devtools.broker import EXTRA_HINT, embedded_available

    if embedded_available():
        return False
    print(f"busguard: {EXTRA_HINT}", file=sys.stderr)
    return True


def cmd_broker(args: argparse.Namespace) -> int:
    from busguard.devtools.broker import EmbeddedBroker
    from busguard.runtime.logs import configure

    if _embedded_missing():
        return 2

    configure("console", "info")

    async def main() -> None:
        broker = EmbeddedBroker()
        await broker.astart(args.port)
        print(f"tansu broker ready at {broker.bootstrap} (memory storage: everything is lost when it stops)", flush=True)
        stopped = asyncio.Event()
        _install_stop(stopped.set)
        try:
            await stopped.wait()
        finally:
            await broker.astop()

    asyncio.run(main())
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    if _embedded_missing():
        return 2
    if getattr(args, "scenario", None) == "taint":
        from busguard.demo.taint import run_taint_demo

        return run_taint_demo(keep_dir=args.dir)
    if getattr(args, "scenario", None) == "handoff":
        from busguard.demo.handoff import run_handoff_demo

        return run_handoff_demo(keep_dir=args.dir)
    from busguard.demo import run_demo

    if getattr(args, "scenario", None) == "award":
        from busguard.demo.award import run_award_demo

        return run_award_demo(args.dir)
    return run_demo(keep_dir=args.dir)
