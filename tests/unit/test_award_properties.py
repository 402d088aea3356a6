"""Property: whatever the bids and whichever winner and mode the awarder picks,
the award is admitted exactly when the seed's condition of validity holds for
the winner (an oracle written from the seed, not from the policy), and a
refused award's notice lists exactly the bids the oracle finds awardable."""

from __future__ import annotations

import json

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from busguard.policies.award import rows
from busguard.policies.award.canonicalizers import BUILTIN
from busguard.policies.award.limits import AwardConfig
from busguard.policies.award.policy import AwardPolicy
from busguard.policies.award.registry import VerificationConfig, VerifierConfig, build_registry
from busguard.policies.award.wire import AwardPayload, BidPayload, CallPayload, ReceiptTemplate
from busguard.policies.seam import Objection, PolicyKey, PolicyOutcome, bare_context, policy_input
from busguard.protocol.envelope import open_envelope
from busguard.protocol.timestamps import format_timestamp
from tests.unit.harness import NOW, agent, sender

REGISTRY = build_registry(
    VerificationConfig(
        verifiers=[VerifierConfig(manifest="acme/v1", agent_id=agent("verifier"), canonicalizers=["zk.v1"])],
        best_effort_task_classes=["advisory"],
    ),
    "test",
    canonicalizers=BUILTIN,
)
DEADLINE = format_timestamp(NOW + 3_600_000)
CANON = ["jcs-sha256", "merkle-sha256", "zk.v1", "private.v1"]
MANIFESTS = [None, "acme/v1", "shady/v1"]


def oracle_modes(canon: str, manifest: str | None, task_class: str, requires_check: bool) -> list[str]:
    modes = []
    if canon in ("jcs-sha256", "merkle-sha256"):
        modes.append("verified")
    if manifest == "acme/v1" and canon == "zk.v1":
        modes.append("delegated")
    if task_class == "advisory" and not requires_check:
        modes.append("best_effort")
    return modes


class View(dict[PolicyKey, bytes]):
    def get(self, key: PolicyKey, default: bytes | None = None) -> bytes | None:  # type: ignore[override]
        return super().get(key, default)


def decide(policy: AwardPolicy, view: View, who: str, kind: str, task: str, payload: msgspec.Struct) -> PolicyOutcome:
    r = sender(who).sign(kind=kind, task_id=task, receiver="guard", payload=msgspec.json.encode(payload))
    parsed = policy.parse(policy_input(open_envelope(r.value, r.headers, 1 << 20)), bare_context(NOW))
    assert not isinstance(parsed, Objection), parsed
    out = policy.decide(parsed, view, NOW)
    for w in out.writes:
        view[w.key] = w.value
    return out


bids = st.lists(st.tuples(st.sampled_from(CANON), st.sampled_from(MANIFESTS), st.integers(0, 1000)), min_size=1, max_size=6)


@settings(max_examples=150, deadline=None)
@given(bids=bids, task_class=st.sampled_from(["advisory", "transform"]), requires_check=st.booleans(), data=st.data())
def test_an_award_is_admitted_exactly_when_the_winner_is_awardable_in_its_mode(
    bids: list[tuple[str, str | None, int]], task_class: str, requires_check: bool, data: st.DataObject
) -> None:
    policy, view = AwardPolicy(REGISTRY), View()
    call = CallPayload(awarder=agent("awarder"), task_class=task_class, task="t", requires_check=requires_check, award_deadline=DEADLINE)
    assert decide(policy, view, "awarder", "cnet.call", "c", call).objection is None
    for i, (canon, manifest, cost) in enumerate(bids):
        bid = BidPayload(
            call="c",
            cost=cost,
            deadline=DEADLINE,
            receipt=ReceiptTemplate(canonicalizer_id=canon, commits="output", verifier_manifest=manifest),
        )
        assert decide(policy, view, "bidder", "cnet.bid", f"b{i}", bid).objection is None  # every bid is bid-valid
    w = data.draw(st.integers(0, len(bids) - 1))
    mode = data.draw(st.sampled_from(["verified", "delegated", "best_effort"]))
    canon, manifest, _ = bids[w]
    award = AwardPayload(
        winner=f"b{w}",
        ranked=[f"b{i}" for i in range(len(bids))],
        mode=mode,  # type: ignore[arg-type]
        verifier=(manifest or "none/v1") if mode == "delegated" else None,
        risk_price=5 if mode == "best_effort" else None,
    )
    out = decide(policy, view, "awarder", "cnet.award", "c", award)
    assert (out.objection is None) == (mode in oracle_modes(canon, manifest, task_class, requires_check))
    if out.objection is not None:
        (notice,) = out.notices
        listed = [(a["bid"], a["mode"]) for a in json.loads(notice.value)["awardable"]]
        expected = [(f"b{i}", m[0]) for i, (c, vm, _) in enumerate(bids) if (m := oracle_modes(c, vm, task_class, requires_check))]
        assert listed == expected


