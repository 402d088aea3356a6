"""Forged `taint-replay` requests through `busguard run` (issue 19, item 3):
each is dead-lettered as `bad_signature`, and together they cost the guard
about the CPU that forged `handoff`s of the same bytes cost.

The cost is the guard process's own CPU time (user + system, from
/proc/<pid>/stat), the taint phase against the handoff phase of the same
run: a comparison within one process, not a clock reading. A guard that
parsed before the signature check validated every forged trace, about 45 ms
of CPU per 0.75 MB request (benchmarks/forged_policy_cost.py), so 40 of them
added about 1.8 s to a phase that costs well under that.
"""

from __future__ import annotations

import os
from pathlib import Path

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import Collected, GuardProcess, collect, header, identity, make_setup, produce, sender
from busguard.policies.taint.replay import KIND, encode_request
from busguard.runtime.topics import create_topics
from tests.unit.harness import forged
from tests.unit.taint_build import chain_trace

FORGED = 40
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User plus system CPU seconds of the process so far (proc(5): fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def forge(kind: str, tag: str, payload: bytes, n: int) -> list[tuple[bytes | None, list[tuple[str, bytes]]]]:
    """`n` records of a registered agent, each under a valid signature of another receipt."""
    s, to = sender("planner"), identity("executor").agent_id
    donor = s.sign(kind="ack", task_id="donor", receiver=to, payload=b"{}")
    return [forged(s.sign(kind=kind, task_id=f"{tag}-{i}", receiver=to, payload=payload), donor) for i in range(n)]


async def test_forged_taint_requests_are_bad_signature_and_cost_what_forged_handoffs_cost(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap)
    requests, plans = f"{s.handoffs}.taint", f"{s.handoffs}.taint-plans"
    await create_topics(s.bootstrap, [requests, plans], partitions=2)
    with s.config.open("a") as f:
        f.write(f'\n[[routes]]\nname = "taint"\ninputs = ["{requests}"]\ndownstream = "{plans}"\n')
    payload = encode_request(chain_trace(2_200, 4))  # a valid trace: validating it is the policy's whole cost
    assert 700_000 < len(payload) < 800_000
    guard = GuardProcess(s)
    guard.wait_ready()
    pid = guard.proc.pid

    async def phase(topic: str, kind: str, tag: str, n: int, before: int) -> Collected:
        await produce(s.bootstrap, topic, forge(kind, tag, payload, n))
        return await collect(
            s.bootstrap,
            [s.dead_letter, s.audit],
            lambda c: len(c[s.audit]) >= before + n and len(c[s.dead_letter]) >= before + n,
            timeout=180,
        )

    try:
        # warm-up: both kinds once, so neither phase pays for first use
        await phase(s.handoffs, "handoff", "warm-h", 2, 0)
        await phase(requests, KIND, "warm-t", 2, 2)
        t0 = cpu_s(pid)
        await phase(s.handoffs, "handoff", "h", FORGED, 4)
        t1 = cpu_s(pid)
        got = await phase(requests, KIND, "t", FORGED, 4 + FORGED)
        t2 = cpu_s(pid)
    finally:
        assert guard.terminate() == 0, guard.tail()
    assert [header(r, "busguard-reason") for r in got[s.dead_letter]] == [b"bad_signature"] * (4 + 2 * FORGED)
    handoffs, taint = t1 - t0, t2 - t1
    print(f"guard CPU: {FORGED} forged handoffs {handoffs:.2f} s, {FORGED} forged taint-replay requests {taint:.2f} s")
    assert taint <= 1.5 * handoffs + 0.3, (taint, handoffs)
