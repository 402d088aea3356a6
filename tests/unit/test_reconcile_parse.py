"""reconcile/parse.py is total (issue 35, finding 2): any value and any
headers (null values, repeated names, any bytes) give exactly one outcome
(an escalation, a command, or a typed refusal) and never an exception;
the genuine records, and only copies carrying their exact headers, are
accepted."""

from __future__ import annotations

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from busguard.protocol.attestation import HEADER_ATTESTATION, HEADER_SEAL, attest, decision_bytes, seal
from busguard.protocol.envelope import b64url_encode
from busguard.protocol.identity import multikey_encode
from busguard.protocol.records import COMMAND_CONTEXT, HEADER_COMMAND, HEADER_SIGNER, Coordinates, Decision, ResolveCommand
from busguard.protocol.signing import Signer, public_key_from_seed, sign
from busguard.protocol.treehead import HEADER_HEAD_SEAL, HEADER_INCLUSION, HEADER_TREE_HEAD
from busguard.reconcile.operators import Operators
from busguard.reconcile.parse import Headers, Parsed, ascii_header, one_header, parse
from busguard.reconcile.policy import Rejected

from .harness import seed

GUARD, ALICE = seed("guard"), seed("alice")
GUARD_PK, ALICE_PK = public_key_from_seed(GUARD), public_key_from_seed(ALICE)
OPERATORS = Operators({ALICE_PK: "alice"})
REASONS = {"missing_field", "bad_seal", "wrong_type"}

_escalation = Decision("e" * 32, "escalate", "task_conflict", Coordinates(topic="in", partition=0, offset=3), 1000, task_id="t")
ESCALATION = decision_bytes(_escalation)
_att = attest(_escalation, ESCALATION, "tulpa:guard")
ESCALATION_HEADERS: list[tuple[str, bytes | None]] = [(HEADER_ATTESTATION, _att), (HEADER_SEAL, seal(Signer(GUARD), _att))]
COMMAND = msgspec.json.encode(ResolveCommand(escalation_id="e" * 32, resolve_as="reject", operator="alice", issued_at=1))
COMMAND_HEADERS: list[tuple[str, bytes | None]] = [
    (HEADER_COMMAND, b"resolve"),
    (HEADER_SEAL, b64url_encode(sign(ALICE, COMMAND_CONTEXT + COMMAND)).encode()),
    (HEADER_SIGNER, multikey_encode(ALICE_PK).encode()),
]
NAMES = [HEADER_COMMAND, HEADER_SEAL, HEADER_SIGNER, HEADER_ATTESTATION, HEADER_TREE_HEAD, HEADER_HEAD_SEAL, HEADER_INCLUSION]
values = st.one_of(
    st.none(),
    st.binary(max_size=120),
    st.sampled_from([v for _, v in ESCALATION_HEADERS + COMMAND_HEADERS]),
    st.sampled_from([b"A" * 86, b"\xff" * 86, b"z6Mk", b"", b"resolve\x00"]),
)
header = st.tuples(st.one_of(st.sampled_from(NAMES), st.text(max_size=20)), values)


def _one_outcome(p: Parsed) -> Parsed:
    assert isinstance(p, Parsed)
    assert sum(x is not None for x in (p.escalation, p.command, p.problem)) == 1, p
    assert (p.command is None) == (p.signed is None)
    if p.problem is not None:
        assert p.problem.reason in REASONS and p.problem.detail
    return p


def _parse(value: bytes | None, headers: Headers, resolves: bool = True) -> Parsed:
    return _one_outcome(parse(value, headers, GUARD_PK, OPERATORS, resolves))


@settings(max_examples=1500, deadline=None)
@given(st.one_of(st.none(), st.binary(max_size=200), st.sampled_from([ESCALATION, COMMAND])), st.lists(header, max_size=8), st.booleans())
def test_any_value_and_headers_give_exactly_one_outcome(
    value: bytes | None, headers: list[tuple[str, bytes | None]], resolves: bool
) -> None:
    _parse(value, headers, resolves)


