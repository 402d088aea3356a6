"""`busguard escalations resolve`: an operator's decision, delivered like any other input.

The command is sealed with an operator's own key listed in `keys.operators`
(then the name it carries must be the one listed for that key), or with
the guard key (accepted unless `keys.guard_key_resolves = false`, but it
proves no name: the auditor flags it), and produced to the
reconciliation topic under the escalation's own key (read from the record
the guard sealed, never from another that names it), so it lands in the
same partition, after the escalation, and the reconciler applies it exactly
once with the same crash-safe protocol. The operator's tool never writes
to the audit log itself: the reconciler does, copying the signed command
into the resolution, so the auditor can check the operator's signature.
"""

from __future__ import annotations

import asyncio
import sys
import time

import msgspec
from aiokafka import TopicPartition

from busguard.commands.audit import guard_key_for
from busguard.config import Config
from busguard.errors import ConfigError
from busguard.protocol.attestation import HEADER_DECISION_ID, HEADER_SEAL
from busguard.protocol.envelope import b64url_encode
from busguard.protocol.identity import multikey_encode
from busguard.protocol.keyfile import read_key
from busguard.protocol.reasons import Outcome
from busguard.protocol.records import COMMAND_CONTEXT, HEADER_COMMAND, HEADER_SIGNER, Resolution, ResolveCommand, ResolvedAs, audit_decoder
from busguard.protocol.signing import sign
from busguard.reconcile.operators import Operators
from busguard.reconcile.parse import parse
from busguard.runtime.clients import partitions_of, reader
from busguard.runtime.clients import producer as make_producer
from busguard.runtime.undecodable import Undecodable


async def _find_key(cfg: Config, topic: str, record_id: str, guard_public_key: bytes, idle_ms: int = 1500) -> bytes | None:
    """The Kafka key of the escalation on `topic` whose decision id is
    `record_id`, taken only from a record sealed by the guard: anyone who may
    write the topic can add a record with that `busguard-decision-id` and
    another key, which would send the command to a partition where the
    reconciler does not apply it after its escalation. Such records are
    passed over, each named on stderr."""
    # tolerant: a foreign record on the topic the client cannot decode is passed over, not fatal
    tps = [TopicPartition(topic, p) for p in (await partitions_of(cfg, [topic], name="resolve")).get(topic, [])]
    if not tps:
        return None
    consumer = reader(cfg, name="resolve")
    await consumer.start()
    try:
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        wanted = record_id.encode()
        while True:
            batch = await consumer.getmany(timeout_ms=idle_ms)
            if not batch:
                return None
            for recs in batch.values():
                for r in recs:
                    if type(r) is Undecodable or (HEADER_DECISION_ID, wanted) not in list(r.headers):
                        continue
                    found = parse(r.value, list(r.headers), guard_public_key, Operators.none()).escalation
                    if found is not None and found.decision_id == record_id and found.outcome == Outcome.ESCALATE:
                        return r.key  # type: ignore[no-any-return]
                    print(
                        f"passed over {r.topic}/{r.partition}/{r.offset}: it names escalation {record_id} "
                        "but is not that escalation sealed by the guard's key",
                        file=sys.stderr,
                    )
    finally:
        await consumer.stop()


async def _wait_for_resolution(cfg: Config, escalation_id: str, deadline: float) -> Resolution | None:
    # tolerant: a foreign record on the topic the client cannot decode is passed over, not fatal
    audit = cfg.topics.audit
    tps = [TopicPartition(audit, p) for p in (await partitions_of(cfg, [audit], name="resolve")).get(audit, [])]
    consumer = reader(cfg, name="resolve")
    await consumer.start()
    try:
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        while time.monotonic() < deadline:
            for recs in (await consumer.getmany(timeout_ms=500)).values():
                for r in recs:
                    if type(r) is Undecodable or r.value is None:  # anyone may write the audit topic: a null value is no resolution
                        continue
                    try:
                        rec = audit_decoder.decode(r.value)
                    except msgspec.MsgspecError:
                        continue
                    if isinstance(rec, Resolution) and rec.escalation_id == escalation_id and rec.stage == "final":
                        return rec
        return None
    finally:
        await consumer.stop()


def _guard_key(cfg: Config) -> bytes:
    """The guard's public key, as `busguard audit` finds it; on an operator's
    machine without the guard's key file, `keys.guard_public_key` is the way."""
    try:
        return guard_key_for(cfg, None)
    except ConfigError as exc:
        raise ConfigError(
            cfg.source,
            "keys.guard_public_key",
            None,
            f"the guard's public key (z6Mk…), to tell its escalations from forged records; keys.guard_key could not be read ({exc})",
        ) from None


def resolve(
    cfg: Config,
    escalation_id: str,
    resolve_as: ResolvedAs,
    note: str,
    operator: str,
    *,
    key_file: str | None = None,
    wait_s: float = 30.0,
) -> int:
    """With `key_file`: sign as that operator (the reconciler checks the key is
    listed in `keys.operators` under `operator`); else with the deployment key."""
    identity = read_key(key_file if key_file is not None else cfg.path(cfg.keys.guard_key))
    signer = [] if key_file is None else [(HEADER_SIGNER, multikey_encode(identity.public_key).encode())]

    async def main() -> int:
        key = await _find_key(cfg, cfg.topics.reconciliation, escalation_id, _guard_key(cfg))
        if key is None:
            raise ConfigError(
                cfg.topics.reconciliation, "escalation_id", escalation_id, "the decision id of an escalation on the reconciliation topic"
            )
        command = ResolveCommand(
            escalation_id=escalation_id, resolve_as=resolve_as, operator=operator, note=note, issued_at=time.time_ns() // 1_000_000
        )
        body = msgspec.json.encode(command)
        headers = [
            (HEADER_COMMAND, b"resolve"),
            (HEADER_SEAL, b64url_encode(sign(identity.seed, COMMAND_CONTEXT + body)).encode()),
            *signer,
        ]
        producer = make_producer(cfg, name="resolve")
        await producer.start()
        try:
            sent = await producer.send_and_wait(cfg.topics.reconciliation, value=body, key=key, headers=headers)
        finally:
            await producer.stop()
        print(f"resolve command for {escalation_id} sent ({resolve_as}, by operator:{operator})")
        if key_file is None:
            print(
                "note: signed with the guard key, which proves no operator's name: `busguard audit` will report it as unproven_operator; resolve with --key",
                file=sys.stderr,
            )
        if wait_s <= 0:
            return 0
        final = await _wait_for_resolution(cfg, escalation_id, time.monotonic() + wait_s)
        if final is None:
            where = f"{cfg.topics.reconciliation}/{sent.partition}/{sent.offset}"
            print(
                f"no final resolution seen within {wait_s:.0f}s; is `busguard reconcile` running? A command it refuses "
                f"(bad_seal, already_resolved, output_too_large: a note too long for the resolution) is dead-lettered "
                f"on {cfg.topics.dead_letter} with busguard-source {where} and the reason",
                file=sys.stderr,
            )
            return 1
        print(msgspec.json.format(msgspec.json.encode(final)).decode())
        if final.by != f"operator:{operator}" or final.resolved_as != resolve_as:
            print(f"note: the escalation was already resolved as {final.resolved_as} by {final.by}", file=sys.stderr)
            return 1
        return 0

    return asyncio.run(main())
