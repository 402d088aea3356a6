"""Operators resolve with their own keys: the operators file, and how the
reconciler authenticates a resolve command with it."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import msgspec
import pytest

from busguard.errors import ConfigError
from busguard.protocol.envelope import b64url_encode
from busguard.protocol.identity import multikey_encode
from busguard.protocol.records import COMMAND_CONTEXT, HEADER_COMMAND, HEADER_SIGNER, ResolveCommand
from busguard.protocol.signing import public_key_from_seed, sign
from busguard.reconcile.operators import Operators
from busguard.reconcile.worker import parse
from tests.unit.harness import seed

GUARD, ALICE, BOB = seed("guard"), seed("alice"), seed("bob")


def _mk(s: bytes) -> str:
    return multikey_encode(public_key_from_seed(s))


def _operators(tmp_path: Path, text: str) -> Operators:
    path = tmp_path / "operators.toml"
    path.write_text(text)
    return Operators.load(path)


def _command(operator: str, signing_seed: bytes, signer: str | None) -> tuple[bytes, list[tuple[str, bytes]]]:
    body = msgspec.json.encode(ResolveCommand(escalation_id="e" * 32, resolve_as="reject", operator=operator, issued_at=1))
    headers = [(HEADER_COMMAND, b"resolve"), ("busguard-seal", b64url_encode(sign(signing_seed, COMMAND_CONTEXT + body)).encode())]
    if signer is not None:
        headers.append((HEADER_SIGNER, signer.encode()))
    return body, headers


@pytest.fixture
def ops(tmp_path: Path) -> Operators:
    return _operators(tmp_path, f'[[operator]]\nname = "alice"\npublic_key = "{_mk(ALICE)}"\n')


def _problem(body: bytes, headers: list[tuple[str, bytes]], ops: Operators) -> str | None:
    parsed = parse(body, headers, public_key_from_seed(GUARD), ops)
    if parsed.problem is None:
        assert parsed.command is not None
        return None
    return f"{parsed.problem.reason}: {parsed.problem.detail}"


def test_the_deployment_key_resolves_under_any_name(ops: Operators) -> None:
    assert _problem(*_command("anyone", GUARD, None), ops) is None


def test_an_operator_resolves_under_their_own_name(ops: Operators) -> None:
    assert _problem(*_command("alice", ALICE, _mk(ALICE)), ops) is None


def test_an_operator_cannot_resolve_under_another_name(ops: Operators) -> None:
    problem = _problem(*_command("bob", ALICE, _mk(ALICE)), ops)
    assert problem is not None and problem.startswith("bad_seal") and "'alice'" in problem and "'bob'" in problem


@pytest.mark.parametrize(
    ("operator", "signing_seed", "signer", "why"),
    [
        ("bob", BOB, _mk(BOB), "not an operator's key"),  # a key nobody listed
        ("alice", GUARD, _mk(ALICE), "not sealed with operator 'alice'"),  # names alice, sealed by someone else
        ("alice", ALICE, None, "not sealed with the deployment's key"),  # alice's seal without saying so
        ("alice", ALICE, "z6Mk-not-a-key", "must be one Ed25519 multikey"),
    ],
)
def test_every_other_command_is_refused_as_bad_seal(
    ops: Operators, operator: str, signing_seed: bytes, signer: str | None, why: str
) -> None:
    problem = _problem(*_command(operator, signing_seed, signer), ops)
    assert problem is not None and problem.startswith("bad_seal") and why in problem, problem


def test_the_deployment_key_can_be_barred_from_resolving(ops: Operators) -> None:
    body, headers = _command("anyone", GUARD, None)
    parsed = parse(body, headers, public_key_from_seed(GUARD), ops, guard_key_resolves=False)
    assert parsed.problem is not None and parsed.problem.reason == "bad_seal" and "operator's key" in parsed.problem.detail
    body, headers = _command("alice", ALICE, _mk(ALICE))
    assert parse(body, headers, public_key_from_seed(GUARD), ops, guard_key_resolves=False).command is not None


def test_two_signer_headers_are_refused(ops: Operators) -> None:
    body, headers = _command("alice", ALICE, _mk(ALICE))
    problem = _problem(body, [*headers, (HEADER_SIGNER, _mk(ALICE).encode())], ops)
    assert problem is not None and problem.startswith("bad_seal")


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('[[operator]]\nname = "al ice"\npublic_key = "{a}"\n', "operator[0].name"),
        ('[[operator]]\nname = "alice"\npublic_key = "{a}"\n[[operator]]\nname = "alice"\npublic_key = "{b}"\n', "operator[1].name"),
        ('[[operator]]\nname = "alice"\npublic_key = "{a}"\n[[operator]]\nname = "bob"\npublic_key = "{a}"\n', "operator[1].public_key"),
        ('[[operator]]\nname = "alice"\npublic_key = "z6Mkxyz"\n', "operator[0].public_key"),
        ('[[operator]]\nname = "alice"\npublic_key = "{small}"\n', "operator[0].public_key"),
        ('[[operator]]\nname = "alice"\n', "operator[0]"),
        ('[[operator]]\nname = "alice"\npublic_key = "{a}"\nrole = "admin"\n', "operator[0].role"),
    ],
)
def test_a_bad_operators_file_names_the_field(tmp_path: Path, text: str, field: str) -> None:
    small_order = multikey_encode(bytes([1]) + bytes(31))  # the identity point
    with pytest.raises(ConfigError) as info:
        _operators(tmp_path, text.format(a=_mk(ALICE), b=_mk(BOB), small=small_order))
    assert info.value.field.startswith(field) and str(tmp_path / "operators.toml") in str(info.value), str(info.value)


def test_an_operator_command_is_kept_byte_for_byte_in_its_resolution(ops: Operators, tmp_path: Path) -> None:
    """So the auditor can check alice's signature itself, from the log."""
    from busguard.protocol.records import Coordinates, SignedCommand, command_seal_ok
    from busguard.reconcile.policy import EscalationState, on_command
    from tests.unit.test_reconcile_policy import escalations

    _, conflict = escalations(tmp_path)
    body = msgspec.json.encode(
        ResolveCommand(escalation_id=conflict.decision_id, resolve_as="reject", operator="alice", note="n", issued_at=1)
    )
    seal = b64url_encode(sign(ALICE, COMMAND_CONTEXT + body))
    parsed = parse(
        body,
        [(HEADER_COMMAND, b"resolve"), ("busguard-seal", seal.encode()), (HEADER_SIGNER, _mk(ALICE).encode())],
        public_key_from_seed(GUARD),
        ops,
    )
    assert parsed.command is not None and parsed.signed == SignedCommand(body=body, seal=seal, signer=_mk(ALICE))
    items, _ = on_command(
        parsed.command, EscalationState(escalation=conflict), Coordinates(topic="r", partition=0, offset=1), 9, parsed.signed
    )
    final = items[0]
    assert final.command == parsed.signed and final.by == "operator:alice"  # type: ignore[union-attr]
    assert command_seal_ok(final.command.body, final.command.seal, public_key_from_seed(ALICE))  # type: ignore[union-attr]
    # a guard-key command is kept too, with no signer: it proves no name
    body, headers = _command("anyone", GUARD, None)
    guard_signed = parse(body, headers, public_key_from_seed(GUARD), ops).signed
    assert guard_signed is not None and guard_signed.signer is None and guard_signed.body == body


