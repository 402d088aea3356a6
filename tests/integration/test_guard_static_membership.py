"""Static group membership (kafka.group_instance_id) against the real broker,
with real `busguard run` processes: a guard killed with SIGKILL and started
again under its instance id takes its own partitions back while the other
guard goes on undisturbed, and every input still gets exactly one decision.

The restarted member runs under a PYTHONHASHSEED that orders its topic set the
other way round from its predecessor's: with aiokafka's own assignor its
JoinGroup metadata then differs, and tansu never assigns it
(busguard.runtime.clients.SortedRoundRobin).

The session is 20 s: tansu holds a static member's JoinGroup for about
3 s + session/2 (docs/notes-broker.md), and the restarted member must be back
before its predecessor's session expires, or tansu evicts it and the group
rebalances as it would without static membership.
"""

from __future__ import annotations

import asyncio
import os
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
    assignment_events,
    collect,
    decisions_by_source,
    distinct_sources,
    held,
    identity,
    make_setup,
    produce,
    sender,
    until,
)
from busguard.protocol.records import Decision
from busguard.sdk.sender import SignedRecord

SENDERS = [f"member-{i}" for i in range(3)]
SESSION = {"BUSGUARD_KAFKA__SESSION_TIMEOUT_MS": "20000", "BUSGUARD_KAFKA__HEARTBEAT_INTERVAL_MS": "500"}


def _assignments(p: GuardProcess) -> list[tuple[str, list[str]]]:
    return [(kind, parts) for _, kind, parts in assignment_events(p)]


def _workload(tmp: Path, n: int) -> tuple[list[SignedRecord], list[str]]:
    receiver = identity("executor").agent_id
    records: list[SignedRecord] = []
    of: list[str] = []
    for name in SENDERS:
        s = sender(name, session=tmp / f"{name}.session")
        for i in range(n):
            rec = s.sign(kind="handoff", task_id=f"{name}-{i}", receiver=receiver, payload=f'{{"n":{i}}}'.encode())
            records += [rec, rec]
            of += [rec.receipt_id, rec.receipt_id]
    return records, of


def _guard(s: Setup, instance: str, hash_seed: str = "0") -> GuardProcess:
    return GuardProcess(s, env={**SESSION, "BUSGUARD_KAFKA__GROUP_INSTANCE_ID": instance, "PYTHONHASHSEED": hash_seed})


def _hash_seeds_ordering_apart(topics: list[str]) -> tuple[str, str]:
    """Two PYTHONHASHSEED values under which a set of `topics` iterates in
    different orders, whichever order it was built from."""
    probe = "import sys; t = sys.argv[1:]; a, b = list(set(t)), list(set(t[::-1])); print(a if a == b else '')"
    seen: dict[str, str] = {}
    for seed in range(64):
        env = {**os.environ, "PYTHONHASHSEED": str(seed)}
        order = subprocess.run([sys.executable, "-c", probe, *topics], env=env, capture_output=True, text=True, check=True).stdout.strip()
        if order:
            seen.setdefault(order, str(seed))
        if len(seen) == 2:
            first, second = seen.values()
            return first, second
    raise AssertionError(f"no two hash seeds in 0..63 order {topics} apart: {seen}")


async def test_a_static_member_killed_and_restarted_takes_its_partitions_back(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, agents=[*SENDERS, "executor"], max_records=20)
    records, of = _workload(tmp_path, n=30)
    thirds = [records[k * len(records) // 3 : (k + 1) * len(records) // 3] for k in range(3)]
    coords: list[tuple[int, int]] = []
    seed, other_seed = _hash_seeds_ordering_apart([s.handoffs, s.acks])
    guards = [_guard(s, "guard-a", seed), _guard(s, "guard-b", seed)]
    try:
        for g in guards:
            g.wait_ready(120)
        # the group has settled when both hold partitions that add up to all four
        every = sorted(f"{t}:{i}" for t in (s.handoffs, s.acks) for i in range(4))
        await until(lambda: sorted(p for g in guards for p in held(g)) == every and 0 < len(held(guards[0])) < len(every), "a 2-way split")
        coords += await produce(s.bootstrap, s.handoffs, thirds[0], key=None)
        await collect(s.bootstrap, [s.audit], lambda c: len(c[s.audit]) >= 10)
        # a steady group: this test is about a restart, not a kill mid-rebalance
        await asyncio.sleep(5)

        held_before, survivor_events = held(guards[1]), len(_assignments(guards[0]))
        guards[1].kill9()
        coords += await produce(s.bootstrap, s.handoffs, thirds[1], key=None)
        guards[1] = _guard(s, "guard-b", other_seed)
        await until(lambda: held(guards[1]) != [], "the restarted member's assignment")
        coords += await produce(s.bootstrap, s.handoffs, thirds[2], key=None)
        total = len(records)
        got = await collect(s.bootstrap, s.outputs, lambda c: all_decided(s, c, total) and distinct_sources(s, c) >= total, timeout=180)
        restarted_events, survivor_after = _assignments(guards[1]), _assignments(guards[0])[survivor_events:]
    finally:
        codes = [g.terminate() for g in guards]
    assert codes == [0, 0], "\n\n".join(g.tail() for g in guards)

    # the same partitions, at once: no rebalance, the survivor kept its own throughout
    assert [e for e in restarted_events if e[0] == "assigned"][0] == ("assigned", held_before), restarted_events
    assert survivor_after == [], survivor_after

    decided = decisions_by_source(s, got)
    assert set(decided) == set(coords) and len(coords) == len(records)
    assert all(len(v) == 1 for v in decided.values()), "an input got two different decisions"
    by_receipt: dict[str, list[str]] = defaultdict(list)
    for c, rid in zip(coords, of, strict=True):
        by_receipt[rid].append(msgspec.json.decode(next(iter(decided[c])), type=Decision).reason)
    assert all(sorted(v) == ["admitted", "exact_duplicate"] for v in by_receipt.values()), by_receipt


async def test_a_second_live_process_under_one_instance_id_exits_at_start(broker: EmbeddedBroker, tmp_path: Path) -> None:
    """tansu would give both the same partitions (and Kafka fence them in
    turn): the second process is refused before it joins, with the holder named."""
    s = await make_setup(tmp_path, broker.bootstrap)
    first = _guard(s, "guard-same")
    try:
        first.wait_ready(120)
        second = _guard(s, "guard-same")
        assert second.wait(60) == 2
        log = second.log.read_text()
        assert "static member name in use by another live process" in log, log
        assert (
            f"kafka.group_instance_id = 'guard-same': a name no other live process of group '{s.group}' uses; pid {first.proc.pid} on "
            in log
        ), log
        assert first.healthy()
    finally:
        code = first.terminate()
    assert code == 0, first.tail()
    third = _guard(s, "guard-same")  # let go at exit: the name is free again
    try:
        third.wait_ready(120)
    finally:
        assert third.terminate() == 0, third.tail()
