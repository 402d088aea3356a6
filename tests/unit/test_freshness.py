"""Unit and property tests for busguard.admission.freshness."""

from __future__ import annotations

import string

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from busguard.admission.freshness import (
    DEFAULT_MAX_AGE_MS,
    DEFAULT_MAX_FUTURE_MS,
    DEFAULT_NONCE_RETENTION_MS,
    REASON_MALFORMED_NONCE,
    REASON_MALFORMED_TIMESTAMP,
    REASON_NONCE_REPLAY,
    REASON_TIMESTAMP_EXPIRED,
    REASON_TIMESTAMP_TOO_FAR_FUTURE,
    ReplayVerdict,
    check_freshness,
    check_replay,
    check_replay_at_ms,
    is_valid_nonce,
)
from busguard.protocol.reasons import Reason
from busguard.protocol.timestamps import format_timestamp, parse_timestamp

NOW = "2026-06-11T00:00:00.000Z"
NOW_MS = parse_timestamp(NOW)
NONCE = "nonce-conformance-0001"
NONCE_ALPHABET = frozenset(string.ascii_letters + string.digits + "_-")


def test_constants() -> None:
    assert DEFAULT_MAX_AGE_MS == 300_000
    assert DEFAULT_MAX_FUTURE_MS == 30_000
    assert DEFAULT_NONCE_RETENTION_MS == 600_000
    # Retention must outlive every message that could still be accepted.
    assert DEFAULT_NONCE_RETENTION_MS > DEFAULT_MAX_AGE_MS + DEFAULT_MAX_FUTURE_MS


def test_reason_codes_are_wire_reasons() -> None:
    # admission.decide maps check_freshness results with Reason(code).
    for code in (
        REASON_MALFORMED_NONCE,
        REASON_MALFORMED_TIMESTAMP,
        REASON_NONCE_REPLAY,
        REASON_TIMESTAMP_EXPIRED,
        REASON_TIMESTAMP_TOO_FAR_FUTURE,
    ):
        assert Reason(code) == code


# ------------------------------------------------------------------ nonces


@pytest.mark.parametrize(
    "nonce",
    ["a" * 16, "A" * 256, "0123456789abcdef", "-" * 16, "_" * 16, "AbC-_09zZ" * 2, NONCE],
)
def test_valid_nonces(nonce: str) -> None:
    assert is_valid_nonce(nonce)


@pytest.mark.parametrize(
    "nonce",
    [
        "",
        "a" * 15,
        "a" * 257,
        "a" * 15 + "=",  # base64 padding
        "a" * 15 + "+",  # standard (not url) base64
        "a" * 15 + "/",
        "a" * 15 + " ",
        "a" * 16 + "\n",
        "\n" + "a" * 16,
        "a" * 15 + "\u00e9",  # \w would accept this
        "a" * 15 + "\u0661",  # Arabic-Indic one; \d would accept this
        "a" * 15 + "\uff11",  # fullwidth one
        "a" * 15 + "\u212a",  # Kelvin sign, case-folds to k under re.IGNORECASE
        "a" * 15 + "\x00",
    ],
)
def test_invalid_nonces(nonce: str) -> None:
    assert not is_valid_nonce(nonce)


@pytest.mark.parametrize("nonce", [None, b"a" * 16, 12345678901234567, ["a"] * 16])
def test_non_str_nonce_is_invalid(nonce: object) -> None:
    assert is_valid_nonce(nonce) is False  # type: ignore[arg-type]


@settings(max_examples=1000)
@given(
    st.text(
        alphabet=st.sampled_from(sorted(NONCE_ALPHABET)) | st.sampled_from("=+/ .\n\t\u00e9\u0661\uff11\u212a\u0130\x00") | st.characters(),
        min_size=0,
        max_size=300,
    )
)
def test_nonce_matches_reference(nonce: str) -> None:
    reference = 16 <= len(nonce) <= 256 and all(ch in NONCE_ALPHABET for ch in nonce)
    assert is_valid_nonce(nonce) is reference


