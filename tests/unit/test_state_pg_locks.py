"""Issue 19 item 9: advisory locks per batch are bounded, whatever the batch holds.

The scheme (state/postgres/locks.py) as a pure rule, then against a real server
(tests/pgkit.py): the locks a batch's transaction holds are counted from a
second connection while that transaction is open, for plain key sets and for
500 session handoffs with distinct receivers, sessions and vouchers (forged
and authentic); and two batches that share a policy row still serialise in
every combination of the two lock modes (the row-row case is the lost-update
test tests/unit/test_state_postgres.py had before the bound)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator

import msgspec
import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from busguard.admission.types import AdmissionPolicy
from busguard.policies.compromise.policy import CompromiseSettings
from busguard.sdk.sender import Sender, SignedRecord
from busguard.state.keys import KeySet, PolicyKey
from busguard.state.postgres import db as pgsql
from busguard.state.postgres import locks as pglocks
from busguard.state.postgres.locks import Held, plan
from busguard.state.postgres.store import PostgresStore
from busguard.state.snapshot import Snapshot
from busguard.state.store import BatchFn
from busguard.state.writes import BatchWrites, PolicyRecord
from tests.pgkit import EmbeddedPostgres
from tests.unit import compromise_kit as kit
from tests.unit.harness import Harness
from tests.unit.test_compromise_admission import registry

CAP = pglocks.DEFAULT_CAP
NOW = kit.NOW


# -- the rule ------------------------------------------------------------------------------------

ids = st.frozensets(st.integers(min_value=0, max_value=40), max_size=30)
caps = st.integers(min_value=2, max_value=12)


def _plan(reads: frozenset[int], late: frozenset[int], cap: int) -> Held:
    held, _ = plan(Held(), reads, cap)
    held, _ = plan(held, late, cap)
    return held


def _conflict(a: Held, b: Held) -> bool:
    """PostgreSQL's rule: exclusive conflicts with anything on the same lock, shared only with exclusive."""
    schema_a, schema_b = a.whole or bool(a.ids), b.whole or bool(b.ids)
    return (a.whole and schema_b) or (b.whole and schema_a) or bool(a.ids & b.ids)


@given(reads=ids, late=ids, cap=caps)
def test_a_batch_never_uses_more_than_cap_lock_table_entries(reads: frozenset[int], late: frozenset[int], cap: int) -> None:
    held = _plan(reads, late, cap)
    assert held.objects() <= cap
    assert held.whole or held.ids >= reads | late  # every row it touches is covered
    assert held.objects() == 0 or reads | late


@given(a_reads=ids, a_late=ids, b_reads=ids, b_late=ids, cap=caps)
def test_two_batches_sharing_a_row_always_conflict(
    a_reads: frozenset[int], a_late: frozenset[int], b_reads: frozenset[int], b_late: frozenset[int], cap: int
) -> None:
    a, b = _plan(a_reads, a_late, cap), _plan(b_reads, b_late, cap)
    if (a_reads | a_late) & (b_reads | b_late):
        assert _conflict(a, b)


def test_the_threshold_to_the_lock() -> None:
    assert plan(Held(), range(CAP - 1), CAP) == (
        Held(False, frozenset(range(CAP - 1))),
        pglocks.Acquire(shared=True, ids=tuple(range(CAP - 1))),
    )
    assert plan(Held(), range(CAP), CAP) == (Held(True), pglocks.Acquire(exclusive=True))
    held, _ = plan(Held(), [5, 1, 3], CAP)
    assert plan(held, [3], CAP) == (held, pglocks.Acquire())  # already covered: nothing more
    assert plan(held, [9], CAP)[1] == pglocks.Acquire(ids=(9,))  # the schema lock is held already


# -- against a real server -------------------------------------------------------------------------


@pytest.fixture
def open_store(postgres: EmbeddedPostgres, pg_schema: str) -> Iterator[Callable[..., PostgresStore]]:
    opened: list[PostgresStore] = []

    def make(**kw: object) -> PostgresStore:
        s = PostgresStore(postgres.dsn, now_ms=NOW - 3_600_000, schema=pg_schema, **kw)  # type: ignore[arg-type]
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


