"""Issue 22: the SDK's durable done-set and its doctests."""

from __future__ import annotations

import contextlib
import doctest
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path
from typing import Any

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


_CLAIMER = """
import sys
from busguard.sdk.doneset import SqliteDoneSet
d = SqliteDoneSet(sys.argv[1], timeout_s=30)
d.connection.execute('CREATE TABLE IF NOT EXISTS effects (decision_id TEXT, who TEXT)')
ids = [f'd-{i}' for i in range(int(sys.argv[2]))]
for i in (ids if sys.argv[3] == 'a' else ids[::-1]):
    with d.claim(i, decided_at=1) as tx:
        if tx.claimed:
            tx.connection.execute('INSERT INTO effects VALUES (?, ?)', (i, sys.argv[3]))
    if i == ids[len(ids) // 2] and sys.argv[3] == 'b':
        d.forget_before(0)  # a forget from another process, between claims
"""


def test_processes_sharing_one_sqlite_done_set_act_once_per_id(tmp_path: Path) -> None:
    db, n = tmp_path / "shared.db", 300
    SqliteDoneSet(db).close()  # the schema exists before both start
    procs = [subprocess.Popen([sys.executable, "-c", _CLAIMER, str(db), str(n), who]) for who in ("a", "b")]
    assert [p.wait(120) for p in procs] == [0, 0]
    done = SqliteDoneSet(db)
    rows = done.connection.execute("SELECT decision_id, count(*) FROM effects GROUP BY decision_id").fetchall()
    assert len(rows) == n and {c for _, c in rows} == {1}
    assert done.horizon_ms() == 0


def test_a_claim_waits_for_another_process_claim_up_to_its_timeout(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "shared.db"
    waiter = SqliteDoneSet(db, timeout_s=0.2)
    hold = (
        "import sys\n"
        "from busguard.sdk.doneset import SqliteDoneSet\n"
        "with SqliteDoneSet(sys.argv[1]).claim('d-1'):\n"
        "    print('holding', flush=True)\n"
        "    sys.stdin.readline()\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", hold, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdin is not None
    assert holder.stdout.readline() == "holding\n"
    with pytest.raises(sqlite3.OperationalError, match="locked"), waiter.claim("d-2"):
        pass
    holder.stdin.write("\n")
    holder.stdin.flush()
    assert holder.wait(30) == 0
    with waiter.claim("d-1") as tx:
        assert not tx.claimed  # the holder's mark committed
    assert not waiter.is_done("d-2")


def test_a_postgres_forget_waits_for_a_claim_in_flight_and_later_claims_see_its_horizon(postgres: Any, pg_schema: str) -> None:
    import threading

    from busguard.sdk import PostgresDoneSet

    a, b = PostgresDoneSet(postgres.dsn, schema=pg_schema), PostgresDoneSet(postgres.dsn, schema=pg_schema)
    claiming, release, forgotten = threading.Event(), threading.Event(), threading.Event()

    def claim_slowly() -> None:
        with a.claim("d-1", now_ms=50, decided_at=40) as tx:
            assert tx.claimed
            claiming.set()
            release.wait(10)

    t = threading.Thread(target=claim_slowly)
    t.start()
    claiming.wait(10)
    f = threading.Thread(target=lambda: (b.forget_before(100), forgotten.set()))
    f.start()
    assert not forgotten.wait(0.5)  # the forget waits on the horizon row the claim holds
    release.set()
    t.join()
    f.join(10)
    assert forgotten.is_set() and not b.is_done("d-1") and b.horizon_ms() == 100 == a.horizon_ms()
    with a.claim("d-1", decided_at=40) as tx:
        assert (tx.claimed, tx.before_horizon, tx.horizon_ms) == (False, True, 100)
    with a.claim("d-2", decided_at=100) as tx:
        assert tx.claimed and not tx.before_horizon
    a.close()
    b.close()


def test_a_postgres_claim_whose_effect_swallowed_a_failed_statement_raises_and_marks_nothing(postgres: Any, pg_schema: str) -> None:
    """PostgreSQL aborts a transaction at its first failed statement and
    answers the COMMIT with ROLLBACK, not an error: an effect that catches
    its own failed query must not leave the claim looking committed (ActOnce
    would then commit the offset past a task never acted on)."""
    import psycopg

    from busguard.sdk import PostgresDoneSet

    done = PostgresDoneSet(postgres.dsn, schema=pg_schema)
    with pytest.raises(RuntimeError, match="a statement in the transaction failed"):
        with done.claim("d-1", now_ms=50) as tx:
            assert tx.claimed
            with contextlib.suppress(psycopg.Error):
                tx.connection.execute("SELECT 1/0")
    assert not done.is_done("d-1")
    with done.claim("d-1", now_ms=60) as tx:  # the connection is usable again, and the id was never marked
        assert tx.claimed
    assert done.is_done("d-1")
    done.close()


def test_postgres_done_sets_opened_together_on_a_fresh_schema_all_open(postgres: Any, pg_schema: str) -> None:
    """CREATE ... IF NOT EXISTS is not safe against itself: replicas starting
    together on a fresh schema would meet a unique violation in the catalog."""
    import threading

    from busguard.sdk import PostgresDoneSet

    opened: list[PostgresDoneSet] = []
    errors: list[BaseException] = []
    go = threading.Barrier(4)

    def open_one() -> None:
        go.wait(10)
        try:
            opened.append(PostgresDoneSet(postgres.dsn, schema=pg_schema))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert errors == [] and len(opened) == 4
    for d in opened:
        d.close()
