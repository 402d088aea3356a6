"""Issue 19 items 4-7 and 13 on the award policy, through admission (admit_batch,
MemoryStore) and on the seam: rows that outlive the task index cannot be
re-issued or re-awarded, deadlines are capped, a bidder holds a bounded
share of a call, a bid writes only its own rows, the settlement root is
computed before the transaction, and the guard agrees with its doc."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator

import msgspec
import pytest

from busguard.policies.award import policy as award
from busguard.policies.award import rows
from busguard.policies.award.canonicalizers import BUILTIN, JcsSha256
from busguard.policies.award.limits import AwardConfig
from busguard.policies.award.policy import AwardPolicy
from busguard.policies.award.registry import VerificationConfig, build_registry
from busguard.policies.award.wire import AwardPayload, BidPayload, CallPayload, ReceiptTemplate, ResultPayload
from busguard.policies.seam import Objection, PolicyKey, PolicyOutcome, bare_context, policy_input
from busguard.protocol.envelope import Envelope, open_envelope
from busguard.protocol.identity import canonical_principal
from busguard.protocol.reasons import Outcome, Reason
from busguard.protocol.timestamps import format_timestamp
from tests.unit.harness import NOW, agent, sender
from tests.unit.test_award_policy import OUTPUT, REGISTRY, Net, b64

A, B, C = "awarder", "bidder-b", "bidder-c"
HOUR, DAY = 3_600_000, 86_400_000
TEMPLATE = ReceiptTemplate(canonicalizer_id="jcs-sha256", commits="output")


@pytest.fixture(autouse=True)
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(award.POLICY, "registry", REGISTRY)
    monkeypatch.setattr(award.POLICY, "limits", AwardConfig())
    yield


def call(net: Net, who: str, call_id: str = "c1", deadline_ms: int = NOW + 8 * DAY, awarder: str | None = None) -> str:
    p = CallPayload(
        awarder=agent(who) if awarder is None else awarder,
        task_class="t",
        task="x",
        requires_check=True,
        award_deadline=format_timestamp(deadline_ms),
    )
    d = net.send(who, "cnet.call", call_id, p)
    return d.reason if d.outcome != Outcome.FORWARD else d.outcome


def bid(net: Net, who: str, bid_id: str, call_id: str = "c1", deadline_ms: int = NOW + HOUR, cost: int = 1) -> str:
    d = net.send(who, "cnet.bid", bid_id, BidPayload(call=call_id, cost=cost, deadline=format_timestamp(deadline_ms), receipt=TEMPLATE))
    return d.reason if d.outcome != Outcome.FORWARD else d.outcome


# ------------------------------------------------------------ item 4


def test_a_call_cannot_be_hijacked_after_its_task_entry_expired() -> None:
    net = Net()
    assert call(net, A) == Outcome.FORWARD and bid(net, B, "bid-b") == Outcome.FORWARD
    assert net.award("bid-b", ["bid-b"]).outcome == Outcome.FORWARD
    net.h.now = NOW + 7 * DAY + HOUR  # the task index forgot the call and the award; the call's row lives (deadline + 7 days)
    assert call(net, C) == Reason.AWARD_CALL_EXISTS  # C re-issues call c1 naming itself: refused
    second = net.award("bid-b", ["bid-b"], mode="best_effort", risk_price=1)
    assert (second.outcome, second.reason) == (Outcome.REJECT, Reason.AWARD_ALREADY_AWARDED) and second.notices
    assert net.result(OUTPUT, JcsSha256().root(OUTPUT)).reason == Reason.ADMITTED  # B's award stands


def test_a_bid_id_is_admitted_once_per_call_even_after_its_task_entry_expired() -> None:
    net = Net()
    assert call(net, A, deadline_ms=NOW + 9 * DAY) == Outcome.FORWARD and bid(net, B, "bid-b", cost=5) == Outcome.FORWARD
    net.h.now = NOW + 7 * DAY + HOUR
    assert bid(net, C, "bid-b", cost=1, deadline_ms=net.h.now + HOUR) == Reason.AWARD_BID_EXISTS


def test_a_call_id_can_be_issued_again_once_its_rows_expired() -> None:
    net = Net()
    assert call(net, A, deadline_ms=NOW + HOUR) == Outcome.FORWARD
    net.h.now = NOW + HOUR + 7 * DAY + 1
    assert call(net, C, deadline_ms=net.h.now + HOUR) == Outcome.FORWARD


# ------------------------------------------------------------ item 5


@pytest.mark.parametrize("far", [NOW + 30 * DAY + 1, 253402300799000])  # just past the horizon; 9999-12-31T23:59:59Z
def test_a_deadline_past_the_horizon_is_refused(far: int) -> None:
    net = Net()
    assert call(net, A, deadline_ms=far) == Reason.AWARD_DEADLINE_TOO_FAR
    assert call(net, A, "c2", deadline_ms=NOW + 30 * DAY) == Outcome.FORWARD
    assert bid(net, B, "bid-far", "c2", deadline_ms=far) == Reason.AWARD_DEADLINE_TOO_FAR
    assert "award.deadline_horizon_ms" in net.log[-1].detail


def test_the_horizon_is_the_configured_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(award.POLICY, "limits", AwardConfig(deadline_horizon_ms=HOUR))
    net = Net()
    assert call(net, A, deadline_ms=NOW + HOUR + 1) == Reason.AWARD_DEADLINE_TOO_FAR
    assert call(net, A, "c2", deadline_ms=NOW + HOUR) == Outcome.FORWARD


# ------------------------------------------------------------ item 6


def test_one_bidder_cannot_take_every_slot_of_someone_elses_call() -> None:
    net = Net()
    assert call(net, A) == Outcome.FORWARD
    assert [bid(net, B, f"b{i}") for i in range(8)] == [Outcome.FORWARD] * 8
    assert bid(net, B, "b8") == Reason.AWARD_BIDDER_LIMIT
    assert bid(net, C, "c0") == Outcome.FORWARD  # the intended bidder still gets in


def test_the_per_bidder_limit_is_the_configured_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(award.POLICY, "limits", AwardConfig(max_bids_per_bidder=1))
    net = Net()
    assert call(net, A) == Outcome.FORWARD
    assert [bid(net, B, "b0"), bid(net, B, "b1"), bid(net, C, "c0")] == [Outcome.FORWARD, Reason.AWARD_BIDDER_LIMIT, Outcome.FORWARD]


class View(dict[PolicyKey, bytes]):
    def get(self, key: PolicyKey, default: bytes | None = None) -> bytes | None:  # type: ignore[override]
        return super().get(key, default)


def envelope(who: str, kind: str, task: str, payload: msgspec.Struct) -> Envelope:
    r = sender(who).sign(kind=kind, task_id=task, receiver="guard", payload=msgspec.json.encode(payload))
    return open_envelope(r.value, r.headers, 1 << 22)


def run(policy: AwardPolicy, view: View, env: Envelope) -> PolicyOutcome:
    parsed = policy.parse(policy_input(env), bare_context(NOW))
    assert not isinstance(parsed, Objection), parsed
    out = policy.decide(parsed, view, NOW)
    for w in out.writes:
        view[w.key] = w.value
    return out


def test_a_bid_writes_only_its_own_rows_whatever_the_call_holds() -> None:
    """Before: every bid rewrote the call's row with all its bids (the 64th wrote ~45 KB here)."""
    policy, view = AwardPolicy(REGISTRY), View()
    deadline = format_timestamp(NOW + HOUR)
    run(
        policy,
        view,
        envelope(
            A, "cnet.call", "c1", CallPayload(awarder=agent(A), task_class="t", task="x", requires_check=True, award_deadline=deadline)
        ),
    )
    written = []
    for i in range(64):
        out = run(
            policy,
            view,
            envelope(f"bidder-{i}", "cnet.bid", f"bid-{i:02d}", BidPayload(call="c1", cost=i, deadline=deadline, receipt=TEMPLATE)),
        )
        assert out.objection is None
        written.append(sum(len(w.value) for w in out.writes))
    growth = [b - a for a, b in zip(written, written[1:], strict=False)]
    assert max(growth) <= 20 and max(written) < 2000  # only the call row's 16-byte digest list grows; no other bid is rewritten
    assert max(map(len, view.values())) < 2000


