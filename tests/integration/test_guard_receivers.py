"""A route that declares its receivers, through a real guard: a handoff for its
receiver is admitted and opens for that receiver only; a handoff for anyone
else is dead-lettered as `wrong_receiver` and uses up nothing."""

from __future__ import annotations

import tomllib
from pathlib import Path

import msgspec
import pytest

from busguard import AttestationError, open_admitted
from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, all_decided, collect, header, identity, make_setup, produce, sender
from busguard.protocol.records import Decision

EXECUTOR = identity("executor").agent_id
AUDITOR = identity("auditor").agent_id


async def test_a_route_with_receivers_rejects_a_handoff_for_anyone_else(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap)
    doc = tomllib.loads(s.config.read_text())
    doc["routes"][0]["receivers"] = ["ink:" + EXECUTOR.removeprefix("tulpa:")]  # the other spelling of its key
    s.config.write_text(msgspec.toml.encode(doc).decode())
    guard = GuardProcess(s)
    try:
        guard.wait_ready()
        planner = sender("planner")
        mine = planner.sign(kind="handoff", task_id="t-1", receiver=EXECUTOR, payload=b"{}")
        theirs = planner.sign(kind="handoff", task_id="t-2", receiver=AUDITOR, payload=b"{}")
        await produce(s.bootstrap, s.handoffs, [mine, theirs])
        got = await collect(s.bootstrap, s.outputs, lambda c: all_decided(s, c, 2))
        assert guard.healthy()
    finally:
        assert guard.terminate() == 0, guard.tail()
    reasons = {
        msgspec.json.decode(r.value, type=Decision).task_id: msgspec.json.decode(r.value, type=Decision).reason for r in got[s.audit]
    }
    assert reasons == {"t-1": "admitted", "t-2": "wrong_receiver"}
    (dead,) = got[s.dead_letter]
    assert header(dead, "busguard-reason") == b"wrong_receiver" and dead.value == theirs.value
    (fwd,) = got[s.downstream_handoffs]
    assert open_admitted(fwd.value, list(fwd.headers), s.guard.public_key, EXECUTOR).receipt.task_id == "t-1"
    with pytest.raises(AttestationError):
        open_admitted(fwd.value, list(fwd.headers), s.guard.public_key, AUDITOR)