class _Rec(NamedTuple):
    """A consumed record's fields, as BatchLoop hands them to a stage."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]


def _reconciler(tmp_path: Path, sealing_seed: bytes, ops: Operators):  # type: ignore[no-untyped-def]
    from busguard.config import Config, TopicsConfig
    from busguard.protocol.identity import agent_id_for_key
    from busguard.protocol.keyfile import Identity
    from busguard.reconcile.policy import EscalationState
    from busguard.reconcile.worker import Reconciler
    from busguard.runtime.outputs import Output
    from busguard.runtime.watched import WatchedFile
    from busguard.state.sqlite.reconcile import SqliteReconcileStore

    (tmp_path / "operators.toml").write_text(f'[[operator]]\nname = "alice"\npublic_key = "{_mk(ALICE)}"\n')
    cfg = Config(topics=TopicsConfig(reconciliation="t.rec", audit="t.audit", dead_letter="t.dlq", replies="t.replies"))
    pk = public_key_from_seed(sealing_seed)
    return Reconciler(
        cfg,
        identity=Identity(seed=sealing_seed, public_key=pk, agent_id=agent_id_for_key(pk)),
        guard_public_key=public_key_from_seed(GUARD),
        store=SqliteReconcileStore(tmp_path / "reconcile.db", output=Output, state=EscalationState),
        operators=WatchedFile(tmp_path / "operators.toml", Operators.load, what="operators file"),
        clock_ms=lambda: 7,
    )


def test_the_reconciler_seals_with_its_own_key_and_keeps_the_signed_command(
    tmp_path: Path, ops: Operators, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    from busguard.protocol.attestation import AttestationError, attest, decision_bytes, seal, verify_decision_record
    from busguard.protocol.identity import agent_id_for_key
    from busguard.protocol.records import Resolution, audit_decoder
    from busguard.protocol.signing import Signer
    from tests.unit.test_reconcile_policy import escalations

    reconciler_seed = seed("reconciler")
    worker = _reconciler(tmp_path, reconciler_seed, ops)
    assert "seals with the guard key" not in capsys.readouterr().out
    _, conflict = escalations(tmp_path)
    body = decision_bytes(conflict)
    att = attest(conflict, body, agent_id_for_key(public_key_from_seed(GUARD)))
    escalation = _Rec(
        "t.rec",
        0,
        0,
        b"t",
        body,
        [
            ("busguard-decision-id", conflict.decision_id.encode()),
            ("busguard-attestation", att),
            ("busguard-seal", seal(Signer(GUARD), att)),
        ],
    )
    cmd = msgspec.json.encode(
        ResolveCommand(escalation_id=conflict.decision_id, resolve_as="reject", operator="alice", note="n", issued_at=1)
    )
    command = _Rec(
        "t.rec",
        0,
        1,
        b"t",
        cmd,
        [
            (HEADER_COMMAND, b"resolve"),
            ("busguard-seal", b64url_encode(sign(ALICE, COMMAND_CONTEXT + cmd)).encode()),
            (HEADER_SIGNER, _mk(ALICE).encode()),
        ],
    )
    outputs = asyncio.run(worker.process([escalation, command]))
    audit = [o for o in outputs if o.topic == "t.audit"]
    assert len(audit) == 2  # held, then alice's final
    for o in audit:
        verify_decision_record(o.value, o.headers, public_key_from_seed(reconciler_seed))
        with pytest.raises(AttestationError):
            verify_decision_record(o.value, o.headers, public_key_from_seed(GUARD))
    final = audit_decoder.decode(audit[1].value)  # type: ignore[arg-type]
    assert isinstance(final, Resolution) and final.by == "operator:alice" and final.command is not None
    assert (final.command.body, final.command.signer) == (cmd, _mk(ALICE))


def test_a_reconciler_without_its_own_key_warns(tmp_path: Path, ops: Operators, capsys: pytest.CaptureFixture[str]) -> None:
    _reconciler(tmp_path, GUARD, ops)
    out = capsys.readouterr().out
    assert "the reconciler seals with the guard key" in out and "keys.reconciler_key" in out
