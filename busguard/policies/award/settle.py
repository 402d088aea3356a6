"""Settling a `cnet.result` (docs/protocol.md 15.4), split in two so the
expensive half never runs inside the batch's state transaction.

`recompute` runs in the policy's parse step, before the transaction, and
reads no state: it computes the delivered bytes' root under every
canonicalizer this deployment holds (which one the winner committed under
is in the state, so all of them) and their SHA-256. `settle` runs in
decide, inside the transaction: it only looks up the award and compares
strings (and for a delegated award checks one Ed25519 signature), so a
resent wrong-root result holds the store's lock for microseconds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from types import MappingProxyType

import msgspec

from busguard.policies.award.canonicalizers import MalformedOutput
from busguard.policies.award.registry import VerificationRegistry
from busguard.policies.award.rows import AwardRow, BidRow, CallRow
from busguard.policies.award.wire import ResultPayload, attestation_input
from busguard.policies.seam import Objection, PolicyOutcome
from busguard.protocol.envelope import b64url_decode_strict
from busguard.protocol.reasons import Outcome, Reason
from busguard.protocol.signing import verify_signature


class Recomputed(msgspec.Struct, frozen=True):
    """A result's delivered bytes as parse saw them: the root under each
    canonicalizer held here (or the problem it found) and their SHA-256."""

    roots: Mapping[str, str | MalformedOutput]
    sha256: str


def recompute(registry: VerificationRegistry, data: bytes) -> Recomputed:
    roots: dict[str, str | MalformedOutput] = {}
    for cid, canonicalizer in registry.canonicalizers.items():
        try:
            roots[cid] = canonicalizer.root(data)
        except MalformedOutput as exc:
            roots[cid] = exc
    return Recomputed(MappingProxyType(roots), hashlib.sha256(data).hexdigest())


def _reject(reason: Reason, detail: str) -> PolicyOutcome:
    return PolicyOutcome(objection=Objection(Outcome.REJECT, reason, detail))


def _escalate(reason: Reason, detail: str, notes: dict[str, str]) -> PolicyOutcome:
    return PolicyOutcome(objection=Objection(Outcome.ESCALATE, reason, detail), annotations={**notes, "settlement": "escalated"})


def settle(
    registry: VerificationRegistry, call: str, principal: str, sender: str, p: ResultPayload, row: CallRow, recomputed: Recomputed
) -> PolicyOutcome:
    """The result's decision against its call's row (`principal`: the sender's canonical principal)."""
    if row.awarded is None:
        return _reject(Reason.SETTLEMENT_NO_AWARD, f"call {call!r} has no admitted award to settle")
    award, winner = row.awarded.award, row.awarded.bid
    if principal != winner.principal:
        return _reject(Reason.AWARD_WRONG_PARTY, f"call {call!r} was awarded to {winner.bidder!r}, not {sender!r}")
    if (p.output if winner.commits == "output" else p.trace) is None:
        return _reject(
            Reason.MALFORMED_FIELD,
            f"cnet.result payload: the winning bid commits its root over its {winner.commits}; send {winner.commits}",
        )
    notes = {"call": call, "winner": award.winner, "mode": award.mode, "attributed_to": winner.bidder, "committed_root": p.state_root}
    if award.mode == "best_effort":
        return PolicyOutcome(annotations={**notes, "settlement": "unverified", "verification": "unverified"})
    if award.mode == "delegated":
        return _delegated(registry, call, p, winner, award, recomputed.sha256, notes)
    cid = winner.canonicalizer_id
    root = recomputed.roots.get(cid) if registry.recompute(cid) is not None else None
    if root is None:
        return _escalate(Reason.SETTLEMENT_UNRECOMPUTABLE, f"canonicalizer {cid!r} is no longer registered here", notes)
    if isinstance(root, MalformedOutput):
        return _escalate(
            Reason.SETTLEMENT_UNRECOMPUTABLE,
            f"{winner.bidder!r} delivered {winner.commits} {cid} cannot read: {root}",
            {**notes, "problem": root.problem},
        )
    if root != p.state_root:
        detail = f"{winner.bidder!r} committed state_root {p.state_root} but {winner.commits} recomputes under {cid} to {root}"
        return _escalate(Reason.SETTLEMENT_MISMATCH, detail, {**notes, "recomputed_root": root})
    return PolicyOutcome(annotations={**notes, "recomputed_root": root, "settlement": "settled", "verification": "recomputed"})


def _delegated(
    registry: VerificationRegistry, call: str, p: ResultPayload, winner: BidRow, award: AwardRow, sha256: str, notes: dict[str, str]
) -> PolicyOutcome:
    verifier = registry.delegation(award.verifier or "", winner.canonicalizer_id)
    if verifier is None:
        return _escalate(
            Reason.SETTLEMENT_BAD_ATTESTATION, f"verifier manifest {award.verifier!r} is no longer trust-delegated here", notes
        )
    notes = {**notes, "verifier": verifier.agent_id}
    if p.attestation is None:
        return _escalate(
            Reason.SETTLEMENT_BAD_ATTESTATION,
            f"a delegated award settles only on an attestation by {verifier.agent_id!r}; none sent",
            notes,
        )
    fields = {"verifier_manifest": verifier.manifest, "call": call, "bid": winner.bid, "canonicalizer_id": winner.canonicalizer_id}
    message = attestation_input(**fields, state_root=p.state_root, output_sha256=sha256)
    if message is None or not verify_signature(verifier.public_key, message, b64url_decode_strict(p.attestation, 64)):
        return _escalate(
            Reason.SETTLEMENT_BAD_ATTESTATION,
            f"the attestation does not verify with {verifier.agent_id!r}'s registered key over this call, bid, root and output",
            notes,
        )
    return PolicyOutcome(annotations={**notes, "settlement": "settled", "verification": "delegated"})
