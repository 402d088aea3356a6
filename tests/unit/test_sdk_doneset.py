"""Issue 22: the SDK's durable done-set and its doctests."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import busguard.sdk
from busguard.sdk.doneset import MAX_DECISION_ID, SqliteDoneSet, idempotency_token


def test_every_sdk_module_doctest_runs() -> None:
    failed = attempted = 0
    for info in pkgutil.iter_modules(busguard.sdk.__path__, "busguard.sdk."):
        result = doctest.testmod(importlib.import_module(info.name))
        failed += result.failed
        attempted += result.attempted
    assert failed == 0 and attempted >= 5


def test_an_effect_that_raises_rolls_back_its_mark(tmp_path: Path) -> None:
    done = SqliteDoneSet(tmp_path / "agent.db")
    done.connection.execute("CREATE TABLE effects (id INTEGER PRIMARY KEY, decision_id TEXT)")
    with pytest.raises(RuntimeError), done.claim("d-1") as tx:
        tx.connection.execute("INSERT INTO effects (decision_id) VALUES (?)", ("d-1",))
        raise RuntimeError("crash in the effect")
    assert not done.is_done("d-1")
    assert done.connection.execute("SELECT count(*) FROM effects").fetchone() == (0,)
    for _ in range(3):
        with done.claim("d-1") as tx:
            if tx.claimed:
                tx.connection.execute("INSERT INTO effects (decision_id) VALUES (?)", ("d-1",))
    assert done.connection.execute("SELECT count(*) FROM effects").fetchone() == (1,)


def test_kill_9_inside_the_transaction_leaves_neither_effect_nor_mark(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    script = (
        "import os, signal, sys\n"
        "from busguard.sdk.doneset import SqliteDoneSet\n"
        "d = SqliteDoneSet(sys.argv[1])\n"
        "d.connection.execute('CREATE TABLE IF NOT EXISTS effects (id INTEGER PRIMARY KEY, decision_id TEXT)')\n"
        "with d.claim('d-1') as tx:\n"
        "    tx.connection.execute('INSERT INTO effects (decision_id) VALUES (?)', ('d-1',))\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(db)])
    assert proc.returncode == -9
    done = SqliteDoneSet(db)
    assert not done.is_done("d-1")
    assert done.connection.execute("SELECT count(*) FROM effects").fetchone() == (0,)


def test_the_token_depends_on_the_decision_id_only() -> None:
    assert idempotency_token("a") == idempotency_token("a") != idempotency_token("b")


def test_decision_ids_are_bounded(tmp_path: Path) -> None:
    done = SqliteDoneSet(tmp_path / "agent.db")
    with pytest.raises(ValueError, match="decision_id"), done.claim("x" * (MAX_DECISION_ID + 1)):
        pass
    assert done.forget_before(0) == 0


def test_the_producer_refuses_a_sender_without_a_session() -> None:
    import hashlib

    from busguard.sdk.producer import SigningProducer
    from busguard.sdk.sender import Sender

    with pytest.raises(ValueError, match="session_path"):
        SigningProducer(object(), Sender(hashlib.sha256(b"x").digest()))


def test_the_outbox_holds_at_most_max_staged_replies_per_claim_and_forget_before_drops_old_marks(tmp_path: Path) -> None:
    from busguard.sdk.doneset import MAX_STAGED

    done = SqliteDoneSet(tmp_path / "agent.db")
    with pytest.raises(ValueError, match=f"more than {MAX_STAGED}"), done.claim("d-1", now_ms=10) as tx:
        for i in range(MAX_STAGED + 1):
            tx.stage("acks", None, b"%d" % i, [])
    assert done.outbox() == [] and not done.is_done("d-1")  # the whole claim rolled back
    with done.claim("d-1", now_ms=10) as tx:
        for i in range(MAX_STAGED):
            tx.stage("acks", None, b"%d" % i, [("h", b"v")])
    assert [s.value for s in done.outbox()] == [b"%d" % i for i in range(MAX_STAGED)]
    with done.claim("d-1", now_ms=20) as tx, pytest.raises(ValueError, match="already done"):
        tx.stage("acks", None, b"again", [])
    with done.claim("d-2", now_ms=30):
        pass
    assert done.forget_before(25) == 1 and not done.is_done("d-1") and done.is_done("d-2")
