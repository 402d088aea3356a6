"""Unit and property tests for busguard.protocol.timestamps."""

from __future__ import annotations

import calendar
import math
import re
from datetime import date, datetime, timedelta
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from busguard.protocol import timestamps
from busguard.protocol.timestamps import (
    MAX_EPOCH_MS,
    MAX_TIMESTAMP_CHARS,
    MIN_EPOCH_MS,
    format_timestamp,
    parse_timestamp,
)

BASE = 1_781_136_000_000  # 2026-06-11T00:00:00Z


@pytest.mark.parametrize(
    ("ts", "expected"),
    [
        ("1970-01-01T00:00:00Z", 0),
        ("1970-01-01T00:00:00.000Z", 0),
        ("1970-01-01T00:00:00.001Z", 1),
        ("1969-12-31T23:59:59.999Z", -1),
        ("1969-12-31T23:59:59.9999999Z", -1),
        ("1969-12-31T23:59:59Z", -1000),
        ("2026-06-11T00:00:00.5Z", BASE + 500),
        ("2026-06-11T00:00:00.05Z", BASE + 50),
        ("2026-06-11T00:00:00.005Z", BASE + 5),
        ("2026-06-11T00:00:00.0059Z", BASE + 5),
        ("2026-06-11T00:00:00+00:00", BASE),
        ("2026-06-11T00:00:00.123456+00:00", BASE + 123),  # datetime.isoformat()
        ("2026-06-11T02:00:00.5+02:00", BASE + 500),
        ("2026-06-11T02:00:00.1234+02:00", BASE + 123),
        ("2026-06-11T00:00:00.12Z", BASE + 120),
        ("2026-06-11T00:00:00.1239Z", BASE + 123),
        ("2026-06-11T00:00:00.999999999Z", BASE + 999),
        ("2026-06-11T05:30:00+05:30", BASE),
        ("2026-06-10T14:00:00-10:00", BASE),
        ("2026-06-11T23:59:00+23:59", BASE),
        ("2026-06-10T00:01:00-23:59", BASE),
        ("2026-06-11T02:00:00.123+02:00", BASE + 123),
        ("2000-02-29T00:00:00Z", 951_782_400_000),
        ("0000-01-01T00:00:00Z", MIN_EPOCH_MS),
        ("0000-02-29T00:00:00Z", MIN_EPOCH_MS + (31 + 28) * 86_400_000),  # year 0 is leap
        ("9999-12-31T23:59:59.999Z", MAX_EPOCH_MS),
        ("0099-01-01T00:00:00Z", -59_042_995_200_000),
    ],
)
def test_parse_valid(ts: str, expected: int) -> None:
    assert parse_timestamp(ts) == expected


def test_offsets_may_leave_the_four_digit_range() -> None:
    # The grammar is about the spelling, not the instant: these are legal.
    assert parse_timestamp("0000-01-01T00:00:00+01:00") == MIN_EPOCH_MS - 3_600_000
    assert parse_timestamp("9999-12-31T23:59:59.999-01:00") == MAX_EPOCH_MS + 3_600_000


@pytest.mark.parametrize(
    "ts",
    [
        "",
        "2026-06-11",
        "2026-06-11T00:00:00",
        "2026-06-11T00:00Z",
        "2026-06-11T00:00:00.Z",  # dot with no digits
        "2026-06-11T00:00:00,5Z",
        "2026-06-11t00:00:00Z",
        "2026-06-11T00:00:00z",
        "2026-06-11 00:00:00Z",
        "2026-06-11_00:00:00Z",
        " 2026-06-11T00:00:00Z",
        "2026-06-11T00:00:00Z ",
        "2026-06-11T00:00:00Z\n",
        "2026-06-11T00:00:00+0200",
        "2026-06-11T00:00:00+02",
        "2026-06-11T00:00:00+2:00",
        "2026-06-11T00:00:00UTC",
        "2026-06-11T00:00:00+00:00Z",
        "2026-6-11T00:00:00Z",
        "26-06-11T00:00:00Z",
        "+2026-06-11T00:00:00Z",
        "-0001-06-11T00:00:00Z",
        "12026-06-11T00:00:00Z",
        "2026-00-11T00:00:00Z",
        "2026-13-11T00:00:00Z",
        "2026-06-00T00:00:00Z",
        "2026-06-31T00:00:00Z",
        "2026-04-31T00:00:00Z",
        "2026-01-32T00:00:00Z",
        "1900-02-29T00:00:00Z",  # century, not leap
        "2023-02-29T00:00:00Z",
        "2026-06-11T24:00:00Z",
        "2026-06-11T23:60:00Z",
        "2026-06-11T23:59:60Z",
        "2026-06-11T00:00:00+24:00",
        "2026-06-11T00:00:00-24:00",
        "2026-06-11T00:00:00+00:60",
        "\uff12\uff10\uff12\uff16-06-11T00:00:00Z",  # fullwidth digits
        "\u0662\u0660\u0662\u0666-06-11T00:00:00Z",  # Arabic-Indic digits
        "2026-06-11T00:00:00.\u0661\u0662\u0663Z",
        "2026\u201006\u201011T00:00:00Z",  # Unicode hyphen
        "2026-06-11T00:00:00+05:30:00",
        "2026-06-11T00:00:00Z+02:00",
        "2026-06-11T00:00:00+02:00Z",
        "2026-06-11T00:00:00.123+02:00Z",
        "2026-06-11T00:00:00.123١Z",  # non-ASCII digit after the ms digits
        "2026-06-11T00:00:00.123²Z",  # superscript two: isdigit() but not [0-9]
        "2026-06-11T00:00:00.²+02:00",
        "2026-06-11T00:00:00.12a+02:00",
        "2026-06-11T00:00:00.1234a+02:00",
        "2026-06-11T00:00:00..123Z",
        "2026-06-11T00:00:00.+02:00",
        "2026-06-11T00:00:00+١٢:00",
        "2026-06-11T00:00:00-0:000",
        "2026-06-11T00:00:00Z" + "Z",
        "2026-06-11T00:00:00." + "1" * 44 + "Z",  # 65 chars
    ],
)
def test_parse_invalid(ts: str) -> None:
    with pytest.raises(ValueError, match="invalid timestamp"):
        parse_timestamp(ts)


