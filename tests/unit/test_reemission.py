"""Re-emission at a decided position is for the identical record only (key,
value and headers, by `record_sha256`); anything else there is judged afresh,
and the replacement is reported. No Kafka."""

from __future__ import annotations

import hashlib
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from busguard.admission.batch import Input, admit_batch
from busguard.protocol.reasons import Outcome, Reason
from busguard.protocol.records import Coordinates, Decision, headers_encoding, record_sha256
from busguard.state.memory.store import MemoryStore
from busguard.state.rocksdb.store import RocksStore
from busguard.state.sqlite.store import SqliteStore
from busguard.state.store import StateStore

from .harness import NOW, Harness, agent, sender, store_as_before

AT = Coordinates(topic="agents.in", partition=0, offset=7)


def _feed(
    h: Harness, value: bytes | None, headers: list[tuple[str, bytes]], key: bytes | None = b"k"
) -> tuple[Decision, list[tuple[Decision, Decision]]]:
    replaced: list[tuple[Decision, Decision]] = []
    (d,) = admit_batch(
        [Input(AT, value, headers, key)],
        store=h.store,
        registry=h.registry,
        now_ms=h.now,
        policy=h.policy,
        on_replaced=lambda earlier, new: replaced.append((earlier, new)),
    )
    return d, replaced


@pytest.fixture(params=["memory", "sqlite", "rocksdb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StateStore:
    if request.param == "memory":
        return MemoryStore(created_at=NOW - 3_600_000)
    if request.param == "rocksdb":
        return RocksStore(tmp_path / "state.rocksdb", now_ms=NOW - 3_600_000, synchronous="NORMAL")
    return SqliteStore(tmp_path / "state.db", now_ms=NOW - 3_600_000, synchronous="NORMAL")


def _first(store: StateStore) -> tuple[Harness, bytes, list[tuple[str, bytes]], Decision]:
    h = Harness(store=store)
    rec = sender("planner").sign(kind="handoff", task_id="t", receiver=agent("executor"), payload=b"work")
    d, replaced = _feed(h, rec.value, rec.headers)
    assert d.outcome == Outcome.FORWARD and not replaced
    assert d.record_sha256 == record_sha256(b"k", rec.value, rec.headers)
    return h, rec.value, rec.headers, d


def test_the_identical_record_is_re_emitted_as_decided(store: StateStore) -> None:
    h, value, headers, first = _first(store)
    h.now += 1000  # a later re-delivery: a fresh judgement would carry a new decided_at
    again, replaced = _feed(h, value, list(headers))
    assert again == first and not replaced


def test_a_changed_value_at_a_decided_position_is_judged_afresh(store: StateStore) -> None:
    h, value, headers, first = _first(store)
    again, replaced = _feed(h, value + b"!", headers)
    assert (again.outcome, again.reason) == (Outcome.REJECT, Reason.PAYLOAD_HASH_MISMATCH)
    assert again.receipt_id == first.receipt_id and again.decision_id == first.decision_id
    assert replaced == [(first, again)]


def test_changed_headers_at_a_decided_position_are_judged_afresh(store: StateStore) -> None:
    """Same receipt and value, one more header: the receipt does not cover it, so it is not the old forward."""
    h, value, headers, first = _first(store)
    again, replaced = _feed(h, value, [*headers, ("trace", b"injected")])
    assert (again.outcome, again.reason) == (Outcome.DUPLICATE, Reason.EXACT_DUPLICATE)
    assert replaced == [(first, again)]
    # and the position now holds the new decision: the same new record is re-emitted as it
    third, replaced = _feed(h, value, [*headers, ("trace", b"injected")])
    assert third == again and not replaced


def test_a_changed_key_at_a_decided_position_is_judged_afresh(store: StateStore) -> None:
    h, value, headers, _ = _first(store)
    again, replaced = _feed(h, value, headers, key=b"other")
    assert again.reason == Reason.EXACT_DUPLICATE and len(replaced) == 1


def test_a_decision_stored_without_a_digest_is_matched_on_its_receipt(store: StateStore) -> None:
    """Decisions persisted before record_sha256 existed (the same bytes as a
    decision with it unset: omitted defaults) still re-emit after an upgrade."""
    h, value, headers, first = _first(store)
    legacy = msgspec.structs.replace(first, record_sha256=None)
    store_as_before(store, AT, legacy, NOW + 10**9)
    assert b"record_sha256" not in msgspec.msgpack.encode(legacy)
    assert store.decision_at(AT) == legacy
    again, replaced = _feed(h, value, [*headers, ("trace", b"x")])
    assert again == legacy and not replaced


def test_two_different_records_for_one_position_in_one_batch() -> None:
    h = Harness()
    rec = sender("planner").sign(kind="handoff", task_id="t", receiver=agent("executor"), payload=b"work")
    replaced: list[tuple[Decision, Decision]] = []
    a, b = admit_batch(
        [Input(AT, rec.value, rec.headers), Input(AT, rec.value, [*rec.headers, ("x", b"y")])],
        store=h.store,
        registry=h.registry,
        now_ms=h.now,
        policy=h.policy,
        on_replaced=lambda e, n: replaced.append((e, n)),
    )
    assert (a.reason, b.reason) == (Reason.ADMITTED, Reason.EXACT_DUPLICATE) and replaced == [(a, b)]


def test_the_record_digest_separates_fields() -> None:
    """No two different (key, value, headers) share an encoding: moving bytes between fields changes the digest."""
    digests = {
        record_sha256(None, b"", []),
        record_sha256(b"", b"", []),
        record_sha256(None, None, []),
        record_sha256(b"a", b"b", []),
        record_sha256(b"ab", b"", []),
        record_sha256(None, b"", [("a", b"")]),
        record_sha256(None, b"", [("a", None)]),
        record_sha256(None, b"", [("", b"a")]),
        record_sha256(None, b"", [("a", b""), ("b", b"")]),
        record_sha256(None, b"", [("b", b""), ("a", b"")]),
    }
    assert len(digests) == 10


def _field(x: bytes | None) -> bytes:
    return b"\x00" if x is None else b"\x01" + len(x).to_bytes(4, "big") + x


@settings(max_examples=200, deadline=None)
@given(
    key=st.one_of(st.none(), st.binary(max_size=40)),
    value=st.one_of(st.none(), st.binary(max_size=200)),
    headers=st.lists(st.tuples(st.text(max_size=20), st.one_of(st.none(), st.binary(max_size=50))), max_size=8),
)
def test_the_record_digest_is_the_documented_one(key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]]) -> None:
    """docs/protocol.md §12.3: SHA-256(context ‖ F(key) ‖ F(value) ‖ headers encoding)."""
    expected = hashlib.sha256(b"busguard/record/v1\x00" + _field(key) + _field(value) + headers_encoding(headers)).hexdigest()
    assert record_sha256(key, value, headers) == expected
