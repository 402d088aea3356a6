"""One reconciliation-topic record, read: an escalation, a command, or why neither.

Pure and total: whatever value and headers a record holds (Kafka allows a
null header value, any number of headers of one name, and any bytes in a
value), `parse` returns exactly one `Parsed` and raises nothing. Anyone who
may write the reconciliation topic can send such a record; an exception
here stopped `busguard reconcile` at every start, and every genuine
escalation behind the record with it (issue 35). The reasons are the ones
docs/protocol.md 12.4 lists: `missing_field` (null value), `bad_seal` (a
seal, signer, attestation or command header absent, null, repeated, not
ASCII, or not verifying), `wrong_type` (a value that is not the schema).
Header names that are not UTF-8 never reach here: the tolerant fetch makes
them `undecodable_header` placeholders (docs/operations.md 2.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import msgspec

from busguard.protocol.attestation import HEADER_SEAL, AttestationError, verify_decision_record
from busguard.protocol.identity import multikey_decode
from busguard.protocol.records import HEADER_COMMAND, HEADER_SIGNER, Decision, ResolveCommand, SignedCommand, command_seal_ok
from busguard.reconcile.operators import Operators
from busguard.reconcile.policy import Rejected

#: A consumed record's headers as Kafka delivers them: a value may be null.
Headers = Sequence[tuple[str, bytes | None]]

_decision = msgspec.json.Decoder(Decision)
_command = msgspec.json.Decoder(ResolveCommand)
#: The one value `busguard-command` has (docs/protocol.md 12.4).
COMMAND_RESOLVE = b"resolve"


class Parsed(msgspec.Struct, frozen=True):
    """Exactly one of `escalation`, `command` (with `signed`) or `problem` is set."""

    escalation: Decision | None = None
    command: ResolveCommand | None = None
    signed: SignedCommand | None = None  # the command's exact bytes and seal, for the audit log
    problem: Rejected | None = None

    @property
    def escalation_id(self) -> str | None:
        if self.escalation is not None:
            return self.escalation.decision_id
        return self.command.escalation_id if self.command is not None else None


def _refused(detail: str) -> Parsed:
    return Parsed(problem=Rejected("bad_seal", detail))


def one_header(headers: Headers, name: str) -> bytes | None | Rejected:
    """The value of `name` when the record carries it exactly once, with a
    value; None when it carries none; a refusal when it is repeated (a
    reader could pick another copy than the one checked) or null."""
    found = [v for k, v in headers if k == name]
    if not found:
        return None
    if len(found) > 1:
        return Rejected("bad_seal", f"{name} appears {len(found)} times; at most one is allowed")
    if found[0] is None:
        return Rejected("bad_seal", f"{name} has a null value")
    return found[0]


def ascii_header(raw: bytes, name: str) -> str | Rejected:
    """A header whose value is text (a seal, a multikey): ASCII, or refused with the first byte that is not."""
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError as exc:
        return Rejected("bad_seal", f"{name} is not ASCII text (byte 0x{raw[exc.start]:02x} at {exc.start})")


def parse(
    value: bytes | None,
    headers: Headers,
    guard_public_key: bytes,
    operators: Operators,
    guard_key_resolves: bool = True,
) -> Parsed:
    """Authenticate and decode one reconciliation-topic record: a record
    carrying `busguard-command` is an operator's command, anything else
    must be an escalation sealed by the guard."""
    if value is None:
        return Parsed(problem=Rejected("missing_field", "null value"))
    if any(k == HEADER_COMMAND for k, _ in headers):
        return _parse_command(value, headers, guard_public_key, operators, guard_key_resolves)
    try:
        # open_sealed refuses a null, missing or repeated seal header itself (AttestationError)
        verify_decision_record(value, cast(Sequence[tuple[str, bytes]], headers), guard_public_key)
    except AttestationError as exc:
        return _refused(str(exc))
    try:
        return Parsed(escalation=_decision.decode(value))
    except msgspec.MsgspecError as exc:
        return Parsed(problem=Rejected("wrong_type", f"escalation record: {exc}"))


def _parse_command(value: bytes, headers: Headers, guard_public_key: bytes, operators: Operators, guard_key_resolves: bool) -> Parsed:
    command = one_header(headers, HEADER_COMMAND)
    if isinstance(command, Rejected):
        return Parsed(problem=command)
    if command != COMMAND_RESOLVE:
        return _refused(f"{HEADER_COMMAND} must be {COMMAND_RESOLVE.decode()!r}, not {command!r:.80}")
    raw_seal = one_header(headers, HEADER_SEAL)
    if isinstance(raw_seal, Rejected):
        return Parsed(problem=raw_seal)
    if raw_seal is None:
        return _refused(f"resolve command without a {HEADER_SEAL} header")
    seal_text = ascii_header(raw_seal, HEADER_SEAL)
    if isinstance(seal_text, Rejected):
        return Parsed(problem=seal_text)
    signer = _command_signer(headers, guard_public_key, operators, guard_key_resolves)
    if isinstance(signer, Rejected):
        return Parsed(problem=signer)
    key, operator, signer_text = signer
    if not command_seal_ok(value, seal_text, key):
        whose = "the deployment's key" if operator is None else f"operator {operator!r}'s key"
        return _refused(f"resolve command is not sealed with {whose}")
    try:
        decoded = _command.decode(value)
    except msgspec.MsgspecError as exc:
        return Parsed(problem=Rejected("wrong_type", f"resolve command: {exc}"))
    if operator is not None and decoded.operator != operator:
        return _refused(f"signed with operator {operator!r}'s key but names operator {decoded.operator!r}")
    return Parsed(command=decoded, signed=SignedCommand(body=value, seal=seal_text, signer=signer_text))


def _command_signer(
    headers: Headers, guard_public_key: bytes, operators: Operators, guard_key_resolves: bool
) -> tuple[bytes, str | None, str | None] | Rejected:
    """The key a command must verify under, the operator it belongs to and
    the `busguard-signer` text (None, None: the deployment key, which may
    resolve under any name unless `keys.guard_key_resolves` is off)."""
    raw = one_header(headers, HEADER_SIGNER)
    if isinstance(raw, Rejected):
        return raw
    if raw is None:
        if not guard_key_resolves:
            return Rejected("bad_seal", "resolve commands must be signed with an operator's key (keys.guard_key_resolves = false)")
        return guard_public_key, None, None
    text = ascii_header(raw, HEADER_SIGNER)
    if isinstance(text, Rejected):
        return text
    try:
        key = multikey_decode(text)
    except ValueError as exc:
        return Rejected("bad_seal", f"{HEADER_SIGNER} must be one Ed25519 multikey ({exc})")
    name = operators.name_for(key)
    if name is None:
        return Rejected("bad_seal", f"resolve command signed with {text}, which is not an operator's key (keys.operators)")
    return key, name, text
