"""The award policy (seed 002) through the real admission path (admit_batch,
MemoryStore): calls, bids, awards and settlements, as the seed's net had them."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from busguard.audit.lineage import judge
from busguard.policies.award import policy as award
from busguard.policies.award.canonicalizers import BUILTIN, JcsSha256
from busguard.policies.award.registry import VerificationConfig, VerifierConfig, build_registry
from busguard.policies.award.wire import (
    AwardPayload,
    BidPayload,
    CallPayload,
    ReceiptTemplate,
    ResultPayload,
    attestation_input,
)
from busguard.protocol.reasons import Outcome, Reason
from busguard.protocol.records import Decision
from busguard.protocol.signing import sign
from busguard.sdk.sender import SignedRecord
from tests.unit.harness import NOW, Harness, agent, seed, sender

A, B, C, V = "awarder", "bidder-b", "bidder-c", "verifier"
GUARD = agent("guard")
DEADLINE = "2026-11-29T13:00:00.000Z"
OUTPUT = b'{"rows": [3, 1, 2], "total": 6}'


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


REGISTRY = build_registry(
    VerificationConfig(
        canonicalizers=sorted(BUILTIN),
        verifiers=[VerifierConfig(manifest="acme-verifier/v1", agent_id=agent(V), canonicalizers=["zk-trace.v3"])],
        best_effort_task_classes=["advisory.summary"],
    ),
    "test",
    canonicalizers=BUILTIN,
)


@pytest.fixture(autouse=True)
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(award.POLICY, "registry", REGISTRY)
    yield


class Net:
    """The seed's three agents on one guard."""

    def __init__(self) -> None:
        self.h = Harness(A, B, C, V)
        self.n = 0
        self.log: list[Decision] = []

    def send(self, who: str, kind: str, task_id: str, payload: msgspec.Struct | bytes) -> Decision:
        value = payload if isinstance(payload, bytes) else msgspec.json.encode(payload)
        self.n += 1
        record: SignedRecord = sender(who, now=self.h.now).sign(
            kind=kind, task_id=task_id, receiver=GUARD, payload=value, nonce=f"nonce-{self.n:012d}"
        )
        decision = self.h.one(record)
        self.log.append(decision)
        return decision

    def call(self, call: str = "c1", *, task_class: str = "transform.table", requires_check: bool = True, who: str = A) -> Decision:
        p = CallPayload(
            awarder=agent(A), task_class=task_class, task="normalise the table", requires_check=requires_check, award_deadline=DEADLINE
        )
        return self.send(who, "cnet.call", call, p)

    def bid(self, who: str, bid: str, cost: int, canonicalizer: str, call: str = "c1", manifest: str | None = None) -> Decision:
        template = ReceiptTemplate(canonicalizer_id=canonicalizer, commits="output", verifier_manifest=manifest)
        return self.send(who, "cnet.bid", bid, BidPayload(call=call, cost=cost, deadline=DEADLINE, receipt=template))

    def award(self, winner: str, ranked: list[str], mode: str = "verified", call: str = "c1", who: str = A, **kw: object) -> Decision:
        return self.send(who, "cnet.award", call, AwardPayload(winner=winner, ranked=ranked, mode=mode, **kw))  # type: ignore[arg-type]

    def result(self, output: bytes, root: str, who: str = B, call: str = "c1", attestation: str | None = None) -> Decision:
        return self.send(who, "cnet.result", call, ResultPayload(state_root=root, output=b64(output), attestation=attestation))


def seed_net() -> Net:
    net = Net()
    assert net.call().outcome == Outcome.FORWARD
    assert net.bid(B, "bid-b", 120, "jcs-sha256").annotations == {
        "call": "c1",
        "bid": "bid-b",
        "canonicalizer_id": "jcs-sha256",
        "awardable": "verified",
    }
    d = net.bid(C, "bid-c", 80, "c-private-norm.v1")
    assert (d.outcome, d.annotations and d.annotations["awardable"]) == (Outcome.FORWARD, "no")  # bid-valid
    return net


def notice(d: Decision) -> dict[str, Any]:
    assert d.notices is not None and len(d.notices) == 1 and d.notices[0].route == "rebid"
    value: dict[str, Any] = json.loads(d.notices[0].value)
    return value


