"""The config.update kind through busguard's real admission path (busguard.testing).

Run from this directory with busguard installed: `python -m pytest tests`.
Installed, its entry point registers the kind in every busguard process;
these tests register the spec themselves, the way the entry point would.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from busguard_config_update.kind import (
    ADMIT,
    CONFLICT,
    KEEP,
    KEY_NOT_ALLOWED,
    SAME_VERSION,
    SENDER_NOT_ALLOWED,
    SPEC,
    STALE,
    ConfigUpdateSettings,
)

from busguard.admission.types import AdmissionPolicy
from busguard.policies import KINDS
from busguard.policies.seam import Settlement
from busguard.protocol.reasons import Outcome, Reason
from busguard.protocol.records import Decision
from busguard.sdk.sender import SignedRecord
from busguard.state.sqlite.store import SqliteStore
from busguard.testing import NOW, Harness, agent, sender

TO = agent("executor")
SETTINGS = ConfigUpdateSettings(senders=[agent("planner"), agent("ops")], keys=["db.pool", "db.timeout"])


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(KINDS, SPEC.kind, SPEC)  # type: ignore[index]  # what the busguard.kinds entry point does


def update(version: int, value: object = 8, key: str = "db.pool", who: str = "planner", now: int = NOW) -> SignedRecord:
    payload = msgspec.json.encode({"key": key, "version": version, "value": value})
    return sender(who, now=now).sign(kind="config.update", task_id=f"{key}@{version}", receiver=TO, payload=payload)


def harness(settings: ConfigUpdateSettings = SETTINGS, **kw: object) -> Harness:
    return Harness("planner", "ops", "intruder", "executor", policy=AdmissionPolicy(policy_settings={"config.update": settings}), **kw)  # type: ignore[arg-type]


def test_each_rule_of_the_kind() -> None:
    h = harness()
    first, higher, again, copy, lower, other = h.feed(
        update(1), update(2, who="ops"), update(2), update(2, value=8, who="ops"), update(1, value=9), update(2, value=9)
    )
    assert (first.reason, higher.reason) == (Reason.ADMITTED, Reason.ADMITTED)  # any allowed sender moves the mark
    assert (again.outcome, again.reason, again.prior_decision_id) == (Outcome.DUPLICATE, SAME_VERSION, higher.decision_id)
    assert copy.prior_decision_id == higher.decision_id
    assert (lower.outcome, lower.reason) == (Outcome.REJECT, STALE)
    assert (other.outcome, other.reason) == (Outcome.ESCALATE, CONFLICT)
    assert other.annotations is not None and other.annotations["config.version"] == "2" and other.annotations["config.auto_settle"] == KEEP
    assert higher.annotations == {
        "config.key": "db.pool",
        "config.version": "2",
        "config.value_sha256": higher.annotations["config.value_sha256"],
    }  # type: ignore[index]


def test_an_exact_copy_of_the_signed_bytes_is_a_duplicate_not_a_replay() -> None:
    h = harness()
    record = update(3)
    first, copy = h.feed(record, record)
    assert (copy.outcome, copy.reason, copy.prior_decision_id) == (Outcome.DUPLICATE, SAME_VERSION, first.decision_id)


def test_not_allowed_is_refused_before_any_state_and_spends_no_nonce(tmp_path: Path) -> None:
    h = harness(store=SqliteStore(tmp_path / "s.db", now_ms=NOW - 3_600_000))
    intruder, unknown_key = update(1, who="intruder"), update(1, key="db.secret")
    assert [(d.outcome, d.reason) for d in h.feed(intruder, unknown_key)] == [
        (Outcome.REJECT, SENDER_NOT_ALLOWED),
        (Outcome.REJECT, KEY_NOT_ALLOWED),
    ]
    # the operator widens both lists; the very same signed records are then admitted: no nonce was spent
    h.policy = AdmissionPolicy(
        policy_settings={
            "config.update": ConfigUpdateSettings(senders=[agent("planner"), agent("intruder")], keys=["db.pool", "db.secret"])
        }
    )
    assert [d.reason for d in h.feed(intruder, unknown_key)] == [Reason.ADMITTED, Reason.ADMITTED]


def test_the_high_water_mark_never_resets_and_survives_a_restart(tmp_path: Path) -> None:
    h = harness(store=SqliteStore(tmp_path / "s.db", now_ms=NOW - 3_600_000))
    first = h.one(update(5))
    later = NOW + 10 * 365 * 86_400_000  # ten years of expiry passes: the mark is a permanent row
    h = h.restart(lambda: SqliteStore(tmp_path / "s.db", now_ms=later))
    h.now = later
    h.store.expire(later)
    stale, again = h.feed(update(4, now=later), update(5, now=later))
    assert (stale.reason, again.outcome, again.prior_decision_id) == (STALE, Outcome.DUPLICATE, first.decision_id)


def conflict(h: Harness) -> tuple[Decision, Decision]:
    first, other = h.feed(update(7, value="a"), update(7, value="b", who="ops"))
    assert other.reason == CONFLICT
    return first, other


def test_a_conflict_settles_itself_as_keep_admitted_or_waits_for_an_operator() -> None:
    h = harness()
    _, esc = conflict(h)
    assert h.settle(esc) == Settlement(resolved_as=KEEP, note="the value admitted first at this version stays (auto_settle)")
    held = harness(msgspec.structs.replace(SETTINGS, auto_settle="hold"))
    _, esc = conflict(held)
    assert held.settle(esc) is None  # held for an operator


def test_an_operator_admits_the_other_value_its_next_send_is_forwarded_and_the_first_value_conflicts() -> None:
    h = harness(msgspec.structs.replace(SETTINGS, auto_settle="hold"))
    _, esc = conflict(h)
    settled = h.settle(esc, ADMIT)  # the reconciler's own code path: the store contract, once
    assert settled is not None and settled.resolved_as == ADMIT and settled.writes[0].ttl_ms is None
    assert h.settle(esc, ADMIT) == Settlement(resolved_as=ADMIT)  # again (a crash before the resolution was kept): nothing changes
    resent, old = h.feed(update(7, value="b", who="ops"), update(7, value="a"))
    assert (resent.outcome, old.reason) == (Outcome.FORWARD, CONFLICT)
    # once the key moved past the version, admitting an old value is refused
    h.one(update(8))
    assert h.settle(old, ADMIT) is None
