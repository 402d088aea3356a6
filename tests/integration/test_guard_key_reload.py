"""A running guard follows its key registry file: a revocation and an
enrolment written while it runs decide the very next records, no restart;
a broken file changes nothing and is reported."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import msgspec

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, Setup, collect, identity, make_setup, produce, sender
from busguard.protocol.records import Decision
from busguard.protocol.timestamps import format_timestamp
from busguard.sdk.sender import SignedRecord

WORK = b'{"op":"summarize"}'


def _registry(s: Setup, text: str) -> None:
    tmp = s.dir / "keys.toml.new"
    tmp.write_text(text)
    os.replace(tmp, s.dir / "keys.toml")  # atomically, as docs/operations.md says


def _agents(*names: str, revoked: str | None = None) -> str:
    out = ""
    for name in names:
        out += f'[[agent]]\nid = "{identity(name).agent_id}"\n'
        if name == revoked:
            out += f'revoked_at = "{format_timestamp(0)}"\n'  # long ago: revoked from now on
    return out


def _reloads(metrics: str, result: str) -> float:
    m = re.search(rf'busguard_config_reloads_total{{file="key_registry",result="{result}"}} (\S+)', metrics)
    return float(m.group(1)) if m else 0.0


async def _decide(s: Setup, records: list[SignedRecord], seen: int) -> list[Decision]:
    """Produce `records` and wait until their decisions are on the audit topic."""
    await produce(s.bootstrap, s.handoffs, records)
    got = await collect(s.bootstrap, [s.audit], lambda c: len(c[s.audit]) >= seen + len(records))
    return [msgspec.json.decode(r.value, type=Decision) for r in got[s.audit]][seen:]


async def test_registry_changes_apply_to_the_next_batch_without_a_restart(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, agents=("planner", "executor"))
    guard = GuardProcess(s)
    guard.wait_ready()
    planner, outsider = sender("planner"), sender("outsider")
    pid = guard.proc.pid
    try:
        first = await _decide(s, [planner.sign(kind="handoff", task_id="t-1", receiver="x", payload=WORK)], 0)
        assert [d.reason for d in first] == ["admitted"]

        # Revoke the planner and enrol an outsider, while the guard runs.
        _registry(s, _agents("planner", "executor", "outsider", revoked="planner"))
        await asyncio.sleep(0.05)
        second = await _decide(
            s,
            [
                planner.sign(kind="handoff", task_id="t-2", receiver="x", payload=WORK),
                outsider.sign(kind="handoff", task_id="t-3", receiver="x", payload=WORK),
            ],
            1,
        )
        assert [d.reason for d in second] == ["revoked_key", "admitted"]

        # A broken file: logged and counted, and the registry in force stays.
        _registry(s, '[[agent]]\nid = ""\n')
        third = await _decide(s, [outsider.sign(kind="handoff", task_id="t-4", receiver="x", payload=WORK)], 3)
        assert [d.reason for d in third] == ["admitted"]
        metrics = guard.metrics()
        assert (_reloads(metrics, "reloaded"), _reloads(metrics, "error")) == (1.0, 1.0)
        assert "key registry not reloaded" in guard.tail(200) and "agent[0].id" in guard.tail(200)
        assert guard.proc.pid == pid and guard.proc.poll() is None  # the same process throughout
    finally:
        assert guard.terminate() == 0, guard.tail()


async def test_a_non_utf8_or_unreadable_registry_keeps_the_old_one_and_the_guard_running(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, agents=("planner", "executor"))
    guard = GuardProcess(s)
    guard.wait_ready()
    planner, outsider = sender("planner"), sender("outsider")
    pid = guard.proc.pid
    registry = s.dir / "keys.toml"
    try:
        # Not UTF-8: an editor saved it in Latin-1, enrolling the outsider. Nothing changes.
        tmp = s.dir / "keys.toml.new"
        tmp.write_bytes((_agents("planner", "executor", "outsider") + "# edited by J\xfcrgen\n").encode("latin-1"))
        os.replace(tmp, registry)
        first = await _decide(
            s,
            [
                planner.sign(kind="handoff", task_id="t-1", receiver="x", payload=WORK),
                outsider.sign(kind="handoff", task_id="t-2", receiver="x", payload=WORK),
            ],
            0,
        )
        assert [d.reason for d in first] == ["admitted", "unknown_sender"]
        assert "key registry not reloaded" in guard.tail(200) and "0xfc" in guard.tail(200)

        # Unreadable: the path is a directory for a while. Still the old registry, still running.
        registry.unlink()
        registry.mkdir()
        second = await _decide(s, [planner.sign(kind="handoff", task_id="t-3", receiver="x", payload=WORK)], 2)
        assert [d.reason for d in second] == ["admitted"]
        registry.rmdir()

        # A valid edit is picked up.
        _registry(s, _agents("planner", "executor", "outsider"))
        third = await _decide(s, [outsider.sign(kind="handoff", task_id="t-4", receiver="x", payload=WORK)], 3)
        assert [d.reason for d in third] == ["admitted"]
        metrics = guard.metrics()
        assert (_reloads(metrics, "reloaded"), _reloads(metrics, "error")) == (1.0, 2.0), metrics
        assert guard.proc.pid == pid and guard.proc.poll() is None
    finally:
        assert guard.terminate() == 0, guard.tail()