# ------------------------------------------------------------- the incident


def test_the_seed_incident_award_to_c_refused_with_a_rebid_naming_b_then_b_awarded_and_settled() -> None:
    net = seed_net()
    refused = net.award("bid-c", ["bid-c", "bid-b"])
    assert (refused.outcome, refused.reason) == (Outcome.REJECT, Reason.AWARD_UNRECOMPUTABLE)
    assert "c-private-norm.v1" in refused.detail and "rebid" in refused.detail
    n = notice(refused)
    assert n["type"] == "rebid" and n["call"] == "c1" and n["winner"] == "bid-c" and n["reason"] == "award_unrecomputable"
    assert n["awarder"] == agent(A) and refused.notices is not None and refused.notices[0].key == b"c1"
    assert n["awardable"] == [
        {"bid": "bid-b", "bidder": agent(B), "cost": 120, "mode": "verified", "canonicalizer_id": "jcs-sha256", "verifier_manifest": None}
    ]
    awarded = net.award("bid-b", ["bid-c", "bid-b"])  # same task (the call): the refused award recorded no task
    assert (awarded.outcome, awarded.reason) == (Outcome.FORWARD, Reason.ADMITTED) and awarded.notices is None
    assert awarded.annotations == {
        "call": "c1",
        "winner": "bid-b",
        "bidder": agent(B),
        "mode": "verified",
        "canonicalizer_id": "jcs-sha256",
    }
    settled = net.result(OUTPUT, JcsSha256().root(OUTPUT))
    assert (settled.outcome, settled.reason) == (Outcome.FORWARD, Reason.ADMITTED)
    assert settled.annotations is not None
    assert (settled.annotations["settlement"], settled.annotations["verification"]) == ("settled", "recomputed")


def test_a_tampered_self_consistent_root_is_escalated_attributed_to_b_with_both_roots() -> None:
    net = seed_net()
    assert net.award("bid-b", ["bid-b", "bid-c"]).outcome == Outcome.FORWARD
    # B signs a root over its own reading of the output (plain SHA-256 of the
    # bytes): consistent with itself, not the jcs-sha256 root it bid.
    wrong_root = hashlib.sha256(OUTPUT).hexdigest()
    tampered = net.result(OUTPUT, wrong_root)
    assert (tampered.outcome, tampered.reason) == (Outcome.ESCALATE, Reason.SETTLEMENT_MISMATCH)
    a = tampered.annotations
    assert a is not None and a["attributed_to"] == agent(B) and tampered.sender == agent(B)
    assert (a["committed_root"], a["recomputed_root"], a["settlement"]) == (wrong_root, JcsSha256().root(OUTPUT), "escalated")
    assert wrong_root in tampered.detail and JcsSha256().root(OUTPUT) in tampered.detail
    # still awarded: a later, honest delivery settles (the escalation stays on record)
    again = net.result(OUTPUT, JcsSha256().root(OUTPUT))
    assert again.outcome == Outcome.FORWARD and again.annotations is not None and again.annotations["settlement"] == "settled"


def test_a_losing_unrecomputable_bid_does_not_block_the_award() -> None:
    net = seed_net()
    d = net.award("bid-b", ["bid-b", "bid-c"])  # C ranked, lost
    assert d.outcome == Outcome.FORWARD


# ------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("winner", "ranked", "reason"),
    [
        ("bid-x", ["bid-x", "bid-b"], Reason.AWARD_UNKNOWN_BID),
        ("bid-b", ["bid-b", "bid-x"], Reason.AWARD_UNKNOWN_BID),
        ("bid-b", ["bid-c"], Reason.AWARD_UNRANKED_BID),
    ],
)
def test_an_award_naming_an_unknown_or_unranked_bid_is_refused_with_a_notice(winner: str, ranked: list[str], reason: Reason) -> None:
    net = seed_net()
    d = net.award(winner, ranked)
    assert (d.outcome, d.reason) == (Outcome.REJECT, reason)
    assert [b["bid"] for b in notice(d)["awardable"]] == ["bid-b"]


