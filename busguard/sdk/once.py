"""Act on each admitted task exactly once: the receiving agent's loop.

Why: busguard proves each task was admitted once, but an agent that acts,
then crashes before it records having acted (seed 000), acts again when the
record is re-delivered, and a reply re-signed after the crash is a second
witness. `ActOnce` runs the one order that survives a crash at any instant:

1. send what an earlier run committed but did not send (the outbox, the
   exact bytes it signed then: busguard records a re-send as an
   `exact_duplicate`);
2. fetch a batch through the `AdmittingConsumer` (refusals are logged);
3. for each delivery, in order, claim its decision id in the done-set and,
   only when the claim is new, run the agent's effect in the same
   transaction; the effect's replies are signed and staged in that
   transaction too; the block's exit commits mark, effect and replies.
   A delivery decided (the attestation's `decided_at`) before the
   done-set's horizon is refused (`before_horizon`, logged): its mark may
   have been forgotten, so it cannot be told from a copy of an old forward;
4. send the staged replies, dropping each from the outbox once acknowledged;
5. commit the batch's offsets.

A crash before 3 commits re-delivers the record and nothing happened; after
3 and before 5, the record is re-delivered and skipped (its id is done)
and the replies go out in 1. A re-emitted forward (the guard's crash
recovery republishes byte-identical records with the same decision id) is
skipped the same way. An effect outside the done-set's database (`external`)
runs before the mark with `idempotency_token(decision_id)`: it may run again
after a crash, and the other system must deduplicate on the token.

    >>> import asyncio
    >>> from busguard.sdk.consumer import AdmittingConsumer, Fetched
    >>> from busguard.sdk.doneset import SqliteDoneSet
    >>> from busguard.testing import GUARD_PUBLIC_KEY, Harness, agent, sender
    >>> rec = sender("planner").sign(kind="handoff", task_id="t-1", receiver=agent("executor"), payload=b"{}")
    >>> value, headers = Harness().forward(rec)
    >>> class Wire:  # an AIOKafkaConsumer's getmany/commit, delivering the forward twice
    ...     async def getmany(self, timeout_ms, max_records):
    ...         return {0: [Fetched("agents.out", 0, 0, value, headers), Fetched("agents.out", 0, 1, value, headers)]}
    ...     async def commit(self, offsets): pass
    >>> done = SqliteDoneSet(":memory:")
    >>> done.connection.execute("CREATE TABLE work (task TEXT)")  # doctest: +ELLIPSIS
    <sqlite3.Cursor object at ...>
    >>> def effect(d, tx):
    ...     tx.connection.execute("INSERT INTO work VALUES (?)", (d.receipt.task_id,))
    >>> loop = ActOnce(AdmittingConsumer(Wire(), guard_public_key=GUARD_PUBLIC_KEY, agent_id=agent("executor")), done, effect=effect)
    >>> asyncio.run(loop.step())
    Step(acted=1, skipped=1, refused=0, replies_sent=0)
    >>> done.connection.execute("SELECT task FROM work").fetchall()
    [('t-1',)]
"""

from __future__ import annotations

import os
import random
import signal
import sys
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from busguard.sdk.consumer import BEFORE_HORIZON, MAX_DETAIL, AdmittingConsumer, Delivery, Refusal, log_refusals
from busguard.sdk.doneset import Claim, DoneSet, idempotency_token
from busguard.sdk.producer import SigningProducer

if TYPE_CHECKING:  # the pure core imports busguard.sdk through the facade, and loads no asyncio
    import asyncio

__all__ = ["CRASH_ENV", "CRASH_POINTS", "ActOnce", "CrashPoints", "Effect", "External", "Reply", "Step"]

#: The opt-in fault injection for kill -9 tests of an agent (off when unset).
CRASH_ENV: Final = "BUSGUARD_AGENT_CRASH_AT"
#: Where the loop can SIGKILL itself, in the order a delivery reaches them.
CRASH_POINTS: Final = ("after_claim", "after_effect_commit", "after_reply_sent", "before_offset_commit")


class Reply(NamedTuple):
    """A record the effect wants sent once it has committed (an ack, the next handoff)."""

    topic: str
    kind: str
    task_id: str
    receiver: str
    payload: bytes


class Step(NamedTuple):
    acted: int
    skipped: int
    refused: int
    replies_sent: int


#: An effect written through the claim's connection; it may return replies.
Effect = Callable[[Delivery, Claim[Any]], Iterable[Reply] | None]
#: An effect outside the done-set's database, given the idempotency token.
External = Callable[[Delivery, str], Awaitable[None]]


