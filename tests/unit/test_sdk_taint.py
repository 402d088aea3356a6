"""Issue 22, seed 003: the containment agent's typed view of busguard's replay plan. No Kafka."""

from __future__ import annotations

import hashlib
import json

import msgspec

from busguard.demo.taint import INCIDENT_LEDGER, INCIDENT_TRACE
from busguard.policies.taint.replay import encode_request
from busguard.sdk.consumer import AdmittingConsumer, Fetched
from busguard.sdk.taint import KIND, READERS, PlanView
from busguard.testing import GUARD_PUBLIC_KEY, Harness, agent, sender

ME = agent("executor")
SPAN_TRACE = (
    b'{"format": "busguard.taint-trace.v1", "nodes": ['
    b'{"id": "a", "predecessors": [], "operation": "read", "side_effects": false, "outcome": "success",'
    b' "input_hash": "b3b3f2345b9588d408ad65afe6ca5ccd8733dd3dacc7e05b683e39f5869dc2f7", "output_hash": null}]}'
)


def _forward(payload: bytes, task: str = "incident-1") -> tuple[bytes, list[tuple[str, bytes]], str]:
    rec = sender("planner").sign(kind=KIND, task_id=task, receiver=ME, payload=payload)
    value, headers = Harness().forward(rec)
    return value, headers, rec.receipt.payload_hash


def _admit(value: bytes, headers: list[tuple[str, bytes]]) -> tuple[list[PlanView], list[str]]:
    batch = AdmittingConsumer(None, guard_public_key=GUARD_PUBLIC_KEY, agent_id=ME, readers=READERS).admit(
        [Fetched("plans", 0, 0, value, headers)]
    )
    return [d.view for d in batch.deliveries], [r.detail for r in batch.refusals]


def test_a_token_level_plan_is_one_unit_per_rebuilt_token_and_per_other_node() -> None:
    value, headers, payload_hash = _forward(encode_request(INCIDENT_TRACE, INCIDENT_LEDGER))
    (view,), refused = _admit(value, headers)
    assert refused == []
    assert (view.task_id, view.action, view.unit, view.request_sha256) == ("incident-1", "contain", "token", payload_hash)
    assert view.request == encode_request(INCIDENT_TRACE, INCIDENT_LEDGER)
    assert [(u.key, u.unit, u.nodes, u.sinks) for u in view.units] == [
        ("span:read_secret", "span", ("read_secret",), ()),
        ("span:summarize", "span", ("summarize",), ()),
        ("token:tok-post-7", "token", ("post_message",), ("chat:#ops", "webhook:partner-archive")),
    ]


def test_a_span_level_plan_is_one_span_unit_per_cone_node() -> None:
    value, headers, _ = _forward(encode_request(SPAN_TRACE, action="replay"))
    (view,), _ = _admit(value, headers)
    assert (view.unit, view.action, [u.key for u in view.units]) == ("span", "replay", ["span:a"])


def _with(headers: list[tuple[str, bytes]], name: str, value: bytes | None) -> list[tuple[str, bytes]]:
    out = [(k, v) for k, v in headers if k != name]
    if value is not None:
        out.insert(2, (name, value))
    return out


def test_a_unit_annotation_that_disagrees_with_the_attested_plan_is_refused() -> None:
    """Altered on the way, the header no longer matches the attestation's
    `annotations_sha256` (the consumer refuses it); the reader's own check,
    run on a delivery built by hand, still refuses a disagreeing one."""
    value, headers, _ = _forward(encode_request(INCIDENT_TRACE, INCIDENT_LEDGER))
    for altered in (b"span", None):
        views, refused = _admit(value, _with(headers, "busguard-annotation-taint.unit", altered))
        assert views == [] and len(refused) == 1 and "annotations_sha256" in refused[0]
    (d,) = (
        AdmittingConsumer(None, guard_public_key=GUARD_PUBLIC_KEY, agent_id=ME).admit([Fetched("plans", 0, 0, value, headers)]).deliveries
    )
    for said in ({"taint.unit": "span"}, {}):
        try:
            READERS[KIND](msgspec.structs.replace(d, annotations=said))
        except ValueError as exc:
            assert "taint.unit" in str(exc)
        else:
            raise AssertionError(f"read with annotations {said}")


def test_a_plan_for_another_request_is_unreadable() -> None:
    """A forward whose request_sha256 is not the receipt's payload_hash (the reader's own check,
    run here on a delivery built by hand, since the guard never forwards one)."""
    value, headers, _ = _forward(encode_request(INCIDENT_TRACE, INCIDENT_LEDGER))
    inbox = AdmittingConsumer(None, guard_public_key=GUARD_PUBLIC_KEY, agent_id=ME)
    (d,) = inbox.admit([Fetched("plans", 0, 0, value, headers)]).deliveries
    other = encode_request(INCIDENT_TRACE)
    body = json.loads(value)
    body["request"] = json.loads(other)

    body["request_sha256"] = hashlib.sha256(json.dumps(body["request"]).encode()).hexdigest()
    forged = msgspec.structs.replace(d, payload=json.dumps(body).encode())
    try:
        READERS[KIND](forged)
    except ValueError as exc:
        assert "request" in str(exc)
    else:
        raise AssertionError("a plan for another request was read")
    for bad in (b"{}", b"not json", json.dumps({**json.loads(value), "format": "x"}).encode()):
        try:
            READERS[KIND](msgspec.structs.replace(d, payload=bad))
        except ValueError:
            continue
        raise AssertionError(f"read {bad[:20]!r}")
