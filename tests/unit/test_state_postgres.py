"""The PostgreSQL store against a real server (tests/pgkit.py): check-and-record
across guards, the fences, expiry, reconnection, and secrets in logs.

The race tests come in two forms. The deterministic ones interleave two
guards exactly where a lost race would hurt: guard B commits between guard
A's reads and A's writes (a proxy runs B inside A's decision function). The
process test releases two processes with a barrier, many times, and counts
admissions. Without the conditional writes of state/postgres/store.py (replace
`pgsql.returned` by a plain execute) the deterministic tests admit twice,
and so, in most runs, does the process test."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import psycopg
import pytest
import structlog

from busguard.admission.types import AdmissionPolicy
from busguard.sdk.sender import SignedRecord
from busguard.state.keys import KeySet
from busguard.state.postgres import db as pgsql
from busguard.state.postgres.db import StateUnavailable, redact
from busguard.state.postgres.store import PostgresStore
from busguard.state.snapshot import Snapshot
from busguard.state.store import BatchFn
from busguard.state.writes import BatchWrites
from tests.pgkit import EmbeddedPostgres

from .harness import NOW, Harness, agent, sender

REPO = Path(__file__).resolve().parents[2]
CREATED = NOW - 3_600_000


@pytest.fixture
def open_store(postgres: EmbeddedPostgres, pg_schema: str) -> Iterator[Callable[..., PostgresStore]]:
    """Stores on one schema: each is a guard with its own connection."""
    opened: list[PostgresStore] = []

    def make(**kw: object) -> PostgresStore:
        s = PostgresStore(postgres.dsn, now_ms=CREATED, schema=pg_schema, **kw)  # type: ignore[arg-type]
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


class Interleaved:
    """A store whose first batch lets `meanwhile` run (and commit, on another
    connection) after this batch has read and before it writes."""

    def __init__(self, store: PostgresStore, meanwhile: Callable[[], None]) -> None:
        self.store = store
        self.meanwhile: Callable[[], None] | None = meanwhile
        self.calls = 0

    def run_batch(self, keys: KeySet, now_ms: int, fn: BatchFn) -> None:
        def wrapped(snap: Snapshot) -> BatchWrites:
            self.calls += 1
            if self.meanwhile is not None:
                go, self.meanwhile = self.meanwhile, None
                go()
            return fn(snap)

        return self.store.run_batch(keys, now_ms, wrapped)

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)


def _handoff(task: str = "t", who: str = "planner", **kw: object) -> SignedRecord:
    return sender(who).sign(kind="handoff", task_id=task, receiver=agent("executor"), payload=b"p", **kw)  # type: ignore[arg-type]


def _guards(open_store: Callable[..., PostgresStore], meanwhile_record: SignedRecord) -> tuple[Harness, Harness, Interleaved]:
    b = Harness(store=open_store())
    b.topic = "agents.in.b"
    proxy = Interleaved(open_store(), lambda: None)
    a = Harness(store=proxy)  # type: ignore[arg-type]
    a.topic = "agents.in.a"
    proxy.meanwhile = lambda: b.feed(meanwhile_record) and None
    return a, b, proxy


def test_a_copy_committed_between_read_and_write_is_seen_on_retry(open_store: Callable[..., PostgresStore]) -> None:
    rec = _handoff()
    a, b, proxy = _guards(open_store, rec)
    d = a.one(rec)
    assert proxy.calls == 2, "the lost race must rerun the batch on fresh reads"
    first = b.store.task("handoff", "t", NOW)
    assert first is not None and first.source.topic == "agents.in.b"
    assert d.outcome == "duplicate" and d.reason == "exact_duplicate"


def test_same_nonce_other_task_races_to_one_admission(open_store: Callable[..., PostgresStore]) -> None:
    theirs, ours = _handoff("t1", nonce="shared-nonce-000001"), _handoff("t2", nonce="shared-nonce-000001")
    a, b, proxy = _guards(open_store, theirs)
    d = a.one(ours)
    assert proxy.calls == 2 and d.reason == "nonce_replay"
    assert a.store.task("handoff", "t2", NOW) is None


def test_same_task_other_nonce_races_to_one_witness(open_store: Callable[..., PostgresStore]) -> None:
    theirs, ours = _handoff("t"), _handoff("t")
    a, b, proxy = _guards(open_store, theirs)
    d = a.one(ours)
    assert proxy.calls == 2 and d.outcome == "escalate"
    t = a.store.task("handoff", "t", NOW)
    assert t is not None and t.receipt_id == theirs.receipt_id


def test_concurrent_sequences_of_one_session_both_land_in_the_window(open_store: Callable[..., PostgresStore], tmp_path: Path) -> None:
    s = sender("planner", session_path=tmp_path / "session")
    one, two = (
        s.sign(kind="handoff", task_id="s1", receiver=agent("executor"), payload=b"p"),
        s.sign(kind="handoff", task_id="s2", receiver=agent("executor"), payload=b"p"),
    )
    a, b, proxy = _guards(open_store, one)
    assert a.one(two).reason == "admitted" and proxy.calls == 2
    # sequence 1 again, under a new nonce and task: only the window can refuse it
    again = s.sign_receipt(msgspec.structs.replace(one.receipt, nonce="fresh-nonce-0000001", task_id="s3"), b"p")
    assert b.one(again).reason == "sequence_replay"


def test_two_guards_deciding_one_position_agree(open_store: Callable[..., PostgresStore]) -> None:
    """A rebalance overlap: both guards hold the same input record."""
    rec = _handoff()
    b = Harness(store=open_store())
    proxy = Interleaved(open_store(), lambda: None)
    a = Harness(store=proxy)  # type: ignore[arg-type]
    proxy.meanwhile = lambda: b.feed(rec, offset=7) and None
    d = a.one(rec, offset=7)
    assert proxy.calls == 2
    theirs = b.store.decision_at(d.source)
    assert theirs is not None and msgspec.json.encode(theirs) == msgspec.json.encode(d)  # re-emitted, not judged a replay of itself


def _racer(
    dsn: str, schema: str, topic: str, rounds: list[list[tuple[bytes, list[tuple[str, bytes]]]]], barrier: object, out: object
) -> None:
    h = Harness(store=PostgresStore(dsn, now_ms=CREATED, schema=schema))
    h.topic = topic
    rng = random.Random(topic)
    for batch in rounds:
        items = list(batch)
        rng.shuffle(items)  # each guard sees the copies in its own order
        barrier.wait()  # type: ignore[attr-defined]
        for d in h.feed_raw(items):
            out.put((d.receipt_id, d.reason))  # type: ignore[attr-defined]
    out.put(None)  # type: ignore[attr-defined]


def test_two_processes_given_copies_at_the_same_moment_admit_each_once(postgres: EmbeddedPostgres, pg_schema: str) -> None:
    PostgresStore(postgres.dsn, now_ms=CREATED, schema=pg_schema).close()
    rounds = [[(r.value, r.headers) for r in (_handoff(f"r{i}-{j}") for j in range(8))] for i in range(60)]
    ctx = multiprocessing.get_context("fork")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(postgres.dsn, pg_schema, f"agents.in.{n}", rounds, barrier, out)) for n in "ab"]
    for p in procs:
        p.start()
    reasons: dict[str | None, list[str]] = {}
    done = 0
    while done < 2:
        item = out.get(timeout=120)
        if item is None:
            done += 1
            continue
        reasons.setdefault(item[0], []).append(item[1])
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    assert len(reasons) == 60 * 8
    for rid, rs in reasons.items():
        assert sorted(rs) == ["admitted", "exact_duplicate"], (rid, rs)


def test_rearm_by_one_guard_fences_the_other_from_its_next_batch(open_store: Callable[..., PostgresStore]) -> None:
    a, b = open_store(), open_store()
    assert a.trusted_from == CREATED and b.created_at == CREATED and not b.created
    assert b.rearm(NOW) == NOW and a.rearm(NOW - 5) == NOW  # never backwards
    h = Harness(store=a)
    assert h.one(_handoff()).reason == "store_warming"


def test_genesis_has_no_fence_and_refuses_an_existing_store(postgres: EmbeddedPostgres, pg_schema: str) -> None:
    g = PostgresStore(postgres.dsn, now_ms=CREATED, schema=pg_schema, genesis=True)
    assert g.trusted_from is None and g.origin == "genesis"
    assert Harness(store=g).one(_handoff()).reason == "admitted"
    g.close()
    with pytest.raises(FileExistsError):
        PostgresStore(postgres.dsn, now_ms=NOW, schema=pg_schema, genesis=True)


def test_watermarks_follow_decisions_and_never_go_back(open_store: Callable[..., PostgresStore]) -> None:
    s = open_store()
    h = Harness(store=s)
    h.feed(_handoff("a"), _handoff("b"), offset=None)
    h.feed(_handoff("c"), offset=40)
    h.feed(_handoff("d"), offset=3)
    assert s.partition_watermarks() == {("agents.in", 0): 40}


def test_expiry_deletes_in_chunks(open_store: Callable[..., PostgresStore], monkeypatch: pytest.MonkeyPatch) -> None:
    s = open_store()
    h = Harness(store=s, policy=AdmissionPolicy(nonce_retention_ms=600_000))
    h.feed(*[_handoff(f"x{i}") for i in range(25)])
    monkeypatch.setattr(pgsql, "EXPIRE_CHUNK", 7)
    assert s.expire(NOW + 600_000) == 25  # the nonces, 7 at a time; tasks and decisions live on
    assert s.counts() == {"decisions": 25, "nonces": 0, "windows": 0, "tasks": 25, "policy": 0}


def test_redact_hides_passwords_in_both_dsn_forms() -> None:
    assert redact("postgresql://guard:s3cret@db:5432/bus") == "postgresql://guard:***@db:5432/bus"
    assert redact("postgresql://db/bus?user=g&password=s3cret&sslmode=require") == "postgresql://db/bus?user=g&password=***&sslmode=require"
    assert redact("host=db user=g password=s3cret dbname=bus") == "host=db user=g password=*** dbname=bus"
    assert redact("host=db password='a b\\' c' dbname=bus") == "host=db password=*** dbname=bus"
    assert redact("postgresql://db/bus") == "postgresql://db/bus"


def test_unreachable_database_fails_after_the_retry_budget_without_the_password() -> None:
    from tests.pgkit import free_port

    dsn = f"postgresql://guard:hunter2-secret@127.0.0.1:{free_port()}/bus"
    with structlog.testing.capture_logs() as logs, pytest.raises(StateUnavailable) as err:
        PostgresStore(dsn, now_ms=NOW, retry_s=0.3)
    assert "hunter2" not in str(err.value) and "guard:***@127.0.0.1" in str(err.value)
    assert logs and all("hunter2" not in repr(entry) for entry in logs)


def test_a_restarted_server_is_waited_for_and_nothing_is_lost(tmp_path: Path) -> None:
    with EmbeddedPostgres() as pg:
        s = PostgresStore(pg.dsn, now_ms=CREATED, schema="restart")
        h = Harness(store=s)
        before = _handoff("before")
        assert h.one(before).reason == "admitted"
        pg.stop(signal.SIGKILL)  # a crash, with the store's connection open
        threading.Timer(1.0, pg.start).start()
        assert h.one(_handoff("during")).reason == "admitted"  # waits, reconnects, retries
        assert s.session.reconnects >= 1
        assert h.one(before).reason == "exact_duplicate"  # the crash lost nothing committed
        assert s.counts()["tasks"] == 2
        s.close()


CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    from tests.unit.harness import Harness, sender, agent, NOW
    from busguard.state.postgres.store import PostgresStore
    h = Harness(store=PostgresStore({dsn!r}, now_ms=NOW - 3_600_000, schema={schema!r}))
    s = sender("planner")
    i = 0
    while True:
        recs = [s.sign(kind="handoff", task_id=f"task-{{i}}-{{j}}", receiver=agent("executor"), payload=b"p") for j in range(20)]
        assert all(d.outcome == "forward" for d in h.feed(*recs))
        print(i, flush=True)
        i += 1
    """
)


