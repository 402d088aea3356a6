"""Issue 22: the admitting consumer decides every record, never raising for its contents. No Kafka."""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from busguard.protocol.attestation import HEADER_ANNOTATION_PREFIX
from busguard.protocol.keyfile import new_identity
from busguard.sdk import AdmittingConsumer, Delivery, Fetched
from busguard.sdk.consumer import MAX_DETAIL
from busguard.testing import GUARD_PUBLIC_KEY, Harness, agent, sender

EXECUTOR = agent("executor")


def _forward(task: str = "t-1", receiver: str = EXECUTOR, h: Harness | None = None) -> tuple[bytes, list[tuple[str, bytes]]]:
    rec = sender("planner").sign(kind="handoff", task_id=task, receiver=receiver, payload=b'{"do":"' + task.encode() + b'"}')
    return (h or Harness()).forward(rec)


def _inbox(**kw: object) -> AdmittingConsumer:
    return AdmittingConsumer(None, guard_public_key=GUARD_PUBLIC_KEY, agent_id=EXECUTOR, **kw)  # type: ignore[arg-type]


def test_a_forward_for_me_is_delivered_with_its_receipt_payload_and_decision_id() -> None:
    value, headers = _forward()
    (d,) = _inbox().admit([Fetched("out", 3, 41, value, headers)]).deliveries
    assert (d.topic, d.partition, d.offset, d.receipt.task_id, d.payload) == ("out", 3, 41, "t-1", value)
    assert d.decision_id == dict(headers)["busguard-decision-id"].decode() == d.attestation.decision_id
    assert d.view is None and d.annotations == {}


def test_each_failure_is_a_refusal_with_its_reason_and_the_batch_goes_on() -> None:
    h = Harness("planner", "executor", "auditor")
    good_v, good_h = _forward("t-1", h=h)
    other_v, other_h = _forward("t-2", agent("auditor"), h=h)
    wrong_key = AdmittingConsumer(None, guard_public_key=new_identity().public_key, agent_id=EXECUTOR)
    records = [
        Fetched("out", 0, 0, b"tampered" + good_v, good_h),  # the payload the guard did not admit
        Fetched("out", 0, 1, other_v, other_h),  # admitted, for someone else
        Fetched("out", 0, 2, b"junk", [("busguard-attestation", b"\xff" * 10)]),
        Fetched("out", 0, 3, None, []),
        Fetched("out", 1, 9, good_v, good_h),
    ]
    batch = _inbox().admit(records)
    assert [(r.offset, r.reason) for r in batch.refusals] == [(0, "unattested"), (1, "not_for_me"), (2, "unattested"), (3, "unattested")]
    assert [d.offset for d in batch.deliveries] == [9]
    assert batch.positions == {("out", 0): 4, ("out", 1): 10}
    assert [r.reason for r in wrong_key.admit(records[4:]).refusals] == ["unattested"]


def test_a_readers_view_is_attached_and_its_refusal_is_unreadable() -> None:
    value, headers = _forward()

    def read(d: Delivery) -> object:
        return msgspec.json.decode(d.payload)

    (d,) = _inbox(readers={"handoff": read}).admit([Fetched("out", 0, 0, value, headers)]).deliveries
    assert d.view == {"do": "t-1"}

    def refuse(d: Delivery) -> object:
        raise ValueError("x" * 1000)

    (r,) = _inbox(readers={"handoff": refuse}).admit([Fetched("out", 0, 0, value, headers)]).refusals
    assert r.reason == "unreadable" and r.detail.startswith("handoff: x") and len(r.detail) == MAX_DETAIL


