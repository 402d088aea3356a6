"""Every record the reconciler writes is sized against `kafka.max_message_bytes`
before it is persisted (docs/protocol.md 12.5): for each kind of output (a
held resolution, a policy's final resolution and its reply, an operator's
final resolution and its reply, a dead letter), a limit one byte below that
output makes its input one `output_too_large` dead letter that fits, leaves
the escalation as it was, and is re-emitted byte for byte."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import NamedTuple

import msgspec
import pytest

from busguard.config import Compression, Config, KafkaConfig, ReconcileConfig, TopicsConfig
from busguard.protocol.attestation import attest, decision_bytes, seal
from busguard.protocol.envelope import b64url_encode
from busguard.protocol.identity import agent_id_for_key, multikey_encode
from busguard.protocol.keyfile import Identity
from busguard.protocol.records import COMMAND_CONTEXT, HEADER_COMMAND, HEADER_SIGNER, Decision, Resolution, ResolveCommand, ResolvedAs
from busguard.protocol.signing import Signer, public_key_from_seed, sign
from busguard.reconcile.operators import Operators
from busguard.reconcile.policy import EscalationState
from busguard.reconcile.worker import Reconciler
from busguard.runtime.batch_size import compressed_batch_size
from busguard.runtime.outputs import Output
from busguard.runtime.watched import WatchedFile
from busguard.state.sqlite.reconcile import SqliteReconcileStore
from tests.unit.harness import seed
from tests.unit.test_reconcile_policy import escalations

GUARD, ALICE, RECONCILER = seed("guard"), seed("alice"), seed("reconciler")
TOPICS = TopicsConfig(reconciliation="t.rec", audit="t.audit", dead_letter="t.dlq", replies="t.replies")
NOTE = "n" * 3000  # an operator's long note: the resolution carries it twice (`note`, and in `command`)


class _Rec(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]


def _reconciler(tmp_path: Path, limit: int, codec: Compression, auto: bool, store: str = "") -> Reconciler:
    ops = tmp_path / "operators.toml"
    ops.write_text(f'[[operator]]\nname = "alice"\npublic_key = "{multikey_encode(public_key_from_seed(ALICE))}"\n')
    cfg = Config(
        topics=TOPICS,
        kafka=KafkaConfig(max_message_bytes=limit, compression=codec),
        reconcile=ReconcileConfig(auto_resolve_retransmissions=auto),
    )
    pk = public_key_from_seed(RECONCILER)
    return Reconciler(
        cfg,
        identity=Identity(seed=RECONCILER, public_key=pk, agent_id=agent_id_for_key(pk)),
        guard_public_key=public_key_from_seed(GUARD),
        store=SqliteReconcileStore(tmp_path / f"reconcile-{limit}-{codec}{store}.db", output=Output, state=EscalationState),
        operators=WatchedFile(ops, Operators.load, what="operators file"),
        clock_ms=lambda: 7,
    )


def _escalation(d: Decision, offset: int) -> _Rec:
    body = decision_bytes(d)
    att = attest(d, body, agent_id_for_key(public_key_from_seed(GUARD)))
    headers = [("busguard-decision-id", d.decision_id.encode()), ("busguard-attestation", att), ("busguard-seal", seal(Signer(GUARD), att))]
    return _Rec("t.rec", 0, offset, b"t", body, headers)


def _command(d: Decision, offset: int, resolve_as: ResolvedAs, note: str) -> _Rec:
    body = msgspec.json.encode(ResolveCommand(escalation_id=d.decision_id, resolve_as=resolve_as, operator="alice", note=note, issued_at=1))
    headers = [
        (HEADER_COMMAND, b"resolve"),
        ("busguard-seal", b64url_encode(sign(ALICE, COMMAND_CONTEXT + body)).encode()),
        (HEADER_SIGNER, multikey_encode(public_key_from_seed(ALICE)).encode()),
    ]
    return _Rec("t.rec", 0, offset, b"t", body, headers)


def _junk(offset: int) -> _Rec:
    """An unsealed record of incompressible bytes: its dead letter is as large compressed as not."""
    rnd = random.Random(offset)
    return _Rec("t.rec", 0, offset, b"t", rnd.randbytes(2000), [("h", rnd.randbytes(500))])


def _scenarios(tmp_path: Path) -> dict[str, tuple[bool, list[_Rec]]]:
    """name -> (auto-resolve retransmissions, the records; the last is the one measured)."""
    ambiguous, conflict = escalations(tmp_path)
    return {
        "held": (True, [_escalation(conflict, 0)]),
        "policy-final-and-reply": (True, [_escalation(ambiguous, 0)]),
        "operator-final": (True, [_escalation(conflict, 0), _command(conflict, 1, "reject", NOTE)]),
        "operator-final-and-reply": (False, [_escalation(ambiguous, 0), _command(ambiguous, 1, "retransmission", NOTE)]),
        "dead-letter": (True, [_junk(0)]),
    }


def _kind(o: Output) -> str:
    if o.topic == TOPICS.dead_letter:
        return "dead letter"
    if o.topic == TOPICS.replies:
        return "reply"
    r = msgspec.json.decode(o.value or b"", type=Resolution)
    return f"{r.stage} resolution"


def _run(worker: Reconciler, records: list[_Rec]) -> list[Output]:
    return asyncio.run(worker.process(records))


def _sent(o: Output, codec: Compression) -> int:
    return compressed_batch_size(o, codec)


CASES = [
    (name, codec)
    for name in ("held", "policy-final-and-reply", "operator-final", "operator-final-and-reply", "dead-letter")
    for codec in ("none", "zstd")
]


@pytest.mark.parametrize(("name", "codec"), CASES)
def test_a_limit_one_byte_below_each_output_makes_its_input_one_dead_letter_that_fits(
    tmp_path: Path, name: str, codec: Compression
) -> None:
    auto, records = _scenarios(tmp_path)[name]
    *before, last = records
    generous = _reconciler(tmp_path, 1 << 20, codec, auto)
    room = max((_sent(o, codec) for o in _run(generous, before)), default=0)  # what the records before it need
    measured = _run(generous, [last])
    assert measured and any(_sent(o, codec) > room for o in measured), name
    for o in (o for o in measured if _sent(o, codec) > room):
        limit = _sent(o, codec) - 1
        worker = _reconciler(tmp_path, limit, codec, auto)
        assert all(_sent(x, codec) <= limit for x in _run(worker, before))
        outputs = _run(worker, [last])
        assert all(_sent(x, codec) <= limit for x in outputs), [(_kind(x), _sent(x, codec)) for x in outputs]
        (only,) = outputs
        headers = dict(only.headers)
        assert only.topic == TOPICS.dead_letter
        if _kind(o) == "dead letter":  # a dead letter never grows past the limit: it takes the bounded form
            assert only.value is None and "busguard-original-sha256" in headers, headers
            continue
        assert headers["busguard-reason"] == b"output_too_large"
        first_too_large = next(x for x in measured if _sent(x, codec) > limit)
        detail = headers["busguard-detail"].decode()
        assert f"its {_kind(first_too_large)} would be" in detail and f"kafka.max_message_bytes {limit}" in detail, detail
        assert _run(worker, [last]) == outputs  # re-delivered after a crash: the same bytes again


def _finals(outputs: list[Output]) -> list[Resolution]:
    return [r for o in outputs if o.topic == TOPICS.audit and (r := msgspec.json.decode(o.value or b"", type=Resolution)).stage == "final"]


def test_a_command_too_large_to_carry_leaves_the_escalation_held_for_a_shorter_one(tmp_path: Path) -> None:
    """The refused command changes nothing: the escalation is still held, and
    alice's next, shorter command resolves it. The dead letter carries the
    refused command by value when that fits, else by length and SHA-256."""
    _, conflict = escalations(tmp_path)
    escalation, long = _escalation(conflict, 0), _command(conflict, 1, "reject", NOTE)
    full = _run(_reconciler(tmp_path, 1 << 20, "none", True), [escalation, long])
    (final,) = [o for o in full if o.topic == TOPICS.audit][1:]
    limit = _sent(final, "none") - 1
    worker = _reconciler(tmp_path, limit, "none", True)
    outputs = _run(worker, [escalation, long])
    (dead,) = [o for o in outputs if o.topic == TOPICS.dead_letter]
    assert dead.value == long.value and dict(dead.headers)["busguard-reason"] == b"output_too_large"
    assert not _finals(outputs)
    short = _command(conflict, 2, "reject", "conflict")
    (resolved,) = _finals(_run(worker, [short]))
    assert resolved.by == "operator:alice" and resolved.command is not None and resolved.command.body == short.value

    huge = _command(conflict, 3, "reject", "n" * limit)  # larger than any record the limit allows: by hash
    (bounded,) = _run(_reconciler(tmp_path, limit, "none", True, store="-again"), [escalation, huge])[1:]
    assert bounded.value is None and dict(bounded.headers)["busguard-reason"] == b"output_too_large"
    assert dict(bounded.headers)["busguard-original-length"] == str(len(huge.value or b"")).encode()
