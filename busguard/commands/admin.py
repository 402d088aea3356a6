"""The one-shot commands: configuration and state checks, keys, sending, resolving."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from busguard.config import load_config
from busguard.errors import ConfigError
from busguard.wiring import init_state, state_location


def cmd_resolve(args: argparse.Namespace) -> int:
    from busguard.commands.resolve import resolve

    cfg = load_config(args.config)
    return resolve(cfg, args.escalation_id, args.resolve_as, args.note, args.operator, key_file=args.key, wait_s=args.wait)


def cmd_check_config(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    from busguard.protocol.registry import KeyRegistry
    from busguard.reconcile.operators import Operators

    registry = KeyRegistry.load(cfg.path(cfg.keys.registry))
    operators = Operators.load(cfg.path(cfg.keys.operators)) if cfg.keys.operators is not None else None
    print(f"{args.config}: ok")
    routes = ", ".join(f"{r.name} ({' + '.join(r.inputs)} -> {r.downstream})" for r in cfg.routes)
    print(f"  routes:        {routes}")
    print(f"  reconcile:     {cfg.topics.reconciliation}   dead-letter: {cfg.topics.dead_letter}   audit: {cfg.topics.audit}")
    print(f"  state:         {cfg.state.backend} {state_location(cfg) or ''}")
    print(f"  key registry:  {cfg.path(cfg.keys.registry)} ({len(registry.principals)} agents, open_enrollment={registry.open_enrollment})")
    print(f"  guard key:     {cfg.path(cfg.keys.guard_key)}{_public_half(cfg.path(cfg.keys.guard_key))}")
    if cfg.keys.reconciler_key is not None:
        print(f"  reconciler:    {cfg.path(cfg.keys.reconciler_key)}{_public_half(cfg.path(cfg.keys.reconciler_key))} (its own key)")
    else:
        print(
            "  reconciler:    no keys.reconciler_key: the reconciler seals with the guard key (one-key deployment; docs/operations.md section 7)"
        )
    if operators is not None:
        print(f"  operators:     {cfg.path(cfg.keys.operators or '')} ({len(operators)} with their own keys)")
    return 0


def _public_half(path: Path) -> str:
    """` (z6Mk…)`: what receivers and auditors declare; '' while the file does not exist yet."""
    from busguard.protocol.identity import multikey_encode
    from busguard.protocol.keyfile import read_key

    return f" ({multikey_encode(read_key(path).public_key)})" if path.exists() else ""


def cmd_state_init(args: argparse.Namespace) -> int:
    import time

    cfg = load_config(args.config)
    path = init_state(cfg, time.time_ns() // 1_000_000)
    print(f"{path}: new genesis state store; `busguard run` admits from its first record (no store warming)")
    print(
        "  only for a deployment with no history: a store created over a lost one would forget its nonces; "
        "the guard still re-arms the fence if the consumer group has committed past it",
        file=sys.stderr,
    )
    return 0


def cmd_state_show(args: argparse.Namespace) -> int:
    import time

    from busguard.admission.fence import fence_ends
    from busguard.state.backends import StoreOptions
    from busguard.wiring import reachable, state_backend

    cfg = load_config(args.config)
    chosen, options = state_backend(cfg)
    # Opening would create a (fenced) store where there is none: look first.
    if not chosen.durable or not chosen.exists(options):
        raise ConfigError(
            cfg.source,
            chosen.where,
            state_location(cfg) or cfg.state.backend,
            "an existing state store; there is none (`busguard run` creates a fenced one, `busguard state init` a genesis one)",
        )
    a = cfg.admission  # the lifetimes size the buckets of a SQLite schema 3 file this open upgrades
    common = StoreOptions(
        now_ms=time.time_ns() // 1_000_000,
        task_retention_ms=a.task_retention_ms,
        decision_retention_ms=a.decision_retention_ms,
        nonce_retention_ms=a.nonce_retention_ms,
    )
    store = reachable(cfg, chosen.where, lambda: chosen.view(options, common))  # RocksDB: a secondary instance, beside a running guard
    try:
        ends = fence_ends(store.trusted_from, cfg.admission.max_age_ms, cfg.admission.max_future_ms)
        print(f"{store.location()}: origin {store.origin}, created_at_ms {store.created_at}")
        print(f"  trusted_from_ms: {store.trusted_from}   fence_ends_ms: {ends}")
        for (topic, partition), offset in sorted(store.partition_watermarks().items()):
            print(f"  decided up to {topic}:{partition}@{offset}")
    finally:
        store.close()
    return 0


def cmd_keygen(args: argparse.Namespace) -> int:
    from busguard.protocol.identity import multikey_encode
    from busguard.protocol.keyfile import new_identity, write_key

    ident = new_identity()
    try:
        write_key(args.out, ident, overwrite=args.force)
    except FileExistsError:
        raise ConfigError(args.out, "", None, "already exists; pass --force to replace it") from None
    print(ident.agent_id)
    print(f"# private key written to {args.out} (mode 0600); public multikey: {multikey_encode(ident.public_key)}", file=sys.stderr)
    return 0


def cmd_send(args: argparse.Namespace) -> int:
    from aiokafka import AIOKafkaProducer

    from busguard.protocol.keyfile import read_key
    from busguard.sdk.sender import Sender

    ident = read_key(args.key)
    payload = sys.stdin.buffer.read() if args.payload in (None, "-") else Path(args.payload).read_bytes()
    sender = Sender(
        ident.seed,
        agent_id=args.sender or ident.agent_id,
        key_id=args.key_id,
        session_path=None if args.legacy else (args.session or Path(args.key).with_suffix(".session.json")),
    )
    rec = sender.sign(kind=args.kind, task_id=args.task, receiver=args.to, payload=payload, nonce=args.nonce)

    async def main() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=args.bootstrap, enable_idempotence=args.idempotence, acks="all")
        await producer.start()
        try:
            meta = await producer.send_and_wait(
                args.topic, value=rec.value, key=(args.sender or ident.agent_id).encode(), headers=rec.headers
            )
        finally:
            await producer.stop()
        print(
            f"sent {rec.receipt.kind} for task {rec.receipt.task_id} to {meta.topic}/{meta.partition}@{meta.offset}; receipt_id {rec.receipt_id}"
        )

    asyncio.run(main())
    return 0
