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
* every input gets exactly one decision, and every admitted record reaches
  downstream once (re-emissions only as byte-identical copies).

Before busguard.runtime.rejoin this failed: tansu counts neither a static
JoinGroup nor its SyncGroup as contact from the member, and holds them for
5 s + 3 s at this session, so the name's session ran out during the rejoin in
about half of the restarts (2 of 4 in one run, 10.8 s after the kill): the
broker evicted it, both survivors were revoked, and every partition waited
about 21 s (docs/notes-broker.md). The time each partition was without an
owner, and each restart's time from process start to its assignment, are
printed, not asserted (no wall-clock asserts).

The loop (`run_kill_loop`) and its checks (`check_kill_loop`) are shared with
tests/integration/test_guard_static_kafka.py, which runs them on Apache Kafka.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka import AIOKafkaProducer

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import (
    Collected,
    GuardProcess,
    Setup,
    assignment_events,
    collect,
    distinct_sources,
    header,
    held,
    identity,
    make_setup,
    sender,
    until,
)
from tests.pgkit import EmbeddedPostgres

from .test_guard_crash import check_exactly_once

#: seconds from each kill to the restart: at once, or after a supervisor's pause
#: that is still well within the session
RESTART_DELAYS = [0.0, 2.5] * 3
PARTITIONS = 4
#: busguard's defaults, which docs/operations.md recommends for static members on
#: tansu (the embedded config's 3000/300 is too short for a static group there)
SESSION = {"BUSGUARD_KAFKA__SESSION_TIMEOUT_MS": "10000", "BUSGUARD_KAFKA__HEARTBEAT_INTERVAL_MS": "3000"}


@dataclass
class KillLoop:
    """What one run of the loop saw, for `check_kill_loop`."""

    setup: Setup
    got: Collected
    coords: list[tuple[int, int]]
    #: every guard's assignment events, the killed ones' last holding closed at the kill
    events: list[tuple[float, str, list[str]]]
    #: the two survivors' events from the first kill on
    survivor_events: list[list[tuple[float, str, list[str]]]]
    #: per restart: (held before the kill, the successor's non-empty events)
    restarted: list[tuple[list[str], list[tuple[str, list[str]]]]]
    #: per restart: seconds from the new process's start to its first assignment
    back_after: list[float]
    loop_started: float
    loop_ended: float
    bridged: int = field(default=0)


def _guard(s: Setup, instance: str, env: dict[str, str]) -> GuardProcess:
    return GuardProcess(s, env={**env, "BUSGUARD_KAFKA__GROUP_INSTANCE_ID": instance})


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


async def run_kill_loop(bootstrap: str, tmp_path: Path, env: dict[str, str]) -> KillLoop:
    """Three static guards under `env`; guards[1] killed and restarted after each of RESTART_DELAYS."""
    with EmbeddedPostgres() as pg:
        s = await make_setup(
            tmp_path,
            bootstrap,
            agents=["loop-sender", "executor"],
            max_records=30,
            state={"backend": "postgres", "dsn": pg.dsn, "schema": "deployment"},
        )
        coords: list[tuple[int, int]] = []
        stop = asyncio.Event()
        trickle = asyncio.create_task(_trickle(s, stop, coords))
        guards = [_guard(s, f"guard-{i}", env) for i in range(3)]
        retired: list[tuple[GuardProcess, float]] = []  # the killed processes and when: a kill -9 logs no revocation
        restarted: list[tuple[list[str], list[tuple[str, list[str]]]]] = []
        back_after: list[float] = []
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
                started = time.time()
                guards[1] = _guard(s, "guard-1", env)
                await until(lambda: held(guards[1]) != [], "the restarted member's assignment")
                await until(lambda: guards[1].decided() > 0, "the restarted member deciding")
                # (aiokafka "revokes" the empty set before a first join)
                events = [(t, kind, parts) for t, kind, parts in assignment_events(guards[1]) if parts]
                back_after.append(round(events[0][0] - started, 1))
                restarted.append((before, [(kind, parts) for _, kind, parts in events]))
            stop.set()
            await trickle
            loop_ended = time.time()

            def settled(c: Collected) -> bool:  # every input decided, every admitted record downstream
                ids = {header(r, "busguard-decision-id") for r in c[s.downstream_handoffs]}
                return distinct_sources(s, c) >= len(coords) and len(ids) >= len(coords)

            got = await collect(s.bootstrap, s.outputs, settled, timeout=120)
            events = [e for g in guards for e in assignment_events(g)]
            for g, killed_at in retired:
                events += assignment_events(g) + [(killed_at, "revoked", held(g))]
            survivor_events = [assignment_events(guards[0])[survivors_from[0] :], assignment_events(guards[2])[survivors_from[1] :]]
            bridged = sum("keeping the static member's session alive" in g.log.read_text(errors="replace") for g, _ in retired[1:])
            bridged += "keeping the static member's session alive" in guards[1].log.read_text(errors="replace")
        finally:
            stop.set()
            codes = [g.terminate() for g in guards]
        assert codes == [0, 0, 0], "\n\n".join(g.tail() for g in guards)
    return KillLoop(s, got, coords, events, survivor_events, restarted, back_after, loop_started, loop_ended, bridged)


def check_kill_loop(run: KillLoop) -> None:
    """No survivor revoked or reassigned, every successor given its predecessor's
    partitions at once, exactly one decision per input and once downstream."""
    gaps = _ownerless(run.events, run.loop_started, run.loop_ended)
    revocations = sum(kind == "revoked" for ev in run.survivor_events for _, kind, _ in ev)
    print(
        f"\n{len(RESTART_DELAYS)} restarts (delays {RESTART_DELAYS} s): survivor revocations {revocations}; "
        f"process start -> partitions assigned, s: {run.back_after}; restarts that heartbeated for their predecessor "
        f"(busguard.runtime.rejoin): {run.bridged}; spans without an owner, s: {dict(sorted(gaps.items()))}"
    )
    assert run.survivor_events == [[], []], f"{revocations} survivor revocations: {run.survivor_events}"
    for before, successor in run.restarted:
        assert successor == [("assigned", before)], (before, successor)
    # only the restarted guard's partitions ever waited; the survivors' never did
    assert set(gaps) <= {p for before, _ in run.restarted for p in before}, gaps
    check_exactly_once(run.setup, run.got, run.coords, ["admitted"] * len(run.coords))


async def test_a_static_guard_killed_six_times_never_rebalances_the_others(broker: EmbeddedBroker, tmp_path: Path) -> None:
    check_kill_loop(await run_kill_loop(broker.bootstrap, tmp_path, SESSION))
