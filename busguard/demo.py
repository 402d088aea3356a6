"""`busguard demo`: the whole system on one machine, in one command.

Starts the embedded broker, writes a throwaway deployment (config, key
registry, keys) into a work directory, runs the guard and the reconciler
in-process, drives a scripted scenario through them with the sender SDK,
then prints where every record went and why, and ends with the auditor's
verdict. Exit code 0 only if every record landed where it should and the
audit proves exactly-once admission per task.

The scenario, one record per step (the labels are what the summary prints):

     clean handoff                 -> downstream      admitted
     the same record again         -> dead-letter     exact_duplicate
     its nonce under another task  -> dead-letter     nonce_replay
     executor acks (legacy)        -> downstream      admitted
     crash, ack re-sent, new nonce -> reconciliation  ambiguous_retransmission (seed 000),
                                      resolved by policy, first ack re-sent on replies
     executor acks (session)       -> downstream      admitted
     crash, restart, re-sent       -> dead-letter     retransmission (supersedes link, no 2nd ack)
     forged signature              -> dead-letter     bad_signature
     issued 10 minutes ago         -> dead-letter     timestamp_expired
     not a receipt                 -> dead-letter     not_json
     same task, other payload      -> reconciliation  task_conflict, held, resolved by an operator
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgspec

from busguard.protocol.records import Decision
from busguard.config import Config, load_config
from busguard.devconfig import Topics, embedded_config
from busguard.protocol.attestation import HEADER_DECISION_ID, AttestationError, verify_admitted
from busguard.protocol.envelope import HEADER_RECEIPT, HEADER_SIGNATURE
from busguard.protocol.identity import multikey_encode
from busguard.protocol.keyfile import Identity, new_identity, write_key
from busguard.protocol.records import Reply, Resolution, audit_decoder
from busguard.sdk.sender import Sender, SignedRecord

if TYPE_CHECKING:
    from busguard.audit.lineage import AuditReport
    from busguard.reconcile.store import ReconcileStore
    from busguard.reconcile.worker import Reconciler
    from busguard.runtime.guard import Guard
    from busguard.state.sqlite import SqliteStore

__all__ = ["run_demo"]

#: Everything the demo writes into its work directory; a kept `--dir` is
#: cleared of these at the start of each run (the broker's memory is new each
#: time, so old state would contradict it).
DEMO_FILES: Final = (
    "busguard.toml",
    "keys.toml",
    "guard.key",
    "reconciler.key",
    "operator.key",
    "operators.toml",
    "planner.key",
    "executor.key",
    "executor.session.json",
    "executor.session.json.tmp",
    "state.db",
    "state.db-wal",
    "state.db-shm",
    "reconcile.db",
    "reconcile.db-wal",
    "reconcile.db-shm",
    "broker.log",
)

HANDOFF_WORK: Final = b'{"op":"summarize","doc":"q3-report.pdf"}'
OTHER_WORK: Final = b'{"op":"summarize","doc":"q4-report.pdf"}'
ACK_OK: Final = b'{"status":"accepted"}'
STARTUP_TIMEOUT_S: Final = 60.0
COLLECT_TIMEOUT_S: Final = 60.0

DOWNSTREAM, RECONCILIATION, DEAD_LETTER = "downstream", "reconciliation", "dead-letter"


# -- the deployment the demo writes -------------------------------------------------


DEMO_TOPICS: Final = Topics(
    handoffs="agents.handoffs",
    acks="agents.acks",
    handoffs_admitted="agents.handoffs.admitted",
    acks_admitted="agents.acks.admitted",
    reconciliation="busguard.reconciliation",
    dead_letter="busguard.dead-letter",
    audit="busguard.audit",
    replies="busguard.replies",
)


def _config_text(bootstrap: str) -> str:
    return embedded_config(
        bootstrap,
        group_id="busguard-demo",
        topics=DEMO_TOPICS,
        comment="Written by `busguard demo`. ops.port = 0: in-process, readiness is read from the loops directly.",
        kafka={"client_id": "busguard-demo", "create_topics": True, "topic_partitions": 4},
        state={"synchronous": "normal"},
        keys={"create_guard_key": False, "create_reconciler_key": False, "operators": "operators.toml"},
        log={"level": "warning"},
        ops={"port": 0},
        reconcile={"group_id": "busguard-demo-reconcile", "state_path": "reconcile.db"},
    )


def _registry_text(planner: Identity, executor: Identity) -> str:
    return f"""\
