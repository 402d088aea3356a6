"""An operator's resolve command too large for its resolution, through `busguard
escalations resolve` and `busguard reconcile` on the embedded broker, with
`kafka.max_message_bytes = 65536` and no compression.

The resolution carries the command as signed (its note twice: in `note` and
in `command.body`, base64), so a 40 000-character note made a resolution of
about 95 KB that Apache Kafka refuses. Now the command is one
`output_too_large` dead letter, the escalation stays held, a shorter command
resolves it, and the audit passes; `resolve` tells the operator where the
refusal is. Every record the reconciler wrote is
measured as Kafka counts it against the configured limit (tansu enforces
none)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, Setup, collect, header, identity, make_setup, produce, sender
from busguard.protocol.keyfile import write_key
from busguard.protocol.records import Resolution, audit_decoder
from busguard.runtime.batch_size import batch_size
from busguard.runtime.outputs import Output

from .paths import REPO

LIMIT = 65_536
SMALL = {"BUSGUARD_KAFKA__MAX_MESSAGE_BYTES": str(LIMIT), "BUSGUARD_KAFKA__COMPRESSION": "none"}


def _resolve(s: Setup, escalation: str, key: Path, note: str, wait: int) -> subprocess.CompletedProcess[str]:
    cli = [sys.executable, "-m", "busguard.cli", "escalations", "resolve", escalation, "--as", "reject", "--note", note,
           "--operator", "alice", "--key", str(key), "--wait", str(wait), "--config", str(s.config)]  # fmt: skip
    return subprocess.run(cli, capture_output=True, text=True, timeout=120, cwd=REPO)


def _resolutions(s: Setup, got) -> list[Resolution]:  # type: ignore[no-untyped-def]
    recs = [audit_decoder.decode(r.value) for r in got[s.audit] if r.value is not None]
    return [r for r in recs if isinstance(r, Resolution)]


def _too_large(s: Setup, got) -> list[bytes]:  # type: ignore[no-untyped-def]
    return [header(r, "busguard-detail") or b"" for r in got[s.dead_letter] if header(r, "busguard-reason") == b"output_too_large"]


async def test_a_command_too_large_for_its_resolution_is_one_dead_letter_and_a_shorter_one_resolves(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    alice = identity("operator-alice")
    s = await make_setup(tmp_path, broker.bootstrap, operators=[("alice", alice)])
    alice_key = tmp_path / "alice.key"
    write_key(alice_key, alice)
    guard, worker = GuardProcess(s, env=SMALL), GuardProcess(s, command="reconcile", env=SMALL)
    try:
        guard.wait_ready()
        worker.wait_ready()
        planner = sender("planner")
        conflict = [planner.sign(kind="handoff", task_id="t", receiver="x", payload=b"work"),
                    planner.sign(kind="handoff", task_id="t", receiver="x", payload=b"other work")]  # fmt: skip
        await produce(s.bootstrap, s.handoffs, conflict, key=b"planner")
        got = await collect(s.bootstrap, [s.audit], lambda c: any(r.stage == "held" for r in _resolutions(s, c)))
        (held,) = [r.escalation_id for r in _resolutions(s, got) if r.stage == "held"]

        sent = _resolve(s, held, alice_key, "n" * 40_000, wait=3)  # a 40 KB command: its resolution would be ~95 KB
        got = await collect(s.bootstrap, [s.audit, s.dead_letter], lambda c: bool(_too_large(s, c)))
        (detail,) = _too_large(s, got)
        (dead,) = [r for r in got[s.dead_letter] if header(r, "busguard-reason") == b"output_too_large"]
        # the operator is told where to look
        assert sent.returncode == 1 and f"busguard-source {(header(dead, 'busguard-source') or b'').decode()} " in sent.stderr, sent.stderr
        assert b"final resolution" in detail and f"kafka.max_message_bytes {LIMIT}".encode() in detail, detail
        assert not [r for r in _resolutions(s, got) if r.stage == "final"]
        assert worker.healthy(), worker.tail()

        done = _resolve(s, held, alice_key, "conflict, the second payload is refused", wait=60)
        assert done.returncode == 0, done.stderr
        got = await collect(s.bootstrap, [s.audit, s.dead_letter, s.replies], lambda c: any(r.stage == "final" for r in _resolutions(s, c)))
    finally:
        assert worker.terminate() == 0, worker.tail()
        assert guard.terminate() == 0, guard.tail()
    (final,) = [r for r in _resolutions(s, got) if r.stage == "final"]
    assert final.by == "operator:alice" and final.note == "conflict, the second payload is refused"
    for topic in (s.audit, s.dead_letter, s.replies):
        for r in got[topic]:
            size = batch_size(Output(topic, r.key, r.value, list(r.headers), r.timestamp))
            assert size <= LIMIT, f"a {size}-byte record on {topic}"

    cli = [sys.executable, "-m", "busguard.cli", "audit", "--json", "--idle-ms", "800", "--config", str(s.config)]
    audit = subprocess.run(cli, capture_output=True, timeout=120, cwd=REPO)
    report = json.loads(audit.stdout)
    assert audit.returncode == 0 and report["ok"], report["violations"]
