"""`busguard demo taint`: seed 003's incident through the guard, on an embedded broker.

An incident responder (the demo's `planner` key) asks for a containment
replay of the trace `read_secret -> summarize -> post_message`, where
`post_message` was killed between its write and the acknowledgment. The
requests go to a `taint` route (`[[routes]]`, input `agents.taint-requests`,
downstream `agents.taint-plans`); the containment agent (`executor`) reads
the plans:

     the trace alone                      -> dead-letter  taint_replay_refused (node set: post_message)
     the same, retried under a new nonce  -> dead-letter  taint_replay_refused (a verdict, not an error)
     the trace with the gateway's ledger  -> downstream   admitted: a token-level plan, both sinks
     a trace with a cycle                 -> dead-letter  taint_request_malformed

The containment agent opens the plan with the SDK (`open_admitted`, which
checks the guard's attestation over the replaced value), and the auditor
checks the log. Exit 0 only if every request went where it should and the
audit is clean.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from busguard.config import Config
from busguard.demo.deployment import config_text, write_deployment
from busguard.demo.render import render_audit, run_auditor
from busguard.demo.run import COLLECT_TIMEOUT_S, demo_deployment, run_scenario, start_services
from busguard.demo.tap import Tap
from busguard.policies.taint.replay import KIND, encode_request
from busguard.protocol.keyfile import Identity
from busguard.sdk.sender import Sender, SignedRecord

REQUESTS: Final = "agents.taint-requests"
PLANS: Final = "agents.taint-plans"

#: The incident as examples/taint/ has it (make_examples.py), inlined so an installed busguard
#: needs no repository checkout; the integration test checks the two agree.
INCIDENT_TRACE: Final = (
    b'{"format": "busguard.taint-trace.v1", "trace_id": "incident-2026-11-08", "tainted_output": "post_message", "nodes": [\n'
    b' {"id": "read_secret", "predecessors": [], "operation": "read_secret", "side_effects": false, "outcome": "success",'
    b' "external_input_hash": "9fa89a56d35eea7e9ea027bcd351080276780da8cedc0bebb6b6090e51a7da10",'
    b' "output_hash": "33848a4d42975d12826315d5095a144e49593cc63143046f28be7098e0035815",'
    b' "input_hash": "ca93fb5e2b519ac930104bd2e8ca809ac4bff463656888e6276ad9202b24e1b2"},\n'
    b' {"id": "summarize", "predecessors": ["read_secret"], "operation": "summarize", "side_effects": false, "outcome": "success",'
    b' "external_input_hash": "8435d045733df8488850b6e01397bee352a272f61a6480d0f2c65d8e54d3c12a",'
    b' "output_hash": "9790e53a5868fb0adee7660d1c30730afcabe3d8f500e4e112d9aadd7ff7ffe7",'
    b' "input_hash": "8298f7132929983ce75eab09d831bb363c12e8d1d56bb252b4561919e9c3261d"},\n'
    b' {"id": "post_message", "predecessors": ["summarize"], "operation": "post_message", "side_effects": true, "outcome": "pending",'
    b' "token": "tok-post-7", "output_hash": null, "sinks": ["chat:#ops"],'
    b' "input_hash": "8537433f96ed09dc22726b4f2386cfb0812b7133a93f87f4fe2eade3da488828"}]}\n'
)
INCIDENT_LEDGER: Final = (
    b'{"format": "busguard.taint-ledger.v1", "entries": [{"token": "tok-post-7", "effects": ['
    b'{"id": "delivery-1", "status": "success", "sinks": ["chat:#ops"]},'
    b' {"id": "delivery-2", "status": "success", "sinks": ["webhook:partner-archive"]}]}]}\n'
)
CYCLE_TRACE: Final = (
    b'{"format": "busguard.taint-trace.v1", "nodes": ['
    b'{"id": "a", "predecessors": ["b"], "operation": "x", "side_effects": false, "outcome": "success", "input_hash": null, "output_hash": null},'
    b' {"id": "b", "predecessors": ["a"], "operation": "x", "side_effects": false, "outcome": "success", "input_hash": null, "output_hash": null}]}'
)


@dataclass
class Request:
    label: str
    record: SignedRecord
    expect_topic: str
    expect_reason: str
    coords: tuple[str, int, int] = ("", -1, -1)
    got: str = "(nothing)"
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def build_requests(planner: Identity, executor_id: str, dead_letter: str) -> list[Request]:
    responder = Sender(planner.seed, agent_id="planner", key_id="planner-1")

    def sign(task: str, payload: bytes) -> SignedRecord:
        return responder.sign(kind=KIND, task_id=task, receiver=executor_id, payload=payload)

    alone = encode_request(INCIDENT_TRACE)
    return [
        Request("contain: the incident trace alone", sign("incident-2026-11-08", alone), dead_letter, "taint_replay_refused"),
        Request("retried: the same request, new nonce", sign("incident-2026-11-08", alone), dead_letter, "taint_replay_refused"),
        Request(
            "contain: the trace with the gateway's ledger",
            sign("incident-2026-11-08/ledger", encode_request(INCIDENT_TRACE, INCIDENT_LEDGER)),
            PLANS,
            "admitted",
        ),
        Request(
            "malformed: a trace with a cycle", sign("incident-bad", encode_request(CYCLE_TRACE)), dead_letter, "taint_request_malformed"
        ),
    ]


def taint_config_text(bootstrap: str) -> str:
    """The demo's config with the taint route: any route carries any kind; this one gives the plans their own topic."""
    return config_text(bootstrap) + f'\n[[routes]]\nname = "taint"\ninputs = ["{REQUESTS}"]\ndownstream = "{PLANS}"\n'