def _backend_pid(store: PostgresStore) -> int:
    store.session.run(lambda cur: None, what="connect")
    conn = store.session._conn  # noqa: SLF001 - the store's own connection, to name its server process
    assert conn is not None
    return int(conn.info.backend_pid)


def held_locks(dsn: str, pid: int) -> int:
    """Advisory lock-table entries server process `pid` holds, seen from another connection."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM (SELECT DISTINCT classid, objid, objsubid FROM pg_locks WHERE locktype = 'advisory' AND pid = %s AND granted) AS held",
            (pid,),
        ).fetchone()
    assert row is not None
    return int(row[0])


class Counted:
    """A store whose batches count, from a second connection, the advisory locks
    they hold once their reads are done (inside the open transaction)."""

    def __init__(self, store: PostgresStore, dsn: str) -> None:
        self.store, self.dsn, self.pid = store, dsn, _backend_pid(store)
        self.seen: list[int] = []

    def run_batch(self, keys: KeySet, now_ms: int, fn: BatchFn) -> None:
        def counted(snap: Snapshot) -> BatchWrites:
            self.seen.append(held_locks(self.dsn, self.pid))
            return fn(snap)

        self.store.run_batch(keys, now_ms, counted)

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)


def _keys(n: int, tag: str = "k") -> set[PolicyKey]:
    return {("compromise", f"{tag}-{i}") for i in range(n)}


@pytest.mark.parametrize(("rows", "locks"), [(1, 2), (10, 11), (CAP - 1, CAP), (CAP, 1), (500, 1), (1_500, 1)])
def test_the_locks_a_batch_holds_are_bounded_by_the_setting(
    open_store: Callable[..., PostgresStore], postgres: EmbeddedPostgres, rows: int, locks: int
) -> None:
    counted = Counted(open_store(), postgres.dsn)
    counted.run_batch(KeySet(policy=_keys(rows)), NOW, lambda snap: BatchWrites())
    assert counted.seen == [locks]
    assert held_locks(postgres.dsn, counted.pid) == 0  # transaction-scoped: gone at commit


def test_a_raised_setting_locks_rows_one_by_one_further(open_store: Callable[..., PostgresStore], postgres: EmbeddedPostgres) -> None:
    counted = Counted(open_store(max_policy_locks=600), postgres.dsn)
    counted.run_batch(KeySet(policy=_keys(500)), NOW, lambda snap: BatchWrites())
    assert counted.seen == [501]
    with pytest.raises(ValueError, match="max_policy_locks = 1: at least 2"):
        open_store(max_policy_locks=1)


def test_rows_written_unread_stay_within_the_bound(
    open_store: Callable[..., PostgresStore], postgres: EmbeddedPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch that writes policy rows it did not read locks them when it
    writes; past the bound it takes the schema lock instead (counted just
    before the commit: the store's last write is its batch seals)."""
    counted = Counted(open_store(), postgres.dsn)
    before_commit: list[int] = []
    original = pgsql.write_seals

    def observe(*args: object) -> None:
        before_commit.append(held_locks(postgres.dsn, counted.pid))
        original(*args)  # type: ignore[arg-type]

    monkeypatch.setattr("busguard.state.postgres.store.pgsql.write_seals", observe)
    read, unread = _keys(10, "read"), _keys(200, "unread")
    writes = BatchWrites(policy={p: PolicyRecord(p, b"v", NOW + 60_000) for p in read | unread})
    counted.run_batch(KeySet(policy=read), NOW, lambda snap: writes)
    assert counted.seen == [11] and before_commit == [11]  # 10 rows + the schema lock (shared, then exclusive: one entry)
    few = BatchWrites(policy={p: PolicyRecord(p, b"w", NOW + 60_000) for p in read | _keys(3, "few")})
    counted.run_batch(KeySet(policy=read), NOW, lambda snap: few)
    assert before_commit[-1] == 14
    got: list[bytes] = []
    counted.run_batch(KeySet(policy=unread), NOW, lambda snap: got.extend(snap.policy.values()) or BatchWrites())  # type: ignore[func-returns-value]
    assert got == [b"v"] * 200