# Written by `busguard demo`: two named agents, one key each. Reference: docs/config.md.
[[agent]]
id = "planner"
  [[agent.key]]
  key_id = "planner-1"
  public_key = "{multikey_encode(planner.public_key)}"

[[agent]]
id = "executor"
  [[agent.key]]
  key_id = "executor-1"
  public_key = "{multikey_encode(executor.public_key)}"
"""


# -- the scenario --------------------------------------------------------------------


@dataclass
class Step:
    label: str
    route: str  # "handoffs" | "acks"
    key: bytes
    value: bytes | None
    headers: list[tuple[str, bytes]]
    expect_dest: str
    expect_reason: str
    receipt_id: str | None = None
    # filled in as the demo runs
    number: int = 0
    topic: str = ""
    partition: int = -1
    offset: int = -1
    decision: Decision | None = None
    dest_topic: str | None = None
    attested: bool | None = None
    details: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @classmethod
    def signed(cls, label: str, route: str, key: bytes, rec: SignedRecord, dest: str, reason: str) -> Step:
        return cls(label, route, key, rec.value, list(rec.headers), dest, reason, rec.receipt_id)


@dataclass
class Scenario:
    steps: list[Step]
    clean: Step
    replay: Step
    legacy_ack: Step
    legacy_retry: Step
    session_ack: Step
    session_retry: Step
    conflict: Step
    session_jump: tuple[int, int]


def build_scenario(planner: Identity, executor: Identity, session_file: Path) -> Scenario:
    """Sign every scenario record. Must run after the guard's store exists:
    records issued before it are refused as `store_warming`."""
    p = Sender(planner.seed, agent_id="planner", key_id="planner-1")
    e_legacy = Sender(executor.seed, agent_id="executor", key_id="executor-1")
    e_session = Sender(executor.seed, agent_id="executor", key_id="executor-1", session_path=session_file)
    H, A = b"planner", b"executor"

    first = p.sign(kind="handoff", task_id="task-1", receiver="executor", payload=HANDOFF_WORK)
    clean = Step.signed("clean handoff planner -> executor (task-1)", "handoffs", H, first, DOWNSTREAM, "admitted")
    replay = Step.signed("replay: the exact same record again", "handoffs", H, first, DEAD_LETTER, "exact_duplicate")
    reused = p.sign(kind="handoff", task_id="task-3", receiver="executor", payload=HANDOFF_WORK, nonce=first.receipt.nonce)
    nonce_replay = Step.signed("replay: task-1's nonce under a new task-3", "handoffs", H, reused, DEAD_LETTER, "nonce_replay")

    ack = e_legacy.sign(kind="ack", task_id="task-1", receiver="planner", payload=ACK_OK)
    legacy_ack = Step.signed("executor acks task-1 (legacy: nonce, no session)", "acks", A, ack, DOWNSTREAM, "admitted")
    # Seed 000: the executor crashes before recording that it acked, and
    # re-sends the same acknowledgment under a fresh nonce.
    ack_again = e_legacy.sign(kind="ack", task_id="task-1", receiver="planner", payload=ACK_OK)
    legacy_retry = Step.signed(
        "executor crashes, re-sends the ack with a new nonce", "acks", A, ack_again, RECONCILIATION, "ambiguous_retransmission"
    )

    s_ack = e_session.sign(kind="ack", task_id="task-2", receiver="planner", payload=ACK_OK)
    before = s_ack.receipt.sequence
    # The same crash with the SDK's session file: a new Sender on the same file
    # (a restarted process) jumps past the block the old one had reserved.
    e_restarted = Sender(executor.seed, agent_id="executor", key_id="executor-1", session_path=session_file)
    s_again = e_restarted.sign(kind="ack", task_id="task-2", receiver="planner", payload=ACK_OK)
    after = s_again.receipt.sequence
    assert before is not None and after is not None
    session_ack = Step.signed(f"executor acks task-2 (session, sequence {before})", "acks", A, s_ack, DOWNSTREAM, "admitted")
    session_retry = Step.signed(
        f"executor crashes, restarts, re-sends (sequence {after})", "acks", A, s_again, DEAD_LETTER, "retransmission"
    )

    # Signed by the executor's key but claiming to come from the planner.
    claimed = p.sign(kind="handoff", task_id="task-4", receiver="executor", payload=HANDOFF_WORK).receipt
    forged = Step.signed(
        "forged: 'planner' handoff signed by another key", "handoffs", H, e_legacy.sign_receipt(claimed, HANDOFF_WORK), DEAD_LETTER, "bad_signature"
    )
    old = p.sign(kind="handoff", task_id="task-5", receiver="executor", payload=HANDOFF_WORK, issued_at_ms=time.time_ns() // 1_000_000 - 600_000)
    stale = Step.signed("stale: handoff issued 10 minutes ago", "handoffs", H, old, DEAD_LETTER, "timestamp_expired")
    signature = dict(first.headers)[HEADER_SIGNATURE]
    malformed = Step(
        "malformed: the receipt header is not JSON",
        "handoffs",
        H,
        HANDOFF_WORK,
        [(HEADER_RECEIPT, b"this is not a receipt"), (HEADER_SIGNATURE, signature)],
        DEAD_LETTER,
        "not_json",
    )
    other = p.sign(kind="handoff", task_id="task-1", receiver="executor", payload=OTHER_WORK)
    conflict = Step.signed("conflict: task-1 again, with a different payload", "handoffs", H, other, RECONCILIATION, "task_conflict")

    steps = [clean, replay, nonce_replay, legacy_ack, legacy_retry, session_ack, session_retry, forged, stale, malformed, conflict]
    for i, s in enumerate(steps, 1):
        s.number = i
    return Scenario(steps, clean, replay, legacy_ack, legacy_retry, session_ack, session_retry, conflict, (before, after))


# -- reading the output topics -----------------------------------------------------


class Tap:
    """Reads output topics from the beginning, without a consumer group.

    tansu's end offsets are unreliable after batched produces
    (docs/notes-broker.md), so "done" is decided by what has arrived,
    with a timeout, never by comparing against end offsets.
    """

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.downstream = sorted({r.downstream for r in cfg.routes})
        t = cfg.topics
        self.topics = [*self.downstream, t.reconciliation, t.dead_letter, t.audit, t.replies]
        self.decisions: dict[tuple[str, int, int], Decision] = {}
        self.resolutions: dict[tuple[str, str], Resolution] = {}  # (escalation id, stage)
        self.replies: dict[str, Reply] = {}  # escalation id -> reply
        self.placed: dict[str, tuple[str, Any]] = {}  # decision id -> (topic, record) of its primary output
        self._consumer: Any = None

    async def start(self) -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.cfg.kafka.bootstrap_servers, enable_auto_commit=False, auto_offset_reset="earliest", client_id="busguard-demo-tap"
        )
        await consumer.start()
        tps = []
        for topic in self.topics:
            parts = consumer.partitions_for_topic(topic)
            for _ in range(50):
                if parts:
                    break
                await consumer._client.force_metadata_update()
                parts = consumer.partitions_for_topic(topic)
                await asyncio.sleep(0.1)
            tps += [TopicPartition(topic, p) for p in sorted(parts or ())]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        self._consumer = consumer

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()

    def _take(self, record: Any) -> None:
        t = self.cfg.topics
        if record.topic == t.audit:
            try:
                rec = audit_decoder.decode(record.value)
            except msgspec.MsgspecError:
                return
            if isinstance(rec, Decision):
                self.decisions[(rec.source.topic, rec.source.partition, rec.source.offset)] = rec
            else:
                self.resolutions[(rec.escalation_id, rec.stage)] = rec
        elif record.topic == t.replies:
            try:
                reply = msgspec.json.decode(record.value, type=Reply)
            except msgspec.MsgspecError:
                return
            self.replies[reply.escalation_id] = reply
        else:
            ids = [v for k, v in record.headers if k == HEADER_DECISION_ID]
            if ids:
                self.placed.setdefault(ids[0].decode(), (record.topic, record))

    async def until(self, done: Callable[[], bool], timeout_s: float, failure: Callable[[], str | None] = lambda: None) -> bool:
        deadline = time.monotonic() + timeout_s
        while not done():
            failed = failure()
            if failed is not None:
                raise RuntimeError(failed)
            if time.monotonic() > deadline:
                return False
            batch = await self._consumer.getmany(timeout_ms=200)
            for records in batch.values():
                for r in records:
                    self._take(r)
        return True

    def decision(self, step: Step) -> Decision | None:
        return self.decisions.get((step.topic, step.partition, step.offset))


# -- running the guard and the reconciler in-process ---------------------------------


@dataclass
class Services:
    cfg: Config
    guard: Guard
    reconciler: Reconciler
    guard_store: SqliteStore
    reconcile_store: ReconcileStore
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def failure(self) -> str | None:
        """Why a service has stopped on its own, if one has."""
        for t in self.tasks:
            if t.done():
                exc = None if t.cancelled() else t.exception()
                return f"{t.get_name()} stopped: {exc!r}"
        return None

    async def start(self) -> float:
        started = time.monotonic()
        self.tasks = [
            asyncio.create_task(self.guard.run(), name="busguard-guard"),
            asyncio.create_task(self.reconciler.run(), name="busguard-reconciler"),
        ]
        deadline = started + STARTUP_TIMEOUT_S
        while not (self.guard.loop.liveness.started and self.reconciler.loop.liveness.started):
            failed = self.failure()
            if failed is not None:
                raise RuntimeError(f"{failed} (while starting)")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the guard and the reconciler did not get their partitions within {STARTUP_TIMEOUT_S:.0f}s")
            await asyncio.sleep(0.05)
        return time.monotonic() - started

    async def stop(self) -> None:
        self.guard.request_stop()
        self.reconciler.request_stop()
        if self.tasks:
            results = await asyncio.gather(*self.tasks, return_exceptions=True)
            for t, r in zip(self.tasks, results, strict=True):
                if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError):
                    print(f"warning: {t.get_name()} ended with {r!r}", file=sys.stderr)
        self.guard_store.close()
        self.reconcile_store.close()


def _services(cfg: Config, guard_identity: Identity, reconciler_identity: Identity) -> Services:
    from busguard.protocol.keys import KeyRegistry
    from busguard.runtime.watched import WatchedFile
    from busguard.reconcile.operators import Operators
    from busguard.reconcile.store import ReconcileStore
    from busguard.reconcile.worker import Reconciler
    from busguard.runtime.guard import Guard
    from busguard.state.sqlite import SqliteStore

    a = cfg.admission
    path = cfg.path(cfg.state.path)
    store = SqliteStore(
        path,
        now_ms=time.time_ns() // 1_000_000,
        synchronous=cfg.state.synchronous.upper(),
        task_retention_ms=a.task_retention_ms,
        decision_retention_ms=a.decision_retention_ms,
        # What `busguard state init` does: the demo's broker is new at every
        # run (memory storage) and its files were cleared, so there is no
        # history a store could have forgotten and no reason to warm.
        genesis=not path.exists(),
    )
    rstore = ReconcileStore(cfg.path(cfg.reconcile.state_path), synchronous=cfg.state.synchronous.upper())
    keys = WatchedFile(cfg.path(cfg.keys.registry), KeyRegistry.load, what="key registry", watch=cfg.keys.watch)
    guard = Guard(cfg, keys=keys, identity=guard_identity, store=store)
    operators = WatchedFile(cfg.path(cfg.keys.operators or ""), Operators.load, what="operators file", watch=cfg.keys.watch)
    reconciler = Reconciler(cfg, identity=reconciler_identity, guard_public_key=guard_identity.public_key, store=rstore, operators=operators)
    return Services(cfg, guard, reconciler, store, rstore)


async def _produce(cfg: Config, steps: list[Step]) -> None:
    from aiokafka import AIOKafkaProducer

    topics = {r.name: r.inputs[0] for r in cfg.routes}
    producer = AIOKafkaProducer(bootstrap_servers=cfg.kafka.bootstrap_servers, enable_idempotence=False, acks="all", client_id="busguard-demo-agents")
    await producer.start()
    try:
        for s in steps:  # one at a time, in order: keyed by sender, so each sender's records stay in order
            meta = await producer.send_and_wait(topics[s.route], value=s.value, key=s.key, headers=s.headers)
            s.topic, s.partition, s.offset = meta.topic, meta.partition, meta.offset
    finally:
        await producer.stop()


def _operator_resolve(cfg: Config, escalation_id: str) -> tuple[int, str]:
    """What `busguard escalations resolve ID --as reject --note ... --operator demo --key operator.key` does, captured."""
    from busguard.reconcile.operator import resolve

    out = io.StringIO()
    note = "payload differs from the admitted task-1; planner asked to re-issue as a new task"
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = resolve(cfg, escalation_id, "reject", note, "demo", key_file=str(cfg.base_dir / "operator.key"), wait_s=30.0)
    return code, out.getvalue()


def _audit(cfg: Config, guard_public_key: bytes, reconciler_public_key: bytes) -> AuditReport:
    """The auditor, imported lazily (it is the heaviest import and optional for the rest)."""
    from busguard.audit.commands import run_audit

    return run_audit(cfg, guard_public_key=guard_public_key, reconciler_public_key=reconciler_public_key, idle_ms=1500)


def _render_audit(report: AuditReport) -> str:
    from busguard.audit.report import render_table

    return render_table(report)


# -- judging and printing -----------------------------------------------------------


def _short(text: str | None, n: int = 12) -> str:
    return (text or "-")[:n]


def _judge(sc: Scenario, tap: Tap, cfg: Config, guard_public_key: bytes, operator: tuple[int, str] | None) -> None:
    by_receipt = {s.receipt_id: s for s in sc.steps if s.receipt_id}
    roles = {**{t: DOWNSTREAM for t in tap.downstream}, cfg.topics.reconciliation: RECONCILIATION, cfg.topics.dead_letter: DEAD_LETTER}
    for s in sc.steps:
        d = s.decision = tap.decision(s)
        if d is None:
            s.problems.append("no decision on the audit topic")
            continue
        placed = tap.placed.get(d.decision_id)
        if placed is None:
            s.problems.append("no primary output found")
        else:
            s.dest_topic = placed[0]
            if roles.get(placed[0]) != s.expect_dest:
                s.problems.append(f"expected {s.expect_dest}")
            if placed[0] in tap.downstream:
                try:
                    # as its receiver would: the demo addresses handoffs to "executor", acks to "planner"
                    verify_admitted(placed[1].value, list(placed[1].headers), guard_public_key, "executor" if d.kind == "handoff" else "planner")
                    s.attested = True
                except AttestationError as exc:
                    s.attested = False
                    s.problems.append(f"attestation does not verify: {exc}")
        if d.reason != s.expect_reason:
            s.problems.append(f"expected reason {s.expect_reason}")
        if d.supersedes is not None:
            target = by_receipt.get(d.supersedes)
            where = f" (step {target.number}'s receipt)" if target is not None and target is not s else ""
            s.details.append(f"supersedes receipt {_short(d.supersedes)}{where}")

    first = sc.clean.decision
    d = sc.replay.decision
    if d is not None:
        if first is None or d.prior is None or d.prior.decision_id != first.decision_id:
            sc.replay.problems.append("prior admission is not step 1's")
        else:
            sc.replay.details.append(f"not forwarded again; the prior admission (decision {_short(first.decision_id)}) is its answer")

    # seed 000, legacy form: escalated, resolved by policy, first ack re-sent
    d = sc.legacy_retry.decision
    if d is not None:
        if d.supersedes != sc.legacy_ack.receipt_id:
            sc.legacy_retry.problems.append("supersedes link does not name the first ack")
        final = tap.resolutions.get((d.decision_id, "final"))
        reply = tap.replies.get(d.decision_id)
        if final is None or final.resolved_as != "retransmission":
            sc.legacy_retry.problems.append("not resolved as a retransmission")
        else:
            sc.legacy_retry.details.append(f"reconciler: resolved as {final.resolved_as} by {final.by}; never forwarded")
        if reply is None or reply.admission.receipt_id != sc.legacy_ack.receipt_id:
            sc.legacy_retry.problems.append("the first ack was not re-emitted on the replies topic")
        else:
            sc.legacy_retry.details.append(
                f"first ack (receipt {_short(reply.admission.receipt_id)}) re-sent to {reply.to} on {cfg.topics.replies}"
            )

    # session form: a proven retransmission, never a second ack downstream
    d = sc.session_retry.decision
    if d is not None:
        if d.supersedes != sc.session_ack.receipt_id:
            sc.session_retry.problems.append("supersedes link does not name the first ack")
        before, after = sc.session_jump
        sc.session_retry.details.append(f"same session, sequence {before} -> {after}: recorded as a retransmission, no second ack forwarded")
    acks_topic = next(r.downstream for r in cfg.routes if r.name == sc.session_ack.route)
    acks_downstream = [r for topic, r in tap.placed.values() if topic == acks_topic and _task_of(r) == "task-2"]
    if len(acks_downstream) != 1:
        sc.session_retry.problems.append(f"{len(acks_downstream)} acks for task-2 downstream, expected exactly 1")

    # the conflict: held for an operator, then resolved by one
    d = sc.conflict.decision
    if d is not None:
        held = tap.resolutions.get((d.decision_id, "held"))
        if held is None:
            sc.conflict.problems.append("not held for an operator")
        else:
            sc.conflict.details.append("reconciler: held for an operator")
        final = tap.resolutions.get((d.decision_id, "final"))
        sc.conflict.details.append(f"operator: busguard escalations resolve {d.decision_id} --as reject --note '...'")
        if operator is None or operator[0] != 0 or final is None or final.resolved_as != "reject":
            sc.conflict.problems.append("the operator's resolution was not applied" + (f": {operator[1].strip()}" if operator else ""))
        else:
            sc.conflict.details.append(f"  -> resolved as {final.resolved_as} by {final.by}")


def _task_of(record: Any) -> str | None:
    for k, v in record.headers:
        if k == HEADER_RECEIPT:
            try:
                task = msgspec.json.decode(v, type=dict[str, Any]).get("task_id")
            except msgspec.MsgspecError:
                return None
            return task if isinstance(task, str) else None
    return None


def _summary(sc: Scenario, cfg: Config) -> list[str]:
    roles = {cfg.topics.reconciliation: RECONCILIATION, cfg.topics.dead_letter: DEAD_LETTER}
    width = max(len(s.label) for s in sc.steps)
    lines = []
    for s in sc.steps:
        d = s.decision
        dest = roles.get(s.dest_topic or "", DOWNSTREAM if s.dest_topic else "(nowhere)")
        reason = d.reason if d is not None else "(no decision)"
        if s.attested:
            reason += " (attested)"
        mark = "ok" if not s.problems else "!!"
        lines.append(f"{mark} {s.number:>2}. {s.label:<{width}}  -> {dest:<14} {reason}")
        for detail in s.details:
            lines.append(f"{'':7}{detail}")
        for problem in s.problems:
            lines.append(f"{'':7}PROBLEM: {problem} (wanted {s.expect_dest} / {s.expect_reason})")
    return lines


# -- the command --------------------------------------------------------------------


def _configure_logging(verbose: bool) -> None:
    from busguard.runtime.logs import configure

    if verbose:
        configure("console", "info")
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    else:
        configure("console", "warning")
        # aiokafka logs through the standard library; its routine chatter
        # (group joins, a broker without idempotence) is not for the demo.
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


def _prepare_dir(keep_dir: str | None) -> tuple[Path, bool]:
    if keep_dir is None:
        return Path(tempfile.mkdtemp(prefix="busguard-demo-")), True
    work = Path(keep_dir).expanduser().resolve()
    work.mkdir(parents=True, exist_ok=True)
    for name in DEMO_FILES:
        (work / name).unlink(missing_ok=True)
    return work, False


def run_demo(keep_dir: str | None, *, verbose: bool = False) -> int:
    """`busguard demo [--dir DIR]`. Returns the process exit code."""
    _configure_logging(verbose)
    work, owned = _prepare_dir(keep_dir)
    try:
        return asyncio.run(_demo(work, owned))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # one readable line; the traceback only when asked for
        if verbose:
            raise
        print(f"demo FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        if owned:
            shutil.rmtree(work, ignore_errors=True)


async def _demo(work: Path, owned: bool) -> int:
    from busguard.runtime.broker import EmbeddedBroker, create_topics

    guard_id, planner, executor = new_identity(), new_identity(), new_identity()
    reconciler_id, operator_id = new_identity(), new_identity()  # separate keys for separate roles
    write_key(work / "guard.key", guard_id)
    write_key(work / "reconciler.key", reconciler_id)
    write_key(work / "operator.key", operator_id)
    (work / "operators.toml").write_text(f'[[operator]]\nname = "demo"\npublic_key = "{multikey_encode(operator_id.public_key)}"\n', encoding="utf-8")
    write_key(work / "planner.key", planner)
    write_key(work / "executor.key", executor)
    (work / "keys.toml").write_text(_registry_text(planner, executor), encoding="utf-8")

    print("busguard demo: the guard and the reconciler on an embedded broker, one scripted scenario")
    broker = EmbeddedBroker(log_dir=work)
    await broker.astart()
    try:
        cfg_path = work / "busguard.toml"
        cfg_path.write_text(_config_text(broker.bootstrap), encoding="utf-8")
        cfg = load_config(cfg_path, env={})  # the demo's own file; BUSGUARD_* variables must not redirect it
        print(f"  broker     tansu at {broker.bootstrap} (memory storage)")
        print(f"  work dir   {work}" + ("  (removed at exit; keep it with --dir DIR)" if owned else ""))
        print(f"  guard key  {guard_id.agent_id}")
        print(f"  reconciler {reconciler_id.agent_id}  (its own key: it seals resolutions, never decisions)")
        await create_topics(cfg.kafka.bootstrap_servers, cfg.input_topics + cfg.output_topics, cfg.kafka.topic_partitions)
        services = _services(cfg, guard_id, reconciler_id)
        stopped = False
        try:
            took = await services.start()
            print(f"  running    guard ({', '.join(cfg.input_topics)}) and reconciler ({cfg.topics.reconciliation}); partitions assigned in {took:.1f}s")
            code, report = await _scenario(cfg, work, guard_id, planner, executor, services)
            await services.stop()
            stopped = True
            print()
            print("audit: `busguard audit` reads the audit log and the downstream topics and checks every invariant")
            audit = await asyncio.to_thread(_audit, cfg, guard_id.public_key, reconciler_id.public_key)
            print(_render_audit(audit))
            print()
            if not owned:
                print(f"kept in {work}: busguard.toml, keys.toml, the keys and the state (the broker's topics are gone with it)")
            if code == 0 and audit.ok:
                print(f"demo OK: all {report} records went where they should, and the audit proves one admitted witness per task.")
                return 0
            why = [] if code == 0 else ["some records did not go where expected (see PROBLEM lines)"]
            why += [] if audit.ok else ["the audit found violations"]
            print("demo FAILED: " + "; ".join(why))
            return 1
        finally:
            if not stopped:
                await services.stop()
    finally:
        await broker.astop()


async def _scenario(cfg: Config, work: Path, guard_id: Identity, planner: Identity, executor: Identity, services: Services) -> tuple[int, int]:
    sc = build_scenario(planner, executor, work / "executor.session.json")
    tap = Tap(cfg)
    await tap.start()
    try:
        await _produce(cfg, sc.steps)
        print(f"  produced   {len(sc.steps)} records from the planner and the executor (keyed by sender)")

        def decided() -> bool:
            steps_done = all(tap.decision(s) is not None for s in sc.steps)
            if not steps_done:
                return False
            if any(tap.placed.get(d.decision_id) is None for s in sc.steps if (d := tap.decision(s)) is not None):
                return False
            retry = tap.decision(sc.legacy_retry)
            conflict = tap.decision(sc.conflict)
            assert retry is not None and conflict is not None
            return (
                (retry.decision_id, "final") in tap.resolutions
                and retry.decision_id in tap.replies
                and (conflict.decision_id, "held") in tap.resolutions
            )

        complete = await tap.until(decided, COLLECT_TIMEOUT_S, services.failure)
        operator: tuple[int, str] | None = None
        conflict = tap.decision(sc.conflict)
        if complete and conflict is not None:
            # what an operator does with a held escalation, through the real command path
            operator = await asyncio.to_thread(_operator_resolve, cfg, conflict.decision_id)
            await tap.until(lambda: (conflict.decision_id, "final") in tap.resolutions, COLLECT_TIMEOUT_S, services.failure)
        _judge(sc, tap, cfg, guard_id.public_key, operator)
    finally:
        await tap.stop()

    print()
    print("where each record went, and why:")
    for line in _summary(sc, cfg):
        print("  " + line)
    failed = [s for s in sc.steps if s.problems]
    if not complete:
        print(f"  (timed out after {COLLECT_TIMEOUT_S:.0f}s waiting for every output)")
    return (1 if failed or not complete else 0), len(sc.steps)
