"""A kind's policy sees only records the core would otherwise admit.

Its parse and keys steps run before the batch's transaction,
but only for records whose signature verified: a record refused by any
stateless check (bad signature, stale or future timestamp, unknown sender or
key, malformed receipt, payload hash, wrong receiver) or by its kind's
interceptors costs no policy work, and its policy keys never reach the
store's snapshot load (nor, on PostgreSQL, its advisory locks). Copies of
one authentic record in a batch are parsed once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import msgspec
import psycopg
import pytest

from busguard.admission.batch import Input, admit_batch
from busguard.policies import KINDS, KindSpec
from busguard.policies.seam import Objection, PolicyContext, PolicyInput
from busguard.protocol.envelope import HEADER_RECEIPT, HEADER_SIGNATURE, Envelope
from busguard.protocol.reasons import Outcome, Reason
from busguard.protocol.records import Coordinates, Decision
from busguard.sdk.sender import SignedRecord
from busguard.state.keys import KeySet, PolicyKey
from busguard.state.memory.store import MemoryStore
from busguard.state.postgres.store import PostgresStore
from busguard.state.snapshot import Snapshot
from busguard.state.writes import BatchWrites
from tests.pgkit import EmbeddedPostgres
from tests.unit.harness import NOW, Harness, agent, forged, sender
from tests.unit.probe_policy import PROBE, Claim, ProbePolicy

TO = agent("executor")


class CountingProbe(ProbePolicy):
    """The probe policy, recording the slot of every record it parses and keys."""

    def __init__(self) -> None:
        self.parsed: list[bytes] = []
        self.keyed: list[str] = []

    def parse(self, record: PolicyInput, context: PolicyContext) -> Claim | Objection:
        self.parsed.append(record.envelope.payload)
        return super().parse(record, context)

    def keys(self, parsed: Claim) -> Iterable[PolicyKey]:
        self.keyed.append(parsed.slot)
        return super().keys(parsed)


class RecordingStore(MemoryStore):
    """The memory store, keeping every KeySet a batch asked it to load."""

    def __init__(self, created_at: int) -> None:
        super().__init__(created_at=created_at)
        self.loaded: list[KeySet] = []

    def run_batch(self, keys: KeySet, now_ms: int, fn: Callable[[Snapshot], BatchWrites]) -> None:
        self.loaded.append(keys)
        super().run_batch(keys, now_ms, fn)


def claim(slot: str) -> bytes:
    return msgspec.json.encode({"slot": slot, "claim": "alice"})


def hostile_batch(kind: str) -> tuple[list[tuple[bytes | None, list[tuple[str, bytes]]]], list[Reason]]:
    """One good record (slot "good") and one of every stateless refusal, each
    naming its own slot; with the reasons the core must give them."""
    s = sender("planner")

    def signed(slot: str, **kw: Any) -> SignedRecord:
        return s.sign(kind=kind, task_id=f"t-{slot}", receiver=TO, payload=claim(slot), **kw)

    good = signed("good")
    stale = signed("stale", issued_at_ms=NOW - 300_001)
    ahead = signed("ahead", issued_at_ms=NOW + 30_001)
    stranger = sender("stranger").sign(kind=kind, task_id="t-stranger", receiver=TO, payload=claim("stranger"))
    no_key = sender("planner", key_id="not-registered").sign(kind=kind, task_id="t-no-key", receiver=TO, payload=claim("no-key"))
    bad_hash = signed("bad-hash")
    items: list[tuple[bytes | None, list[tuple[str, bytes]]]] = [
        (good.value, good.headers),
        forged(signed("forged"), signed("donor")),
        (stale.value, stale.headers),
        (ahead.value, ahead.headers),
        (stranger.value, stranger.headers),
        (no_key.value, no_key.headers),
        (claim("other-payload"), bad_hash.headers),
        (claim("not-json"), [(HEADER_RECEIPT, b"not-json {"), (HEADER_SIGNATURE, dict(good.headers)[HEADER_SIGNATURE])]),
        (claim("no-receipt"), [(HEADER_SIGNATURE, dict(good.headers)[HEADER_SIGNATURE])]),
    ]
    reasons = [
        Reason.ADMITTED,
        Reason.BAD_SIGNATURE,
        Reason.TIMESTAMP_EXPIRED,
        Reason.TIMESTAMP_TOO_FAR_FUTURE,
        Reason.UNKNOWN_SENDER,
        Reason.UNKNOWN_KEY,
        Reason.PAYLOAD_HASH_MISMATCH,
        Reason.NOT_JSON,
        Reason.MISSING_HEADER,
    ]
    return items, reasons


def admit(items: list[tuple[bytes | None, list[tuple[str, bytes]]]], store: RecordingStore, h: Harness) -> list[Decision]:
    inputs = [Input(Coordinates(topic="agents.in", partition=0, offset=o), v, hd) for o, (v, hd) in enumerate(items)]
    return admit_batch(inputs, store=store, registry=h.registry, now_ms=NOW, policy=h.policy)


def test_records_refused_before_or_at_the_signature_cost_no_policy_work_and_load_no_policy_key(monkeypatch: pytest.MonkeyPatch) -> None:
    probe = CountingProbe()
    monkeypatch.setitem(KINDS, "probe", msgspec.structs.replace(PROBE, policy=probe))
    h = Harness()
    store = RecordingStore(created_at=NOW - 3_600_000)
    items, reasons = hostile_batch("probe")
    decisions = admit(items, store, h)
    assert [d.reason for d in decisions] == reasons
    assert probe.parsed == [claim("good")] and probe.keyed == ["good"]
    (keys,) = store.loaded
    assert keys.policy == {("probe", "good")}


def test_a_record_its_kinds_interceptor_refuses_is_not_parsed_and_gets_the_interceptors_objection(monkeypatch: pytest.MonkeyPatch) -> None:
    probe = CountingProbe()
    refuse = Objection(Outcome.REJECT, Reason.MALFORMED_FIELD, "slot 'vetoed' is refused by the interceptor")

    def veto(envelope: Envelope, settings: object) -> Objection | None:
        return refuse if b"vetoed" in envelope.payload else None

    spec = KindSpec(kind="probe", interceptors=(veto,), policy=probe, reasons=PROBE.reasons, routes=PROBE.routes)
    monkeypatch.setitem(KINDS, "probe", spec)
    h = Harness()
    store = RecordingStore(created_at=NOW - 3_600_000)
    s = sender("planner")
    ok, vetoed = (s.sign(kind="probe", task_id=t, receiver=TO, payload=claim(t)) for t in ("fine", "vetoed"))
    a, b = admit([(ok.value, ok.headers), (vetoed.value, vetoed.headers)], store, h)
    assert (a.outcome, a.reason) == (Outcome.FORWARD, Reason.ADMITTED)
    assert (b.outcome, b.reason, b.detail) == (Outcome.REJECT, Reason.MALFORMED_FIELD, refuse.detail)
    assert probe.parsed == [claim("fine")]
    assert store.loaded[0].policy == {("probe", "fine")}


def test_copies_of_an_authentic_record_are_parsed_once_per_batch_and_refused_by_the_core(monkeypatch: pytest.MonkeyPatch) -> None:
    """The policy steps run before the transaction, so they cannot know a
    replay: an authentic record is parsed (and its keys loaded) even when
    the core then refuses it, and its policy's decide never runs for the
    refused copies (docs/protocol.md 7.1). Copies in one batch share one
    parse; a later batch parses its copy again."""
    decided: list[str] = []

    class Deciding(CountingProbe):
        def decide(self, parsed: Claim, view: Any, now_ms: int) -> Any:
            decided.append(parsed.slot)
            return super().decide(parsed, view, now_ms)

    probe = Deciding()
    monkeypatch.setitem(KINDS, "probe", msgspec.structs.replace(PROBE, policy=probe))
    h = Harness()
    store = RecordingStore(created_at=NOW - 3_600_000)
    rec = sender("planner").sign(kind="probe", task_id="t1", receiver=TO, payload=claim("s1"))
    copies = admit([(rec.value, rec.headers)] * 50, store, h)
    assert [d.reason for d in copies] == [Reason.ADMITTED] + [Reason.EXACT_DUPLICATE] * 49
    assert probe.parsed == [claim("s1")] and probe.keyed == ["s1"] and decided == ["s1"]
    inputs = [Input(Coordinates(topic="agents.in", partition=0, offset=50), rec.value, rec.headers)]
    (later,) = admit_batch(inputs, store=store, registry=h.registry, now_ms=NOW, policy=h.policy)
    assert later.reason == Reason.EXACT_DUPLICATE
    assert probe.parsed == [claim("s1")] * 2 and decided == ["s1"]


def test_forged_records_take_no_advisory_lock_on_postgres(
    monkeypatch: pytest.MonkeyPatch, postgres: EmbeddedPostgres, pg_schema: str
) -> None:
    """PostgreSQL locks each policy key a batch loads (state/postgres/store.py): 30
    forged records naming 30 slots take no lock; the one authentic record
    its one, under the schema's shared lock (state/postgres/locks.py). Counted
    inside the batch's transaction, from another session."""
    monkeypatch.setitem(KINDS, "probe", msgspec.structs.replace(PROBE, policy=CountingProbe()))
    s = sender("planner")
    donor = s.sign(kind="ack", task_id="donor", receiver=TO, payload=b"{}")
    good = s.sign(kind="probe", task_id="t-good", receiver=TO, payload=claim("good"))
    items: list[tuple[bytes | None, list[tuple[str, bytes]]]] = [(good.value, good.headers)]
    items += [forged(s.sign(kind="probe", task_id=f"t-{i}", receiver=TO, payload=claim(f"forged-{i}")), donor) for i in range(30)]
    inputs = [Input(Coordinates(topic="agents.in", partition=0, offset=o), v, hd) for o, (v, hd) in enumerate(items)]
    held: list[int] = []
    h = Harness()
    store = PostgresStore(postgres.dsn, now_ms=NOW - 3_600_000, schema=pg_schema)
    try:
        with psycopg.connect(postgres.dsn, autocommit=True) as other:

            def count_locks() -> None:
                row = other.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted").fetchone()
                assert row is not None
                held.append(int(row[0]))

            decisions = admit_batch(inputs, store=store, registry=h.registry, now_ms=NOW, policy=h.policy, after_decide=count_locks)
    finally:
        store.close()
    assert [d.reason for d in decisions] == [Reason.ADMITTED] + [Reason.BAD_SIGNATURE] * 30
    assert held == [2]  # the schema lock (shared) + the authentic record's row
