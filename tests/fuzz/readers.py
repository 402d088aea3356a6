"""Record-level fuzzing of the readers: the SDK receiver, the reconciler and the auditor.

The guard's campaign (campaign.py) proves the guard's reader; this one puts
the same hostile generator (generator.py) on the three topics busguard's
other readers consume, among genuine records made by real guards
(`Campaign`, one sealing per record, one per batch with batch audit
records) and hostile variants of those genuine records (null, repeated,
dropped and reordered busguard-* headers, truncated seals, altered values,
foreign header values, exact copies). Each fetch goes through aiokafka's
fetcher `PartitionRecords` with busguard's tolerant hook, exactly as every
reader's consumer decodes it, then through the reader's own step:

* downstream: `ActOnce.step` over an `AdmittingConsumer` (whose wrapped
  consumer returns the fetch) on a real `SqliteDoneSet`. Checked: nothing
  raises; each item is exactly one delivery or refusal; the committed
  position is the end of the last item and moves past the fetch offset;
  every genuine forward addressed to the receiver is acted on exactly once
  (its re-sent copies and accepted variants skipped); nothing is acted on
  that is not a genuine forward to the receiver, with its own payload.
  The auditor reads the same fetch as a downstream topic (`check_forwarded`).
* reconciliation: `Reconciler.process` (parse, judge, outputs, persisted by
  a SQLite reconcile store). Checked: nothing raises; every item gets an
  outcome in the store; a genuine escalation read the first time is held
  or resolved, never dead-lettered.
* audit: the audit reader's expansion (`busguard.audit.reader._raws`: a
  batch audit record as its entries) and per-record checks
  (`check_audit_record`, `apply_audit`), then `judge` over the ledger.
  Checked: nothing raises; each item is one `RawRecord` (a batch audit
  record: one per entry, or one when malformed), all at its offset; every
  genuine audit record read whole verifies, entry by entry.

Batches that lie about their offsets (mutated, claimed spans) come after
every batch holding a genuine record in a fetch, so no lie can cover a
genuine offset; bombs and unmutated hostile batches go anywhere.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import random
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from aiokafka.consumer import fetcher
from aiokafka.structs import TopicPartition

from busguard.audit.checks import SealCache, apply_audit, apply_forwarded, check_audit_record, check_forwarded
from busguard.audit.ledger import Ledger
from busguard.audit.lineage import judge
from busguard.audit.reader import _raws
from busguard.audit.run import new_ledger
from busguard.protocol.attestation import HEADER_ANNOTATION_PREFIX, HEADER_DECISION_ID, HEADER_OUTCOME, HeadCache
from busguard.protocol.auditbatch import HEADER_AUDIT_BATCH
from busguard.protocol.envelope import b64url_encode
from busguard.protocol.identity import agent_id_for_key, multikey_encode
from busguard.protocol.keyfile import Identity
from busguard.protocol.records import COMMAND_CONTEXT, HEADER_COMMAND, HEADER_SIGNER, ResolveCommand
from busguard.protocol.signing import Signer, public_key_from_seed
from busguard.reconcile.policy import EscalationState
from busguard.reconcile.worker import Reconciler
from busguard.runtime.outputs import Output
from busguard.runtime.tolerant_fetch import RAW_KEYS
from busguard.runtime.undecodable import Undecodable, next_offset
from busguard.sdk import ActOnce, AdmittingConsumer, Claim, Delivery, SqliteDoneSet
from busguard.sdk.consumer import Batch as Admitted
from busguard.state.sqlite.reconcile import SqliteReconcileStore

from .batches import CODECS, batch, record
from .campaign import Campaign, InvariantBroken
from .generator import NOW, Batch, Generator, Rec, seed

TOPICS = ("downstream", "reconciliation", "audit")
_ids = msgspec.json.Decoder(dict[str, Any])


@dataclass
class ReaderStats:
    put: collections.Counter[str] = field(default_factory=collections.Counter)  # records put on each topic
    records: int = 0  # the generator's own tally (Host.stats)
    items: collections.Counter[str] = field(default_factory=collections.Counter)  # items the fetcher yielded
    fetches: collections.Counter[str] = field(default_factory=collections.Counter)
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)  # "<topic>:<outcome or reason>"
    findings: collections.Counter[str] = field(default_factory=collections.Counter)  # the audit's judgement of what it read
    crashes: int = 0
    stalls: int = 0  # a fetch whose position did not move past its fetch offset
    outcome_violations: int = 0  # an item without exactly one outcome, or offsets out of order
    genuine_tasks: int = 0  # genuine forwards to the receiver put on the downstream topic
    acted: int = 0
    acted_twice: int = 0
    acted_not_genuine: int = 0  # acted on something that is not a genuine forward to the receiver (or with another payload)
    genuine_missed: int = 0  # a genuine forward read whole and not acted on
    genuine_escalations: int = 0
    escalations_dead_lettered: int = 0
    genuine_audit: int = 0  # genuine audit records read whole (a batch audit record: one per entry)
    genuine_audit_unverified: int = 0
    samples: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.put.values())

    def violations(self) -> int:
        return (
            self.crashes
            + self.stalls
            + self.outcome_violations
            + self.acted_twice
            + self.acted_not_genuine
            + self.genuine_missed
            + self.escalations_dead_lettered
            + self.genuine_audit_unverified
        )

    def sample(self, text: str) -> None:
        if len(self.samples) < 20:
            self.samples.append(text)


@dataclass
class Piece:
    """Records for one batch; `genuine` ones are never mutated, truncated or covered by a lie."""

    recs: list[Rec]
    genuine: bool = False


class Wire:
    """The AIOKafkaConsumer an `AdmittingConsumer` wraps: `getmany` returns
    the fetch in hand, `commit` keeps what was committed."""

    def __init__(self) -> None:
        self.fetched: dict[TopicPartition, list[Any]] = {}
        self.committed: dict[TopicPartition, int] = {}

    async def getmany(self, timeout_ms: int, max_records: int) -> dict[TopicPartition, list[Any]]:
        fetched, self.fetched = self.fetched, {}
        return fetched

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        self.committed = dict(offsets)


class Inbox(AdmittingConsumer):
    """The SDK's consumer, keeping the last batch it admitted for the checks."""

    last: Admitted | None = None

    def admit(self, records: Any) -> Admitted:
        self.last = super().admit(records)
        return self.last