def run_taint_demo(keep_dir: str | None, *, verbose: bool = False) -> int:
    """`busguard demo taint [--dir DIR]`. Returns the process exit code."""
    return run_scenario("demo taint", keep_dir, _demo, verbose=verbose)


async def _demo(work: Path, owned: bool) -> int:
    ids = write_deployment(work)
    print("busguard demo taint: seed 003's incident (read_secret -> summarize -> post_message) through the guard")
    async with demo_deployment(work, taint_config_text) as (cfg, bootstrap):
        print(f"  broker     tansu at {bootstrap} (memory storage)")
        print(f"  route      taint: {REQUESTS} -> {PLANS}; refusals to {cfg.topics.dead_letter}")
        services = start_services(cfg)
        stopped = False
        try:
            await services.start()
            requests = build_requests(ids.planner, ids.executor.agent_id, cfg.topics.dead_letter)
            complete = await _drive(cfg, requests, ids.executor, ids.guard.public_key, services.failure)
            await services.stop()
            stopped = True
            print()
            print("where each request went, and why:")
            for i, r in enumerate(requests, 1):
                print(f"  {'ok' if not r.problems else '!!'} {i}. {r.label:<46} -> {r.got}")
                for line in r.lines:
                    print(f"         {line}")
                for p in r.problems:
                    print(f"         PROBLEM: {p} (wanted {r.expect_topic} / {r.expect_reason})")
            print()
            print("audit: `busguard audit` over the audit log and the downstream topics")
            audit = await asyncio.to_thread(run_auditor, cfg, ids.guard.public_key, ids.reconciler.public_key)
            print(render_audit(audit))
            print()
            bad = not complete or any(r.problems for r in requests)
            if not bad and audit.ok:
                print(
                    f"demo OK: all {len(requests)} requests went where they should; the refusal carried its node set, the plan its attestation."
                )
                return 0
            print(
                "demo FAILED: "
                + "; ".join(
                    w for w, b in (("some requests did not go where expected", bad), ("the audit found violations", not audit.ok)) if b
                )
            )
            return 1
        finally:
            if not stopped:
                await services.stop()


async def _drive(cfg: Config, requests: list[Request], executor: Identity, guard_key: bytes, failure: object) -> bool:
    from busguard.runtime.clients import producer as make_producer

    tap = Tap(cfg)
    await tap.start()
    try:
        producer = make_producer(cfg, name="responder")
        await producer.start()
        try:
            for r in requests:  # one key: one partition, in order
                meta = await producer.send_and_wait(REQUESTS, value=r.record.value, key=b"responder", headers=r.record.headers)
                r.coords = (meta.topic, meta.partition, meta.offset)
        finally:
            await producer.stop()
        print(f"  produced   {len(requests)} signed taint-replay requests from the responder")

        def decided() -> bool:
            ds = [tap.decisions.get(r.coords) for r in requests]
            return all(d is not None and d.decision_id in tap.placed for d in ds)

        complete = await tap.until(decided, COLLECT_TIMEOUT_S, failure)  # type: ignore[arg-type]
        for r in requests:
            _judge(r, tap, executor, guard_key)
        return complete
    finally:
        await tap.stop()


def _judge(r: Request, tap: Tap, executor: Identity, guard_key: bytes) -> None:
    from busguard.protocol.attestation import HEADER_DETAIL
    from busguard.sdk.receiver import open_admitted

    d = tap.decisions.get(r.coords)
    if d is None or d.decision_id not in tap.placed:
        r.problems.append("no decision or no output")
        return
    topic, record = tap.placed[d.decision_id]
    r.got = f"{topic:<22} {d.reason}"
    if (topic, d.reason) != (r.expect_topic, r.expect_reason):
        r.problems.append(f"went to {topic} / {d.reason}")
        return
    if d.reason == "taint_replay_refused":
        detail = json.loads(dict(record.headers)[HEADER_DETAIL])
        r.lines.append(
            f"{d.reason}: condition {detail['condition']}, unknowable nodes {detail['nodes']}, {detail['suspect_total']} nodes still suspect"
        )
        if r.label.startswith("retried"):
            r.lines.append("the same verdict again: a refusal is a first-class signal to scope by hand, not an error to retry")
        if "post_message" not in detail["nodes"]:
            r.problems.append("post_message is not in the refusal's node set")
    elif d.reason == "taint_request_malformed":
        r.lines.append(f"{d.reason}: {dict(record.headers)[HEADER_DETAIL].decode()}")
    else:
        admitted = open_admitted(record.value, list(record.headers), guard_key, executor.agent_id)  # raises unless attested
        body = json.loads(admitted.payload)
        plan = body["plan"]
        sinks = sorted(s["sink"] for s in plan["sinks"])
        r.lines.append(
            f"admitted (attested, forwarded_sha256 checked): {plan['unit']}-level plan, forced by conditions {plan['forced_by']}"
        )
        r.lines.append(f"post_message attributed to {', '.join(sinks)}; summarize and read_secret stay in the taint graph")
        if plan["unit"] != "token" or sinks != ["chat:#ops", "webhook:partner-archive"]:
            r.problems.append(f"the plan is {plan['unit']}-level with sinks {sinks}")
