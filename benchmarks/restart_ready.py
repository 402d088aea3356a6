"""Restart-to-ready of a guard after `kill -9`, with dynamic and with static
group membership (kafka.group_instance_id, KIP-345), in one run.

Per repetition and mode, on the embedded broker, a fresh topic set and group
and real `busguard run` processes sharing one SQLite store:

* pair: two guards; once the group has settled, one is killed with SIGKILL
  and at once started again (under the same instance id in static mode).
  `ready_s` is the time from that start until the new process has decided a
  record (its busguard_decisions_total is above zero: it owns partitions and
  has taken a batch through the protocol). `survivor_rebalances` counts the
  assignments the other guard went through from the kill until
  session_timeout_ms + 3 s after the restart was ready (a dead dynamic
  member is evicted only when its session expires, which can rebalance a
  group that has already recovered), `survivor_paused_s` the time it held
  no partitions in that window (from each revoke to the next assignment).
* lone: one guard, killed and started again; `ready_s` as above.

Each kill comes once no assignment has changed for session_timeout_ms.
A trickle producer writes one signed record to every input partition each
100 ms throughout, so a guard that owns a partition always has work.
Medians and ranges over the repetitions, one JSON line.

    .venv/bin/python benchmarks/restart_ready.py [--reps 3] [--session-ms 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from aiokafka import AIOKafkaProducer  # noqa: E402

from busguard.devtools.broker import EmbeddedBroker  # noqa: E402
from busguard.devtools.guardkit import GuardProcess, Setup, identity, make_setup, sender  # noqa: E402

PARTITIONS = 4


def _events(p: GuardProcess, after: float) -> list[tuple[float, str, list[str]]]:
    """(unix time, "assigned"/"revoked", partitions) from the guard's JSON log."""
    out = []
    for line in p.log.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        try:
            e = json.loads(line)
        except ValueError:
            continue
        ev = str(e.get("event", ""))
        kind = "assigned" if ev.startswith("partitions assigned") else "revoked" if ev.startswith("partitions revoked") else None
        if kind is None:
            continue
        t = datetime.fromisoformat(str(e["timestamp"])).timestamp()
        if t >= after:
            out.append((t, kind, list(e.get("partitions", []))))
    return out


async def _trickle(s: Setup, stop: asyncio.Event) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=s.bootstrap, enable_idempotence=False, acks="all", linger_ms=0)
    await producer.start()
    try:
        signer, receiver, i = sender(f"restart-{s.group}"), identity("executor").agent_id, 0
        while not stop.is_set():
            for part in range(PARTITIONS):
                rec = signer.sign(kind="handoff", task_id=f"t-{i}", receiver=receiver, payload=b'{"op":"work"}')
                await producer.send(s.handoffs, value=rec.value, key=None, partition=part, headers=list(rec.headers))
                i += 1
            await asyncio.sleep(0.1)
    finally:
        await producer.stop()


async def _until(pred: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out: {what}")
        await asyncio.sleep(0.05)


async def _settled(procs: list[GuardProcess], quiet_s: float = 2.0, timeout: float = 120) -> None:
    """Every guard has decided something and no assignment changed for `quiet_s`."""
    start = time.time()
    await _until(lambda: all(p.decided() > 0 for p in procs), timeout, "every guard decides")
    while True:
        last = max((t for p in procs for t, _, _ in _events(p, start)), default=start)
        if time.time() - last >= quiet_s:
            return
        if time.time() - start > timeout:
            raise RuntimeError("the group did not settle")
        await asyncio.sleep(0.2)


async def one(broker: EmbeddedBroker, tmp: Path, name: str, *, guards: int, static: bool, session_ms: int) -> dict[str, float]:
    where = tmp / name
    where.mkdir()
    s = await make_setup(where, broker.bootstrap, agents=["executor", f"restart-guard-{name}"], partitions=PARTITIONS, max_records=100)

    def env(i: int) -> dict[str, str]:
        e = {"BUSGUARD_KAFKA__SESSION_TIMEOUT_MS": str(session_ms), "BUSGUARD_KAFKA__HEARTBEAT_INTERVAL_MS": "500"}
        if static:
            e["BUSGUARD_KAFKA__GROUP_INSTANCE_ID"] = f"guard-{i}"
        return e

    stop = asyncio.Event()
    trickle = asyncio.create_task(_trickle(s, stop))
    procs = [GuardProcess(s, env=env(i)) for i in range(guards)]
    try:
        for p in procs:
            await asyncio.to_thread(p.wait_ready, 90)
        # a steady group: on tansu a static member killed within ~2 s of an
        # assignment was once not given its partitions back for minutes
        await _settled(procs, quiet_s=session_ms / 1000)
        victim = guards - 1
        killed_at = time.time()
        procs[victim].kill9()
        procs[victim] = GuardProcess(s, env=env(victim))
        started = time.monotonic()
        await _until(lambda: procs[victim].decided() > 0, 120, "the restarted guard decides")
        ready_s = time.monotonic() - started
        result = {"ready_s": ready_s}
        if guards > 1:
            await asyncio.sleep(session_ms / 1000 + 3)
            ev = _events(procs[0], killed_at)
            paused, revoked_at = 0.0, None
            for t, kind, _ in ev:
                if kind == "revoked" and revoked_at is None:
                    revoked_at = t
                elif kind == "assigned" and revoked_at is not None:
                    paused += t - revoked_at
                    revoked_at = None
            result["survivor_rebalances"] = float(sum(1 for _, kind, _ in ev if kind == "assigned"))
            result["survivor_paused_s"] = paused
        return result
    finally:
        stop.set()
        await trickle
        for p in procs:
            try:
                p.terminate(60)
            except subprocess.TimeoutExpired:
                print(f"{name}: {p.log} did not stop on SIGTERM in 60 s; killed", file=sys.stderr)
                p.kill9()


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 2), "min": round(min(values), 2), "max": round(max(values), 2)}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--session-ms", type=int, default=10_000)
    ap.add_argument("--keep", type=Path, help="a new directory to run in and keep (the guards' logs), instead of a temporary one")
    args = ap.parse_args()
    result: dict[str, object] = {
        "benchmark": "restart_ready",
        "reps": args.reps,
        "session_timeout_ms": args.session_ms,
        "heartbeat_interval_ms": 500,
    }
    if args.keep is not None:
        args.keep.mkdir(parents=True)
    with tempfile.TemporaryDirectory() if args.keep is None else contextlib.nullcontext(str(args.keep)) as tmp:
        (Path(tmp) / "broker").mkdir()
        with EmbeddedBroker(log_dir=Path(tmp) / "broker") as broker:
            for mode in ("dynamic", "static"):
                for shape, guards in (("pair", 2), ("lone", 1)):
                    runs = [
                        await one(
                            broker, Path(tmp), f"{mode}-{shape}-{r}", guards=guards, static=mode == "static", session_ms=args.session_ms
                        )
                        for r in range(args.reps)
                    ]
                    result[f"{mode}_{shape}"] = {k: _summary([run[k] for run in runs]) for k in runs[0]}
    print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main())
