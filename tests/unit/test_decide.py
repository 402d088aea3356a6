"""Every row of the admission decision table (docs/protocol.md, "Decisions")."""

from __future__ import annotations

import msgspec
import pytest

from busguard.admission.types import AdmissionPolicy
from busguard.protocol.receipt import Receipt
from busguard.protocol.registry import KeyRegistry, KeyWindow
from busguard.protocol.signing import public_key_from_seed

from .harness import NOW, Harness, agent, seed, sender

PAYLOAD = b'{"op":"transform","input":"s3://bucket/in.parquet"}'


def handoff(s, task: str = "task-1", payload: bytes = PAYLOAD, **kw):  # type: ignore[no-untyped-def]
    return s.sign(kind="handoff", task_id=task, receiver=agent("executor"), payload=payload, **kw)


def test_clean_handoff_is_forwarded_with_full_facts() -> None:
    h = Harness()
    rec = handoff(sender("planner"))
    d = h.one(rec)
    assert (d.outcome, d.reason) == ("forward", "admitted")
    assert d.receipt_id == rec.receipt_id and d.receipt == rec.receipt_bytes
    assert d.principal == "key:" + agent("planner")[6:]
    assert d.public_key == public_key_from_seed(seed("planner"))
    assert h.store.task("handoff", "task-1", NOW) is not None


def test_exact_duplicate_returns_prior_admission_and_is_not_forwarded() -> None:
    h = Harness()
    rec = handoff(sender("planner"))
    first = h.one(rec)
    again = h.one(rec)
    assert (again.outcome, again.reason) == ("duplicate", "exact_duplicate")
    assert again.prior is not None and again.prior.decision_id == first.decision_id
    assert again.decision_id != first.decision_id  # a different input position


def test_exact_duplicate_with_new_issued_at_is_still_a_duplicate() -> None:
    h = Harness()
    s = sender("planner")
    first = handoff(s, nonce="n" * 22, issued_at_ms=NOW - 1000)
    resent = handoff(s, nonce="n" * 22, issued_at_ms=NOW)
    assert first.receipt_bytes != resent.receipt_bytes
    h.one(first)
    assert h.one(resent).reason == "exact_duplicate"


def test_redelivered_record_gets_its_original_decision_back_unchanged() -> None:
    h = Harness()
    rec = handoff(sender("planner"))
    first = h.one(rec, offset=7)
    h.now += 5_000  # re-delivered later: must not be re-judged
    again = h.one(rec, offset=7)
    assert msgspec.json.encode(again) == msgspec.json.encode(first)
    assert again.outcome == "forward"


def test_same_session_greater_sequence_is_a_retransmission_with_supersedes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    h = Harness()
    s = sender("planner", session_path=tmp_path / "s.json")
    first = handoff(s)
    retry = handoff(s)  # new nonce, same session, next sequence
    assert retry.receipt.sequence == first.receipt.sequence + 1  # type: ignore[operator]
    d1, d2 = h.one(first), h.one(retry)
    assert d1.outcome == "forward"
    assert (d2.outcome, d2.reason) == ("duplicate", "retransmission")
    assert d2.supersedes == first.receipt_id and d2.prior is not None


def test_same_task_new_nonce_without_session_escalates(tmp_path) -> None:  # type: ignore[no-untyped-def]
    h = Harness()
    s = sender("planner")
    first, retry = handoff(s), handoff(s)
    h.one(first)
    d = h.one(retry)
    assert (d.outcome, d.reason) == ("escalate", "ambiguous_retransmission")
    assert d.supersedes == first.receipt_id
    assert d.prior is not None and d.prior.receipt == first.receipt_bytes and d.receipt == retry.receipt_bytes


def test_same_task_from_another_session_escalates(tmp_path) -> None:  # type: ignore[no-untyped-def]
    h = Harness()
    a = sender("planner", session_path=tmp_path / "a.json")
    b = sender("planner", session_path=tmp_path / "b.json")
    h.one(handoff(a))
    d = h.one(handoff(b))
    assert (d.outcome, d.reason) == ("escalate", "ambiguous_retransmission")


def test_lower_sequence_in_same_session_is_not_a_retransmission(tmp_path) -> None:  # type: ignore[no-untyped-def]
    h = Harness()
    s = sender("planner", session_path=tmp_path / "s.json")
    early, late = handoff(s, task="other"), handoff(s)
    h.one(late)
    # same task/payload but signed *before* the admitted one: cannot be a recovery resend
    again = s.sign_receipt(msgspec.structs.replace(late.receipt, sequence=early.receipt.sequence, nonce="x" * 22), PAYLOAD)
    assert h.one(again).reason == "ambiguous_retransmission"


