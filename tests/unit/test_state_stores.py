"""The store contract, run against every backend, plus SQLite durability
under a real `kill -9`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from busguard.admission.types import AdmissionPolicy
from busguard.state.backends import BACKENDS, StoreOptions, open_store
from busguard.state.memory.store import MemoryStore
from busguard.state.rocksdb.store import RocksStore
from busguard.state.sqlite.store import SqliteStore
from busguard.state.store import StateStore
from tests.backends import TEST_OPTIONS

from .harness import NOW, Harness, agent, sender

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=sorted(BACKENDS))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateStore]:
    s = open_store(request.param, TEST_OPTIONS[request.param](request, tmp_path), StoreOptions(now_ms=NOW - 3_600_000))
    yield s
    s.close()


def _handoff(task: str = "t", **kw: object):  # type: ignore[no-untyped-def]
    return sender("planner").sign(kind="handoff", task_id=task, receiver=agent("executor"), payload=b"p", **kw)  # type: ignore[arg-type]


def test_admission_is_remembered_with_its_source_coordinates(store: StateStore) -> None:
    h = Harness(store=store)
    rec = _handoff()
    d = h.one(rec, offset=11)
    t = store.task("handoff", "t", NOW)
    assert t is not None and t.source.offset == 11 and t.source.topic == h.topic and t.decision_id == d.decision_id
    again = store.decision_at(d.source)
    assert again is not None and msgspec.json.encode(again) == msgspec.json.encode(d)


def test_rows_expire(store: StateStore) -> None:
    h = Harness(store=store, policy=AdmissionPolicy(nonce_retention_ms=600_000))
    h.one(_handoff("a", nonce="expiring-nonce-0001"))
    h.now = NOW + 600_001 + 10_000
    # nonce expired: only the task index now catches a re-use for task a ...
    fresh = sender("planner", now=h.now).sign(
        kind="handoff", task_id="b", receiver=agent("executor"), payload=b"p", nonce="expiring-nonce-0001"
    )
    assert h.one(fresh).reason == "admitted"
    assert store.counts()["nonces"] == 1  # the re-use took over the expired row
    assert store.expire(h.now + 600_000) == 1
    assert store.counts()["nonces"] == 0 and store.counts()["tasks"] == 2


def test_tasks_and_session_windows_expire_after_their_retentions(store: StateStore, tmp_path: Path) -> None:
    """The lifetimes docs/operations.md ("Bounds") promises for the task index
    and the session windows: gone once `task_retention_ms` after admission and
    `session_retention_ms` after the window's last record have passed."""
    day = 86_400_000
    store.task_retention_ms = day  # type: ignore[attr-defined]  # every backend takes it as a constructor option
    h = Harness(store=store, policy=AdmissionPolicy(session_retention_ms=2 * day, task_retention_ms=day))
    rec = sender("planner", session_path=tmp_path / "planner.session.json").sign(
        kind="handoff", task_id="t", receiver=agent("executor"), payload=b"p"
    )
    assert h.one(rec).reason == "admitted"
    assert store.counts()["tasks"] == 1 and store.counts()["windows"] == 1
    assert store.expire(NOW + day - 1) == 1  # only the nonce (10 minutes) is due before the task's day
    assert store.counts()["tasks"] == 1
    assert store.expire(NOW + day + 1) == 1  # the task
    assert store.counts()["tasks"] == 0 and store.counts()["windows"] == 1
    assert store.expire(NOW + 2 * day + 1) == 1  # the session window
    assert store.counts()["windows"] == 0


def test_first_admission_stays_the_witness(store: StateStore) -> None:
    h = Harness(store=store)
    first = _handoff()
    h.one(first)
    h.one(_handoff())  # escalated, must not overwrite
    t = store.task("handoff", "t", NOW)
    assert t is not None and t.receipt_id == first.receipt_id


def test_sqlite_created_at_survives_reopen_and_a_new_file_gets_a_new_one(tmp_path: Path) -> None:
    SqliteStore(tmp_path / "a.db", now_ms=100).close()
    assert SqliteStore(tmp_path / "a.db", now_ms=999).created_at == 100
    assert SqliteStore(tmp_path / "b.db", now_ms=999).created_at == 999


CHILD = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, {repo!r})
    from pathlib import Path
    from tests.unit.harness import Harness, sender, agent, NOW
    from tests.backends import TEST_OPTIONS
    from busguard.state.backends import StoreOptions, open_store
    store = open_store({backend!r}, TEST_OPTIONS[{backend!r}](None, Path({tmp!r})), StoreOptions(now_ms=NOW - 3_600_000))
    h = Harness(store=store)
    s = sender("planner")
    i = 0
    while True:
        recs = [s.sign(kind="handoff", task_id=f"task-{{i}}-{{j}}", receiver=agent("executor"), payload=b"p") for j in range(20)]
        decisions = h.feed(*recs)
        assert all(d.outcome == "forward" for d in decisions)
        # the batch is committed: tell the parent, then keep going until killed
        print(i, flush=True)
        i += 1
    """
)


@pytest.mark.parametrize("backend", ["sqlite", "rocksdb"])
def test_a_durable_store_survives_kill_9_with_every_committed_admission(tmp_path: Path, backend: str) -> None:
    code = CHILD.format(repo=str(REPO), backend=backend, tmp=str(tmp_path))
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    acknowledged = []
    for line in child.stdout:
        acknowledged.append(int(line))
        if len(acknowledged) == 15:
            os.kill(child.pid, signal.SIGKILL)  # mid-stream: very likely inside the next transaction
            break
    child.wait()
    assert child.returncode == -signal.SIGKILL
    store = open_store(backend, TEST_OPTIONS[backend](None, tmp_path), StoreOptions(now_ms=NOW))  # type: ignore[arg-type]
    assert store.created_at == NOW - 3_600_000 and not store.created
    for i in acknowledged:
        for j in range(20):
            t = store.task("handoff", f"task-{i}-{j}", NOW)
            assert t is not None, f"committed admission task-{i}-{j} lost"
            assert store.decision_at(t.source) is not None
    counts = store.counts()
    assert counts["tasks"] % 20 == 0 and counts["tasks"] >= 15 * 20  # batches are all-or-nothing
    assert counts["tasks"] == counts["decisions"] == counts["nonces"]
    store.close()


def test_origin_and_location_come_from_the_protocol(store: StateStore, tmp_path: Path) -> None:
    """`busguard state show` prints them for any backend, through StateStore alone."""
    assert store.origin == "created"  # none of these was made by `busguard state init`
    where = store.location()
    if isinstance(store, MemoryStore):
        assert where is None
    elif isinstance(store, SqliteStore):
        assert where == str(tmp_path / "state.db")
    elif isinstance(store, RocksStore):
        assert where == str(tmp_path / "state.rocksdb")
    else:
        assert where is not None and where.endswith(f" schema {store.schema}")


def test_a_genesis_store_says_so(tmp_path: Path) -> None:
    assert MemoryStore(genesis=True).origin == "genesis"
    assert SqliteStore(tmp_path / "g.db", now_ms=NOW, genesis=True).origin == "genesis"
    assert RocksStore(tmp_path / "g.rocksdb", now_ms=NOW, genesis=True).origin == "genesis"