def test_a_bid_for_another_call_is_unknown_to_this_one() -> None:
    net = seed_net()
    assert net.call("c2").outcome == Outcome.FORWARD
    assert net.bid(B, "bid-b2", 100, "jcs-sha256", call="c2").outcome == Outcome.FORWARD
    assert net.award("bid-b2", ["bid-b2"]).reason == Reason.AWARD_UNKNOWN_BID  # named in c1's award


def test_award_and_bid_for_an_unknown_call_and_an_award_from_someone_else() -> None:
    net = Net()
    assert net.bid(B, "bid-b", 1, "jcs-sha256").reason == Reason.AWARD_UNKNOWN_CALL
    d = net.award("bid-b", ["bid-b"])
    assert d.reason == Reason.AWARD_UNKNOWN_CALL and notice(d)["awardable"] == []
    net = seed_net()
    assert net.award("bid-b", ["bid-b"], who=C).reason == Reason.AWARD_WRONG_PARTY
    assert net.call("c9", who=B).reason == Reason.AWARD_WRONG_PARTY  # a call names its signer as awarder


def test_bids_after_the_award_are_closed_and_results_come_from_the_winner_only() -> None:
    net = seed_net()
    assert net.result(OUTPUT, JcsSha256().root(OUTPUT)).reason == Reason.SETTLEMENT_NO_AWARD
    assert net.award("bid-b", ["bid-b"]).outcome == Outcome.FORWARD
    assert net.bid(C, "bid-c2", 1, "jcs-sha256").reason == Reason.AWARD_CLOSED
    assert net.result(OUTPUT, JcsSha256().root(OUTPUT), who=C).reason == Reason.AWARD_WRONG_PARTY


def test_past_the_award_deadline_bids_and_awards_are_closed() -> None:
    net = seed_net()
    net.h.now = NOW + 2 * 3_600_000  # past 13:00; the records are signed at that clock too
    assert net.bid(B, "bid-late", 1, "jcs-sha256").reason == Reason.AWARD_CLOSED
    assert net.award("bid-b", ["bid-b"]).reason == Reason.AWARD_CLOSED


def test_an_unrecomputable_output_escalates_with_the_problem() -> None:
    net = seed_net()
    net.award("bid-b", ["bid-b"])
    d = net.result(b'{"a": 1, "a": 2}', "0" * 64)
    assert (d.outcome, d.reason) == (Outcome.ESCALATE, Reason.SETTLEMENT_UNRECOMPUTABLE)
    assert d.annotations is not None and d.annotations["problem"] == "duplicate-key"


# ------------------------------------------------------------- best effort


def best_effort_net(task_class: str, requires_check: bool) -> Net:
    net = Net()
    assert net.call(task_class=task_class, requires_check=requires_check).outcome == Outcome.FORWARD
    assert net.bid(C, "bid-c", 80, "c-private-norm.v1").outcome == Outcome.FORWARD
    return net


def test_best_effort_is_forwarded_recorded_and_priced_when_policy_allows_it() -> None:
    net = best_effort_net("advisory.summary", requires_check=False)
    d = net.award("bid-c", ["bid-c"], mode="best_effort", risk_price=15)
    assert d.outcome == Outcome.FORWARD
    assert d.annotations == {
        "call": "c1", "winner": "bid-c", "bidder": agent(C), "mode": "best_effort",
        "canonicalizer_id": "c-private-norm.v1", "downgrade": "best_effort", "risk_price": "15", "cost": "80",
    }  # fmt: skip
    r = net.result(OUTPUT, "1" * 64, who=C)
    assert r.outcome == Outcome.FORWARD and r.annotations is not None
    assert (r.annotations["settlement"], r.annotations["verification"]) == ("unverified", "unverified")


def test_best_effort_refused_when_the_task_class_does_not_tolerate_it_or_the_call_requires_checking() -> None:
    d = best_effort_net("transform.table", requires_check=False).award("bid-c", ["bid-c"], mode="best_effort", risk_price=15)
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.AWARD_BEST_EFFORT_NOT_TOLERATED)
    d = best_effort_net("advisory.summary", requires_check=True).award("bid-c", ["bid-c"], mode="best_effort", risk_price=15)
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.AWARD_CHECK_REQUIRED)
    assert notice(d)["awardable"] == []
    # a tolerated class lists the bid as awardable best-effort in a verified award's notice
    d = best_effort_net("advisory.summary", requires_check=False).award("bid-c", ["bid-c"])
    assert d.reason == Reason.AWARD_UNRECOMPUTABLE and [a["mode"] for a in notice(d)["awardable"]] == ["best_effort"]


