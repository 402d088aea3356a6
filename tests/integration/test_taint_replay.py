"""Seed 003's incident through `busguard run` on the embedded broker: replay requests on a
`[[routes]]` input, refused to the dead-letter topic with their node set, valid ones forwarded
with their plan attached and attested, an audit record for each."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import msgspec

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, collect, header, identity, make_setup, produce, sender
from busguard.policies.taint.replay import encode_request
from busguard.protocol.attestation import verify_admitted, verify_decision_record
from busguard.protocol.records import Decision
from busguard.runtime.topics import create_topics

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "taint"
TRACE = (EXAMPLES / "incident.trace.json").read_bytes()
LEDGER = (EXAMPLES / "incident.ledger.json").read_bytes()
CYCLE = (
    b'{"format": "busguard.taint-trace.v1", "nodes": ['
    b'{"id": "a", "predecessors": ["b"], "operation": "x", "side_effects": false, "outcome": "success", "input_hash": null, "output_hash": null},'
    b'{"id": "b", "predecessors": ["a"], "operation": "x", "side_effects": false, "outcome": "success", "input_hash": null, "output_hash": null}]}'
)


async def test_taint_route_end_to_end(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap)
    requests, plans = f"{s.handoffs}.taint", f"{s.handoffs}.taint-plans"
    await create_topics(s.bootstrap, [requests, plans], partitions=2)
    with s.config.open("a") as f:  # the route whose inputs carry the requests (docs/config.md)
        f.write(f'\n[[routes]]\nname = "taint"\ninputs = ["{requests}"]\ndownstream = "{plans}"\n')
    guard = GuardProcess(s)
    guard.wait_ready()
    responder = sender("planner")
    to = identity("executor").agent_id
    refused_req, valid_req, bad_req = encode_request(TRACE), encode_request(TRACE, LEDGER), encode_request(CYCLE)
    refused = responder.sign(kind="taint-replay", task_id="incident-2026-11-08", receiver=to, payload=refused_req)
    valid = responder.sign(kind="taint-replay", task_id="incident-2026-11-08/ledger", receiver=to, payload=valid_req)
    bad = responder.sign(kind="taint-replay", task_id="incident-bad", receiver=to, payload=bad_req)
    await produce(s.bootstrap, requests, [refused, valid, bad])
    try:
        got = await collect(
            s.bootstrap,
            [plans, s.dead_letter, s.audit],
            lambda c: len(c[s.audit]) >= 3 and len(c[plans]) >= 1 and len(c[s.dead_letter]) >= 2,
        )
    finally:
        assert guard.terminate() == 0, guard.tail()

    gk = s.guard.public_key
    dlq = {header(r, "busguard-reason"): r for r in got[s.dead_letter]}
    assert set(dlq) == {b"taint_replay_refused", b"taint_request_malformed"}
    # The refusal: the request unchanged, and the node set as a first-class signal in the detail.
    r = dlq[b"taint_replay_refused"]
    assert r.value == refused_req and list(r.headers)[:2] == refused.headers
    detail = json.loads(header(r, "busguard-detail") or b"")
    assert detail["verdict"] == "refused" and detail["condition"] == 1 and detail["nodes"] == ["post_message"]
    assert detail["suspect_total"] == 3 and "edges" not in detail
    m = dlq[b"taint_request_malformed"]
    assert b"cycle (a -> b -> a)" in (header(m, "busguard-detail") or b"")
    # The valid request: forwarded with its plan attached; the guard attests the forwarded bytes.
    (fwd,) = got[plans]
    assert header(fwd, "busguard-replaced") == b"1" and header(fwd, "busguard-annotation-taint.unit") == b"token"
    att = verify_admitted(fwd.value, list(fwd.headers), gk, to)
    assert att.receipt_id == valid.receipt_id and att.outcome == "forward"
    body = json.loads(fwd.value)
    assert body["format"] == "busguard.taint-replay-plan.v1"
    assert body["request_sha256"] == hashlib.sha256(valid_req).hexdigest() == valid.receipt.payload_hash
    assert body["request"] == json.loads(valid_req)
    plan = body["plan"]
    assert plan["unit"] == "token" and {x["sink"] for x in plan["sinks"]} == {"chat:#ops", "webhook:partner-archive"}
    # The audit topic: one sealed decision per request, each with the policy's annotations.
    audit = {}
    for rec in got[s.audit]:
        verify_decision_record(rec.value, list(rec.headers), gk)
        d = msgspec.json.decode(rec.value, type=Decision)
        audit[d.receipt_id] = d
    assert audit[refused.receipt_id].reason == "taint_replay_refused" and audit[refused.receipt_id].annotations == {
        "taint.verdict": "refused",
        "taint.condition": "1",
        "taint.nodes": "1",
    }
    # the decision record carries the forwarded plan by length and SHA-256 (docs/protocol.md 12.5)
    assert audit[valid.receipt_id].outcome == "forward" and audit[valid.receipt_id].replacement is None
    assert audit[valid.receipt_id].replacement_sha256 == att.forwarded_sha256 == hashlib.sha256(fwd.value).hexdigest()
    assert (audit[valid.receipt_id].annotations or {})["taint.unit"] == "token"
    assert audit[bad.receipt_id].reason == "taint_request_malformed"
