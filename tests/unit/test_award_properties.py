"""Property: whatever the bids and whichever winner and mode the awarder picks,
the award is admitted exactly when the seed's condition of validity holds for
the winner (an oracle written from the seed, not from the policy), and a
refused award's notice lists exactly the bids the oracle finds awardable."""

from __future__ import annotations

import json

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from busguard.policies.award.canonicalizers import BUILTIN
from busguard.policies.award.policy import AwardPolicy
from busguard.policies.award.registry import VerificationConfig, VerifierConfig, build_registry
from busguard.policies.award.wire import AwardPayload, BidPayload, CallPayload, ReceiptTemplate
from busguard.policies.seam import Objection, PolicyKey, PolicyOutcome
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
    parsed = policy.parse(open_envelope(r.value, r.headers, 1 << 20))
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
        bid = BidPayload(call="c", cost=cost, deadline=DEADLINE, receipt=ReceiptTemplate(canonicalizer_id=canon, commits="output", verifier_manifest=manifest))
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
