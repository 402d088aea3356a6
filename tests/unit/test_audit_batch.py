"""Batch audit records (`[batch] audit = "batch"`, docs/protocol.md 12.7)
without Kafka: one audit record per (head, input partition) whose entries
are exactly the per-record audit records they replace, every entry checked
by the auditor's own checks, a re-delivered group re-emitted byte for byte
however the re-delivery is split into polls, and malformed batch records
refused with their reason."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from busguard.audit.checks import check_audit_record
from busguard.audit.reader import _raws
from busguard.config import load_config
from busguard.errors import ConfigError
from busguard.protocol.attestation import HEADER_ATTESTATION
from busguard.protocol.auditbatch import HEADER_AUDIT_BATCH, AuditBatchError, Entry, audit_records_of, batch_headers, expand, is_batch, pack
from busguard.protocol.records import Decision
from busguard.protocol.registry import KeyRegistry
from busguard.protocol.treehead import HEADER_HEAD_SEAL, HEADER_INCLUSION, HEADER_TREE_HEAD
from busguard.runtime.auditgroups import Member, audit_records
from busguard.runtime.batch_size import batch_size
from busguard.runtime.guard import Guard
from busguard.runtime.outputs import Output
from busguard.runtime.watched import WatchedFile
from busguard.state.memory.store import MemoryStore
from busguard.state.postgres.store import PostgresStore
from busguard.state.store import StateStore
from tests.pgkit import EmbeddedPostgres

from .harness import NOW, Rec, agent
from .test_guard_batch_seal import IDENT, KEY, _records

AUDIT = "busguard.audit"


def _guard(tmp_path: Path, store: StateStore, audit: str = "batch", seal: str = "batch") -> Guard:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "keys.toml").write_text(f'[[agent]]\nid = "{agent("planner")}"\n')
    (tmp_path / "busguard.toml").write_text(
        f'[[routes]]\nname = "r"\ninputs = ["in"]\ndownstream = "out"\n[ops]\nport = 0\n[batch]\nseal = "{seal}"\naudit = "{audit}"\n'
    )
    cfg = load_config(tmp_path / "busguard.toml", env={})
    keys = WatchedFile(tmp_path / "keys.toml", KeyRegistry.load, what="key registry")
    return Guard(cfg, keys=keys, identity=IDENT, store=store, clock_ms=lambda: NOW)


def _run(guard: Guard, records: list[Rec]) -> list[Output]:
    return asyncio.run(guard.process(records))


def _audits(outputs: list[Output]) -> list[Output]:
    return [o for o in outputs if o.topic == AUDIT]


def _entries(outputs: list[Output]) -> list[tuple[bytes, list[tuple[str, bytes]]]]:
    return [e for o in _audits(outputs) for e in expand(o.value, o.headers)]


def test_one_audit_record_per_head_and_partition_holding_every_decision(tmp_path: Path, store: StateStore) -> None:
    recs = _records(range(0, 7)) + _records(range(0, 4), partition=1)
    outputs = _run(_guard(tmp_path, store), recs)
    audits = _audits(outputs)
    assert [(o.spread, o.key) for o in audits] == [(0, None), (1, None)]
    assert all(is_batch(o.headers) for o in audits) and len(outputs) == len(recs) + 2
    entries = _entries(outputs)
    decisions = [msgspec.json.decode(v, type=Decision) for v, _ in entries]
    assert [(d.source.partition, d.source.offset) for d in decisions] == [(r.partition, r.offset) for r in recs]
    for value, headers in entries:
        checked = check_audit_record(value, headers, KEY)
        assert checked.verified and checked.why == "" and checked.opened is not None
    # the forward of each decision carries the same attestation and proof as its entry
    forwards = {dict(o.headers)["busguard-decision-id"].decode(): o for o in outputs if o.topic == "out"}
    for d, (_, headers) in zip(decisions, entries, strict=True):
        fwd = dict(forwards[d.decision_id].headers)
        assert all(fwd[k] == v for k, v in headers)


def test_an_entry_is_the_per_record_audit_record_it_replaces(tmp_path: Path) -> None:
    recs = _records(range(0, 5))
    per_record = _audits(_run(_guard(tmp_path / "a", MemoryStore(created_at=NOW - 3_600_000, genesis=True), "record"), recs))
    grouped = _entries(_run(_guard(tmp_path / "b", MemoryStore(created_at=NOW - 3_600_000, genesis=True)), recs))
    assert [o.value for o in per_record] == [v for v, _ in grouped]  # the same decisions, byte for byte
    for o, (_, headers) in zip(per_record, grouped, strict=True):
        mine = dict(o.headers)
        # each process has its own chain, so the heads differ; the attestation does not
        assert mine[HEADER_ATTESTATION] == dict(headers)[HEADER_ATTESTATION]
        assert set(dict(headers)) == {HEADER_ATTESTATION, HEADER_TREE_HEAD, HEADER_HEAD_SEAL, HEADER_INCLUSION} <= set(mine)


def test_the_auditor_reads_a_batch_record_as_its_entries_at_its_place(tmp_path: Path) -> None:
    (audit,) = _audits(_run(_guard(tmp_path, MemoryStore(created_at=NOW - 3_600_000, genesis=True)), _records(range(0, 3))))

    class Consumed:
        topic, partition, offset, key = AUDIT, 2, 41, None
        value, headers = audit.value, audit.headers

    raws = _raws(AUDIT, Consumed(), AUDIT)
    assert len(raws) == 3 and {r.at for r in raws} == {(2, 41)} and all(r.undecodable is None for r in raws)
    assert _raws("out", Consumed(), AUDIT)[0].value == audit.value  # only the audit topic holds batch audit records
    Consumed.value = b"\x91\x93\xc4\x00"  # one entry, cut short
    (bad,) = _raws(AUDIT, Consumed(), AUDIT)
    assert bad.undecodable is not None and "not a well-formed batch audit record" in bad.undecodable
    checked = check_audit_record(bad.value, bad.headers, KEY, undecodable=bad.undecodable)
    assert not checked.verified and checked.record is None


def test_a_redelivered_group_is_re_emitted_byte_for_byte_from_the_store(tmp_path: Path, store: StateStore) -> None:
    _redelivered_groups_re_emit_byte_for_byte(tmp_path, store)


def test_a_redelivered_group_is_re_emitted_byte_for_byte_from_postgresql(
    tmp_path: Path, postgres: EmbeddedPostgres, pg_schema: str
) -> None:
    store = PostgresStore(postgres.dsn, now_ms=NOW - 3_600_000, schema=pg_schema)
    try:
        _redelivered_groups_re_emit_byte_for_byte(tmp_path, store)
    finally:
        store.close()


def _redelivered_groups_re_emit_byte_for_byte(tmp_path: Path, store: StateStore) -> None:
    recs = _records(range(0, 8)) + _records(range(0, 3), partition=1)
    first = _audits(_run(_guard(tmp_path, store), recs[:6] + recs[8:]))
    restarted = _guard(tmp_path, store)
    # offsets 3..5 of partition 0 come back first, with new records 6..7; then 0..2 and partition 1's
    again = _audits(_run(restarted, recs[3:8])) + _audits(_run(restarted, recs[0:3])) + _audits(_run(restarted, recs[9:10]))
    old = [o for o in again if o in first]
    assert len(old) == 3 and {o.spread for o in old} == {0, 1}  # partition 0's group twice, partition 1's once
    new = [o for o in again if o not in first]
    assert len(new) == 1 and len(expand(new[0].value, new[0].headers)) == 2  # offsets 6..7, under the new head


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(min_value=1, max_value=11), max_size=4, unique=True), extra=st.integers(min_value=0, max_value=3))
def test_any_split_of_a_redelivery_re_emits_only_records_first_emitted(tmp_path: Path, cuts: list[int], extra: int) -> None:
    store = MemoryStore(created_at=NOW - 3_600_000, genesis=True)
    recs = _records(range(0, 12 + extra))
    first = _audits(_run(_guard(tmp_path, store), recs[:12]))
    restarted = _guard(tmp_path, store)
    bounds = [0, *sorted(cuts), 12 + extra]
    again = [o for lo, hi in zip(bounds, bounds[1:], strict=False) if lo < hi for o in _audits(_run(restarted, recs[lo:hi]))]
    stale = [o for o in again if o not in first]
    assert all(
        {msgspec.json.decode(v, type=Decision).source.offset for v, _ in expand(o.value, o.headers)} <= set(range(12, 12 + extra))
        for o in stale
    )
    assert any(o in first for o in again)


def test_records_split_at_the_producer_batch_size_in_leaf_order() -> None:
    members = {i: Member(i, Entry(b"d" * (100 + 37 * i), b"a" * 300, b"\0\0\0" + bytes([i]) + b"p" * 320), 5) for i in range(40)}
    limit = 6000
    out = audit_records(AUDIT, {(b"head", "in", 3): members}, {b"head": b"seal"}, limit)
    assert len(out) > 5 and all(batch_size(o) <= limit for o in out) and {o.spread for o in out} == {3}
    assert [int.from_bytes(h[3][1][:4], "big") for o in out for _, h in expand(o.value, o.headers)] == list(range(40))
    assert out == audit_records(AUDIT, {(b"head", "in", 3): dict(reversed(members.items()))}, {b"head": b"seal"}, limit)
    (alone,) = audit_records(AUDIT, {(b"h", "in", 0): {0: Member(0, Entry(b"x" * 9000, b"a", b"\0" * 4), 5)}}, {b"h": b"s"}, limit)
    assert len(expand(alone.value, alone.headers)) == 1  # too large to share a record: travels alone


@pytest.mark.parametrize(
    ("value", "headers", "why"),
    [
        (
            pack([Entry(b"d", b"a", b"i")]),
            [(HEADER_AUDIT_BATCH, b"2"), (HEADER_TREE_HEAD, b"h"), (HEADER_HEAD_SEAL, b"s")],
            "must appear once with value",
        ),
        (pack([Entry(b"d", b"a", b"i")]), [*batch_headers(b"h", b"s"), (HEADER_AUDIT_BATCH, b"1")], "must appear once with value"),
        (pack([Entry(b"d", b"a", b"i")]), [(HEADER_AUDIT_BATCH, b"1"), (HEADER_TREE_HEAD, b"h")], "exactly one busguard-tree-head"),
        (pack([Entry(b"d", b"a", b"i")]), [*batch_headers(b"h", b"s"), (HEADER_ATTESTATION, b"a")], "carries no busguard-attestation"),
        (None, batch_headers(b"h", b"s"), "has no value"),
        (pack([]), batch_headers(b"h", b"s"), "1 to 100000 entries"),
        (msgspec.msgpack.encode([["d", "a", "i"]]), batch_headers(b"h", b"s"), "bin triples"),
        (msgspec.msgpack.encode([[b"d", b"a"]]), batch_headers(b"h", b"s"), "bin triples"),
        (b"\xc1", batch_headers(b"h", b"s"), "bin triples"),
    ],
)
def test_a_malformed_batch_record_is_refused_with_its_reason(value: bytes | None, headers: list[tuple[str, bytes]], why: str) -> None:
    with pytest.raises(AuditBatchError, match=why):
        expand(value, headers)


def test_batch_audit_records_need_batch_seals(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"batch\.audit") as err:
        _guard(tmp_path, MemoryStore(created_at=NOW - 3_600_000, genesis=True), "batch", seal="record")
    assert "busguard.toml" in str(err.value) and 'batch.seal = "batch"' in str(err.value)


def test_record_mode_and_record_sealed_decisions_keep_their_own_audit_records(tmp_path: Path) -> None:
    store = MemoryStore(created_at=NOW - 3_600_000, genesis=True)
    recs = _records(range(0, 4))
    record_sealed = _run(_guard(tmp_path, store, "record", seal="record"), recs)
    # re-delivered to a guard writing batch audit records: sealed per record, audited per record, as first emitted
    assert _run(_guard(tmp_path, store), recs) == record_sealed
    assert not any(is_batch(o.headers) for o in record_sealed)


def test_audit_records_of_reads_either_form_as_per_record_audit_records(tmp_path: Path) -> None:
    recs = _records(range(0, 3))
    (batch,) = _audits(_run(_guard(tmp_path / "a", MemoryStore(created_at=NOW - 3_600_000, genesis=True)), recs))
    singles = _audits(_run(_guard(tmp_path / "b", MemoryStore(created_at=NOW - 3_600_000, genesis=True), "record"), recs))
    assert audit_records_of(batch.value, batch.headers) == expand(batch.value, batch.headers)
    assert [v for o in singles for v, _ in audit_records_of(o.value, o.headers)] == [v for v, _ in expand(batch.value, batch.headers)]
    assert audit_records_of(singles[0].value, singles[0].headers) == [(singles[0].value, list(singles[0].headers))]
    with pytest.raises(AuditBatchError):
        audit_records_of(b"\xc1", batch.headers)
