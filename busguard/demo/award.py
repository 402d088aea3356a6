"""`busguard demo award`: seed 002's contract net through the guard, on an embedded broker.

Awarder A calls for bids; B bids under `jcs-sha256` (which this deployment
recomputes), C bids cheaper under a private canonicalizer. A awards C on
cost: refused (`award_unrecomputable`), with a rebid notice naming B. A
awards B: forwarded. B's tampered result (a root over its own reading of the
output) is escalated to reconciliation, attributed to B, with both roots;
B's honest result settles. The auditor's per-call section says who won, in
which mode, and that the call settled after an escalation.

All records are keyed by the call id, so they share a partition and the
guard sees them in the net's order. `seed_net` is also what the integration
test sends through `busguard run`.
"""

from __future__ import annotations

import base64
import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec

from busguard.config import Config
from busguard.demo.deployment import config_text
from busguard.policies.award.canonicalizers import JcsSha256
from busguard.policies.award.wire import AwardPayload, BidPayload, CallPayload, ReceiptTemplate, ResultPayload
from busguard.protocol.identity import multikey_encode
from busguard.protocol.keyfile import Identity, new_identity, write_key
from busguard.protocol.records import Decision, audit_decoder
from busguard.protocol.timestamps import format_timestamp
from busguard.sdk.sender import Sender, SignedRecord

CALL: Final = "call-transform-1"
OUTPUT: Final = b'{"rows": [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}], "count": 2}'
AGENTS: Final = ("awarder", "bidder-b", "bidder-c")
TIMEOUT_S: Final = 60.0


@dataclass
class NetStep:
    label: str
    record: SignedRecord
    expect: tuple[str, str]  # (outcome, reason)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _sign(who: Sender, kind: str, task_id: str, payload: msgspec.Struct, to: str) -> SignedRecord:
    return who.sign(kind=kind, task_id=task_id, receiver=to, payload=msgspec.json.encode(payload))


