"""The `taint-replay` kind through the real admission path (admit_batch with a MemoryStore):
the seed's incident refused, then planned at token level with its ledger, and bad requests."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from busguard.policies import KINDS
from busguard.policies.seam import bare_context, policy_input
from busguard.policies.taint import replay
from busguard.policies.taint.plan import ReplayRefused
from busguard.protocol.envelope import Envelope
from busguard.protocol.reasons import Outcome, Reason
from busguard.protocol.receipt import decode_receipt
from busguard.protocol.records import Decision
from tests.unit.harness import Harness, agent, sender
from tests.unit.taint_build import incident, node, trace

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "taint"
TRACE = (EXAMPLES / "incident.trace.json").read_bytes()
LEDGER = (EXAMPLES / "incident.ledger.json").read_bytes()
TO = agent("executor")
KIND = replay.KIND


def request(trace_bytes: bytes = TRACE, ledger_bytes: bytes | None = None, outputs: tuple[str, ...] = ()) -> bytes:
    return replay.encode_request(trace_bytes, ledger_bytes, outputs)


def one(payload: bytes, task: str = "incident-1") -> tuple[Harness, Decision]:
    h = Harness()
    d = h.one(sender("planner").sign(kind=KIND, task_id=task, receiver=TO, payload=payload))
    return h, d


def test_the_kind_is_registered_with_its_reasons() -> None:
    spec = KINDS[KIND]
    assert spec.policy is not None and not spec.single_witness and spec.forward_annotations == ("taint.unit",)
    assert set(spec.reasons) == {Reason.TAINT_REPLAY_REFUSED, Reason.TAINT_REQUEST_MALFORMED, Reason.TAINT_TRACE_TOO_LARGE}


def test_the_seed_incident_is_refused_with_post_message_in_the_node_set_and_no_graph() -> None:
    _, d = one(request())
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.TAINT_REPLAY_REFUSED)
    detail = json.loads(d.detail)
    assert detail == {
        "verdict": "refused",
        "condition": 1,
        "conditions": [1],
        "outputs": ["post_message"],
        "nodes": ["post_message"],
        "nodes_total": 1,
        "suspect_total": 3,
    }
    assert d.replacement is None
    assert d.annotations == {"taint.verdict": "refused", "taint.condition": "1", "taint.nodes": "1"}
    # summarize is never cleared: the refusal has no field that could say so, and it stays suspect.
    assert not {"edges", "sinks", "graph", "clean", "cleared"} & set(detail)


def test_with_the_ledger_the_plan_is_token_level_attributes_both_sinks_and_is_forwarded_attached() -> None:
    payload = request(ledger_bytes=LEDGER)
    _, d = one(payload)
    assert (d.outcome, d.reason) == (Outcome.FORWARD, Reason.ADMITTED)
    assert d.annotations == {"taint.verdict": "valid", "taint.unit": "token", "taint.nodes": "3", "taint.sinks": "2"}
    fwd = json.loads(d.replacement or b"")
    assert fwd["format"] == "busguard.taint-replay-plan.v1" and fwd["action"] == "contain"
    # Bound to the signed request: its hash is the receipt's payload_hash, and the request is carried whole.
    receipt = decode_receipt(d.receipt or b"")
    assert fwd["request_sha256"] == hashlib.sha256(payload).hexdigest() == receipt.payload_hash
    assert fwd["request"] == json.loads(payload)
    plan = fwd["plan"]
    assert (plan["verdict"], plan["unit"], plan["forced_by"]) == ("valid", "token", [1, 2])
    post = next(n for n in plan["nodes"] if n["id"] == "post_message")
    assert post["sinks"] == ["chat:#ops", "webhook:partner-archive"] and post["sinks_from"] == "ledger"
    assert {s["sink"] for s in plan["sinks"]} == {"chat:#ops", "webhook:partner-archive"}
    assert [n["id"] for n in plan["nodes"]] == ["read_secret", "summarize", "post_message"]  # summarize attributed, not cleared


def test_a_refused_request_replayed_is_a_nonce_replay_and_not_judged_again() -> None:
    h = Harness()
    rec = sender("planner").sign(kind=KIND, task_id="i", receiver=TO, payload=request())
    assert h.one(rec).reason == Reason.TAINT_REPLAY_REFUSED
    assert h.one(rec).reason == Reason.NONCE_REPLAY


def test_a_forged_request_is_bad_signature_before_its_payload_is_judged() -> None:
    h = Harness()
    s = sender("planner")
    good, other = (s.sign(kind=KIND, task_id=t, receiver=TO, payload=b"not json") for t in ("a", "b"))
    forged = [(n, dict(other.headers)[n] if n == "busguard-signature" else v) for n, v in good.headers]
    assert h.feed_raw([(good.value, forged)])[0].reason == Reason.BAD_SIGNATURE
    assert h.one(good).reason == Reason.TAINT_REQUEST_MALFORMED


def _malformed(payload: bytes) -> str:
    _, d = one(payload)
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.TAINT_REQUEST_MALFORMED), d
    return str(d.detail)


def _trace_bytes(t: object) -> bytes:
    return msgspec.json.encode(t)


def test_malformed_requests_are_rejected_with_the_field_that_is_wrong() -> None:
    assert "not JSON" in _malformed(b"{")
    deep = b'{"format": "busguard.taint-replay.v1", "action": "replay", "trace": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    assert "nested too deeply" in _malformed(deep)
    assert "action" in _malformed(b'{"format": "busguard.taint-replay.v1", "trace": {}}')
    assert "unknown field `extra`" in _malformed(request()[:-1] + b', "extra": 1}')
    assert "appears twice" in _malformed(request()[:-1] + b', "action": "replay"}')
    assert "request.trace" in _malformed(replay.encode_request(b'{"format": "busguard.taint-trace.v1", "nodes": []}'))
    # A cycle, a dangling predecessor, a duplicate id: the trace's own malformed rules, named inside the request.
    cyc = trace(node("a", ["b"]), node("b", ["a"]))
    assert "cycle (a -> b -> a)" in _malformed(request(_trace_bytes(cyc)))
    dangling = _trace_bytes(trace(node("a", ["ghost"])))
    assert "request.trace: nodes[0].predecessors[0] = 'ghost'" in _malformed(request(dangling))
    dup = _trace_bytes(trace(node("a"), node("a")))
    assert "nodes[1].id = 'a'" in _malformed(request(dup))
    assert "request.ledger" in _malformed(request(ledger_bytes=b'{"format": "busguard.taint-ledger.v1"}'))
    assert "output = 'nobody'" in _malformed(request(outputs=("nobody",)))


def test_a_trace_above_the_bound_is_rejected_before_its_graph_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay, "MAX_NODES", 2)
    _, d = one(request())
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.TAINT_TRACE_TOO_LARGE)
    assert "3 nodes and 2 edges; at most 2 nodes" in d.detail
    monkeypatch.setattr(replay, "MAX_NODES", 3)
    assert one(request())[1].reason == Reason.TAINT_REPLAY_REFUSED


def test_a_request_above_max_payload_bytes_never_reaches_the_policy() -> None:
    h = Harness()
    from busguard.admission.batch import Input, admit_batch
    from busguard.protocol.records import Coordinates

    rec = sender("planner").sign(kind=KIND, task_id="big", receiver=TO, payload=request())
    d = admit_batch(
        [Input(Coordinates(topic="agents.in", partition=0, offset=0), rec.value, rec.headers)],
        store=h.store,
        registry=h.registry,
        now_ms=h.now,
        policy=h.policy,
        max_payload_bytes=len(rec.value) - 1,
    )[0]
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.OVERSIZED)


def test_an_explicit_output_narrows_the_cone() -> None:
    # summarize's cone has no pending node: valid at span level, and post_message is not in the graph.
    _, d = one(request(outputs=("summarize",)))
    assert d.outcome == Outcome.FORWARD
    plan = json.loads(d.replacement or b"")["plan"]
    assert plan["unit"] == "span" and [n["id"] for n in plan["nodes"]] == ["read_secret", "summarize"]


def test_the_refusal_detail_stays_within_the_header_bound_and_says_when_it_cut_the_node_set() -> None:
    many = trace(*(node(f"step-{i:05d}", fx=True, outcome="unknown", token=f"t{i}") for i in range(400)))
    refused = replay.judge(request(_trace_bytes(many)))
    assert isinstance(refused, replay.Parsed) and isinstance(refused.result, ReplayRefused)
    text = replay.refusal_detail(refused.result)
    body = json.loads(text)
    assert len(text.encode()) <= replay.MAX_DETAIL_BYTES
    assert body["nodes_total"] == 400 and body["nodes_truncated"] is True and 10 < len(body["nodes"]) < 400
    assert body["nodes"] == sorted(body["nodes"])[: len(body["nodes"])] == refused.result.nodes[: len(body["nodes"])]
    small = replay.judge(request(_trace_bytes(incident())))
    assert isinstance(small, replay.Parsed) and "nodes_truncated" not in replay.refusal_detail(small.result)  # type: ignore[arg-type]


def test_the_verdict_matches_busguard_taint_check_on_the_same_files() -> None:
    from busguard.policies.taint import decode_ledger, decode_trace, validate

    for lg in (None, LEDGER):
        parsed = replay.judge(request(ledger_bytes=lg))
        assert isinstance(parsed, replay.Parsed)
        offline = validate(decode_trace(TRACE), decode_ledger(lg) if lg else None)
        assert msgspec.json.encode(parsed.result) == msgspec.json.encode(offline)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.integers(0, len(TRACE)).map(lambda k: request(TRACE[:k] + TRACE[k + 1 :])))
def test_the_policy_never_raises_and_gives_one_of_its_outcomes(payload: bytes) -> None:
    parsed = replay.TaintReplayPolicy().parse(policy_input(_envelope(payload)), bare_context(0))
    if isinstance(parsed, replay.Parsed):
        out = replay.TaintReplayPolicy().decide(parsed, _NoState(), 0)
        assert (out.objection is None) == (out.replacement is not None)
    else:
        assert parsed.reason in (Reason.TAINT_REQUEST_MALFORMED, Reason.TAINT_TRACE_TOO_LARGE)


class _NoState:
    def get(self, key: tuple[str, str]) -> bytes | None:
        raise AssertionError("the taint policy reads no state")


def _envelope(payload: bytes) -> Envelope:
    from busguard.protocol.envelope import open_envelope

    rec = sender("planner").sign(kind=KIND, task_id="p", receiver=TO, payload=payload)
    return open_envelope(rec.value, rec.headers)


def test_the_demo_s_inlined_incident_is_the_example_files() -> None:
    from busguard.demo.taint import INCIDENT_LEDGER, INCIDENT_TRACE
    from busguard.policies.taint import decode_ledger, decode_trace

    assert decode_trace(INCIDENT_TRACE) == decode_trace(TRACE) and decode_ledger(INCIDENT_LEDGER) == decode_ledger(LEDGER)
