"""Issue 22, seed 002: the award kinds' readers, on forwards the test guard sealed (busguard.testing). No Kafka."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

import busguard.sdk.award as mod
from busguard.policies import KINDS
from busguard.policies.award import policy as award
from busguard.policies.award.canonicalizers import BUILTIN
from busguard.policies.award.registry import VerificationConfig, VerifierConfig, build_registry
from busguard.policies.award.wire import attestation_input
from busguard.protocol.signing import sign
from busguard.protocol.timestamps import format_timestamp
from busguard.sdk.award import (
    READERS,
    SETTLES_AS,
    AwardPayload,
    AwardView,
    BidPayload,
    BidView,
    CallPayload,
    CallView,
    JcsSha256,
    ReceiptTemplate,
    ResultPayload,
    ResultView,
    b64url,
    read_bid,
    read_call,
    read_result,
)
from busguard.sdk.consumer import AdmittingConsumer, Delivery, Fetched
from busguard.testing import GUARD_PUBLIC_KEY, NOW, Harness, agent, seed, sender

A, B, C, V = "awarder", "bidder-b", "bidder-c", "verifier"
BIDDERS = "cnet.bidders"
SOON = format_timestamp(NOW + 3_600_000)
OUTPUT = b'{"rows": [1, 2, 3]}'
MANIFEST = "acme-verifier/v1"

REGISTRY = build_registry(
    VerificationConfig(
        canonicalizers=sorted(BUILTIN),
        verifiers=[VerifierConfig(manifest=MANIFEST, agent_id=agent(V), canonicalizers=["zk-trace.v3"])],
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
    """Awarder A and its bidders on one test guard; `forward` is what busguard publishes."""

    def __init__(self) -> None:
        self.h = Harness(A, B, C, V)
        self.offset = 0

    def forward(self, who: str, kind: str, task: str, to: str, payload: msgspec.Struct) -> Fetched:
        rec = sender(who).sign(kind=kind, task_id=task, receiver=to, payload=msgspec.json.encode(payload))
        value, headers = self.h.forward(rec)
        self.offset += 1
        return Fetched("agents.out", 0, self.offset, value, headers)

    def call(self, call: str, *, task_class: str = "transform.table", requires_check: bool = True) -> Fetched:
        p = CallPayload(awarder=agent(A), task_class=task_class, task="sort the rows", requires_check=requires_check, award_deadline=SOON)
        return self.forward(A, "cnet.call", call, BIDDERS, p)

    def bid(self, who: str, call: str, cost: int, canonicalizer: str = "jcs-sha256", manifest: str | None = None) -> Fetched:
        template = ReceiptTemplate(canonicalizer_id=canonicalizer, commits="trace" if manifest else "output", verifier_manifest=manifest)
        return self.forward(who, "cnet.bid", f"{call}/{who}", agent(A), BidPayload(call=call, cost=cost, deadline=SOON, receipt=template))

    def award(self, call: str, winner: str, **kw: object) -> Fetched:
        p = AwardPayload(winner=f"{call}/{winner}", ranked=[f"{call}/{winner}"], **kw)  # type: ignore[arg-type]
        return self.forward(A, "cnet.award", call, agent(winner), p)

    def result(self, who: str, call: str, root: str, **kw: str) -> Fetched:
        return self.forward(who, "cnet.result", call, agent(A), ResultPayload(state_root=root, **kw))


def inbox(agent_id: str) -> AdmittingConsumer:
    return AdmittingConsumer(None, guard_public_key=GUARD_PUBLIC_KEY, agent_id=agent_id, readers=READERS)


def one(agent_id: str, record: Fetched) -> Delivery:
    batch = inbox(agent_id).admit([record])
    assert batch.refusals == [], batch.refusals
    (d,) = batch.deliveries
    return d


def test_each_kind_reads_as_its_typed_view_with_the_receipts_facts() -> None:
    net = Net()
    call = one(BIDDERS, net.call("c-1")).view
    assert call == CallView(
        call="c-1",
        awarder=agent(A),
        payload=CallPayload(awarder=agent(A), task_class="transform.table", task="sort the rows", requires_check=True, award_deadline=SOON),
    )
    bid = one(agent(A), net.bid(B, "c-1", 120)).view
    assert isinstance(bid, BidView) and (bid.call, bid.bid, bid.bidder, bid.payload.cost) == ("c-1", "c-1/bidder-b", agent(B), 120)
    assert bid.payload.receipt == ReceiptTemplate(canonicalizer_id="jcs-sha256", commits="output")
    won = one(agent(B), net.award("c-1", B, mode="verified")).view
    assert isinstance(won, AwardView) and (won.call, won.awarder, won.payload.winner, won.payload.mode) == (
        "c-1",
        agent(A),
        "c-1/bidder-b",
        "verified",
    )
    result = one(agent(A), net.result(B, "c-1", JcsSha256().root(OUTPUT), output=b64url(OUTPUT))).view
    assert isinstance(result, ResultView)
    assert (result.call, result.bidder, result.delivered, result.verification) == ("c-1", agent(B), OUTPUT, "recomputed")


def test_every_settlement_mode_reaches_the_awarder_typed() -> None:
    net = Net()
    one(BIDDERS, net.call("c-be", task_class="advisory.summary", requires_check=False))
    one(agent(A), net.bid(C, "c-be", 80, "c-private-norm.v1"))
    one(agent(C), net.award("c-be", C, mode="best_effort", risk_price=25))
    unverified = one(agent(A), net.result(C, "c-be", "1" * 64, output=b64url(OUTPUT))).view

    one(BIDDERS, net.call("c-dl"))
    one(agent(A), net.bid(C, "c-dl", 90, "zk-trace.v3", manifest=MANIFEST))
    one(agent(C), net.award("c-dl", C, mode="delegated", verifier=MANIFEST))
    root = "ab" * 32
    message = attestation_input(
        verifier_manifest=MANIFEST,
        call="c-dl",
        bid="c-dl/bidder-c",
        canonicalizer_id="zk-trace.v3",
        state_root=root,
        output_sha256=hashlib.sha256(OUTPUT).hexdigest(),
    )
    assert message is not None
    delegated = one(agent(A), net.result(C, "c-dl", root, trace=b64url(OUTPUT), attestation=b64url(sign(seed(V), message)))).view

    assert isinstance(unverified, ResultView) and isinstance(delegated, ResultView)
    assert (unverified.verification, delegated.verification) == ("unverified", "delegated")
    assert unverified.settles("best_effort") and delegated.settles("delegated")
    assert delegated.delivered == OUTPUT and delegated.payload.trace == b64url(OUTPUT)


def _settled() -> tuple[Net, Fetched]:
    net = Net()
    one(BIDDERS, net.call("c-1"))
    one(agent(A), net.bid(B, "c-1", 120))
    one(agent(B), net.award("c-1", B, mode="verified"))
    return net, net.result(B, "c-1", JcsSha256().root(OUTPUT), output=b64url(OUTPUT))


def test_the_verification_header_is_checked_against_the_awarders_own_mode() -> None:
    _, result = _settled()
    assert ("busguard-annotation-verification", b"recomputed") in result.headers
    honest = one(agent(A), result).view
    assert isinstance(honest, ResultView) and honest.settles("verified") and not honest.settles("best_effort")
    # the header is under the forward's seal (annotations_sha256): a relay that rewrites it is refused
    forged = [(k, b"unverified" if k == "busguard-annotation-verification" else v) for k, v in result.headers]
    inbox = AdmittingConsumer(None, guard_public_key=GUARD_PUBLIC_KEY, agent_id=agent(A), readers=READERS)
    (refused,) = inbox.admit([result._replace(headers=forged)]).refusals
    assert refused.reason == "unattested" and "annotations_sha256" in refused.detail
    # and the awarder's own mode still tells a result settled otherwise (a view built by hand)
    (d,) = inbox.admit([result]).deliveries
    altered = read_result(msgspec.structs.replace(d, annotations={"verification": "unverified"}))
    assert altered.verification == "unverified" and not altered.settles("verified")
    assert SETTLES_AS == {"verified": "recomputed", "delegated": "delegated", "best_effort": "unverified"}


def test_a_result_without_a_known_verification_mode_is_unreadable() -> None:
    _, result = _settled()
    d = one(agent(A), result)
    with pytest.raises(ValueError, match="no busguard-annotation-verification header"):
        read_result(msgspec.structs.replace(d, annotations={}))
    with pytest.raises(ValueError, match="is 'trusted'; allowed delegated, recomputed, unverified"):
        read_result(msgspec.structs.replace(d, annotations={"verification": "trusted"}))


def test_a_payload_the_guard_would_refuse_or_another_kind_is_a_value_error() -> None:
    net = Net()
    d = one(BIDDERS, net.call("c-1"))
    for payload, match in (
        (d.payload.replace(b'"task"', b'"task":"x","task"', 1), "duplicate_key|appears more than once"),
        (d.payload[:-1] + b',"extra":1}', "unknown field"),
        (b"[1]", "cnet.call payload"),
    ):
        with pytest.raises(ValueError, match=match):
            read_call(msgspec.structs.replace(d, payload=payload))
    with pytest.raises(ValueError, match="receipt kind 'cnet.call': this reader reads 'cnet.bid'"):
        read_bid(d)


def test_the_award_is_for_the_winner_only_and_a_call_for_the_bidders_audience() -> None:
    net = Net()
    call = net.call("c-1")
    assert [r.reason for r in inbox(agent(B)).admit([call]).refusals] == ["not_for_me"]
    one(agent(A), net.bid(B, "c-1", 120))
    one(agent(A), net.bid(C, "c-1", 130))
    won = net.award("c-1", B, mode="verified")
    assert [r.reason for r in inbox(agent(C)).admit([won]).refusals] == ["not_for_me"]
    assert isinstance(one(agent(B), won).view, AwardView)


def test_readers_cover_exactly_the_award_policys_kinds() -> None:
    assert sorted(READERS) == sorted(k for k, spec in KINDS.items() if spec.policy is award.POLICY)


def test_docs_sdk_award_section_names_every_export_and_each_views_fields() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "sdk.md").read_text()
    section = text[text.index("## Award readers") :]
    section = section[: section.find("\n## ", 1)] if "\n## " in section[1:] else section
    missing = [name for name in mod.__all__ if f"`{name}" not in section]
    assert missing == []
    for view in (CallView, BidView, AwardView, ResultView):
        (row,) = [line for line in section.splitlines() if line.startswith(f"| `{view.__name__}` |")]
        assert re.findall(r"(?:^|, )`(\w+)[`:]", row.split("|")[2].strip()) == list(view.__struct_fields__), row
