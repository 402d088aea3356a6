"""Seed 002's contract net through a real `busguard run` process and the real
broker: the forwards, the rebid notice topic, the reconciliation topic and the
audit topic, with the config's `[verification]` section in force."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from pathlib import Path

import msgspec

from busguard.audit.awards import call_reports
from busguard.audit.ledger import Ledger
from busguard.config import load_config
from busguard.demo.award import OUTPUT, seed_net
from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, collect, header, identity, make_setup, produce, sender
from busguard.policies.award.wire import AwardPayload, BidPayload, CallPayload, ReceiptTemplate, ResultPayload, attestation_input
from busguard.protocol.attestation import verify_admitted, verify_decision_record
from busguard.protocol.records import Decision
from busguard.protocol.signing import sign
from busguard.protocol.timestamps import format_timestamp
from busguard.sdk.sender import Sender, SignedRecord

AGENTS = ("awarder", "bidder-b", "bidder-c", "verifier")


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def sign_as(who: Sender, kind: str, task: str, payload: msgspec.Struct) -> SignedRecord:
    return who.sign(kind=kind, task_id=task, receiver="guard", payload=msgspec.json.encode(payload))


def other_calls(a: Sender, c: Sender) -> list[tuple[SignedRecord, tuple[str, str]]]:
    """A best-effort call (tolerated class, no check required) and a delegated one, both won by C."""
    deadline = format_timestamp(time.time_ns() // 1_000_000 + 3_600_000)
    out: list[tuple[SignedRecord, tuple[str, str]]] = []
    fwd = ("forward", "admitted")
    be = CallPayload(awarder=a.agent_id, task_class="advisory.summary", task="summarise", requires_check=False, award_deadline=deadline)
    out += [
        (sign_as(a, "cnet.call", "c-be", be), fwd),
        (
            sign_as(
                c,
                "cnet.bid",
                "c-be/bid-c",
                BidPayload(
                    call="c-be", cost=80, deadline=deadline, receipt=ReceiptTemplate(canonicalizer_id="c-private-norm.v1", commits="output")
                ),
            ),
            fwd,
        ),
        (
            sign_as(a, "cnet.award", "c-be", AwardPayload(winner="c-be/bid-c", ranked=["c-be/bid-c"], mode="best_effort", risk_price=25)),
            fwd,
        ),
        (sign_as(c, "cnet.result", "c-be", ResultPayload(state_root="1" * 64, output=b64(OUTPUT))), fwd),
    ]
    dl = CallPayload(awarder=a.agent_id, task_class="transform.table", task="prove it", requires_check=True, award_deadline=deadline)
    template = ReceiptTemplate(canonicalizer_id="zk-trace.v3", commits="trace", verifier_manifest="acme-verifier/v1")
    root = "ab" * 32
    message = attestation_input(
        verifier_manifest="acme-verifier/v1",
        call="c-dl",
        bid="c-dl/bid-c",
        canonicalizer_id="zk-trace.v3",
        state_root=root,
        output_sha256=hashlib.sha256(OUTPUT).hexdigest(),
    )
    assert message is not None
    attestation = b64(sign(identity("verifier").seed, message))
    out += [
        (sign_as(a, "cnet.call", "c-dl", dl), fwd),
        (sign_as(c, "cnet.bid", "c-dl/bid-c", BidPayload(call="c-dl", cost=90, deadline=deadline, receipt=template)), fwd),
        (
            sign_as(
                a,
                "cnet.award",
                "c-dl",
                AwardPayload(winner="c-dl/bid-c", ranked=["c-dl/bid-c"], mode="delegated", verifier="acme-verifier/v1"),
            ),
            fwd,
        ),
        (sign_as(c, "cnet.result", "c-dl", ResultPayload(state_root=root, trace=b64(OUTPUT), attestation=attestation)), fwd),
    ]
    return out


async def test_the_seed_net_through_busguard_run(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, agents=AGENTS)
    with s.config.open("a") as f:  # the award policy's registry, as an operator writes it
        f.write(
            '\n[verification]\ncanonicalizers = ["jcs-sha256", "merkle-sha256"]\nbest_effort_task_classes = ["advisory.summary"]\n'
            f'[[verification.verifiers]]\nmanifest = "acme-verifier/v1"\nagent_id = "{identity("verifier").agent_id}"\ncanonicalizers = ["zk-trace.v3"]\n'
        )
    rebid = load_config(s.config).topics.route_topic("rebid")
    guard = GuardProcess(s)
    guard.wait_ready()
    a, b, c = sender("awarder"), sender("bidder-b"), sender("bidder-c")
    steps = [(st.record, st.expect) for st in seed_net(a, b, c, call="c-seed")] + other_calls(a, c)
    await produce(s.bootstrap, s.handoffs, [r for r, _ in steps])  # one key: one partition, the net's order
    forwards = sum(e[0] == "forward" for _, e in steps)
    try:
        got = await collect(
            s.bootstrap,
            [s.downstream_handoffs, s.dead_letter, s.reconciliation, s.audit, rebid],
            lambda g: (
                len(g[s.audit]) >= len(steps)
                and len(g[s.downstream_handoffs]) >= forwards
                and len(g[rebid]) >= 1
                and len(g[s.reconciliation]) >= 1
            ),
        )
    finally:
        assert guard.terminate() == 0, guard.tail()
    gk = s.guard.public_key

    # audit: every record decided as the net says, sealed by the guard
    ledger = Ledger()
    decided: dict[str | None, Decision] = {}
    for r in got[s.audit]:
        verify_decision_record(r.value, list(r.headers), gk)
        d = msgspec.json.decode(r.value, type=Decision)
        decided[d.receipt_id] = d
        ledger.add_decision(r.value, d, verified=True)
    assert [(decided[r.receipt_id].outcome, decided[r.receipt_id].reason) for r, _ in steps] == [e for _, e in steps]
    refused = decided[steps[3][0].receipt_id]

    # the rebid notice: to the awarder, naming B, bound to the refused award's decision
    (n,) = got[rebid]
    notice = json.loads(n.value)
    assert n.key == b"c-seed" and (notice["reason"], notice["winner"], notice["awarder"]) == (
        "award_unrecomputable",
        "c-seed/bid-c",
        a.agent_id,
    )
    assert [x["bid"] for x in notice["awardable"]] == ["c-seed/bid-b"] and notice["awardable"][0]["bidder"] == b.agent_id
    assert (header(n, "busguard-route"), header(n, "busguard-reason"), header(n, "busguard-decision-id")) == (
        b"rebid",
        b"award_unrecomputable",
        refused.decision_id.encode(),
    )
    (dead,) = got[s.dead_letter]
    assert header(dead, "busguard-reason") == b"award_unrecomputable"

    # reconciliation: the tampered root, attributed to B, both roots
    (esc,) = got[s.reconciliation]
    verify_decision_record(esc.value, list(esc.headers), gk)
    e = msgspec.json.decode(esc.value, type=Decision)
    assert e.reason == "settlement_mismatch" and e.sender == b.agent_id and e.annotations is not None
    assert e.annotations["attributed_to"] == b.agent_id and e.annotations["committed_root"] != e.annotations["recomputed_root"]

    # forwards: attested; each settled result says how it was verified
    verification = {}
    for fwd in got[s.downstream_handoffs]:
        verify_admitted(fwd.value, list(fwd.headers), gk, "guard")
        hv = header(fwd, "busguard-annotation-verification")
        if hv is not None:
            verification[json.loads(fwd.value)["state_root"]] = hv
    assert sorted(verification.values()) == [b"delegated", b"recomputed", b"unverified"]

    # the auditor, per call
    calls = {r.call: r for r in call_reports(ledger.decisions.values())}
    assert (calls["c-seed"].awarded_to, calls["c-seed"].mode, calls["c-seed"].settlement) == (b.agent_id, "verified", "settled")
    assert calls["c-seed"].refused_awards == ["award_unrecomputable"] and calls["c-seed"].escalations == [
        f"settlement_mismatch attributed to {b.agent_id}"
    ]
    assert (calls["c-be"].mode, calls["c-be"].risk_price, calls["c-be"].settlement) == ("best_effort", "25", "unverified")
    assert (calls["c-dl"].mode, calls["c-dl"].delegated_to, calls["c-dl"].settlement) == ("delegated", "acme-verifier/v1", "settled")
