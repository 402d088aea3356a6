"""The guard logs every decision that is not a forward, one line each, with
its context (runtime/guard.py `_account`), whatever logger it binds."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

from structlog.testing import capture_logs

from busguard.config import load_config
from busguard.protocol.identity import agent_id_for_key
from busguard.protocol.keyfile import Identity
from busguard.protocol.registry import KeyRegistry
from busguard.protocol.signing import public_key_from_seed
from busguard.runtime.guard import Guard
from busguard.runtime.watched import WatchedFile
from busguard.state.memory.store import MemoryStore

from .harness import NOW, Rec, agent, sender

SEED = hashlib.sha256(b"decision-log-guard").digest()
KEY = public_key_from_seed(SEED)
IDENT = Identity(seed=SEED, public_key=KEY, agent_id=agent_id_for_key(KEY))


def test_each_refusal_in_a_batch_is_logged_once_and_forwards_are_not(tmp_path: Path) -> None:
    (tmp_path / "keys.toml").write_text(f'[[agent]]\nid = "{agent("planner")}"\n')
    (tmp_path / "busguard.toml").write_text('[[routes]]\nname = "r"\ninputs = ["in"]\ndownstream = "out"\n[ops]\nport = 0\n')
    cfg = load_config(tmp_path / "busguard.toml", env={})
    keys = WatchedFile(tmp_path / "keys.toml", KeyRegistry.load, what="key registry")
    guard = Guard(cfg, keys=keys, identity=IDENT, store=MemoryStore(created_at=NOW - 3_600_000, genesis=True), clock_ms=lambda: NOW)
    s = sender("planner")
    signed = [s.sign(kind="handoff", task_id=f"t{i}", receiver=agent("executor"), payload=b"work") for i in range(3)]
    # offsets 0-2 new, 3 and 4 exact re-sends of 0 and 1, 5 a payload that does not match its receipt
    records = [Rec("in", 0, o, b"k", r.value, r.headers) for o, r in enumerate(signed)]
    records += [Rec("in", 0, 3, b"k", signed[0].value, signed[0].headers), Rec("in", 0, 4, b"k", signed[1].value, signed[1].headers)]
    records.append(Rec("in", 0, 5, b"k", b"other", signed[2].headers))
    with capture_logs() as logs:
        asyncio.run(guard.process(records))
    lines = [e for e in logs if e["event"] == "decision"]
    assert [(e["offset"], e["outcome"], e["reason"]) for e in lines] == [
        (3, "duplicate", "exact_duplicate"),
        (4, "duplicate", "exact_duplicate"),
        (5, "reject", "payload_hash_mismatch"),
    ]
    assert all(e["topic"] == "in" and e["partition"] == 0 and e["log_level"] == "info" for e in lines)