class CrashPoints:
    """Fault injection: `BUSGUARD_AGENT_CRASH_AT=after_claim:0.02,after_reply_sent:0.1`
    makes the loop SIGKILL its own process at each named point with that
    probability (a real crash: no cleanup, no flush), to prove the order of
    the loop in a kill -9 test. Points: `after_claim` (effect written and
    replies staged, transaction not committed), `after_effect_commit` (mark,
    effect and replies committed, nothing sent), `after_reply_sent` (a reply
    acknowledged by the broker, not yet dropped from the outbox),
    `before_offset_commit` (the batch acted on and replied to, offsets not
    committed). Off by default: with the variable unset `ActOnce` holds None
    and pays one `is None` test per point. Before it kills, it writes
    `busguard-agent-crash <point>` to stderr so a test can count the kills per point."""

    def __init__(self, spec: str, *, rng: random.Random | None = None, kill: Callable[[str], None] | None = None) -> None:
        self.probability: dict[str, float] = {}
        for item in filter(None, (part.strip() for part in spec.split(","))):
            point, _, raw = item.partition(":")
            if point not in CRASH_POINTS:
                raise ValueError(f"{CRASH_ENV}: point {point!r} in {spec!r}; allowed: {', '.join(CRASH_POINTS)}")
            try:
                p = float(raw) if raw else 1.0
            except ValueError:
                p = -1.0
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{CRASH_ENV}: probability {raw!r} for {point} in {spec!r}; allowed a number in 0..1")
            self.probability[point] = p
        self.rng = rng if rng is not None else random.Random()
        self.kill = kill if kill is not None else _sigkill

    @classmethod
    def from_env(cls) -> CrashPoints | None:
        spec = os.environ.get(CRASH_ENV, "")
        return cls(spec) if spec.strip() else None

    def reached(self, point: str) -> None:
        p = self.probability.get(point, 0.0)
        if p > 0.0 and self.rng.random() < p:
            self.kill(point)


def _before_horizon(d: Delivery, horizon: int | None) -> Refusal:
    detail = f"decided_at {d.attestation.decided_at} is before the done-set's horizon {horizon} (marks before it were forgotten)"
    return Refusal(topic=d.topic, partition=d.partition, offset=d.offset, reason=BEFORE_HORIZON, detail=detail[:MAX_DETAIL])


def _sigkill(point: str) -> None:
    os.write(sys.stderr.fileno(), f"busguard-agent-crash {point}\n".encode())
    os.kill(os.getpid(), signal.SIGKILL)


class ActOnce:
    def __init__(
        self,
        inbox: AdmittingConsumer,
        done: DoneSet[Any],
        *,
        effect: Effect | None = None,
        external: External | None = None,
        producer: SigningProducer | None = None,
        crash: CrashPoints | None = None,
    ) -> None:
        if (effect is None) == (external is None):
            raise TypeError("pass exactly one of effect= (in the done-set's transaction) or external= (idempotency token)")
        self.inbox = inbox
        self.done = done
        self.effect = effect
        self.external = external
        self.producer = producer
        #: fault injection (`CrashPoints`); from `BUSGUARD_AGENT_CRASH_AT` unless given, None when off
        self.crash = crash if crash is not None else CrashPoints.from_env()

    async def step(self, timeout_ms: int = 1000) -> Step:
        """One turn of the loop (the module docstring's five steps)."""
        sent = await self.flush()
        batch = await self.inbox.getmany(timeout_ms)
        acted = skipped = 0
        late: list[Refusal] = []
        for d in batch.deliveries:
            outcome = await self._handle(d)
            if isinstance(outcome, Refusal):
                late.append(outcome)
            elif outcome:
                acted += 1
            else:
                skipped += 1
        log_refusals(late)
        sent += await self.flush()
        if self.crash is not None:
            self.crash.reached("before_offset_commit")
        await self.inbox.commit(batch)
        return Step(acted, skipped, len(batch.refusals) + len(late), sent)

    async def run(self, stop: asyncio.Event, timeout_ms: int = 500) -> None:
        """Step until `stop` is set (checked between batches)."""
        while not stop.is_set():
            await self.step(timeout_ms)

    async def flush(self) -> int:
        """Send the outbox in order, dropping each reply once acknowledged."""
        pending = self.done.outbox()
        if pending and self.producer is None:
            raise RuntimeError("replies are staged but ActOnce has no producer to send them")
        for staged in pending:
            assert self.producer is not None
            await self.producer.producer.send_and_wait(staged.topic, value=staged.value, key=staged.key, headers=staged.headers)
            if self.crash is not None:
                self.crash.reached("after_reply_sent")
            self.done.sent(staged)
        return len(pending)

    async def _handle(self, d: Delivery) -> bool | Refusal:
        """True: acted; False: already done; a refusal `before_horizon`:
        decided before the done-set's horizon, not acted on."""
        decided_at = d.attestation.decided_at
        if self.external is not None:
            if self.done.is_done(d.decision_id):
                return False
            horizon = self.done.horizon_ms()
            if horizon is not None and decided_at < horizon:
                return _before_horizon(d, horizon)
            await self.external(d, idempotency_token(d.decision_id))
            with self.done.claim(d.decision_id, decided_at=decided_at) as tx:
                return _before_horizon(d, tx.horizon_ms) if tx.before_horizon else tx.claimed
        assert self.effect is not None
        with self.done.claim(d.decision_id, decided_at=decided_at) as tx:
            if tx.before_horizon:
                return _before_horizon(d, tx.horizon_ms)
            if not tx.claimed:
                return False
            for reply in self.effect(d, tx) or ():
                self._stage(tx, reply)
            if self.crash is not None:
                self.crash.reached("after_claim")
        if self.crash is not None:
            self.crash.reached("after_effect_commit")
        return True

    def _stage(self, tx: Claim[Any], reply: Reply) -> None:
        if self.producer is None:
            raise RuntimeError("the effect returned a reply but ActOnce has no producer to sign it")
        rec = self.producer.sender.sign(kind=reply.kind, task_id=reply.task_id, receiver=reply.receiver, payload=reply.payload)
        tx.stage(reply.topic, self.producer.key, rec.value, rec.headers)