def test_length_is_checked_before_parsing() -> None:
    ok = "2026-06-11T00:00:00." + "1" * 43 + "Z"
    assert len(ok) == MAX_TIMESTAMP_CHARS
    assert parse_timestamp(ok) == BASE + 111
    with pytest.raises(ValueError, match="longer than 64"):
        parse_timestamp("x" * 10_000)


@pytest.mark.parametrize(
    ("ts", "fragment"),
    [
        ("2026-13-01T00:00:00Z", "month must be 01-12"),
        ("2026-02-29T00:00:00Z", "day must be 01-28"),
        ("2024-02-30T00:00:00Z", "day must be 01-29"),
        ("2026-06-11T24:00:00Z", "hour must be 00-23"),
        ("2026-06-11T00:60:00Z", "minute must be 00-59"),
        ("2026-06-11T00:00:60Z", "leap seconds"),
        ("2026-06-11T00:00:00+24:00", "offset hour"),
        ("2026-06-11T00:00:00+00:60", "offset minute"),
        ("2026-06-11T00:00:00,1Z", "does not match the grammar"),
    ],
)
def test_error_messages_name_value_and_rule(ts: str, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_timestamp(ts)
    message = str(info.value)
    assert repr(ts) in message
    assert fragment in message
    assert "RFC 3339" in message


def test_huge_input_not_echoed_in_full() -> None:
    with pytest.raises(ValueError) as info:
        parse_timestamp("9" * 100_000)
    assert len(str(info.value)) < 400


def test_warm_and_cold_caches_agree() -> None:
    samples = ["2026-06-11T00:00:00.123Z", "2024-02-29T12:34:56+01:00", "0099-01-01T00:00:00Z"]
    warm = [parse_timestamp(s) for s in samples]
    timestamps._epoch_seconds.cache_clear()
    assert [parse_timestamp(s) for s in samples] == warm


def test_invalid_component_is_not_accepted_from_cache() -> None:
    with pytest.raises(ValueError):
        parse_timestamp("2026-02-29T00:00:00Z")
    with pytest.raises(ValueError):
        parse_timestamp("2026-02-29T00:00:00Z")  # second time hits the cached None


@pytest.mark.parametrize(
    ("ms", "expected"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (-1, "1969-12-31T23:59:59.999Z"),
        (BASE + 7, "2026-06-11T00:00:00.007Z"),
        (951_782_400_000, "2000-02-29T00:00:00.000Z"),
        (MIN_EPOCH_MS, "0000-01-01T00:00:00.000Z"),
        (MAX_EPOCH_MS, "9999-12-31T23:59:59.999Z"),
    ],
)
def test_format_examples(ms: int, expected: str) -> None:
    assert format_timestamp(ms) == expected
    assert parse_timestamp(expected) == ms


@pytest.mark.parametrize("ms", [MIN_EPOCH_MS - 1, MAX_EPOCH_MS + 1, 10**20, -(10**20)])
def test_format_out_of_range(ms: int) -> None:
    with pytest.raises(ValueError, match="outside"):
        format_timestamp(ms)


# ---------------------------------------------------------------- properties


@settings(max_examples=1000)
@given(st.integers(min_value=MIN_EPOCH_MS, max_value=MAX_EPOCH_MS))
def test_format_parse_roundtrip_full_range(ms: int) -> None:
    text = format_timestamp(ms)
    assert len(text) == 24
    assert parse_timestamp(text) == ms


_EPOCH = datetime(1970, 1, 1)


@st.composite
def _rfc3339(draw: st.DrawFn) -> tuple[str, int]:
    """A random valid timestamp and its independently computed epoch ms."""
    local = draw(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)))
    local = local.replace(microsecond=0)
    frac = draw(st.none() | st.text(alphabet="0123456789", min_size=1, max_size=30))
    zone = draw(
        st.just("Z")
        | st.tuples(st.sampled_from("+-"), st.integers(0, 23), st.integers(0, 59)).map(lambda t: f"{t[0]}{t[1]:02d}:{t[2]:02d}")
    )
    # Built by hand: strftime does not zero-pad years < 1000 on every platform.
    text = f"{local.year:04d}-{local.month:02d}-{local.day:02d}T{local.hour:02d}:{local.minute:02d}:{local.second:02d}"
    if frac is not None:
        text += "." + frac
    text += zone
    # Reference: timedelta arithmetic on the local wall time, then the offset,
    # with the fraction floored as an exact Fraction (independent of slicing).
    delta = local - _EPOCH
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        delta -= sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6]))
    whole_ms = (delta.days * 86_400 + delta.seconds) * 1000
    frac_ms = 0 if frac is None else math.floor(Fraction(int(frac), 10 ** len(frac)) * 1000)
    return text, whole_ms + frac_ms


