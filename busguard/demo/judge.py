"""Judging: did each step's record go where it should, for the right reason?"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import msgspec

from busguard.config import Config
from busguard.demo.scenario import DEAD_LETTER, DOWNSTREAM, RECONCILIATION, Scenario
from busguard.demo.tap import Tap
from busguard.protocol.attestation import AttestationError, verify_admitted
from busguard.protocol.envelope import HEADER_RECEIPT


def operator_resolve(cfg: Config, escalation_id: str) -> tuple[int, str]:
    """What `busguard escalations resolve ID --as reject --note ... --operator demo --key operator.key` does, captured."""
    from busguard.commands.resolve import resolve

    out = io.StringIO()
    note = "payload differs from the admitted task-1; planner asked to re-issue as a new task"
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = resolve(cfg, escalation_id, "reject", note, "demo", key_file=str(cfg.base_dir / "operator.key"), wait_s=30.0)
    return code, out.getvalue()


def short(text: str | None, n: int = 12) -> str:
    return (text or "-")[:n]


def judge(sc: Scenario, tap: Tap, cfg: Config, guard_public_key: bytes, operator: tuple[int, str] | None) -> None:
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
                    verify_admitted(
                        placed[1].value, list(placed[1].headers), guard_public_key, "executor" if d.kind == "handoff" else "planner"
                    )
                    s.attested = True
                except AttestationError as exc:
                    s.attested = False
                    s.problems.append(f"attestation does not verify: {exc}")
        if d.reason != s.expect_reason:
            s.problems.append(f"expected reason {s.expect_reason}")
        if d.supersedes is not None:
            target = by_receipt.get(d.supersedes)
            where = f" (step {target.number}'s receipt)" if target is not None and target is not s else ""
            s.details.append(f"supersedes receipt {short(d.supersedes)}{where}")

    first = sc.clean.decision
    d = sc.replay.decision
    if d is not None:
        if first is None or d.prior is None or d.prior.decision_id != first.decision_id:
            sc.replay.problems.append("prior admission is not step 1's")
        else:
            sc.replay.details.append(f"not forwarded again; the prior admission (decision {short(first.decision_id)}) is its answer")

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
                f"first ack (receipt {short(reply.admission.receipt_id)}) re-sent to {reply.to} on {cfg.topics.replies}"
            )

    # session form: a proven retransmission, never a second ack downstream
    d = sc.session_retry.decision
    if d is not None:
        if d.supersedes != sc.session_ack.receipt_id:
            sc.session_retry.problems.append("supersedes link does not name the first ack")
        before, after = sc.session_jump
        sc.session_retry.details.append(
            f"same session, sequence {before} -> {after}: recorded as a retransmission, no second ack forwarded"
        )
    acks_topic = next(r.downstream for r in cfg.routes if r.name == sc.session_ack.route)
    acks_downstream = [r for topic, r in tap.placed.values() if topic == acks_topic and task_of(r) == "task-2"]
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


def task_of(record: Any) -> str | None:
    for k, v in record.headers:
        if k == HEADER_RECEIPT:
            try:
                task = msgspec.json.decode(v, type=dict[str, Any]).get("task_id")
            except msgspec.MsgspecError:
                return None
            return task if isinstance(task, str) else None
    return None