def _bytes_headers(headers: Sequence[tuple[str | bytes, bytes | None]]) -> list[tuple[bytes, bytes | None]]:
    return [(k.encode() if isinstance(k, str) else k, v) for k, v in headers]


def _header(headers: Sequence[tuple[str, bytes]], name: str) -> bytes | None:
    return next((v for k, v in headers if k == name), None)


def _payload_reader(d: Delivery) -> bytes:
    """A kind's reader (the SDK's `readers=`): a payload that is not the campaign's JSON is `unreadable`."""
    if not d.payload.startswith(b'{"op":'):
        raise ValueError(f"not a fuzz task: {d.payload[:20]!r}")
    return d.payload


def variant(
    rng: random.Random, value: bytes | None, headers: Sequence[tuple[str, bytes]], donors: Sequence[tuple[bytes, list[tuple[str, bytes]]]]
) -> Rec:
    """A sealed record altered the way a writer of its topic can alter it."""
    hs: list[tuple[bytes, bytes | None]] = _bytes_headers(headers)
    ours = [i for i, (k, _) in enumerate(hs) if k.startswith(b"busguard-")] or [0]
    m = rng.randrange(13)
    if not hs:
        m = 6
    i = rng.choice(ours)
    if m == 0:  # a null busguard-* header value
        hs[i] = (hs[i][0], None)
    elif m == 1:  # a busguard-* header repeated, same value or another
        extra = hs[i][1] if rng.random() < 0.5 else (rng.choice(donors)[0][:64] if donors else b"x")
        hs.insert(rng.randrange(len(hs) + 1), (hs[i][0], extra))
    elif m == 2:  # reordered headers
        rng.shuffle(hs)
    elif m == 3:  # a header dropped
        del hs[i]
    elif m == 4:  # a truncated header value (a seal, an inclusion proof, an attestation)
        v = hs[i][1] or b""
        hs[i] = (hs[i][0], v[: rng.randrange(len(v) + 1)])
    elif m == 5:  # a bit flipped in a header value
        v = bytearray(hs[i][1] or b"\x00")
        v[rng.randrange(len(v))] ^= 1 << rng.randrange(8)
        hs[i] = (hs[i][0], bytes(v))
    elif m == 6:  # an altered value
        v = bytearray(value or b"\x00")
        choice = rng.randrange(3)
        if choice == 0:
            v[rng.randrange(len(v))] ^= 1 << rng.randrange(8)
        elif choice == 1:
            v += b" "
        else:
            del v[rng.randrange(len(v)) :]
        value = bytes(v)
    elif m == 7:  # no value, or an empty one
        value = rng.choice([None, b""])
    elif m == 8 and donors:  # one header's value from another genuine record
        dv, dh = rng.choice(donors)
        same = [v for k, v in dh if k.encode() == hs[i][0]]
        hs[i] = (hs[i][0], same[0] if same else dv[:86])
    elif m == 9:  # a header name that is not UTF-8
        hs.insert(rng.randrange(len(hs) + 1), (rng.choice([b"\xff", b"busguard-seal\xff", b"\xc0\xaf"]), b"x"))
    elif m == 10:  # an unbound annotation, or an unknown busguard-* header
        name = rng.choice([HEADER_ANNOTATION_PREFIX + "verdict", "busguard-x", HEADER_DECISION_ID])
        hs.append((name.encode(), rng.choice([b"ok", b"\xff\xfe", b""])))
    elif m == 11:  # every busguard-* value null
        hs = [(k, None if k.startswith(b"busguard-") else v) for k, v in hs]
    else:  # another record's value under these headers
        value = rng.choice(donors)[0] if donors else b"{}"
    return None, value, hs