@settings(max_examples=300)
@given(st.text(alphabet=sorted(NONCE_ALPHABET), min_size=0, max_size=300))
def test_nonce_length_bounds_match_reference(nonce: str) -> None:
    assert is_valid_nonce(nonce) is (16 <= len(nonce) <= 256)


# --------------------------------------------------------------- freshness


@pytest.mark.parametrize(
    ("age_ms", "expected"),
    [
        (0, None),
        (DEFAULT_MAX_AGE_MS, None),
        (DEFAULT_MAX_AGE_MS + 1, REASON_TIMESTAMP_EXPIRED),
        (-DEFAULT_MAX_FUTURE_MS, None),
        (-DEFAULT_MAX_FUTURE_MS - 1, REASON_TIMESTAMP_TOO_FAR_FUTURE),
        (10**15, REASON_TIMESTAMP_EXPIRED),
        (-(10**15), REASON_TIMESTAMP_TOO_FAR_FUTURE),
    ],
)
def test_check_freshness_bounds(age_ms: int, expected: str | None) -> None:
    assert check_freshness(NOW_MS - age_ms, NOW_MS) == expected


def test_check_freshness_custom_window() -> None:
    assert check_freshness(0, 10, max_age_ms=10, max_future_ms=0) is None
    assert check_freshness(0, 11, max_age_ms=10, max_future_ms=0) == REASON_TIMESTAMP_EXPIRED
    assert check_freshness(1, 0, max_age_ms=10, max_future_ms=0) == REASON_TIMESTAMP_TOO_FAR_FUTURE


def test_negative_limits_fail_closed() -> None:
    assert check_freshness(NOW_MS, NOW_MS, max_age_ms=-1) == REASON_TIMESTAMP_EXPIRED
    assert check_freshness(NOW_MS, NOW_MS, max_future_ms=-1) == REASON_TIMESTAMP_TOO_FAR_FUTURE


@settings(max_examples=500)
@given(
    st.integers(-(10**14), 10**14),
    st.integers(-(10**14), 10**14),
    st.integers(0, 10**9),
    st.integers(0, 10**9),
)
def test_check_freshness_matches_definition(issued: int, now: int, age: int, future: int) -> None:
    result = check_freshness(issued, now, age, future)
    if now - issued > age:
        assert result == REASON_TIMESTAMP_EXPIRED
    elif issued - now > future:
        assert result == REASON_TIMESTAMP_TOO_FAR_FUTURE
    else:
        assert result is None


# ------------------------------------------------------------ check_replay


def test_accepts_fresh_unseen() -> None:
    assert check_replay(NOW, NONCE, set(), NOW) == ReplayVerdict(ok=True)


def test_rejects_seen() -> None:
    verdict = check_replay(NOW, NONCE, {NONCE}, NOW)
    assert verdict == ReplayVerdict(ok=False, reason=REASON_NONCE_REPLAY)


@pytest.mark.parametrize("seen", [[NONCE], (NONCE,), frozenset({NONCE}), {NONCE: 1}.keys()])
def test_seen_any_collection(seen: object) -> None:
    assert check_replay(NOW, NONCE, seen, NOW).reason == REASON_NONCE_REPLAY  # type: ignore[arg-type]


def test_does_not_record_nonce() -> None:
    seen: set[str] = set()
    assert check_replay(NOW, NONCE, seen, NOW).ok
    assert seen == set()
    assert check_replay(NOW, NONCE, seen, NOW).ok


