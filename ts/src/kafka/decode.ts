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
 * order, a legacy v0/v1 message set) is ONE `undecodable_batch` for the span
 * `[offset, lastOffset]`, however many offsets the header claims. Control
 * batches (transaction markers) are skipped; the position moves past them.
 */
import type { Header } from "../envelope.js";
import type { Fetched, Undecodable } from "../consumer.js";
import { CodecError, inflate } from "./codecs.js";
import { crc32c } from "./crc32c.js";

export const DEFAULT_MAX_INFLATED_BYTES = 16 * 1024 * 1024;
const HEADER_BYTES = 61; // baseOffset .. recordCount
const LOG_OVERHEAD = 12; // baseOffset int64 + batchLength int32
const CONTROL = 0x20;
const MAX_DETAIL = 512;
const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

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

function span(topic: string, partition: number, lo: bigint, hi: bigint, detail: string): Undecodable {
  return {
    undecodable: "undecodable_batch",
    topic,
    partition,
    offset: lo,
    ...(hi > lo ? { lastOffset: hi } : {}),
    detail: detail.slice(0, MAX_DETAIL),
  };
}

/**
 * Decode the record batches of one partition's fetch response, from
 * `fetchOffset` on (records before it, in a batch that starts earlier, are
 * skipped). A partial batch at the end (the broker cut the response) is left
 * for the next fetch.
 */
export function decodePartition(
  topic: string,
  partition: number,
  records: Uint8Array,
  fetchOffset: bigint,
  maxInflatedBytes = DEFAULT_MAX_INFLATED_BYTES,
): Decoded {
  const items: Array<Fetched | Undecodable> = [];
  const view = new DataView(records.buffer, records.byteOffset, records.byteLength);
  let pos = 0;
  let next = fetchOffset;
  while (records.length - pos >= LOG_OVERHEAD) {
    const base = view.getBigInt64(pos);
    const length = view.getInt32(pos + 8);
    if (length < 0 || pos + LOG_OVERHEAD + length > records.length) {
      if (length >= HEADER_BYTES - LOG_OVERHEAD) break; // cut by the broker's size limit: fetched again from `next`
      items.push(span(topic, partition, base < next ? next : base, base < next ? next : base, `batch length ${length} is not a record batch`));
      next = (base < next ? next : base) + 1n;
      break;
    }
    const batch = records.subarray(pos, pos + LOG_OVERHEAD + length);
    pos += LOG_OVERHEAD + length;
    const magic = length >= 5 ? (batch[16] as number) : -1;
    if (magic !== 2 || length < HEADER_BYTES - LOG_OVERHEAD) {
      const lo = base < next ? next : base;
      items.push(span(topic, partition, lo, lo, `message format v${magic} (legacy or truncated) at offset ${base}; this reader reads v2 batches only`));
      next = lo + 1n;
      continue;
    }
    const bv = new DataView(batch.buffer, batch.byteOffset, batch.byteLength);
    const lastDelta = bv.getInt32(23);
    const last = base + BigInt(Math.max(lastDelta, 0));
    if (last < next) continue; // wholly before the position: already decided
    const lo = base < next ? next : base;
    const crc = bv.getUint32(17);
    const actual = crc32c(batch.subarray(21));
    if (crc !== actual) {
      items.push(span(topic, partition, lo, last, `CRC-32C ${crc.toString(16)} in the header, ${actual.toString(16)} computed`));
      next = last + 1n;
      continue;
    }
    if (lastDelta < 0) {
      items.push(span(topic, partition, lo, lo, `lastOffsetDelta ${lastDelta} is negative`));
      next = lo + 1n;
      continue;
    }
    const attributes = bv.getInt16(21);
    if ((attributes & CONTROL) !== 0) {
      next = last + 1n; // a transaction marker: no record for an agent
      continue;
    }
    const count = bv.getInt32(57);
    let body: Uint8Array;
    try {
      body = inflate(attributes & 0x07, batch.subarray(HEADER_BYTES), maxInflatedBytes);
    } catch (exc) {
      const why = exc instanceof CodecError ? exc.message : `corrupt compressed records: ${(exc as Error).message}`;
      items.push(span(topic, partition, lo, last, why));
      next = last + 1n;
      continue;
    }
    next = walkRecords(topic, partition, base, lo, last, count, body, items);
  }
  return { items, next };
}

/** The records of one inflated batch; returns the offset after the batch. */
function walkRecords(
  topic: string,
  partition: number,
  base: bigint,
  lo: bigint,
  last: bigint,
  count: number,
  body: Uint8Array,
  items: Array<Fetched | Undecodable>,
): bigint {
  let pos = 0;
  let expect = lo; // the first offset not yet given an item
  for (let i = 0; i < count && pos < body.length; i++) {
    let len: number;
    let start: number;
    try {
      [len, start] = varint(body, pos, body.length);
    } catch {
      break; // the rest cannot be attributed
    }
    if (len < 0 || start + len > body.length) break;
    const end = start + len;
    pos = end;
    let delta: number;
    let p: number;
    try {
      p = start + 1; // attributes
      [, p] = varint(body, p, end); // timestamp delta
      [delta, p] = varint(body, p, end);
    } catch {
      break;
    }
    const offset = base + BigInt(delta);
    if (delta < 0 || offset > last || offset < expect) {
      if (offset < lo && delta >= 0) continue; // before the position
      break;
    }
    if (offset > expect) items.push(span(topic, partition, expect, offset - 1n, noRecord(expect, offset - 1n)));
    expect = offset + 1n;
    items.push(readRecord(topic, partition, offset, body, p, end));
  }
  if (expect <= last) {
    items.push(span(topic, partition, expect, last, pos >= body.length ? noRecord(expect, last) : "record length prefixes or offsets do not parse past here"));
  }
  return last + 1n;
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
