"""`busguard demo handoff`: seed 004's three failure modes, and how busguard prevents each.

On an embedded broker, with the guard in-process: an operator's compromise
notice, then session handoffs from a compromised session `session-a` to a
successor `successor-b`, each showing one failure mode the seed names and
the guarded outcome:

  1. compromise inheritance: an undeclared compromise (known from the
     notice) carrying operational state is dead-lettered; the same session
     may still move only its logs; a declared one moves its scoped state, and
     a forged component is stripped before the successor sees it;
  2. double compromise: a potentially compromised successor gets the state
     only as the session's signed interaction rule allows: forwarded with a
     caution flag, kept on the quarantine topic, or escalated;
  3. handoff paralysis: with nothing verified nothing moves, but a session
     that cannot verify its successor still moves its verified-clean state;
  4. the notice lifted: the operator signs a clearance of its notice
     (issue 22), and the session's next handoff is a standard one again.

The successor's side is shown too: every forward is checked with the SDK
(the guard's attestation, then each component against the signed scope),
and the auditor checks the whole log at the end. Exit code 0 only if every
record went where it should and the audit is clean.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from busguard.demo.handoff_scenario import (
    KEY_ID,
    OPERATOR,
    SESSION,
    SUCCESSOR,
    TIMEOUT_S,
    Party,
    Scenario,
    config_text,
    registry_text,
)
from busguard.policies.compromise.message import (
    decode_handoff,
)
from busguard.protocol.keyfile import new_identity, write_key
from busguard.protocol.records import Decision


def _where(d: Decision, quarantined: bool) -> tuple[str, str]:
    ann = d.annotations or {}
    if d.outcome == "forward":
        return "downstream", ann.get("verdict", str(d.reason))
    if quarantined:
        return "quarantine", str(d.reason)
    return ("reconciliation" if d.outcome == "escalate" else "dead-letter"), str(d.reason)


def _successor_check(
    value: bytes, headers: list[tuple[str, bytes]], guard_key: bytes, session_keys: Callable[[str, str | None], list[tuple[str, bytes]]]
) -> str:
    """What the successor does with a forward: the guard's attestation, then each component against the signed scope."""
    from busguard.protocol.attestation import verify_admitted
    from busguard.sdk.scope import verify_forwarded

    att = verify_admitted(value, headers, guard_key, SUCCESSOR)
    task = msgspec.json.decode(dict(headers)["busguard-receipt"], type=dict)["task_id"]
    report = verify_forwarded(value, handoff_id=task, session=SESSION, keys=session_keys)
    caution = dict(headers).get("busguard-annotation-caution")
    verified = ",".join(c.name for c in report.verified)
    how = "replaced value, forwarded_sha256" if att.forwarded_sha256 else "as signed"
    flag = f"; caution={caution.decode()}" if caution else ""
    ok = "all" if report.all_verified else "NOT all"
    return f"successor: attestation ok ({how}); {ok} components match the signed scope: [{verified}]{flag}"


