"""Fetched partition bytes to records, with one item for every offset.

The pure half of busguard.runtime.tolerant_fetch (which hooks it into aiokafka):
it uses aiokafka's record and codec decoders but no client and no I/O, so it
is tested and fuzzed on bytes alone.

How, per record batch of a fetch (Kafka message format v2, KIP-98):

* the batch's CRC-32C is checked (as aiokafka does with `check_crcs`); a
  mismatch makes the whole batch `undecodable_batch`;
* a compressed batch is inflated here, never by aiokafka, with a bound:
  at most `max_inflated_bytes` (`batch.max_inflated_bytes`) of records
  (busguard.runtime.inflate); one that would inflate past it is
  `undecodable_batch` before anything else is read from it;
* the batch, uncompressed, is decoded by aiokafka's own decoder (its C
  extension when built), the fast path: a batch that decodes costs one
  offset-order check per record and nothing else;
* if that raises, a small tolerant reader (below) re-reads the inflated
  records: it walks them by their length prefixes, and yields each good record as
  aiokafka would, each record with a header name that is not UTF-8 as
  `undecodable_header`, each record whose fields do not parse as
  `undecodable_record`, and every offset it cannot attribute (unknown codec,
  corrupt compressed frame, broken length prefixes, offset deltas out of
  order) as `undecodable_batch`.

Every run of offsets that cannot be attributed (a whole batch, or the offsets
after its last readable record) is ONE `undecodable_batch` placeholder for
the span [offset, last_offset], however many offsets its header claims: the
work and output an undecodable batch causes are a constant, not a number its
writer chooses (docs/protocol.md 2.1).

Control batches (transaction markers) are skipped as aiokafka skips them;
legacy (v0/v1) message sets go through aiokafka's legacy decoder once the
compressed wrapper's value is known to inflate within the bound, and one
that fails (or would not) yields one `undecodable_batch` placeholder.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator, Sequence
from typing import Any

from aiokafka.structs import ConsumerRecord

from busguard.config import DEFAULT_MAX_INFLATED_BYTES
from busguard.protocol.reasons import Reason
from busguard.runtime.batchbytes import (
    BATCH_HEADER,
    CODEC_NAMES,
    CONTROL,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MIN_V2_LENGTH,
    TRANSACTIONAL,
    Corrupt,
    clip,
    is_abort_marker,
    no_record,
    over_limit,
    read_bytes,
    rewinds,
    varint,
)
from busguard.runtime.inflate import OverLimit, legacy_wrapper_check, uncompressed_batch
from busguard.runtime.undecodable import Undecodable

__all__ = ["PartitionDecoder"]


class PartitionDecoder:
    """Decodes one partition's fetched bytes into `ConsumerRecord`s and
    `Undecodable`s, in offset order, from `next_fetch_offset` on. Pure over
    its input; `next_fetch_offset` advances as items are yielded, as
    aiokafka's own iterator does, so a consumer that stops early resumes at
    the right place."""

    def __init__(
        self,
        topic: str,
        partition: int,
        raw: bytes,
        fetch_offset: int,
        *,
        max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
        floor: int | None = None,
        aborted: Sequence[tuple[int, int]] | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.raw = raw
        #: a fetch from before the position (busguard.runtime.stuck): the
        #: batches that end below it were decided already, and are skipped
        #: without counting as the fetch's first batch
        self.floor = floor if floor is not None and floor > fetch_offset else None
        self.next_fetch_offset = fetch_offset if self.floor is None else self.floor
        self.max_inflated_bytes = max_inflated_bytes
        #: read_committed (a consumer with isolation_level="read_committed"):
        #: the fetch's aborted transactions, (producer id, first offset), by
        #: first offset; None reads every batch (read_uncommitted)
        self._aborted = None if aborted is None else sorted(aborted, key=lambda a: a[1])
        self._aborting: set[int] = set()

    def __iter__(self) -> Iterator[ConsumerRecord | Undecodable]:
        raw = self.raw
        n = len(raw)
        pos = 0
        first = True
        while n - pos >= LOG_OVERHEAD:
            start_offset = self.next_fetch_offset
            base, length = struct.unpack_from(">qi", raw, pos)
            end = pos + LOG_OVERHEAD + length
            if length >= 0 and end > n:
                break  # a partial batch at the end of the fetch: refetched next time
            framed = length >= MIN_V2_LENGTH or (length >= 0 and n > pos + 16 and raw[pos + 16] < 2)
            if not framed:
                # The length cannot be right, so nothing after it can be delimited.
                batch = raw[pos:n]
                why = f"batch length {length} cannot frame a record batch"
                yield from self._placeholders(batch, base, base, self._header_last(raw, pos, base), why)
                if first and self.next_fetch_offset == start_offset:
                    yield from self._placeholders(batch, base, start_offset, start_offset, why)
                return
            if self.floor is not None and first and self._header_last(raw, pos, base) < self.floor:
                pos = end
                continue
            next_base = struct.unpack_from(">q", raw, end)[0] if end + 8 <= n else None
            batch = raw[pos:end]
            magic = raw[pos + 16]
            if magic == 2:
                yield from self._v2(batch, base, next_base)
            elif magic in (0, 1):
                yield from self._legacy(batch, base, magic, next_base)
            else:
                yield from self._placeholders(batch, base, base, base, f"magic byte {magic} is not a Kafka record format")
            if first and self.next_fetch_offset == start_offset:
                # The broker returned this batch for `start_offset`, so it
                # covers it; a header that says otherwise must not stall us.
                yield from self._placeholders(batch, base, start_offset, start_offset, "the batch header does not cover the fetched offset")
            first = False
            pos = end

    @staticmethod
    def _header_last(raw: bytes, pos: int, base: int) -> int:
        if len(raw) - pos >= 27:
            delta: int = struct.unpack_from(">i", raw, pos + 23)[0]
            return base + max(delta, 0)
        return base

    def _placeholders(self, batch: bytes, base: int, lo: int, hi: int, why: str, *, carrier: bool = True) -> Iterator[Undecodable]:
        """One `undecodable_batch` placeholder for the offsets in [lo, hi] not
        yet consumed: one item whatever the span, so a header claiming 2^31
        offsets costs what a header claiming one does. The first placeholder
        of a batch carries the batch's bytes (`carrier`); a later one of the
        same batch names them by offset and hash only, so the output a batch
        causes stays one copy of it however many spans it has."""
        first = max(lo, self.next_fetch_offset)
        if first > hi:
            return
        self.next_fetch_offset = hi + 1
        yield Undecodable(
            self.topic,
            self.partition,
            first,
            Reason.UNDECODABLE_BATCH,
            clip(why),
            batch,
            base,
            hashlib.sha256(batch).hexdigest(),
            carrier=carrier,
            last_offset=hi if hi > first else None,
        )

    def _fill(
        self, batch: bytes, base: int, last: int, items: list[ConsumerRecord | Undecodable], tail: str = ""
    ) -> Iterator[ConsumerRecord | Undecodable]:
        """`items` (this batch's records and record placeholders at or after
        the next fetch offset, in offset order), with every offset of
        [next fetch offset, `last`] that no item holds made a span
        placeholder: a batch claiming offsets it holds no record at (an empty
        batch, a lastOffsetDelta past its last record, offset deltas that skip)
        would otherwise leave them undecided, and a broker that stores such a
        batch as it is (tansu) advances the partition by the claim. `tail`,
        when set, is the reason for the offsets after the last item (a batch
        that breaks off); the first placeholder carries the batch."""
        carrier = True
        for item in items:
            o = item.offset
            if o > self.next_fetch_offset:
                yield from self._placeholders(
                    batch, base, self.next_fetch_offset, o - 1, no_record(self.next_fetch_offset, o - 1), carrier=carrier
                )
                carrier = False
            self.next_fetch_offset = o + 1
            yield item
        if self.next_fetch_offset <= last:
            yield from self._placeholders(
                batch, base, self.next_fetch_offset, last, tail or no_record(self.next_fetch_offset, last), carrier=carrier
            )

    def _aborted_batch(self, batch: bytes, base: int, attrs: int, producer_id: int) -> bool:
        """read_committed, as Kafka's consumers do it (KIP-98): a producer
        whose aborted transaction began at or before this batch is aborting
        until its abort marker; its transactional batches until then are
        skipped. A control batch is never a record either way (below)."""
        aborted = self._aborted
        assert aborted is not None
        while aborted and aborted[0][1] <= base:
            self._aborting.add(aborted.pop(0)[0])
        if attrs & CONTROL:
            if is_abort_marker(batch):
                self._aborting.discard(producer_id)
            return False
        return bool(attrs & TRANSACTIONAL) and producer_id in self._aborting

    def _record(self, rec: Any) -> ConsumerRecord:
        key, value = rec.key, rec.value
        return ConsumerRecord(
            self.topic,
            self.partition,
            rec.offset,
            rec.timestamp,
            rec.timestamp_type,
            key,
            value,
            rec.checksum,
            len(key) if key is not None else -1,
            len(value) if value is not None else -1,
            tuple(rec.headers),
        )

    def _v2(self, batch: bytes, base: int, next_base: int | None) -> Iterator[ConsumerRecord | Undecodable]:
        from aiokafka.record.default_records import DefaultRecordBatch

        _, _, _, _, _, attrs, last_delta, first_ts, max_ts, producer_id, _, _, count = BATCH_HEADER.unpack_from(batch, 0)
        last = base + max(last_delta, 0)
        if next_base is not None and base < next_base <= last:
            last = next_base - 1
        if last < self.next_fetch_offset:
            return  # already consumed (the broker returns whole batches)
        if self._aborted is not None and producer_id >= 0 and self._aborted_batch(batch, base, attrs, producer_id):
            self.next_fetch_offset = last + 1  # an aborted transaction's records: not for a read_committed reader
            return
        if last_delta < 0 and count > 0:
            # Kafka writes lastOffsetDelta = records - 1; a broker that trusts a
            # negative one (tansu) gives the NEXT records offsets this reader
            # has already read past, where no decision will cover them
            yield from self._placeholders(batch, base, base, base, rewinds(base, last_delta))
            return
        if attrs & CONTROL:
            if attrs & TRANSACTIONAL:
                self.next_fetch_offset = last + 1  # a transaction marker, not a record
                return
            yield from self._placeholders(batch, base, base, last, "control batch outside a transaction")
            return
        try:
            parsed = DefaultRecordBatch(batch)
            crc_ok = parsed.validate_crc()
        except Exception as exc:  # noqa: BLE001 - any failure of the client's decoder is data, not a bug
            yield from self._placeholders(batch, base, base, last, f"batch header does not parse: {type(exc).__name__}: {exc}")
            return
        if not crc_ok:
            yield from self._placeholders(batch, base, base, last, "CRC-32C mismatch: the batch is corrupt")
            return
        codec = attrs & 0x07
        plain: bytes | bytearray = batch
        if codec:
            name = CODEC_NAMES.get(codec, f"id {codec}")
            try:
                plain = uncompressed_batch(batch, self.max_inflated_bytes)
                parsed = DefaultRecordBatch(plain)
            except OverLimit as exc:
                yield from self._placeholders(batch, base, base, last, over_limit(name, exc))
                return
            except Exception as exc:  # noqa: BLE001 - a codec library's error is data here
                yield from self._placeholders(batch, base, base, last, f"{name} records do not decompress: {type(exc).__name__}: {exc}")
                return
        try:
            recs = list(parsed)
        except Exception:  # noqa: BLE001 - fall back to the tolerant reader below
            recs = None
        if recs is not None:
            prev = base - 1
            for r in recs:
                o = r.offset
                if o <= prev or o > last:
                    recs = None
                    break
                prev = o
        if recs is None:
            yield from self._tolerant(batch, bytes(memoryview(plain)[BATCH_HEADER.size :]), base, last, attrs, first_ts, max_ts, count)
        else:
            nfo = self.next_fetch_offset
            kept = [self._record(r) for r in recs if r.offset >= nfo]
            if len(kept) == last - max(base, nfo) + 1:  # every claimed offset holds a record: no gap to look for
                for item in kept:
                    self.next_fetch_offset = item.offset + 1
                    yield item
            else:
                yield from self._fill(batch, base, last, kept)
        self.next_fetch_offset = max(self.next_fetch_offset, last + 1)

    def _tolerant(
        self, batch: bytes, data: bytes, base: int, last: int, attrs: int, first_ts: int, max_ts: int, count: int
    ) -> Iterator[ConsumerRecord | Undecodable]:
        """`data`: the batch's records section, inflated (bounded, in `_v2`)."""
        log_append = bool(attrs & LOG_APPEND_TIME)
        sha = hashlib.sha256(batch).hexdigest()
        pos, end, prev = 0, len(data), base - 1
        broken = ""
        items: list[ConsumerRecord | Undecodable] = []
        nfo = self.next_fetch_offset
        for _ in range(max(count, 0)):
            if pos >= end:
                broken = f"{count} records declared, the batch holds fewer"
                break
            start = pos
            try:
                length, pos = varint(data, pos, end)
                if length < 0 or pos + length > end:
                    raise Corrupt(f"record length {length} runs past the batch")
                body, rec_end = pos, pos + length
                pos += 1  # attributes
                ts_delta, pos = varint(data, pos, rec_end)
                offset_delta, pos = varint(data, pos, rec_end)
            except Corrupt as exc:
                broken = f"record after offset {prev} cannot be delimited: {exc}"
                break
            offset = base + offset_delta
            if offset <= prev or offset > last:
                # Offsets no longer say which record is which: the batch as a whole.
                yield from self._placeholders(
                    batch, base, base, last, f"offset delta {offset_delta} is out of order or beyond the batch's last offset"
                )
                return
            prev = offset
            raw_record = data[start:rec_end]
            timestamp = max_ts if log_append else first_ts + ts_delta
            pos = rec_end
            if offset < nfo:
                continue
            p = body + 1  # past attributes, then the two deltas read above
            _, p = varint(data, p, rec_end)
            _, p = varint(data, p, rec_end)
            key: bytes | None = None
            value: bytes | None = None
            pairs: list[tuple[bytes, bytes | None]] | None = None
            try:
                key, p = read_bytes(data, p, rec_end, "key")
                value, p = read_bytes(data, p, rec_end, "value")
                n_headers, p = varint(data, p, rec_end)
                if n_headers < 0:
                    raise Corrupt(f"header count {n_headers}")
                pairs = []
                for _ in range(n_headers):
                    h_name, p = read_bytes(data, p, rec_end, "header name")
                    if h_name is None:
                        raise Corrupt("null header name")
                    h_value, p = read_bytes(data, p, rec_end, "header value")
                    pairs.append((h_name, h_value))
                if p != rec_end:
                    raise Corrupt(f"{rec_end - p} bytes after the record's headers")
            except Corrupt as exc:
                items.append(
                    Undecodable(
                        self.topic,
                        self.partition,
                        offset,
                        Reason.UNDECODABLE_RECORD,
                        clip(f"record does not parse: {exc}"),
                        raw_record,
                        base,
                        sha,
                        timestamp=timestamp,
                    )
                )
                continue
            try:
                headers = tuple((k.decode(), v) for k, v in pairs)
            except UnicodeDecodeError as exc:
                items.append(
                    Undecodable(
                        self.topic,
                        self.partition,
                        offset,
                        Reason.UNDECODABLE_HEADER,
                        clip(f"a header name is not UTF-8: {exc}"),
                        raw_record,
                        base,
                        sha,
                        key,
                        value,
                        tuple(pairs),
                        timestamp,
                    )
                )
                continue
            items.append(
                ConsumerRecord(
                    self.topic,
                    self.partition,
                    offset,
                    timestamp,
                    1 if log_append else 0,
                    key,
                    value,
                    None,
                    len(key) if key is not None else -1,
                    len(value) if value is not None else -1,
                    headers,
                )
            )
        yield from self._fill(batch, base, last, items, broken)

    def _legacy(self, batch: bytes, base: int, magic: int, next_base: int | None) -> Iterator[ConsumerRecord | Undecodable]:
        from aiokafka.record.legacy_records import LegacyRecordBatch

        try:
            legacy_wrapper_check(batch, magic, self.max_inflated_bytes)
        except OverLimit as exc:
            yield from self._placeholders(batch, base, base, base, over_limit(CODEC_NAMES[batch[17] & 0x07], exc))
            return
        try:
            recs = list(LegacyRecordBatch(batch, magic))
            offsets = [r.offset for r in recs]
            if offsets != sorted(set(offsets)):
                raise Corrupt("offsets out of order")
            if offsets and next_base is not None and offsets[-1] >= next_base:
                raise Corrupt("offsets run into the next batch")
        except Exception as exc:  # noqa: BLE001 - any failure of the client's decoder is data
            yield from self._placeholders(
                batch, base, base, base, f"legacy v{magic} message set does not decode: {type(exc).__name__}: {exc}"
            )
            return
        for r in recs:
            if r.offset >= self.next_fetch_offset:
                self.next_fetch_offset = r.offset + 1
                yield self._record(r)
