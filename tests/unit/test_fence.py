"""The store-warming fence and the store-behind check (admission/fence.py),
from the pure rules up to admission over real stores (issue 8, items 2-4)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from busguard.admission.fence import Behind, behind, fence_ends, fenced
from busguard.admission.types import AdmissionPolicy
from busguard.protocol.records import Decision
from busguard.state.memory.store import MemoryStore
from busguard.state.rocksdb.store import RocksStore
from busguard.state.sqlite.store import SqliteStore
from busguard.state.store import StateStore, rearmed

from .harness import NOW, Harness, Rec, agent, schema_1_file, sender

A, F = 300_000, 30_000  # the default freshness bounds
T = NOW - 10_000  # the store's trusted-from time in these tests


def _handoff(task: str, now: int = NOW, **kw: object):  # type: ignore[no-untyped-def]
    return sender("planner", now=now).sign(kind="handoff", task_id=task, receiver=agent("executor"), payload=b"p", **kw)  # type: ignore[arg-type]


# -- the pure rule -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("issued", "now", "expected"),
    [
        (T + F, T, True),  # the last receipt a store deciding at T could admit
        (T + F + 1, T, False),  # one ms later: the old store would have refused it too
        (T - A, T, True),
        (T + F, T + F + A, True),  # the last millisecond it is fresh
        (T + F, T + F + A + 1, False),  # window over (and the receipt is expired anyway)
        (T + F - 1, T + F + A, True),
    ],
)
def test_fence_boundaries_to_the_millisecond(issued: int, now: int, expected: bool) -> None:
    assert fenced(issued, now, T, A, F) is expected


def test_a_genesis_store_has_no_fence_and_a_fence_ends_one_window_later() -> None:
    assert not fenced(T, T, None, A, F)
    assert fence_ends(None, A, F) is None
    end = fence_ends(T, A, F)
    assert end == T + F + A + 1 and not fenced(T, end, T, A, F) and fenced(T, end - 1, T, A, F)


def _fresh(issued: int, now: int) -> bool:
    """decide.precheck's freshness test, both bounds inclusive."""
    return now - issued <= A and issued - now <= F


ms = st.integers(min_value=-2 * (A + F), max_value=2 * (A + F))


@given(issued=ms, now=ms, admitted=ms)
def test_the_fence_refuses_every_fresh_receipt_a_store_deciding_before_it_could_have_admitted(issued: int, now: int, admitted: int) -> None:
    """Complete: a receipt admitted at any clock reading up to T that is still
    fresh now is refused. Tight: a fresh receipt it spares could not have been
    admitted at or before T."""
    if admitted <= 0 and _fresh(issued, admitted + T) and _fresh(issued + T, now + T):
        assert fenced(issued + T, now + T, T, A, F)
    if _fresh(issued + T, now + T) and not fenced(issued + T, now + T, T, A, F):
        # the receipt is fresh at clock a exactly for a in [issued - F, issued + A]:
        # the earliest such a is after T, so no store deciding at or before T saw it fresh
        assert issued + T - F > T and not _fresh(issued + T, T)


@given(issued=ms, now=ms)
def test_the_window_condition_only_spares_what_freshness_refuses(issued: int, now: int) -> None:
    if issued - 0 <= F and now > F + A:
        assert not _fresh(issued, now)


def test_rearming_never_moves_the_fence_backwards() -> None:
    assert rearmed(None, 5) == 5 and rearmed(10, 5) == 10 and rearmed(10, 20) == 20


# -- the store-behind check -----------------------------------------------------------------------


def test_behind_compares_the_committed_offset_with_the_highest_decided_one() -> None:
    marks = {("in", 0): 9, ("in", 1): 4}
    committed: dict[tuple[str, int], int | None] = {("in", 0): 10, ("in", 1): 7, ("in", 2): None, ("in", 3): 0, ("in", 4): 3}
    assert behind(marks, committed) == [
        Behind(topic="in", partition=1, committed=7, watermark=4),  # the group processed 5 and 6; this store never decided them
        Behind(topic="in", partition=4, committed=3, watermark=None),  # committed past 0, nothing decided here
    ]


@pytest.mark.parametrize(
    ("watermark", "committed", "is_behind"), [(9, 10, False), (10, 10, False), (8, 10, True), (None, 1, True), (None, 0, False)]
)
def test_behind_boundaries(watermark: int | None, committed: int, is_behind: bool) -> None:
    """Ahead of the group (watermark >= C) is a crash between persist and commit: trusted."""
    marks = {} if watermark is None else {("in", 0): watermark}
    assert bool(behind(marks, {("in", 0): committed})) is is_behind


