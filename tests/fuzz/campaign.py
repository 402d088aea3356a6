"""Record-level fuzzing of the guard: the parts the script and the unit test share.

A *fetch* is what a broker returns for one partition: record batches, back
to back. `Campaign.decide_fetch` runs one through exactly what a running
guard does with it — aiokafka's fetcher `PartitionRecords` over
`MemoryRecords` (with busguard's tolerant hook, as `consumer_options()`
installs it), then `Guard.process` (precheck, verify, `admit_batch` on a
MemoryStore, seal, outputs) — and checks the guarantees:

* nothing raises;
* offsets come out strictly increasing, each with exactly one decision and
  exactly two outputs (primary and audit), the audit record naming it;
* the position always moves past the fetched offset;
* every offset of a batch the generator did not mutate is decided, and every
  validly signed record in one is admitted;
* every offset from the fetch offset to the position is covered by exactly
  one item (an undecodable span by one, however many offsets it claims), and
  what one input's outputs weigh is bounded (`MAX_OUTPUT_PER_INPUT`), so a
  batch header claiming 2^31 offsets costs what one claiming one does.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import hashlib
import random
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from aiokafka.consumer import fetcher
from aiokafka.structs import TopicPartition

from busguard.config import DEFAULT_MAX_INFLATED_BYTES, load_config
from busguard.devconfig import Topics, embedded_config
from busguard.protocol.envelope import HEADER_RECEIPT, HEADER_SIGNATURE, b64url_encode
from busguard.protocol.identity import agent_id_for_key
from busguard.protocol.keyfile import Identity, write_key
from busguard.protocol.receipt import payload_hash, signing_input
from busguard.protocol.records import Decision
from busguard.protocol.registry import KeyRegistry
from busguard.protocol.signing import Signer, public_key_from_seed
from busguard.protocol.timestamps import format_timestamp, parse_timestamp
from busguard.runtime.guard import Guard
from busguard.runtime.tolerant_fetch import RAW_KEYS, consumer_options
from busguard.runtime.undecodable import Undecodable, next_offset
from busguard.runtime.watched import WatchedFile
from busguard.sdk.sender import Sender
from busguard.state.memory.store import MemoryStore

from .batches import CODECS, batch, bomb_batch, bomb_inflated_size, claimed_span, fix_crc, record, snappy_length_lie, with_base_offset

NOW = parse_timestamp("2026-11-29T12:00:00.000Z")
TOPIC = "fuzz.handoffs"
_decision = msgspec.json.Decoder(Decision)
Rec = tuple[bytes | None, bytes | None, list[tuple[bytes, bytes | None]]]


def _seed(name: str) -> bytes:
    return hashlib.sha256(b"busguard-fuzz:" + name.encode()).digest()


#: The peak RSS growth one fetch holding a bomb may cause: the inflated
#: records, the uncompressed batch and its parsed records (each at most the
#: default batch.max_inflated_bytes), plus the decisions and outputs of the fetch.
BOMB_GROWTH_BOUND = 3 * DEFAULT_MAX_INFLATED_BYTES + (16 << 20)


def _proc_status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak_rss() -> int:
    """Resets VmHWM to the current RSS (Linux: clear_refs 5) and returns it."""
    Path("/proc/self/clear_refs").write_text("5")
    return _proc_status("VmRSS")


class InvariantBroken(AssertionError):
    pass


@dataclass
class Stats:
    fetches: int = 0
    records: int = 0  # generated records (before batch mutation)
    decided: int = 0  # decisions made (one per offset the decoder yielded)
    crashes: int = 0
    missing: int = 0  # offsets that should have a decision and have none
    duplicates: int = 0  # offsets with more than one decision
    valid_not_admitted: int = 0
    truncated: int = 0
    bombs: int = 0  # fetches holding a compression bomb (`Generator.bomb`)
    bombs_over_bound: int = 0  # of those, decoded and decided with a peak RSS growth over BOMB_GROWTH_BOUND
    bomb_peak_growth: int = 0  # the largest such growth, in bytes
    spans: int = 0  # undecodable items covering more than one offset
    span_offsets: int = 0  # offsets those items covered
    passed_over: int = 0  # offsets before the position after the last item: transaction markers, no item due
    max_output_bytes: int = 0  # the heaviest input's outputs (primary + audit), key, value and headers
    oversized_outputs: int = 0  # inputs whose outputs weighed more than MAX_OUTPUT_PER_INPUT
    reasons: collections.Counter[str] = field(default_factory=collections.Counter)
    crash_samples: list[str] = field(default_factory=list)


@dataclass
class Batch:
    raw: bytes
    base: int
    span: int  # offsets the generator meant it to cover
    pristine: bool
    valid: set[int]  # offsets of validly signed records
    bomb: bool = False  # a compression bomb: the fetch's peak memory is measured


class Campaign:
    """A guard with a real config, keys and a MemoryStore, decoupled from Kafka."""

    MAX_ITEMS_PER_FETCH = 20_000
    #: One input's outputs weigh at most its own bytes, bounded by the
    #: payload limit, plus a constant: the campaign's records are far below
    #: 1 MiB, so 2 MiB is a bound no span or record may pass.
    MAX_OUTPUT_PER_INPUT = 2 * 1_048_576

    def __init__(self, workdir: Path | None = None) -> None:
        consumer_options()  # installs the hook, as every busguard consumer does
        self._tmp = tempfile.TemporaryDirectory(prefix="busguard-fuzz-") if workdir is None else None
        d = Path(self._tmp.name) if self._tmp is not None else workdir
        assert d is not None
        self.planner = Sender(_seed("planner"), clock_ms=lambda: NOW)
        self.receiver = agent_id_for_key(public_key_from_seed(_seed("executor")))
        (d / "keys.toml").write_text(f'[[agent]]\nid = "{self.planner.agent_id}"\n\n[[agent]]\nid = "{self.receiver}"\n')
        seed = _seed("guard")
        pk = public_key_from_seed(seed)
        write_key(d / "guard.key", Identity(seed=seed, public_key=pk, agent_id=agent_id_for_key(pk)), overwrite=True)
        t = Topics.under("fuzz")
        t = msgspec.structs.replace(t, handoffs=TOPIC)
        (d / "busguard.toml").write_text(
            embedded_config(
                "127.0.0.1:1", group_id="fuzz", topics=t, comment="fuzz", state={"path": str(d / "unused.db")}, batch={"verify_threads": 2}
            )
        )
        self.cfg = load_config(d / "busguard.toml")
        keys = WatchedFile(self.cfg.path(self.cfg.keys.registry), KeyRegistry.load, what="key registry", watch=False)
        ident = Identity(seed=seed, public_key=pk, agent_id=agent_id_for_key(pk))
        self.guard = Guard(self.cfg, keys=keys, identity=ident, store=self._store(), clock_ms=lambda: NOW)
        self.since_reset = 0
        self.stats = Stats()
        self.next_base = 0
        self.tasks = 0

    @staticmethod
    def _store() -> MemoryStore:
        return MemoryStore(created_at=NOW - 3_600_000)

    def close(self) -> None:
        self.guard._pool.shutdown(wait=True)
        if self._tmp is not None:
            self._tmp.cleanup()

    # -- one fetch -------------------------------------------------------------

    def decide_fetch(self, batches: Sequence[Batch], fetch_offset: int) -> int:
        """Decode and decide one fetch, check it, add to the stats; never raises
        for a crash or broken invariant (they are counted), so a campaign runs on.
        Returns the first offset the decoder did not cover: a mutated header
        may claim offsets beyond what the generator meant, and the next fetch
        must start after them (a store remembers decisions by position)."""
        s = self.stats
        s.fetches += 1
        raw = b"".join(b.raw for b in batches)
        self.end = fetch_offset
        bomb = any(b.bomb for b in batches)
        before = _reset_peak_rss() if bomb else 0
        try:
            self._check(batches, raw, fetch_offset)
        except InvariantBroken as exc:
            s.crash_samples.append(f"invariant: {exc}")
        except Exception as exc:  # noqa: BLE001 - a crash is what the campaign counts
            s.crashes += 1
            if len(s.crash_samples) < 20:
                s.crash_samples.append(f"{type(exc).__name__}: {exc} (fetch {raw[:64].hex()}…)")
        if bomb:
            self._bomb_memory(before)
        return self.end

    def _bomb_memory(self, before: int) -> None:
        s = self.stats
        s.bombs += 1
        growth = _proc_status("VmHWM") - before
        s.bomb_peak_growth = max(s.bomb_peak_growth, growth)
        if growth > BOMB_GROWTH_BOUND:
            s.bombs_over_bound += 1
            if len(s.crash_samples) < 20:
                s.crash_samples.append(f"bomb fetch grew the peak RSS by {growth} bytes (bound {BOMB_GROWTH_BOUND})")

    def _check(self, batches: Sequence[Batch], raw: bytes, fetch_offset: int) -> None:
        s = self.stats
        records = fetcher.PartitionRecords(
            TopicPartition(TOPIC, 0), fetcher.MemoryRecords(raw), None, fetch_offset, RAW_KEYS, None, True, 0
        )
        items: list[Any] = []
        for item in records:
            items.append(item)
            if len(items) >= self.MAX_ITEMS_PER_FETCH:
                s.truncated += 1
                break
        end = self.end = max(records.next_fetch_offset, max((next_offset(i) for i in items), default=0))
        offsets = [i.offset for i in items]
        if any(b <= a for a, b in zip(offsets, offsets[1:], strict=False)):
            raise InvariantBroken(f"offsets not strictly increasing: {offsets[:20]}")
        if offsets and offsets[0] < fetch_offset:
            raise InvariantBroken(f"offset {offsets[0]} before the fetch offset {fetch_offset}")
        if end <= fetch_offset and raw:
            raise InvariantBroken(f"position did not move past {fetch_offset}")
        self._check_cover(items, fetch_offset, end, truncated=len(items) >= self.MAX_ITEMS_PER_FETCH)
        outputs = asyncio.run(self.guard.process(items)) if items else []
        if len(outputs) != 2 * len(items):
            raise InvariantBroken(f"{len(outputs)} outputs for {len(items)} records")
        self._weigh(outputs)
        decided: dict[int, Decision] = {}
        for item, audit in zip(items, outputs[1::2], strict=True):
            d = _decision.decode(audit.value)
            if d.source.offset != item.offset or d.source.topic != TOPIC:
                raise InvariantBroken(f"audit record for {d.source} in place of offset {item.offset}")
            if d.source.offset in decided:
                s.duplicates += 1
            decided[d.source.offset] = d
            s.reasons[d.reason] += 1
            if type(item) is Undecodable and d.reason != item.reason:
                raise InvariantBroken(f"placeholder {item.reason} decided as {d.reason}")
            if d.covers_to != next_offset(item) - 1:
                raise InvariantBroken(f"decision at {d.source.offset} covers to {d.covers_to}, its item to {next_offset(item) - 1}")
        s.decided += len(items)
        starts = sorted(decided)
        for b in batches:
            if not b.pristine:
                continue
            for o in range(max(b.base, fetch_offset), b.base + b.span):
                if o >= end:
                    break  # stopped early (the cap): the next poll would read it
                d = decided.get(o)
                if d is None:  # inside a span (a bomb past the bound is one span decision for its records)
                    i = bisect.bisect_right(starts, o) - 1
                    d = decided[starts[i]] if i >= 0 and decided[starts[i]].covers_to >= o else None
                if d is None:
                    s.missing += 1
                elif o in b.valid and d.reason != "admitted":
                    s.valid_not_admitted += 1
                    if len(s.crash_samples) < 20:
                        s.crash_samples.append(f"valid record at {o} decided {d.reason}: {d.detail}")
        self.since_reset += len(items)
        if self.since_reset > 50_000 or end - fetch_offset > 2**20:  # keep memory flat over a million records
            self.guard.store = self._store()
            self.since_reset = 0

    def _check_cover(self, items: Sequence[Any], fetch_offset: int, end: int, *, truncated: bool) -> None:
        """No offset is covered by two items (a span overlapping anything is a
        duplicate); offsets the decoder passed over without an item (a
        transaction marker: no record, no decision) are counted."""
        s = self.stats
        reach = fetch_offset
        for item in items:
            if item.offset < reach:
                s.duplicates += 1
            stop = next_offset(item)
            if stop - item.offset > 1:
                s.spans += 1
                s.span_offsets += stop - item.offset
            reach = max(reach, stop)
        if reach < end and not truncated:
            s.passed_over += end - reach

    def _weigh(self, outputs: Sequence[Any]) -> None:
        """The heaviest input's outputs (primary and audit record, in order)."""
        s = self.stats
        sizes = [len(o.key or b"") + len(o.value or b"") + sum(len(k) + len(v or b"") for k, v in o.headers) for o in outputs]
        for primary, audit in zip(sizes[0::2], sizes[1::2], strict=True):
            weight = primary + audit
            s.max_output_bytes = max(s.max_output_bytes, weight)
            if weight > self.MAX_OUTPUT_PER_INPUT:
                s.oversized_outputs += 1


