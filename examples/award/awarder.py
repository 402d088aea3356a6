"""The awarder of seed 002's contract net: call for bids, award a bid it can check, record the result.

    python examples/award/awarder.py --net DIR --call call-1 --bids 3

1. Issues the call once (a claim on `issue:<call>` in its own database stages
   the signed `cnet.call` in the outbox: a restart never issues it twice),
   addressed to the bidders' audience (`net.json` `audience`).
2. Records each bid busguard admitted for it. The bid that completes
   `--bids` picks the winner in the same transaction and stages the award:
   the cheapest bid whose `canonicalizer_id` this awarder can recompute
   (`--recompute`, its own verification registry), never merely the
   cheapest (seed 002: a bid can be valid and still not awardable). The
   award is addressed to the winner, so only the winner acts on it.
3. Records the settled result with busguard's verification mode (typed:
   `recomputed`, `delegated`, `unverified`), checks it against the mode it
   awarded, recomputes the root itself, prints the outcome and exits 0.

Tables in `DIR/<name>.db`: `calls`, `bids`, `awards`, `results`.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec
from common import Agent, die, in_ms, say, stop_on_signals

from busguard.sdk import ActOnce, Claim, Delivery, Reply
from busguard.sdk.award import BUILTIN_CANONICALIZERS, AwardPayload, BidView, CallPayload, ResultView

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS calls (call TEXT PRIMARY KEY, bids_wanted INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS bids (call TEXT, bid TEXT, bidder TEXT, cost INTEGER, canonicalizer_id TEXT, PRIMARY KEY (call, bid))",
    "CREATE TABLE IF NOT EXISTS awards (call TEXT PRIMARY KEY, bid TEXT, bidder TEXT, mode TEXT, ranked TEXT)",
    "CREATE TABLE IF NOT EXISTS results (call TEXT PRIMARY KEY, bidder TEXT, state_root TEXT, verification TEXT,"
    " settles INTEGER, recomputed_here INTEGER)",
)


class Awarder:
    def __init__(self, agent: Agent, recompute: set[str]) -> None:
        self.agent = agent
        self.recompute = recompute
        self.db = agent.done.connection
        for statement in SCHEMA:
            self.db.execute(statement)

    def issue(self, tx: Claim[Any], call: str, bids: int, task: str) -> None:
        """Inside the `issue:<call>` claim: record the call and stage its signed record."""
        payload = CallPayload(
            awarder=self.agent.id, task_class="transform.table", task=task, requires_check=True, award_deadline=in_ms(600_000)
        )
        tx.connection.execute("INSERT INTO calls VALUES (?, ?)", (call, bids))
        rec = self.agent.sender.sign(kind="cnet.call", task_id=call, receiver=self.agent.net.audience, payload=msgspec.json.encode(payload))
        tx.stage(self.agent.net.outbox, self.agent.id.encode(), rec.value, rec.headers)

    def effect(self, d: Delivery, tx: Claim[Any]) -> Iterable[Reply] | None:
        """ActOnce's effect: runs once per admitted decision, in the claim's transaction."""
        if isinstance(d.view, BidView):
            return self.on_bid(d.view, tx)
        if isinstance(d.view, ResultView):
            self.on_result(d.view, tx)
        return None

    def on_bid(self, bid: BidView, tx: Claim[Any]) -> list[Reply]:
        db = tx.connection
        wanted = db.execute("SELECT bids_wanted FROM calls WHERE call = ?", (bid.call,)).fetchone()
        if wanted is None or db.execute("SELECT 1 FROM awards WHERE call = ?", (bid.call,)).fetchone():
            say(self.agent.name, f"ignored bid {bid.bid}: not an open call of mine")
            return []
        p = bid.payload
        db.execute("INSERT INTO bids VALUES (?, ?, ?, ?, ?)", (bid.call, bid.bid, bid.bidder, p.cost, p.receipt.canonicalizer_id))
        say(self.agent.name, f"bid {bid.bid}: cost {p.cost} under {p.receipt.canonicalizer_id}")
        rows = db.execute("SELECT bid, bidder, cost, canonicalizer_id FROM bids WHERE call = ? ORDER BY cost, bid", (bid.call,)).fetchall()
        if len(rows) < wanted[0]:
            return []
        ranked = [r[0] for r in rows][:64]
        checkable = [r for r in rows if r[3] in self.recompute]
        for r in rows:
            if r not in checkable:
                say(self.agent.name, f"not awardable: {r[0]} (cost {r[2]}): I cannot recompute a root under {r[3]}")
        if not checkable:
            say(self.agent.name, f"no bid on {bid.call} is awardable in mode verified; no award")
            return []
        winner, bidder, cost, canonicalizer = checkable[0]
        db.execute("INSERT INTO awards VALUES (?, ?, ?, ?, ?)", (bid.call, winner, bidder, "verified", ",".join(ranked)))
        say(self.agent.name, f"awarding {bid.call} to {winner} (cost {cost}, {canonicalizer}) in mode verified")
        award = AwardPayload(winner=winner, ranked=ranked, mode="verified")
        return [Reply(self.agent.net.outbox, "cnet.award", bid.call, bidder, msgspec.json.encode(award))]

    def on_result(self, result: ResultView, tx: Claim[Any]) -> None:
        awarded = tx.connection.execute("SELECT bidder, mode, bid FROM awards WHERE call = ?", (result.call,)).fetchone()
        if awarded is None:
            say(self.agent.name, f"ignored a result for {result.call}: I awarded nothing there")
            return
        settles = result.settles(awarded[1])  # the verification header is sealed; hold it to my own award too
        canonicalizer = tx.connection.execute("SELECT canonicalizer_id FROM bids WHERE call = ? AND bid = ?", (result.call, awarded[2]))
        own = BUILTIN_CANONICALIZERS.get(canonicalizer.fetchone()[0])
        here = own is not None and own.root(result.delivered) == result.payload.state_root
        tx.connection.execute(
            "INSERT INTO results VALUES (?, ?, ?, ?, ?, ?)",
            (result.call, result.bidder, result.payload.state_root, result.verification, settles, here),
        )
        say(
            self.agent.name,
            f"result for {result.call} from {result.bidder[:24]}...: busguard verification {result.verification}"
            f" ({'as' if settles else 'NOT as'} mode {awarded[1]} settles); recomputed here: {'equal' if here else 'DIFFERENT'}",
        )

    def settled(self, call: str) -> bool:
        return self.db.execute("SELECT 1 FROM results WHERE call = ?", (call,)).fetchone() is not None


async def main(args: argparse.Namespace) -> int:
    agent = Agent(Path(args.net), args.name)
    awarder = Awarder(agent, set(args.recompute.split(",")))
    stop = stop_on_signals()
    try:
        producer = await agent.producer()
        loop = ActOnce(await agent.inbox("inbox", addressed_to=agent.id), agent.done, effect=awarder.effect, producer=producer)
        with agent.done.claim(f"issue:{args.call}") as tx:
            if tx.claimed:
                awarder.issue(tx, args.call, args.bids, args.task)
        await loop.flush()
        say(agent.name, f"called for bids on {args.call} ({args.bids} wanted), as {agent.id}")
        deadline = time.monotonic() + args.timeout
        while not awarder.settled(args.call):
            if stop.is_set() or time.monotonic() > deadline:
                die(f"{agent.name}: {args.call} not settled after {args.timeout:.0f}s", 1)
            await loop.step(500)
        return 0
    finally:
        await agent.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--net", required=True, help="the directory with net.json and <name>.key")
    ap.add_argument("--name", default="awarder")
    ap.add_argument("--call", default="call-1", help="the call id (issued once: a restart resumes it)")
    ap.add_argument("--bids", type=int, default=3, help="award once this many bids are in")
    ap.add_argument("--task", default="sort: pear apple fig banana")
    ap.add_argument("--recompute", default="jcs-sha256,merkle-sha256", help="the canonicalizers this awarder can recompute")
    ap.add_argument("--timeout", type=float, default=120.0)
    raise SystemExit(asyncio.run(main(ap.parse_args())))