def test_annotation_headers_are_handed_back_by_name() -> None:
    """Those the attestation binds (a taint-replay plan's `taint.unit`); one
    added to a forward whose attestation binds none is refused."""
    from busguard.demo.taint import INCIDENT_LEDGER, INCIDENT_TRACE
    from busguard.policies.taint.replay import encode_request

    rec = sender("planner").sign(
        kind="taint-replay", task_id="p", receiver=EXECUTOR, payload=encode_request(INCIDENT_TRACE, INCIDENT_LEDGER)
    )
    (d,) = _inbox().admit([Fetched("out", 0, 0, *Harness().forward(rec))]).deliveries
    assert d.annotations == {"taint.unit": "token"}
    value, headers = _forward()
    headers = [*headers[:2], (HEADER_ANNOTATION_PREFIX + "verification", b"recomputed"), *headers[2:]]
    (r,) = _inbox().admit([Fetched("out", 0, 0, value, headers)]).refusals
    assert r.reason == "unattested" and "does not bind" in r.detail


_header = st.tuples(
    st.sampled_from(["busguard-attestation", "busguard-seal", "busguard-receipt", "busguard-decision-id", "busguard-tree-head", "x"]),
    st.one_of(st.none(), st.binary(max_size=64)),  # Kafka allows a null header value
)


@settings(max_examples=300, deadline=None)
@given(records=st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=64)), st.lists(_header, max_size=6)), max_size=8))
def test_any_bytes_get_exactly_one_outcome_each(records: list[tuple[bytes | None, list[tuple[str, bytes]]]]) -> None:
    value, headers = _forward()
    mixed = [*records, (value, headers)]
    batch = _inbox().admit([Fetched("t", 0, i, v, h) for i, (v, h) in enumerate(mixed)])
    assert len(batch.deliveries) + len(batch.refusals) == len(mixed)
    assert [d.offset for d in batch.deliveries] == [len(records)]


def test_a_genuine_forward_with_any_header_value_nulled_is_refused_not_raised() -> None:
    """Issue 35 finding 1: a null busguard-attestation (with any seal) or a
    genuine sealed forward whose busguard-receipt is null raised TypeError
    out of admit, so the agent re-read it at every start."""
    value, headers = _forward()
    # the sender's busguard-signature is not what a receiver checks: the guard's seal covers the receipt
    nulled = [
        [(k, None if j == i else v) for j, (k, v) in enumerate(headers)]
        for i in range(len(headers))
        if headers[i][0] != "busguard-signature"
    ]
    forged = [[("busguard-attestation", None), ("busguard-seal", b"A" * 86)]]
    records = [Fetched("out", 0, i, value, h) for i, h in enumerate([*nulled, *forged])]  # type: ignore[arg-type]
    batch = _inbox().admit([*records, Fetched("out", 0, len(records), value, headers)])
    assert [r.reason for r in batch.refusals] == ["unattested"] * len(records)
    assert [d.offset for d in batch.deliveries] == [len(records)]


def test_the_guards_key_and_the_batch_bound_are_checked_up_front() -> None:
    for bad in ({"guard_public_key": b"short"}, {"max_records": 0}):
        kw: dict[str, object] = {"guard_public_key": GUARD_PUBLIC_KEY, "agent_id": EXECUTOR, **bad}
        try:
            AdmittingConsumer(None, **kw)  # type: ignore[arg-type]
        except ValueError as exc:
            assert str(exc).split(":")[0] in bad
        else:
            raise AssertionError(f"accepted {bad}")


def test_the_head_cache_keeps_at_most_its_capacity() -> None:
    from busguard.protocol.attestation import HeadCache

    cache = HeadCache(capacity=3)
    for i in range(10):
        cache.add(b"k", b"%d" % i, b"s", object())  # type: ignore[arg-type]
    assert len(cache._heads) == 3 and cache.get(b"k", b"9", b"s") is not None and cache.get(b"k", b"0", b"s") is None


def _tolerant(raw: bytes) -> list[object]:
    """What `AdmittingConsumer.open`'s consumer yields for a partition's fetched bytes."""
    from busguard.runtime.decoding import PartitionDecoder

    return list(PartitionDecoder("out", 0, raw, 0))