# -- through admission, on both backends -------------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite", "rocksdb"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield str(request.param)


def _open(kind: str, path: Path, now: int, *, genesis: bool = False, task_retention_ms: int = 7 * 86_400_000) -> StateStore:
    """The stores, not the policy, apply task retention (as `busguard run` wires them)."""
    if kind == "memory":
        return MemoryStore(created_at=now, genesis=genesis, task_retention_ms=task_retention_ms)
    if kind == "rocksdb":
        return RocksStore(path.with_suffix(".rocksdb"), now_ms=now, genesis=genesis, task_retention_ms=task_retention_ms)
    return SqliteStore(path, now_ms=now, genesis=genesis, task_retention_ms=task_retention_ms)


def test_item_2_a_replay_dated_ahead_of_the_clock_is_refused_after_the_store_is_lost(backend: str, tmp_path: Path) -> None:
    """Admitted 20 s before it was issued (inside max_future_ms), the store is
    lost a second later, and the exact bytes come back: the new store was
    created after issued_at - max_future_ms, so its fence refuses them. (Under
    the old rule, issued_at >= created_at, they were admitted a second time.)"""
    first_store = _open(backend, tmp_path / "a.db", NOW - 3_600_000, genesis=True)
    h = Harness(store=first_store)
    rec = _handoff("ahead", issued_at_ms=NOW + 20_000)
    assert h.one(rec).outcome == "forward"
    first_store.close()
    (tmp_path / "a.db").unlink(missing_ok=True)
    shutil.rmtree(tmp_path / "a.rocksdb", ignore_errors=True)
    lost = _open(backend, tmp_path / "a.db", NOW + 1_000)
    h2 = Harness(store=lost, now=NOW + 1_000)
    d = h2.one(rec)
    assert (d.outcome, d.reason) == ("reject", "store_warming")
    lost.close()


def test_a_genesis_store_admits_at_once_and_an_auto_created_one_warms(backend: str, tmp_path: Path) -> None:
    genesis = _open(backend, tmp_path / "g.db", NOW, genesis=True)
    assert genesis.trusted_from is None
    assert Harness(store=genesis).one(_handoff("g")).reason == "admitted"
    auto = _open(backend, tmp_path / "c.db", NOW)
    assert auto.trusted_from == NOW
    assert Harness(store=auto).one(_handoff("c")).reason == "store_warming"
    genesis.close()
    auto.close()


def test_a_rearmed_store_refuses_what_it_may_have_forgotten(backend: str, tmp_path: Path) -> None:
    store = _open(backend, tmp_path / "r.db", NOW - 3_600_000, genesis=True)
    h = Harness(store=store)
    assert h.one(_handoff("before")).reason == "admitted"
    assert store.rearm(NOW) == NOW and store.rearm(NOW - 5) == NOW
    assert h.one(_handoff("after")).reason == "store_warming"
    h.now = NOW + 1
    assert (
        h.one(_handoff("ahead", now=h.now, issued_at_ms=NOW + F + 1)).reason == "admitted"
    )  # no store deciding at or before NOW admits it
    store.close()


def test_watermarks_record_the_highest_decided_offset_per_partition_whatever_the_outcome(backend: str, tmp_path: Path) -> None:
    store = _open(backend, tmp_path / "w.db", NOW, genesis=True)
    h = Harness(store=store)
    h.feed_raw([(b"not a receipt", []), (b"x", [])], offsets=[7, 3])
    h.topic = "other"
    h.one(_handoff("w"), offset=2)
    assert store.partition_watermarks() == {("agents.in", 0): 7, ("other", 0): 2}
    h.topic = "agents.in"
    h.feed_raw([(b"late", [])], offsets=[5])  # lower than the mark: the mark stays
    assert store.partition_watermarks()[("agents.in", 0)] == 7
    store.close()


# -- item 4: retention ends strictly after the last fresh millisecond ---------------------------------