# -- hostile records -------------------------------------------------------------


TIMESTAMP_EDGES = [
    "0000-01-01T00:00:00Z",
    "0001-01-01T00:00:00.000Z",
    "9999-12-31T23:59:59.999999999Z",
    "2026-11-29T12:00:00.000Z",
    "2026-11-29T12:00:00Z",
    "2026-11-29T11:59:59.999999999999Z",
    "2026-11-29T23:59:60Z",
    "2026-02-29T12:00:00Z",
    "2026-11-29t12:00:00z",
    "2026-11-29T12:00:00+23:59",
    "2026-11-29T12:00:00-00:00",
    "2026-11-29T12:00:00+24:00",
    "2026-11-29 12:00:00Z",
    "2026-11-29T12:00:00.Z",
    "+2026-11-29T12:00:00Z",
    "2026-11-29T12:00:00\x00Z",
    "",
]
INT_EDGES = [0, 1, -1, 2**31 - 1, 2**31, 2**63 - 1, 2**63, -(2**63), 2**64, 10**30, -(10**30)]
INT_TEXT = [str(i) for i in INT_EDGES] + ["1.0", "1e3", "-0", "01", "0x10", '"1"', "null", "true", "1" * 400]


class Generator:
    """Hostile and valid records, and batch-level mutations, from one seeded RNG."""

    def __init__(self, camp: Campaign, rng: random.Random) -> None:
        self.c = camp
        self.rng = rng
        self.signer = Signer(_seed("planner"))
        self.n = 0

    def _task(self) -> str:
        self.n += 1
        self.c.tasks += 1  # unique across generators: the store remembers every admitted task
        return f"fz-{self.c.tasks}-{self.rng.getrandbits(32):08x}"

    def valid(self) -> Rec:
        # the nonce from the seeded RNG (not the SDK's `secrets`), so a seed
        # reproduces a campaign, prefixed by the campaign-wide task count so
        # that two generators with one seed (Hypothesis repeats seeds against
        # one store) never reuse a nonce
        task_id = self._task()
        nonce = f"{self.c.tasks:08x}{self.rng.getrandbits(96):024x}"
        r = self.c.planner.sign(
            kind="handoff", task_id=task_id, receiver=self.c.receiver, payload=b'{"op":"fuzz","n":%d}' % self.n, nonce=nonce
        )
        return self.c.planner.agent_id.encode(), r.value, [(k.encode(), v) for k, v in r.headers]

    def _signed_raw(self, receipt: bytes, value: bytes) -> list[tuple[bytes, bytes | None]]:
        sig = b64url_encode(self.signer.sign(signing_input(receipt))).encode()
        return [(HEADER_RECEIPT.encode(), receipt), (HEADER_SIGNATURE.encode(), sig)]

    def _receipt(self, value: bytes, **over: str) -> bytes:
        fields = {
            "v": "1",
            "kind": '"handoff"',
            "task_id": f'"{self._task()}"',
            "sender": f'"{self.c.planner.agent_id}"',
            "receiver": f'"{self.c.receiver}"',
            "payload_hash": f'"{payload_hash(value)}"',
            "nonce": f'"{self.rng.getrandbits(128):032x}"',
            "issued_at": f'"{format_timestamp(NOW)}"',
        }
        fields.update(over)
        return ("{" + ",".join(f'"{k}":{v}' for k, v in fields.items() if v != "<drop>") + "}").encode()

    def _bytes(self, n: int) -> bytes:
        return self.rng.randbytes(n)

    def hostile(self) -> Rec:
        rng = self.rng
        kind = rng.randrange(12)
        value = b'{"op":"x"}'
        if kind == 0:  # bit flips of a valid record (value, headers, names)
            key, value, headers = self.valid()
            parts = [bytearray(value)] + [bytearray(h) for h, _ in headers] + [bytearray(v or b"") for _, v in headers]
            for _ in range(rng.randint(1, 6)):
                p = rng.choice(parts)
                if p:
                    p[rng.randrange(len(p))] ^= 1 << rng.randrange(8)
            n = len(headers)
            return key, bytes(parts[0]), [(bytes(parts[1 + i]), bytes(parts[1 + n + i])) for i in range(n)]
        if kind == 1:  # random bytes in header names and values
            return (
                self._bytes(rng.randrange(8)),
                self._bytes(rng.randrange(64)),
                [
                    (self._bytes(rng.randrange(1, 40)), self._bytes(rng.randrange(64)) if rng.random() < 0.9 else None)
                    for _ in range(rng.randrange(1, 6))
                ],
            )
        if kind == 2:  # non-UTF-8 header names beside a valid receipt
            key, value, headers = self.valid()
            bad = rng.choice([b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"busguard-receipt\xff", b"\x80" * 3, b"\xf4\x90\x80\x80"])
            headers.insert(rng.randrange(len(headers) + 1), (bad, b"x"))
            return key, value, headers
        if kind == 3:  # huge headers, compressible or not
            size = rng.choice([4096, 65_536, 300_000])
            blob = b"a" * size if rng.random() < 0.5 else self._bytes(size)
            key, value, headers = self.valid()
            return key, value, [*headers, (b"x-huge", blob)] if rng.random() < 0.5 else [(HEADER_RECEIPT.encode(), blob), headers[1]]
        if kind == 4:  # many headers
            key, value, headers = self.valid()
            return key, value, [*headers, *((b"h%d" % i, b"v") for i in range(rng.choice([100, 2000])))]
        if kind == 5:  # deep JSON in the receipt and the value
            depth = rng.choice([64, 512, 2040, 100_000])
            deep = b"[" * depth + b"]" * depth
            value = deep if rng.random() < 0.5 else b'{"a":' * depth + b"1" + b"}" * depth
            receipt = deep[:4096] if rng.random() < 0.5 else self._receipt(value, task_id=("[" * 1000 + "]" * 1000))
            return None, value, self._signed_raw(receipt, value)
        if kind == 6:  # NUL bytes
            receipt = self._receipt(value, task_id='"t\\u0000x"', nonce='"' + "\x00" * 20 + '"')
            return b"\x00", b"\x00" * rng.randrange(1, 32), [(b"busguard-receipt\x00", receipt), *self._signed_raw(receipt, value)]
        if kind == 7:  # non-UTF-8 inside the receipt, correctly signed
            receipt = self._receipt(value, task_id='"\xff\xfe"'.encode("latin-1").decode("latin-1"))
            receipt = receipt.replace("ÿþ".encode(), b"\xff\xfe")
            return None, value, self._signed_raw(receipt, value)
        if kind == 8:  # integer edges in sessions and sequences, correctly signed
            seq = rng.choice(INT_TEXT)
            receipt = self._receipt(value, session_id=f'"s-{rng.randrange(3)}"', sequence=seq, v=rng.choice(["1", "1", seq]))
            return None, value, self._signed_raw(receipt, value)
        if kind == 9:  # timestamps at the grammar's edges, correctly signed
            receipt = self._receipt(value, issued_at=msgspec.json.encode(rng.choice(TIMESTAMP_EDGES)).decode())
            return None, value, self._signed_raw(receipt, value)
        if kind == 10:  # nulls and empties
            return (
                None,
                rng.choice([None, b""]),
                [(b"", None)] * rng.randrange(3) + [(HEADER_RECEIPT.encode(), None), (HEADER_SIGNATURE.encode(), None)],
            )
        # kind 11: a signed receipt with a field dropped, duplicated or retyped
        receipt = self._receipt(
            value, **{rng.choice(["v", "kind", "task_id", "nonce", "payload_hash"]): rng.choice(["<drop>", "null", "[]", "{}", '"x"', "1"])}
        )
        if rng.random() < 0.3:
            receipt = receipt[:-1] + b',"kind":"ack"}'
        return None, value, self._signed_raw(receipt, value)

    # -- batches -----------------------------------------------------------

    def batch(self, base: int) -> Batch:
        rng = self.rng
        n = rng.choice([1, 1, 2, 5, 10, 30, 60])
        codec = rng.choice(list(CODECS.values()))
        recs: list[bytes] = []
        valid: set[int] = set()
        for i in range(n):
            if rng.random() < 0.35:
                key, value, headers = self.valid()
                valid.add(base + i)
            else:
                key, value, headers = self.hostile()
            recs.append(record(i, key, value, headers, timestamp_delta=rng.choice([0, i, -1, 2**40])))
            self.c.stats.records += 1
        raw = batch(recs, base_offset=base, codec=codec)
        mutation = rng.random()
        if mutation < 0.55:
            return Batch(raw, base, n, True, valid)
        return Batch(self.mutate(raw, recs, base, codec), base, n, False, set())

    def mutate(self, raw: bytes, recs: list[bytes], base: int, codec: int) -> bytes:
        rng = self.rng
        m = rng.randrange(9)
        buf = bytearray(raw)
        if m <= 2:  # bit flips anywhere after the framing, CRC fixed (m>0) or not
            for _ in range(rng.randint(1, 8)):
                pos = rng.randrange(12, len(buf))
                buf[pos] ^= 1 << rng.randrange(8)
            return fix_crc(buf) if m > 0 else bytes(buf)
        if m == 3:  # truncated records section
            cut = rng.randrange(61, len(buf))
            return batch([], base_offset=base, codec=codec, payload=bytes(buf[61:cut]), count=len(recs), last_offset_delta=len(recs) - 1)
        if m == 4:  # an unknown codec id, or the codec bits of another codec
            attrs = rng.choice([5, 6, 7, (codec + 1) % 5])
            return batch(recs, base_offset=base, codec=codec, attributes=attrs)
        if m == 5:  # corrupt compressed payload
            body = bytearray(buf[61:])
            for _ in range(rng.randint(1, 4)):
                body[rng.randrange(len(body))] = rng.randrange(256)
            return batch(
                [], base_offset=base, codec=codec, payload=bytes(body), count=len(recs), last_offset_delta=len(recs) - 1, attributes=codec
            )
        if m == 6:  # offset deltas out of order or duplicated
            shuffled = [record(rng.choice([0, 0, i]), None, b"v", []) for i in range(len(recs))]
            return batch(shuffled, base_offset=base, codec=codec)
        if m == 7:  # a wrong record count, or a control batch outside a transaction
            if rng.random() < 0.5:
                return batch(recs, base_offset=base, codec=codec, count=rng.choice([0, len(recs) + 1, -1, 2**31 - 1]))
            return batch(recs, base_offset=base, codec=codec, attributes=codec | 0x20)
        # m == 8: random bytes after a plausible header
        junk = self._bytes(rng.randrange(1, 400))
        return batch(
            [],
            base_offset=base,
            codec=rng.randrange(8),
            payload=junk,
            count=len(recs),
            last_offset_delta=len(recs) - 1,
            attributes=rng.randrange(8),
        )

    # -- bombs -----------------------------------------------------------

    #: What a bomb's records inflate to, around the default bound.
    BOMB_SIZES = (
        DEFAULT_MAX_INFLATED_BYTES - 64,
        DEFAULT_MAX_INFLATED_BYTES,
        DEFAULT_MAX_INFLATED_BYTES + 1,
        4 * DEFAULT_MAX_INFLATED_BYTES,
        256 << 20,
    )
    BOMB_RATE = 0.01  # per fetch
    _bombs: dict[tuple[int, int, int], bytes] = {}

    def bomb(self, base: int) -> Batch:
        """A valid batch that inflates to one of BOMB_SIZES (built once per
        shape, then moved to `base`), or a snappy section whose length
        header lies: under the bound it decodes (its zero-filled values are
        `oversized`), over it every offset is `undecodable_batch`."""
        rng = self.rng
        codec = rng.choice([1, 2, 3, 4])
        if codec == 2 and rng.random() < 0.3:
            raw = batch(
                [],
                payload=snappy_length_lie(rng.choice([DEFAULT_MAX_INFLATED_BYTES + 1, 2**32 - 1])),
                count=1,
                last_offset_delta=0,
                attributes=2,
                base_offset=base,
            )
            return Batch(raw, base, 1, True, set(), bomb=True)
        inflated = rng.choice(self.BOMB_SIZES[:4] if codec == 2 else self.BOMB_SIZES)  # snappy at most ~21:1: keep its batches fetch-sized
        records = rng.choice([1, 1, 3])
        value = max(0, inflated // records - 16)
        while bomb_inflated_size(value + 1, records) <= inflated:
            value += 1
        key = (codec, value, records)
        if key not in self._bombs:
            self._bombs[key] = bomb_batch(codec, value, records=records)
        self.c.stats.records += records
        return Batch(with_base_offset(self._bombs[key], base), base, records, True, set(), bomb=True)

    #: lastOffsetDelta + 1 a claimed-span batch's header claims (issue 19 item 2)
    CLAIMS = (1, 2, 20_000, 2**31 - 1, 2**31)

    def claimed_span(self, base: int) -> Batch:
        """A 69-byte batch of one record whose header claims many offsets: CRC
        broken (what tansu accepts raw), or CRC fixed over a claim its records
        do not fill (the tolerant reader's path)."""
        rng = self.rng
        n = rng.choice(self.CLAIMS) if rng.random() < 0.7 else rng.randint(1, 2**31)
        self.c.stats.records += 1
        if rng.random() < 0.7:
            return Batch(claimed_span(n, base_offset=base, crc=rng.randrange(2**32)), base, n, False, set())
        recs = [record(0, None, b"v", [])]
        return Batch(
            batch(recs, base_offset=base, last_offset_delta=n - 1, count=rng.choice([1, 2, min(n, 2**31 - 1)])), base, n, False, set()
        )

    def fetch(self, base: int) -> tuple[list[Batch], int, int]:
        """Batches at `base` onward, the fetch offset, and the next free base."""
        rng = self.rng
        batches = []
        if rng.random() < self.BOMB_RATE:
            b = self.bomb(base)
            batches.append(b)
            base += b.span
        for _ in range(rng.choice([1, 1, 2, 3, 5])):
            b = self.claimed_span(base) if rng.random() < 0.03 else self.batch(base)
            batches.append(b)
            base += b.span
        first = batches[0]
        fetch_offset = first.base + (rng.randrange(first.span) if rng.random() < 0.1 else 0)
        # the broker cut the last batch short (never the first: a broker
        # always returns the first batch whole, KIP-74)
        if rng.random() < 0.05 and len(batches) > 1:
            last = batches[-1]
            batches[-1] = Batch(last.raw[: rng.randrange(12, len(last.raw))], last.base, last.span, False, set())
        return batches, fetch_offset, base