def test_conflicting_payload_escalates_even_with_session(tmp_path) -> None:  # type: ignore[no-untyped-def]
    h = Harness()
    s = sender("planner", session_path=tmp_path / "s.json")
    first = handoff(s)
    h.one(first)
    d = h.one(handoff(s, payload=b"something else"))
    assert (d.outcome, d.reason) == ("escalate", "task_conflict")
    assert d.prior is not None and d.prior.receipt_id == first.receipt_id and d.supersedes is None


def test_pure_replay_of_a_nonce_for_another_task_is_rejected() -> None:
    h = Harness()
    s = sender("planner")
    h.one(handoff(s, task="t1", nonce="reused-nonce-000001"))
    d = h.one(handoff(s, task="t2", nonce="reused-nonce-000001"))
    assert (d.outcome, d.reason) == ("reject", "nonce_replay")
    assert h.store.task("handoff", "t2", NOW) is None


def test_replay_of_an_escalated_receipt_is_a_nonce_replay() -> None:
    h = Harness()
    s = sender("planner")
    h.one(handoff(s))
    escalated = handoff(s)
    assert h.one(escalated).outcome == "escalate"
    assert h.one(escalated).reason == "nonce_replay"


def test_sequence_reuse_with_fresh_nonce_is_sequence_replay(tmp_path) -> None:  # type: ignore[no-untyped-def]
    h = Harness()
    s = sender("planner", session_path=tmp_path / "s.json")
    first = handoff(s, task="a")
    h.one(first)
    reused = s.sign_receipt(msgspec.structs.replace(first.receipt, task_id="b", nonce="fresh-nonce-0000001"), PAYLOAD)
    assert h.one(reused).reason == "sequence_replay"


def test_sequence_left_of_window_is_too_old(tmp_path) -> None:  # type: ignore[no-untyped-def]
    h = Harness(policy=AdmissionPolicy(window_size=8))
    s = sender("planner", session_path=tmp_path / "s.json")
    first = handoff(s, task="a")
    h.one(first)
    base = first.receipt
    h.one(s.sign_receipt(msgspec.structs.replace(base, task_id="b", nonce="n" * 20, sequence=base.sequence + 20), PAYLOAD))  # type: ignore[operator]
    old = s.sign_receipt(msgspec.structs.replace(base, task_id="c", nonce="m" * 20, sequence=base.sequence + 5), PAYLOAD)  # type: ignore[operator]
    assert h.one(old).reason == "sequence_too_old"
    inside = s.sign_receipt(msgspec.structs.replace(base, task_id="d", nonce="k" * 20, sequence=base.sequence + 15), PAYLOAD)  # type: ignore[operator]
    assert h.one(inside).outcome == "forward"


def test_two_copies_in_one_batch_admit_once() -> None:
    h = Harness()
    rec = handoff(sender("planner"))
    d1, d2 = h.feed(rec, rec)
    assert (d1.outcome, d2.outcome) == ("forward", "duplicate")


@pytest.mark.parametrize(
    ("offset_ms", "reason"),
    [(-300_000, None), (-300_001, "timestamp_expired"), (30_000, None), (30_001, "timestamp_too_far_future")],
)
def test_freshness_bounds_are_inclusive(offset_ms: int, reason: str | None) -> None:
    h = Harness()
    d = h.one(handoff(sender("planner"), issued_at_ms=NOW + offset_ms))
    assert d.reason == (reason or "admitted")


def test_store_warming_refuses_records_the_lost_store_could_have_admitted() -> None:
    """Since issue 8 the fence covers the future bound: anything issued up to
    max_future_ms after the store's creation could have been admitted by the
    store it replaces (before: only issued_at < created_at was refused)."""
    created = NOW - 10_000
    h = Harness(store_created=created)
    assert h.one(handoff(sender("planner"), task="a", issued_at_ms=NOW - 20_000)).reason == "store_warming"
    assert (
        h.one(handoff(sender("planner"), task="b", issued_at_ms=NOW - 5_000)).reason == "store_warming"
    )  # after creation, inside the future bound
    assert h.one(handoff(sender("planner"), task="c", issued_at_ms=created + 30_001)).reason == "admitted"
    h.now = created + 300_000  # past max_age_ms, not yet past max_future_ms + max_age_ms
    assert h.one(handoff(sender("planner", now=h.now), task="d", issued_at_ms=created + 30_000)).reason == "store_warming"
    assert h.one(handoff(sender("planner", now=h.now), task="e", issued_at_ms=h.now - 1_000)).reason == "admitted"


def test_bad_signature_records_nothing() -> None:
    h = Harness()
    rec = handoff(sender("planner"))
    forged = [(k, v if k != "busguard-signature" else b"A" * 85 + b"A") for k, v in rec.headers]
    d = h.feed_raw([(rec.value, forged)])[0]
    assert (d.outcome, d.reason) == ("reject", "bad_signature")
    assert h.store.task("handoff", "task-1", NOW) is None
    assert h.one(rec).outcome == "forward"  # the nonce was not burnt by the forgery


