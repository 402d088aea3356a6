"""Two guards in one consumer group split the partitions; a rebalance in the
middle of the stream, and then one guard leaving, lose nothing.

Both guards share one SQLite file (same host): the store's per-batch
`BEGIN IMMEDIATE` transaction makes check-and-record atomic across them, and
a partition that moves finds its decisions by coordinates in the shared file.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from pathlib import Path

import msgspec

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, Setup, all_decided, collect, header, make_setup, produce
from busguard.protocol.attestation import verify_admitted
from busguard.protocol.records import Decision

from .test_guard_crash import workload

SENDERS = [f"agent-{i}" for i in range(6)]


async def test_two_guards_split_partitions_and_a_rebalance_loses_nothing(broker: EmbeddedBroker, tmp_path: Path) -> None:
    legacy = [f"{n}-legacy" for n in SENDERS]
    s = await make_setup(tmp_path, broker.bootstrap, agents=[*SENDERS, *legacy], max_records=25)
    a = GuardProcess(s)
    a.wait_ready()
    flows = {n: workload(tmp_path, name=n, legacy_name=f"{n}-legacy", n=80) for n in SENDERS}
    coords: dict[str, list[tuple[int, int]]] = {}
    expected: dict[tuple[int, int], str] = {}

    assert all(len(records) > 90 for records, _ in flows.values())

    async def wave(part: slice) -> None:
        for name, (records, reasons) in flows.items():
            cs = await produce(s.bootstrap, s.handoffs, records[part], key=name.encode())
            coords.setdefault(name, []).extend(cs)
            expected.update(zip(cs, reasons[part], strict=True))

    b: GuardProcess | None = None
    try:
        await wave(slice(0, 25))
        b = GuardProcess(s)  # joins mid-stream: the group rebalances while A is busy
        await wave(slice(25, 50))
        b.wait_ready()
        await wave(slice(50, 75))
        await asyncio.sleep(1)
        assert a.terminate() == 0, a.tail()  # A leaves: B takes every partition
        await wave(slice(75, None))
        total = len(expected)
        got = await collect(s.bootstrap, s.outputs, lambda c: all_decided(s, c, total) and _sources(c[s.audit]) >= total, timeout=120)
        # When every sender's key hashes to B's own partitions, the records are
        # all decided before the group has moved A's partitions to B: wait for
        # that assignment (tansu takes seconds) before stopping B.
        for _ in range(300):
            if (_assignments(b.log) or [set()])[-1] == _everything(s):
                break
            await asyncio.sleep(0.2)
    finally:
        if b is not None:
            assert b.terminate() == 0, b.tail()

    # the group really split the partitions between the two, then B took them all
    a_sets, b_sets = _assignments(a.log), _assignments(b.log)
    everything = _everything(s)
    assert a_sets[0] == everything and b_sets[-1] == everything
    assert any(0 < len(x) < len(everything) for x in a_sets) and any(0 < len(x) < len(everything) for x in b_sets)
    gk = s.guard.public_key
    decided: dict[tuple[int, int], set[bytes]] = defaultdict(set)
    for r in got[s.audit]:
        d = msgspec.json.decode(r.value, type=Decision)
        decided[(d.source.partition, d.source.offset)].add(r.value)
    assert set(decided) == set(expected)
    assert all(len(v) == 1 for v in decided.values())
    reasons = {c: msgspec.json.decode(next(iter(v)), type=Decision).reason for c, v in decided.items()}
    assert reasons == expected
    by_id: dict[bytes, set[tuple[object, ...]]] = defaultdict(set)
    for r in got[s.downstream_handoffs]:
        verify_admitted(r.value, list(r.headers), gk, None, any_receiver=True)
        by_id[header(r, "busguard-decision-id") or b""].add((r.key, r.value, tuple(r.headers)))
    assert len(by_id) == list(expected.values()).count("admitted")
    assert all(len(v) == 1 for v in by_id.values())


def _sources(audit: list) -> int:  # type: ignore[type-arg]
    return len({(d.source.partition, d.source.offset) for d in (msgspec.json.decode(r.value, type=Decision) for r in audit)})


def _everything(s: Setup) -> set[str]:
    return {f"{t}:{p}" for t in (s.handoffs, s.acks) for p in range(4)}


def _assignments(log: Path) -> list[set[str]]:
    out = []
    for line in log.read_text().splitlines():
        if '"partitions assigned"' in line:
            out.append(set(json.loads(line)["partitions"]))
    return out
