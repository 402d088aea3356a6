"""`busguard reconcile`: resolve escalations exactly once, in view of the auditor.

A stage of the shared crash-safe loop (runtime/loop.py), consuming the
reconciliation topic. Inputs are the guard's sealed escalation records and
operators' sealed resolve commands; anything else, or anything whose seal
does not verify, is dead-lettered with a reason (reconcile/parse.py reads
each record, whatever its headers hold, into exactly one of these). Outputs (resolutions on the
audit topic, replies to senders) are sealed with the reconciler's own key
(`keys.reconciler_key`), not the guard's, so the auditor can hold each role
to its own key; an operator's resolution carries the operator's signed
command. Every output is sized against `kafka.max_message_bytes` before it
is persisted: an input whose resolution or reply would not fit (only an
operator's long command can make one so) is one `output_too_large` dead
letter instead, and changes no escalation (docs/protocol.md 12.5). Several
workers may share the load in one consumer group:
escalations and commands for one task share a key, hence a partition.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import structlog

from busguard.config import Config
from busguard.protocol.attestation import HEADER_OUTCOME, HEADER_REASON, attest_record, seal
from busguard.protocol.keyfile import Identity
from busguard.protocol.records import Coordinates, Reply, Resolution, decision_id
from busguard.reconcile.kinds import KindSettler, settles
from busguard.reconcile.operators import Operators
from busguard.reconcile.parse import Parsed, parse
from busguard.reconcile.policy import EscalationState, Item, Rejected, Settle, on_command, on_escalation
from busguard.reconcile.store import Processed, ReconcileState, States
from busguard.runtime.faults import Faults
from busguard.runtime.ops import Metrics
from busguard.runtime.outputs import Output, OutputBudget, dead_letter, proof_headers
from busguard.runtime.stage import SealingStage
from busguard.runtime.tolerant_fetch import preserved
from busguard.runtime.undecodable import Undecodable
from busguard.runtime.watched import WatchedFile
from busguard.state.store import BatchStore

log = structlog.get_logger(__name__)
_json = msgspec.json.Encoder()

__all__ = ["Reconciler", "operators_file", "parse"]


def _label(headers: Sequence[tuple[str, bytes | None]], name: str) -> str:
    """A metric label from an output's own header: the last of that name,
    since a dead letter carries the input's headers (any bytes, or null)
    before the reconciler's."""
    found = [v for k, v in headers if k == name]
    return (found[-1] or b"").decode("utf-8", "replace") if found else ""


def operators_file(cfg: Config) -> WatchedFile[Operators] | None:
    """`keys.operators`, loaded now (a bad file stops the start) and followed
    while running; None when only the deployment key may resolve."""
    if cfg.keys.operators is None:
        return None
    return WatchedFile(cfg.path(cfg.keys.operators), Operators.load, what="operators file", watch=cfg.keys.watch)