# ------------------------------------------------------------- delegation


def delegated_net(manifest: str) -> Net:
    net = Net()
    net.call()
    assert net.bid(C, "bid-c", 80, "zk-trace.v3", manifest=manifest).outcome == Outcome.FORWARD
    return net


def attest(root: str, output: bytes, who: str = V, manifest: str = "acme-verifier/v1") -> str:
    message = attestation_input(
        verifier_manifest=manifest,
        call="c1",
        bid="bid-c",
        canonicalizer_id="zk-trace.v3",
        state_root=root,
        output_sha256=hashlib.sha256(output).hexdigest(),
    )
    assert message is not None
    return b64(sign(seed(who), message))


def test_a_delegated_verifier_is_honoured_when_trusted_and_the_award_records_it() -> None:
    net = delegated_net("acme-verifier/v1")
    d = net.award("bid-c", ["bid-c"], mode="delegated", verifier="acme-verifier/v1")
    assert d.outcome == Outcome.FORWARD and d.annotations is not None
    assert (d.annotations["delegated_to"], d.annotations["verifier"]) == ("acme-verifier/v1", agent(V))
    root = "ab" * 32
    assert net.result(OUTPUT, root, who=C, attestation=attest("cd" * 32, OUTPUT)).reason == Reason.SETTLEMENT_BAD_ATTESTATION
    assert net.result(OUTPUT, root, who=C, attestation=attest(root, OUTPUT, who=C)).reason == Reason.SETTLEMENT_BAD_ATTESTATION
    assert net.result(OUTPUT, root, who=C).reason == Reason.SETTLEMENT_BAD_ATTESTATION
    ok = net.result(OUTPUT, root, who=C, attestation=attest(root, OUTPUT))
    assert ok.outcome == Outcome.FORWARD and ok.annotations is not None
    assert (ok.annotations["settlement"], ok.annotations["verification"], ok.annotations["verifier"]) == ("settled", "delegated", agent(V))


def test_a_delegated_verifier_not_in_the_trust_policy_is_refused() -> None:
    d = delegated_net("shady-verifier/v1").award("bid-c", ["bid-c"], mode="delegated", verifier="shady-verifier/v1")
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.AWARD_UNTRUSTED_VERIFIER) and notice(d)["awardable"] == []
    d = delegated_net("acme-verifier/v1").award("bid-c", ["bid-c"], mode="delegated", verifier="other/v1")
    assert d.reason == Reason.AWARD_UNTRUSTED_VERIFIER  # not the verifier the bid declared
    # a trusted verifier for another canonicalizer is no delegation for this one
    net = Net()
    net.call()
    net.bid(C, "bid-c", 80, "c-private-norm.v1", manifest="acme-verifier/v1")
    d = net.award("bid-c", ["bid-c"], mode="delegated", verifier="acme-verifier/v1")
    assert d.reason == Reason.AWARD_UNTRUSTED_VERIFIER
    # a verified award of a delegatable bid is refused too: the delegation must be recorded, not assumed
    d = delegated_net("acme-verifier/v1").award("bid-c", ["bid-c"])
    assert d.reason == Reason.AWARD_UNRECOMPUTABLE and [a["mode"] for a in notice(d)["awardable"]] == ["delegated"]


# ------------------------------------------------------------- payloads


