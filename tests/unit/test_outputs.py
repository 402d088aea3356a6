"""What busguard emits for each outcome, and what receivers can verify — no Kafka."""

from __future__ import annotations

import msgspec
import pytest

from busguard import AttestationError, open_admitted, verify_admitted
from busguard.config import TopicsConfig
from busguard.protocol.attestation import attest, decision_bytes, seal, verify_decision_record
from busguard.protocol.keyfile import new_identity
from busguard.protocol.records import Decision
from busguard.protocol.signing import Signer
from busguard.runtime.outputs import Sealed, outputs_for

from .harness import Harness, agent, sender

TOPICS = TopicsConfig()
GUARD = new_identity()


def _sealed(d: Decision) -> Sealed:
    body = decision_bytes(d)
    att = attest(d, body, GUARD.agent_id)
    return Sealed(d, body, att, seal(Signer(GUARD.seed), att))


def _route(d: Decision, value: bytes | None, headers: list[tuple[str, bytes]]):  # type: ignore[no-untyped-def]
    return outputs_for(_sealed(d), b"planner", value, headers, "downstream", TOPICS, 1_048_576)


def test_forward_keeps_value_and_headers_and_is_verifiable() -> None:
    rec = sender("planner").sign(kind="handoff", task_id="t", receiver=agent("executor"), payload=b"work")
    (d,) = Harness().feed(rec)
    primary, audit = _route(d, rec.value, rec.headers)
    assert primary.topic == "downstream" and primary.value == b"work" and primary.headers[:2] == rec.headers
    adm = open_admitted(primary.value, primary.headers, GUARD.public_key, agent("executor"))
    assert adm.receipt.task_id == "t" and adm.decision_id == d.decision_id and adm.payload == b"work"
    assert audit.topic == TOPICS.audit and msgspec.json.decode(audit.value, type=Decision) == d
    verify_decision_record(audit.value, audit.headers, GUARD.public_key)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "tamper",
    ["payload", "decision-id header", "other guard", "receipt swapped", "seal"],
)
def test_receivers_refuse_anything_tampered(tamper: str) -> None:
    s = sender("planner")
    rec = s.sign(kind="handoff", task_id="t", receiver=agent("executor"), payload=b"work")
    other = s.sign(kind="handoff", task_id="u", receiver=agent("executor"), payload=b"work")
    (d,) = Harness().feed(rec)
    primary, _ = _route(d, rec.value, rec.headers)
    value, headers, key = primary.value, list(primary.headers), GUARD.public_key
    if tamper == "payload":
        value = b"w0rk"
    elif tamper == "decision-id header":
        headers = [(k, b"f" * 32 if k == "busguard-decision-id" else v) for k, v in headers]
    elif tamper == "other guard":
        key = new_identity().public_key
    elif tamper == "receipt swapped":
        headers = [(k, dict(other.headers)[k] if k in ("busguard-receipt", "busguard-signature") else v) for k, v in headers]
    else:
        headers = [(k, b"A" * 86 if k == "busguard-seal" else v) for k, v in headers]
    with pytest.raises(AttestationError):
        verify_admitted(value or b"", headers, key, agent("executor"))


def test_escalation_and_rejects_never_reach_downstream() -> None:
    s = sender("planner")
    first = s.sign(kind="handoff", task_id="t", receiver=agent("executor"), payload=b"work")
    again = s.sign(kind="handoff", task_id="t", receiver=agent("executor"), payload=b"work")
    bad = (b"x", [("busguard-receipt", b"{")])
    h = Harness()
    _, esc, dup = h.feed(first, again, first)
    (rej,) = h.feed_raw([bad])
    e_primary, _ = _route(esc, again.value, again.headers)
    assert e_primary.topic == TOPICS.reconciliation and e_primary.key == b"t"
    assert msgspec.json.decode(e_primary.value, type=Decision).supersedes == first.receipt_id
    for d, (value, headers) in ((dup, (first.value, first.headers)), (rej, bad)):
        primary, _ = _route(d, value, headers)
        got = dict(primary.headers)
        assert primary.topic == TOPICS.dead_letter and primary.value == value and primary.headers[: len(headers)] == headers
        assert got["busguard-reason"] == d.reason.encode() and got["busguard-outcome"] == d.outcome.encode()
        with pytest.raises(AttestationError):
            verify_admitted(primary.value or b"", primary.headers, GUARD.public_key, agent("executor"))
    assert dict(_route(dup, first.value, first.headers)[0].headers)["busguard-prior-decision-id"] == dup.prior.decision_id.encode()  # type: ignore[union-attr]


def test_re_emission_is_byte_identical() -> None:
    rec = sender("planner").sign(kind="handoff", task_id="t", receiver=agent("executor"), payload=b"work")
    (d,) = Harness().feed(rec)
    again = msgspec.msgpack.decode(msgspec.msgpack.encode(d), type=Decision)  # as read back from the store
    assert _route(d, rec.value, rec.headers) == _route(again, rec.value, rec.headers)


def test_verdict_headers_are_the_outcome_and_reason_and_their_cache_is_bounded() -> None:
    from busguard.protocol.attestation import HEADER_OUTCOME, HEADER_REASON
    from busguard.runtime import outputs

    assert outputs.verdict_headers("reject", "nonce_replay") == ((HEADER_OUTCOME, b"reject"), (HEADER_REASON, b"nonce_replay"))
    for i in range(outputs.VERDICTS_MAX + 50):
        assert outputs.verdict_headers("reject", f"r{i}")[1] == (HEADER_REASON, f"r{i}".encode())
    assert len(outputs._VERDICTS) <= outputs.VERDICTS_MAX
