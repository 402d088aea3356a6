"""The stateful policy seam, through the real admission path, with the
test-only `probe` kind (tests/unit/probe_policy.py) registered in one line."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from busguard.admission import policystep
from busguard.policies import KINDS, KindSpec, kind_names, single_witness
from busguard.policies.seam import PolicyContext, PolicyInput, PolicyOutcome, PolicyView
from busguard.protocol.reasons import Outcome, Reason
from busguard.protocol.records import Notice, carried_by_hash
from busguard.state.sqlite.store import SqliteStore
from tests.unit.harness import NOW, Harness, agent, sender
from tests.unit.probe_policy import PROBE

TO = agent("executor")


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(KINDS, PROBE.kind, PROBE)  # type: ignore[index]  # the registration line


def claim(slot: str, who: str, task: str = "") -> bytes:
    return msgspec.json.encode({"slot": slot, "claim": who})


def test_an_unregistered_kind_is_unknown() -> None:
    h = Harness()
    d = h.one(sender("planner").sign(kind="probe", task_id="t1", receiver=TO, payload=claim("s", "a", "t1")))
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.UNKNOWN_KIND)
    assert "probe" not in kind_names()


def test_registration_reaches_the_registry_readers(probe: None) -> None:
    assert "probe" in kind_names() and not single_witness("probe") and single_witness("handoff")


def test_first_claim_is_admitted_with_its_outcome_and_a_conflicting_one_in_the_same_batch_escalates(probe: None) -> None:
    h = Harness()
    s = sender("planner")
    first = s.sign(kind="probe", task_id="t1", receiver=TO, payload=b'{"claim": "alice", "slot": "s1"}')
    rival = s.sign(kind="probe", task_id="t2", receiver=TO, payload=claim("s1", "bob", "t2"))
    a, b = h.feed(first, rival)
    assert (a.outcome, a.reason, a.annotations) == (Outcome.FORWARD, Reason.ADMITTED, {"slot": "s1"})
    assert a.replacement == b'{"slot":"s1","claim":"alice"}' and a.notices is None
    assert (b.outcome, b.reason) == (Outcome.ESCALATE, Reason.TASK_CONFLICT)  # saw a's write in the overlay
    # carried by hash in the decision record (docs/protocol.md 12.5); the persisted decision keeps the value
    assert b.notices == carried_by_hash(None, (Notice(route="probe-notices", key=b"s1", value=b"contested by bob"),))["notices"]
    assert b.notices is not None and b.notices[0].value == b"contested by bob" and b.notices[0].value_length == 16
    assert b.replacement is None
    # The objected record consumed its nonce but recorded no task.
    assert h.store.task("probe", "t2", NOW) is None and h.store.task("probe", "t1", NOW) is not None
    assert h.one(rival).reason == Reason.NONCE_REPLAY


def test_policy_state_persists_across_batches_and_re_emission_is_byte_identical(probe: None, tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db", now_ms=NOW - 3_600_000)
    h = Harness(store=store)
    s = sender("planner")
    h.one(s.sign(kind="probe", task_id="t1", receiver=TO, payload=claim("s1", "alice", "t1")))
    again = s.sign(kind="probe", task_id="t3", receiver=TO, payload=claim("s1", "alice", "t3"))
    rival = s.sign(kind="probe", task_id="t2", receiver=TO, payload=claim("s1", "bob", "t2"))
    d_again = h.one(again, offset=10)
    d_rival = h.one(rival, offset=11)
    assert d_again.annotations == {"slot": "s1", "again": "yes"} and d_rival.outcome == Outcome.ESCALATE
    store.close()
    reopened = Harness(store=SqliteStore(tmp_path / "s.db", now_ms=NOW))
    replayed = [reopened.one(again, offset=10), reopened.one(rival, offset=11)]
    assert [msgspec.json.encode(d) for d in replayed] == [msgspec.json.encode(d_again), msgspec.json.encode(d_rival)]


def test_a_bad_payload_is_refused_only_after_the_signature(probe: None) -> None:
    h = Harness()
    s = sender("planner")
    good, other = (s.sign(kind="probe", task_id=t, receiver=TO, payload=b"[1]") for t in ("t1", "t2"))
    # good's receipt under other's signature: the signature check comes first.
    forged = [(n, dict(other.headers)[n] if n == "busguard-signature" else v) for n, v in good.headers]
    assert h.feed_raw([(good.value, forged)])[0].reason == Reason.BAD_SIGNATURE
    d = h.one(good)
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.MALFORMED_FIELD) and "probe payload" in d.detail


class _Greedy:
    """Reads a key it never named."""

    def parse(self, record: PolicyInput, context: PolicyContext) -> bytes:
        return record.envelope.payload

    def keys(self, parsed: bytes) -> list[tuple[str, str]]:
        return [("greedy", "a")]

    def decide(self, parsed: bytes, view: PolicyView, now_ms: int) -> PolicyOutcome:
        view.get(("greedy", "b"))
        return PolicyOutcome()


def test_a_policy_that_breaks_the_seam_rules_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(KINDS, "greedy", KindSpec(kind="greedy", policy=_Greedy()))  # type: ignore[index]
    with pytest.raises(policystep.PolicyContractError, match="did not name"):
        Harness().one(sender("planner").sign(kind="greedy", task_id="t", receiver=TO, payload=b"x"))
    monkeypatch.setitem(KINDS, "greedy", KindSpec(kind="greedy", policy=_Greedy(), namespaces=("other",)))  # type: ignore[index]
    with pytest.raises(policystep.PolicyContractError, match="does not own"):
        Harness().one(sender("planner").sign(kind="greedy", task_id="t", receiver=TO, payload=b"x"))
