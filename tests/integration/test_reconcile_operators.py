"""Operators resolve with their own keys, against the real broker: the name in
the audit log is the one the operators file gives the key, another name is
refused, the guard key can be barred from resolving, and removing an
operator from the file (while the reconciler runs) withdraws the key. The
auditor proves every operator's name from the log and the operators file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, Setup, collect, header, identity, make_setup, produce, sender
from busguard.protocol.attestation import AttestationError, attest_record, seal, verify_decision_record
from busguard.protocol.envelope import b64url_encode
from busguard.protocol.identity import multikey_encode
from busguard.protocol.keyfile import write_key
from busguard.protocol.records import COMMAND_CONTEXT, Decision, Resolution, ResolveCommand, SignedCommand, audit_decoder, resolution_id
from busguard.protocol.signing import Signer, sign

from .paths import REPO


def _held(s: Setup, got) -> list[str]:  # type: ignore[no-untyped-def]
    recs = [audit_decoder.decode(r.value) for r in got[s.audit]]
    return sorted(r.escalation_id for r in recs if isinstance(r, Resolution) and r.stage == "held")


def _finals(s: Setup, got) -> dict[str, Resolution]:  # type: ignore[no-untyped-def]
    recs = [audit_decoder.decode(r.value) for r in got[s.audit]]
    return {r.escalation_id: r for r in recs if isinstance(r, Resolution) and r.stage == "final"}


def _resolve(s: Setup, escalation: str, operator: str, key: Path | None) -> subprocess.CompletedProcess[str]:
    cli = [sys.executable, "-m", "busguard.cli", "escalations", "resolve", escalation, "--as", "reject", "--note", "conflict",
           "--operator", operator, *(["--key", str(key)] if key else []), "--wait", "0", "--config", str(s.config)]  # fmt: skip
    return subprocess.run(cli, capture_output=True, text=True, timeout=60, cwd=REPO)


def _bad_seals(s: Setup, got) -> list[bytes]:  # type: ignore[no-untyped-def]
    return [r.value for r in got[s.dead_letter] if header(r, "busguard-reason") == b"bad_seal"]


async def test_operators_resolve_with_their_own_keys(broker: EmbeddedBroker, tmp_path: Path) -> None:
    alice = identity("operator-alice")
    s = await make_setup(tmp_path, broker.bootstrap, operators=[("alice", alice)])
    alice_key = tmp_path / "alice.key"
    write_key(alice_key, alice)
    guard, worker = GuardProcess(s), GuardProcess(s, command="reconcile", env={"BUSGUARD_KEYS__GUARD_KEY_RESOLVES": "false"})
    try:
        guard.wait_ready()
        worker.wait_ready()
        planner = sender("planner")
        conflicts = []
        for i in range(3):  # three payload conflicts: three escalations held for an operator
            conflicts += [planner.sign(kind="handoff", task_id=f"t-{i}", receiver="x", payload=b"work"),
                          planner.sign(kind="handoff", task_id=f"t-{i}", receiver="x", payload=b"other work")]  # fmt: skip
        await produce(s.bootstrap, s.handoffs, conflicts, key=b"planner")
        got = await collect(s.bootstrap, [s.audit], lambda c: len(_held(s, c)) == 3)
        first, second, third = _held(s, got)

        # alice, under her own name: resolved, and the audit log says so
        assert _resolve(s, first, "alice", alice_key).returncode == 0
        # alice's key, another name: refused; the guard key: barred (keys.guard_key_resolves = false)
        assert _resolve(s, second, "mallory", alice_key).returncode == 0  # sent; the reconciler refuses it
        assert _resolve(s, second, "alice", None).returncode == 0
        got = await collect(s.bootstrap, [s.audit, s.dead_letter], lambda c: first in _finals(s, c) and len(_bad_seals(s, c)) == 2)
        assert _finals(s, got)[first].by == "operator:alice"
        # alice removed from the file while the reconciler runs: her key no longer resolves
        tmp = tmp_path / "operators.toml.new"
        tmp.write_text("")
        os.replace(tmp, tmp_path / "operators.toml")
        assert _resolve(s, third, "alice", alice_key).returncode == 0
        got = await collect(s.bootstrap, [s.audit, s.dead_letter], lambda c: len(_bad_seals(s, c)) == 3)
        assert set(_finals(s, got)) == {first}
        assert 'busguard_config_reloads_total{file="operators",result="reloaded"} 1.0' in worker.metrics()
    finally:
        assert worker.terminate() == 0, worker.tail()
        assert guard.terminate() == 0, guard.tail()


def _audit_cli(s: Setup) -> tuple[int, dict]:  # type: ignore[type-arg]
    cli = [sys.executable, "-m", "busguard.cli", "audit", "--json", "--idle-ms", "800", "--config", str(s.config)]
    done = subprocess.run(cli, capture_output=True, timeout=120, cwd=REPO)
    assert done.returncode in (0, 1), done.stderr.decode()
    return done.returncode, json.loads(done.stdout)


async def test_the_audit_proves_operator_names_and_refuses_a_forged_one(broker: EmbeddedBroker, tmp_path: Path) -> None:
    """The reconciler seals with its own key (and holds only the guard's
    public key); alice's resolution carries her signed command, so `busguard audit` proves her name from the log and the
    operators file. A resolution sealed with the reconciler's key but naming
    alice for a command she never signed fails the audit."""
    alice = identity("operator-alice")
    s = await make_setup(tmp_path, broker.bootstrap, operators=[("alice", alice)])
    alice_key = tmp_path / "alice.key"
    write_key(alice_key, alice)
    assert s.reconciler.public_key != s.guard.public_key
    # The reconciler gets only the guard's public key: the guard's private key is not on its "machine".
    no_guard_key = {"BUSGUARD_KEYS__GUARD_PUBLIC_KEY": s.guard.agent_id, "BUSGUARD_KEYS__GUARD_KEY": str(tmp_path / "absent" / "guard.key")}
    guard, worker = GuardProcess(s), GuardProcess(s, command="reconcile", env=no_guard_key)
    try:
        guard.wait_ready()
        worker.wait_ready()
        planner = sender("planner")
        conflicts = []
        for i in range(2):
            conflicts += [planner.sign(kind="handoff", task_id=f"t-{i}", receiver="x", payload=b"work"),
                          planner.sign(kind="handoff", task_id=f"t-{i}", receiver="x", payload=b"other work")]  # fmt: skip
        await produce(s.bootstrap, s.handoffs, conflicts, key=b"planner")
        got = await collect(s.bootstrap, [s.audit], lambda c: len(_held(s, c)) == 2)
        first, second = _held(s, got)
        assert _resolve(s, first, "alice", alice_key).returncode == 0
        got = await collect(s.bootstrap, [s.audit], lambda c: first in _finals(s, c))
    finally:
        assert worker.terminate() == 0, worker.tail()
        assert guard.terminate() == 0, guard.tail()
    genuine = next(r for r in got[s.audit] if r.value and audit_decoder.decode(r.value) == _finals(s, got)[first])
    verify_decision_record(genuine.value, list(genuine.headers), s.reconciler.public_key)  # the reconciler's seal, not the guard's
    with pytest.raises(AttestationError):
        verify_decision_record(genuine.value, list(genuine.headers), s.guard.public_key)
    resolution = _finals(s, got)[first]
    assert resolution.command is not None and resolution.command.signer == multikey_encode(alice.public_key)

    code, report = _audit_cli(s)
    assert code == 0 and report["ok"], report["violations"]
    assert {e["by"] for t in report["tasks"] for e in t["escalations"] if e["status"] == "resolved"} == {"operator:alice"}

    # The reconciler's key holder writes "alice rejected the second one": sealed
    # correctly, but the command in it is signed by mallory, not by alice's key.
    mallory = identity("mallory")
    esc = next(msgspec.json.decode(r.value, type=Decision) for r in got[s.audit] if r.value and b'"type":"decision"' in r.value
               and msgspec.json.decode(r.value, type=Decision).decision_id == second)  # fmt: skip
    body = msgspec.json.encode(ResolveCommand(escalation_id=second, resolve_as="reject", operator="alice", note="conflict", issued_at=1))
    forged_command = SignedCommand(
        body=body, seal=b64url_encode(sign(mallory.seed, COMMAND_CONTEXT + body)), signer=multikey_encode(alice.public_key)
    )
    forged = msgspec.structs.replace(
        resolution,
        resolution_id=resolution_id(second, "final"),
        escalation_id=second,
        task_id=esc.task_id,
        receipt_id=esc.receipt_id,
        prior_decision_id=esc.prior.decision_id if esc.prior else None,
        command=forged_command,
    )
    value = msgspec.json.encode(forged)
    att = attest_record(
        s.reconciler.agent_id, forged.resolution_id, "resolved", "reject", forged.receipt_id, forged.source, forged.resolved_at, value
    )
    headers = [
        ("busguard-decision-id", forged.resolution_id.encode()),
        ("busguard-attestation", att),
        ("busguard-seal", seal(Signer(s.reconciler.seed), att)),
    ]
    await produce(s.bootstrap, s.audit, [(value, headers)], key=(esc.task_id or second).encode())

    code, report = _audit_cli(s)
    assert code == 1 and [v["invariant"] for v in report["violations"]] == ["unproven_operator"], report["violations"]
    (v,) = report["violations"]
    assert v["decision_id"] == second and "does not verify with 'alice'" in v["detail"]