@settings(max_examples=1000)
@given(_rfc3339())
def test_parse_matches_datetime_reference(sample: tuple[str, int]) -> None:
    text, expected = sample
    assert len(text) <= MAX_TIMESTAMP_CHARS
    assert parse_timestamp(text) == expected


@settings(max_examples=500)
@given(st.text(max_size=70))
def test_parse_only_raises_value_error(text: str) -> None:
    try:
        result = parse_timestamp(text)
    except ValueError:
        return
    assert isinstance(result, int)
    # Anything accepted must be in the strict shape.
    assert text[4] == "-" and text[10] == "T" and text.isascii()


@settings(max_examples=500)
@given(st.dates(min_value=date(1, 1, 1), max_value=date(9999, 12, 31)))
def test_day_validation_matches_calendar(day: date) -> None:
    # Every real calendar day parses to the right instant; the day after a
    # month's last day (when it is still two digits <= 31) does not parse.
    text = f"{day.year:04d}-{day.month:02d}-{day.day:02d}T00:00:00Z"
    assert parse_timestamp(text) == (day - _EPOCH.date()).days * 86_400_000
    last = calendar.monthrange(day.year, day.month)[1]
    if last < 31:
        with pytest.raises(ValueError, match="day must be"):
            parse_timestamp(f"{day.year:04d}-{day.month:02d}-{last + 1:02d}T00:00:00Z")


_REFERENCE = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})"
    r"(?:\.([0-9]+))?(?:(Z)|([+-])([0-9]{2}):([0-9]{2}))",
    re.ASCII,
)


def _reference_parse(ts: str) -> int | None:
    """Straightforward one-regex implementation used as the oracle."""
    if len(ts) > 64:
        return None
    m = _REFERENCE.fullmatch(ts)
    if m is None:
        return None
    y, mo, d, h, mi, sec = (int(g) for g in m.groups()[:6])
    leap = y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)
    dim = [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    if not (1 <= mo <= 12 and 1 <= d <= dim[mo - 1] and h < 24 and mi < 60 and sec < 60):
        return None
    offset = 0
    if m.group(9):
        oh, om = int(m.group(10)), int(m.group(11))
        if oh > 23 or om > 59:
            return None
        offset = (oh * 60 + om) * 60 * (1 if m.group(9) == "+" else -1)

    # Day count by brute force over whole years (independent of the
    # days-from-civil arithmetic under test).
    def year_days(yy: int) -> int:
        return 366 if yy % 4 == 0 and (yy % 100 != 0 or yy % 400 == 0) else 365

    if y >= 1970:
        days = sum(year_days(yy) for yy in range(1970, y))
    else:
        days = -sum(year_days(yy) for yy in range(y, 1970))
    days += sum(dim[: mo - 1]) + d - 1
    frac = m.group(7)
    ms = 0 if frac is None else math.floor(Fraction(int(frac), 10 ** len(frac)) * 1000)
    return ((days * 86400 + h * 3600 + mi * 60 + sec) - offset) * 1000 + ms


_MUTATION_CHARS = "0123456789:-.+TtZz ,_\n\u0661\u00b2\uff11"


@st.composite
def _mutated(draw: st.DrawFn) -> str:
    base = draw(
        st.sampled_from(
            [
                "2026-06-11T00:00:00.123Z",
                "2024-02-29T23:59:59Z",
                "0000-01-01T00:00:00.5+23:59",
                "9999-12-31T23:59:59.999999-00:00",
                "1969-12-31T23:59:59.9999Z",
            ]
        )
    )
    chars = list(base)
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.integers(0, 2))
        pos = draw(st.integers(0, len(chars)))
        ch = draw(st.sampled_from(_MUTATION_CHARS))
        if op == 0 and pos < len(chars):
            chars[pos] = ch
        elif op == 1:
            chars.insert(pos, ch)
        elif chars and pos < len(chars):
            del chars[pos]
    return "".join(chars)


@settings(max_examples=2000)
@given(_mutated())
def test_parse_matches_one_regex_oracle_on_mutants(ts: str) -> None:
    expected = _reference_parse(ts)
    if expected is None:
        with pytest.raises(ValueError):
            parse_timestamp(ts)
    else:
        assert parse_timestamp(ts) == expected