def test_an_award_ranking_64_bids_reads_at_most_10_rows_and_still_checks_every_ranked_bid() -> None:
    """Rows read are row locks on PostgreSQL: an award must not take one per ranked bid."""
    policy, view = AwardPolicy(REGISTRY), View()
    deadline = format_timestamp(NOW + HOUR)
    run(
        policy,
        view,
        envelope(
            A, "cnet.call", "c1", CallPayload(awarder=agent(A), task_class="t", task="x", requires_check=True, award_deadline=deadline)
        ),
    )
    for i in range(64):
        run(
            policy,
            view,
            envelope(f"bidder-{i}", "cnet.bid", f"bid-{i:02d}", BidPayload(call="c1", cost=i, deadline=deadline, receipt=TEMPLATE)),
        )
    ranked = [f"bid-{i:02d}" for i in range(64)]
    good = envelope(A, "cnet.award", "c1", AwardPayload(winner="bid-40", ranked=ranked, mode="verified"))
    parsed = policy.parse(policy_input(good), bare_context(NOW))
    assert not isinstance(parsed, Objection) and len(set(policy.keys(parsed))) == 10
    bad = ranked[:40] + ["bid-xx"] + ranked[41:]
    refused = run(
        policy, view, envelope(A, "cnet.award", "c1", AwardPayload(winner="bid-40", ranked=[*bad, "bid-40"][:64], mode="verified"))
    )
    assert refused.objection is not None and refused.objection.reason == Reason.AWARD_UNKNOWN_BID and "bid-xx" in refused.objection.detail
    assert run(policy, view, good).objection is None