# -- 500 hostile session handoffs ---------------------------------------------------------------------

_n = itertools.count()


def _handoffs(n: int, *, forged: bool) -> list[SignedRecord]:
    """Handoffs from the registered session agent, each naming its own
    receiver, session and voucher (the signer of its successor-integrity
    statement): about three policy rows apiece. Forged: signed with another key."""
    by = kit.STRANGER if forged else kit.SESSION
    signer = Sender(kit.seed(by), agent_id=kit.SESSION, key_id=kit.SESSION_KEY, clock_ms=lambda: NOW)
    out = []
    for _ in range(n):
        i = next(_n)
        receiver, voucher = f"receiver-{i:05d}", f"voucher-{i:05d}"
        value = kit.payload([kit.LOG], successor_integrity=kit.integrity(by=voucher, successor=receiver, handoff_id=f"h-{i}"))
        receipt = msgspec.structs.replace(
            kit.receipt_for(value, task_id=f"h-{i}", receiver=receiver),
            session_id=f"session-{i:05d}",
            nonce=f"nonce-{i:012d}-locks",
            sequence=1,
        )
        out.append(signer.sign_receipt(receipt, value))
    return out


@pytest.mark.parametrize("forged", [True, False], ids=["forged", "authentic"])
def test_500_handoffs_with_distinct_names_hold_at_most_the_bound(
    open_store: Callable[..., PostgresStore], postgres: EmbeddedPostgres, forged: bool
) -> None:
    counted = Counted(open_store(), postgres.dsn)
    policy = AdmissionPolicy(
        policy_settings={"compromise": CompromiseSettings(trusted_attesters=(kit.ATTESTER,), trusted_notice_issuers=(kit.OPERATOR,))}
    )
    h = Harness(reg=registry(), policy=policy, store=counted, now=NOW)  # type: ignore[arg-type]
    decisions = h.feed(*_handoffs(500, forged=forged))
    assert len(decisions) == 500
    if forged:
        assert {d.reason for d in decisions} == {"bad_signature"}
    else:
        assert "bad_signature" not in {d.reason for d in decisions}
    assert len(counted.seen) == 1 and counted.seen[0] <= CAP, counted.seen


# -- the two modes still serialise ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a_rows", "b_rows"), [(0, 0), (500, 0), (0, 500), (500, 500)], ids=["row-row", "schema-row", "row-schema", "schema-schema"]
)
def test_batches_sharing_a_row_serialise_in_either_mode(
    open_store: Callable[..., PostgresStore], postgres: EmbeddedPostgres, a_rows: int, b_rows: int
) -> None:
    """Read-modify-write of one row by two guards' batches at once, each
    either under the bound (row locks) or past it (the schema lock): the second
    waits for the first and sees its write."""
    a, b = open_store(), open_store()
    p = ("compromise", "shared-row")
    b_done = threading.Event()

    def append(snap: Snapshot, tag: bytes) -> BatchWrites:
        return BatchWrites(policy={p: PolicyRecord(p, snap.policy.get(p, b"") + tag, NOW + 60_000)})

    def b_batch() -> None:
        b.run_batch(KeySet(policy={p} | _keys(b_rows, "b")), NOW, lambda snap: append(snap, b"B"))
        b_done.set()

    worker = threading.Thread(target=b_batch)

    def a_fn(snap: Snapshot) -> BatchWrites:
        worker.start()
        with psycopg.connect(postgres.dsn, autocommit=True) as conn:  # until b waits on a lock of a's (or, without one, is done)
            while (
                not b_done.is_set()
                and not conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").fetchone()[0]
            ):  # type: ignore[index]
                b_done.wait(0.01)
        assert not b_done.is_set()
        return append(snap, b"A")

    a.run_batch(KeySet(policy={p} | _keys(a_rows, "a")), NOW, a_fn)
    worker.join(30)
    seen: list[bytes] = []
    a.run_batch(KeySet(policy={p}), NOW, lambda snap: seen.append(snap.policy[p]) or BatchWrites())  # type: ignore[func-returns-value]
    assert seen == [b"AB"]
