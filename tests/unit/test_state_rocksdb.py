"""The RocksDB store (state/rocksdb/). What must hold with its layout: for
any sequence of batches and expiry passes it answers as the memory store
does (every snapshot, count, expiry count, task, decision and watermark); a
passed bucket goes whole; a lookup probes a bounded number of buckets;
it survives a reopen and refuses what it must (genesis over a store, a
second holder, a file where its directory should be); and the guard's
config, `busguard state init` and the held-store error work on it."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from busguard.protocol.records import Coordinates, Decision, TaskEntry
from busguard.state.keys import KeySet
from busguard.state.memory.store import MemoryStore
from busguard.state.rocksdb.directory import MARKER, StoreDirectoryRefused
from busguard.state.rocksdb.layout import CATALOG, NONCES, TASKS, bucket
from busguard.state.rocksdb.store import RocksStore
from busguard.state.snapshot import Snapshot, StoredHead, WindowState, spans_of
from busguard.state.sqlite.buckets import BUCKETS_PER_LIFETIME, width_for
from busguard.state.store import StateStore
from busguard.state.writes import BatchWrites, NonceRecord, PolicyRecord, WindowRecord

from .harness import NOW

LIFETIME = 4_000  # nonces, tasks and decisions: buckets of 1 s


def _store(path: Path, now: int = NOW, genesis: bool = True) -> RocksStore:
    return RocksStore(
        path, now_ms=now, genesis=genesis, nonce_retention_ms=LIFETIME, task_retention_ms=LIFETIME, decision_retention_ms=LIFETIME
    )


def _task(task_id: str, at: int) -> TaskEntry:
    return TaskEntry(
        "handoff", task_id, f"rid-{task_id}-{at}", f"did-{at}", "p", f"n-{task_id}", "0" * 64, None, None,
        Coordinates(topic="in", partition=0, offset=at), b"r", b"s" * 64, at,
    )  # fmt: skip


def _decision(partition: int, offset: int, variant: str, at: int) -> Decision:
    return Decision(
        f"{variant}@{partition}/{offset}@{at}", "reject", "bad_signature", Coordinates(topic="in", partition=partition, offset=offset), at
    )


def _batch(store: StateStore, keys: KeySet, now: int, writes: BatchWrites) -> Snapshot:
    seen: list[Snapshot] = []

    def fn(snap: Snapshot) -> BatchWrites:
        seen.append(snap)
        return writes

    store.run_batch(keys, now, fn)
    return seen[-1]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RocksStore]:
    s = _store(tmp_path / "s.rocksdb")
    yield s
    s.close()


def _keys_under(s: RocksStore, prefix: bytes) -> list[bytes]:
    return [k for k, _ in s._scan(prefix)]


# -- the same answers as the memory store ------------------------------------------------------------

_keys = st.sampled_from(["a", "b", "c", "d"])
_offsets = st.one_of(st.integers(0, 12), st.integers(4093, 4099))
#: a batch: the clock step first; nonces (key, life), tasks, decisions (partition, offset, variant),
#: windows (key, life, top), policy (key, life) written; whether it seals a head; whether it expires after
_batch_st = st.tuples(
    st.integers(0, 1_500),
    st.lists(st.tuples(_keys, st.integers(1, 3 * LIFETIME)), max_size=4),
    st.lists(_keys, max_size=3),
    st.lists(st.tuples(st.integers(0, 1), _offsets, st.sampled_from("ab")), max_size=6),
    st.lists(st.tuples(_keys, st.integers(1, 3 * LIFETIME), st.integers(0, 9)), max_size=2),
    st.lists(st.tuples(_keys, st.integers(1, 3 * LIFETIME)), max_size=2),
    st.booleans(),
    st.booleans(),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batches=st.lists(_batch_st, min_size=1, max_size=14))
def test_rocksdb_answers_as_the_memory_store_does(tmp_path_factory: pytest.TempPathFactory, batches: list) -> None:  # type: ignore[type-arg]
    tmp = tmp_path_factory.mktemp("rocks")
    memory = MemoryStore(NOW, genesis=True, task_retention_ms=LIFETIME, decision_retention_ms=LIFETIME)
    rocks = _store(tmp / "s.rocksdb")
    stores: list[StateStore] = [memory, rocks]
    now, positions, seq = NOW, set[tuple[str, int, int]](), 0
    try:
        for step, nonces, tasks, decisions, windows, policy, seal, expire in batches:
            now += step
            ds = {("in", p, o): _decision(p, o, v, now) for p, o, v in decisions}
            writes = BatchWrites(
                nonces={("", k): NonceRecord(("", k), now + life) for k, life in nonces},
                tasks={("handoff", k): _task(k, now) for k in tasks},
                decisions=ds,
                windows={("p", k): WindowRecord(("p", k), WindowState(top, 1 << top), now + life) for k, life, top in windows},
                policy={("award", k): PolicyRecord(("award", k), f"{k}@{now}".encode(), now + life) for k, life in policy},
            )
            keys = KeySet(
                sources=sorted({*positions, *ds}),
                nonces={("", k) for k in "abcd"},
                windows={("p", k) for k in "abcd"},
                tasks={("handoff", k) for k in "ac"},  # some written tasks looked up first, some not
                policy={("award", k) for k in "abcd"},
                chain="c",
            )
            snaps = []
            for s in stores:
                snap = _batch(s, keys, now, writes)
                snaps.append(snap)
                if seal and ds:
                    tip = snap.tip
                    seq = 0 if tip is None else tip[0] + 1
                    head = StoredHead("c", seq, f"head-{seq}-{now}".encode(), b"seal", b"", spans_of(ds), now)
                    s.run_batch(KeySet(), now, lambda _s, head=head: BatchWrites(heads=[head]))
            assert snaps[0] == snaps[1]
            positions.update(ds)
            if expire:
                assert memory.expire(now) == rocks.expire(now)
            assert memory.counts() == rocks.counts()
            for k in "abcd":
                assert memory.task("handoff", k, now) == rocks.task("handoff", k, now)
            for t, p, o in positions:
                c = Coordinates(topic=t, partition=p, offset=o)
                assert memory.decision_at(c) == rocks.decision_at(c)
            assert memory.partition_watermarks() == rocks.partition_watermarks()
    finally:
        rocks.close()


def test_the_equivalence_check_sees_a_store_that_forgets_to_move_a_key(tmp_path: Path) -> None:
    """The comparison above can fail: a store that writes a nonce into its
    new bucket without taking it out of the old one answers differently."""

    class Stale(RocksStore):
        def _keyed(self, kind: bytes, keys: list[tuple[str, str]]) -> tuple[list[bytes], dict[bytes, tuple[bytes, int]]]:
            return super()._keyed(kind, keys)[0], {}

    memory = MemoryStore(NOW, genesis=True)
    stale = Stale(tmp_path / "s.rocksdb", now_ms=NOW, genesis=True, nonce_retention_ms=LIFETIME)
    for s in (memory, stale):
        _batch(s, KeySet(), NOW, BatchWrites(nonces={("", "a"): NonceRecord(("", "a"), NOW + LIFETIME)}))
        _batch(s, KeySet(), NOW, BatchWrites(nonces={("", "a"): NonceRecord(("", "a"), NOW + 3 * LIFETIME)}))
    assert memory.counts()["nonces"] != stale.counts()["nonces"]
    stale.close()


# -- the layout's bounds ---------------------------------------------------------------------------


def test_expiry_drops_passed_buckets_whole_and_counts_what_it_expired(store: RocksStore) -> None:
    w = width_for(LIFETIME)
    for i in range(12):  # a row every quarter second: 12 rows over 3 buckets
        at = NOW + i * 250
        _batch(store, KeySet(), at, BatchWrites(nonces={("", f"n{i}"): NonceRecord(("", f"n{i}"), at + LIFETIME)}))
    live = store._buckets[NONCES]
    assert len(live) >= 3 and all(hi - lo == w for lo, hi in live)
    first = live[0]
    assert _keys_under(store, bucket(NONCES, *first))
    assert store.expire(first[1]) == sum(1 for i in range(12) if NOW + i * 250 + LIFETIME <= first[1])
    assert first not in store._buckets[NONCES]
    assert _keys_under(store, bucket(NONCES, *first)) == [] and CATALOG + bucket(NONCES, *first) not in _keys_under(store, CATALOG)
    assert store.counts()["nonces"] == sum(1 for i in range(12) if NOW + i * 250 + LIFETIME > first[1])
    assert store.expire(NOW + 20 * LIFETIME) == store.counts()["nonces"] + sum(1 for i in range(12) if NOW + i * 250 + LIFETIME > first[1])
    assert store.counts()["nonces"] == 0 and store._buckets[NONCES] == [] and _keys_under(store, b"Z") == []


def test_a_lookup_probes_at_most_buckets_per_lifetime_plus_one_buckets(store: RocksStore) -> None:
    """Rows written with the configured lifetime and an expiry pass per
    write: every bucket a lookup probes is one of at most 5 per kind."""
    now = NOW
    for i in range(40):
        now += LIFETIME // 7
        _batch(
            store,
            KeySet(),
            now,
            BatchWrites(
                nonces={("", f"n{i}"): NonceRecord(("", f"n{i}"), now + LIFETIME)},
                tasks={("handoff", f"t{i}"): _task(f"t{i}", now)},
            ),
        )
        store.expire(now)
        for kind in (NONCES, TASKS):
            assert len(store._buckets[kind]) <= BUCKETS_PER_LIFETIME + 1


def test_windows_and_policy_expire_through_their_expiry_index_only(store: RocksStore) -> None:
    for i, life in enumerate((10, 20, 30)):
        k = ("p", f"s{i}")
        _batch(store, KeySet(), NOW, BatchWrites(windows={k: WindowRecord(k, WindowState(1, 1), NOW + life)}))
    k = ("p", "s0")
    _batch(store, KeySet(), NOW, BatchWrites(windows={k: WindowRecord(k, WindowState(2, 3), NOW + 40)}))  # moved later
    assert len(_keys_under(store, b"XV")) == 3  # one index entry per row: the moved row's old one is gone
    assert store.expire(NOW + 25) == 1 and store.counts()["windows"] == 2  # s1
    assert store.expire(NOW + 35) == 1 and store.counts()["windows"] == 1  # s2; s0 was moved past it
    assert _batch(store, KeySet(windows={k}), NOW + 35, BatchWrites()).windows == {k: WindowState(2, 3)}
    assert len(_keys_under(store, b"XV")) == 1


# -- open, reopen, refuse --------------------------------------------------------------------------


def test_created_at_and_the_fence_survive_a_reopen(tmp_path: Path) -> None:
    s = RocksStore(tmp_path / "a", now_ms=100)
    assert s.created and s.trusted_from == 100 and s.origin == "created"
    assert s.rearm(500) == 500
    s.close()
    s = RocksStore(tmp_path / "a", now_ms=999)
    assert not s.created and s.created_at == 100 and s.trusted_from == 500
    s.close()
    assert RocksStore(tmp_path / "b", now_ms=999).created_at == 999


def test_genesis_refuses_a_directory_that_holds_a_store(tmp_path: Path) -> None:
    RocksStore(tmp_path / "a", now_ms=100, genesis=True).close()
    with pytest.raises(FileExistsError, match="already holds a state store"):
        RocksStore(tmp_path / "a", now_ms=200, genesis=True)
    s = RocksStore(tmp_path / "a", now_ms=300)  # and the refusal left it as it was
    assert s.origin == "genesis" and s.trusted_from is None and s.created_at == 100
    s.close()


def test_a_second_holder_and_a_file_in_its_place_are_os_errors_that_say_why(tmp_path: Path) -> None:
    s = RocksStore(tmp_path / "a", now_ms=100)
    with pytest.raises(OSError, match="RocksDB admits one per store"):
        RocksStore(tmp_path / "a", now_ms=100)
    s.close()
    (tmp_path / "f").write_text("x")
    with pytest.raises(NotADirectoryError):
        RocksStore(tmp_path / "f", now_ms=100)
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "other.log").write_text("x")
    with pytest.raises(StoreDirectoryRefused, match="not a directory busguard created"):
        RocksStore(tmp_path / "var", now_ms=100)
    assert sorted(p.name for p in (tmp_path / "var").iterdir()) == ["other.log"]


# -- through the config: state init, a held store ----------------------------------------------------


def test_state_init_makes_a_rocksdb_genesis_store_once_and_a_held_store_is_an_unwritable_path(tmp_path: Path) -> None:
    from busguard.config import load_config
    from busguard.errors import ConfigError, StoreUnreachable
    from busguard.wiring import init_state, open_guard_store

    route = '[[routes]]\nname = "r"\ninputs = ["in"]\ndownstream = "out"\n'
    (tmp_path / "busguard.toml").write_text(route + '[state]\nbackend = "rocksdb"\npath = "state.rocksdb"\n')
    cfg = load_config(tmp_path / "busguard.toml", env={})
    assert init_state(cfg, NOW) == tmp_path / "state.rocksdb"
    with pytest.raises(ConfigError) as refused:
        init_state(cfg, NOW + 1)
    assert (refused.value.field, refused.value.value) == ("state.path", str(tmp_path / "state.rocksdb"))
    held = open_guard_store(cfg, NOW + 2)
    assert (held.origin, held.trusted_from, held.created) == ("genesis", None, False)
    with pytest.raises(StoreUnreachable, match="RocksDB admits one per store") as unreachable:
        open_guard_store(cfg, NOW + 3)
    assert "state.path" in str(unreachable.value) and str(tmp_path / "state.rocksdb") in str(unreachable.value)
    held.close()


def test_state_show_on_rocksdb_looks_and_reads_a_store_a_guard_holds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from busguard.cli import main

    route = '[[routes]]\nname = "r"\ninputs = ["in"]\ndownstream = "out"\n'
    config = tmp_path / "busguard.toml"
    config.write_text(route + '[state]\nbackend = "rocksdb"\npath = "state.rocksdb"\n')
    assert main(["state", "show", "--config", str(config)]) == 2
    assert "there is none" in capsys.readouterr().err and not (tmp_path / "state.rocksdb").exists()
    assert main(["state", "init", "--config", str(config)]) == 0
    assert main(["state", "show", "--config", str(config)]) == 0
    assert "origin genesis" in capsys.readouterr().out
    held = RocksStore(tmp_path / "state.rocksdb", now_ms=NOW)  # the guard's handle, kept open
    try:
        _batch(held, KeySet(), NOW, BatchWrites(decisions={("in", 0, 41): _decision(0, 41, "a", NOW)}))
        assert main(["state", "show", "--config", str(config)]) == 0  # a secondary instance: no lock taken
        out = capsys.readouterr().out
        assert "origin genesis" in out and "decided up to in:0@41" in out, out
        _batch(held, KeySet(), NOW, BatchWrites(decisions={("in", 0, 42): _decision(0, 42, "a", NOW)}))
        assert main(["state", "show", "--config", str(config)]) == 0
        assert "decided up to in:0@42" in capsys.readouterr().out  # caught up with the unflushed WAL
    finally:
        held.close()
    assert not list(Path(tempfile.gettempdir()).glob("busguard-rocksdb-view-*"))  # every scratch directory removed


def test_a_view_beside_a_writing_and_flushing_primary_is_never_stale(tmp_path: Path) -> None:
    """What made a secondary instance the reader (state/rocksdb/view.py):
    each view sees every batch the primary committed before it opened,
    while the primary keeps writing and flushing its memtable."""
    from busguard.state.rocksdb.view import RocksView

    primary = _store(tmp_path / "s")
    committed = [-1]
    stop = threading.Event()

    def write() -> None:
        offset = 0
        while not stop.is_set():
            _batch(primary, KeySet(), NOW, BatchWrites(decisions={("in", 0, offset): _decision(0, offset, "a", NOW)}))
            committed[0] = offset
            if offset % 25 == 0:
                primary._db.flush(True)
            offset += 1

    writer = threading.Thread(target=write)
    writer.start()
    try:
        for _ in range(60):
            before = committed[0]
            view = RocksView(tmp_path / "s")
            try:
                seen = view.partition_watermarks().get(("in", 0), -1)
                assert seen >= before and view.origin == "genesis", (seen, before)
            finally:
                view.close()
        assert committed[0] > 60
    finally:
        stop.set()
        writer.join()
        primary.close()


def test_the_store_is_opened_with_its_bounded_buffers_and_cache(tmp_path: Path) -> None:
    """The memory bound docs/operations.md ("Bounds") gives: three 64 MiB
    memtables and a 64 MiB block cache, on a new store and on a reopened one
    (rocksdict drops table options on a reopen unless they are passed again)."""
    for _ in range(2):
        s = RocksStore(tmp_path / "s", now_ms=NOW)
        assert s._db.property_int_value("rocksdb.block-cache-capacity") == 64 * 2**20
        s.close()
        (options,) = sorted((tmp_path / "s").glob("OPTIONS-*"))[-1:]
        text = options.read_text()
        assert "  write_buffer_size=67108864\n" in text and "  max_write_buffer_number=3\n" in text


# -- whose directory (issue 35, finding 7) ------------------------------------------------------------

ROUTE = '[[routes]]\nname = "r"\ninputs = ["in"]\ndownstream = "out"\n'


def _listing(path: Path) -> dict[str, tuple[int, int]]:
    """Every entry's size and mtime: a refusal leaves them all as they were."""
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in path.iterdir()}