@st.composite
def _altered(draw: st.DrawFn) -> tuple[bytes, list[tuple[str, bytes | None]], list[tuple[str, bytes | None]]]:
    """A genuine record with its headers nulled, repeated, dropped, replaced or reordered."""
    value, genuine = draw(st.sampled_from([(ESCALATION, ESCALATION_HEADERS), (COMMAND, COMMAND_HEADERS)]))
    headers = list(genuine)
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(headers) - 1)) if headers else 0
        op = draw(st.sampled_from(["null", "repeat", "drop", "replace", "add", "swap"]))
        if op == "null" and headers:
            headers[i] = (headers[i][0], None)
        elif op == "repeat" and headers:
            headers.insert(draw(st.integers(0, len(headers))), headers[i])
        elif op == "drop" and headers:
            del headers[i]
        elif op == "replace" and headers:
            headers[i] = (headers[i][0], draw(values))
        elif op == "add":
            headers.append(draw(header))
        elif len(headers) > 1:
            j = draw(st.integers(0, len(headers) - 1))
            headers[i], headers[j] = headers[j], headers[i]
    return value, genuine, headers


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_altered())
def test_a_genuine_record_with_altered_headers_is_one_outcome_and_accepted_only_as_itself(
    case: tuple[bytes, list[tuple[str, bytes | None]], list[tuple[str, bytes | None]]],
) -> None:
    value, genuine, headers = case
    p = _parse(value, headers)
    if p.problem is None:  # accepted: the seal, signer and command headers are the genuine ones, once each
        for name, v in genuine:
            assert [x for k, x in headers if k == name] == [v], (name, headers)


def test_the_genuine_records_are_accepted() -> None:
    assert _parse(ESCALATION, ESCALATION_HEADERS).escalation == _escalation
    p = _parse(COMMAND, COMMAND_HEADERS)
    assert p.command is not None and p.signed is not None and p.signed.signer == multikey_encode(ALICE_PK)


def test_null_repeated_and_non_ascii_headers_are_refused_by_name() -> None:
    """The finding's records: each a `bad_seal` naming the header."""
    cases = [
        (ESCALATION, [(HEADER_ATTESTATION, None), (HEADER_SEAL, b"A" * 86)], HEADER_ATTESTATION),
        (COMMAND, [*COMMAND_HEADERS[:2], (HEADER_SIGNER, None)], HEADER_SIGNER),
        (COMMAND, [COMMAND_HEADERS[0], (HEADER_SEAL, None), COMMAND_HEADERS[2]], HEADER_SEAL),
        (COMMAND, [(HEADER_COMMAND, None), *COMMAND_HEADERS[1:]], HEADER_COMMAND),
        (COMMAND, [COMMAND_HEADERS[0], *COMMAND_HEADERS], HEADER_COMMAND),
        (COMMAND, [(HEADER_COMMAND, b"delete"), *COMMAND_HEADERS[1:]], HEADER_COMMAND),
        (COMMAND, [*COMMAND_HEADERS[:2], (HEADER_SIGNER, b"z6Mk\xff")], HEADER_SIGNER),
        (COMMAND, [COMMAND_HEADERS[0], (HEADER_SEAL, b"\xe9" * 86), COMMAND_HEADERS[2]], HEADER_SEAL),
        (COMMAND, [COMMAND_HEADERS[0], COMMAND_HEADERS[2]], HEADER_SEAL),
    ]
    for value, headers, name in cases:
        p = _parse(value, headers)
        assert p.problem is not None and p.problem.reason == "bad_seal" and name in p.problem.detail, (headers, p.problem)
    assert _parse(None, COMMAND_HEADERS).problem == Rejected("missing_field", "null value")


def test_one_header_and_ascii_header() -> None:
    assert one_header([("a", b"1"), ("b", b"2")], "a") == b"1"
    assert one_header([("b", b"2")], "a") is None
    assert one_header([("a", None)], "a") == Rejected("bad_seal", "a has a null value")
    assert one_header([("a", b"1"), ("a", b"1")], "a") == Rejected("bad_seal", "a appears 2 times; at most one is allowed")
    assert ascii_header(b"z6Mk", "s") == "z6Mk"
    assert ascii_header(b"z\x80", "s") == Rejected("bad_seal", "s is not ASCII text (byte 0x80 at 1)")
