"""The award policy (seed 002) on the policy seam: one stateful policy for the
four contract-net kinds (docs/protocol.md, "15. Contract-net awards").

State: one row per call, `("cnet", <call id>)`, holding the call, the bids
admitted for it and, once admitted, its award (wire.CallRow). Every record of
the net names its call, so each decision reads exactly one row.

The check the seed asks for runs on the award, i.e. on the winner the
awarder selected after ranking and before the award is committed: a losing
bid with a receipt nobody here can recompute is admitted and harmless.
Cost ranking is the awarder's business; verifiability is busguard's.

The registry (what this deployment can recompute, whom it trust-delegates
to, which task classes tolerate best-effort) comes from the config's
`[verification]` section: `busguard.wiring` calls `configure` before the guard
starts; until then the policy holds the built-in canonicalizers, no
delegations and no best-effort task classes (the section's defaults).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from types import MappingProxyType
from typing import Final

import msgspec

from busguard.policies.award.canonicalizers import BUILTIN, MalformedOutput
from busguard.policies.award.registry import VerificationRegistry
from busguard.policies.award.wire import (
    AwardPayload,
    Awardable,
    AwardRow,
    BidPayload,
    BidRow,
    CallPayload,
    CallRow,
    Payload,
    RebidNotice,
    ResultPayload,
    attestation_input,
    decode_payload,
    delivered,
    notice_encode,
    row_decode,
    row_encode,
)
from busguard.policies.seam import Objection, PolicyKey, PolicyOutcome, PolicyView, PolicyWrite
from busguard.protocol.envelope import Envelope, b64url_decode_strict
from busguard.protocol.identity import canonical_principal
from busguard.protocol.reasons import Outcome, Reason
from busguard.protocol.records import Notice
from busguard.protocol.signing import verify_signature
from busguard.protocol.timestamps import parse_timestamp

NAMESPACE: Final = "cnet"
REBID_ROUTE: Final = "rebid"
#: A call's row is kept this long after the latest deadline it holds (the
#: call's award deadline; once awarded, the winning bid's delivery deadline
#: too), so a late result still finds its award. Rewritten by every bid and
#: by the award, each time with a fresh TTL.
RETENTION_MS: Final = 7 * 86_400_000
#: Bids kept per call: the row is read and rewritten whole by each record.
MAX_BIDS: Final = 64

DEFAULT_REGISTRY: Final = VerificationRegistry(
    canonicalizers=MappingProxyType(dict(BUILTIN)), verifiers=MappingProxyType({}), best_effort_task_classes=frozenset()
)


class Parsed(msgspec.Struct, frozen=True):
    envelope: Envelope
    principal: str
    call: str
    payload: Payload


def _reject(reason: Reason, detail: str) -> Objection:
    return Objection(Outcome.REJECT, reason, detail)


class AwardPolicy:
    """Pure: the registry is fixed per process (configure), the state is the view."""

    def __init__(self, registry: VerificationRegistry = DEFAULT_REGISTRY) -> None:
        self.registry = registry

    def configure(self, registry: VerificationRegistry) -> None:
        self.registry = registry

    # ---------------------------------------------------------------- seam

    def parse(self, envelope: Envelope) -> Parsed | Objection:
        r = envelope.receipt
        payload = decode_payload(r.kind, envelope.payload)
        if isinstance(payload, Objection):
            return payload
        try:
            principal = canonical_principal(r.sender)
            if isinstance(payload, CallPayload):
                canonical_principal(payload.awarder)
        except ValueError as exc:
            return _reject(Reason.MALFORMED_AGENT_ID, f"{r.kind}: {exc}")
        for name, stamp in _stamps(payload):
            try:
                parse_timestamp(stamp)
            except ValueError as exc:
                return _reject(Reason.MALFORMED_TIMESTAMP, f"{r.kind} payload: {name}: {exc}")
        call = payload.call if isinstance(payload, BidPayload) else r.task_id
        return Parsed(envelope, principal, call, payload)

    def keys(self, parsed: Parsed) -> Iterable[PolicyKey]:
        return ((NAMESPACE, parsed.call),)

    def decide(self, parsed: Parsed, view: PolicyView, now_ms: int) -> PolicyOutcome:
        raw = view.get((NAMESPACE, parsed.call))
        row = None if raw is None else row_decode(raw)
        p = parsed.payload
        if isinstance(p, CallPayload):
            return self._call(parsed, p, row, now_ms)
        if row is None:
            unknown = _reject(Reason.AWARD_UNKNOWN_CALL, f"no call {parsed.call!r} was admitted (or it expired)")
            return self._refused(parsed, p, None, unknown) if isinstance(p, AwardPayload) else PolicyOutcome(objection=unknown)
        if isinstance(p, BidPayload):
            return self._bid(parsed, p, row, now_ms)
        if isinstance(p, AwardPayload):
            return self._award(parsed, p, row, now_ms)
        return self._settle(parsed, p, row)

    # ---------------------------------------------------------------- kinds

    def _call(self, parsed: Parsed, p: CallPayload, row: CallRow | None, now_ms: int) -> PolicyOutcome:
        awarder = canonical_principal(p.awarder)
        if awarder != parsed.principal:
            return PolicyOutcome(objection=_reject(Reason.AWARD_WRONG_PARTY, f"the call names awarder {p.awarder!r} but is signed by {parsed.envelope.receipt.sender!r}"))
        deadline = parse_timestamp(p.award_deadline)
        new = CallRow(parsed.envelope.receipt.sender, awarder, p.task_class, p.requires_check, deadline)
        notes = {"call": parsed.call, "task_class": p.task_class, "requires_check": str(p.requires_check).lower()}
        return PolicyOutcome(writes=(_write(parsed.call, new, now_ms),), annotations=notes)

    def _bid(self, parsed: Parsed, p: BidPayload, row: CallRow, now_ms: int) -> PolicyOutcome:
        bid_id = parsed.envelope.receipt.task_id
        if row.award is not None:
            return PolicyOutcome(objection=_reject(Reason.AWARD_CLOSED, f"call {parsed.call!r} is already awarded (to bid {row.award.winner!r})"))
        if now_ms > row.award_deadline_ms:
            return PolicyOutcome(objection=_reject(Reason.AWARD_CLOSED, f"call {parsed.call!r}: its award deadline has passed"))
        if len(row.bids) >= MAX_BIDS:
            return PolicyOutcome(objection=_reject(Reason.AWARD_TOO_MANY_BIDS, f"call {parsed.call!r} already holds {MAX_BIDS} bids"))
        t = p.receipt
        bid = BidRow(bid_id, parsed.envelope.receipt.sender, parsed.principal, p.cost, parse_timestamp(p.deadline), t.canonicalizer_id, t.commits, t.verifier_manifest)
        new = msgspec.structs.replace(row, bids=(*row.bids, bid))
        mode = self._mode(bid, row)
        notes = {"call": parsed.call, "bid": bid_id, "canonicalizer_id": t.canonicalizer_id, "awardable": mode[0] if mode else "no"}
        return PolicyOutcome(writes=(_write(parsed.call, new, now_ms),), annotations=notes)

    def _award(self, parsed: Parsed, p: AwardPayload, row: CallRow, now_ms: int) -> PolicyOutcome:
        objection = self._award_objection(parsed, p, row, now_ms)
        if objection is not None:
            return self._refused(parsed, p, row, objection)
        winner = row.bid(p.winner)
        assert winner is not None
        award = AwardRow(p.winner, p.mode, p.verifier, p.risk_price)
        new = msgspec.structs.replace(row, award=award)
        notes = {"call": parsed.call, "winner": p.winner, "bidder": winner.bidder, "mode": p.mode, "canonicalizer_id": winner.canonicalizer_id}
        if p.mode == "delegated":
            verifier = self.registry.delegation(p.verifier or "", winner.canonicalizer_id)
            assert verifier is not None
            notes |= {"delegated_to": verifier.manifest, "verifier": verifier.agent_id}
        if p.mode == "best_effort":
            notes |= {"downgrade": "best_effort", "risk_price": str(p.risk_price), "cost": str(winner.cost)}
        return PolicyOutcome(writes=(_write(parsed.call, new, now_ms, winner.deadline_ms),), annotations=notes)

    def _award_objection(self, parsed: Parsed, p: AwardPayload, row: CallRow, now_ms: int) -> Objection | None:
        call = parsed.call
        if parsed.principal != row.principal:
            return _reject(Reason.AWARD_WRONG_PARTY, f"call {call!r} belongs to awarder {row.awarder!r}, not {parsed.envelope.receipt.sender!r}")
        if now_ms > row.award_deadline_ms:
            return _reject(Reason.AWARD_CLOSED, f"call {call!r}: its award deadline has passed")
        unknown = [b for b in (p.winner, *p.ranked) if row.bid(b) is None]
        if unknown:
            return _reject(Reason.AWARD_UNKNOWN_BID, f"call {call!r} has no admitted bid {unknown[0]!r}")
        if p.winner not in p.ranked:
            return _reject(Reason.AWARD_UNRANKED_BID, f"the winner {p.winner!r} is not among the bids the award says it ranked")
        winner = row.bid(p.winner)
        assert winner is not None
        cid = winner.canonicalizer_id
        if p.mode == "verified" and self.registry.recompute(cid) is None:
            return _reject(
                Reason.AWARD_UNRECOMPUTABLE,
                f"winning bid {p.winner!r} from {winner.bidder!r} commits its state root under canonicalizer {cid!r}, which this "
                f"deployment cannot recompute, and the award does not record a delegation or a best-effort downgrade: "
                "bid-valid but award-invalid; reject and rebid",
            )
        if p.mode == "delegated":
            if p.verifier != winner.verifier_manifest:
                return _reject(Reason.AWARD_UNTRUSTED_VERIFIER, f"the award delegates to {p.verifier!r} but the winning bid names verifier manifest {winner.verifier_manifest!r}")
            if self.registry.delegation(p.verifier or "", cid) is None:
                return _reject(Reason.AWARD_UNTRUSTED_VERIFIER, f"verifier manifest {p.verifier!r} is not trust-delegated for canonicalizer {cid!r} here")
        if p.mode == "best_effort":
            if row.requires_check:
                return _reject(Reason.AWARD_CHECK_REQUIRED, f"call {call!r} requires postcondition checking: no best-effort award")
            if not self.registry.tolerates_best_effort(row.task_class):
                return _reject(Reason.AWARD_BEST_EFFORT_NOT_TOLERATED, f"task class {row.task_class!r} does not tolerate best-effort awards here")
        return None

    def _refused(self, parsed: Parsed, p: AwardPayload, row: CallRow | None, objection: Objection) -> PolicyOutcome:
        """A refused award: its reject-and-rebid notice to the awarder."""
        awardable = () if row is None else tuple(self._awardable(row))
        notice = RebidNotice(
            call=parsed.call,
            awarder=row.awarder if row is not None else parsed.envelope.receipt.sender,
            winner=p.winner,
            reason=objection.reason.value,
            detail=objection.detail,
            awardable=awardable,
        )
        notes = {"call": parsed.call, "winner": p.winner, "mode": p.mode, "awardable": ",".join(a.bid for a in awardable)}
        return PolicyOutcome(objection=objection, annotations=notes, notices=(Notice(route=REBID_ROUTE, key=parsed.call.encode(), value=notice_encode(notice)),))

    def _settle(self, parsed: Parsed, p: ResultPayload, row: CallRow) -> PolicyOutcome:
        award = row.award
        if award is None:
            return PolicyOutcome(objection=_reject(Reason.SETTLEMENT_NO_AWARD, f"call {parsed.call!r} has no admitted award to settle"))
        winner = row.bid(award.winner)
        assert winner is not None
        if parsed.principal != winner.principal:
            return PolicyOutcome(objection=_reject(Reason.AWARD_WRONG_PARTY, f"call {parsed.call!r} was awarded to {winner.bidder!r}, not {parsed.envelope.receipt.sender!r}"))
        if (p.output if winner.commits == "output" else p.trace) is None:
            return PolicyOutcome(objection=_reject(Reason.MALFORMED_FIELD, f"cnet.result payload: the winning bid commits its root over its {winner.commits}; send {winner.commits}"))
        data = delivered(p)
        notes = {"call": parsed.call, "winner": award.winner, "mode": award.mode, "attributed_to": winner.bidder, "committed_root": p.state_root}
        if award.mode == "best_effort":
            return PolicyOutcome(annotations={**notes, "settlement": "unverified", "verification": "unverified"})
        if award.mode == "delegated":
            return self._delegated(parsed, p, winner, award, data, notes)
        canonicalizer = self.registry.recompute(winner.canonicalizer_id)
        if canonicalizer is None:
            return _escalate(Reason.SETTLEMENT_UNRECOMPUTABLE, f"canonicalizer {winner.canonicalizer_id!r} is no longer registered here", notes)
        try:
            root = canonicalizer.root(data)
        except MalformedOutput as exc:
            return _escalate(Reason.SETTLEMENT_UNRECOMPUTABLE, f"{winner.bidder!r} delivered {winner.commits} {canonicalizer.id} cannot read: {exc}", {**notes, "problem": exc.problem})
        if root != p.state_root:
            detail = f"{winner.bidder!r} committed state_root {p.state_root} but {winner.commits} recomputes under {canonicalizer.id} to {root}"
            return _escalate(Reason.SETTLEMENT_MISMATCH, detail, {**notes, "recomputed_root": root})
        return PolicyOutcome(annotations={**notes, "recomputed_root": root, "settlement": "settled", "verification": "recomputed"})

    def _delegated(self, parsed: Parsed, p: ResultPayload, winner: BidRow, award: AwardRow, data: bytes, notes: dict[str, str]) -> PolicyOutcome:
        verifier = self.registry.delegation(award.verifier or "", winner.canonicalizer_id)
        if verifier is None:
            return _escalate(Reason.SETTLEMENT_BAD_ATTESTATION, f"verifier manifest {award.verifier!r} is no longer trust-delegated here", notes)
        notes = {**notes, "verifier": verifier.agent_id}
        if p.attestation is None:
            return _escalate(Reason.SETTLEMENT_BAD_ATTESTATION, f"a delegated award settles only on an attestation by {verifier.agent_id!r}; none sent", notes)
        message = attestation_input(
            verifier_manifest=verifier.manifest,
            call=parsed.call,
            bid=winner.bid,
            canonicalizer_id=winner.canonicalizer_id,
            state_root=p.state_root,
            output_sha256=hashlib.sha256(data).hexdigest(),
        )
        if message is None or not verify_signature(verifier.public_key, message, b64url_decode_strict(p.attestation, 64)):
            return _escalate(Reason.SETTLEMENT_BAD_ATTESTATION, f"the attestation does not verify with {verifier.agent_id!r}'s registered key over this call, bid, root and output", notes)
        return PolicyOutcome(annotations={**notes, "settlement": "settled", "verification": "delegated"})

    # ---------------------------------------------------------------- modes

    def _mode(self, bid: BidRow, row: CallRow) -> tuple[str, str | None] | None:
        """The first mode, in verified > delegated > best_effort order, in which
        this bid could be awarded here, with the verifier for delegated."""
        if self.registry.recompute(bid.canonicalizer_id) is not None:
            return "verified", None
        if bid.verifier_manifest is not None and self.registry.delegation(bid.verifier_manifest, bid.canonicalizer_id) is not None:
            return "delegated", bid.verifier_manifest
        if not row.requires_check and self.registry.tolerates_best_effort(row.task_class):
            return "best_effort", None
        return None

    def _awardable(self, row: CallRow) -> Iterable[Awardable]:
        for bid in row.bids:
            mode = self._mode(bid, row)
            if mode is not None:
                yield Awardable(bid=bid.bid, bidder=bid.bidder, cost=bid.cost, mode=mode[0], canonicalizer_id=bid.canonicalizer_id, verifier_manifest=mode[1])


def _stamps(p: Payload) -> tuple[tuple[str, str], ...]:
    if isinstance(p, CallPayload):
        return (("award_deadline", p.award_deadline),)
    if isinstance(p, BidPayload):
        return (("deadline", p.deadline),)
    return ()


def _write(call: str, row: CallRow, now_ms: int, *deadlines: int) -> PolicyWrite:
    keep_until = max((row.award_deadline_ms, *deadlines, *(b.deadline_ms for b in row.bids if row.award is None))) + RETENTION_MS
    return PolicyWrite((NAMESPACE, call), row_encode(row), ttl_ms=max(keep_until - now_ms, RETENTION_MS))


def _escalate(reason: Reason, detail: str, notes: dict[str, str]) -> PolicyOutcome:
    return PolicyOutcome(objection=Objection(Outcome.ESCALATE, reason, detail), annotations={**notes, "settlement": "escalated"})


POLICY: Final = AwardPolicy()


def configure(registry: VerificationRegistry) -> None:
    """Install the config's registry (busguard.wiring, before the guard starts)."""
    POLICY.configure(registry)


