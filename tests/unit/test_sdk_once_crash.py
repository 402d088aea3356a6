"""ActOnce's opt-in crash points: off by default, and what each point leaves behind."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from busguard.sdk import ActOnce, AdmittingConsumer, Claim, Delivery, Reply, SigningProducer, SqliteDoneSet
from busguard.sdk.once import CRASH_ENV, CRASH_POINTS, CrashPoints
from busguard.testing import GUARD_PUBLIC_KEY, agent, sender

from .test_sdk_once import Wire, _records

EXECUTOR, PLANNER = agent("executor"), agent("planner")


class Crashed(BaseException):
    pass


def _raise(point: str) -> None:
    raise Crashed(point)


def _effect(d: Delivery, tx: Claim[Any]) -> list[Reply]:
    tx.connection.execute("INSERT INTO work VALUES (?)", (d.receipt.task_id,))
    return [Reply("agents.acks", "ack", d.receipt.task_id, PLANNER, b"done")]


def _loop(wire: Wire, done: SqliteDoneSet, crash: CrashPoints | None) -> ActOnce:
    inbox = AdmittingConsumer(wire, guard_public_key=GUARD_PUBLIC_KEY, agent_id=EXECUTOR)
    return ActOnce(inbox, done, effect=_effect, producer=SigningProducer(wire, sender("executor"), legacy_receipts=True), crash=crash)


def test_off_unless_the_variable_is_set(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(CRASH_ENV, raising=False)
    assert _loop(Wire(), SqliteDoneSet(tmp_path / "a.db"), None).crash is None
    monkeypatch.setenv(CRASH_ENV, "after_claim:0.5")
    crash = _loop(Wire(), SqliteDoneSet(tmp_path / "b.db"), None).crash
    assert crash is not None and crash.probability == {"after_claim": 0.5}


@pytest.mark.parametrize("spec", ["after_lunch:0.1", "after_claim:2", "after_claim:x"])
def test_a_bad_spec_names_the_variable_and_what_is_allowed(spec: str) -> None:
    with pytest.raises(ValueError, match=CRASH_ENV):
        CrashPoints(spec)


# point -> (work rows, outbox entries, acks sent, offsets committed) left when it fires on the first record
LEFT = {
    "after_claim": ([], 0, 0, 0),
    "after_effect_commit": (["t-0"], 1, 0, 0),
    "after_reply_sent": (["t-0"], 1, 1, 0),
    "before_offset_commit": (["t-0"], 0, 1, 0),
}


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_each_point_fires_where_it_says_and_the_restart_acts_once(point: str, tmp_path: Path) -> None:
    done = SqliteDoneSet(tmp_path / "agent.db")
    done.connection.execute("CREATE TABLE work (task TEXT)")
    wire = Wire()
    wire.queue = _records(1)
    with pytest.raises(Crashed, match=point):
        asyncio.run(_loop(wire, done, CrashPoints(f"{point}:1", kill=_raise)).step())
    work = [r[0] for r in done.connection.execute("SELECT task FROM work")]
    assert (work, len(done.outbox()), len(wire.sent), len(wire.commits)) == LEFT[point]
    wire.queue = _records(1)  # nothing committed: re-delivered
    asyncio.run(_loop(wire, done, None).step())
    assert [r[0] for r in done.connection.execute("SELECT task FROM work")] == ["t-0"] and done.outbox() == []
    assert len({s[2] for s in wire.sent}) == 1 and wire.commits  # a resent ack is the same bytes


def test_probability_zero_never_fires_and_a_seeded_rng_decides() -> None:
    fired: list[str] = []
    CrashPoints("after_claim:0", kill=fired.append).reached("after_claim")
    cp = CrashPoints("after_claim:0.5", rng=random.Random(7), kill=fired.append)
    for _ in range(100):
        cp.reached("after_claim")
        cp.reached("before_offset_commit")  # not armed
    assert set(fired) == {"after_claim"} and 0 < len(fired) < 100


def test_the_default_kill_is_a_real_sigkill_announced_on_stderr() -> None:
    code = "from busguard.sdk.once import CrashPoints; CrashPoints('after_claim:1').reached('after_claim'); print('survived')"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == -signal.SIGKILL and "survived" not in proc.stdout
    assert "busguard-agent-crash after_claim" in proc.stderr