def test_signature_by_another_key_is_bad_signature() -> None:
    h = Harness()
    mallory = sender("mallory")
    forged = mallory.sign_receipt(handoff(sender("planner")).receipt, PAYLOAD)
    assert h.one(forged).reason == "bad_signature"


def test_payload_tampering_is_detected() -> None:
    h = Harness()
    rec = handoff(sender("planner"))
    d = h.feed_raw([(rec.value + b" ", rec.headers)])[0]
    assert d.reason == "payload_hash_mismatch"


def test_unknown_sender() -> None:
    assert Harness().one(handoff(sender("mallory"))).reason == "unknown_sender"


def test_open_enrollment_admits_unlisted_self_certifying_sender() -> None:
    reg = KeyRegistry({}, open_enrollment=True)
    assert Harness(reg=reg).one(handoff(sender("stranger"))).reason == "admitted"


def _named(now_offsets: dict[str, int | None]) -> KeyRegistry:
    window = KeyWindow(
        key_id="k1", public_key=public_key_from_seed(seed("planner")), **{k: NOW + v for k, v in now_offsets.items() if v is not None}
    )
    return KeyRegistry({"planner": (window,)})


@pytest.mark.parametrize(
    ("bounds", "reason"),
    [
        ({}, "admitted"),
        ({"revoked_at": 0}, "revoked_key"),
        ({"revoked_at": 1}, "admitted"),
        ({"not_after": 0}, "expired_key"),
        ({"not_before": 1}, "expired_key"),
    ],
)
def test_named_agent_key_windows(bounds: dict[str, int], reason: str) -> None:
    h = Harness(reg=_named(bounds))  # type: ignore[arg-type]
    s = sender("planner", agent_id="planner", key_id="k1")
    assert h.one(handoff(s)).reason == reason


def test_unknown_key_id() -> None:
    h = Harness(reg=_named({}))
    s = sender("planner", agent_id="planner", key_id="k2")
    assert h.one(handoff(s)).reason == "unknown_key"


def test_rotation_overlap_verifies_without_key_id() -> None:
    old = KeyWindow(key_id="old", public_key=public_key_from_seed(seed("planner-old")), not_after=NOW + 60_000)
    new = KeyWindow(key_id="new", public_key=public_key_from_seed(seed("planner")), not_before=NOW - 60_000)
    h = Harness(reg=KeyRegistry({"planner": (old, new)}))
    d = h.one(handoff(sender("planner", agent_id="planner")))
    assert (d.reason, d.key_id) == ("admitted", "new")


def test_ink_and_tulpa_spellings_share_one_nonce_scope() -> None:
    h = Harness(policy=AdmissionPolicy(nonce_scope="principal"))
    s = sender("planner")
    first = handoff(s, task="a", nonce="shared-nonce-00001")
    h.one(first)
    other = sender("planner", agent_id="ink:" + agent("planner")[6:])
    d = h.one(handoff(other, task="b", nonce="shared-nonce-00001"))
    assert d.reason == "nonce_replay"


def test_principal_scope_lets_different_senders_share_a_nonce_global_does_not() -> None:
    for scope, second in (("principal", "admitted"), ("global", "nonce_replay")):
        h = Harness(policy=AdmissionPolicy(nonce_scope=scope))  # type: ignore[arg-type]
        h.one(handoff(sender("planner"), task="a", nonce="same-nonce-0000001"))
        ack = sender("executor").sign(kind="ack", task_id="a", receiver=agent("planner"), payload=b"ok", nonce="same-nonce-0000001")
        assert h.one(ack).reason == second


def test_unknown_kind_is_rejected() -> None:
    rec = sender("planner").sign(kind="launch_missiles", task_id="t", receiver="x", payload=b"")
    assert Harness().one(rec).reason == "unknown_kind"


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("nonce", "short", "malformed_nonce"),
        ("nonce", "has spaces in it!!!!", "malformed_nonce"),
        ("issued_at", "2026-11-29 12:00:00Z", "malformed_timestamp"),
        ("sender", "", "malformed_agent_id"),
        ("payload_hash", "ABC", "malformed_field"),
        ("task_id", "", "malformed_field"),
        ("v", 2, "unsupported_version"),
    ],
)
def test_malformed_fields(field: str, value: object, reason: str) -> None:
    s = sender("planner")
    base = handoff(s).receipt
    rec = s.sign_receipt(msgspec.structs.replace(base, **{field: value}), PAYLOAD)
    assert Harness().one(rec).reason == reason


def test_session_without_sequence_is_malformed() -> None:
    s = sender("planner")
    rec = s.sign_receipt(msgspec.structs.replace(handoff(s).receipt, session_id="s1"), PAYLOAD)
    assert Harness().one(rec).reason == "malformed_session"