def _cli_refuses(config: Path, state: Path, capsys: pytest.CaptureFixture[str], *found: str) -> None:
    from busguard.cli import main

    before = _listing(state)
    for command in (["state", "init"], ["state", "show"]):
        assert main([*command, "--config", str(config)]) == 2, command
        err = capsys.readouterr().err
        [line] = err.splitlines()
        assert line.startswith(f"busguard: config error: {state}: not a directory busguard created (state.path): it holds "), line
        assert all(f in line for f in found) and "allowed: a directory that does not exist yet or is empty" in line, line
    assert _listing(state) == before  # nothing created, nothing touched: no LOCK, LOG, OPTIONS, marker or rocksdict config


def _another_applications_rocksdb(path: Path, families: bool) -> None:
    import rocksdict

    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    db = rocksdict.Rdict(str(path), options)
    db[b"Mschema"] = b"theirs"  # even a key busguard also uses
    if families:
        db.create_column_family("events", rocksdict.Options(raw_mode=True))[b"e1"] = b"x"
    db.close()


@pytest.mark.parametrize("families", [False, True])
def test_state_init_and_show_refuse_another_applications_rocksdb(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], families: bool
) -> None:
    config = tmp_path / "busguard.toml"
    config.write_text(ROUTE + '[state]\nbackend = "rocksdb"\npath = "app.rocksdb"\n')
    _another_applications_rocksdb(tmp_path / "app.rocksdb", families)
    _cli_refuses(
        config, tmp_path / "app.rocksdb", capsys, "CURRENT", "lacks busguard's own keys (created_at_ms, origin)", "another application's"
    )
    with pytest.raises(StoreDirectoryRefused):  # and the guard's open (`busguard run`)
        RocksStore(tmp_path / "app.rocksdb", now_ms=NOW)


