"""INK replay protection: nonce grammar, freshness window, ``checkReplay``.

Why stateless: INK's ``checkReplay`` decides whether one (timestamp, nonce)
pair is acceptable given a caller-supplied set of seen nonces.  The caller
owns the store, its scope key (the canonical principal, never the raw
``from``), its TTL and its atomic check-and-record; keeping this module pure
means it can be tested exhaustively against the conformance vectors and
cannot silently choose a scope for the caller.

Two INK rules this primitive cannot enforce, and the caller must:

* record a nonce only *after* the signature verifies, so forged traffic
  cannot pollute the store;
* retain nonces for ``DEFAULT_NONCE_RETENTION_MS`` (longer than the
  ``max_age_ms + max_future_ms`` acceptance window), so a nonce is still
  tracked after its timestamp has become unacceptable.

Both bounds of the window are inclusive, to the millisecond, as in INK.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Final

import msgspec

from busguard.protocol.reasons import Reason
from busguard.protocol.timestamps import parse_timestamp

__all__ = [
    "DEFAULT_MAX_AGE_MS",
    "DEFAULT_MAX_FUTURE_MS",
    "DEFAULT_NONCE_RETENTION_MS",
    "REASON_MALFORMED_NONCE",
    "REASON_MALFORMED_TIMESTAMP",
    "REASON_NONCE_REPLAY",
    "REASON_TIMESTAMP_EXPIRED",
    "REASON_TIMESTAMP_TOO_FAR_FUTURE",
    "ReplayVerdict",
    "check_freshness",
    "check_replay",
    "check_replay_at_ms",
    "is_valid_nonce",
]

#: Reject messages older than 5 minutes (INK rule 1).
DEFAULT_MAX_AGE_MS: Final = 300_000
#: Tolerate sender clocks up to 30 seconds fast (INK rule 2).
DEFAULT_MAX_FUTURE_MS: Final = 30_000
#: Keep nonces 10 minutes: longer than the acceptance window, so a nonce is
#: never forgotten while a message carrying it could still be accepted.
DEFAULT_NONCE_RETENTION_MS: Final = 600_000

#: INK's reason strings are busguard's own codes (protocol.reasons.Reason,
#: a StrEnum: each compares and encodes as the plain string).
REASON_MALFORMED_NONCE: Final = Reason.MALFORMED_NONCE
REASON_MALFORMED_TIMESTAMP: Final = Reason.MALFORMED_TIMESTAMP
REASON_TIMESTAMP_EXPIRED: Final = Reason.TIMESTAMP_EXPIRED
REASON_TIMESTAMP_TOO_FAR_FUTURE: Final = Reason.TIMESTAMP_TOO_FAR_FUTURE
REASON_NONCE_REPLAY: Final = Reason.NONCE_REPLAY

# Explicit ASCII classes: \w would also admit Unicode letters and digits,
# letting visually identical nonces be distinct store keys (and vice versa
# after any normalisation downstream).
_NONCE = re.compile(r"[A-Za-z0-9_-]{16,256}")


def is_valid_nonce(nonce: str) -> bool:
    """True iff ``nonce`` is 16-256 base64url characters (no padding).

    The lower bound keeps nonces unguessable enough to be single-use; the
    upper bound caps per-entry memory in the nonce store.
    """
    if not isinstance(nonce, str):
        return False
    return _NONCE.fullmatch(nonce) is not None


def check_freshness(
    issued_at_ms: int,
    now_ms: int,
    max_age_ms: int = DEFAULT_MAX_AGE_MS,
    max_future_ms: int = DEFAULT_MAX_FUTURE_MS,
) -> Reason | None:
    """Return a reason code if ``issued_at_ms`` is outside the window, else None.
    The one implementation: admission's precheck calls it too.

    Exactly ``max_age_ms`` old is still fresh, and exactly ``max_future_ms``
    ahead is still accepted (INK bounds are inclusive).  Negative limits make
    every message fail, i.e. misconfiguration fails closed.
    """
    if now_ms - issued_at_ms > max_age_ms:
        return REASON_TIMESTAMP_EXPIRED
    if issued_at_ms - now_ms > max_future_ms:
        return REASON_TIMESTAMP_TOO_FAR_FUTURE
    return None


class ReplayVerdict(msgspec.Struct, frozen=True):
    """Outcome of ``check_replay``: ``ok`` or the first rule that failed."""

    ok: bool
    reason: str | None = None


_ACCEPT: Final = ReplayVerdict(ok=True)
_MALFORMED_NONCE: Final = ReplayVerdict(ok=False, reason=REASON_MALFORMED_NONCE)
_MALFORMED_TIMESTAMP: Final = ReplayVerdict(ok=False, reason=REASON_MALFORMED_TIMESTAMP)
_EXPIRED: Final = ReplayVerdict(ok=False, reason=REASON_TIMESTAMP_EXPIRED)
_TOO_FAR_FUTURE: Final = ReplayVerdict(ok=False, reason=REASON_TIMESTAMP_TOO_FAR_FUTURE)
_REPLAY: Final = ReplayVerdict(ok=False, reason=REASON_NONCE_REPLAY)
_REJECTIONS: Final = {
    REASON_TIMESTAMP_EXPIRED: _EXPIRED,
    REASON_TIMESTAMP_TOO_FAR_FUTURE: _TOO_FAR_FUTURE,
}


def check_replay_at_ms(
    message_timestamp: str,
    nonce: str,
    seen: Collection[str],
    now_ms: int,
    *,
    max_age_ms: int = DEFAULT_MAX_AGE_MS,
    max_future_ms: int = DEFAULT_MAX_FUTURE_MS,
) -> ReplayVerdict:
    """``check_replay`` with the receiver clock already in epoch ms.

    The form the hot path wants: the receiver reads its clock as an integer,
    so formatting it to a string only to parse it again would be waste.
    """
    if not is_valid_nonce(nonce):
        return _MALFORMED_NONCE
    try:
        issued_ms = parse_timestamp(message_timestamp)
    except (ValueError, TypeError):
        return _MALFORMED_TIMESTAMP
    reason = check_freshness(issued_ms, now_ms, max_age_ms, max_future_ms)
    if reason is not None:
        return _REJECTIONS[reason]
    # Membership last: the cheap, attacker-independent checks above must not
    # be skipped, and a stale duplicate is reported as stale (the more
    # fundamental failure) rather than as a replay.
    if nonce in seen:
        return _REPLAY
    return _ACCEPT


def check_replay(
    message_timestamp: str,
    nonce: str,
    seen: Collection[str],
    now: str,
    *,
    max_age_ms: int = DEFAULT_MAX_AGE_MS,
    max_future_ms: int = DEFAULT_MAX_FUTURE_MS,
) -> ReplayVerdict:
    """INK ``checkReplay``: is this (timestamp, nonce) pair acceptable now?

    Checks, in order: nonce grammar (``malformed_nonce``), message timestamp
    grammar (``malformed_timestamp``), freshness window
    (``timestamp_expired`` / ``timestamp_too_far_future``), then
    ``nonce in seen`` (``nonce_replay``).  Does not record the nonce.

    ``now`` is the receiver's own clock, so a malformed ``now`` is a caller
    bug, not a property of the message: it raises ``ValueError`` (always,
    before any message check) instead of being reported as a rejection.
    """
    try:
        now_ms = parse_timestamp(now)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"receiver clock 'now' is not a valid timestamp: {exc}") from exc
    return check_replay_at_ms(
        message_timestamp,
        nonce,
        seen,
        now_ms,
        max_age_ms=max_age_ms,
        max_future_ms=max_future_ms,
    )
