"""Throughput of 1, 2 and 3 guard processes on one PostgreSQL against 1 guard on
SQLite, in one run, with each configuration's cost per record of the
decide-and-persist step (the batch's state transaction plus the pure
decisions inside it).

For each configuration: an embedded broker (shared), a fresh topic set and
consumer group, N real `busguard run` processes (each its own config file
and directory, as on separate hosts), started and ready before anything is
produced; then R pre-signed records from 8 senders, keyed by sender, over 6
partitions; timed from the first record produced to the R-th decision on the
audit topic. `decide_persist_us_per_record` is the guards' own
`busguard_batch_phase_seconds{phase="decide_persist"}` sum over records.
PostgreSQL runs with durable settings (fsync and synchronous_commit on);
SQLite with synchronous FULL.

This machine has 2 cores shared with other work: the broker, the server and
every guard compete for them, so more guards cannot mean more throughput
here; the figures show what the shared state costs, not how far it scales
on separate hosts.

    .venv/bin/python benchmarks/scaleout.py [--records 12000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from aiokafka import AIOKafkaConsumer  # noqa: E402

from busguard.devtools.broker import EmbeddedBroker  # noqa: E402
from busguard.devtools.guardkit import GuardProcess, Setup, identity, make_setup, produce, sender  # noqa: E402
from tests.pgkit import EmbeddedPostgres  # noqa: E402

SENDERS = [f"bench-{i}" for i in range(8)]


def _metric_sum(text: str, name: str, label: str) -> float:
    for line in text.splitlines():
        if line.startswith(name) and label in line:
            return float(line.split()[-1])
    return 0.0


async def _count_audit(bootstrap: str, topic: str, want: int, timeout_s: float = 600) -> float:
    """Seconds until `want` records are on `topic` (read from the start)."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        n, deadline = 0, time.monotonic() + timeout_s
        while n < want:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {n} of {want} decisions after {timeout_s} s")
            for recs in (await consumer.getmany(timeout_ms=200, max_records=5000)).values():
                n += len(recs)
        return time.monotonic()
    finally:
        await consumer.stop()


async def one(broker: EmbeddedBroker, tmp: Path, name: str, guards: int, state: dict[str, object] | None, records: int) -> dict[str, float]:
    where = tmp / name
    where.mkdir()
    s = await make_setup(where, broker.bootstrap, agents=[*SENDERS, "executor"], partitions=6, max_records=500, state=state)
    hosts: list[Setup] = []
    for i in range(guards):
        h = where / f"host-{i}"
        h.mkdir()
        for f in ("busguard.toml", "keys.toml"):
            shutil.copy(s.dir / f, h / f)
        hosts.append(replace(s, dir=h, config=h / "busguard.toml"))
    procs = [GuardProcess(h) for h in hosts]
    try:
        for p in procs:
            p.wait_ready(90)
        await asyncio.sleep(3)  # let the group settle on its final assignment
        receiver = identity("executor").agent_id
        signers = {n: sender(n) for n in SENDERS}
        signed = []
        for i in range(records):
            n = SENDERS[i % len(SENDERS)]
            signed.append((n, signers[n].sign(kind="handoff", task_id=f"{name}-{i}", receiver=receiver, payload=b'{"op":"work"}' * 8)))
        counter = asyncio.create_task(_count_audit(s.bootstrap, s.audit, records))
        t0 = time.monotonic()
        for n in SENDERS:
            await produce(s.bootstrap, s.handoffs, [r for who, r in signed if who == n], key=n.encode())
        t1 = await counter
        persist = sum(_metric_sum(p.metrics(), "busguard_batch_phase_seconds_sum", 'phase="decide_persist"') for p in procs)
    finally:
        for p in procs:
            p.terminate()
    return {"records_per_s": round(records / (t1 - t0)), "decide_persist_us_per_record": round(persist / records * 1e6, 1)}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=12_000)
    args = ap.parse_args()
    result: dict[str, object] = {"benchmark": "scaleout", "records": args.records}
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "broker").mkdir()
        with EmbeddedBroker(log_dir=Path(tmp) / "broker") as broker:
            await _all(broker, Path(tmp), args.records, result)
    print(json.dumps(result))


async def _all(broker: EmbeddedBroker, tmp: Path, records: int, result: dict[str, object]) -> None:
    result["sqlite_1_guard"] = await one(broker, tmp, "sqlite1", 1, {"synchronous": "full"}, records)
    with EmbeddedPostgres(settings={"fsync": "on", "synchronous_commit": "on"}) as pg:
        for n in (1, 2, 3):
            state = {"backend": "postgres", "dsn": pg.dsn, "schema": f"scale{n}"}
            result[f"postgres_{n}_guards"] = await one(broker, tmp, f"pg{n}", n, state, records)


if __name__ == "__main__":
    asyncio.run(main())