def test_kill_9_of_a_guard_keeps_every_committed_batch_and_no_partial_one(postgres: EmbeddedPostgres, pg_schema: str) -> None:
    code = CHILD.format(repo=str(REPO), dsn=postgres.dsn, schema=pg_schema)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    acknowledged = []
    for line in child.stdout:
        acknowledged.append(int(line))
        if len(acknowledged) == 15:
            os.kill(child.pid, signal.SIGKILL)
            break
    child.wait()
    # a transaction the kill cut short is invisible: nothing uncommitted is ever read
    store = PostgresStore(postgres.dsn, now_ms=NOW, schema=pg_schema)
    try:
        for i in acknowledged:
            for j in range(20):
                t = store.task("handoff", f"task-{i}-{j}", NOW)
                assert t is not None and store.decision_at(t.source) is not None, f"committed admission task-{i}-{j} lost"
        counts = store.counts()
        assert counts["tasks"] % 20 == 0 and counts["tasks"] >= 15 * 20
        assert counts["tasks"] == counts["decisions"] == counts["nonces"]
    finally:
        store.close()


# -- the database emptied, replaced, or behind after a failover: the fence holds ----


def test_tables_emptied_under_a_running_guard_fence_it(
    open_store: Callable[..., PostgresStore], postgres: EmbeddedPostgres, pg_schema: str
) -> None:
    s = open_store()
    h = Harness(store=s)
    rec = _handoff("kept")
    assert h.one(rec).reason == "admitted"
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {pg_schema}.meta, {pg_schema}.decisions, {pg_schema}.nonces, {pg_schema}.tasks, {pg_schema}.windows")
    assert h.one(rec).reason == "store_warming"  # the replay it forgot is refused, not admitted
    assert s.trusted_from == NOW and s.created_at == NOW