# ------------------------------------------------------------ lifetimes (issue 19 items 4-6)

HOUR, DAY = 3_600_000, 86_400_000
PEOPLE = ["awarder", "bidder-b", "bidder-c"]


class Expiring:
    """A policy view with the store's expiry: a row reads as absent from its expiry on."""

    def __init__(self) -> None:
        self.rows: dict[PolicyKey, tuple[bytes, int]] = {}
        self.now = NOW

    def get(self, key: PolicyKey) -> bytes | None:
        row = self.rows.get(key)
        return row[0] if row is not None and row[1] > self.now else None


op = st.tuples(
    st.sampled_from(["call", "bid", "award"]),
    st.sampled_from(PEOPLE),
    st.sampled_from(["c1", "c2"]),
    st.sampled_from(["b1", "b2", "b3"]),
    st.sampled_from([0, HOUR, 7 * DAY + HOUR, 20 * DAY]),  # the clock advances by this first
    st.sampled_from([HOUR, 8 * DAY, 29 * DAY, 31 * DAY, 10**14]),  # the deadline named, ahead of the clock
)


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(op, max_size=25))
def test_no_row_is_overwritten_and_a_call_holds_at_most_one_award_ever(ops: list[tuple[str, str, str, str, int, int]]) -> None:
    """Whatever anyone sends, in whatever order, while time passes: a live row
    is never replaced except by its own call's counter or its one award, no
    call row is awarded twice, and no row lives past 2 x horizon + 7 days of
    its call (the task index is not modelled: the policy must hold alone)."""
    policy, view = AwardPolicy(REGISTRY), Expiring()
    horizon = AwardConfig().deadline_horizon_ms  # the default the policy holds
    awards: dict[tuple[str, int], int] = {}  # (call, the call row's creation time) -> admitted awards
    born: dict[str, int] = {}
    for kind, who, call, bid_id, advance, ahead in ops:
        view.now += advance
        deadline = format_timestamp(min(view.now + ahead, 253402300799000))
        payload: msgspec.Struct
        if kind == "call":
            payload = CallPayload(awarder=agent(who), task_class="advisory", task="t", requires_check=False, award_deadline=deadline)
        elif kind == "bid":
            payload = BidPayload(
                call=call, cost=1, deadline=deadline, receipt=ReceiptTemplate(canonicalizer_id="jcs-sha256", commits="output")
            )
        else:
            payload = AwardPayload(winner=bid_id, ranked=[bid_id], mode="verified")
        r = sender(who, now=view.now).sign(
            kind=f"cnet.{kind}", task_id=bid_id if kind == "bid" else call, receiver="guard", payload=msgspec.json.encode(payload)
        )
        parsed = policy.parse(policy_input(open_envelope(r.value, r.headers, 1 << 20)), bare_context(NOW))
        assert not isinstance(parsed, Objection), parsed
        out = policy.decide(parsed, view, view.now)
        for w in out.writes:
            old = view.get(w.key)
            if w.key[0] == "cnet" and old is not None:
                before, after = rows.decode_call(old), rows.decode_call(w.value)
                assert isinstance(before, rows.CallRow) and isinstance(after, rows.CallRow)
                same = ("awarder", "principal", "task_class", "requires_check", "award_deadline_ms")
                assert all(getattr(before, f) == getattr(after, f) for f in same), "a live call row was replaced"
                assert before.awarded is None or before.awarded == after.awarded, "an award was replaced"
                assert after.bid_ids[: len(before.bid_ids)] == before.bid_ids and len(after.bid_ids) - len(before.bid_ids) in (0, 1)
            elif w.key[0] == "cnet.bidder" and old is not None:
                assert rows.decode_count(w.value) == rows.decode_count(old) + 1
            else:
                assert old is None, f"live row {w.key} overwritten"
            if w.key[0] == "cnet" and old is None:
                born[w.key[1]] = view.now
            assert w.ttl_ms <= 2 * horizon + rows.RETENTION_MS, w
            view.rows[w.key] = (w.value, view.now + w.ttl_ms)
        if kind == "award" and out.objection is None:
            n = awards[(call, born[call])] = awards.get((call, born[call]), 0) + 1
            assert n == 1, "a second award for one call"