@pytest.mark.parametrize(
    ("retention", "replay", "reuse"), [(F + A + 1, "exact_duplicate", "nonce_replay"), (F + A, "admitted", "admitted")]
)
def test_item_4_nonce_and_task_are_present_at_the_receipts_last_fresh_millisecond(
    backend: str, tmp_path: Path, retention: int, replay: str, reuse: str
) -> None:
    """Admitted at NOW, issued at NOW + max_future_ms (accepted: inclusive);
    its last fresh millisecond is NOW + F + A. With the smallest retentions
    config accepts (nonce = task = F + A + 1) both rows are still there then:
    the exact bytes are a duplicate and a record reusing the nonce is refused.
    With F + A (refused at load since issue 8) both read as absent (expiry ==
    now) and the exact bytes are forwarded a second time."""
    policy = AdmissionPolicy(nonce_retention_ms=retention, task_retention_ms=retention)
    first = _handoff("n1", nonce="boundary-nonce-0001", issued_at_ms=NOW + F)
    for kind_of_replay, expected in (("exact", replay), ("reuse", reuse)):
        store = _open(backend, tmp_path / f"{kind_of_replay}.db", NOW - 3_600_000, genesis=True, task_retention_ms=retention)
        h = Harness(store=store, policy=policy)
        assert h.one(first).reason == "admitted"
        h.now = NOW + F + A
        again = first if kind_of_replay == "exact" else _handoff("n2", now=h.now, nonce="boundary-nonce-0001", issued_at_ms=h.now)
        assert h.one(again).reason == expected
        store.close()


# -- SQLite specifics --------------------------------------------------------------------------------


