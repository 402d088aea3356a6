/**
 * Fetched partition bytes to records, one item for every offset
 * (busguard.runtime.decoding, the reader busguard's own processes use), so
 * that a record or batch no client can decode is one `Undecodable` the
 * admitting consumer refuses as `undecodable`, and never an exception that
 * stalls the agent on it. Pure: bytes in, items out.
 *
 * Per record batch (Kafka message format v2, KIP-98): the CRC-32C is
 * checked (a mismatch: the whole batch is `undecodable_batch`); a compressed
 * batch is inflated with a bound (`maxInflatedBytes`, busguard's
 * `batch.max_inflated_bytes` default, 16 MiB; past it: `undecodable_batch`,
 * unread); then each record is walked by its length prefix: a header name
 * that is not UTF-8 is `undecodable_header`, a record whose fields do not
 * parse is `undecodable_record`, and every offset that cannot be attributed
 * (unknown codec, corrupt frame, broken length prefixes, offsets out of
 * order) is ONE `undecodable_batch` for the span `[offset, lastOffset]`,
 * however many offsets the header claims. Control batches (transaction
 * markers) are skipped; the position moves past them.
 *
 * read_committed (`aborted` given: the Fetch response's aborted
 * transactions), as Kafka's own consumers do it (KIP-98) and
 * busguard.runtime.decoding's `_aborted_batch`: a producer is aborting from
 * the first offset the broker lists for it until its ABORT marker, and its
 * transactional batches in that range are skipped, no item, the position
 * moving past them, before anything else is read from them. Without this, a
 * reader of a transactional guard's outputs would be handed the outputs of
 * transactions that never happened.
 *
 * A legacy (v0/v1) message set is not decoded (Python decodes it, and then
 * refuses each of its records as `unattested`: they cannot carry headers):
 * each top-level message of it (a compressed wrapper counts as one, its
 * offset being its last inner message's) is ONE `undecodable_batch` for the
 * offsets from the first not yet decided up to that message's offset, so
 * every offset still gets exactly one outcome. Neither Kafka 4.x nor tansu
 * stores such sets (docs/sdk.md).
 */
import type { Header } from "../envelope.js";
import type { Fetched, Undecodable } from "../consumer.js";
import { CodecError, inflate } from "./codecs.js";
import { crc32c } from "./crc32c.js";

export const DEFAULT_MAX_INFLATED_BYTES = 16 * 1024 * 1024;
const HEADER_BYTES = 61; // baseOffset .. recordCount
const LOG_OVERHEAD = 12; // baseOffset int64 + batchLength int32
const CONTROL = 0x20;
const TRANSACTIONAL = 0x10;
const MAX_DETAIL = 512;
const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

/** One entry of a Fetch response's aborted_transactions (read_committed). */
export interface AbortedTransaction {
  readonly producerId: bigint;
  /** the offset of the producer's first batch in the aborted transaction */
  readonly firstOffset: bigint;
}

/** What one partition's fetched bytes became: items in offset order, and the next offset to fetch. */
export interface Decoded {
  readonly items: Array<Fetched | Undecodable>;
  /** the offset after everything decided (or skipped, as a control batch); `fetchOffset` when nothing complete was read */
  readonly next: bigint;
}

class Corrupt extends Error {}

function varint(buf: Uint8Array, pos: number, end: number): [number, number] {
  let shift = 0;
  let value = 0n;
  for (let i = 0; i < 10; i++) {
    if (pos >= end) throw new Corrupt("truncated varint");
    const b = buf[pos++] as number;
    value |= BigInt(b & 0x7f) << BigInt(shift);
    if ((b & 0x80) === 0) {
      const n = (value >> 1n) ^ -(value & 1n);
      if (n > BigInt(Number.MAX_SAFE_INTEGER) || n < BigInt(Number.MIN_SAFE_INTEGER)) throw new Corrupt(`varint ${n} out of range`);
      return [Number(n), pos];
    }
    shift += 7;
  }
  throw new Corrupt("varint longer than 10 bytes");
}

