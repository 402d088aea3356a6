"""The award policy (seed 002) on the policy seam: one stateful policy for the
four contract-net kinds (docs/protocol.md, "15. Contract-net awards").

State (rows.py, protocol.md 15.5): a small call row per call, one row per
admitted bid and one count per (call, bidder), each with an explicit
lifetime bounded by the `[award]` horizon. Rows are created once and never
silently replaced: a call id whose row lives cannot be issued again, a bid
id cannot be admitted twice for one call, and a call holds at most one
award, ever, whatever the task index (whose entries may expire sooner) says.

The check the seed asks for runs on the award, i.e. on the winner the
awarder selected after ranking and before the award is committed: a losing
bid with a receipt nobody here can recompute is admitted and harmless.
Cost ranking is the awarder's business; verifiability is busguard's.

Settlement's expensive part, recomputing the delivered bytes' root, needs
no state, so it runs in `parse` (before the batch's state transaction) under
every canonicalizer this deployment holds; `decide`, inside the transaction,
only compares strings, so a 1 MiB result holds the store's lock for
microseconds however often its sender resends it.

The registry (what this deployment can recompute, whom it trust-delegates
to, which task classes tolerate best-effort) comes from the config's
`[verification]` section and the limits from `[award]`: `Config.policy()`
puts an `AwardPolicy` holding both in the policy settings under "award",
and `parse` finds it in its `PolicyContext` like every other kind's
settings and names it in what it parsed, so `decide` judges by the same
rules. Without one (a bare context) the registered policy's own rules hold:
the built-in canonicalizers, no delegations, no best-effort task classes and
the default limits (the sections' defaults).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Final

import msgspec

from busguard.policies.award import rows
from busguard.policies.award.canonicalizers import BUILTIN
from busguard.policies.award.codes import AWARD_REASONS, BID_REASONS, CALL_REASONS, RESULT_REASONS
from busguard.policies.award.limits import DEFAULT_LIMITS, MAX_BIDS, AwardConfig
from busguard.policies.award.registry import VerificationRegistry
from busguard.policies.award.rows import AwardedRow, AwardRow, BidRow, CallRow, Legacy
from busguard.policies.award.settle import Recomputed, recompute, settle
from busguard.policies.award.wire import (
    Awardable,
    AwardPayload,
    BidPayload,
    CallPayload,
    Payload,
    RebidNotice,
    ResultPayload,
    decode_payload,
    delivered,
    notice_encode,
)
from busguard.policies.seam import Objection, PolicyContext, PolicyInput, PolicyKey, PolicyOutcome, PolicyView, PolicyWrite
from busguard.protocol.envelope import Envelope
from busguard.protocol.identity import canonical_principal
from busguard.protocol.reasons import Outcome, Reason
from busguard.protocol.records import Notice
from busguard.protocol.timestamps import parse_timestamp

__all__ = ["AWARD_REASONS", "BID_REASONS", "CALL_REASONS", "POLICY", "RESULT_REASONS", "AwardPolicy"]

NAMESPACE: Final = rows.NAMESPACE
NAMESPACES: Final = rows.NAMESPACES
REBID_ROUTE: Final = "rebid"
RETENTION_MS: Final = rows.RETENTION_MS
#: The ranked bids an award reads (for its rebid notice): its first 8, the
#: awarder's top choices. With the winner and the call, at most 10 rows, and
#: so 10 row locks on PostgreSQL, per award record.
NOTICE_BIDS: Final = 8

DEFAULT_REGISTRY: Final = VerificationRegistry(
    canonicalizers=MappingProxyType(dict(BUILTIN)), verifiers=MappingProxyType({}), best_effort_task_classes=frozenset()
)


#: the key of this policy's settings in `PolicyContext.settings`
SETTINGS_KEY: Final = "award"


class Parsed(msgspec.Struct, frozen=True):
    envelope: Envelope
    principal: str
    call: str
    payload: Payload
    recomputed: Recomputed | None = None
    #: the rules it was parsed under (the context's), which decide it too
    rules: AwardPolicy | None = None


def _reject(reason: Reason, detail: str) -> Objection:
    return Objection(Outcome.REJECT, reason, detail)


class _Call(msgspec.Struct, frozen=True):
    """The call's state as decide reads it: the row and, for a row written
    before per-bid rows existed, the bids it held inline (rows.Legacy)."""

    row: CallRow
    legacy: tuple[BidRow, ...] = ()
    is_legacy: bool = False


class AwardPolicy:
    """Pure: the registry and limits are fixed per object (the deployment's
    comes through the context, `SETTINGS_KEY`), the state is the view."""

    def __init__(self, registry: VerificationRegistry = DEFAULT_REGISTRY, limits: AwardConfig = DEFAULT_LIMITS) -> None:
        self.registry = registry
        self.limits = limits

    # ---------------------------------------------------------------- seam

    def parse(self, record: PolicyInput, context: PolicyContext) -> Parsed | Objection:
        configured = context.settings.get(SETTINGS_KEY)
        rules = configured if isinstance(configured, AwardPolicy) else self
        envelope, principal = record.envelope, record.principal
        r = envelope.receipt
        payload = decode_payload(r.kind, envelope.payload)
        if isinstance(payload, Objection):
            return payload
        if isinstance(payload, CallPayload):
            try:
                canonical_principal(payload.awarder)
            except ValueError as exc:
                return _reject(Reason.MALFORMED_AGENT_ID, f"{r.kind} payload: awarder: {exc}")
        for name, stamp in _stamps(payload):
            try:
                parse_timestamp(stamp)
            except ValueError as exc:
                return _reject(Reason.MALFORMED_TIMESTAMP, f"{r.kind} payload: {name}: {exc}")
        call = payload.call if isinstance(payload, BidPayload) else r.task_id
        recomputed = recompute(rules.registry, delivered(payload)) if isinstance(payload, ResultPayload) else None
        return Parsed(envelope, principal, call, payload, recomputed, rules)

    def keys(self, parsed: Parsed) -> Iterable[PolicyKey]:
        call, p = parsed.call, parsed.payload
        if isinstance(p, BidPayload):
            return (rows.call_key(call), rows.bidder_key(call, parsed.principal))
        if isinstance(p, AwardPayload):
            return (rows.call_key(call), *(rows.bid_key(call, b) for b in _read(p)))
        return (rows.call_key(call),)

    def decide(self, parsed: Parsed, view: PolicyView, now_ms: int) -> PolicyOutcome:
        if parsed.rules is not None and parsed.rules is not self:
            return parsed.rules.decide(parsed, view, now_ms)
        raw = view.get(rows.call_key(parsed.call))
        state = None if raw is None else _state(rows.decode_call(raw))
        p = parsed.payload
        if isinstance(p, CallPayload):
            return self._call(parsed, p, state, now_ms)
        if state is None:
            unknown = _reject(Reason.AWARD_UNKNOWN_CALL, f"no call {parsed.call!r} was admitted (or it expired)")
            return self._refused(parsed, p, None, (), unknown) if isinstance(p, AwardPayload) else PolicyOutcome(objection=unknown)
        if isinstance(p, BidPayload):
            return self._bid(parsed, p, state, view, now_ms)
        if isinstance(p, AwardPayload):
            return self._award(parsed, p, state, view, now_ms)
        assert parsed.recomputed is not None  # parse recomputed every result's roots
        return settle(self.registry, parsed.call, parsed.principal, parsed.envelope.receipt.sender, p, state.row, parsed.recomputed)

    # ---------------------------------------------------------------- kinds

    def _too_far(self, what: str, deadline_ms: int, now_ms: int) -> Objection | None:
        horizon = self.limits.deadline_horizon_ms
        if deadline_ms <= now_ms + horizon:
            return None
        return _reject(
            Reason.AWARD_DEADLINE_TOO_FAR,
            f"{what} is {deadline_ms - now_ms} ms ahead of the guard's clock; at most {horizon} (award.deadline_horizon_ms)",
        )

    def _call(self, parsed: Parsed, p: CallPayload, state: _Call | None, now_ms: int) -> PolicyOutcome:
        awarder = canonical_principal(p.awarder)
        if awarder != parsed.principal:
            return PolicyOutcome(
                objection=_reject(
                    Reason.AWARD_WRONG_PARTY, f"the call names awarder {p.awarder!r} but is signed by {parsed.envelope.receipt.sender!r}"
                )
            )
        if state is not None:
            return PolicyOutcome(
                objection=_reject(
                    Reason.AWARD_CALL_EXISTS,
                    f"call {parsed.call!r} was already issued by {state.row.awarder!r}; its rows are kept until {state.row.expires_ms} (epoch ms)",
                )
            )
        deadline = parse_timestamp(p.award_deadline)
        too_far = self._too_far(f"call {parsed.call!r}: award_deadline", deadline, now_ms)
        if too_far is not None:
            return PolicyOutcome(objection=too_far)
        new = CallRow(
            parsed.envelope.receipt.sender, awarder, p.task_class, p.requires_check, deadline, max(deadline, now_ms) + RETENTION_MS
        )
        notes = {"call": parsed.call, "task_class": p.task_class, "requires_check": str(p.requires_check).lower()}
        return PolicyOutcome(writes=(_write(rows.call_key(parsed.call), new, new, now_ms),), annotations=notes)

    def _bid(self, parsed: Parsed, p: BidPayload, state: _Call, view: PolicyView, now_ms: int) -> PolicyOutcome:
        call, row, bid_id = parsed.call, state.row, parsed.envelope.receipt.task_id
        if row.awarded is not None:
            return PolicyOutcome(
                objection=_reject(Reason.AWARD_CLOSED, f"call {call!r} is already awarded (to bid {row.awarded.award.winner!r})")
            )
        if now_ms > row.award_deadline_ms:
            return PolicyOutcome(objection=_reject(Reason.AWARD_CLOSED, f"call {call!r}: its award deadline has passed"))
        deadline = parse_timestamp(p.deadline)
        too_far = self._too_far(f"bid {bid_id!r}: deadline", deadline, now_ms)
        if too_far is not None:
            return PolicyOutcome(objection=too_far)
        if _holds(state, bid_id):
            return PolicyOutcome(objection=_reject(Reason.AWARD_BID_EXISTS, f"call {call!r} already holds a bid {bid_id!r}"))
        legacy_counts = Counter(b.principal for b in state.legacy)
        mine = legacy_counts[parsed.principal] + _count(view, call, parsed.principal)
        if mine >= self.limits.max_bids_per_bidder:
            return PolicyOutcome(
                objection=_reject(
                    Reason.AWARD_BIDDER_LIMIT,
                    (
                        f"{parsed.envelope.receipt.sender!r} already holds {mine} bids on call {call!r}; "
                        f"at most {self.limits.max_bids_per_bidder} (award.max_bids_per_bidder)"
                    ),
                )
            )
        if len(row.bid_ids) >= MAX_BIDS:
            return PolicyOutcome(objection=_reject(Reason.AWARD_TOO_MANY_BIDS, f"call {call!r} already holds {MAX_BIDS} bids"))
        t = p.receipt
        bid = BidRow(
            bid_id, parsed.envelope.receipt.sender, parsed.principal, p.cost, deadline, t.canonicalizer_id, t.commits, t.verifier_manifest
        )
        new = msgspec.structs.replace(row, bid_ids=(*row.bid_ids, rows.bid_digest(bid_id)))
        writes = [_write(rows.call_key(call), new, new, now_ms), _write(rows.bid_key(call, bid_id), bid, new, now_ms)]
        legacy_counts[parsed.principal] = mine + 1
        writes += [_write(rows.bidder_key(call, who), rows.Count(n), new, now_ms) for who, n in sorted(legacy_counts.items())]
        writes += [_write(rows.bid_key(call, b.bid), b, new, now_ms) for b in state.legacy]  # a legacy row's bids, migrated once
        mode = _mode(self.registry, bid, row)
        notes = {"call": call, "bid": bid_id, "canonicalizer_id": t.canonicalizer_id, "awardable": mode[0] if mode else "no"}
        return PolicyOutcome(writes=tuple(writes), annotations=notes)

    def _award(self, parsed: Parsed, p: AwardPayload, state: _Call, view: PolicyView, now_ms: int) -> PolicyOutcome:
        named = {b: found for b in _read(p) if (found := _find(view, parsed.call, b, state)) is not None}
        objection = self._award_objection(parsed, p, state, named, now_ms)
        if objection is not None:
            return self._refused(parsed, p, state.row, tuple(named[b] for b in _notice_order(p) if b in named), objection)
        winner = named[p.winner]
        award = AwardRow(p.winner, p.mode, p.verifier, p.risk_price)
        new = msgspec.structs.replace(
            state.row, awarded=AwardedRow(award, winner), expires_ms=max(state.row.expires_ms, winner.deadline_ms + RETENTION_MS)
        )
        notes = {
            "call": parsed.call,
            "winner": p.winner,
            "bidder": winner.bidder,
            "mode": p.mode,
            "canonicalizer_id": winner.canonicalizer_id,
        }
        if p.mode == "delegated":
            verifier = self.registry.delegation(p.verifier or "", winner.canonicalizer_id)
            assert verifier is not None
            notes |= {"delegated_to": verifier.manifest, "verifier": verifier.agent_id}
        if p.mode == "best_effort":
            notes |= {"downgrade": "best_effort", "risk_price": str(p.risk_price), "cost": str(winner.cost)}
        return PolicyOutcome(writes=(_write(rows.call_key(parsed.call), new, new, now_ms),), annotations=notes)

    def _award_objection(self, parsed: Parsed, p: AwardPayload, state: _Call, named: Mapping[str, BidRow], now_ms: int) -> Objection | None:
        call, row = parsed.call, state.row
        if parsed.principal != row.principal:
            return _reject(
                Reason.AWARD_WRONG_PARTY, f"call {call!r} belongs to awarder {row.awarder!r}, not {parsed.envelope.receipt.sender!r}"
            )
        if row.awarded is not None:
            return _reject(
                Reason.AWARD_ALREADY_AWARDED, f"call {call!r} was already awarded to bid {row.awarded.award.winner!r}: one award per call"
            )
        if now_ms > row.award_deadline_ms:
            return _reject(Reason.AWARD_CLOSED, f"call {call!r}: its award deadline has passed")
        unknown = [b for b in (p.winner, *p.ranked) if not _holds(state, b) or (b == p.winner and b not in named)]
        if unknown:
            return _reject(Reason.AWARD_UNKNOWN_BID, f"call {call!r} has no admitted bid {unknown[0]!r}")
        if p.winner not in p.ranked:
            return _reject(Reason.AWARD_UNRANKED_BID, f"the winner {p.winner!r} is not among the bids the award says it ranked")
        winner = named[p.winner]
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
                return _reject(
                    Reason.AWARD_UNTRUSTED_VERIFIER,
                    f"the award delegates to {p.verifier!r} but the winning bid names verifier manifest {winner.verifier_manifest!r}",
                )
            if self.registry.delegation(p.verifier or "", cid) is None:
                return _reject(
                    Reason.AWARD_UNTRUSTED_VERIFIER,
                    f"verifier manifest {p.verifier!r} is not trust-delegated for canonicalizer {cid!r} here",
                )
        if p.mode == "best_effort":
            if row.requires_check:
                return _reject(Reason.AWARD_CHECK_REQUIRED, f"call {call!r} requires postcondition checking: no best-effort award")
            if not self.registry.tolerates_best_effort(row.task_class):
                return _reject(
                    Reason.AWARD_BEST_EFFORT_NOT_TOLERATED, f"task class {row.task_class!r} does not tolerate best-effort awards here"
                )
        return None

    def _refused(
        self, parsed: Parsed, p: AwardPayload, row: CallRow | None, named: tuple[BidRow, ...], objection: Objection
    ) -> PolicyOutcome:
        """A refused award: its reject-and-rebid notice to the awarder, listing
        which of the bids it ranked first (NOTICE_BIDS), then its winner, could be awarded here."""
        awardable = () if row is None else tuple(self._awardable(named, row))
        notice = RebidNotice(
            call=parsed.call,
            awarder=row.awarder if row is not None else parsed.envelope.receipt.sender,
            winner=p.winner,
            reason=str(objection.reason),
            detail=objection.detail,
            awardable=awardable,
        )
        notes = {"call": parsed.call, "winner": p.winner, "mode": p.mode, "awardable": ",".join(a.bid for a in awardable)}
        return PolicyOutcome(
            objection=objection,
            annotations=notes,
            notices=(Notice(route=REBID_ROUTE, key=parsed.call.encode(), value=notice_encode(notice)),),
        )

    def _awardable(self, bids: Iterable[BidRow], row: CallRow) -> Iterable[Awardable]:
        for bid in bids:
            mode = _mode(self.registry, bid, row)
            if mode is not None:
                yield Awardable(
                    bid=bid.bid,
                    bidder=bid.bidder,
                    cost=bid.cost,
                    mode=mode[0],
                    canonicalizer_id=bid.canonicalizer_id,
                    verifier_manifest=mode[1],
                )


def _mode(registry: VerificationRegistry, bid: BidRow, row: CallRow) -> tuple[str, str | None] | None:
    return registry.mode(bid.canonicalizer_id, bid.verifier_manifest, requires_check=row.requires_check, task_class=row.task_class)


def _state(decoded: CallRow | Legacy) -> _Call:
    return _Call(decoded.row, decoded.bids, True) if isinstance(decoded, Legacy) else _Call(decoded)


def _read(p: AwardPayload) -> Iterable[str]:
    """The bid rows an award reads: its winner and its first NOTICE_BIDS ranked bids."""
    return dict.fromkeys((p.winner, *p.ranked[:NOTICE_BIDS]))


def _notice_order(p: AwardPayload) -> Iterable[str]:
    return dict.fromkeys((*p.ranked[:NOTICE_BIDS], p.winner))


def _holds(state: _Call, bid: str) -> bool:
    return state.row.holds(bid)  # a legacy row's digests are computed from its inline bids (rows.decode_call)


def _find(view: PolicyView, call: str, bid: str, state: _Call) -> BidRow | None:
    legacy = next((b for b in state.legacy if b.bid == bid), None)
    if legacy is not None or state.is_legacy:
        return legacy  # a legacy call's bids are all inline until it is migrated
    raw = view.get(rows.bid_key(call, bid))
    return None if raw is None else rows.decode_bid(raw)


def _count(view: PolicyView, call: str, principal: str) -> int:
    raw = view.get(rows.bidder_key(call, principal))
    return 0 if raw is None else rows.decode_count(raw)


def _stamps(p: Payload) -> tuple[tuple[str, str], ...]:
    if isinstance(p, CallPayload):
        return (("award_deadline", p.award_deadline),)
    if isinstance(p, BidPayload):
        return (("deadline", p.deadline),)
    return ()


def _write(key: PolicyKey, value: CallRow | BidRow | rows.Count, call: CallRow, now_ms: int) -> PolicyWrite:
    """Every row of a call expires with the call row (its `expires_ms`)."""
    return PolicyWrite(key, rows.encode(value), ttl_ms=max(call.expires_ms - now_ms, 1))


POLICY: Final = AwardPolicy()
