"""Issue 14 end to end: three guard processes, each with its own working
directory (a host), one consumer group, one PostgreSQL state, records NOT
keyed by sender, so copies of one receipt land on different partitions and
are judged by different guards at the same time. Mid-stream one guard is
killed with `kill -9` and restarted, and PostgreSQL itself is stopped and
started again. Every input gets exactly one decision, every receipt is
admitted once, nothing is judged a replay of itself, and `busguard audit`
finds the log clean."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import msgspec

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import (
    GuardProcess,
    Setup,
    all_decided,
    collect,
    decisions_by_source,
    distinct_sources,
    header,
    identity,
    make_setup,
    produce,
    sender,
)
from busguard.protocol.attestation import verify_admitted
from busguard.protocol.records import Decision
from busguard.sdk.sender import SignedRecord
from tests.pgkit import EmbeddedPostgres

from .paths import REPO

SENDERS = [f"agent-{i}" for i in range(4)]


def _host(s: Setup, where: Path) -> Setup:
    """Another host of the same deployment: its own directory and config
    file; shared only through Kafka and PostgreSQL (and the provisioned keys)."""
    where.mkdir()
    for name in ("busguard.toml", "keys.toml"):
        shutil.copy(s.dir / name, where / name)
    return dataclasses.replace(s, dir=where, config=where / "busguard.toml")


def _workload(tmp: Path, n: int) -> tuple[list[SignedRecord], list[str | None]]:
    """Records from several senders, each receipt sent two or three times, a
    forgery now and then. Per record: the receipt id it must share one
    admission with, or None for a forgery (bad_signature)."""
    receiver = identity("executor").agent_id
    forger = sender("executor")
    records: list[SignedRecord] = []
    of: list[str | None] = []
    for name in SENDERS:
        s = sender(name, session=tmp / f"{name}.session")
        for i in range(n):
            rec = s.sign(kind="handoff", task_id=f"{name}-task-{i}", receiver=receiver, payload=f'{{"n":{i}}}'.encode())
            copies = 3 if i % 5 == 0 else 2
            records += [rec] * copies
            of += [rec.receipt_id] * copies
            if i % 17 == 4:
                records.append(forger.sign_receipt(rec.receipt, rec.value))
                of.append(None)
    return records, of


async def test_three_hosts_one_postgres_unkeyed_kill_9_and_a_database_restart(broker: EmbeddedBroker, tmp_path: Path) -> None:
    with EmbeddedPostgres() as pg:
        shared = tmp_path / "provisioning"
        shared.mkdir()
        s = await make_setup(
            shared,
            broker.bootstrap,
            agents=[*SENDERS, "executor"],
            max_records=30,
            state={"backend": "postgres", "dsn": pg.dsn, "schema": "deployment"},
        )
        hosts = [_host(s, tmp_path / f"host-{i}") for i in range(3)]
        records, of = _workload(tmp_path, n=40)
        # copies are produced back to back, unkeyed: each to a random partition,
        # so different guards decide them in batches open at the same time
        waves = [slice(k * len(records) // 5, (k + 1) * len(records) // 5) for k in range(5)]
        coords: list[tuple[int, int]] = []

        async def wave(k: int) -> None:
            coords.extend(await produce(s.bootstrap, s.handoffs, records[waves[k]], key=None))

        guards = [GuardProcess(h) for h in hosts]
        try:
            for g in guards:
                g.wait_ready(60)
            await wave(0)
            await collect(s.bootstrap, [s.audit], lambda c: len(c[s.audit]) >= 20)
            guards[1].kill9()  # under load: its batch in flight is decided, maybe persisted, not committed
            await wave(1)
            guards[1] = GuardProcess(hosts[1])
            await wave(2)
            guards[1].wait_ready(60)
            await collect(s.bootstrap, [s.audit], lambda c: distinct_sources(s, c) >= len(coords) // 2)
            pg.stop()  # the database goes away mid-stream ...
            await wave(3)
            await asyncio.sleep(2)
            pg.start()  # ... and comes back on the same address
            await wave(4)
            total = len(records)
            got = await collect(s.bootstrap, s.outputs, lambda c: all_decided(s, c, total) and distinct_sources(s, c) >= total, timeout=180)
        finally:
            codes = [g.terminate() for g in guards]
        assert codes == [0, 0, 0], "\n\n".join(g.tail() for g in guards)
        logs = "\n".join(g.log.read_text() for g in guards)
        assert "state database unavailable; retrying" in logs  # the restart was felt, and waited out

        gk = s.guard.public_key
        decided = decisions_by_source(s, got)
        assert set(decided) == set(coords) and len(coords) == len(records)
        assert all(len(v) == 1 for v in decided.values()), "an input got two different decisions"
        by_receipt: dict[str, list[str]] = defaultdict(list)
        for c, rid in zip(coords, of, strict=True):
            reason = msgspec.json.decode(next(iter(decided[c])), type=Decision).reason
            if rid is None:
                assert reason == "bad_signature"
            else:
                by_receipt[rid].append(reason)
        partitions_of: dict[str, set[int]] = defaultdict(set)
        for c, rid in zip(coords, of, strict=True):
            if rid is not None:
                partitions_of[rid].add(c[0])
        assert sum(len(p) > 1 for p in partitions_of.values()) > len(partitions_of) // 2  # copies really were spread
        for rid, reasons in by_receipt.items():
            assert sorted(reasons) == ["admitted"] + ["exact_duplicate"] * (len(reasons) - 1), (rid, reasons)
        forwarded: dict[bytes, set[tuple[object, ...]]] = defaultdict(set)
        for r in got[s.downstream_handoffs]:
            verify_admitted(r.value, list(r.headers), gk, identity("executor").agent_id)
            forwarded[header(r, "busguard-decision-id") or b""].add((r.value, tuple(r.headers)))
        assert len(forwarded) == len(by_receipt) and all(len(v) == 1 for v in forwarded.values())

        env = {**os.environ, "PYTHONPATH": str(REPO)}
        audit = subprocess.run(
            [sys.executable, "-m", "busguard.cli", "audit", "--json", "--idle-ms", "800", "--config", str(hosts[0].config)],
            capture_output=True,
            env=env,
            timeout=120,
        )
        assert audit.returncode == 0, audit.stderr.decode()
        assert json.loads(audit.stdout)["ok"] is True