async def _run(work: Path) -> int:
    from aiokafka import TopicPartition

    from busguard import wiring
    from busguard.demo.run import demo_deployment
    from busguard.runtime.clients import partitions_of, producer, reader

    names = (SESSION, SUCCESSOR, OPERATOR)
    parties = {n: Party(n, new_identity()) for n in names}
    write_key(work / "guard.key", new_identity())
    (work / "keys.toml").write_text(registry_text(parties), encoding="utf-8")
    print("busguard demo handoff: seed 004's failure modes (compromised session handoffs) and their prevention")
    async with demo_deployment(work, config_text) as (cfg, _):
        store = wiring.open_guard_store(cfg, wiring.now_ms(), genesis=True)
        guard = wiring.build_guard(cfg, store, wiring.guard_keys(cfg))
        task = asyncio.create_task(guard.run(), name="busguard-guard")
        deadline = time.monotonic() + TIMEOUT_S
        while not guard.loop.liveness.started:
            if task.done() or time.monotonic() > deadline:
                raise RuntimeError(f"the guard did not start: {task.exception() if task.done() else 'timeout'}")
            await asyncio.sleep(0.05)
        steps = Scenario(parties).steps()
        route = cfg.routes[0]
        quarantine = cfg.topics.route_topic("quarantine")
        topics = [route.downstream, cfg.topics.dead_letter, cfg.topics.reconciliation, cfg.topics.audit, quarantine]
        parts = await partitions_of(cfg, topics, name="demo-tap")
        consumer: Any = reader(cfg, name="demo-tap")
        await consumer.start()
        tps = [TopicPartition(t, p) for t in topics for p in parts.get(t, [0])]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        out = producer(cfg, name="demo-agents")
        await out.start()
        try:
            for s in steps:  # one partition, in order: the notice is decided before the handoffs it covers
                await out.send_and_wait(route.inputs[0], value=s.record.value, key=b"session-a", headers=s.record.headers)
        finally:
            await out.stop()
        by_topic: dict[str, list[Any]] = {t: [] for t in topics}
        try:
            while len(by_topic[cfg.topics.audit]) < len(steps):
                if time.monotonic() > deadline + TIMEOUT_S:
                    raise RuntimeError(f"timed out: {len(by_topic[cfg.topics.audit])} of {len(steps)} decisions seen")
                for tp, recs in (await consumer.getmany(timeout_ms=200)).items():
                    by_topic[tp.topic].extend(recs)
            await asyncio.sleep(0.5)  # the quarantine notice and forwards follow their audit record in the same batch
            for tp, recs in (await consumer.getmany(timeout_ms=500)).items():
                by_topic[tp.topic].extend(recs)
        finally:
            await consumer.stop()
            guard.request_stop()
            await asyncio.gather(task, return_exceptions=True)
            store.close()
        from busguard.demo.render import render_audit, run_auditor

        guard_key = guard.identity.public_key
        audit = await asyncio.to_thread(run_auditor, cfg, guard_key, guard_key)  # no reconciler ran: nothing it sealed to check

    decisions = {d.receipt_id: d for d in (msgspec.json.decode(r.value, type=Decision) for r in by_topic[cfg.topics.audit])}
    quarantined = {r.key.decode() for r in by_topic[quarantine]}
    forwards = {msgspec.json.decode(dict(r.headers)["busguard-receipt"], type=dict)["task_id"]: r for r in by_topic[route.downstream]}
    session_key = parties[SESSION].identity.public_key

    def session_keys(agent: str, key_id: str | None) -> list[tuple[str, bytes]]:
        return [(KEY_ID, session_key)] if agent == SESSION and key_id in (None, KEY_ID) else []

    failed = 0
    mode = ""
    print()
    print("where each record went, and why:")
    for i, s in enumerate(steps, 1):
        if s.mode != mode:
            mode = s.mode
            print(f"  -- failure mode {mode}")
        d = decisions.get(s.record.receipt_id)
        if d is None:
            s.got = ("missing", "-")
        else:
            s.got = _where(d, d.task_id in quarantined)
            ann = d.annotations or {}
            stripped = msgspec.json.decode(ann.get("stripped", "[]"))
            if stripped:
                s.note = "stripped: " + ", ".join(f"{c['name']} ({c['why']}, sha256 {c['sha256'][:12]}…)" for c in stripped)
            if s.check_scope and d.task_id in forwards:
                fwd = forwards[d.task_id]
                try:
                    s.note += ("; " if s.note else "") + _successor_check(
                        fwd.value, list(fwd.headers), guard.identity.public_key, session_keys
                    )
                    forwarded = [c.name for c in decode_handoff(fwd.value).components]
                    if "memory" in forwarded and s.expect[1] == "scoped":
                        s.got = ("downstream", "FORGED COMPONENT FORWARDED")
                except ValueError as exc:
                    s.got = ("downstream", f"successor check failed: {exc}")
        ok = s.got == s.expect
        failed += not ok
        print(f"  {'ok' if ok else 'PROBLEM'} {i:>2}. {s.label:<55} -> {s.got[0]:<15} {s.got[1]}")
        if not ok:
            print(f"         expected {s.expect[0]} {s.expect[1]}")
        if d is not None and d.annotations and "manifest_digest" in d.annotations:
            print(f"         manifest {d.annotations['manifest_digest'][:16]}… (on the audit topic)")
        if s.note:
            print(f"         {s.note}")
    print()
    print("audit: `busguard audit` over the audit log and the downstream topic")
    print(render_audit(audit))
    print()
    if failed or not audit.ok:
        why = [f"{failed} of {len(steps)} records did not go where expected"] if failed else []
        print("demo handoff FAILED: " + "; ".join(why + ([] if audit.ok else ["the audit found violations"])))
        return 1
    print(
        f"demo handoff OK: all {len(steps)} records went where they should; no compromise inherited, no forged state forwarded, verified state still moved."
    )
    return 0


def run_handoff_demo(keep_dir: str | None) -> int:
    """`busguard demo handoff [--dir DIR]`. Returns the process exit code."""
    from busguard.demo.run import run_scenario

    stale = ("busguard.toml", "keys.toml", "guard.key", "broker.log")
    return run_scenario("demo handoff", keep_dir, lambda work, _owned: _run(work), stale=stale)