function bytesField(buf: Uint8Array, pos: number, end: number, what: string): [Uint8Array | null, number] {
  const [n, p] = varint(buf, pos, end);
  if (n < 0) return [null, p];
  if (p + n > end) throw new Corrupt(`${what} length ${n} runs past the record`);
  return [buf.subarray(p, p + n), p + n];
}

/**
 * Decode the record batches of one partition's fetch response, from
 * `fetchOffset` on (records before it, in a batch that starts earlier, are
 * skipped). A partial batch at the end (the broker cut the response) is left
 * for the next fetch. `floor`: a refetch from before the position
 * (stuck.ts): nothing below it is kept (it was decided already), and the
 * batches that end below it are passed over without counting as the fetch's
 * first batch. `aborted`: read as read_committed with the response's
 * aborted transactions (module doc); undefined reads every batch
 * (read_uncommitted).
 */
export function decodePartition(
  topic: string,
  partition: number,
  records: Uint8Array,
  fetchOffset: bigint,
  maxInflatedBytes = DEFAULT_MAX_INFLATED_BYTES,
  floor?: bigint,
  aborted?: readonly AbortedTransaction[],
): Decoded {
  const from = floor !== undefined && floor > fetchOffset ? floor : fetchOffset;
  const txns = aborted === undefined ? undefined : new AbortedTransactions(aborted);
  return new PartitionDecoder(topic, partition, from, maxInflatedBytes, from !== fetchOffset, txns).decode(records);
}

/** read_committed's state over one fetch: which producers are aborting at the batch being read. */
class AbortedTransactions {
  readonly #pending: AbortedTransaction[];
  #at = 0;
  readonly #aborting = new Set<bigint>();

  constructor(aborted: readonly AbortedTransaction[]) {
    this.#pending = [...aborted].sort((a, b) => (a.firstOffset < b.firstOffset ? -1 : a.firstOffset > b.firstOffset ? 1 : 0));
  }

  /**
   * Whether the batch at `base` (its bytes, attributes and producer id) is
   * an aborted transaction's and not for a read_committed reader. A control
   * batch never is (the decoder judges it as it judges every control batch);
   * an ABORT marker ends its producer's aborting.
   */
  skips(batch: Uint8Array, base: bigint, attributes: number, producerId: bigint): boolean {
    for (let a = this.#pending[this.#at]; a !== undefined && a.firstOffset <= base; a = this.#pending[++this.#at]) this.#aborting.add(a.producerId);
    if ((attributes & CONTROL) !== 0) {
      if (isAbortMarker(batch)) this.#aborting.delete(producerId);
      return false;
    }
    return (attributes & TRANSACTIONAL) !== 0 && this.#aborting.has(producerId);
  }
}

/**
 * A control batch's first record's key is (version int16, type int16, 0 =
 * ABORT); control batches are never compressed. Bytes that do not parse are
 * no abort marker (busguard.runtime.batchbytes.is_abort_marker).
 */
export function isAbortMarker(batch: Uint8Array): boolean {
  try {
    let pos = HEADER_BYTES;
    pos = skipVarint(batch, pos); // record length
    pos = skipVarint(batch, pos + 1); // attributes, then the timestamp delta
    pos = skipVarint(batch, pos); // offset delta
    const [key] = bytesField(batch, pos, batch.length, "control key");
    return key !== null && key.length >= 4 && ((key[2] as number) << 8) + (key[3] as number) === 0;
  } catch (exc) {
    if (exc instanceof Corrupt) return false;
    throw exc;
  }
}

/** Past a varint of at most 10 bytes, whatever its value. */
function skipVarint(buf: Uint8Array, pos: number): number {
  for (let i = 0; i < 10; i++) {
    if (pos >= buf.length) throw new Corrupt("truncated varint");
    if (((buf[pos++] as number) & 0x80) === 0) return pos;
  }
  throw new Corrupt("varint longer than 10 bytes");
}

class PartitionDecoder {
  readonly items: Array<Fetched | Undecodable> = [];

