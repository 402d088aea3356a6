"""The scripted scenario: one signed record per step, and what each must become."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from busguard.protocol.envelope import HEADER_RECEIPT, HEADER_SIGNATURE
from busguard.protocol.keyfile import Identity
from busguard.protocol.records import Decision
from busguard.sdk.sender import Sender, SignedRecord

HANDOFF_WORK: Final = b'{"op":"summarize","doc":"q3-report.pdf"}'
OTHER_WORK: Final = b'{"op":"summarize","doc":"q4-report.pdf"}'
ACK_OK: Final = b'{"status":"accepted"}'

DOWNSTREAM, RECONCILIATION, DEAD_LETTER = "downstream", "reconciliation", "dead-letter"


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
        "forged: 'planner' handoff signed by another key",
        "handoffs",
        H,
        e_legacy.sign_receipt(claimed, HANDOFF_WORK),
        DEAD_LETTER,
        "bad_signature",
    )
    old = p.sign(
        kind="handoff", task_id="task-5", receiver="executor", payload=HANDOFF_WORK, issued_at_ms=time.time_ns() // 1_000_000 - 600_000
    )
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