@pytest.mark.parametrize(
    ("kind", "value", "reason"),
    [
        (
            "cnet.bid",
            b'{"call": "c1", "cost": 1, "deadline": "2026-11-29T13:00:00Z", "receipt": {"canonicalizer_id": "jcs-sha256", "commits": "output"}, "extra": 1}',
            Reason.UNKNOWN_FIELD,
        ),
        (
            "cnet.bid",
            b'{"call": "c1", "call": "c2", "cost": 1, "deadline": "2026-11-29T13:00:00Z", "receipt": {"canonicalizer_id": "jcs-sha256", "commits": "output"}}',
            Reason.DUPLICATE_KEY,
        ),
        (
            "cnet.bid",
            b'{"call": "c1", "cost": -1, "deadline": "2026-11-29T13:00:00Z", "receipt": {"canonicalizer_id": "jcs-sha256", "commits": "output"}}',
            Reason.MALFORMED_FIELD,
        ),
        (
            "cnet.bid",
            b'{"call": "c1", "cost": 1.5, "deadline": "2026-11-29T13:00:00Z", "receipt": {"canonicalizer_id": "jcs-sha256", "commits": "output"}}',
            Reason.WRONG_TYPE,
        ),
        (
            "cnet.bid",
            b'{"call": "c1", "cost": 1, "deadline": "tomorrow", "receipt": {"canonicalizer_id": "jcs-sha256", "commits": "output"}}',
            Reason.MALFORMED_TIMESTAMP,
        ),
        (
            "cnet.bid",
            b'{"call": "c1", "cost": 1, "deadline": "2026-11-29T13:00:00Z", "receipt": {"canonicalizer_id": "JCS", "commits": "output"}}',
            Reason.MALFORMED_FIELD,
        ),
        ("cnet.award", b'{"winner": "b", "ranked": ["b"], "mode": "delegated"}', Reason.MISSING_FIELD),  # 15: a mode-required field
        ("cnet.award", b'{"winner": "b", "ranked": ["b"], "mode": "best_effort"}', Reason.MISSING_FIELD),
        ("cnet.award", b'{"winner": "b", "ranked": ["b"], "mode": "verified", "verifier": "v/1"}', Reason.MALFORMED_FIELD),
        ("cnet.award", b'{"winner": "b", "ranked": ["b", "b"], "mode": "verified"}', Reason.MALFORMED_FIELD),
        ("cnet.award", b'{"winner": "b", "ranked": ["b"], "mode": "verified", "risk_price": 3}', Reason.MALFORMED_FIELD),
        ("cnet.award", b'{"winner": "b", "ranked": ["b"]}', Reason.MISSING_FIELD),
        ("cnet.result", b'{"state_root": "' + b"0" * 64 + b'"}', Reason.MALFORMED_FIELD),
        ("cnet.result", b'{"state_root": "' + b"0" * 64 + b'", "output": "AA="}', Reason.MALFORMED_FIELD),
        ("cnet.result", b'{"state_root": "XYZ", "output": "AA"}', Reason.MALFORMED_FIELD),
        ("cnet.call", b"[1]", Reason.WRONG_TYPE),
        ("cnet.call", b"{", Reason.NOT_JSON),
    ],
)
def test_payloads_are_decoded_strictly(kind: str, value: bytes, reason: Reason) -> None:
    net = seed_net()
    d = net.send(B, kind, "t-bad", value)
    assert (d.outcome, d.reason) == (Outcome.REJECT, reason) and kind in d.detail


# ------------------------------------------------------------- the auditor


def test_the_auditor_reports_per_call_whom_in_which_mode_and_settled_or_escalated() -> None:
    from busguard.audit.ledger import Ledger
    from busguard.audit.report import render_table

    net = seed_net()
    net.award("bid-c", ["bid-c", "bid-b"]), net.award("bid-b", ["bid-b"]), net.result(OUTPUT, hashlib.sha256(OUTPUT).hexdigest())
    assert net.call("c2").outcome == Outcome.FORWARD
    net.bid(B, "bid-b2", 100, "jcs-sha256", call="c2")
    net.award("bid-b2", ["bid-b2"], call="c2"), net.result(OUTPUT, JcsSha256().root(OUTPUT), call="c2")
    ledger = Ledger()
    for d in net.log:
        ledger.add_decision(msgspec.json.encode(d), d, verified=True)
    calls = {c.call: c for c in judge(ledger).calls}
    c1, c2 = calls["c1"], calls["c2"]
    assert (c1.bids, c1.refused_awards, c1.winner, c1.awarded_to, c1.mode) == (2, ["award_unrecomputable"], "bid-b", agent(B), "verified")
    assert c1.settlement == "escalated" and c1.escalations == [f"settlement_mismatch attributed to {agent(B)}"]
    assert (c2.bids, c2.refused_awards, c2.settlement) == (1, [], "settled")
    table = render_table(judge(ledger))
    assert "contract-net calls (2):" in table and "settlement_mismatch attributed to" in table
