"""Issue 22: the act-once loop over both done-sets (SQLite, and a real embedded PostgreSQL).

The wire here is a stand-in consumer and producer (these are unit tests of
the loop's order); tests/integration/test_agents_seed000.py runs the same
loop against a real broker and a real `busguard run`, killed with -9."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from aiokafka.structs import TopicPartition

from busguard.sdk import ActOnce, AdmittingConsumer, Claim, Delivery, Fetched, PostgresDoneSet, Reply, SigningProducer, SqliteDoneSet
from busguard.testing import GUARD_PUBLIC_KEY, Harness, agent, sender

EXECUTOR, PLANNER = agent("executor"), agent("planner")


class Wire:
    """Hands out the queued records once each (a re-delivery is queued again), records commits and sends."""

    def __init__(self) -> None:
        self.queue: list[Fetched] = []
        self.commits: list[dict[Any, int]] = []
        self.sent: list[tuple[str, bytes | None, bytes, list[tuple[str, bytes]]]] = []
        self.fail_sends = 0

    async def getmany(self, timeout_ms: int, max_records: int) -> dict[int, list[Fetched]]:
        out, self.queue = self.queue[:max_records], self.queue[max_records:]
        return {0: out}

    async def commit(self, offsets: dict[Any, int]) -> None:
        self.commits.append(offsets)

    async def send_and_wait(
        self, topic: str, *, value: bytes, key: bytes | None, headers: list[tuple[str, bytes]], partition: int | None = None
    ) -> None:
        if self.fail_sends:
            self.fail_sends -= 1
            raise ConnectionError("broker gone")
        self.sent.append((topic, key, value, list(headers)))


@pytest.fixture(params=["sqlite", "postgres"])
def done(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "sqlite":
        d: Any = SqliteDoneSet(tmp_path / "agent.db")
        d.connection.execute("CREATE TABLE work (task TEXT)")
    else:
        schema = request.getfixturevalue("pg_schema")
        d = PostgresDoneSet(request.getfixturevalue("postgres").dsn, schema=schema)
        d.connection.execute(f'CREATE TABLE "{schema}".work (task text)')
        d.connection.execute(f'SET search_path TO "{schema}"')
    yield d
    d.close()


def _records(n: int) -> list[Fetched]:
    h = Harness()
    out = []
    for i in range(n):
        rec = sender("planner").sign(kind="handoff", task_id=f"t-{i}", receiver=EXECUTOR, payload=b"{}")
        value, headers = h.forward(rec)
        out.append(Fetched("agents.out", 0, i, value, headers))
    return out


def _param(done: Any) -> str:
    return "?" if isinstance(done, SqliteDoneSet) else "%s"


def _work(done: Any) -> list[str]:
    return sorted(r[0] for r in done.connection.execute("SELECT task FROM work").fetchall())


def _loop(wire: Wire, done: Any, effect: Any = None, **kw: Any) -> ActOnce:
    inbox = AdmittingConsumer(wire, guard_public_key=GUARD_PUBLIC_KEY, agent_id=EXECUTOR)
    producer = SigningProducer(wire, sender("executor"), legacy_receipts=True)
    return ActOnce(inbox, done, effect=effect, producer=producer, **kw) if kw.get("external") is None else ActOnce(inbox, done, **kw)


def _acking(done: Any, crash_on: str | None = None) -> Any:
    def effect(d: Delivery, tx: Claim[Any]) -> list[Reply]:
        tx.connection.execute(f"INSERT INTO work VALUES ({_param(done)})", (d.receipt.task_id,))
        if d.receipt.task_id == crash_on:
            raise RuntimeError("crashed mid-effect")
        return [Reply("agents.acks", "ack", d.receipt.task_id, PLANNER, b"done")]

    return effect


def test_every_delivery_acts_once_and_redeliveries_are_skipped(done: Any) -> None:
    wire = Wire()
    recs = _records(5)
    wire.queue = [*recs, recs[1], recs[3]]  # a re-emission of two forwards
    step = asyncio.run(_loop(wire, done, _acking(done)).step())
    assert (step.acted, step.skipped, step.replies_sent) == (5, 2, 5)
    assert _work(done) == [f"t-{i}" for i in range(5)]
    assert [s[0] for s in wire.sent] == ["agents.acks"] * 5 and wire.commits and done.outbox() == []


def test_an_effect_that_raises_leaves_no_mark_no_effect_and_no_commit(done: Any) -> None:
    wire = Wire()
    recs = _records(3)
    wire.queue = list(recs)
    with pytest.raises(RuntimeError):
        asyncio.run(_loop(wire, done, _acking(done, crash_on="t-1")).step())
    assert _work(done) == ["t-0"] and wire.commits == [] and len(done.outbox()) == 1  # t-0's ack committed, unsent
    wire.queue = list(recs)  # not committed: re-delivered
    step = asyncio.run(_loop(wire, done, _acking(done)).step())
    assert (step.acted, step.skipped) == (2, 1) and _work(done) == ["t-0", "t-1", "t-2"]
    assert sorted(s[2] for s in wire.sent) == [b"done"] * 3


def test_a_reply_unsent_at_a_crash_is_resent_byte_for_byte(done: Any) -> None:
    wire = Wire()
    wire.queue = _records(1)
    wire.fail_sends = 1
    with pytest.raises(ConnectionError):
        asyncio.run(_loop(wire, done, _acking(done)).step())
    (staged,) = done.outbox()
    wire.queue = _records(1)  # the forward comes back: its id is done
    step = asyncio.run(_loop(wire, done, _acking(done)).step())
    assert (step.acted, step.skipped, step.replies_sent) == (0, 1, 1)
    assert wire.sent == [(staged.topic, staged.key, staged.value, staged.headers)] and done.outbox() == []


def test_an_external_effect_gets_the_decision_ids_token_and_runs_once(done: Any) -> None:
    wire = Wire()
    recs = _records(2)
    wire.queue = [*recs, recs[0]]
    tokens: list[str] = []

    async def call(d: Delivery, token: str) -> None:
        tokens.append(token)

    step = asyncio.run(_loop(wire, done, external=call).step())
    assert (step.acted, step.skipped) == (2, 1) and len(set(tokens)) == 2


def test_the_loop_takes_exactly_one_kind_of_effect(tmp_path: Path) -> None:
    inbox = AdmittingConsumer(None, guard_public_key=GUARD_PUBLIC_KEY, agent_id=EXECUTOR)
    with pytest.raises(TypeError):
        ActOnce(inbox, SqliteDoneSet(tmp_path / "a.db"))


def test_two_replicas_on_one_postgres_done_set_claim_an_id_once(postgres: Any, pg_schema: str) -> None:
    a, b = PostgresDoneSet(postgres.dsn, schema=pg_schema), PostgresDoneSet(postgres.dsn, schema=pg_schema)
    entered, results = threading.Event(), []
    release = threading.Event()

    def first() -> None:
        with a.claim("d-1") as tx:
            entered.set()
            release.wait(10)
            results.append(("a", tx.claimed))

    t = threading.Thread(target=first)
    t.start()
    entered.wait(10)
    second = threading.Thread(target=lambda: results.append(("b", b.claim("d-1").__enter__().claimed)))
    second.start()
    second.join(0.5)
    assert second.is_alive()  # b waits on a's uncommitted mark
    release.set()
    t.join()
    second.join(10)
    assert results == [("a", True), ("b", False)]
    a.close()
    b.close()


def _forward_at(now: int, task_id: str, offset: int) -> Fetched:
    """A forward the test guard decided at `now` (its attestation's `decided_at`)."""
    rec = sender("planner", now=now).sign(kind="handoff", task_id=task_id, receiver=EXECUTOR, payload=b"{}")
    value, headers = Harness(now=now, store_created=now - 3_600_000).forward(rec)
    return Fetched("agents.out", 0, offset, value, headers)


def _reopened(done: Any, tmp_path: Path) -> Any:
    """The same done-set opened again, as another process would."""
    if isinstance(done, SqliteDoneSet):
        return SqliteDoneSet(tmp_path / "agent.db")
    schema = done.connection.execute("SELECT current_schema()").fetchone()[0]
    dsn = done.connection.info.dsn
    again = PostgresDoneSet(dsn, schema=schema)
    again.connection.execute(f'SET search_path TO "{schema}"')
    return again


@pytest.mark.parametrize("kind", ["effect", "external"])
def test_a_copy_decided_before_the_horizon_is_refused_and_the_horizon_is_durable(done: Any, tmp_path: Path, kind: str) -> None:
    wire, calls = Wire(), []

    async def call(d: Delivery, token: str) -> None:
        calls.append(d.receipt.task_id)

    def loop(d: Any) -> ActOnce:
        return _loop(wire, d, _acking(d)) if kind == "effect" else _loop(wire, d, external=call)

    old = _records(2)
    wire.queue = list(old)
    assert asyncio.run(loop(done).step())[:3] == (2, 0, 0)
    horizon = time.time_ns() // 1_000_000 + 1  # after every mark the loop stamped
    assert done.forget_before(horizon) == 2 and done.horizon_ms() == horizon
    done.forget_before(horizon - 1000)  # never moves back
    assert done.horizon_ms() == horizon

    again = _reopened(done, tmp_path)
    try:
        assert again.horizon_ms() == horizon
        wire.queue = [old[0]._replace(offset=3), _forward_at(horizon + 5, "t-new", 4), old[1]._replace(offset=5)]  # copies around a new one
        with structlog.testing.capture_logs() as logs:
            step = asyncio.run(loop(again).step())
        assert step[:3] == (1, 0, 2)  # acted on the new one only
        assert [(e["offset"], e["reason"]) for e in logs if e["event"] == "record_refused"] == [
            (3, "before_horizon"),
            (5, "before_horizon"),
        ]
        assert wire.commits[-1] == {TopicPartition("agents.out", 0): 6}
        if kind == "effect":
            assert _work(again) == ["t-0", "t-1", "t-new"]
        else:
            assert calls == ["t-0", "t-1", "t-new"]
    finally:
        if again is not done:
            again.close()