def test_a_shared_directory_holding_a_file_named_current_is_refused_before_rocksdb_writes_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shared = tmp_path / "var"
    shared.mkdir()
    (shared / "CURRENT").write_text("MANIFEST-000001\n")  # a RocksDB-looking CURRENT, its manifest absent
    (shared / "notes.txt").write_text("someone else's")
    config = tmp_path / "busguard.toml"
    config.write_text(ROUTE + '[state]\nbackend = "rocksdb"\npath = "var"\n')
    _cli_refuses(config, shared, capsys, "2 entries (CURRENT, notes.txt) and no busguard-store.json")
    assert sorted(p.name for p in shared.iterdir()) == ["CURRENT", "notes.txt"]
    (shared / "MANIFEST-000001").write_text("not a manifest")  # now CURRENT names a file that exists
    _cli_refuses(config, shared, capsys, "a RocksDB database that cannot be read")
    assert sorted(p.name for p in shared.iterdir()) == ["CURRENT", "MANIFEST-000001", "notes.txt"]
    (shared / MARKER).write_text('{"application": "someone-else"}')  # a marker name is not enough: its content is checked
    _cli_refuses(config, shared, capsys, f"a {MARKER} that is not busguard's marker")
    (shared / MARKER).write_bytes(b" " * 5000)  # and a marker is small: a larger file of that name is not read whole
    _cli_refuses(config, shared, capsys, "more than 4096 bytes")


