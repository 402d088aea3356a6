"""Issue 19 items 4-7 through a real `busguard run` on the embedded broker:
a call outliving its task entries cannot be hijacked or awarded twice, a
far-future deadline is refused, one bidder cannot take a call's slots, and a
resent wrong-root result is escalated each time while the right one settles.

Expiry of the task index is brought forward by configuration, not by waiting
7 days: `admission.task_retention_ms` (with the nonce retention and the
freshness bounds it must exceed) set to seconds through the environment."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, Setup, collect, make_setup, produce, sender
from busguard.policies.award.canonicalizers import JcsSha256
from busguard.policies.award.wire import AwardPayload, BidPayload, CallPayload, ReceiptTemplate, ResultPayload
from busguard.protocol.records import Decision
from busguard.protocol.timestamps import format_timestamp
from busguard.sdk.sender import Sender, SignedRecord
from tests.pgkit import EmbeddedPostgres

AGENTS = ("awarder", "bidder-b", "bidder-c")
TEMPLATE = ReceiptTemplate(canonicalizer_id="jcs-sha256", commits="output")
#: Freshness 8 s + 1 s, nonces 9.001 s, tasks 9.5 s: a record signed and sent now is fresh
#: under load, and its task entry is gone 10 s after it was admitted.
SHORT_TASKS = {
    "BUSGUARD_ADMISSION__MAX_AGE_MS": "8000",
    "BUSGUARD_ADMISSION__MAX_FUTURE_MS": "1000",
    "BUSGUARD_ADMISSION__NONCE_RETENTION_MS": "9001",
    "BUSGUARD_ADMISSION__TASK_RETENTION_MS": "9500",
}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def sign_as(who: Sender, kind: str, task: str, payload: msgspec.Struct) -> SignedRecord:
    return who.sign(kind=kind, task_id=task, receiver="guard", payload=msgspec.json.encode(payload))


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def call(who: Sender, call_id: str, deadline: str) -> SignedRecord:
    return sign_as(
        who, "cnet.call", call_id, CallPayload(awarder=who.agent_id, task_class="t", task="x", requires_check=True, award_deadline=deadline)
    )


def bid(who: Sender, bid_id: str, call_id: str, deadline: str, cost: int = 1) -> SignedRecord:
    return sign_as(who, "cnet.bid", bid_id, BidPayload(call=call_id, cost=cost, deadline=deadline, receipt=TEMPLATE))


async def decide(s: Setup, records: list[SignedRecord], seen: int = 0) -> list[tuple[str, str]]:
    """Produce `records` (one key: their order) and return their (outcome, reason), from the audit topic."""
    await produce(s.bootstrap, s.handoffs, records)
    got = await collect(s.bootstrap, [s.audit], lambda g: len(g[s.audit]) >= seen + len(records), timeout=120)
    decided = {d.receipt_id: d for d in (msgspec.json.decode(r.value, type=Decision) for r in got[s.audit])}
    return [(decided[r.receipt_id].outcome, decided[r.receipt_id].reason) for r in records]


FWD = ("forward", "admitted")


@contextlib.contextmanager
def state_backend(backend: str) -> Iterator[dict[str, object] | None]:
    """The [state] table for `backend`: SQLite (the default) or an embedded PostgreSQL."""
    if backend == "sqlite":
        yield None
        return
    with EmbeddedPostgres() as pg:
        yield {"backend": "postgres", "dsn": pg.dsn, "schema": "award"}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_call_cannot_be_hijacked_or_awarded_twice_after_its_task_entries_expired(
    broker: EmbeddedBroker, tmp_path: Path, backend: str
) -> None:
    with state_backend(backend) as state:
        s = await make_setup(tmp_path, broker.bootstrap, agents=AGENTS, state=state)
        await hijack_after_expiry(s)


async def hijack_after_expiry(s: Setup) -> None:
    guard = GuardProcess(s, env=SHORT_TASKS)
    guard.wait_ready()
    a, b, c = sender("awarder"), sender("bidder-b"), sender("bidder-c")
    deadline = format_timestamp(now_ms() + 3_600_000)  # the call's rows live an hour + 7 days
    output = b'{"rows": [1, 2]}'
    try:
        first = [
            call(a, "c-h", deadline),
            bid(b, "c-h/bid-b", "c-h", deadline),
            sign_as(a, "cnet.award", "c-h", AwardPayload(winner="c-h/bid-b", ranked=["c-h/bid-b"], mode="verified")),
        ]
        assert await decide(s, first) == [FWD, FWD, FWD]
        await asyncio.sleep(11)  # past admission.task_retention_ms: the task index forgot the call and its award
        later = [
            call(c, "c-h", deadline),  # C re-issues call c-h naming itself
            bid(c, "c-h/bid-c", "c-h", deadline),
            sign_as(a, "cnet.award", "c-h", AwardPayload(winner="c-h/bid-b", ranked=["c-h/bid-b"], mode="best_effort", risk_price=1)),
            sign_as(b, "cnet.result", "c-h", ResultPayload(state_root=JcsSha256().root(output), output=b64(output))),
        ]
        got = await decide(s, later, seen=len(first))
    finally:
        assert guard.terminate() == 0, guard.tail()
    assert got == [
        ("reject", "award_call_exists"),
        ("reject", "award_closed"),
        ("reject", "award_already_awarded"),
        FWD,
    ]  # B's award stands and settles


async def test_a_far_future_deadline_is_refused_and_one_bidder_cannot_fill_a_call(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, agents=AGENTS)
    with s.config.open("a") as f:
        f.write("\n[award]\nmax_bids_per_bidder = 3\ndeadline_horizon_ms = 86400000\n")
    guard = GuardProcess(s)
    guard.wait_ready()
    a, b, c = sender("awarder"), sender("bidder-b"), sender("bidder-c")
    soon, far = format_timestamp(now_ms() + 3_600_000), "9999-12-31T23:59:59Z"
    records = [
        call(a, "c-far", far),
        call(a, "c-day", format_timestamp(now_ms() + 2 * 86_400_000)),  # past the configured 1-day horizon
        call(a, "c-b", soon),
        bid(b, "c-b/far", "c-b", far),
        *(bid(b, f"c-b/{i}", "c-b", soon) for i in range(4)),
        bid(c, "c-b/c", "c-b", soon),
    ]
    try:
        got = await decide(s, records)
    finally:
        assert guard.terminate() == 0, guard.tail()
    too_far = ("reject", "award_deadline_too_far")
    assert got == [too_far, too_far, FWD, too_far, FWD, FWD, FWD, ("reject", "award_bidder_limit"), FWD]


async def test_a_resent_wrong_root_result_is_escalated_each_time_and_the_right_one_settles(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, agents=AGENTS)
    guard = GuardProcess(s)
    guard.wait_ready()
    a, b = sender("awarder"), sender("bidder-b")
    soon = format_timestamp(now_ms() + 3_600_000)
    output = json.dumps([{"id": i, "v": "x" * 40} for i in range(6000)]).encode()  # ~320 KB, ~430 KB base64
    root = JcsSha256().root(output)
    wrong = [sign_as(b, "cnet.result", "c-r", ResultPayload(state_root=f"{i:064x}", output=b64(output))) for i in range(3)]
    records = [
        call(a, "c-r", soon),
        bid(b, "c-r/bid-b", "c-r", soon),
        sign_as(a, "cnet.award", "c-r", AwardPayload(winner="c-r/bid-b", ranked=["c-r/bid-b"], mode="verified")),
        *wrong,
        sign_as(b, "cnet.result", "c-r", ResultPayload(state_root=root, output=b64(output))),
    ]
    try:
        got = await decide(s, records)
        esc = await collect(s.bootstrap, [s.reconciliation], lambda g: len(g[s.reconciliation]) >= len(wrong))
    finally:
        assert guard.terminate() == 0, guard.tail()
    assert got == [FWD, FWD, FWD, *[("escalate", "settlement_mismatch")] * len(wrong), FWD]
    roots = [msgspec.json.decode(r.value, type=Decision).annotations for r in esc[s.reconciliation]]
    assert all(n is not None and n["recomputed_root"] == root and n["attributed_to"] == b.agent_id for n in roots)