class Reconciler(SealingStage):
    def __init__(
        self,
        cfg: Config,
        *,
        identity: Identity,
        guard_public_key: bytes,
        store: ReconcileState,
        operators: WatchedFile[Operators] | None = None,
        metrics: Metrics | None = None,
        clock_ms: Callable[[], int] | None = None,
        faults: Faults | None = None,
        kind_store: BatchStore | None = None,
    ) -> None:
        """`identity` seals what the reconciler writes; `guard_public_key`
        verifies the escalations it reads (and commands signed with the guard
        key). They are one key only in a one-key deployment (no
        `keys.reconciler_key`), which is logged as a warning."""
        self.guard_public_key = guard_public_key
        if identity.public_key == guard_public_key:
            log.warning(
                "the reconciler seals with the guard key (one-key deployment); "
                "give it its own key (keys.reconciler_key) so the auditor can tell the roles apart",
                reconciler=identity.agent_id,
            )
        self.store = store
        # kinds that settle their own escalations change their rows in the guard's store (reconcile/kinds.py)
        self.settler = (
            KindSettler(kind_store, cfg.admission.decision_retention_ms, lambda: self.faults.reached("settled"))
            if kind_store is not None
            else None
        )
        self.operators = operators
        self.namespace = f"reconcile:{cfg.reconcile.group_id}"
        # every record it writes is sized against the broker's limit before it is persisted (docs/protocol.md 12.5)
        self.budget = OutputBudget(cfg.kafka.max_message_bytes, cfg.kafka.compression, identity.agent_id)
        self._start_stage(
            cfg,
            identity,
            metrics or Metrics(role="reconcile"),
            clock_ms,
            faults,
            topics=[cfg.topics.reconciliation],
            group_id=cfg.reconcile.group_id,
            role="reconciler",
        )
        self._follow(operators, "operators")

    async def run(self) -> None:
        await self.loop.run()

    async def housekeeping(self) -> None:
        pass

    async def process(self, records: Sequence[Any]) -> list[Output]:
        operators = self.operators.current() if self.operators is not None else Operators.none()
        resolves = self.cfg.keys.guard_key_resolves
        parsed = [
            parse(r.value, list(r.headers), self.guard_public_key, operators, resolves)
            if type(r) is not Undecodable
            else Parsed(problem=Rejected(r.reason, r.detail))
            for r in records
        ]
        now = self.clock_ms()
        sources = [(r.topic, r.partition, r.offset) for r in records]
        ids = {p.escalation_id for p in parsed if p.escalation_id is not None}

        def decide(done: Processed, states: States) -> tuple[Processed, States]:
            new: Processed = {}
            changed: States = {}
            for record, p, src in zip(records, parsed, sources, strict=True):
                if src in done or src in new:  # re-delivered: re-emit what was persisted
                    continue
                items, state = self._judge(p, states, Coordinates(topic=src[0], partition=src[1], offset=src[2]), now)
                outputs = self._outputs(items, record, p)
                too_large = self._too_large(items, outputs, record, p)
                if too_large is not None:  # one decision for the input, and the escalation stays as it was
                    items, state = [too_large], None
                    outputs = self._outputs(items, record, p)
                if state is not None:
                    states[state.escalation.decision_id] = changed[state.escalation.decision_id] = state
                new[src] = outputs
                self._log(items, record)
            return new, changed

        by_source = await asyncio.to_thread(self.store.run_batch, sources, ids, decide)
        outputs = [o for src in sources for o in by_source[src]]
        for o in outputs:
            self.metrics.decisions.labels(_label(o.headers, HEADER_OUTCOME), _label(o.headers, HEADER_REASON)).inc()
        return outputs

    def _judge(self, p: Parsed, states: States, source: Coordinates, now: int) -> tuple[list[Item], EscalationState | None]:
        auto = self.cfg.reconcile.auto_resolve_retransmissions
        if p.problem is not None:
            return [p.problem], None
        settle = self._settle(now)
        if p.escalation is not None:
            mine = settle if settles(p.escalation) is not None else None
            return on_escalation(p.escalation, states.get(p.escalation.decision_id), source, now, auto, mine)
        assert p.command is not None
        return on_command(p.command, states.get(p.command.escalation_id), source, now, p.signed, settle)

    def _settle(self, now: int) -> Settle | None:
        settler = self.settler
        if settler is None:
            return None
        return lambda escalation, choice: settler.settle(escalation, choice, now)

    def _too_large(self, items: list[Item], outputs: list[Output], record: Any, p: Parsed) -> Rejected | None:
        """Why a resolution or reply of `items` cannot be produced, or None.
        Dead letters size themselves (`dead_letter` falls back to the bounded
        form); a resolution carries the operator's command as signed, so only
        it grows with an input, but every sealed output is measured."""
        for item, o in zip(items, outputs, strict=True):
            if isinstance(item, Rejected) or self.budget.fits(o):
                continue
            what = f"{item.stage} resolution" if isinstance(item, Resolution) else "reply"
            value = record.value if type(record) is not Undecodable else None
            command = f", its note {len(p.command.note.encode())}" if p.command is not None else ""
            return Rejected(
                "output_too_large",
                f"its {what} would be a {self.budget.sent_size(o)}-byte record batch (kafka.compression {self.budget.compression}), "
                f"over kafka.max_message_bytes {self.budget.limit}: the input's value is {len(value or b'')} bytes{command}",
            )
        return None

    def _outputs(self, items: list[Item], record: Any, p: Parsed) -> list[Output]:
        """One output per item, in order."""
        out: list[Output] = []
        source = Coordinates(topic=record.topic, partition=record.partition, offset=record.offset)
        for item in items:
            if isinstance(item, Resolution):
                body = _json.encode(item)
                outcome = "resolved" if item.stage == "final" else "held"
                reason = item.resolved_as or (p.escalation.reason if p.escalation else "held")
                out.append(
                    self._sealed(
                        self.cfg.topics.audit,
                        (item.task_id or item.escalation_id).encode(),
                        body,
                        item.resolution_id,
                        outcome,
                        reason,
                        item.receipt_id,
                        source,
                        item.resolved_at,
                    )
                )
            elif isinstance(item, Reply):
                body = _json.encode(item)
                out.append(
                    self._sealed(
                        self.cfg.topics.replies,
                        item.to.encode(),
                        body,
                        item.resolution_id,
                        "reply",
                        "retransmission",
                        item.admission.receipt_id,
                        source,
                        item.admission.admitted_at,
                    )
                )
            else:
                key, value, headers = preserved(record, self.cfg.batch.max_payload_bytes)
                out.append(
                    dead_letter(
                        self.cfg.topics.dead_letter,
                        key,
                        value,
                        headers,
                        decision_id(self.namespace, source),
                        item.reason,
                        item.detail,
                        source,
                        max_payload_bytes=self.cfg.batch.max_payload_bytes if type(record) is Undecodable else None,
                        fits=self.budget.fits,
                    )
                )
        return out

    def _log(self, items: list[Item], record: Any) -> None:
        for item in items:
            if isinstance(item, Resolution):
                log.info(
                    "resolution",
                    resolution_id=item.resolution_id,
                    escalation_id=item.escalation_id,
                    stage=item.stage,
                    resolved_as=item.resolved_as,
                    by=item.by,
                    task_id=item.task_id,
                )
            elif isinstance(item, Rejected):
                log.warning(
                    "reconciliation input dead-lettered",
                    reason=item.reason,
                    detail=item.detail,
                    topic=record.topic,
                    partition=record.partition,
                    offset=record.offset,
                )

    def _sealed(
        self,
        topic: str,
        key: bytes,
        body: bytes,
        record_id: str,
        outcome: str,
        reason: str,
        receipt_id: str | None,
        source: Coordinates,
        at: int,
    ) -> Output:
        att = attest_record(self.identity.agent_id, record_id, outcome, reason, receipt_id, source, at, body)
        headers = [
            *proof_headers(record_id, att, seal(self.signer, att)),
            (HEADER_OUTCOME, outcome.encode()),
            (HEADER_REASON, reason.encode()),
        ]
        return Output(topic, key, body, headers, at)
