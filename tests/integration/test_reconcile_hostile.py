"""Issue 35, finding 2: records on the reconciliation topic whose headers are
null, repeated or not UTF-8 (a null `busguard-attestation`, a null
`busguard-signer` or `busguard-seal` on a command, ...) are dead-lettered
with their reason; `busguard reconcile` keeps running, still holds the
genuine `task_conflict` escalation behind them, applies an operator's
command behind them, and does the same after a restart."""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, Setup, collect, collect_all, header, identity, make_setup, produce, sender
from busguard.protocol.records import Resolution, audit_decoder
from tests.fuzz.batches import batch, record

from .paths import REPO
from .test_hostile_records import produce_batches

SEAL = b"A" * 86  # canonical base64url of 64 bytes: well formed, verifies under no key
ATTESTATION = b'{"v":1}'
CMD = ("busguard-command", b"resolve")
COMMAND = b'{"v":1,"escalation_id":"x","resolve_as":"reject","operator":"mallory","note":"","issued_at":1}'

#: (value, headers, the reason it is dead-lettered with, a word its detail must hold)
HOSTILE: list[tuple[bytes | None, list[tuple[str, bytes | None]], bytes, bytes]] = [
    (b'{"x":1}', [("busguard-attestation", None), ("busguard-seal", SEAL)], b"bad_seal", b"busguard-attestation"),
    (b'{"x":1}', [("busguard-attestation", ATTESTATION), ("busguard-seal", None)], b"bad_seal", b"busguard-seal"),
    (b'{"x":1}', [("busguard-attestation", ATTESTATION), ("busguard-attestation", ATTESTATION), ("busguard-seal", SEAL)], b"bad_seal", b"busguard-attestation"),
    (b'{"x":1}', [("busguard-attestation", b"\xff\xfe"), ("busguard-seal", b"\xc0" * 86)], b"bad_seal", b"busguard-seal"),
    (COMMAND, [CMD, ("busguard-seal", SEAL), ("busguard-signer", None)], b"bad_seal", b"busguard-signer"),
    (COMMAND, [CMD, ("busguard-seal", None)], b"bad_seal", b"busguard-seal"),
    (COMMAND, [("busguard-command", None), ("busguard-seal", SEAL)], b"bad_seal", b"busguard-command"),
    (COMMAND, [CMD, ("busguard-command", b"resolve"), ("busguard-seal", SEAL)], b"bad_seal", b"busguard-command"),
    (COMMAND, [CMD, ("busguard-seal", SEAL), ("busguard-signer", b"\xff\xfe")], b"bad_seal", b"busguard-signer"),
    (COMMAND, [CMD, ("busguard-seal", SEAL), ("busguard-signer", b"z"), ("busguard-signer", b"z")], b"bad_seal", b"busguard-signer"),
    (COMMAND, [CMD, ("busguard-seal", b"\xff" * 86)], b"bad_seal", b"busguard-seal"),
    (None, [CMD, ("busguard-seal", None), ("busguard-signer", None)], b"missing_field", b"null value"),
]  # fmt: skip


def _dead_by_offset(s: Setup, got) -> dict[int, list[tuple[bytes | None, bytes | None]]]:  # type: ignore[no-untyped-def]
    """Reconciliation-topic offset -> (reason, detail) of each dead letter for it."""
    out: dict[int, list[tuple[bytes | None, bytes | None]]] = defaultdict(list)
    for r in got[s.dead_letter]:
        source = header(r, "busguard-source") or b""
        if source.startswith(f"{s.reconciliation}/0/".encode()):
            out[int(source.rsplit(b"/", 1)[1])].append((header(r, "busguard-reason"), header(r, "busguard-detail")))
    return out


def _resolutions(s: Setup, got) -> list[Resolution]:  # type: ignore[no-untyped-def]
    recs = [audit_decoder.decode(r.value) for r in got[s.audit] if r.value is not None and header(r, "busguard-attestation")]
    return [r for r in recs if isinstance(r, Resolution)]


async def test_hostile_headers_are_dead_lettered_and_the_escalation_behind_them_is_held_and_resolved(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, partitions=1)
    guard = GuardProcess(s)
    worker: GuardProcess | None = None
    try:
        guard.wait_ready()
        # first on the reconciliation topic: the hostile records, and a header name that is not UTF-8
        offsets = [o for _, o in await produce(s.bootstrap, s.reconciliation, [(v, h) for v, h, _, _ in HOSTILE], key=b"k")]  # type: ignore[misc]
        expected = {o: (reason, word) for o, (_, _, reason, word) in zip(offsets, HOSTILE, strict=True)}
        [span] = await produce_batches(s.bootstrap, s.reconciliation, [(batch([record(0, b"k", b"v", [(b"\xff\xfe", None)])]), 1)])
        expected[span[0]] = (b"undecodable_header", b"")
        # then a genuine task_conflict escalation, behind them on the one partition
        planner, to = sender("planner"), identity("executor").agent_id
        first = planner.sign(kind="handoff", task_id="t-conflict", receiver=to, payload=b"work")
        other = planner.sign(kind="handoff", task_id="t-conflict", receiver=to, payload=b"other work")
        await produce(s.bootstrap, s.handoffs, [first, other], key=b"planner")

        worker = GuardProcess(s, command="reconcile")
        worker.wait_ready()
        got = await collect(
            s.bootstrap,
            [s.audit, s.dead_letter],
            lambda c: len(_dead_by_offset(s, c)) >= len(expected) and any(r.stage == "held" for r in _resolutions(s, c)),
        )
        assert worker.proc.poll() is None, worker.tail()
        [held] = [r for r in _resolutions(s, got) if r.stage == "held"]
        assert held.task_id == "t-conflict"

        # a restart re-reads nothing it has decided and stays up
        assert worker.terminate() == 0, worker.tail()
        worker = GuardProcess(s, command="reconcile")
        worker.wait_ready()
        # an operator's command behind the hostile commands is applied, and `resolve` waits for it past
        # records on the audit topic that are no resolution (a null value, a null header)
        await produce(s.bootstrap, s.audit, [(None, [("busguard-attestation", None)]), (b"{}", [("busguard-seal", None)])], key=b"k")
        cli = [sys.executable, "-m", "busguard.cli", "escalations", "resolve", held.escalation_id, "--as", "reject",
               "--note", "payload differs", "--operator", "ana", "--config", str(s.config)]  # fmt: skip
        done = subprocess.run(cli, capture_output=True, text=True, timeout=90, cwd=REPO)
        assert done.returncode == 0, done.stderr + worker.tail()
        assert worker.proc.poll() is None, worker.tail()
    finally:
        if worker is not None:
            assert worker.terminate() == 0, worker.tail()
        assert guard.terminate() == 0, guard.tail()

    settled = await collect_all(s.bootstrap, [s.audit, s.dead_letter])
    dead = _dead_by_offset(s, settled)
    assert set(dead) == set(expected)
    for offset, (reason, word) in expected.items():
        [(got_reason, detail)] = dead[offset]  # exactly one dead letter each, across the restart
        assert got_reason == reason and word in (detail or b""), (offset, got_reason, detail)
    finals = [r for r in _resolutions(s, settled) if r.stage == "final"]
    assert [(f.escalation_id, f.by, f.resolved_as) for f in finals] == [(held.escalation_id, "operator:ana", "reject")]
