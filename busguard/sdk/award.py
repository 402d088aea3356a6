"""The contract-net kinds, read: typed views of what busguard admitted for you.

Why: an awarder or a bidder behind busguard used to decode each award
kind's payload itself and look up busguard's facts about the decision in
the protocol doc. Two readings of one signed payload must never differ
(the guard's and the agent's), so these readers decode with the guard's own
strict decoder (`busguard.policies.award.wire.decode_payload`: unknown,
missing, duplicate or mistyped fields are refused, docs/protocol.md 15),
and add the receipt's facts the guard checked (who sent it, which call).
A payload the guard would refuse raises ValueError, which the
`AdmittingConsumer` turns into an `unreadable` refusal; a forward that
reaches a reader was admitted, so that happens only to a forward from a
deployment that does not run the award policy.

A result's view carries `verification`, how busguard settled it
(`recomputed`: the registered canonicalizer reproduced the committed
root; `delegated`: a trusted verifier attested it; `unverified`: a priced
best-effort award, accepted on faith), from the forward's
`busguard-annotation-verification` header. A result without it, or with
another value, is refused: every forwarded result has one of the three.
That header is under the forward's seal (the attestation's
`annotations_sha256`, checked by the consumer, which refuses a result
whose annotation headers it does not bind, as on a forward written before
annotations were sealed). An awarder can also check it against what it
signed itself: the guard forwards a result only as its award's mode
settles, `SETTLES_AS[mode]`, and `ResultView.settles` says whether the
header agrees with the mode the awarder awarded.

    >>> import msgspec
    >>> from busguard.protocol.timestamps import format_timestamp
    >>> from busguard.sdk.consumer import AdmittingConsumer, Fetched
    >>> from busguard.testing import GUARD_PUBLIC_KEY, NOW, Harness, agent, sender
    >>> h, a, b = Harness("awarder", "bidder"), sender("awarder"), sender("bidder")
    >>> soon = format_timestamp(NOW + 3_600_000)
    >>> def forward(who, kind, task, to, payload):
    ...     value, headers = h.forward(who.sign(kind=kind, task_id=task, receiver=to, payload=msgspec.json.encode(payload)))
    ...     return Fetched("agents.out", 0, 0, value, headers)
    >>> call = forward(a, KIND_CALL, "c-1", "cnet.bidders", CallPayload(
    ...     awarder=a.agent_id, task_class="transform.table", task="sort", requires_check=True, award_deadline=soon))
    >>> template = ReceiptTemplate(canonicalizer_id="jcs-sha256", commits="output")
    >>> bid = forward(b, KIND_BID, "c-1/b", a.agent_id, BidPayload(call="c-1", cost=5, deadline=soon, receipt=template))
    >>> award = forward(a, KIND_AWARD, "c-1", b.agent_id, AwardPayload(winner="c-1/b", ranked=["c-1/b"], mode="verified"))
    >>> output = b'{"sorted":[1,2]}'
    >>> result = forward(b, KIND_RESULT, "c-1", a.agent_id, ResultPayload(state_root=JcsSha256().root(output), output=b64url(output)))
    >>> awarder = AdmittingConsumer(None, guard_public_key=GUARD_PUBLIC_KEY, agent_id=a.agent_id, readers=READERS)
    >>> bidders = AdmittingConsumer(None, guard_public_key=GUARD_PUBLIC_KEY, agent_id="cnet.bidders", readers=READERS)
    >>> (c,) = bidders.admit([call]).deliveries
    >>> c.view.call, c.view.awarder == a.agent_id, c.view.payload.task
    ('c-1', True, 'sort')
    >>> bid_view, result_view = (d.view for d in awarder.admit([bid, result]).deliveries)
    >>> bid_view.bid, bid_view.call, bid_view.payload.cost, bid_view.bidder == b.agent_id
    ('c-1/b', 'c-1', 5, True)
    >>> result_view.verification, result_view.delivered, result_view.settles("verified")
    ('recomputed', b'{"sorted":[1,2]}', True)
    >>> awarder.admit([award]).refusals[0].reason  # the award is the winner's, not the awarder's
    'not_for_me'

Cost per record: the guard's decode (one msgspec decode and one
`json.loads` for duplicate keys) of a payload the guard already bounded
(`max_payload_bytes`); a result's delivered bytes are decoded once more
from base64url. Nothing is kept between records.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

import msgspec

from busguard.policies.award.canonicalizers import BUILTIN as BUILTIN_CANONICALIZERS
from busguard.policies.award.canonicalizers import JcsSha256, MerkleSha256
from busguard.policies.award.wire import (
    KIND_AWARD,
    KIND_BID,
    KIND_CALL,
    KIND_RESULT,
    AwardPayload,
    BidPayload,
    CallPayload,
    ReceiptTemplate,
    ResultPayload,
    decode_payload,
    delivered,
)
from busguard.policies.seam import Objection
from busguard.protocol.envelope import b64url_encode
from busguard.sdk.consumer import Delivery, Reader

__all__ = [
    "ANNOTATION_VERIFICATION",
    "BUILTIN_CANONICALIZERS",
    "KIND_AWARD",
    "KIND_BID",
    "KIND_CALL",
    "KIND_RESULT",
    "READERS",
    "SETTLES_AS",
    "AwardPayload",
    "AwardView",
    "BidPayload",
    "BidView",
    "CallPayload",
    "CallView",
    "JcsSha256",
    "MerkleSha256",
    "ReceiptTemplate",
    "ResultPayload",
    "ResultView",
    "Verification",
    "b64url",
    "read_award",
    "read_bid",
    "read_call",
    "read_result",
]

#: How busguard settled a forwarded result (docs/protocol.md 15.4).
Verification = Literal["recomputed", "delegated", "unverified"]
#: The annotation a forwarded `cnet.result` carries as `busguard-annotation-verification`.
ANNOTATION_VERIFICATION: Final = "verification"
_MODES: Final[dict[str, Verification]] = {m: m for m in get_args(Verification)}
#: The verification a result of an award in each mode is forwarded with (docs/protocol.md 15.4).
SETTLES_AS: Final[dict[str, Verification]] = {"verified": "recomputed", "delegated": "delegated", "best_effort": "unverified"}


class CallView(msgspec.Struct, frozen=True, kw_only=True):
    """An admitted `cnet.call`: `call` is its id (the receipt's task_id),
    `awarder` the receipt's sender (the guard checked it is `payload.awarder`)."""

    call: str
    awarder: str
    payload: CallPayload


class BidView(msgspec.Struct, frozen=True, kw_only=True):
    """An admitted `cnet.bid`: `bid` is its id (the receipt's task_id), `call`
    the call it bids on, `bidder` the receipt's sender (the one who must
    deliver the result if it wins)."""

    call: str
    bid: str
    bidder: str
    payload: BidPayload


class AwardView(msgspec.Struct, frozen=True, kw_only=True):
    """An admitted `cnet.award`: the guard checked that `awarder` (the
    receipt's sender) issued the call, that `payload.winner` was admitted
    for it and that the mode is settleable here (docs/protocol.md 15.3)."""

    call: str
    awarder: str
    payload: AwardPayload


class ResultView(msgspec.Struct, frozen=True, kw_only=True):
    """An admitted (settled) `cnet.result`: `bidder` is the receipt's sender
    (the guard checked it is the winner's), `delivered` the output or trace
    bytes, `verification` how busguard settled it."""

    call: str
    bidder: str
    payload: ResultPayload
    delivered: bytes
    verification: Verification

    def settles(self, awarded_mode: str) -> bool:
        """Whether `verification` is how a result of an award in `awarded_mode`
        (the awarder's own signed `cnet.award.mode`) is settled: False
        means the guard settled the result otherwise than that mode says
        (which busguard never does), so do not rely on it."""
        return SETTLES_AS.get(awarded_mode) == self.verification


def b64url(data: bytes) -> str:
    """Unpadded base64url, as a result's `output`, `trace` and `attestation` travel."""
    return b64url_encode(data)


def _payload(d: Delivery, kind: str) -> CallPayload | BidPayload | AwardPayload | ResultPayload:
    if d.receipt.kind != kind:
        raise ValueError(f"receipt kind {d.receipt.kind!r}: this reader reads {kind!r}")
    p = decode_payload(kind, d.payload)
    if isinstance(p, Objection):
        raise ValueError(p.detail)
    return p


def read_call(d: Delivery) -> CallView:
    p = _payload(d, KIND_CALL)
    assert isinstance(p, CallPayload)
    return CallView(call=d.receipt.task_id, awarder=d.receipt.sender, payload=p)


def read_bid(d: Delivery) -> BidView:
    p = _payload(d, KIND_BID)
    assert isinstance(p, BidPayload)
    return BidView(call=p.call, bid=d.receipt.task_id, bidder=d.receipt.sender, payload=p)


def read_award(d: Delivery) -> AwardView:
    p = _payload(d, KIND_AWARD)
    assert isinstance(p, AwardPayload)
    return AwardView(call=d.receipt.task_id, awarder=d.receipt.sender, payload=p)


def read_result(d: Delivery) -> ResultView:
    p = _payload(d, KIND_RESULT)
    assert isinstance(p, ResultPayload)
    mode = d.annotations.get(ANNOTATION_VERIFICATION)
    verification = _MODES.get(mode) if mode is not None else None
    if mode is None:
        raise ValueError(
            f"{KIND_RESULT}: no busguard-annotation-{ANNOTATION_VERIFICATION} header; every forwarded result has one (docs/protocol.md 15.4)"
        )
    if verification is None:
        raise ValueError(
            f"{KIND_RESULT}: busguard-annotation-{ANNOTATION_VERIFICATION} is {mode[:64]!r}; allowed {', '.join(sorted(_MODES))}"
        )
    return ResultView(call=d.receipt.task_id, bidder=d.receipt.sender, payload=p, delivered=delivered(p), verification=verification)


#: The readers of the four contract-net kinds, for `AdmittingConsumer(readers=READERS)`.
READERS: Final[dict[str, Reader]] = {KIND_CALL: read_call, KIND_BID: read_bid, KIND_AWARD: read_award, KIND_RESULT: read_result}