def test_sqlite_fence_and_origin_survive_reopen_and_a_rearm_reaches_every_connection(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    a = SqliteStore(db, now_ms=NOW - 3_600_000, genesis=True)
    b = SqliteStore(db, now_ms=NOW)  # a second guard process on the same file
    assert (b.origin, b.created, b.trusted_from, b.created_at) == ("genesis", False, None, NOW - 3_600_000)
    ha, hb = Harness(store=a), Harness(store=b)
    assert hb.one(_handoff("x")).reason == "admitted"
    a.rearm(NOW)
    assert hb.one(_handoff("y")).reason == "store_warming"  # b never re-armed itself: it read the fence in its batch
    a.close()
    b.close()
    again = SqliteStore(db, now_ms=NOW + 5)
    assert (again.origin, again.trusted_from) == ("genesis", NOW)
    assert Harness(store=again).one(_handoff("z")).reason == "store_warming"
    again.close()
    del ha


def test_sqlite_genesis_refuses_an_existing_store(tmp_path: Path) -> None:
    SqliteStore(tmp_path / "s.db", now_ms=NOW).close()
    with pytest.raises(FileExistsError, match="already holds a state store"):
        SqliteStore(tmp_path / "s.db", now_ms=NOW, genesis=True)


def test_sqlite_schema_1_is_upgraded_fenced_from_its_creation_with_watermarks_from_its_decisions(tmp_path: Path) -> None:
    from busguard.state.sqlite.db import key

    db = tmp_path / "v1.db"
    schema_1_file(db, NOW - 9, [(key(*k), b"\x00", 0) for k in (("in:x", 0, 5), ("in:x", 0, 12), ("in:x", 3, 1), ("b", 10, 100))])
    s = SqliteStore(db, now_ms=NOW)
    assert (s.origin, s.trusted_from, s.created_at) == ("created", NOW - 9, NOW - 9)
    assert s.partition_watermarks() == {("in:x", 0): 12, ("in:x", 3): 1, ("b", 10): 100}
    s.close()


def test_state_init_makes_a_genesis_store_once_and_refuses_the_memory_backend(tmp_path: Path) -> None:
    from busguard.config import load_config
    from busguard.errors import ConfigError
    from busguard.wiring import init_state

    route = '[[routes]]\nname = "r"\ninputs = ["in"]\ndownstream = "out"\n'
    (tmp_path / "busguard.toml").write_text(route + '[state]\npath = "s.db"\n')
    cfg = load_config(tmp_path / "busguard.toml", env={})
    assert init_state(cfg, NOW) == tmp_path / "s.db"
    s = SqliteStore(tmp_path / "s.db", now_ms=NOW + 1)
    assert (s.origin, s.trusted_from, s.created) == ("genesis", None, False)
    s.close()
    with pytest.raises(ConfigError) as info:
        init_state(cfg, NOW + 2)
    assert (info.value.file, info.value.field, info.value.value) == (str(tmp_path / "busguard.toml"), "state.path", str(tmp_path / "s.db"))
    (tmp_path / "mem.toml").write_text(route + '[state]\nbackend = "memory"\n')
    with pytest.raises(ConfigError, match="always warms"):
        init_state(load_config(tmp_path / "mem.toml", env={}), NOW)


# -- the guard's hook, without Kafka ---------------------------------------------------------------


def _guard(tmp_path: Path, store: StateStore):  # type: ignore[no-untyped-def]
    import hashlib

    from busguard.config import load_config
    from busguard.protocol.identity import agent_id_for_key
    from busguard.protocol.keyfile import Identity
    from busguard.protocol.registry import KeyRegistry
    from busguard.protocol.signing import public_key_from_seed
    from busguard.runtime.guard import Guard
    from busguard.runtime.watched import WatchedFile

    (tmp_path / "keys.toml").write_text(f'[[agent]]\nid = "{agent("planner")}"\n')
    (tmp_path / "busguard.toml").write_text('[[routes]]\nname = "r"\ninputs = ["in"]\ndownstream = "out"\n[ops]\nport = 0\n')
    cfg = load_config(tmp_path / "busguard.toml", env={})
    seed = hashlib.sha256(b"fence-guard").digest()
    ident = Identity(seed=seed, public_key=public_key_from_seed(seed), agent_id=agent_id_for_key(public_key_from_seed(seed)))
    keys = WatchedFile(tmp_path / "keys.toml", KeyRegistry.load, what="key registry")
    clock = {"now": NOW}
    return Guard(cfg, keys=keys, identity=ident, store=store, clock_ms=lambda: clock["now"]), clock


@pytest.mark.parametrize(
    ("committed", "rearms"),
    [
        ({("in", 0): 8, ("in", 1): None}, 0),  # at the watermark (7 = 8 - 1), one partition never committed
        ({("in", 0): 9}, 1),  # the group processed offset 8; this store never decided it
        ({("in", 0): 8, ("in", 2): 1}, 1),  # a partition committed past 0 with no watermark at all
        (None, 1),  # offsets unreadable: assume the worst
    ],
)
def test_the_guard_hook_rearms_exactly_when_the_store_is_behind(
    tmp_path: Path, committed: dict[tuple[str, int], int | None] | None, rearms: int
) -> None:
    import asyncio

    store = MemoryStore(created_at=NOW - 3_600_000, genesis=True)
    store.watermarks[("in", 0)] = 7
    guard, clock = _guard(tmp_path, store)
    sample = guard.metrics.registry.get_sample_value
    assert sample("busguard_store_fence_end_ms") == 0  # genesis: no fence
    clock["now"] = NOW + 5
    asyncio.run(guard.check_store(committed))
    assert sample("busguard_store_rearms_total") == rearms
    assert store.trusted_from == (NOW + 5 if rearms else None)
    assert sample("busguard_store_fence_end_ms") == (NOW + 5 + F + A + 1 if rearms else 0)


def test_a_rearm_before_a_batch_is_at_that_batch_s_clock_reading(tmp_path: Path) -> None:
    """Issue 19 item 10. The loop prepares a batch (its clock reading D, its
    decisions' decided_at), then runs the store-behind hook, then decides. The
    clock moves 7 ms on every reading, as a real one does between them. The
    re-arm must fence from D itself (docs/protocol.md 6.4: T <= decided_at),
    so a record issued at D + max_future_ms + 1 is judged normally in the next
    batch and one issued at D + max_future_ms is still refused."""
    import asyncio

    store = MemoryStore(created_at=NOW - 3_600_000, genesis=True)
    guard, clock = _guard(tmp_path, store)
    ticking = guard.clock_ms

    def tick() -> int:
        clock["now"] += 7
        return ticking()

    guard.clock_ms = tick
    offsets = iter(range(100))

    def records(*recs: object) -> list[Rec]:
        return [Rec("in", 0, next(offsets), None, r.value, list(r.headers)) for r in recs]  # type: ignore[attr-defined]

    async def run() -> tuple[list[Decision], list[Decision]]:
        ready = await guard.prepare(records(_handoff("first", now=clock["now"])))
        await guard.check_store({("in", 0): 9}, ready)  # the group is past a store that never decided anything
        first = [o for o in await guard.process_prepared(ready) if o.topic == "busguard.audit"]
        d = ready.now_ms
        assert store.trusted_from == d
        later = await guard.prepare(records(_handoff("spared", issued_at_ms=d + F + 1), _handoff("fenced", issued_at_ms=d + F)))
        assert later.now_ms > d
        second = [o for o in await guard.process_prepared(later) if o.topic == "busguard.audit"]
        decode = msgspec.json.Decoder(Decision).decode
        return [decode(o.value) for o in first], [decode(o.value) for o in second]

    (refused,), (spared, fenced_too) = asyncio.run(run())
    assert (refused.reason, store.trusted_from) == ("store_warming", refused.decided_at)
    assert f"({refused.decided_at})" in (refused.detail or "")  # the audit record names a T it is consistent with
    assert (spared.task_id, spared.reason) == ("spared", "admitted")
    assert (fenced_too.task_id, fenced_too.reason) == ("fenced", "store_warming")