  constructor(
    readonly topic: string,
    readonly partition: number,
    public next: bigint,
    readonly maxInflated: number,
    readonly floored: boolean,
    readonly aborted: AbortedTransactions | undefined,
  ) {}

  /** One `undecodable_batch` for the offsets of [lo, hi] not yet decided, however many. */
  span(lo: bigint, hi: bigint, detail: string, into: Array<Fetched | Undecodable> = this.items): void {
    const first = lo > this.next ? lo : this.next;
    if (first > hi) return;
    this.next = hi + 1n;
    into.push({ undecodable: "undecodable_batch", topic: this.topic, partition: this.partition, offset: first, ...(hi > first ? { lastOffset: hi } : {}), detail: detail.slice(0, MAX_DETAIL) });
  }

  decode(raw: Uint8Array): Decoded {
    const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
    let pos = 0;
    let first = true;
    while (raw.length - pos >= LOG_OVERHEAD) {
      const start = this.next;
      const base = view.getBigInt64(pos);
      const length = view.getInt32(pos + 8);
      const end = pos + LOG_OVERHEAD + length;
      if (length >= 0 && end > raw.length) break; // a partial batch at the end: fetched again next time
      const magic = raw.length - pos > 16 ? (raw[pos + 16] as number) : 2;
      const legacy = length >= 0 && magic < 2;
      const headerLast = legacy || raw.length - pos < 27 ? base : base + BigInt(Math.max(view.getInt32(pos + 23), 0));
      if (length < HEADER_BYTES - LOG_OVERHEAD && !legacy) {
        const why = `batch length ${length} cannot frame a record batch`;
        this.span(base, headerLast, why);
        if (first && this.next === start) this.span(start, start, why);
        break; // nothing after it can be delimited
      }
      if (this.floored && first && headerLast < this.next) {
        pos = end; // below the refetch's floor: decided before
        continue;
      }
      const batch = raw.subarray(pos, end);
      const nextBase = end + 8 <= raw.length ? view.getBigInt64(end) : undefined;
      if (magic === 2) this.v2(batch, base, nextBase);
      else if (legacy) this.span(this.next, base, `message format v${magic}: this reader reads v2 record batches only (Kafka 0.11 and later write nothing else)`);
      else this.span(base, base, `magic byte ${magic} is not a Kafka record format`);
      if (first && this.next === start) this.span(start, start, "the batch header does not cover the fetched offset");
      first = false;
      pos = end;
    }
    return { items: this.items, next: this.next };
  }

  v2(batch: Uint8Array, base: bigint, nextBase: bigint | undefined): void {
    const bv = new DataView(batch.buffer, batch.byteOffset, batch.byteLength);
    const lastDelta = bv.getInt32(23);
    const attributes = bv.getInt16(21);
    const count = bv.getInt32(57);
    let last = base + BigInt(Math.max(lastDelta, 0));
    if (nextBase !== undefined && base < nextBase && nextBase <= last) last = nextBase - 1n;
    if (last < this.next) return; // already decided (the broker returns whole batches)
    const producerId = bv.getBigInt64(43);
    if (this.aborted !== undefined && producerId >= 0n && this.aborted.skips(batch, base, attributes, producerId)) {
      this.next = last + 1n; // an aborted transaction's records: not for a read_committed reader
      return;
    }
    if (lastDelta < 0 && count > 0) {
      this.span(base, base, `lastOffsetDelta ${lastDelta} is negative`);
      return;
    }
    if ((attributes & CONTROL) !== 0) {
      if ((attributes & TRANSACTIONAL) !== 0) this.next = last + 1n; // a transaction marker, not a record
      else this.span(base, last, "control batch outside a transaction");
      return;
    }
    const crc = bv.getUint32(17);
    const actual = crc32c(batch.subarray(21));
    if (crc !== actual) {
      this.span(base, last, `CRC-32C mismatch: ${crc.toString(16)} in the header, ${actual.toString(16)} computed`);
      return;
    }
    let body: Uint8Array;
    try {
      body = inflate(attributes & 0x07, batch.subarray(HEADER_BYTES), this.maxInflated);
    } catch (exc) {
      this.span(base, last, exc instanceof CodecError ? exc.message : `corrupt compressed records: ${(exc as Error).message}`);
      return;
    }
    this.records(base, last, count, body);
  }

