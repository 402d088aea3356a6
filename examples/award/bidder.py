"""A bidder of seed 002's contract net: bid on each call, do the work only when awarded.

    python examples/award/bidder.py --net DIR --name bidder-b --cost 120 --canonicalizer jcs-sha256

Two act-once loops over busguard's forwards, one done-set (`DIR/<name>.db`):

- calls, addressed to the bidders' audience (`net.json` `audience`): record
  the call and the bid, and reply one signed `cnet.bid` to the awarder
  (cost `--cost`, committing to roots under `--canonicalizer`);
- awards, addressed to this bidder: only the winner receives one. Do the
  work (sort the words of the call's task), record it in `work`, and reply
  the `cnet.result` with the output and its root under the bid's
  canonicalizer. A private canonicalizer (anything but jcs-sha256 and
  merkle-sha256) is this bidder's own SHA-256 of the bytes: nobody else can
  recompute it, which is why a careful awarder does not award it.

Each effect and its reply commit in one SQLite transaction with the
decision's done-mark (ActOnce): a re-delivered or re-emitted forward is
skipped, a crash after the commit re-sends the same signed reply. Runs
until SIGTERM or SIGINT. Tables: `bids`, `work`.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec
from common import Agent, in_ms, say, stop_on_signals

from busguard.sdk import ActOnce, Claim, Delivery, Reply
from busguard.sdk.award import BUILTIN_CANONICALIZERS, AwardView, BidPayload, CallView, ReceiptTemplate, ResultPayload, b64url

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS bids (call TEXT PRIMARY KEY, bid TEXT NOT NULL, awarder TEXT NOT NULL, task TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS work (call TEXT PRIMARY KEY, bid TEXT NOT NULL, state_root TEXT NOT NULL, output BLOB NOT NULL)",
)


def perform(task: str) -> bytes:
    """The work: the task's words after its first `:`, sorted, as one JSON array."""
    words = task.partition(":")[2].split() or task.split()
    return msgspec.json.encode(sorted(words))


def root(canonicalizer_id: str, output: bytes) -> str:
    known = BUILTIN_CANONICALIZERS.get(canonicalizer_id)
    return known.root(output) if known is not None else hashlib.sha256(output).hexdigest()


class Bidder:
    def __init__(self, agent: Agent, cost: int, canonicalizer: str) -> None:
        self.agent = agent
        self.cost = cost
        self.canonicalizer = canonicalizer
        for statement in SCHEMA:
            agent.done.connection.execute(statement)

    def on_call(self, d: Delivery, tx: Claim[Any]) -> Iterable[Reply] | None:
        call = d.view
        if not isinstance(call, CallView):
            return None
        bid = f"{call.call}/{self.agent.name}"
        tx.connection.execute("INSERT OR IGNORE INTO bids VALUES (?, ?, ?, ?)", (call.call, bid, call.awarder, call.payload.task))
        payload = BidPayload(
            call=call.call,
            cost=self.cost,
            deadline=in_ms(3_600_000),
            receipt=ReceiptTemplate(canonicalizer_id=self.canonicalizer, commits="output"),
        )
        say(self.agent.name, f"bidding {self.cost} on {call.call} under {self.canonicalizer}")
        return [Reply(self.agent.net.outbox, "cnet.bid", bid, call.awarder, msgspec.json.encode(payload))]

    def on_award(self, d: Delivery, tx: Claim[Any]) -> Iterable[Reply] | None:
        award = d.view
        if not isinstance(award, AwardView):
            return None
        mine = tx.connection.execute("SELECT bid, task FROM bids WHERE call = ? AND awarder = ?", (award.call, award.awarder)).fetchone()
        if mine is None or mine[0] != award.payload.winner:
            say(self.agent.name, f"ignored an award of {award.call} to {award.payload.winner}: not my bid")
            return None
        output = perform(mine[1])
        state_root = root(self.canonicalizer, output)
        tx.connection.execute("INSERT INTO work VALUES (?, ?, ?, ?)", (award.call, mine[0], state_root, output))
        say(self.agent.name, f"won {award.call} (mode {award.payload.mode}): did the work, root {state_root[:16]}...")
        result = ResultPayload(state_root=state_root, output=b64url(output))
        return [Reply(self.agent.net.outbox, "cnet.result", award.call, award.awarder, msgspec.json.encode(result))]


async def main(args: argparse.Namespace) -> int:
    agent = Agent(Path(args.net), args.name)
    bidder = Bidder(agent, args.cost, args.canonicalizer)
    stop = stop_on_signals()
    try:
        producer = await agent.producer(crash_after_sending=args.crash_after_sending)
        calls = ActOnce(await agent.inbox("calls", addressed_to=agent.net.audience), agent.done, effect=bidder.on_call, producer=producer)
        awards = ActOnce(await agent.inbox("awards", addressed_to=agent.id), agent.done, effect=bidder.on_award, producer=producer)
        say(agent.name, f"listening for calls to {agent.net.audience} and awards to {agent.id}")
        while not stop.is_set():  # one loop after the other: they share the done-set and its outbox
            for role, loop in (("calls", calls), ("awards", awards)):
                step = await loop.step(250)
                if step.skipped:
                    say(agent.name, f"{role}: skipped {step.skipped} forward(s) already acted on (re-delivered)")
        return 0
    finally:
        await agent.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--net", required=True, help="the directory with net.json and <name>.key")
    ap.add_argument("--name", required=True)
    ap.add_argument("--cost", type=int, required=True)
    ap.add_argument("--canonicalizer", default="jcs-sha256", help="the canonicalizer the bid commits its root under")
    ap.add_argument(
        "--crash-after-sending",
        metavar="KIND",
        help="for the tests: SIGKILL itself once a reply of KIND is sent, before the outbox drops it",
    )
    raise SystemExit(asyncio.run(main(ap.parse_args())))