#: The reason codes each kind may give (KindSpec.reasons).
_PARSE = (Reason.UNKNOWN_FIELD, Reason.MISSING_FIELD, Reason.WRONG_TYPE, Reason.MALFORMED_FIELD, Reason.NOT_JSON, Reason.DUPLICATE_KEY, Reason.MALFORMED_AGENT_ID)
CALL_REASONS: Final = (*_PARSE, Reason.MALFORMED_TIMESTAMP, Reason.AWARD_WRONG_PARTY)
BID_REASONS: Final = (*_PARSE, Reason.MALFORMED_TIMESTAMP, Reason.AWARD_UNKNOWN_CALL, Reason.AWARD_CLOSED, Reason.AWARD_TOO_MANY_BIDS)
AWARD_REASONS: Final = (
    *_PARSE,
    Reason.AWARD_UNKNOWN_CALL,
    Reason.AWARD_WRONG_PARTY,
    Reason.AWARD_CLOSED,
    Reason.AWARD_UNKNOWN_BID,
    Reason.AWARD_UNRANKED_BID,
    Reason.AWARD_UNRECOMPUTABLE,
    Reason.AWARD_UNTRUSTED_VERIFIER,
    Reason.AWARD_BEST_EFFORT_NOT_TOLERATED,
    Reason.AWARD_CHECK_REQUIRED,
)
RESULT_REASONS: Final = (
    *_PARSE,
    Reason.AWARD_UNKNOWN_CALL,
    Reason.AWARD_WRONG_PARTY,
    Reason.SETTLEMENT_NO_AWARD,
    Reason.SETTLEMENT_MISMATCH,
    Reason.SETTLEMENT_UNRECOMPUTABLE,
    Reason.SETTLEMENT_BAD_ATTESTATION,
)
