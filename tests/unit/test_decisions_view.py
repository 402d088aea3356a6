"""`busguard decisions` (busguard.audit.view): where each record went, from the audit log's decisions."""

from __future__ import annotations

import msgspec
import pytest
from busguard_config_update.kind import SPEC, ConfigUpdateSettings

from busguard.admission.types import AdmissionPolicy
from busguard.audit.view import Filter, Where, render, rows
from busguard.policies import KINDS
from busguard.protocol.records import Decision
from tests.unit.harness import Harness, agent, sender
from tests.unit.test_audit_lineage import resolve

TO = agent("executor")
WHERE = Where(downstreams={"agents.in": "agents.out"}, reconciliation="t.rec", dead_letter="t.dlq")


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(KINDS, SPEC.kind, SPEC)  # type: ignore[index]


def update(version: int, value: int, key: str = "db.pool", who: str = "planner"):  # type: ignore[no-untyped-def]
    payload = msgspec.json.encode({"key": key, "version": version, "value": value})
    return sender(who).sign(kind="config.update", task_id=f"{key}@{version}", receiver=TO, payload=payload)


def decided() -> list[Decision]:
    settings = ConfigUpdateSettings(senders=[agent("planner")], keys=["db.pool", "db.timeout"], auto_settle="hold")
    h = Harness(policy=AdmissionPolicy(policy_settings={"config.update": settings}))
    handoff = sender("planner").sign(kind="handoff", task_id="h-1", receiver=TO, payload=b"{}")
    return h.feed(update(1, 10), update(1, 10), update(1, 11), update(0, 9), update(3, 1, key="db.timeout"), handoff)


def test_each_decision_shows_where_it_went_the_prior_it_repeats_its_key_and_how_it_was_settled() -> None:
    first, dup, conflict, stale, other, handoff = ds = decided()
    held = resolve(conflict, stage="held", resolved_as=None)
    found = rows([(d, True) for d in ds] + [(dup, True)], [held], WHERE)  # a re-emission is one row
    assert [(r.outcome, r.reason, r.went_to, r.prior_decision_id, r.settled) for r in found] == [
        ("forward", "admitted", ["agents.out"], None, None),
        ("duplicate", "same_config_version", ["t.dlq"], first.decision_id, None),
        ("escalate", "config_version_conflict", ["t.rec"], None, "held"),
        ("reject", "stale_config_version", ["t.dlq"], None, None),
        ("forward", "admitted", ["agents.out"], None, None),
        ("forward", "admitted", ["agents.out"], None, None),
    ]
    assert found[0].key == f"db.pool/1/{first.annotations['config.value_sha256']}" and found[5].key is None  # type: ignore[index]
    final = resolve(conflict, resolved_as="keep_admitted", by="policy")
    assert rows([(conflict, True)], [held, final], WHERE)[0].settled == "resolved as keep_admitted by policy"
    table = render(found)
    assert table.splitlines()[0].split() == ["RECORD", "KIND", "TASK", "KEY", "OUTCOME", "REASON", "WENT", "TO", "PRIOR", "SETTLED"]
    assert first.decision_id in table.splitlines()[2]


def test_filters_by_topic_kind_task_and_key() -> None:
    ds = [(d, True) for d in decided()]
    assert len(rows(ds, [], WHERE, Filter(kind="config.update"))) == 5
    assert [r.task_id for r in rows(ds, [], WHERE, Filter(task_id="h-1"))] == ["h-1"]
    assert [r.task_id for r in rows(ds, [], WHERE, Filter(key="db.timeout"))] == ["db.timeout@3"]
    assert len(rows(ds, [], WHERE, Filter(key="db.pool"))) == 4
    assert rows(ds, [], WHERE, Filter(topic="other.topic")) == []
    assert render([]) == "no decisions match"


def test_an_unverified_copy_is_shown_as_such_and_a_verified_one_wins() -> None:
    d = decided()[0]
    assert rows([(d, False)], [], WHERE)[0].verified is False and "(UNVERIFIED)" in render(rows([(d, False)], [], WHERE))
    assert rows([(d, False), (d, True)], [], WHERE)[0].verified is True
