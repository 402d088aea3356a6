"""Strict RFC 3339 timestamps as used by INK, to and from epoch milliseconds.

Why strict: freshness and replay decisions compare these values, so every
receiver must read a given string as the same instant or refuse it.  Lenient
ISO 8601 parsers disagree on lowercase designators, comma fractions, missing
zones, leap seconds and two-digit years; each disagreement is a way to make
one hop accept what another rejects.  We accept exactly the INK grammar::

    YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)

Why hand-rolled: this runs once per record on the admission hot path, and
``datetime.strptime`` is several times slower than slicing, small
precompiled patterns, memoised components and integer day arithmetic (see
the hot-path note below).  ``datetime`` also cannot represent year 0000,
which the grammar allows.
"""

from __future__ import annotations

import functools
import re

__all__ = [
    "MAX_TIMESTAMP_CHARS",
    "MAX_EPOCH_MS",
    "MIN_EPOCH_MS",
    "format_timestamp",
    "parse_timestamp",
]

#: INK refuses longer inputs before parsing; bounding the input also bounds
#: the regex work an attacker can cause with a huge fraction.
MAX_TIMESTAMP_CHARS = 64

# Patterns use [0-9] rather than \d: in a str pattern \d also matches
# non-ASCII digits (e.g. Arabic-Indic), which int() would then convert.

# Days in each month of a non-leap year, index 1..12.
_MONTH_DAYS = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)

_MS_PER_DAY = 86_400_000