def _signed_raw(raw: bytes) -> list[tuple[str, bytes]]:
    from busguard.protocol.envelope import b64url_encode
    from busguard.protocol.receipt import signing_input
    from busguard.protocol.signing import sign

    return [("busguard-receipt", raw), ("busguard-signature", b64url_encode(sign(seed("planner"), signing_input(raw))).encode())]


def test_structural_rejects() -> None:
    good = handoff(sender("planner"))
    raw = good.receipt_bytes
    sig = dict(good.headers)["busguard-signature"]
    cases: list[tuple[bytes | None, list[tuple[str, bytes]], str]] = [
        (PAYLOAD, [("busguard-signature", sig)], "missing_header"),
        (PAYLOAD, [("busguard-receipt", raw)], "missing_header"),
        (PAYLOAD, [*good.headers, ("busguard-receipt", raw)], "duplicate_header"),
        (PAYLOAD, [*good.headers, ("busguard-attestation", b"{}")], "reserved_header"),
        (PAYLOAD, [("busguard-receipt", b"not json"), ("busguard-signature", sig)], "not_json"),
        (PAYLOAD, [("busguard-receipt", b"[1,2]"), ("busguard-signature", sig)], "not_json"),
        (PAYLOAD, [("busguard-receipt", raw), ("busguard-signature", b"!!notbase64!!")], "bad_base64"),
        (PAYLOAD, [("busguard-receipt", raw), ("busguard-signature", sig[:-1] + b"B")], "bad_base64"),
        (PAYLOAD, _signed_raw(raw.replace(b'"v":1', b'"v":"1"')), "wrong_type"),
        (PAYLOAD, _signed_raw(raw[:-1] + b',"extra":1}'), "unknown_field"),
        (PAYLOAD, _signed_raw(raw[:-1] + b',"nonce":"another-nonce-0001"}'), "duplicate_key"),
        (PAYLOAD, _signed_raw(raw[:-1] + b',"\\u006eonce":"another-nonce-0001"}'), "duplicate_key"),
        (PAYLOAD, _signed_raw(raw.replace(b',"kind":"handoff"', b"")), "missing_field"),
        (PAYLOAD, _signed_raw(raw + b" " * 5000), "oversized"),
        (b"x" * 1_048_577, good.headers, "oversized"),
        (None, good.headers, "missing_field"),
    ]
    h = Harness()
    decisions = h.feed_raw([(v, hd) for v, hd, _ in cases])
    assert [d.reason for d in decisions] == [r for *_, r in cases]
    assert all(d.outcome == "reject" and d.detail for d in decisions)
    assert h.one(good).outcome == "forward"  # none of the bad copies burnt anything


def test_every_decision_id_is_deterministic_in_the_input_position() -> None:
    a, b = Harness(), Harness()
    rec = handoff(sender("planner"))
    assert a.one(rec, offset=3).decision_id == b.one(rec, offset=3).decision_id
    assert a.one(rec, offset=4).decision_id != b.one(rec, offset=3).decision_id


def test_receipt_struct_field_order_is_the_documented_emit_order() -> None:
    assert Receipt.__struct_fields__[:8] == ("v", "kind", "task_id", "sender", "receiver", "payload_hash", "nonce", "issued_at")


def test_exact_resend_after_the_nonce_aged_out_is_still_a_duplicate() -> None:
    h = Harness(policy=AdmissionPolicy(nonce_retention_ms=330_000))
    first = handoff(sender("planner"), nonce="aging-nonce-0000001")
    h.one(first)
    h.now = NOW + 400_000  # nonce forgotten, task entry kept
    resent = handoff(sender("planner", now=h.now), nonce="aging-nonce-0000001")
    d = h.one(resent)
    assert (d.outcome, d.reason) == ("duplicate", "exact_duplicate")


def test_open_enrollment_still_refuses_small_order_keys() -> None:
    from busguard.protocol.identity import agent_id_for_key

    reg = KeyRegistry({}, open_enrollment=True)
    identity_point = bytes([1]) + bytes(31)  # small order: anyone can "sign" for it
    s = sender("planner", agent_id=agent_id_for_key(identity_point))
    assert Harness(reg=reg).one(handoff(s)).reason == "unknown_sender"


def test_a_different_record_at_a_known_position_is_judged_afresh() -> None:
    """A recreated topic reuses offsets; its records are not re-deliveries."""
    h = Harness()
    first = handoff(sender("planner"), task="a")
    assert h.one(first, offset=0).outcome == "forward"
    other = handoff(sender("planner"), task="b")
    d = h.one(other, offset=0)
    assert (d.outcome, d.task_id, d.receipt_id) == ("forward", "b", other.receipt_id)
    assert h.one(other, offset=0) == d  # and that decision now stands for re-deliveries
