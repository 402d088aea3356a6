"""The hostile-record generator every fuzz campaign shares.

One seeded RNG makes valid signed records, hostile records (bit flips, bad
header names and values, huge and many headers, deep JSON, NUL bytes,
integer and timestamp edges, nulls, retyped receipt fields) and batches of
them in every codec, mutated at the batch level (broken CRCs, truncations,
unknown codecs, corrupt compressed sections, lying offset deltas and
counts, junk), plus compression bombs and claimed spans. The guard's
campaign (campaign.py) feeds them to the guard's input topic; the readers'
campaign (readers.py) puts them among what the SDK, the reconciler and the
auditor read. A seed reproduces the generator's choices; a guard sealing
per batch picks a random chain id, so the readers' campaign, whose batches
hold what such a guard wrote, varies a little from run to run.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Protocol

import msgspec

from busguard.config import DEFAULT_MAX_INFLATED_BYTES
from busguard.protocol.envelope import HEADER_RECEIPT, HEADER_SIGNATURE, b64url_encode
from busguard.protocol.receipt import payload_hash, signing_input
from busguard.protocol.signing import Signer
from busguard.protocol.timestamps import format_timestamp, parse_timestamp
from busguard.sdk.sender import Sender

from .batches import CODECS, batch, bomb_batch, bomb_inflated_size, claimed_span, fix_crc, record, snappy_length_lie, with_base_offset

NOW = parse_timestamp("2026-11-29T12:00:00.000Z")
Rec = tuple[bytes | None, bytes | None, list[tuple[bytes, bytes | None]]]


def seed(name: str) -> bytes:
    """The campaign's keys, derived from a role's name (test keys only)."""
    return hashlib.sha256(b"busguard-fuzz:" + name.encode()).digest()


@dataclass
class Batch:
    raw: bytes
    base: int
    span: int  # offsets the generator meant it to cover
    pristine: bool
    valid: set[int]  # offsets of validly signed records
    bomb: bool = False  # a compression bomb: the fetch's peak memory is measured


class Counts(Protocol):
    records: int  # generated records (before batch mutation)


class Host(Protocol):
    """What a generator needs from its campaign: the planner that signs
    valid records, the receiver they are addressed to, and the counters it
    keeps (tasks, unique across generators: a store remembers every
    admitted task; records generated)."""

    planner: Sender
    receiver: str
    tasks: int

    @property
    def stats(self) -> Counts: ...


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

    def __init__(self, camp: Host, rng: random.Random) -> None:
        self.c = camp
        self.rng = rng
        self.signer = Signer(seed("planner"))
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