  /** The records of one inflated batch, then every offset of [next, last] no record holds as a span. */
  records(base: bigint, last: bigint, count: number, body: Uint8Array): void {
    const found: Array<Fetched | Undecodable> = [];
    let pos = 0;
    let prev = base - 1n;
    let broken = "";
    for (let i = 0; i < Math.max(count, 0); i++) {
      if (pos >= body.length) {
        broken = `${count} records declared, the batch holds fewer`;
        break;
      }
      let len: number;
      let p: number;
      let delta: number;
      try {
        [len, p] = varint(body, pos, body.length);
        if (len < 0 || p + len > body.length) throw new Corrupt(`record length ${len} runs past the batch`);
        pos = p + len;
        p += 1; // attributes
        [, p] = varint(body, p, pos); // timestamp delta
        [delta, p] = varint(body, p, pos);
      } catch (exc) {
        broken = `record after offset ${prev} cannot be delimited: ${(exc as Error).message}`;
        break;
      }
      const offset = base + BigInt(delta);
      if (offset <= prev || offset > last) {
        this.span(base, last, `offset delta ${delta} is out of order or beyond the batch's last offset`); // the batch as a whole
        return;
      }
      prev = offset;
      if (offset < this.next) continue;
      found.push(readRecord(this.topic, this.partition, offset, body, p, pos));
    }
    for (const item of found) {
      this.span(this.next, item.offset - 1n, noRecord(this.next, item.offset - 1n));
      this.items.push(item);
      this.next = item.offset + 1n;
    }
    this.span(this.next, last, broken !== "" ? broken : noRecord(this.next, last));
  }
}

function noRecord(lo: bigint, hi: bigint): string {
  return `the batch header claims ${lo === hi ? `offset ${lo}` : `offsets ${lo}-${hi}`} but the batch holds no record there`;
}

function readRecord(topic: string, partition: number, offset: bigint, body: Uint8Array, pos: number, end: number): Fetched | Undecodable {
  let p = pos;
  let value: Uint8Array | null;
  const headers: Header[] = [];
  try {
    [, p] = bytesField(body, p, end, "key");
    [value, p] = bytesField(body, p, end, "value");
    let n: number;
    [n, p] = varint(body, p, end);
    if (n < 0 || n > end - p) throw new Corrupt(`header count ${n}`);
    for (let h = 0; h < n; h++) {
      let name: Uint8Array | null;
      let v: Uint8Array | null;
      [name, p] = bytesField(body, p, end, "header name");
      [v, p] = bytesField(body, p, end, "header value");
      if (name === null) throw new Corrupt("null header name");
      let text: string;
      try {
        text = strictUtf8.decode(name);
      } catch {
        return { undecodable: "undecodable_header", topic, partition, offset, detail: `header ${h}'s name is not UTF-8` };
      }
      headers.push([text, v === null ? null : v.slice()]);
    }
    if (p !== end) throw new Corrupt(`${end - p} bytes after the headers`);
  } catch (exc) {
    return { undecodable: "undecodable_record", topic, partition, offset, detail: (exc as Error).message.slice(0, MAX_DETAIL) };
  }
  return { topic, partition, offset, value: value === null ? null : value.slice(), headers };
}