def test_schema_dropped_under_a_running_guard_is_recreated_fenced(
    open_store: Callable[..., PostgresStore], postgres: EmbeddedPostgres, pg_schema: str
) -> None:
    s = open_store()
    h = Harness(store=s)
    rec = _handoff("kept")
    assert h.one(rec).reason == "admitted"
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {pg_schema} CASCADE")
    assert h.one(rec).reason == "store_warming"
    assert s.origin == "created" and s.trusted_from == NOW


def test_a_store_replaced_by_another_rearms(open_store: Callable[..., PostgresStore], postgres: EmbeddedPostgres, pg_schema: str) -> None:
    s = open_store()
    h = Harness(store=s)
    assert h.one(_handoff("a")).reason == "admitted"
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {pg_schema} CASCADE")
    PostgresStore(postgres.dsn, now_ms=CREATED - 5, schema=pg_schema, genesis=True).close()  # someone else's, unfenced
    assert h.one(_handoff("b")).reason == "store_warming"
    assert s.created_at == CREATED - 5 and s.trusted_from == NOW


def test_a_failover_that_lost_committed_batches_rearms_on_reconnect(
    open_store: Callable[..., PostgresStore], postgres: EmbeddedPostgres, pg_schema: str
) -> None:
    s = open_store()
    h = Harness(store=s)
    first, second = _handoff("a"), _handoff("b")
    assert h.one(first).reason == "admitted"
    assert h.one(second).reason == "admitted"
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        # what a promoted replica that missed the last commit looks like ...
        for table in ("decisions", "nonces", "tasks"):
            conn.execute(f"DELETE FROM {pg_schema}.{table} WHERE exp > 0 AND ctid = (SELECT max(ctid) FROM {pg_schema}.{table})")
        conn.execute(f"UPDATE {pg_schema}.watermarks SET off = off - 1")
        # ... and the connection a failover cuts
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'busguard' AND pid <> pg_backend_pid()"
        )
    assert h.one(second).reason == "store_warming"  # it forgot `second`: refused, not admitted again
    assert s.trusted_from == NOW


