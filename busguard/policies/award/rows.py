"""The award policy's state rows (docs/protocol.md, 15.5): what is kept per call, per bid and per bidder, and for how long.

Three kinds of row, each small and each written only when its own content
changes, so no record rewrites a row that grows with other parties' input:

- the call row, key (`cnet`, call id): the call, a 16-byte digest of each
  admitted bid's id (so an award checks every bid it ranks, and a bid its
  own uniqueness, without reading other parties' rows: one row lock, not
  65), a fixed expiry (`expires_ms`) and, once admitted, its award with a
  copy of the winning bid (so a result needs this one row);
- a bid row, key (`cnet.bid`, <call>/<bid>): one admitted bid;
- a bidder row, key (`cnet.bidder`, <call>/<bidder principal>): how many
  bids that bidder holds on the call (the per-bidder limit).

The composite keys are length-prefixed (`<len(call)>:<call><rest>`), so no
pair of (call, bid) spellings share a key. Every row of a call expires at
or before the call row's `expires_ms`, which is fixed when the call is
admitted and only moved once, by the award, to the winner's delivery
deadline plus the retention; every deadline is at most the configured
horizon ahead of the guard's clock, so no sender picks a row's lifetime.

Rows written before this layout (one row per call holding every bid
inline) are read through `LegacyCallRow` and migrated by the first bid that
writes the call (policy.py).
"""

from __future__ import annotations

import hashlib
from typing import Final

import msgspec

from busguard.policies.seam import PolicyKey

NAMESPACE: Final = "cnet"
BID_NAMESPACE: Final = "cnet.bid"
BIDDER_NAMESPACE: Final = "cnet.bidder"
NAMESPACES: Final = (NAMESPACE, BID_NAMESPACE, BIDDER_NAMESPACE)

#: A call's rows are kept this long after the latest deadline they serve
#: (the award deadline; once awarded, the winner's delivery deadline), so a
#: late bid is refused as closed and a late result still finds its award.
RETENTION_MS: Final = 7 * 86_400_000


class BidRow(msgspec.Struct, frozen=True, array_like=True):
    bid: str
    bidder: str  # the bidder's agent id as it signed
    principal: str
    cost: int
    deadline_ms: int
    canonicalizer_id: str
    commits: str
    verifier_manifest: str | None


class AwardRow(msgspec.Struct, frozen=True, array_like=True):
    winner: str
    mode: str
    verifier: str | None
    risk_price: int | None


class AwardedRow(msgspec.Struct, frozen=True, array_like=True):
    """The admitted award and the winning bid it settles against."""

    award: AwardRow
    bid: BidRow


class CallRow(msgspec.Struct, frozen=True, array_like=True, tag=2):
    """Key (`cnet`, call id). Encoded as [2, ...]: a legacy row starts with a string."""

    awarder: str
    principal: str
    task_class: str
    requires_check: bool
    award_deadline_ms: int
    expires_ms: int
    bid_ids: tuple[bytes, ...] = ()  # bid_digest of each admitted bid, in admission order
    awarded: AwardedRow | None = None

    def holds(self, bid: str) -> bool:
        return bid_digest(bid) in self.bid_ids


class LegacyCallRow(msgspec.Struct, frozen=True, array_like=True):
    """The layout before per-bid rows: the call, every bid inline, the award."""

    awarder: str
    principal: str
    task_class: str
    requires_check: bool
    award_deadline_ms: int
    bids: tuple[BidRow, ...] = ()
    award: AwardRow | None = None


class Legacy(msgspec.Struct, frozen=True):
    """A legacy row read as the new layout plus the bids it held inline."""

    row: CallRow
    bids: tuple[BidRow, ...]


class Count(msgspec.Struct, frozen=True, array_like=True):
    """A bidder row: how many bids this bidder holds on the call."""

    bids: int


_encode: Final = msgspec.msgpack.Encoder().encode
_call: Final = msgspec.msgpack.Decoder(CallRow)
_legacy: Final = msgspec.msgpack.Decoder(LegacyCallRow)
_bid: Final = msgspec.msgpack.Decoder(BidRow)
_count: Final = msgspec.msgpack.Decoder(Count)


def encode(row: CallRow | BidRow | Count) -> bytes:
    return _encode(row)


def bid_digest(bid: str) -> bytes:
    """16 bytes of SHA-256: a second bid id with another's digest is a 2^128 search."""
    return hashlib.sha256(bid.encode("utf-8", "surrogatepass")).digest()[:16]


def call_key(call: str) -> PolicyKey:
    return (NAMESPACE, call)


def bid_key(call: str, bid: str) -> PolicyKey:
    return (BID_NAMESPACE, f"{len(call)}:{call}{bid}")


def bidder_key(call: str, principal: str) -> PolicyKey:
    return (BIDDER_NAMESPACE, f"{len(call)}:{call}{principal}")


def decode_call(raw: bytes) -> CallRow | Legacy:
    """A call row in either layout (the store wrote it, so it decodes)."""
    try:
        return _call.decode(raw)
    except msgspec.ValidationError:
        old = _legacy.decode(raw)
    awarded = None
    if old.award is not None:
        winner = next(b for b in old.bids if b.bid == old.award.winner)
        awarded = AwardedRow(old.award, winner)
    deadlines = (old.award_deadline_ms, *([awarded.bid.deadline_ms] if awarded else [b.deadline_ms for b in old.bids]))
    expires = max(deadlines) + RETENTION_MS  # the old rule; the stored TTL still bounds the row itself
    row = CallRow(
        old.awarder,
        old.principal,
        old.task_class,
        old.requires_check,
        old.award_deadline_ms,
        expires,
        tuple(bid_digest(b.bid) for b in old.bids),
        awarded,
    )
    return Legacy(row, old.bids)


def decode_bid(raw: bytes) -> BidRow:
    return _bid.decode(raw)


def decode_count(raw: bytes) -> int:
    return _count.decode(raw).bids