@pytest.mark.parametrize(
    ("timestamp", "nonce", "seen", "reason"),
    [
        # Malformed nonce wins over everything else.
        ("garbage", "short", {"short"}, REASON_MALFORMED_NONCE),
        ("2026-06-10T00:00:00Z", "bad nonce with spaces", set(), REASON_MALFORMED_NONCE),
        # Then the timestamp grammar, before freshness or membership.
        ("garbage", NONCE, {NONCE}, REASON_MALFORMED_TIMESTAMP),
        ("2026-06-11T00:00:00", NONCE, set(), REASON_MALFORMED_TIMESTAMP),
        ("2026-06-11T00:00:00.000z", NONCE, set(), REASON_MALFORMED_TIMESTAMP),
        ("x" * 10_000, NONCE, set(), REASON_MALFORMED_TIMESTAMP),
        # Then freshness, before membership (a stale duplicate is "expired").
        ("2026-06-10T23:54:59.999Z", NONCE, {NONCE}, REASON_TIMESTAMP_EXPIRED),
        ("2026-06-11T00:00:30.001Z", NONCE, {NONCE}, REASON_TIMESTAMP_TOO_FAR_FUTURE),
        # Offsets are honoured: 02:00+02:00 is exactly NOW.
        ("2026-06-11T02:00:00+02:00", NONCE, {NONCE}, REASON_NONCE_REPLAY),
    ],
)
def test_check_order(timestamp: str, nonce: str, seen: set[str], reason: str) -> None:
    verdict = check_replay(timestamp, nonce, seen, NOW)
    assert verdict == ReplayVerdict(ok=False, reason=reason)


@pytest.mark.parametrize("now", ["", "garbage", "2026-06-11T00:00:00", "2026-06-11T00:00:00z"])
def test_malformed_now_is_a_caller_bug(now: str) -> None:
    with pytest.raises(ValueError, match="receiver clock"):
        check_replay(NOW, NONCE, set(), now)
    # Raised even when the message itself would be rejected anyway.
    with pytest.raises(ValueError, match="receiver clock"):
        check_replay("garbage", "short", set(), now)


def test_non_str_message_timestamp_is_malformed_not_a_crash() -> None:
    verdict = check_replay(None, NONCE, set(), NOW)  # type: ignore[arg-type]
    assert verdict.reason == REASON_MALFORMED_TIMESTAMP


def test_custom_window() -> None:
    ts = "2026-06-10T23:59:59.000Z"  # 1 s old
    assert check_replay(ts, NONCE, set(), NOW, max_age_ms=1000).ok
    assert check_replay(ts, NONCE, set(), NOW, max_age_ms=999).reason == REASON_TIMESTAMP_EXPIRED
    future = "2026-06-11T00:00:00.001Z"
    assert check_replay(future, NONCE, set(), NOW, max_future_ms=0).reason == (REASON_TIMESTAMP_TOO_FAR_FUTURE)


@settings(max_examples=300)
@given(
    st.integers(NOW_MS - 2 * DEFAULT_MAX_AGE_MS, NOW_MS + 2 * DEFAULT_MAX_FUTURE_MS),
    st.booleans(),
)
def test_check_replay_and_at_ms_agree(issued_ms: int, seen_before: bool) -> None:
    ts = format_timestamp(issued_ms)
    seen = {NONCE} if seen_before else set()
    via_str = check_replay(ts, NONCE, seen, NOW)
    via_ms = check_replay_at_ms(ts, NONCE, seen, NOW_MS)
    assert via_str == via_ms
    expected_reason = check_freshness(issued_ms, NOW_MS) or (REASON_NONCE_REPLAY if seen_before else None)
    assert via_str.reason == expected_reason
    assert via_str.ok is (expected_reason is None)


# ----------------------------------------------------------- ReplayVerdict


def test_verdict_is_frozen_and_serialisable() -> None:
    verdict = ReplayVerdict(ok=False, reason=REASON_NONCE_REPLAY)
    with pytest.raises(AttributeError):
        verdict.ok = True  # type: ignore[misc]
    encoded = msgspec.json.encode(verdict)
    assert encoded == b'{"ok":false,"reason":"nonce_replay"}'
    assert msgspec.json.decode(encoded, type=ReplayVerdict) == verdict
    assert ReplayVerdict(ok=True).reason is None
    assert hash(verdict) == hash(ReplayVerdict(ok=False, reason=REASON_NONCE_REPLAY))