# ------------------------------------------------------------ item 7


class Counting(JcsSha256):
    calls = 0

    def root(self, data: bytes) -> str:
        Counting.calls += 1
        return super().root(data)


def test_the_settlement_root_is_recomputed_in_parse_not_in_decide() -> None:
    """decide runs inside the batch's state transaction; parse before it."""
    reg = build_registry(VerificationConfig(canonicalizers=["jcs-sha256"]), "test", canonicalizers={**BUILTIN, "jcs-sha256": Counting()})
    policy, view = AwardPolicy(reg), View()
    deadline = format_timestamp(NOW + HOUR)
    run(
        policy,
        view,
        envelope(
            A, "cnet.call", "c1", CallPayload(awarder=agent(A), task_class="t", task="x", requires_check=True, award_deadline=deadline)
        ),
    )
    run(policy, view, envelope(B, "cnet.bid", "bid-b", BidPayload(call="c1", cost=1, deadline=deadline, receipt=TEMPLATE)))
    run(policy, view, envelope(A, "cnet.award", "c1", AwardPayload(winner="bid-b", ranked=["bid-b"], mode="verified")))
    for _ in range(3):  # the awardee resends a wrong root
        parsed = policy.parse(
            policy_input(envelope(B, "cnet.result", "c1", ResultPayload(state_root="0" * 64, output=b64(OUTPUT)))), bare_context(NOW)
        )
        assert not isinstance(parsed, Objection)
        before = Counting.calls
        out = policy.decide(parsed, view, NOW)
        assert Counting.calls == before and out.objection is not None and out.objection.reason == Reason.SETTLEMENT_MISMATCH


# ------------------------------------------------------------ item 13


def test_an_awarder_id_is_an_agent_id_of_up_to_512_code_units() -> None:
    net = Net()
    assert call(net, A, awarder="a" * 300) == Reason.AWARD_WRONG_PARTY  # parsed (5.1 allows 512), then not its signer
    assert call(net, A, "c2", awarder="a" * 513) == Reason.MALFORMED_AGENT_ID
    assert call(net, A, "c3", awarder="") == Reason.MALFORMED_AGENT_ID
    assert "awarder" in net.log[-1].detail