def test_a_reconnect_to_an_intact_store_does_not_rearm(open_store: Callable[..., PostgresStore], postgres: EmbeddedPostgres) -> None:
    s = open_store()
    h = Harness(store=s)
    rec = _handoff("a")
    assert h.one(rec).reason == "admitted"
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'busguard' AND pid <> pg_backend_pid()"
        )
    assert h.one(rec).reason == "exact_duplicate" and s.trusted_from == CREATED


# -- the reconciler's store ---------------------------------------------------------


def test_reconciler_store_rereads_processed_inputs_and_versions_escalations(postgres: EmbeddedPostgres, pg_schema: str) -> None:
    from busguard.reconcile.policy import EscalationState
    from busguard.runtime.outputs import Output
    from busguard.state.postgres.reconcile import PostgresReconcileStore

    h = Harness()
    first, second = _handoff("t"), _handoff("t")
    h.one(first)
    d = h.one(second)
    assert d.outcome == "escalate"
    a = PostgresReconcileStore(postgres.dsn, output=Output, state=EscalationState, schema=pg_schema)
    b = PostgresReconcileStore(postgres.dsn, output=Output, state=EscalationState, schema=pg_schema)
    out = [Output("t.audit", b"k", b"v", [("h", b"1")], 5)]
    src = ("agents.in", 0, 1)
    calls = []

    def decide(processed, states):  # type: ignore[no-untyped-def]
        calls.append((dict(processed), dict(states)))
        if len(calls) == 1:  # another reconciler resolves the same escalation meanwhile
            b.run_batch([src], {d.decision_id}, lambda p, s: ({src: out}, {d.decision_id: EscalationState(escalation=d)}))
        if processed:
            return {}, {}
        return {src: out}, {d.decision_id: EscalationState(escalation=d)}

    got = a.run_batch([src], {d.decision_id}, decide)
    assert len(calls) == 2 and calls[1][0] == {src: out}  # the lost race reran on fresh reads and found b's outputs
    assert got == {src: out}
    assert [e.escalation.decision_id for e in a.escalations()] == [d.decision_id]
    a.close()
    b.close()


