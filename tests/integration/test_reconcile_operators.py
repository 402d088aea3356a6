"""Operators resolve with their own keys, against the real broker: the name in
the audit log is the one the operators file gives the key, another name is
refused, the guard key can be barred from resolving, and removing an
operator from the file (while the reconciler runs) withdraws the key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from busguard.protocol.keyfile import write_key
from busguard.reconcile.records import Resolution, audit_decoder
from busguard.runtime.broker import EmbeddedBroker

from .guardkit import REPO, GuardProcess, Setup, collect, header, identity, make_setup, produce, sender


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
