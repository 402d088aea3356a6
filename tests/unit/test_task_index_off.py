"""`KindSpec.task_index` off: a kind that owns several records per task.

The test kind `quota` admits at most N records per (sender, task) and refuses
the rest with its own reason, `quota_exceeded`: impossible while the task
index judged every kind (the second record of a task was a duplicate or an
escalation and never reached the policy).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import msgspec
import pytest

from busguard.admission import policystep
from busguard.audit.lineage import judge
from busguard.audit.report import render_table
from busguard.policies import KINDS, KindSpec, task_indexed
from busguard.policies.seam import Objection, PolicyContext, PolicyInput, PolicyKey, PolicyOutcome, PolicyView, PolicyWrite, policy_key
from busguard.protocol.reasons import Outcome, Reason
from busguard.state.sqlite.store import SqliteStore
from tests.unit.harness import NOW, Harness, agent, sender
from tests.unit.test_audit_lineage import audit_record, codes, feed, harness, ledger

TO = agent("executor")
N = 3


class Counted(msgspec.Struct, frozen=True):
    row: PolicyKey


class QuotaPolicy:
    """At most N admitted records per (principal, task), counted in one row."""

    def __init__(self, reason: str = "quota_exceeded") -> None:
        self.reason = reason

    def parse(self, record: PolicyInput, context: PolicyContext) -> Counted:
        return Counted(policy_key("quota", record.principal, record.task_key[1]))

    def keys(self, parsed: Counted) -> Iterable[PolicyKey]:
        return (parsed.row,)

    def decide(self, parsed: Counted, view: PolicyView, now_ms: int) -> PolicyOutcome:
        held = view.get(parsed.row)
        used = 0 if held is None else int(held)
        if used >= N:
            return PolicyOutcome(objection=Objection(Outcome.REJECT, self.reason, f"{used} of {N} records of this task already admitted"))
        return PolicyOutcome(
            writes=(PolicyWrite(parsed.row, str(used + 1).encode(), ttl_ms=3_600_000),), annotations={"used": str(used + 1)}
        )


QUOTA = KindSpec(kind="quota", policy=QuotaPolicy(), reasons=("quota_exceeded",), task_index=False)


@pytest.fixture
def quota(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(KINDS, QUOTA.kind, QUOTA)  # type: ignore[index]


def part(i: int, task: str = "t1", who: str = "planner") -> object:
    return sender(who).sign(kind="quota", task_id=task, receiver=TO, payload=msgspec.json.encode({"part": i}))


def test_n_records_of_one_task_are_admitted_and_the_next_is_refused_with_the_kinds_reason(quota: None) -> None:
    h = Harness()
    decisions = h.feed(*(part(i) for i in range(N + 1)))  # type: ignore[arg-type]
    assert [(d.outcome, d.reason) for d in decisions] == [(Outcome.FORWARD, Reason.ADMITTED)] * N + [(Outcome.REJECT, "quota_exceeded")]
    assert [d.annotations for d in decisions[:N]] == [{"used": str(i + 1)} for i in range(N)]
    assert h.store.task("quota", "t1", NOW) is None  # no task entry: the kind owns its tasks
    # another task, and another sender on the same task, have quotas of their own
    other = [h.one(part(9, task="t2")), h.one(part(9, who="executor"))]  # type: ignore[arg-type]
    assert [d.outcome for d in other] == [Outcome.FORWARD, Outcome.FORWARD]


def test_the_same_kind_with_the_task_index_on_admits_one_record_per_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the switch changes: the default escalates the second record of the task."""
    monkeypatch.setitem(KINDS, "quota", msgspec.structs.replace(QUOTA, task_index=True))  # type: ignore[index]
    decisions = Harness().feed(*(part(i) for i in range(2)))  # type: ignore[arg-type]
    assert [(d.outcome, d.reason) for d in decisions] == [(Outcome.FORWARD, Reason.ADMITTED), (Outcome.ESCALATE, Reason.TASK_CONFLICT)]


def test_replays_are_still_refused_by_the_nonce_and_the_state_survives_a_restart(quota: None, tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db", now_ms=NOW - 3_600_000)
    h = Harness(store=store)
    first = part(0)
    assert h.one(first).outcome == Outcome.FORWARD  # type: ignore[arg-type]
    assert h.one(first).reason == Reason.NONCE_REPLAY  # type: ignore[arg-type]  # an exact copy: no task index to say exact_duplicate
    store.close()
    again = Harness(store=SqliteStore(tmp_path / "s.db", now_ms=NOW))
    assert [again.one(part(i)).reason for i in (1, 2, 3)] == [Reason.ADMITTED, Reason.ADMITTED, "quota_exceeded"]  # type: ignore[arg-type]


def test_the_auditor_allows_several_forwards_only_for_a_kind_without_the_task_index(quota: None) -> None:
    assert not task_indexed("quota") and task_indexed("handoff") and task_indexed("no-such-kind")
    h = harness(0)
    first, second = (h.one(part(i)) for i in range(2))  # type: ignore[arg-type]
    assert first.outcome == second.outcome == Outcome.FORWARD
    report = judge(feed(ledger(), audit_record(first), audit_record(second)))
    assert codes(report) == []
    assert [(k.kind, k.witness) for k in report.kinds] == [("quota", "several")]
    table = render_table(report)
    assert "several admitted per task allowed" in table and "(+1 more)" in table and "more!" not in table  # no warning mark


def test_an_objection_with_an_undeclared_reason_is_a_contract_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(KINDS, "quota", msgspec.structs.replace(QUOTA, policy=QuotaPolicy("over_quota")))  # type: ignore[index]
    h = Harness()
    h.feed(*(part(i) for i in range(N)))  # type: ignore[arg-type]
    with pytest.raises(policystep.PolicyContractError, match="over_quota"):
        h.one(part(N))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"task_index": False}, "needs a policy"),
        ({"task_index": False, "policy": QuotaPolicy(), "single_witness": True}, "single-witness"),
        ({"policy": QuotaPolicy(), "reasons": ("Quota-Exceeded",)}, "not a reason code"),
        ({"policy": QuotaPolicy(), "reasons": ("q" * 65,)}, "not a reason code"),
    ],
)
def test_a_kind_spec_that_cannot_work_is_refused_when_it_is_declared(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        KindSpec(kind="quota", **fields)  # type: ignore[arg-type]