def test_state_init_marks_the_directory_it_creates_and_only_that_opens_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from busguard.cli import main

    config = tmp_path / "busguard.toml"
    config.write_text(ROUTE + '[state]\nbackend = "rocksdb"\npath = "empty"\n')
    (tmp_path / "empty").mkdir()  # an empty directory is new, as is one holding only a marker write cut short
    (tmp_path / "empty" / f"{MARKER}.tmp").write_bytes(b'{"appli')
    assert main(["state", "init", "--config", str(config)]) == 0
    assert (tmp_path / "empty" / MARKER).read_bytes() == b'{"application":"busguard","store":"state","backend":"rocksdb","v":1}\n'
    assert not (tmp_path / "empty" / f"{MARKER}.tmp").exists()
    assert main(["state", "show", "--config", str(config)]) == 0
    assert "origin genesis" in capsys.readouterr().out
    s = RocksStore(tmp_path / "empty", now_ms=NOW + 1)  # the guard's open
    assert (s.origin, s.created) == ("genesis", False)
    s.close()


def test_a_store_an_earlier_busguard_made_keeps_opening_and_is_marked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from busguard.cli import main

    s = RocksStore(tmp_path / "old", now_ms=100, genesis=True)
    _batch(s, KeySet(), NOW, BatchWrites(decisions={("in", 0, 7): _decision(0, 7, "a", NOW)}))
    s.close()
    (tmp_path / "old" / MARKER).unlink()  # as a busguard from before the marker left it
    config = tmp_path / "busguard.toml"
    config.write_text(ROUTE + '[state]\nbackend = "rocksdb"\npath = "old"\n')
    before = _listing(tmp_path / "old")
    assert main(["state", "show", "--config", str(config)]) == 0  # a reader: recognised, nothing written
    assert "decided up to in:0@7" in capsys.readouterr().out
    assert set(_listing(tmp_path / "old")) == set(before) | {"rocksdict-config.json"}  # the view's own rocksdict file, no marker
    s = RocksStore(tmp_path / "old", now_ms=NOW)  # the guard's open: recognised by its keys, marked, opened as it was
    assert (s.origin, s.created_at, s.created, s.partition_watermarks()) == ("genesis", 100, False, {("in", 0): 7})
    s.close()
    assert (tmp_path / "old" / MARKER).is_file()