def _days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 for a proleptic Gregorian date.

    Howard Hinnant's ``days_from_civil``; Python's floor division makes the
    negative-era case work without the C++ adjustment.
    """
    if m <= 2:
        y -= 1
        mp = m + 9
    else:
        mp = m - 3
    era = y // 400
    yoe = y - era * 400
    doy = (153 * mp + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _civil_from_days(z: int) -> tuple[int, int, int]:
    """Inverse of ``_days_from_civil`` (Hinnant's ``civil_from_days``)."""
    z += 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    y = yoe + era * 400 + (1 if m <= 2 else 0)
    return y, m, d


#: Range of instants ``format_timestamp`` can spell with a four-digit year.
MIN_EPOCH_MS = _days_from_civil(0, 1, 1) * _MS_PER_DAY
MAX_EPOCH_MS = _days_from_civil(10000, 1, 1) * _MS_PER_DAY - 1


def _reject(ts: str, why: str) -> ValueError:
    shown = repr(ts) if len(ts) <= MAX_TIMESTAMP_CHARS else f"{ts[:MAX_TIMESTAMP_CHARS]!r}..."
    return ValueError(
        f"invalid timestamp {shown}: {why}; expected RFC 3339 "
        "YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM) with uppercase T/Z, "
        f"at most {MAX_TIMESTAMP_CHARS} characters"
    )


# Hot-path design.  Whole timestamps are essentially unique, so caching
# parse_timestamp itself would only thrash.  But its *components* repeat:
# the whole second (YYYY-MM-DDTHH:MM:SS) is shared by every record of that
# second, and the tail is almost always one of a thousand ".mmmZ" spellings.
# So the parse is: slice, one memoised lookup, one dict lookup.  Other
# tails (numeric offsets, other fraction lengths) take _slow_tail_ms, still
# regex-free for the fraction; the full tail regex and _explain run only on
# the error path.
# The memoised component fully validates its own slice (ASCII digits via
# [0-9], field ranges), so a cache hit is as strict as a fresh parse.  The
# caches are bounded: novel values chosen by an adversary cost a miss (about
# the speed of an uncached parse), never unbounded memory.  Components return
# None for invalid input rather than raising, so nothing invalid is cached as
# an exception path and error messages are built outside the cache.

_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_TIME = re.compile(r"[0-9]{2}:[0-9]{2}:[0-9]{2}")
_TAIL = re.compile(r"(?:\.([0-9]+))?(Z|[+-][0-9]{2}:[0-9]{2})")

#: Precomputed tails -> milliseconds: "Z", the zero offsets and ".000Z".."999Z".
_FAST_TAILS: dict[str, int] = {"Z": 0, "+00:00": 0, "-00:00": 0}
_FAST_TAILS.update({f".{i:03d}Z": i for i in range(1000)})


def _is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def _days_in_month(year: int, month: int) -> int:
    if month == 2 and _is_leap(year):
        return 29
    return _MONTH_DAYS[month]


def _date_days(date: str) -> int | None:
    """``YYYY-MM-DD`` -> days since the epoch, or None if malformed/out of range."""
    if _DATE.fullmatch(date) is None:
        return None
    year = int(date[0:4])
    month = int(date[5:7])
    day = int(date[8:10])
    if not 1 <= month <= 12 or not 1 <= day <= _days_in_month(year, month):
        return None
    return _days_from_civil(year, month, day)


def _time_seconds(hms: str) -> int | None:
    """``HH:MM:SS`` -> seconds into the day, or None (no leap second 60)."""
    if _TIME.fullmatch(hms) is None:
        return None
    hour = int(hms[0:2])
    minute = int(hms[3:5])
    second = int(hms[6:8])
    if hour > 23 or minute > 59 or second > 59:
        return None
    return hour * 3600 + minute * 60 + second


@functools.lru_cache(maxsize=4096)
def _epoch_seconds(head: str) -> int | None:
    """``YYYY-MM-DDTHH:MM:SS`` -> seconds since the epoch, or None.

    Cached whole: a stream's timestamps share a handful of seconds, so one
    probe replaces the date and time parses on almost every record."""
    days = _date_days(head[:10])
    secs = _time_seconds(head[11:19])
    if days is None or secs is None or head[10:11] != "T":
        return None
    return days * 86400 + secs


_ZONE = re.compile(r"[+-][0-9]{2}:[0-9]{2}")

#: Every fraction of at most three digits -> milliseconds (".5" is 500,
#: ".05" is 50, ".005" is 5), plus "" for no fraction.
_FAST_FRACS: dict[str, int] = {"": 0}
_FAST_FRACS.update({f".{i:01d}": i * 100 for i in range(10)})
_FAST_FRACS.update({f".{i:02d}": i * 10 for i in range(100)})
_FAST_FRACS.update({f".{i:03d}": i for i in range(1000)})


@functools.lru_cache(maxsize=1024)
def _zone_ms(zone: str) -> int | None:
    """``+HH:MM``/``-HH:MM`` -> ms to add to local time to get UTC, or None."""
    if _ZONE.fullmatch(zone) is None:
        return None
    off_h = int(zone[1:3])
    off_m = int(zone[4:6])
    if off_h > 23 or off_m > 59:
        return None
    offset_ms = (off_h * 3600 + off_m * 60) * 1000
    # Local time = UTC + offset, so UTC = local - offset.
    return -offset_ms if zone[0] == "+" else offset_ms


def _slow_tail_ms(tail: str) -> int | None:
    """``[.fraction](Z|+HH:MM|-HH:MM)`` -> ms to add to local time, or None.

    Covers every tail not in ``_FAST_TAILS``: numeric offsets (what
    ``datetime.isoformat()`` emits) and fractions other than 3 digits.
    """
    if tail[-1:] == "Z":
        frac = tail[:-1]
        zone_ms = 0
    else:
        zone = _zone_ms(tail[-6:])
        if zone is None:
            return None
        frac = tail[:-6]
        zone_ms = zone
    ms = _FAST_FRACS.get(frac)
    if ms is None:
        # More than three digits: the first three give the milliseconds
        # (truncation = floor), the rest must merely be digits.  isascii() and
        # isdigit() together admit exactly [0-9]+ (isdigit alone also accepts
        # superscripts and other scripts' digits).
        ms = _FAST_FRACS.get(frac[:4])
        rest = frac[4:]
        if ms is None or not rest.isascii() or not rest.isdigit():
            return None
    return ms + zone_ms


def _explain(ts: str) -> str:
    """Say which rule ``ts`` broke; only called on the error path."""
    if _DATE.fullmatch(ts[:10]) is None or ts[10:11] != "T" or _TIME.fullmatch(ts[11:19]) is None:
        return "does not match the grammar"
    tail_match = _TAIL.fullmatch(ts[19:])
    if tail_match is None:
        return "does not match the grammar"
    year, month = int(ts[0:4]), int(ts[5:7])
    if not 1 <= month <= 12:
        return "month must be 01-12"
    if not 1 <= int(ts[8:10]) <= _days_in_month(year, month):
        return f"day must be 01-{_days_in_month(year, month):02d} for {ts[:7]}"
    if int(ts[11:13]) > 23:
        return "hour must be 00-23"
    if int(ts[14:16]) > 59:
        return "minute must be 00-59"
    if int(ts[17:19]) > 59:
        return "second must be 00-59 (leap seconds are not accepted)"
    zone = tail_match.group(2)
    if int(zone[1:3]) > 23:
        return "offset hour must be 00-23"
    return "offset minute must be 00-59"


def parse_timestamp(ts: str) -> int:
    """Parse a strict RFC 3339 timestamp to epoch milliseconds.

    Sub-millisecond digits are dropped, which floors the instant (the
    fraction is a non-negative addition to a whole second, and offsets are
    whole minutes), so ``1969-12-31T23:59:59.9999Z`` is ``-1``, not ``0``:
    a receiver never sees a message as newer than it is.

    Years are literal four-digit years 0000-9999 (``0099`` is 99 AD, not
    1999); ``-00:00`` is accepted as UTC.

    Raises ``ValueError`` naming the value and the rule it broke.
    """
    if len(ts) > MAX_TIMESTAMP_CHARS:
        raise _reject(ts, f"longer than {MAX_TIMESTAMP_CHARS} characters ({len(ts)})")
    seconds = _epoch_seconds(ts[:19])
    if seconds is None:
        raise _reject(ts, _explain(ts))
    tail = ts[19:]
    tail_ms = _FAST_TAILS.get(tail)
    if tail_ms is None:
        tail_ms = _slow_tail_ms(tail)
        if tail_ms is None:
            raise _reject(ts, _explain(ts))
    return seconds * 1000 + tail_ms


def format_timestamp(epoch_ms: int) -> str:
    """Format epoch milliseconds as ``YYYY-MM-DDTHH:MM:SS.mmmZ``.

    This is the one spelling senders should emit: UTC, millisecond precision
    (what receivers keep), fixed width.  ``parse_timestamp`` inverts it
    exactly.  Raises ``ValueError`` outside years 0000-9999, which the
    four-digit grammar cannot express.
    """
    if not MIN_EPOCH_MS <= epoch_ms <= MAX_EPOCH_MS:
        raise ValueError(f"epoch_ms {epoch_ms} is outside the RFC 3339 four-digit-year range [{MIN_EPOCH_MS}, {MAX_EPOCH_MS}]")
    days, ms_of_day = divmod(epoch_ms, _MS_PER_DAY)
    year, month, day = _civil_from_days(days)
    secs, ms = divmod(ms_of_day, 1000)
    hour, rem = divmod(secs, 3600)
    minute, second = divmod(rem, 60)
    return f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}.{ms:03d}Z"
