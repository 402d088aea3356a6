"""A kind's policy answers "a duplicate of an earlier admission" (seam.duplicate_of).

The test kind `latest` keeps one permanent row per config key: the version
and value admitted last, and the decision id that admitted them
(`PolicyView.decision_id`). The same version and value again is a duplicate
of that decision; a lower version is stale. Before this, a policy could only
reject or escalate: an idempotent re-send was a rejection, with no
`busguard-prior-decision-id` on its dead letter, and an exact copy of the
signed bytes was `nonce_replay`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import msgspec
import pytest

from busguard.admission import policystep
from busguard.audit.lineage import judge
from busguard.audit.report import render_table
from busguard.policies import KINDS, KindSpec
from busguard.policies.seam import (
    Objection,
    PolicyContext,
    PolicyInput,
    PolicyKey,
    PolicyOutcome,
    PolicyView,
    PolicyWrite,
    duplicate_of,
    policy_key,
)
from busguard.protocol.attestation import HEADER_PRIOR
from busguard.protocol.reasons import Outcome, Reason
from busguard.protocol.records import Decision
from busguard.runtime.outputs import outputs_for
from busguard.state.sqlite.store import SqliteStore
from tests.unit.harness import NOW, Harness, agent, sender
from tests.unit.test_audit_lineage import TOPICS, audit_record, codes, feed, harness, ledger, sealed_decision

TO = agent("executor")


class Update(msgspec.Struct, frozen=True):
    key: str
    version: int
    value: str


class Row(msgspec.Struct, frozen=True, array_like=True):
    version: int
    value: str
    decision: str


class Parsed(msgspec.Struct, frozen=True):
    update: Update
    row: PolicyKey


class LatestPolicy:
    """Per key, the highest version admitted; its row is permanent."""

    def __init__(self, answer: str = "duplicate") -> None:
        self.answer = answer  # what a broken policy says instead (contract tests)

    def parse(self, record: PolicyInput, context: PolicyContext) -> Parsed | Objection:
        try:
            u = msgspec.json.decode(record.envelope.payload, type=Update)
        except msgspec.ValidationError as exc:
            return Objection(Outcome.REJECT, "bad_update", str(exc))
        return Parsed(u, policy_key("latest", u.key))

    def keys(self, parsed: Parsed) -> Iterable[PolicyKey]:
        return (parsed.row,)

    def decide(self, parsed: Parsed, view: PolicyView, now_ms: int) -> PolicyOutcome:
        raw = view.get(parsed.row)
        held = msgspec.msgpack.decode(raw, type=Row) if raw is not None else None
        u = parsed.update
        if held is not None and u.version == held.version and u.value == held.value:
            if self.answer == "no-id":
                return PolicyOutcome(objection=Objection(Outcome.DUPLICATE, "same_update", "again"))
            if self.answer == "bad-id":
                return PolicyOutcome(objection=duplicate_of("not-a-decision-id", "same_update", "again"))
            if self.answer == "reject-with-id":
                return PolicyOutcome(objection=Objection(Outcome.REJECT, "stale_update", "x", held.decision))
            return PolicyOutcome(objection=duplicate_of(held.decision, "same_update", f"version {u.version} already admitted"))
        if held is not None and u.version <= held.version:
            return PolicyOutcome(objection=Objection(Outcome.REJECT, "stale_update", f"version {u.version} <= {held.version}"))
        row = msgspec.msgpack.encode(Row(u.version, u.value, view.decision_id))
        return PolicyOutcome(
            writes=(PolicyWrite(parsed.row, row, ttl_ms=None),), annotations={"latest.key": u.key, "latest.version": str(u.version)}
        )


LATEST = KindSpec(
    kind="latest",
    policy=LatestPolicy(),
    reasons=("bad_update", "same_update", "stale_update"),
    task_index=False,
    witness="key",
    witness_key=("latest.key", "latest.version"),
)


@pytest.fixture(autouse=True)
def latest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(KINDS, LATEST.kind, LATEST)  # type: ignore[index]


def update(version: int, value: str = "a", key: str = "db.pool", task: str = "t", who: str = "planner", now: int = NOW):  # type: ignore[no-untyped-def]
    body = msgspec.json.encode(Update(key, version, value))
    return sender(who, now=now).sign(kind="latest", task_id=task, receiver=TO, payload=body)


def dead_letter_prior(d: Decision) -> bytes | None:
    primary = outputs_for(sealed_decision(d), b"k", b"v", [], "agents.out", TOPICS, 1 << 20)[0]
    assert primary.topic == TOPICS.dead_letter
    return dict(primary.headers).get(HEADER_PRIOR)


def test_a_resend_of_the_same_version_is_a_duplicate_naming_the_admission_on_its_dead_letter() -> None:
    h = Harness()
    first, again, older = h.feed(update(2), update(2, task="other"), update(1))
    assert (first.outcome, again.outcome, again.reason) == (Outcome.FORWARD, Outcome.DUPLICATE, "same_update")
    assert again.prior_decision_id == again.prior_admission == first.decision_id
    assert dead_letter_prior(again) == first.decision_id.encode()  # exactly as the core's duplicates carry it
    assert (older.outcome, older.reason, older.prior_decision_id) == (Outcome.REJECT, "stale_update", None)
    assert dead_letter_prior(older) is None


def test_an_exact_copy_of_the_signed_bytes_is_the_kinds_duplicate_not_a_replay() -> None:
    h = Harness()
    record = update(5)
    first = h.one(record)
    copy = h.one(record)
    assert (copy.outcome, copy.reason, copy.prior_decision_id) == (Outcome.DUPLICATE, "same_update", first.decision_id)
    # a copy the kind does not call a duplicate stays busguard's replay, and changes no row
    h.one(update(6))
    assert h.one(record).reason == Reason.NONCE_REPLAY


def test_the_auditor_counts_a_kinds_duplicate_as_a_duplicate_and_checks_what_it_names() -> None:
    h = harness(0)
    first, again = h.feed(update(3), update(3))
    report = judge(feed(ledger(), audit_record(first), audit_record(again)))
    assert codes(report) == [] and report.summary.duplicates == 1
    assert [t.duplicates for t in report.tasks] == [1] and report.tasks[0].rejects == 0
    # a duplicate naming a decision that admitted nothing is a violation
    stale = h.one(update(1))
    lying = msgspec.structs.replace(again, prior_decision_id=stale.decision_id)
    assert "prior_mismatch" in codes(judge(feed(ledger(), audit_record(first), audit_record(stale), audit_record(lying))))


@pytest.mark.parametrize(
    ("answer", "message"), [("no-id", "names the admission"), ("bad-id", "not a decision id"), ("reject-with-id", "only a duplicate")]
)
def test_a_duplicate_without_a_valid_prior_or_a_prior_on_another_outcome_is_a_contract_error(
    monkeypatch: pytest.MonkeyPatch, answer: str, message: str
) -> None:
    monkeypatch.setitem(KINDS, "latest", msgspec.structs.replace(LATEST, policy=LatestPolicy(answer)))  # type: ignore[index]
    h = Harness()
    h.one(update(1))
    with pytest.raises(policystep.PolicyContractError, match=message):
        h.one(update(1))


def test_the_prior_is_found_after_a_restart_over_a_durable_store(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db", now_ms=NOW - 3_600_000)
    h = Harness(store=store)
    first = h.one(update(7))
    again = h.restart(lambda: SqliteStore(tmp_path / "s.db", now_ms=NOW)).one(update(7))
    assert (again.outcome, again.prior_decision_id) == (Outcome.DUPLICATE, first.decision_id)


def test_a_high_water_row_outlives_every_expiry_pass() -> None:
    """Its row is permanent (`ttl_ms=None`): ten years of expiry passes later
    a lower version is still stale and the same one still a duplicate."""
    h = Harness()
    first = h.one(update(9))
    h.now = later = NOW + 10 * 365 * 86_400_000
    h.store.expire(later)
    stale, again = h.feed(update(8, task="b", now=later), update(9, task="c", now=later))
    assert (stale.reason, again.outcome, again.prior_decision_id) == ("stale_update", Outcome.DUPLICATE, first.decision_id)


def test_the_auditor_checks_and_prints_the_kinds_own_witness_rule_one_per_key() -> None:
    h = harness(0)
    v1, v2, v3 = h.feed(update(1, task="t"), update(2, task="t"), update(3, task="t"))
    good = judge(feed(ledger(), *(audit_record(d) for d in (v1, v2, v3))))
    assert codes(good) == [] and good.tasks[0].forwards == 3  # several per task: the kind allows it
    rule = "one admitted per key (latest.key, latest.version); several per task allowed"
    assert [(k.kind, k.witness, k.rule) for k in good.kinds] == [("latest", "key", rule)]
    table = render_table(good)
    assert "(+2 more)" in table and "more!" not in table and rule in table
    # a second admission of one key (a log no guard of this kind writes), and one without its key
    twice = msgspec.structs.replace(v3, annotations={"latest.key": "db.pool", "latest.version": "2"})
    keyless = msgspec.structs.replace(v1, annotations=None)
    bad = judge(feed(ledger(), audit_record(keyless), audit_record(v2), audit_record(twice)))
    assert sorted(codes(bad)) == ["multiple_forwards", "witness_key_missing"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"task_index": False, "witness": "task"}, "the task index is what keeps"),
        ({"witness": "several"}, "the task index is what keeps"),
        ({"task_index": False, "witness": "key"}, "needs witness_key"),
        ({"task_index": False, "witness": "several", "witness_key": ("a",)}, "needs witness_key"),
    ],
)
def test_a_witness_rule_the_kind_cannot_keep_is_refused_when_it_is_declared(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        KindSpec(kind="latest", policy=LatestPolicy(), **fields)  # type: ignore[arg-type]