def seed_net(a: Sender, b: Sender, c: Sender, *, call: str = CALL, to: str = "guard", now_ms: int | None = None) -> list[NetStep]:
    """The seed's incident as signed records, in order, with what the guard must decide."""
    deadline = format_timestamp((now_ms if now_ms is not None else time.time_ns() // 1_000_000) + 3_600_000)
    honest = JcsSha256().root(OUTPUT)
    tampered = hashlib.sha256(OUTPUT).hexdigest()  # B's own reading: self-consistent, not the jcs-sha256 root it bid
    call_p = CallPayload(
        awarder=a.agent_id, task_class="transform.table", task="normalise the rows", requires_check=True, award_deadline=deadline
    )
    bid_b = BidPayload(call=call, cost=120, deadline=deadline, receipt=ReceiptTemplate(canonicalizer_id="jcs-sha256", commits="output"))
    bid_c = BidPayload(
        call=call, cost=80, deadline=deadline, receipt=ReceiptTemplate(canonicalizer_id="c-private-norm.v1", commits="output")
    )
    return [
        NetStep("A calls for bids", _sign(a, "cnet.call", call, call_p, to), ("forward", "admitted")),
        NetStep("B bids 120 under jcs-sha256", _sign(b, "cnet.bid", f"{call}/bid-b", bid_b, to), ("forward", "admitted")),
        NetStep("C bids 80 under a private canonicalizer", _sign(c, "cnet.bid", f"{call}/bid-c", bid_c, to), ("forward", "admitted")),
        NetStep(
            "A awards C on cost",
            _sign(
                a, "cnet.award", call, AwardPayload(winner=f"{call}/bid-c", ranked=[f"{call}/bid-c", f"{call}/bid-b"], mode="verified"), to
            ),
            ("reject", "award_unrecomputable"),
        ),
        NetStep(
            "A re-awards to B",
            _sign(
                a, "cnet.award", call, AwardPayload(winner=f"{call}/bid-b", ranked=[f"{call}/bid-c", f"{call}/bid-b"], mode="verified"), to
            ),
            ("forward", "admitted"),
        ),
        NetStep(
            "B delivers with a tampered root",
            _sign(b, "cnet.result", call, ResultPayload(state_root=tampered, output=_b64(OUTPUT)), to),
            ("escalate", "settlement_mismatch"),
        ),
        NetStep(
            "B delivers its honest result",
            _sign(b, "cnet.result", call, ResultPayload(state_root=honest, output=_b64(OUTPUT)), to),
            ("forward", "admitted"),
        ),
    ]


def header_of(record: Any, name: str) -> bytes | None:
    return next((v for k, v in record.headers if k == name), None)


def _registry_text(ids: dict[str, Identity]) -> str:
    out = "# Written by `busguard demo award`: the net's three agents. Reference: docs/config.md.\n"
    for name, ident in ids.items():
        out += f'[[agent]]\nid = "{name}"\n  [[agent.key]]\n  key_id = "{name}-1"\n  public_key = "{multikey_encode(ident.public_key)}"\n'
    return out


class Seen:
    def __init__(self) -> None:
        self.by_topic: dict[str, list[Any]] = {}

    def __getitem__(self, topic: str) -> list[Any]:
        return self.by_topic.setdefault(topic, [])


async def _collect(cfg: Config, topics: list[str], done: Any, failure: Any) -> Seen:
    from aiokafka import TopicPartition

    from busguard.runtime.clients import partitions_of, reader

    parts = await partitions_of(cfg, topics, name="award-tap")
    tps = [TopicPartition(t, p) for t in topics for p in parts.get(t, ())]
    consumer = reader(cfg, name="award-tap")
    await consumer.start()
    seen = Seen()
    try:
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + TIMEOUT_S
        while not done(seen):
            if failure() is not None or time.monotonic() > deadline:
                raise RuntimeError(failure() or f"timed out after {TIMEOUT_S:.0f}s waiting for every output")
            for tp, recs in (await consumer.getmany(timeout_ms=200)).items():
                seen[tp.topic].extend(recs)
        return seen
    finally:
        await consumer.stop()


def run_award_demo(keep_dir: str | None) -> int:
    """`busguard demo award [--dir DIR]`: the exit code."""
    from busguard.demo.run import run_scenario

    stale = ("state.db", "state.db-wal", "state.db-shm", "reconcile.db", "reconcile.db-wal", "reconcile.db-shm")
    return run_scenario("demo award", keep_dir, lambda work, _owned: _demo(work), stale=stale)


async def _demo(work: Path) -> int:
    from busguard.demo.run import demo_deployment, start_services

    ids = {n: new_identity() for n in AGENTS}
    guard_id, reconciler_id = new_identity(), new_identity()
    write_key(work / "guard.key", guard_id)
    write_key(work / "reconciler.key", reconciler_id)
    operator = new_identity()
    (work / "operators.toml").write_text(
        f'[[operator]]\nname = "demo"\npublic_key = "{multikey_encode(operator.public_key)}"\n', encoding="utf-8"
    )
    (work / "keys.toml").write_text(_registry_text(ids), encoding="utf-8")
    print("busguard demo award: seed 002's contract net (awarder A, bidders B and C) through the guard")
    async with demo_deployment(work, config_text) as (cfg, _):
        services = start_services(cfg)
        try:
            await services.start()
            a, b, c = (Sender(ids[n].seed, agent_id=n, key_id=f"{n}-1") for n in AGENTS)
            steps = seed_net(a, b, c)
            return await _run(cfg, steps, services, guard_id.public_key)
        finally:
            await services.stop()


async def _run(cfg: Config, steps: list[NetStep], services: Any, guard_key: bytes) -> int:
    from busguard.audit.awards import call_reports
    from busguard.audit.ledger import Ledger
    from busguard.protocol.attestation import verify_decision_record
    from busguard.runtime.clients import producer as make_producer

    t = cfg.topics
    rebid = t.route_topic("rebid")
    route = cfg.routes[0]  # the handoffs route: any route guards any kind
    downstream = route.downstream
    producer = make_producer(cfg, name="agents")
    await producer.start()
    try:
        for s in steps:
            await producer.send_and_wait(route.inputs[0], value=s.record.value, key=CALL.encode(), headers=s.record.headers)
    finally:
        await producer.stop()
    topics = [downstream, t.dead_letter, t.reconciliation, t.audit, rebid]
    forwards = sum(s.expect[0] == "forward" for s in steps)

    def guard_decisions(got: Seen) -> list[Any]:
        # the audit topic also carries the reconciler's resolutions (its own key)
        return [r for r in got[t.audit] if isinstance(audit_decoder.decode(r.value), Decision)]

    def done(got: Seen) -> bool:
        held = len(got[t.audit]) > len(guard_decisions(got))  # the reconciler's resolution of the escalation
        return (
            len(guard_decisions(got)) >= len(steps)
            and held
            and len(got[rebid]) >= 1
            and len(got[downstream]) >= forwards
            and len(got[t.reconciliation]) >= 1
        )

    seen = await _collect(cfg, topics, done, services.failure)
    decisions: dict[str | None, Decision] = {}
    ledger = Ledger()
    for r in guard_decisions(seen):
        verify_decision_record(r.value, list(r.headers), guard_key)  # sealed by this guard, bound to these bytes
        d = msgspec.json.decode(r.value, type=Decision)
        decisions[d.receipt_id] = d
        ledger.add_decision(r.value, d, verified=True)
    print("\nwhere each record went, and why:")
    failed = 0
    for i, s in enumerate(steps, 1):
        found = decisions.get(s.record.receipt_id)
        got = (found.outcome, found.reason) if found is not None else ("missing", "-")
        ok = got == s.expect
        failed += not ok
        where = {"forward": "downstream", "reject": "dead-letter", "escalate": "reconciliation"}.get(got[0], got[0])
        print(f"  {'ok' if ok else 'PROBLEM':7} {i}. {s.label:42} -> {where:14} {got[1]}" + ("" if ok else f"  (expected {s.expect})"))
    for n in seen[rebid]:
        notice = msgspec.json.decode(n.value)
        names = ", ".join(f"{x['bid']} ({x['bidder']}, cost {x['cost']}, {x['mode']})" for x in notice["awardable"])
        print(f"\nrebid notice on {rebid} to {notice['awarder']}: {notice['reason']}; awardable: {names or 'none'}")
    for e in seen[t.reconciliation]:
        if header_of(e, "busguard-outcome") != b"escalate":
            continue  # an operator's command, not an escalation
        esc = msgspec.json.decode(e.value, type=Decision)
        a = esc.annotations or {}
        print(
            f"escalated on {t.reconciliation} (the reconciler holds it for an operator): {esc.reason}, "
            f"attributed to {a.get('attributed_to')}: committed {a.get('committed_root')}, recomputed {a.get('recomputed_root')}"
        )
    for f in seen[downstream]:
        hv = dict(f.headers).get("busguard-annotation-verification")
        if hv is not None:
            print(f"settled result forwarded to {downstream} with busguard-annotation-verification: {hv.decode()}")
    print("\naudit, per call:")
    for c in call_reports(ledger.decisions.values()):
        print(
            f"  {c.call}: {c.bids} bids; refused awards {c.refused_awards}; awarded to {c.awarded_to} ({c.winner}) "
            f"mode {c.mode}; {c.settlement}; escalations {c.escalations}"
        )
    if failed:
        print(f"\ndemo FAILED: {failed} record(s) did not go where expected")
        return 1
    print(
        f"\ndemo OK: all {len(steps)} records went where they should; C's unrecomputable award was refused, B's tampered root escalated to B."
    )
    return 0
