"""A compromise notice's lifecycle: when it counts, its clearance, its row.

Pure (no store, no clock of its own): the policies in policy.py (the
notice, the handoff) and clearance.py (the clearance) read and write rows
through the seam and call these.

A notice counts for a decision (a handoff, or a clearance by an issuer the
notice covers) at two instants: the receipt's `issued_at` and the guard's
clock. Whoever holds a compromised key chooses `issued_at` (freshness bounds
it to `[now - max_age_ms, now + max_future_ms]`, not more), so no choice of
it may take a decision out from under a notice:

- a notice has *begun* when `compromised_from` <= the LATER of the two: a
  receipt backdated to before the compromise is still caught by the clock;
- it has *ended* (expired, or cleared) only when the EARLIER of the two is
  at or past `expires_at` / the clearance's `cleared_at`: a receipt dated
  forward past the end is still caught by the clock, and one backdated to
  before the end is still under the notice.

So a notice is in force on the whole span between the two instants if it
overlaps that span anywhere; an attacker gains nothing by moving `issued_at`.

A clearance is stored on the notice's row entry (`cleared_at`, `cleared_by`):
a handoff decided before the clearance was admitted read the row without it,
so "decided after the clearance" is the guard's decision order (the batch
order within a batch), and the instant test above then applies to
`cleared_at`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Final

import msgspec

from busguard.policies.compromise.message import (
    CompromiseKind,
    CompromiseNotice,
)
from busguard.policies.seam import PolicyKey, PolicyView, policy_key
from busguard.protocol.identity import canonical_principal
from busguard.protocol.timestamps import parse_timestamp

#: Notices kept under one row; past it, the ones that matter least drop
#: first: cleared, then expired, then not about credentials, then latest `compromised_from`.
MAX_NOTICES_PER_ROW: Final = 64


class NoticeEntry(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One notice as its row keeps it.

    `sha256` is the notice's bytes' hash and `issuer_key_id` the issuer's key
    that signed its receipt: a clearance must name the one and be signed by
    the other. `row_expires_ms` is when the row expires, as the notice
    policy last wrote it (every entry of a row carries the same value): a
    clearance rewrites the row with exactly the time left, so clearing never
    makes a row live longer. A notice kept before clearances existed has none
    of the three: it cannot be cleared and lasts its retention. `cleared_at` /
    `cleared_by` (the clearance's receipt id) are set once, by the first
    admitted clearance."""

    notice: CompromiseNotice
    sha256: str = ""
    issuer_key_id: str | None = None
    row_expires_ms: int | None = None
    cleared_at: str | None = None
    cleared_by: str | None = None


class Standing(enum.StrEnum):
    """A notice for one decision: not begun, in force, or ended (and how)."""

    NOT_YET = "not_yet"
    IN_FORCE = "in_force"
    EXPIRED = "expired"
    CLEARED = "cleared"


def standing(entry: NoticeEntry, receipt_ms: int, now_ms: int) -> Standing:
    """The notice for a decision whose receipt says `receipt_ms`, decided at
    the guard's `now_ms` (module docstring: the later instant for the start,
    the earlier for either end). A cleared notice is reported as cleared
    even when it has also expired: the clearance is the issuer's word."""
    late, early = max(receipt_ms, now_ms), min(receipt_ms, now_ms)
    notice = entry.notice
    if parse_timestamp(notice.compromised_from) > late:
        return Standing.NOT_YET
    if entry.cleared_at is not None and early >= parse_timestamp(entry.cleared_at):
        return Standing.CLEARED
    if notice.expires_at is not None and early >= parse_timestamp(notice.expires_at):
        return Standing.EXPIRED
    return Standing.IN_FORCE


def as_entry(notice: CompromiseNotice | NoticeEntry) -> NoticeEntry:
    return notice if isinstance(notice, NoticeEntry) else NoticeEntry(notice=notice)


# ------------------------------------------------------------------ the row

NAMESPACE: Final = "compromise"


def _row(*parts: str) -> PolicyKey:
    return policy_key(NAMESPACE, *parts)


def agent_row(subject: str) -> PolicyKey:
    return _row("agent", subject)


def session_row(subject: str, session_id: str) -> PolicyKey:
    return _row("session", subject, session_id)


def key_row(subject: str, key_id: str) -> PolicyKey:
    return _row("key", subject, key_id)


def row_for(subject: str, session_id: str | None, subject_key_id: str | None) -> PolicyKey:
    """The one row a notice (or its clearance) about canonical `subject` names."""
    if session_id is not None:
        return session_row(subject, session_id)
    if subject_key_id is not None:
        return key_row(subject, subject_key_id)
    return agent_row(subject)


def notice_row(notice: CompromiseNotice) -> PolicyKey:
    return row_for(canonical_principal(notice.subject), notice.session_id, notice.subject_key_id)


def entries_at(view: PolicyView, row: PolicyKey) -> tuple[NoticeEntry, ...]:
    """The entries a row holds (none when absent or expired)."""
    raw = view.get(row)
    return () if raw is None else decode_row(raw)  # written by the notice and clearance policies only, after their checks


def covers_label(subject_session: str | None, subject_key: str | None) -> str:
    return "session" if subject_session is not None else "key" if subject_key is not None else "agent"


_row_decoder: Final = msgspec.json.Decoder(tuple[NoticeEntry, ...])
_legacy_decoder: Final = msgspec.json.Decoder(tuple[CompromiseNotice, ...])


def decode_row(raw: bytes) -> tuple[NoticeEntry, ...]:
    """A row as written by the notice or clearance policy, after their checks.

    Rows written before clearances existed hold bare notices; they read as
    entries without a hash or clearance."""
    try:
        return _row_decoder.decode(raw)
    except msgspec.ValidationError:
        return tuple(NoticeEntry(notice=n) for n in _legacy_decoder.decode(raw))


def encode_row(entries: Iterable[NoticeEntry]) -> bytes:
    return msgspec.json.encode(tuple(sorted(entries, key=lambda e: e.notice.notice_id)))


def capped(entries: Iterable[NoticeEntry], now_ms: int) -> list[NoticeEntry]:
    """At most MAX_NOTICES_PER_ROW entries, dropping first the ones that
    matter least: cleared, then expired at `now_ms`, then those not listing
    `compromised_credentials`, then the latest `compromised_from`."""

    def weight(e: NoticeEntry) -> tuple[bool, bool, bool, int, str]:
        n = e.notice
        expired = n.expires_at is not None and parse_timestamp(n.expires_at) <= now_ms
        credentials = CompromiseKind.COMPROMISED_CREDENTIALS in n.detected
        return (e.cleared_at is not None, expired, not credentials, parse_timestamp(n.compromised_from), n.notice_id)

    return sorted(entries, key=weight)[:MAX_NOTICES_PER_ROW]
