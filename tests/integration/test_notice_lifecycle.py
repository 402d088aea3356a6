"""Issue 22 through a real `busguard run`: a compromise notice with an
`expires_at` prohibits an undeclared handoff decided before its expiry and
stops counting for one decided after it (both the receipt's time and the
guard's clock past it), and the later decision names the notice as lifted."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import msgspec

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import Collected, GuardProcess, collect, make_setup, produce
from busguard.policies.compromise.message import encode
from busguard.policies.compromise.policy import KIND_COMPROMISE_NOTICE
from busguard.protocol.attestation import verify_decision_record
from busguard.protocol.records import Decision
from busguard.protocol.timestamps import format_timestamp
from tests.integration.test_compromise_handoff import _handoff, _registry, _sender
from tests.unit import compromise_kit as kit
from tests.unit.compromise_kit import PLAN

EXPIRES_IN_MS = 4_000


async def test_an_expired_notice_stops_counting_through_busguard_run(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap)
    (tmp_path / "keys.toml").write_text(_registry())
    with s.config.open("a") as f:
        f.write(f'\n[compromise]\ntrusted_notice_issuers = ["{kit.OPERATOR}"]\n')
    guard = GuardProcess(s)
    guard.wait_ready()
    now = int(time.time() * 1000)
    expires = now + EXPIRES_IN_MS
    notice = msgspec.structs.replace(kit.notice("n-exp", compromised_from=now - 60_000), expires_at=format_timestamp(expires))
    notice_rec = _sender(kit.OPERATOR).sign(kind=KIND_COMPROMISE_NOTICE, task_id="n-exp", receiver="busguard", payload=encode(notice))

    def value(handoff_id: str) -> bytes:
        return kit.payload([PLAN], successor_integrity=kit.integrity(handoff_id=handoff_id))

    try:
        await produce(s.bootstrap, s.handoffs, [notice_rec, _handoff(value("h-before"), "h-before", "sess-1", 1, now)])

        def decided(n: int):  # type: ignore[no-untyped-def]
            return lambda got: len(got[s.audit]) >= n

        await collect(s.bootstrap, [s.audit], decided(2))
        while int(time.time() * 1000) <= expires + 500:
            await asyncio.sleep(0.5)
        later = int(time.time() * 1000)
        await produce(s.bootstrap, s.handoffs, [_handoff(value("h-after"), "h-after", "sess-1", 2, later)])
        got: Collected = await collect(s.bootstrap, [s.audit], decided(3))
    finally:
        assert guard.terminate() == 0, guard.tail()
    for r in got[s.audit]:
        verify_decision_record(r.value, list(r.headers), s.guard.public_key)
    audit = {d.task_id: d for d in (msgspec.json.decode(r.value, type=Decision) for r in got[s.audit])}
    assert (audit["n-exp"].outcome, audit["n-exp"].reason) == ("forward", "admitted")
    assert (audit["n-exp"].annotations or {})["expires_at"] == format_timestamp(expires)
    before, after = audit["h-before"], audit["h-after"]
    assert (before.outcome, before.reason) == ("reject", "undeclared_operational_state")
    assert (before.annotations or {})["compromise_notices"] == "n-exp"
    assert (after.outcome, after.reason) == ("forward", "admitted")
    ann = after.annotations or {}
    assert ann["verdict"] == "clean" and "compromise_notices" not in ann
    assert json.loads(ann["lifted_notices"]) == [["n-exp", "expired"]]
    # `busguard audit` reports the notice, which handoff counted it and which it had ended for.
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [sys.executable, "-m", "busguard.cli", "audit", "--json", "--idle-ms", "800", "--config", str(s.config)],
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()
    (report,) = json.loads(done.stdout)["notices"]
    assert report["notice_id"] == "n-exp" and report["expires_at"] == format_timestamp(expires)
    assert report["counted_by"] == ["h-before"] and report["lifted_for"] == ["h-after: expired"]