def _kafka(value: bytes, headers: list[tuple[str, bytes]]) -> tuple[bytes, bytes, list[tuple[bytes, bytes | None]]]:
    return b"k", value, [(k.encode(), v) for k, v in headers]


def test_an_undecodable_record_or_batch_is_one_refusal_and_the_position_moves_past_it() -> None:
    """Issue 35 finding 1: a header name that is not UTF-8 (or a broken
    batch) raised out of aiokafka's getmany; through the tolerant reader it
    is one refusal `undecodable`, a whole batch one refusal for its span."""
    from tests.fuzz.batches import batch, record

    h = Harness()
    f = [_kafka(*_forward(f"t-{i}", h=h)) for i in range(3)]
    raw = (
        batch([record(0, *f[0]), record(1, b"k", b"{}", [(b"\xff\xfebusguard-seal", b"x")]), record(2, *f[1])])
        + batch([record(j, None, b"x", []) for j in range(4)], base_offset=3, crc=12345)
        + batch([record(0, *f[2])], base_offset=7)
    )
    got = _inbox().admit(_tolerant(raw))
    assert [d.offset for d in got.deliveries] == [0, 2, 7]
    assert [(r.offset, r.reason, r.last_offset) for r in got.refusals] == [(1, "undecodable", None), (3, "undecodable", 6)]
    assert got.refusals[0].detail.startswith("undecodable_header") and got.refusals[1].detail.startswith("undecodable_batch (offsets 3..6)")
    assert got.positions == {("out", 0): 8}


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=512), cut=st.integers(min_value=0, max_value=400))
def test_any_fetched_bytes_get_one_outcome_per_item_and_never_raise(raw: bytes, cut: int) -> None:
    from tests.fuzz.batches import batch, record

    good = batch([record(0, *_kafka(*_forward()))])
    items = _tolerant(good[:cut] + raw + good)
    got = _inbox().admit(items)
    assert len(got.deliveries) + len(got.refusals) == len(items)


def test_the_guard_key_is_raw_bytes_and_the_helper_converts_the_configs_multikey() -> None:
    from busguard.protocol.identity import multikey_encode
    from busguard.sdk import guard_key_from_multikey

    text = multikey_encode(GUARD_PUBLIC_KEY)
    for spelling in (text, "tulpa:" + text, "ink:" + text):
        inbox = AdmittingConsumer(None, guard_public_key=guard_key_from_multikey(spelling), agent_id=EXECUTOR)
        value, headers = _forward()
        assert len(inbox.admit([Fetched("out", 0, 0, value, headers)]).deliveries) == 1
    for bad in ("", text[:-1], "did:key:" + text, "tulpa:" + text + "x", "z" + "1" * 47):
        try:
            guard_key_from_multikey(bad)
        except ValueError as exc:
            assert "guard public key" in str(exc)
        else:
            raise AssertionError(f"accepted {bad!r}")
    try:
        AdmittingConsumer(None, guard_public_key=text, agent_id=EXECUTOR)  # type: ignore[arg-type]
    except ValueError as exc:
        assert "guard_key_from_multikey" in str(exc)
    else:
        raise AssertionError("accepted the multikey string as the key")


def test_open_refuses_client_options_that_would_change_what_it_decides() -> None:
    import asyncio

    import pytest

    for option in ("enable_auto_commit", "auto_offset_reset", "group_id", "key_deserializer", "bootstrap_servers"):
        with pytest.raises(ValueError, match=option):
            asyncio.run(
                AdmittingConsumer.open(
                    "out",
                    bootstrap_servers="127.0.0.1:1",
                    group_id="g",
                    guard_public_key=GUARD_PUBLIC_KEY,
                    agent_id=EXECUTOR,
                    client_options={option: True},
                )
            )
    with pytest.raises(ValueError, match="group_id"):
        asyncio.run(
            AdmittingConsumer.open(
                "out", bootstrap_servers="127.0.0.1:1", group_id="", guard_public_key=GUARD_PUBLIC_KEY, agent_id=EXECUTOR
            )
        )
