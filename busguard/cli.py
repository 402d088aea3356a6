"""The `busguard` command line. Each subcommand's --help has examples."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from busguard.config import Config, load_config
from busguard.errors import ConfigError

if TYPE_CHECKING:
    from busguard.protocol.keyfile import Identity
    from busguard.protocol.keys import KeyRegistry
    from busguard.runtime.watched import WatchedFile
    from busguard.state.base import StateStore
    from busguard.reconcile.store import ReconcileState
    from busguard.state.postgres import PostgresStore

log = structlog.get_logger("busguard.cli")


def _examples(text: str) -> str:
    return "examples:\n" + textwrap.indent(textwrap.dedent(text).strip(), "  ")


def _open_runtime(cfg: Config) -> tuple[WatchedFile[KeyRegistry], Identity, StateStore]:
    """Everything `run` needs from disk, validated before touching Kafka (and
    the key registry before the state store, whose creation starts its warm-up)."""
    import time

    from busguard.protocol.keyfile import load_or_create
    from busguard.protocol.keys import KeyRegistry
    from busguard.runtime.watched import WatchedFile
    from busguard.state.memory import MemoryStore
    from busguard.state.sqlite import SqliteStore

    keys = WatchedFile(cfg.path(cfg.keys.registry), KeyRegistry.load, what="key registry", watch=cfg.keys.watch)
    identity = load_or_create(cfg.path(cfg.keys.guard_key), cfg.keys.create_guard_key)
    declared = cfg.keys.guard_public_key_bytes
    if declared is not None and declared != identity.public_key:
        raise ConfigError(cfg.source, "keys.guard_public_key", cfg.keys.guard_public_key, f"the public half of keys.guard_key ({identity.agent_id})")
    now = time.time_ns() // 1_000_000
    a = cfg.admission
    store: MemoryStore | SqliteStore | PostgresStore
    if cfg.state.backend == "memory":
        store = MemoryStore(created_at=now, task_retention_ms=a.task_retention_ms, decision_retention_ms=a.decision_retention_ms)
        created = True
    elif cfg.state.backend == "postgres":
        store = open_postgres(cfg, now)
        created = store.created
    else:
        store = SqliteStore(
            cfg.path(cfg.state.path),
            now_ms=now,
            synchronous=cfg.state.synchronous.upper(),
            task_retention_ms=a.task_retention_ms,
            decision_retention_ms=a.decision_retention_ms,
        )
        created = store.created
    if created:
        # A missing store may be a lost one: it warms (docs/operations.md,
        # "Store loss and store rollback"). Only `busguard state init` may
        # declare a deployment new.
        log.warning(
            "state store did not exist and was created fenced: records issued up to max_future_ms after now are refused "
            "(store_warming) for one freshness window; for a deployment with no history, create it with `busguard state init`",
            backend=cfg.state.backend,
            path=state_location(cfg),
            trusted_from_ms=store.trusted_from,
        )
    return keys, identity, store


def state_location(cfg: Config) -> str | None:
    """Where the state lives, fit for logs: the password of a DSN redacted."""
    if cfg.state.backend == "sqlite":
        return str(cfg.path(cfg.state.path))
    if cfg.state.backend == "postgres":
        from busguard.state.pgsql import redact

        return f"{redact(cfg.state.dsn)} schema {cfg.state.schema}"
    return None


def open_postgres(cfg: Config, now_ms: int, *, genesis: bool = False) -> PostgresStore:
    try:
        from busguard.state.postgres import PostgresStore
    except ImportError as exc:
        raise ConfigError(cfg.source, "state.backend", "postgres", f"the PostgreSQL driver installed: pip install 'busguard[postgres]' ({exc})") from None
    a = cfg.admission
    return PostgresStore(
        cfg.state.dsn,
        now_ms=now_ms,
        schema=cfg.state.schema,
        task_retention_ms=a.task_retention_ms,
        decision_retention_ms=a.decision_retention_ms,
        retry_s=cfg.state.retry_s,
        genesis=genesis,
    )


def _install_stop(stop: Callable[[], None]) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)


async def _ensure_topics(cfg: Config, topics: list[str]) -> None:
    if cfg.kafka.create_topics:
        from busguard.runtime.broker import create_topics

        await create_topics(cfg.kafka.bootstrap_servers, topics, cfg.kafka.topic_partitions)


def cmd_run(args: argparse.Namespace) -> int:
    from busguard.runtime.faults import Faults
    from busguard.runtime.guard import Guard
    from busguard.runtime.logs import configure
    from busguard.runtime.tuning import tune_gc

    cfg = load_config(args.config)
    configure(cfg.log.format, cfg.log.level)
    keys, identity, store = _open_runtime(cfg)
    tune_gc()

    async def main() -> None:
        await _ensure_topics(cfg, cfg.input_topics + cfg.output_topics)
        guard = Guard(cfg, keys=keys, identity=identity, store=store, faults=Faults.from_env())
        _install_stop(guard.request_stop)
        await guard.run()

    try:
        asyncio.run(main())
    finally:
        store.close()
    return 0


def open_reconcile_store(cfg: Config) -> ReconcileState:
    """The reconciler's store on the guard's backend: PostgreSQL (same DSN and
    schema) or the SQLite file `reconcile.state_path`."""
    from busguard.reconcile.store import ReconcileStore

    if cfg.state.backend == "postgres":
        from busguard.reconcile.pgstore import PostgresReconcileStore

        return PostgresReconcileStore(cfg.state.dsn, schema=cfg.state.schema, retry_s=cfg.state.retry_s)
    return ReconcileStore(cfg.path(cfg.reconcile.state_path), synchronous=cfg.state.synchronous.upper())


def cmd_reconcile(args: argparse.Namespace) -> int:
    from busguard.protocol.keyfile import load_or_create
    from busguard.reconcile.worker import Reconciler, operators_file
    from busguard.runtime.faults import Faults
    from busguard.runtime.logs import configure

    cfg = load_config(args.config)
    configure(cfg.log.format, cfg.log.level)
    operators = operators_file(cfg)
    k = cfg.keys
    guard_public_key = k.guard_public_key_bytes
    if k.reconciler_key is not None:
        identity = load_or_create(cfg.path(k.reconciler_key), k.create_reconciler_key)
        if guard_public_key is None:  # else the guard's private key need not be on this machine at all
            guard_public_key = load_or_create(cfg.path(k.guard_key), k.create_guard_key).public_key
    else:
        identity = load_or_create(cfg.path(k.guard_key), k.create_guard_key)  # one key for both roles
        guard_public_key = guard_public_key or identity.public_key
    store = open_reconcile_store(cfg)

    async def main() -> None:
        await _ensure_topics(cfg, [cfg.topics.reconciliation, cfg.topics.audit, cfg.topics.dead_letter, cfg.topics.replies])
        worker = Reconciler(cfg, identity=identity, guard_public_key=guard_public_key, store=store, operators=operators, faults=Faults.from_env())
        _install_stop(worker.request_stop)
        await worker.run()

    try:
        asyncio.run(main())
    finally:
        store.close()
    return 0


def cmd_resolve(args: argparse.Namespace) -> int:
    from busguard.reconcile.operator import resolve

    cfg = load_config(args.config)
    return resolve(cfg, args.escalation_id, args.resolve_as, args.note, args.operator, key_file=args.key, wait_s=args.wait)


def cmd_check_config(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    from busguard.protocol.keys import KeyRegistry
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
        print("  reconciler:    no keys.reconciler_key: the reconciler seals with the guard key (one-key deployment; docs/operations.md section 7)")
    if operators is not None:
        print(f"  operators:     {cfg.path(cfg.keys.operators or '')} ({len(operators)} with their own keys)")
    return 0


def _public_half(path: Path) -> str:
    """` (z6Mk…)`: what receivers and auditors declare; '' while the file does not exist yet."""
    from busguard.protocol.identity import multikey_encode
    from busguard.protocol.keyfile import read_key

    return f" ({multikey_encode(read_key(path).public_key)})" if path.exists() else ""


def init_state(cfg: Config, now_ms: int) -> Path:
    """`busguard state init`: a genesis store, trusted from its first record
    because the operator says this deployment has no history. Refuses a path
    that already holds a store (that would throw its fence away)."""
    from busguard.state.sqlite import SqliteStore

    if cfg.state.backend == "postgres":
        try:
            open_postgres(cfg, now_ms, genesis=True).close()
        except FileExistsError:
            raise ConfigError(cfg.source, "state.schema", cfg.state.schema, "a schema with no state store yet: `state init` only creates new ones") from None
        return Path(state_location(cfg) or "")
    if cfg.state.backend != "sqlite":
        raise ConfigError(
            cfg.source, "state.backend", cfg.state.backend, '"sqlite" or "postgres": a memory store is lost at every restart, so it always warms'
        )
    path = cfg.path(cfg.state.path)
    try:
        SqliteStore(path, now_ms=now_ms, synchronous=cfg.state.synchronous.upper(), genesis=True).close()
    except FileExistsError:
        raise ConfigError(cfg.source, "state.path", str(path), "a path with no state store yet: `state init` only creates new ones") from None
    return path


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
    from busguard.state.sqlite import SqliteStore

    cfg = load_config(args.config)
    path = cfg.path(cfg.state.path)
    store: SqliteStore | PostgresStore
    if cfg.state.backend == "postgres":
        store, path = open_postgres(cfg, time.time_ns() // 1_000_000), Path(state_location(cfg) or "")
    elif cfg.state.backend != "sqlite" or not path.exists():
        raise ConfigError(cfg.source, "state.path", str(path), "an existing SQLite state store (see `busguard state init`)")
    else:
        store = SqliteStore(path, now_ms=time.time_ns() // 1_000_000, synchronous=cfg.state.synchronous.upper())
    try:
        ends = fence_ends(store.trusted_from, cfg.admission.max_age_ms, cfg.admission.max_future_ms)
        print(f"{path}: origin {store.origin}, created_at_ms {store.created_at}")
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
            meta = await producer.send_and_wait(args.topic, value=rec.value, key=(args.sender or ident.agent_id).encode(), headers=rec.headers)
        finally:
            await producer.stop()
        print(f"sent {rec.receipt.kind} for task {rec.receipt.task_id} to {meta.topic}/{meta.partition}@{meta.offset}; receipt_id {rec.receipt_id}")

    asyncio.run(main())
    return 0


def cmd_broker(args: argparse.Namespace) -> int:
    from busguard.runtime.broker import EmbeddedBroker
    from busguard.runtime.logs import configure

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
    from busguard.demo import run_demo

    return run_demo(keep_dir=args.dir)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="busguard",
        description="Admission middleware for agent traffic on Kafka: verifies signed receipts, refuses replays, escalates ambiguity.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_examples(
            """
            busguard demo                                   # everything on an embedded broker, one command
            busguard run --config configs/busguard.toml     # the guard
            busguard check-config --config configs/busguard.toml
            """
        ),
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, fn: Callable[[argparse.Namespace], int], help: str, examples: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help, description=help, epilog=_examples(examples), formatter_class=argparse.RawDescriptionHelpFormatter)
        sp.set_defaults(fn=fn)
        return sp

    sp = add("run", cmd_run, "Run the guard: consume agent topics, admit, route, audit.", """
        busguard run --config configs/busguard.toml
        BUSGUARD_KAFKA__BOOTSTRAP_SERVERS=kafka:9092 busguard run --config configs/busguard.toml
        BUSGUARD_FAULT=persisted:3 busguard run --config ...   # test hook: SIGKILL itself at the 3rd persisted batch
        """)
    sp.add_argument("--config", required=True, help="TOML config file (see docs/config.md)")

    sp = add("reconcile", cmd_reconcile, "Run a reconciliation worker: settle escalations exactly once, in view of the auditor.", """
        busguard reconcile --config configs/busguard.toml
        """)
    sp.add_argument("--config", required=True)

    sp = add("check-config", cmd_check_config, "Validate a config file and the key registry it names, then summarise them.", """
        busguard check-config --config configs/busguard.toml
        """)
    sp.add_argument("--config", required=True)

    st = sub.add_parser(
        "state",
        help="Create or inspect the guard's state store.",
        description="Create or inspect the guard's state store.",
        epilog=_examples(
            """
            busguard state init --config configs/busguard.toml   # a new deployment: no history, no store warming
            busguard state show --config configs/busguard.toml
            """
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    st_sub = st.add_subparsers(dest="state_command", required=True, metavar="ACTION")
    for name, fn, help, example in (
        (
            "init",
            cmd_state_init,
            "Create a genesis state store for a deployment with no history (refuses an existing one): no store warming.",
            "busguard state init --config configs/busguard.toml   # before the first `busguard run`; never over a lost store",
        ),
        (
            "show",
            cmd_state_show,
            "Print the store's origin, fence and per-partition watermarks.",
            "busguard state show --config configs/busguard.toml",
        ),
    ):
        ssp = st_sub.add_parser(name, help=help, description=help, epilog=_examples(example), formatter_class=argparse.RawDescriptionHelpFormatter)
        ssp.set_defaults(fn=fn)
        ssp.add_argument("--config", required=True)

    sp = add("keygen", cmd_keygen, "Write a new Ed25519 key file (mode 0600) and print its agent id.", """
        busguard keygen --out var/planner.key
        busguard keygen --out var/guard.key --force
        """)
    sp.add_argument("--out", required=True, help="where to write the private key file")
    sp.add_argument("--force", action="store_true", help="replace an existing file")

    sp = add("send", cmd_send, "Sign a payload and produce it, as an agent would (uses the SDK's crash-safe session).", """
        echo '{"op":"summarize"}' | busguard send --key var/planner.key --topic agents.handoffs --kind handoff --task t-1 --to executor
        busguard send --key var/exec.key --topic agents.acks --kind ack --task t-1 --to planner --payload ack.json --bootstrap 127.0.0.1:9092
        """)
    sp.add_argument("--key", required=True, help="the sender's key file (from `busguard keygen`)")
    sp.add_argument("--topic", required=True)
    sp.add_argument("--kind", required=True, choices=["handoff", "ack"])
    sp.add_argument("--task", required=True, help="task_id")
    sp.add_argument("--to", required=True, help="receiver agent id")
    sp.add_argument("--payload", help="file with the payload bytes; '-' or omitted reads stdin")
    sp.add_argument("--bootstrap", default="127.0.0.1:9092")
    sp.add_argument("--sender", help="sender id to claim (a named agent in the registry); default: the key's tulpa: id")
    sp.add_argument("--key-id", help="key id for named agents with several keys")
    sp.add_argument("--session", help="session file (default: KEYFILE with .session.json)")
    sp.add_argument("--legacy", action="store_true", help="no session/sequence: a legacy nonce-only receipt")
    sp.add_argument("--nonce", help="explicit nonce (default: 128 random bits)")
    sp.add_argument("--idempotence", action=argparse.BooleanOptionalAction, default=False, help="idempotent producer (real Kafka only; tansu refuses it)")

    sp = add("broker", cmd_broker, "Run the embedded tansu broker (memory storage) until Ctrl-C.", """
        busguard broker --port 9092
        """)
    sp.add_argument("--port", type=int, default=9092)

    sp = add("demo", cmd_demo, "Start a broker, the guard and the reconciler, drive the scripted scenario, print where everything went.", """
        busguard demo
        busguard demo --dir /tmp/busguard-demo     # keep configs, keys and state for a look afterwards
        """)
    sp.add_argument("--dir", help="working directory to keep (default: a temporary one)")

    esc = sub.add_parser(
        "escalations",
        help="List, show and resolve escalations.",
        description="List, show and resolve escalations.",
        epilog=_examples(
            """
            busguard escalations list --config configs/busguard.toml
            busguard escalations show 3f2a... --config configs/busguard.toml
            busguard escalations resolve 3f2a... --as retransmission --note "one execution" --operator alice --key ~/.busguard/alice.key --config configs/busguard.toml
            """
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    esc_sub = esc.add_subparsers(dest="escalations_command", required=True, metavar="ACTION")

    def add_esc(name: str, fn: Callable[[argparse.Namespace], int], help: str, examples: str) -> argparse.ArgumentParser:
        sp = esc_sub.add_parser(name, help=help, description=help, epilog=_examples(examples), formatter_class=argparse.RawDescriptionHelpFormatter)
        sp.set_defaults(fn=fn)
        return sp

    sp = add_esc("resolve", cmd_resolve, "Settle an escalation by hand, signed with your own key; the resolution carries your signed command, so the audit proves your name.", """
        busguard escalations resolve 3f2a... --as retransmission --note "executor restarted at 12:04, one execution" --operator alice --key ~/.busguard/alice.key --config configs/busguard.toml
        busguard escalations resolve 3f2a... --as reject --note "payload differs; sender asked to re-issue" --operator alice --key ~/.busguard/alice.key --config configs/busguard.toml
        busguard escalations resolve 3f2a... --as replay --note "second witness" --config configs/busguard.toml     # guard key: applied, but the name is unproven
        """)
    sp.add_argument("escalation_id", help="the escalation's decision id (see `busguard escalations list`)")
    sp.add_argument("--as", dest="resolve_as", required=True, choices=["retransmission", "replay", "reject"])
    sp.add_argument("--note", required=True, help="why; kept in the audit log")
    sp.add_argument("--operator", default=os.environ.get("USER", "operator"), help="who is resolving (default: $USER); with --key, the name the operators file gives that key")
    sp.add_argument("--key", help="sign with this operator key file (listed in keys.operators); without it the guard key signs, which proves no name and fails `busguard audit`")
    sp.add_argument("--wait", type=float, default=30.0, help="seconds to wait for the reconciler's resolution (0: don't wait)")
    sp.add_argument("--config", required=True)
    _register_audit(sub, add, add_esc)
    from busguard.policies.taint.command import add_commands as add_taint_commands

    add_taint_commands(sub)
    return p


def _register_audit(sub: Any, add: Any, add_esc: Any) -> None:
    """The auditor's commands live with the auditor."""
    try:
        from busguard.audit.commands import add_commands
    except ImportError:
        return
    add_commands(sub, add, add_esc)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except ConfigError as exc:
        print(f"busguard: config error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
