"""Issue 19 item 11: a static member killed and restarted again and again never
rebalances the others.

Three `busguard run` processes on one PostgreSQL state, each a static member
(kafka.group_instance_id) with busguard's default session (10 s) and heartbeat (3 s).
One of them is killed with SIGKILL and started again, six times (at once, or
2.5 s later: well within the session), while
a trickle of signed records reaches every input partition. Counted from the
guards' own logs ("partitions assigned" / "partitions revoked"):

* the survivors are never revoked and never assigned again (no rebalance);
* every restarted process is assigned exactly once, with its predecessor's
  partitions;
* every input gets exactly one decision.

Before busguard.runtime.rejoin this failed: tansu counts neither a static
JoinGroup nor its SyncGroup as contact from the member, and holds them for
5 s + 3 s at this session, so the name's session ran out during the rejoin in
about half of the restarts (2 of 4 in one run, 10.8 s after the kill): the
broker evicted it, both survivors were revoked, and every partition waited
about 21 s (docs/notes-broker.md). The time each partition was without an
owner is printed, not asserted (no wall-clock asserts): the restarted guard's
own partitions wait out its start and tansu's two holds.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from pathlib import Path

import msgspec
from aiokafka import AIOKafkaProducer

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
    sender,
    until,
)
from busguard.protocol.records import Decision
from tests.pgkit import EmbeddedPostgres

#: seconds from each kill to the restart: at once, or after a supervisor's pause
#: that is still well within the session
RESTART_DELAYS = [0.0, 2.5] * 3
PARTITIONS = 4
#: busguard's defaults, which docs/operations.md recommends for static members on
#: tansu (the embedded config's 3000/300 is too short for a static group there)
SESSION = {"BUSGUARD_KAFKA__SESSION_TIMEOUT_MS": "10000", "BUSGUARD_KAFKA__HEARTBEAT_INTERVAL_MS": "3000"}


def _guard(s: Setup, instance: str) -> GuardProcess:
    return GuardProcess(s, env={**SESSION, "BUSGUARD_KAFKA__GROUP_INSTANCE_ID": instance})


async def _trickle(s: Setup, stop: asyncio.Event, coords: list[tuple[int, int]]) -> None:
    """One signed record to every input partition each 200 ms, so every owner has work."""
    producer = AIOKafkaProducer(bootstrap_servers=s.bootstrap, enable_idempotence=False, acks="all", linger_ms=0)
    await producer.start()
    try:
        signer, receiver, i = sender("loop-sender"), identity("executor").agent_id, 0
        while not stop.is_set():
            sent = []
            for part in range(PARTITIONS):
                rec = signer.sign(kind="handoff", task_id=f"loop-{i}", receiver=receiver, payload=b'{"n":1}')
                sent.append(await producer.send(s.handoffs, value=rec.value, partition=part, headers=list(rec.headers)))
                i += 1
            coords.extend((m.partition, m.offset) for m in await asyncio.gather(*sent))
            await asyncio.sleep(0.2)
    finally:
        await producer.stop()


def _ownerless(events: list[tuple[float, str, list[str]]], since: float, until_t: float) -> dict[str, list[float]]:
    """Per partition, the lengths of the spans in [since, until_t] when no guard owned it."""
    owners: dict[str, int] = defaultdict(int)
    free_from: dict[str, float] = {}
    gaps: dict[str, list[float]] = defaultdict(list)
    for t, kind, parts in sorted(events):
        for part in parts:
            owners[part] += 1 if kind == "assigned" else -1
            if owners[part] == 0:
                free_from[part] = t
            elif part in free_from and kind == "assigned":
                start = free_from.pop(part)
                if t >= since:
                    gaps[part].append(round(t - max(start, since), 1))
    for part, start in free_from.items():
        gaps[part].append(round(until_t - max(start, since), 1))
    return dict(gaps)


async def test_a_static_guard_killed_six_times_never_rebalances_the_others(broker: EmbeddedBroker, tmp_path: Path) -> None:
    with EmbeddedPostgres() as pg:
        s = await make_setup(
            tmp_path,
            broker.bootstrap,
            agents=["loop-sender", "executor"],
            max_records=30,
            state={"backend": "postgres", "dsn": pg.dsn, "schema": "deployment"},
        )
        coords: list[tuple[int, int]] = []
        stop = asyncio.Event()
        trickle = asyncio.create_task(_trickle(s, stop, coords))
        guards = [_guard(s, f"guard-{i}") for i in range(3)]
        retired: list[tuple[GuardProcess, float]] = []  # the killed processes and when: a kill -9 logs no revocation
        restarted: list[tuple[list[str], list[tuple[str, list[str]]]]] = []  # (held before the kill, the successor's events)
        try:
            for g in guards:
                await asyncio.to_thread(g.wait_ready, 120)
            every = sorted(f"{t}:{i}" for t in (s.handoffs, s.acks) for i in range(PARTITIONS))
            await until(lambda: sorted(p for g in guards for p in held(g)) == every and all(held(g) for g in guards), "a 3-way split")
            await until(lambda: all(g.decided() > 0 for g in guards), "every guard deciding")
            survivors_from = [len(assignment_events(guards[0])), len(assignment_events(guards[2]))]
            loop_started = time.time()
            for delay in RESTART_DELAYS:
                before = held(guards[1])
                retired.append((guards[1], time.time()))
                guards[1].kill9()
                await asyncio.sleep(delay)
                guards[1] = _guard(s, "guard-1")
                await until(lambda: held(guards[1]) != [], "the restarted member's assignment")
                await until(lambda: guards[1].decided() > 0, "the restarted member deciding")
                # (aiokafka "revokes" the empty set before a first join)
                restarted.append((before, [(kind, parts) for _, kind, parts in assignment_events(guards[1]) if parts]))
            stop.set()
            await trickle
            loop_ended = time.time()
            got = await collect(
                s.bootstrap, s.outputs, lambda c: all_decided(s, c, len(coords)) and distinct_sources(s, c) >= len(coords), timeout=120
            )
            events = [e for g in guards for e in assignment_events(g)]
            for g, killed_at in retired:
                events += assignment_events(g) + [(killed_at, "revoked", held(g))]
            survivor_events = [assignment_events(guards[0])[survivors_from[0] :], assignment_events(guards[2])[survivors_from[1] :]]
        finally:
            stop.set()
            codes = [g.terminate() for g in guards]
        assert codes == [0, 0, 0], "\n\n".join(g.tail() for g in guards)

    gaps = _ownerless(events, loop_started, loop_ended)
    print(f"\nspans without an owner during {len(RESTART_DELAYS)} restarts, s: {dict(sorted(gaps.items()))}")
    revocations = sum(kind == "revoked" for ev in survivor_events for _, kind, _ in ev)
    assert survivor_events == [[], []], f"{revocations} survivor revocations: {survivor_events}"
    for before, successor in restarted:
        assert successor == [("assigned", before)], (before, successor)
    # only the restarted guard's partitions ever waited; the survivors' never did
    assert set(gaps) <= {p for before, _ in restarted for p in before}, gaps

    decided = decisions_by_source(s, got)
    assert set(coords) <= set(decided)
    assert all(len(decided[c]) == 1 for c in coords), "an input got two different decisions"
    assert {msgspec.json.decode(next(iter(decided[c])), type=Decision).reason for c in coords} == {"admitted"}
