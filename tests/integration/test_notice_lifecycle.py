"""Issue 22 through a real `busguard run`: a compromise notice with an
`expires_at` prohibits an undeclared handoff decided before its expiry and
stops counting for one decided after it (both the receipt's time and the
guard's clock past it), and the later decision names the notice as lifted;
likewise a notice its issuer clears (`compromise-clearance`)."""

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
from busguard.policies.compromise.clearance import KIND_COMPROMISE_CLEARANCE, clearance_for
from busguard.policies.compromise.message import encode
from busguard.policies.compromise.policy import KIND_COMPROMISE_NOTICE
from busguard.protocol.attestation import verify_decision_record
from busguard.protocol.records import Decision
from busguard.protocol.timestamps import format_timestamp
from busguard.sdk.sender import SignedRecord
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


async def test_a_cleared_notice_stops_counting_through_busguard_run(broker: EmbeddedBroker, tmp_path: Path) -> None:
    """Issue 22, the clearance: a handoff decided before the issuer's
    clearance is under the notice, one decided after it is not; a clearance
    by another (trusted) issuer is refused and lifts nothing; `busguard
    audit` reports the clearance and which handoff counted the notice first."""
    s = await make_setup(tmp_path, broker.bootstrap)
    (tmp_path / "keys.toml").write_text(_registry())
    with s.config.open("a") as f:
        f.write(f'\n[compromise]\ntrusted_notice_issuers = ["{kit.OPERATOR}", "{kit.ATTESTER}"]\n')
    guard = GuardProcess(s)
    guard.wait_ready()
    now = int(time.time() * 1000)
    notice_bytes = encode(kit.notice("n-clr", compromised_from=now - 60_000))
    notice_rec = _sender(kit.OPERATOR).sign(kind=KIND_COMPROMISE_NOTICE, task_id="n-clr", receiver="busguard", payload=notice_bytes)

    def value(handoff_id: str) -> bytes:
        return kit.payload([PLAN], successor_integrity=kit.integrity(handoff_id=handoff_id))

    def clearance(by: str, task_id: str) -> SignedRecord:
        c = clearance_for(notice_bytes, format_timestamp(int(time.time() * 1000) - 1_000))
        c = msgspec.structs.replace(c, issuer=by)
        return _sender(by).sign(kind=KIND_COMPROMISE_CLEARANCE, task_id=task_id, receiver="busguard", payload=encode(c))

    def decided(n: int):  # type: ignore[no-untyped-def]
        return lambda got: len(got[s.audit]) >= n

    try:
        # Each step waits for the previous decisions, so the guard's decision order is the order below.
        await produce(s.bootstrap, s.handoffs, [notice_rec, _handoff(value("h-under"), "h-under", "sess-1", 1, now)])
        await collect(s.bootstrap, [s.audit], decided(2))
        await produce(s.bootstrap, s.handoffs, [clearance(kit.ATTESTER, "c-other")])
        await collect(s.bootstrap, [s.audit], decided(3))
        await produce(s.bootstrap, s.handoffs, [_handoff(value("h-still"), "h-still", "sess-1", 2, int(time.time() * 1000))])
        await collect(s.bootstrap, [s.audit], decided(4))
        cleared = clearance(kit.OPERATOR, "c-clr")
        await produce(s.bootstrap, s.handoffs, [cleared])
        await collect(s.bootstrap, [s.audit], decided(5))
        await produce(s.bootstrap, s.handoffs, [_handoff(value("h-cleared"), "h-cleared", "sess-1", 3, int(time.time() * 1000))])
        got: Collected = await collect(s.bootstrap, [s.audit], decided(6))
    finally:
        assert guard.terminate() == 0, guard.tail()
    for r in got[s.audit]:
        verify_decision_record(r.value, list(r.headers), s.guard.public_key)
    audit = {d.task_id: d for d in (msgspec.json.decode(r.value, type=Decision) for r in got[s.audit])}
    other, clr = audit["c-other"], audit["c-clr"]
    assert (other.outcome, other.reason) == ("reject", "clearance_unauthentic") and other.detail.startswith("wrong_issuer: ")
    assert (clr.outcome, clr.reason) == ("forward", "admitted"), clr.detail
    for task in ("h-under", "h-still"):  # decided before the clearance: under the notice
        d = audit[task]
        assert (d.outcome, d.reason) == ("reject", "undeclared_operational_state") and (d.annotations or {})[
            "compromise_notices"
        ] == "n-clr"
    after = audit["h-cleared"]
    assert (after.outcome, after.reason) == ("forward", "admitted")
    ann = after.annotations or {}
    assert ann["verdict"] == "clean" and "compromise_notices" not in ann
    assert json.loads(ann["lifted_notices"]) == [["n-clr", "cleared"]]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [sys.executable, "-m", "busguard.cli", "audit", "--json", "--idle-ms", "800", "--config", str(s.config)],
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()
    (report,) = json.loads(done.stdout)["notices"]
    assert report["notice_id"] == "n-clr" and report["status"] == "cleared"
    assert report["cleared_by"] == cleared.receipt_id and report["cleared_at"] == (clr.annotations or {})["cleared_at"]
    assert report["counted_by"] == report["counted_before_clearance"] == ["h-under", "h-still"]
    assert report["lifted_for"] == ["h-cleared: cleared"]