class Readers:
    """Two real guards for genuine records, an SDK receiver, a reconciler
    and an auditor's ledger, fed one topic's fetch at a time."""

    RESET_EVERY = 50_000  # items between fresh reconcile stores and ledgers: memory stays flat over a million records
    BOMB_RATE = 0.003  # per fetch (the guard's campaign already measures bombs' memory)

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self._tmp = tempfile.TemporaryDirectory(prefix="busguard-rfuzz-")
        self.dir = Path(self._tmp.name)
        for name in ("g1", "g2"):
            (self.dir / name).mkdir()
        self.per_record = Campaign(self.dir / "g1", batch={"seal": "record", "audit": "record"})
        self.per_batch = Campaign(self.dir / "g2", batch={"seal": "batch", "audit": "batch"})
        self.per_batch.next_base = 1 << 40  # decision ids come from input offsets: the two guards never share one
        self.guards = (self.per_record, self.per_batch)
        self.cfg = self.per_record.cfg
        self.planner = self.per_record.planner
        self.receiver = self.per_record.receiver
        self.tasks = 0
        self.stats = ReaderStats()
        self.gen = Generator(self, rng)
        self.guard_key = public_key_from_seed(seed("guard"))
        self.guard_signer = Signer(seed("guard"))
        self.topic = {
            "downstream": self.cfg.routes[0].downstream,
            "reconciliation": self.cfg.topics.reconciliation,
            "audit": self.cfg.topics.audit,
        }
        self.base = dict.fromkeys(TOPICS, 0)
        # downstream: the receiver
        self.wire = Wire()
        self.inbox = Inbox(
            self.wire, guard_public_key=self.guard_key, agent_id=self.receiver, readers={"handoff": _payload_reader}, max_records=1 << 30
        )
        self.done = SqliteDoneSet(":memory:")
        self.act = ActOnce(self.inbox, self.done, effect=self._effect)
        self.mine: dict[str, bytes] = {}  # decision id -> payload digest of each genuine forward to the receiver
        self.placed: set[str] = set()  # of those, the ones put on the downstream topic whole
        self.acted: collections.Counter[str] = collections.Counter()
        self.forwards: collections.deque[tuple[bytes, list[tuple[str, bytes]]]] = collections.deque(maxlen=256)
        # reconciliation
        self.escalations: collections.deque[tuple[bytes, list[tuple[str, bytes]]]] = collections.deque(maxlen=128)
        self.seen_escalations: set[str] = set()
        self.stores = 0
        rseed = seed("reconciler")
        rpk = public_key_from_seed(rseed)
        self.reconciler = Reconciler(
            self.cfg,
            identity=Identity(seed=rseed, public_key=rpk, agent_id=agent_id_for_key(rpk)),
            guard_public_key=self.guard_key,
            store=self._reconcile_store(),
            clock_ms=lambda: NOW,
        )
        self.by_source: dict[tuple[str, int, int], list[Output]] = {}
        # audit
        self.audits: collections.deque[tuple[bytes, list[tuple[str, bytes]]]] = collections.deque(maxlen=256)
        self.ledger = new_ledger(self.cfg)
        self.seals = SealCache()
        self.heads = HeadCache()
        self.since_reset = 0

    def close(self) -> None:
        for g in self.guards:
            g.close()
        self.done.close()
        self.reconciler.store.close()
        self._tmp.cleanup()

    # -- genuine records -------------------------------------------------------

    def guarded(self, recs: Sequence[Rec]) -> list[Output]:
        """What one of the real guards writes for `recs` (one input batch)."""
        return self.rng.choice(self.guards).decide_records(recs)

    def _sign(self, task_id: str, receiver: str, payload: bytes) -> Rec:
        """A handoff signed by the planner, its nonce from the seeded RNG (a
        seed reproduces the campaign) and unique (the guards remember nonces)."""
        self.tasks += 1
        nonce = f"{self.tasks:08x}{self.rng.getrandbits(96):024x}"
        r = self.planner.sign(kind="handoff", task_id=task_id, receiver=receiver, payload=payload, nonce=nonce)
        return None, r.value, _bytes_headers(r.headers)

    def _task_records(self) -> list[Rec]:
        """Valid tasks for the receiver, some for another agent, and a few
        copies and conflicts (the guard escalates those)."""
        rng = self.rng
        recs = [self.gen.valid() for _ in range(rng.choice([1, 2, 4, 8]))]
        if rng.random() < 0.3:  # a task for someone else: forwarded, and `not_for_me` here
            recs.append(self._sign(f"other-{self.gen.n}-{rng.getrandbits(32)}", self.planner.agent_id, b'{"op":"x"}'))
        if rng.random() < 0.4:  # the same task again: a conflict, or a retransmission
            task = f"esc-{self.tasks}-{rng.getrandbits(32):08x}"
            recs.append(self._sign(task, self.receiver, b'{"op":"fuzz","esc":1}'))
            recs.append(self._sign(task, self.receiver, rng.choice([b'{"op":"fuzz","esc":1}', b'{"op":"fuzz","esc":2}'])))
        if rng.random() < 0.3:
            recs.append(self.gen.hostile())  # rejected: its audit record and dead letter
        return recs

    def _sort(self, outputs: Sequence[Output]) -> tuple[list[Output], list[Output], list[Output]]:
        down = [o for o in outputs if o.topic == self.topic["downstream"]]
        esc = [o for o in outputs if o.topic == self.topic["reconciliation"]]
        audit = [o for o in outputs if o.topic == self.topic["audit"]]
        for o in down:  # a genuine forward, wherever it is put later (a copy on the downstream topic is one)
            receipt = _ids.decode(_header(o.headers, "busguard-receipt") or b"{}")
            if receipt.get("receiver") == self.receiver:
                self.mine[(_header(o.headers, HEADER_DECISION_ID) or b"").decode()] = hashlib.sha256(o.value or b"").digest()
        return down, esc, audit

    # -- hostile variants of genuine records ------------------------------------

    def variant(
        self, value: bytes | None, headers: Sequence[tuple[str, bytes]], donors: Sequence[tuple[bytes, list[tuple[str, bytes]]]]
    ) -> Rec:
        return variant(self.rng, value, headers, donors)

    def batch_audit_variant(self, value: bytes | None, headers: Sequence[tuple[str, bytes]]) -> Rec:
        """A batch audit record whose entries (a msgpack array) are altered."""
        rng = self.rng
        try:
            entries = msgspec.msgpack.decode(value or b"", type=list[list[bytes]])
        except msgspec.MsgspecError:
            entries = []
        m = rng.randrange(8)
        if m == 0 and entries:  # an entry dropped, repeated or moved
            j = rng.randrange(len(entries))
            op = rng.randrange(3)
            if op == 0:
                del entries[j]
            elif op == 1:
                entries.insert(rng.randrange(len(entries) + 1), entries[j])
            else:
                entries.insert(rng.randrange(len(entries) + 1), entries.pop(j))
            body = msgspec.msgpack.encode(entries)
        elif m == 1 and entries:  # one part of an entry altered or truncated
            e = entries[rng.randrange(len(entries))]
            p = rng.randrange(len(e)) if e else 0
            if e:
                e[p] = e[p][: rng.randrange(len(e[p]) + 1)] if rng.random() < 0.5 else e[p] + b"\x00"
            body = msgspec.msgpack.encode(entries)
        elif m == 2:  # entries of the wrong shape
            body = msgspec.msgpack.encode(rng.choice([[], [[b"a"]], [[1, 2, 3]], {"a": 1}, [[b"", b"", b"", b""]], None, 2**63 - 1]))
        elif m == 3:  # a truncated msgpack array
            body = (value or b"")[: rng.randrange(len(value or b"") + 1)]
        elif m == 4:  # an array header claiming 2^32 - 1 entries
            body = b"\xdd\xff\xff\xff\xff" + (value or b"")[1:]
        elif m == 5:  # the version header null, repeated or another version
            hs = _bytes_headers(headers)
            op = rng.randrange(3)
            j = next((n for n, (k, _) in enumerate(hs) if k == HEADER_AUDIT_BATCH.encode()), 0)
            if op == 0:
                hs[j] = (hs[j][0], None)
            elif op == 1:
                hs.append((HEADER_AUDIT_BATCH.encode(), b"1"))
            else:
                hs[j] = (hs[j][0], b"2")
            return None, value, hs
        elif m == 6:  # nested arrays
            body = b"\x91" * 5000 + b"\xc0"
        else:  # random bytes
            body = self.rng.randbytes(rng.randrange(200))
        return None, body, _bytes_headers(headers)

    def _command(self, escalation_id: str) -> Rec:
        """A resolve command sealed with the deployment key (or, hostile, another)."""
        rng = self.rng
        cmd = msgspec.json.encode(
            ResolveCommand(
                escalation_id=escalation_id, resolve_as=rng.choice(["retransmission", "replay", "reject"]), operator="fuzz", issued_at=NOW
            )
        )
        signer = self.guard_signer if rng.random() < 0.7 else Signer(rng.randbytes(32))
        sealed = b64url_encode(signer.sign(COMMAND_CONTEXT + cmd)).encode()
        headers: list[tuple[bytes, bytes | None]] = [(HEADER_COMMAND.encode(), b"resolve"), (b"busguard-seal", sealed)]
        if signer is not self.guard_signer and rng.random() < 0.5:
            headers.append((HEADER_SIGNER.encode(), multikey_encode(public_key_from_seed(rng.randbytes(32))).encode()))
        return escalation_id.encode()[:32], cmd, headers

    def _hostile_command(self, ids: Sequence[str]) -> Rec:
        rng = self.rng
        _, value, headers = self._command(rng.choice(ids) if ids else "e-none")
        m = rng.randrange(6)
        if m == 0:  # a null command, seal or signer header
            name = rng.choice([HEADER_COMMAND, "busguard-seal", HEADER_SIGNER]).encode()
            headers = [(k, v) for k, v in headers if k != name] + [(name, None)]
        elif m == 1:  # repeated headers
            headers = headers + [
                (rng.choice([HEADER_COMMAND, "busguard-seal", HEADER_SIGNER]).encode(), rng.choice([b"resolve", b"A" * 86, b"z6Mk"]))
            ]
        elif m == 2:  # a seal that is not base64url, or not ASCII, or short
            headers = [(k, rng.choice([b"\xff" * 86, b"!" * 86, b"A" * 10, b""]) if k == b"busguard-seal" else v) for k, v in headers]
        elif m == 3:  # a signer that is not a multikey
            headers = [*headers, (HEADER_SIGNER.encode(), rng.choice([b"\xff", b"z6Mk" + b"1" * 40, b"", b"did:key:x"]))]
        elif m == 4:  # another command word
            headers = [(k, rng.choice([b"resolv", b"RESOLVE", b"\x00"]) if k == HEADER_COMMAND.encode() else v) for k, v in headers]
        else:  # a body that is not a command, correctly sealed
            value = rng.choice(
                [
                    b"{}",
                    b"[]",
                    b'{"escalation_id":1}',
                    b"\xff",
                    b'{"v":1,"escalation_id":"e","resolve_as":"accept","operator":"o","issued_at":1}',
                ]
            )
            headers = [
                (HEADER_COMMAND.encode(), b"resolve"),
                (b"busguard-seal", b64url_encode(self.guard_signer.sign(COMMAND_CONTEXT + value)).encode()),
            ]
        return None, value, headers

    # -- fetches -----------------------------------------------------------------

    def _fetch(self, topic: str, pieces: Sequence[Piece]) -> tuple[list[Batch], int, dict[int, int]]:
        """The pieces as batches at this topic's next offsets (mutated at
        random unless genuine; lies last), the fetch offset, and the offset
        of each genuine piece's record -> its index among the pieces' records."""
        rng = self.rng
        honest: list[tuple[Piece, bool]] = []
        lying: list[tuple[Piece, bool]] = []
        for p in pieces:
            if not p.genuine and rng.random() < 0.45:
                lying.append((p, True))
            else:
                honest.append((p, False))
        rng.shuffle(honest)
        base = self.base[topic]
        batches: list[Batch] = []
        genuine_at: dict[int, int] = {}
        index = {id(p): n for n, p in enumerate(pieces)}
        if rng.random() < self.BOMB_RATE:
            b = self.gen.bomb(base)
            self.stats.put[topic] += b.span
            batches.append(b)
            base += b.span
        for p, mutate in [*honest, *lying]:
            codec = rng.choice(list(CODECS.values()))
            recs = [record(i, k, v, h, timestamp_delta=rng.choice([0, i, -1])) for i, (k, v, h) in enumerate(p.recs)]
            raw = batch(recs, base_offset=base, codec=codec)
            if p.genuine:
                for i in range(len(p.recs)):
                    genuine_at[base + i] = index[id(p)] * 1000 + i
            if mutate:
                raw = self.gen.mutate(raw, recs, base, codec)
            batches.append(Batch(raw, base, len(p.recs), not mutate, set()))
            base += len(p.recs)
        if rng.random() < 0.03:
            b = self.gen.claimed_span(base)
            self.stats.put[topic] += 1
            batches.append(b)
            base += b.span
        fetch_offset = batches[0].base
        if not genuine_at and rng.random() < 0.1:
            fetch_offset += rng.randrange(batches[0].span)
        if rng.random() < 0.05 and len(batches) > 1 and batches[-1].base not in genuine_at:
            last = batches[-1]
            batches[-1] = Batch(last.raw[: rng.randrange(12, len(last.raw))], last.base, last.span, False, set())
        self.base[topic] = base
        self.stats.put[topic] += sum(len(p.recs) for p in pieces)
        return batches, fetch_offset, genuine_at

    def _decode(self, topic: str, batches: Sequence[Batch], fetch_offset: int) -> list[Any]:
        """The fetch through aiokafka's fetcher with the tolerant hook; the
        position must move past the fetch offset, and no later fetch re-reads
        what a lying header claimed."""
        raw = b"".join(b.raw for b in batches)
        records = fetcher.PartitionRecords(
            TopicPartition(self.topic[topic], 0), fetcher.MemoryRecords(raw), None, fetch_offset, RAW_KEYS, None, True, 0
        )
        items = list(records)
        end = max(records.next_fetch_offset, max((next_offset(i) for i in items), default=0))
        self.base[topic] = max(self.base[topic], end)
        self.stats.items[topic] += len(items)
        self.stats.fetches[topic] += 1
        offsets = [i.offset for i in items]
        if any(b <= a for a, b in zip(offsets, offsets[1:], strict=False)) or (offsets and offsets[0] < fetch_offset):
            self.stats.outcome_violations += 1
            raise InvariantBroken(f"{topic}: offsets out of order from {fetch_offset}: {offsets[:20]}")
        if raw and end <= fetch_offset:
            self.stats.stalls += 1
            raise InvariantBroken(f"{topic}: the position did not move past {fetch_offset}")
        return items

    def _run(self, topic: str, step: Callable[[], None]) -> None:
        try:
            step()
        except InvariantBroken as exc:
            self.stats.sample(f"invariant: {exc}")
        except Exception as exc:  # noqa: BLE001 - a crash is what the campaign counts
            self.stats.crashes += 1
            self.stats.sample(f"{topic}: {type(exc).__name__}: {exc}")

    # -- downstream: the SDK receiver --------------------------------------------

    def _effect(self, d: Delivery, tx: Claim[Any]) -> None:
        s = self.stats
        s.acted += 1
        self.acted[d.decision_id] += 1
        if self.acted[d.decision_id] > 1:
            s.acted_twice += 1
            s.sample(f"acted twice on {d.decision_id} (offset {d.offset})")
        if self.mine.get(d.decision_id) != hashlib.sha256(d.payload).digest():
            s.acted_not_genuine += 1
            s.sample(f"acted on offset {d.offset}, decision {d.decision_id[:40]!r}: not a genuine forward to the receiver")

    def downstream(self) -> None:
        rng = self.rng
        outputs = self.guarded(self._task_records())
        down, esc, audit = self._sort(outputs)
        self._remember(esc, audit)
        genuine = [(o.value or b"", list(o.headers)) for o in down]
        for _, headers in genuine:
            did = (_header(headers, HEADER_DECISION_ID) or b"").decode()
            if did in self.mine:
                self.placed.add(did)
                self.stats.genuine_tasks += 1
        pieces: list[Piece] = []
        pending = list(genuine)
        rng.shuffle(pending)
        while pending:  # the genuine forwards, with hostile records among them
            n = rng.randint(1, 4)
            recs: list[Rec] = [(None, v, _bytes_headers(h)) for v, h in pending[:n]]
            del pending[:n]
            for _ in range(rng.randrange(3)):
                recs.insert(rng.randrange(len(recs) + 1), self.gen.hostile())
            pieces.append(Piece(recs, genuine=True))
        for _ in range(rng.choice([1, 2, 3])):
            recs = []
            for _ in range(rng.choice([1, 2, 5, 10, 30])):
                x = rng.random()
                if x < 0.35 and self.forwards:
                    v, h = rng.choice(self.forwards)
                    recs.append((None, v, _bytes_headers(h)) if rng.random() < 0.3 else self.variant(v, h, self.forwards))
                elif x < 0.45:
                    recs.append(self.gen.valid())  # signed by the planner, never sealed by the guard: unattested
                else:
                    recs.append(self.gen.hostile())
            pieces.append(Piece(recs))
        self.forwards.extend(genuine)
        batches, fetch_offset, genuine_at = self._fetch("downstream", pieces)
        self._run("downstream", lambda: self._receive(batches, fetch_offset, genuine_at, pieces))

    def _receive(self, batches: Sequence[Batch], fetch_offset: int, genuine_at: dict[int, int], pieces: Sequence[Piece]) -> None:
        s = self.stats
        items = self._decode("downstream", batches, fetch_offset)
        tp = TopicPartition(self.topic["downstream"], 0)
        self.wire.fetched = {tp: items} if items else {}
        self.wire.committed = {}
        self.inbox.last = None
        step = asyncio.run(self.act.step(timeout_ms=0))
        admitted = self.inbox.last
        assert admitted is not None
        for r in admitted.refusals:
            s.outcomes[f"downstream:{r.reason}"] += 1
        s.outcomes["downstream:delivered"] += len(admitted.deliveries)
        outcome_offsets = sorted([d.offset for d in admitted.deliveries] + [r.offset for r in admitted.refusals])
        if outcome_offsets != [i.offset for i in items] or step.acted + step.skipped + step.refused != len(items):
            s.outcome_violations += 1
            raise InvariantBroken(f"downstream: {step} for {len(items)} items at {[i.offset for i in items][:10]}")
        want = {tp: next_offset(items[-1])} if items else {}
        if self.wire.committed != want:
            s.stalls += 1
            raise InvariantBroken(f"downstream: committed {self.wire.committed}, the fetch ends at {want}")
        for offset, where in genuine_at.items():
            value, headers = pieces[where // 1000].recs[where % 1000][1:]
            did = next((v for k, v in headers if k == HEADER_DECISION_ID.encode()), b"").decode()  # type: ignore[union-attr]
            if did in self.mine and self.acted[did] != 1:
                s.genuine_missed += 1
                s.sample(f"the genuine forward at {offset} ({did[:40]}) acted on {self.acted[did]} times")
        self._audit_forwards(items)

    def _audit_forwards(self, items: Sequence[Any]) -> None:
        """The auditor reads the downstream topic too."""
        for item in items:
            for r in _raws(self.topic["downstream"], item, self.topic["audit"]):
                checked = check_forwarded(r.topic, r.value, r.headers, self.guard_key, self.seals, self.heads)
                apply_forwarded(self.ledger, checked, r.at)
                self.stats.outcomes[f"audit-downstream:{'ok' if checked.ok else 'unattested'}"] += 1
        self._maybe_reset(len(items))

    # -- reconciliation ---------------------------------------------------------

    def _remember(self, esc: Sequence[Output], audit: Sequence[Output]) -> None:
        for o in esc:
            self.escalations.append((o.value or b"", list(o.headers)))
        for o in audit:
            self.audits.append((o.value or b"", list(o.headers)))

    def reconciliation(self) -> None:
        rng = self.rng
        outputs = self.guarded(self._task_records())
        down, esc, audit = self._sort(outputs)
        self.forwards.extend((o.value or b"", list(o.headers)) for o in down)
        self._remember([], audit)
        ids = [(_header(o.headers, HEADER_DECISION_ID) or b"").decode() for o in esc]
        pieces = [Piece([(o.key, o.value, _bytes_headers(o.headers))], genuine=True) for o in esc]
        for did in ids:
            if rng.random() < 0.5:
                pieces.append(Piece([self._command(did)], genuine=False))
        known = [*ids, *((_header(h, HEADER_DECISION_ID) or b"").decode() for _, h in self.escalations)]
        for _ in range(rng.choice([1, 2, 3])):
            recs: list[Rec] = []
            for _ in range(rng.choice([1, 2, 5, 10, 30])):
                x = rng.random()
                if x < 0.3 and self.escalations:
                    v, h = rng.choice(self.escalations)
                    recs.append((None, v, _bytes_headers(h)) if rng.random() < 0.2 else self.variant(v, h, self.escalations))
                elif x < 0.45:
                    recs.append(self._hostile_command(known))
                elif x < 0.5 and self.forwards:
                    v, h = rng.choice(self.forwards)  # a forward is not an escalation
                    recs.append((None, v, _bytes_headers(h)))
                else:
                    recs.append(self.gen.hostile())
            pieces.append(Piece(recs))
        self.escalations.extend((o.value or b"", list(o.headers)) for o in esc)  # copies come after the originals
        batches, fetch_offset, genuine_at = self._fetch("reconciliation", pieces)
        self._run("reconciliation", lambda: self._reconcile(batches, fetch_offset, genuine_at, pieces))

    def _reconcile_store(self) -> SqliteReconcileStore[Output, EscalationState]:
        self.stores += 1
        store = SqliteReconcileStore(self.dir / f"reconcile-{self.stores}.db", output=Output, state=EscalationState, synchronous="OFF")
        run_batch = store.run_batch

        def recording(sources: Any, ids: Any, fn: Any) -> Any:
            got = run_batch(sources, ids, fn)
            self.by_source = dict(got)
            return got

        store.run_batch = recording  # type: ignore[method-assign]
        return store

    def _reconcile(self, batches: Sequence[Batch], fetch_offset: int, genuine_at: dict[int, int], pieces: Sequence[Piece]) -> None:
        s = self.stats
        items = self._decode("reconciliation", batches, fetch_offset)
        self.by_source = {}
        outputs = asyncio.run(self.reconciler.process(items)) if items else []
        sources = [(i.topic, i.partition, i.offset) for i in items]
        if sorted(self.by_source) != sorted(sources) or len(outputs) != sum(len(v) for v in self.by_source.values()):
            s.outcome_violations += 1
            raise InvariantBroken(f"reconciliation: outcomes for {sorted(self.by_source)[:5]}, items {sources[:5]}")
        for src in sources:
            outs = self.by_source[src]
            kinds = [
                (_header(o.headers, HEADER_OUTCOME) or b"?").decode() if o.topic != self.cfg.topics.dead_letter else "dead_letter"
                for o in outs
            ]
            if "dead_letter" in kinds:
                reason = next((v for k, v in reversed(outs[kinds.index("dead_letter")].headers) if k == "busguard-reason"), b"?").decode(
                    "utf-8", "replace"
                )
                s.outcomes[f"reconciliation:{reason}"] += 1
            else:
                s.outcomes[f"reconciliation:{'+'.join(kinds) or 'nothing (re-emitted)'}"] += 1
            if src[2] in genuine_at:
                where = genuine_at[src[2]]
                headers = pieces[where // 1000].recs[where % 1000][2]
                did = next((v for k, v in headers if k == HEADER_DECISION_ID.encode()), b"").decode()  # type: ignore[union-attr]
                if did not in self.seen_escalations:
                    self.seen_escalations.add(did)
                    s.genuine_escalations += 1
                    if "dead_letter" in kinds or not kinds:
                        s.escalations_dead_lettered += 1
                        s.sample(f"the genuine escalation {did[:40]} at {src[2]}: {kinds}")
        self._maybe_reset(len(items))

    # -- audit ------------------------------------------------------------------

    def audit(self) -> None:
        rng = self.rng
        outputs = self.guarded(self._task_records())
        down, esc, audit = self._sort(outputs)
        self.forwards.extend((o.value or b"", list(o.headers)) for o in down)
        self.escalations.extend((o.value or b"", list(o.headers)) for o in esc)
        pieces = [Piece([(o.key, o.value, _bytes_headers(o.headers))], genuine=True) for o in audit]
        self.audits.extend((o.value or b"", list(o.headers)) for o in audit)
        for _ in range(rng.choice([1, 2, 3])):
            recs: list[Rec] = []
            for _ in range(rng.choice([1, 2, 5, 10, 30])):
                x = rng.random()
                if x < 0.4 and self.audits:
                    v, h = rng.choice(self.audits)
                    if rng.random() < 0.15:
                        recs.append((None, v, _bytes_headers(h)))  # a copy: the ledger keeps one fact per id
                    elif _header(h, HEADER_AUDIT_BATCH) is not None and rng.random() < 0.6:
                        recs.append(self.batch_audit_variant(v, h))
                    else:
                        recs.append(self.variant(v, h, self.audits))
                elif x < 0.5 and self.escalations:
                    v, h = rng.choice(self.escalations)
                    recs.append((None, v, _bytes_headers(h)))
                else:
                    recs.append(self.gen.hostile())
            pieces.append(Piece(recs))
        batches, fetch_offset, genuine_at = self._fetch("audit", pieces)
        self._run("audit", lambda: self._read_audit(batches, fetch_offset, genuine_at))

    def _read_audit(self, batches: Sequence[Batch], fetch_offset: int, genuine_at: dict[int, int]) -> None:
        s = self.stats
        topic = self.topic["audit"]
        items = self._decode("audit", batches, fetch_offset)
        for item in items:
            raws = _raws(topic, item, topic)
            batch_record = type(item) is not Undecodable and _header(item.headers, HEADER_AUDIT_BATCH) is not None
            if not raws or (len(raws) != 1 and not batch_record) or any(r.at != (item.partition, item.offset) for r in raws):
                s.outcome_violations += 1
                raise InvariantBroken(f"audit: {len(raws)} records for the item at {item.offset} (batch audit record: {batch_record})")
            if batch_record:
                s.outcomes[f"audit:batch record of {'1' if len(raws) == 1 else 'n'} entr{'y' if len(raws) == 1 else 'ies'}"] += 1
            for r in raws:
                checked = check_audit_record(r.value, r.headers, self.guard_key, None, r.undecodable, self.heads)
                if checked.seal is not None:
                    self.seals.add(checked.seal)
                apply_audit(self.ledger, checked, r.at)
                s.outcomes[f"audit:{'verified' if checked.verified else 'unverified' if checked.record is not None else 'unreadable'}"] += 1
                if item.offset in genuine_at:
                    s.genuine_audit += 1
                    if not checked.verified:
                        s.genuine_audit_unverified += 1
                        s.sample(f"the genuine audit record at {item.offset} did not verify: {checked.why[:200]}")
        self._maybe_reset(len(items))

    # -- memory ------------------------------------------------------------------

    def _maybe_reset(self, n: int) -> None:
        """Judge the ledger (the audit's report over everything read) and
        start a fresh one, and a fresh reconcile store, every RESET_EVERY items."""
        self.since_reset += n
        if self.since_reset >= self.RESET_EVERY:
            self.judge()
            self.reconciler.store.close()
            self.reconciler.store = self._reconcile_store()
            self.seen_escalations.clear()
            self.since_reset = 0

    def judge(self) -> None:
        def run() -> None:
            report = judge(self.ledger)
            for v in report.violations:
                self.stats.findings[v.invariant] += 1

        self._run("audit", run)
        self.ledger: Ledger = new_ledger(self.cfg)
        self.seals = SealCache()

    def round(self) -> None:
        """One fetch on each topic."""
        self.downstream()
        self.reconciliation()
        self.audit()

    def finish(self) -> None:
        """The end of the campaign: every genuine task to the receiver acted on exactly once."""
        self.judge()
        s = self.stats
        for did in self.placed:
            if self.acted[did] == 0:  # acted twice is counted when it happens
                s.genuine_missed += 1
                s.sample(f"genuine task {did[:40]} acted on {self.acted[did]} times")

    def figures(self, seconds: float) -> dict[str, Any]:
        s = self.stats
        return {
            "records_fuzzed": s.total,
            "records_by_topic": dict(s.put),
            "items_read_by_topic": dict(s.items),
            "fetches_by_topic": dict(s.fetches),
            "seconds": round(seconds, 1),
            "records_per_s": round(s.total / seconds) if seconds else 0,
            "crashes": s.crashes,
            "stalls": s.stalls,
            "outcome_violations": s.outcome_violations,
            "genuine_tasks": s.genuine_tasks,
            "acted": s.acted,
            "acted_once_violations": s.acted_twice + s.acted_not_genuine + s.genuine_missed,
            "acted_twice": s.acted_twice,
            "acted_not_genuine": s.acted_not_genuine,
            "genuine_missed": s.genuine_missed,
            "genuine_escalations": s.genuine_escalations,
            "genuine_escalations_dead_lettered": s.escalations_dead_lettered,
            "genuine_audit_records": s.genuine_audit,
            "genuine_audit_records_unverified": s.genuine_audit_unverified,
            "outcomes": {
                t: {k.split(":", 1)[1]: n for k, n in s.outcomes.most_common() if k.split(":", 1)[0] == t}
                for t in (*TOPICS, "audit-downstream")
            },
            "audit_findings": dict(s.findings.most_common()),
            "samples": s.samples,
        }
