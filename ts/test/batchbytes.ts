/**
 * Kafka v2 record batches built byte by byte (KIP-98), for the decoder's
 * and the consumer's tests: one builder, so that a batch means the same
 * bytes in every test that makes one.
 */
import { crc32c } from "../src/kafka/crc32c.js";

/** Zigzag varint, as a record's fields use. */
export function varint(n: number): number[] {
  let z = n >= 0 ? n * 2 : -n * 2 - 1;
  const out: number[] = [];
  while (z >= 0x80) {
    out.push((z & 0x7f) | 0x80);
    z = Math.floor(z / 128);
  }
  out.push(z);
  return out;
}

function field(b: Uint8Array | null): Buffer {
  return b === null ? Buffer.from(varint(-1)) : Buffer.concat([Buffer.from(varint(b.length)), b]);
}

export interface BatchOptions {
  /** The codec in the low 3 bits, 0x10 transactional, 0x20 a control batch. */
  attributes?: number;
  producerId?: bigint;
  producerEpoch?: number;
  /** Offsets the header claims (lastOffsetDelta + 1); one per record by default. */
  claims?: number;
  /** Applied to the records section: a codec's compressor. */
  compress?: (b: Uint8Array) => Uint8Array;
}

/** A batch at `base` with one record per (key, value), offset deltas 0.., no headers, a valid CRC. */
export function recordBatch(base: bigint, recs: ReadonlyArray<readonly [Uint8Array | null, Uint8Array]>, o: BatchOptions = {}): Buffer {
  const body = Buffer.concat(
    recs.map(([k, v], i) => {
      const r = Buffer.concat([Buffer.from([0, ...varint(0), ...varint(i)]), field(k), field(v), Buffer.from(varint(0))]);
      return Buffer.concat([Buffer.from(varint(r.length)), r]);
    }),
  );
  const records = o.compress === undefined ? body : o.compress(body);
  const head = Buffer.alloc(61);
  head.writeBigInt64BE(base, 0);
  head.writeInt32BE(49 + records.length, 8);
  head.writeInt8(2, 16);
  head.writeInt16BE(o.attributes ?? 0, 21);
  head.writeInt32BE((o.claims ?? recs.length) - 1, 23);
  head.writeBigInt64BE(o.producerId ?? -1n, 43);
  head.writeInt16BE(o.producerEpoch ?? -1, 51);
  head.writeInt32BE(-1, 53);
  head.writeInt32BE(recs.length, 57);
  const all = Buffer.concat([head, records]);
  all.writeUInt32BE(crc32c(all.subarray(21)), 17);
  return all;
}