def test_a_connection_cut_mid_transaction_is_retried_whole(open_store: Callable[..., PostgresStore], postgres: EmbeddedPostgres) -> None:
    s = open_store()

    def cut() -> None:
        with psycopg.connect(postgres.dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'busguard' AND pid <> pg_backend_pid()"
            )

    proxy = Interleaved(s, cut)  # after the batch's reads, before its writes
    h = Harness(store=proxy)  # type: ignore[arg-type]
    recs = [_handoff(f"cut-{i}") for i in range(5)]
    assert [d.reason for d in h.feed(*recs)] == ["admitted"] * 5
    assert proxy.calls == 2 and s.session.reconnects >= 1
    assert s.counts() == {"decisions": 5, "nonces": 5, "windows": 0, "tasks": 5, "policy": 0}
    assert [d.reason for d in h.feed(*recs)] == ["exact_duplicate"] * 5  # the same records at new offsets


def test_scrub_removes_the_password_from_driver_messages() -> None:
    from busguard.state.postgres.db import scrub

    dsn = "postgresql://guard:pa55-word@db:5432/bus"
    assert scrub('connection to "db" failed for guard (pa55-word)', dsn) == 'connection to "db" failed for guard (***)'
    assert (
        scrub("invalid dsn: postgresql://other:xyz@h/d and password=abc", dsn) == "invalid dsn: postgresql://other:***@h/d and password=***"
    )
    assert scrub("server closed the connection unexpectedly", "host=db password=q") == "server closed the connection unexpectedly"