@pytest.mark.parametrize(
    ("mode", "extra", "reason"),
    [
        ("best_effort", {}, Reason.MISSING_FIELD),
        ("delegated", {}, Reason.MISSING_FIELD),
        ("verified", {"risk_price": 1}, Reason.MALFORMED_FIELD),
    ],
)
def test_a_mode_required_field_absent_is_missing_field(mode: str, extra: dict[str, object], reason: Reason) -> None:
    d = Net().send(A, "cnet.award", "c1", msgspec.json.encode({"winner": "b", "ranked": ["b"], "mode": mode, **extra}))
    assert (d.outcome, d.reason) == (Outcome.REJECT, reason)


# ------------------------------------------------------------ rows of the old layout


def test_a_call_row_of_the_old_layout_is_read_and_migrated_by_its_next_bid() -> None:
    """A deployment upgraded in place: its calls' rows still hold their bids inline."""
    old_bid = rows.BidRow("bid-b", agent(B), canonical_principal(agent(B)), 5, NOW + HOUR, "jcs-sha256", "output", None)
    legacy = rows.LegacyCallRow(agent(A), canonical_principal(agent(A)), "t", True, NOW + HOUR, (old_bid,), None)
    policy, view = AwardPolicy(REGISTRY), View({rows.call_key("c1"): msgspec.msgpack.encode(legacy)})
    deadline = format_timestamp(NOW + HOUR)
    assert (
        run(
            policy, view, envelope(B, "cnet.bid", "bid-b", BidPayload(call="c1", cost=1, deadline=deadline, receipt=TEMPLATE))
        ).objection.reason
        == Reason.AWARD_BID_EXISTS
    )  # type: ignore[union-attr]
    assert (
        run(
            policy,
            view,
            envelope(
                A, "cnet.call", "c1", CallPayload(awarder=agent(A), task_class="t", task="x", requires_check=True, award_deadline=deadline)
            ),
        ).objection.reason
        == Reason.AWARD_CALL_EXISTS
    )  # type: ignore[union-attr]
    out = run(policy, view, envelope(C, "cnet.bid", "bid-c", BidPayload(call="c1", cost=1, deadline=deadline, receipt=TEMPLATE)))
    assert out.objection is None
    assert {w.key for w in out.writes} == {
        rows.call_key("c1"),
        rows.bid_key("c1", "bid-b"),
        rows.bid_key("c1", "bid-c"),
        rows.bidder_key("c1", canonical_principal(agent(B))),
        rows.bidder_key("c1", canonical_principal(agent(C))),
    }
    migrated = rows.decode_call(view[rows.call_key("c1")])
    assert isinstance(migrated, rows.CallRow) and len(migrated.bid_ids) == 2
    awarded = run(policy, view, envelope(A, "cnet.award", "c1", AwardPayload(winner="bid-b", ranked=["bid-b", "bid-c"], mode="verified")))
    assert awarded.objection is None and awarded.annotations and awarded.annotations["bidder"] == agent(B)
    settled = run(policy, view, envelope(B, "cnet.result", "c1", ResultPayload(state_root=JcsSha256().root(OUTPUT), output=b64(OUTPUT))))
    assert settled.objection is None


def test_an_awarded_call_row_of_the_old_layout_settles_and_refuses_a_second_award() -> None:
    old_bid = rows.BidRow("bid-b", agent(B), canonical_principal(agent(B)), 5, NOW + HOUR, "jcs-sha256", "output", None)
    legacy = rows.LegacyCallRow(
        agent(A), canonical_principal(agent(A)), "t", True, NOW + HOUR, (old_bid,), rows.AwardRow("bid-b", "verified", None, None)
    )
    policy, view = AwardPolicy(REGISTRY), View({rows.call_key("c1"): msgspec.msgpack.encode(legacy)})
    second = run(policy, view, envelope(A, "cnet.award", "c1", AwardPayload(winner="bid-b", ranked=["bid-b"], mode="verified")))
    assert second.objection is not None and second.objection.reason == Reason.AWARD_ALREADY_AWARDED
    root = hashlib.sha256(b"x").hexdigest()
    out = run(
        policy,
        view,
        envelope(B, "cnet.result", "c1", ResultPayload(state_root=root, output=base64.urlsafe_b64encode(OUTPUT).rstrip(b"=").decode())),
    )
    assert out.objection is not None and out.objection.reason == Reason.SETTLEMENT_MISMATCH
