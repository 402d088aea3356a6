"""Every route end to end through a real guard process and the real broker."""

from __future__ import annotations

from pathlib import Path

import msgspec

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, all_decided, collect, header, identity, make_setup, produce, sender
from busguard.protocol.attestation import verify_admitted, verify_decision_record
from busguard.protocol.records import Decision

WORK = b'{"op":"summarize","doc":"q3"}'


def _malformed(good_headers: list[tuple[str, bytes]]) -> list[tuple[str, bytes | None, list[tuple[str, bytes]]]]:
    sig = dict(good_headers)["busguard-signature"]
    receipt = dict(good_headers)["busguard-receipt"]
    return [
        ("not_json", WORK, [("busguard-receipt", b"{not json"), ("busguard-signature", sig)]),
        ("missing_header", WORK, [("busguard-receipt", receipt)]),
        ("oversized", b"x" * 100_000, good_headers),
        ("bad_base64", WORK, [("busguard-receipt", receipt), ("busguard-signature", b"%%%" + sig[3:])]),
        ("wrong_type", WORK, [("busguard-receipt", receipt.replace(b'"v":1', b'"v":"one"')), ("busguard-signature", sig)]),
        ("duplicate_key", WORK, [("busguard-receipt", receipt[:-1] + b',"kind":"ack"}'), ("busguard-signature", sig)]),
        (
            "unknown_kind",
            WORK,
            [("busguard-receipt", receipt.replace(b'"kind":"handoff"', b'"kind":"launch"')), ("busguard-signature", sig)],
        ),
    ]


async def test_every_route_and_every_malformed_input(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, max_payload_bytes=65536)
    guard = GuardProcess(s)  # first: records issued before its store existed would be refused (store_warming)
    guard.wait_ready()
    planner, executor = sender("planner"), sender("executor")
    clean = planner.sign(kind="handoff", task_id="t-1", receiver=identity("executor").agent_id, payload=WORK)
    legacy_retry = planner.sign(kind="handoff", task_id="t-1", receiver=identity("executor").agent_id, payload=WORK)
    forged = executor.sign_receipt(planner.sign(kind="handoff", task_id="t-2", receiver="x", payload=WORK).receipt, WORK)
    bad = _malformed(clean.headers)
    inputs = [clean, clean, legacy_retry, forged, *[(v, h) for _, v, h in bad]]
    await produce(s.bootstrap, s.handoffs, inputs)
    ack = executor.sign(kind="ack", task_id="t-1", receiver=identity("planner").agent_id, payload=b'{"ok":true}')
    await produce(s.bootstrap, s.acks, [ack])
    total = len(inputs) + 1

    try:
        got = await collect(s.bootstrap, s.outputs, lambda c: all_decided(s, c, total))
        assert b"busguard_decisions_total" in guard.metrics().encode()
    finally:
        assert guard.terminate() == 0, guard.tail()

    gk = s.guard.public_key
    # downstream: the clean handoff and the ack, values untouched, attested
    (fwd,) = got[s.downstream_handoffs]
    assert fwd.value == WORK
    decided = {msgspec.json.decode(r.value, type=Decision).decision_id: msgspec.json.decode(r.value, type=Decision) for r in got[s.audit]}
    # outputs carry the decision time as their record timestamp, so re-emissions are identical there too
    assert fwd.timestamp == decided[header(fwd, "busguard-decision-id").decode()].decided_at  # type: ignore[union-attr]
    att = verify_admitted(fwd.value, list(fwd.headers), gk, identity("executor").agent_id)
    assert att.receipt_id == clean.receipt_id and att.outcome == "forward"
    assert [(k, v) for k, v in fwd.headers][: len(clean.headers)] == clean.headers
    (fwd_ack,) = got[s.downstream_acks]
    assert verify_admitted(fwd_ack.value, list(fwd_ack.headers), gk, identity("planner").agent_id).receipt_id == ack.receipt_id
    # reconciliation: the legacy retry, with both receipts and the supersedes link
    (esc,) = got[s.reconciliation]
    d = msgspec.json.decode(esc.value, type=Decision)
    verify_decision_record(esc.value, list(esc.headers), gk)
    assert (d.outcome, d.reason, d.supersedes) == ("escalate", "ambiguous_retransmission", clean.receipt_id)
    assert d.receipt == legacy_retry.receipt_bytes and d.prior is not None and d.prior.receipt == clean.receipt_bytes
    # dead letter: the duplicate, the forgery and every malformed record, original bytes kept
    dlq = {header(r, "busguard-reason"): r for r in got[s.dead_letter]}
    assert set(dlq) == {b"exact_duplicate", b"bad_signature", *(name.encode() for name, *_ in bad)}
    for name, value, headers in bad:
        r = dlq[name.encode()]
        assert list(r.headers)[: len(headers)] == headers
        if name == "oversized":  # kept at its source; identified by length and hash
            assert r.value is None and header(r, "busguard-original-length") == b"100000"
        else:
            assert r.value == value
        assert header(r, "busguard-detail")
        assert header(r, "busguard-source").decode().startswith(s.handoffs + "/")  # type: ignore[union-attr]
    # audit: exactly one sealed decision per input
    audit = [msgspec.json.decode(r.value, type=Decision) for r in got[s.audit]]
    for r in got[s.audit]:
        verify_decision_record(r.value, list(r.headers), gk)
    sources = [(a.source.topic, a.source.partition, a.source.offset) for a in audit]
    assert len(sources) == len(set(sources)) == total
