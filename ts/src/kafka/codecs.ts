/**
 * Inflating a compressed record batch with a bound (busguard.runtime.inflate):
 * a batch whose records would inflate past `limit` bytes is refused unread
 * (a zstd bomb costs at most the bound, never the agent's memory).
 *
 * gzip and zstd stop at the bound as they inflate (zlib's `maxOutputLength`;
 * zstd through `node:zlib` where Node has it, 22.15 and later, else `fzstd`'s
 * streaming decoder, pure JavaScript); snappy (raw or xerial-framed, as the
 * Java client writes it) is checked against the lengths its blocks declare
 * before inflating; lz4 (frame format) is inflated by WebAssembly and then
 * checked, so its transient cost is the frame's own size at worst x255.
 */
import zlib from "node:zlib";
import { Decompress as ZstdStream } from "fzstd";
import { lz4Compress, lz4Decompress, snappyDecompress } from "@platformatic/wasm-utils";

export class CodecError extends Error {}

export const CODEC_NAMES: Readonly<Record<number, string>> = { 0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd" };

type ZstdSync = (data: Uint8Array, opts: { maxOutputLength: number }) => Uint8Array;
const nativeZstd: ZstdSync | undefined = (zlib as unknown as { zstdDecompressSync?: ZstdSync }).zstdDecompressSync;

function over(codec: string, limit: number): CodecError {
  return new CodecError(`${codec} records inflate to more than ${limit} bytes (batch.max_inflated_bytes); refused unread`);
}

export function inflate(codec: number, data: Uint8Array, limit: number): Uint8Array {
  switch (codec) {
    case 0:
      return data;
    case 1:
      try {
        return zlib.gunzipSync(data, { maxOutputLength: limit });
      } catch (exc) {
        if (exc instanceof RangeError) throw over("gzip", limit);
        throw exc;
      }
    case 2:
      return snappy(data, limit);
    case 3: {
      const out = lz4Decompress(Buffer.from(data.buffer, data.byteOffset, data.byteLength));
      if (out.length > limit) throw over("lz4", limit);
      return out;
    }
    case 4:
      return zstd(data, limit);
    default:
      throw new CodecError(`compression codec ${codec} is not one of ${Object.entries(CODEC_NAMES).map(([k, v]) => `${k} (${v})`).join(", ")}`);
  }
}

function zstd(data: Uint8Array, limit: number): Uint8Array {
  if (nativeZstd !== undefined) {
    try {
      return nativeZstd(data, { maxOutputLength: limit });
    } catch (exc) {
      if (exc instanceof RangeError) throw over("zstd", limit);
      throw exc;
    }
  }
  const chunks: Uint8Array[] = [];
  let total = 0;
  const stream = new ZstdStream((chunk) => {
    total += chunk.length;
    if (total > limit) throw over("zstd", limit);
    chunks.push(chunk);
  });
  stream.push(data, true);
  const out = new Uint8Array(total);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

const XERIAL = Uint8Array.of(0x82, 0x53, 0x4e, 0x41, 0x50, 0x50, 0x59, 0x00);

function rawLength(block: Uint8Array): number {
  let n = 0;
  for (let i = 0, shift = 0; i < 5 && i < block.length; i++, shift += 7) {
    const b = block[i] as number;
    n += (b & 0x7f) * 2 ** shift;
    if ((b & 0x80) === 0) return n;
  }
  throw new CodecError("snappy block length preamble does not parse");
}

function snappy(data: Uint8Array, limit: number): Uint8Array {
  const framed = data.length >= 16 && XERIAL.every((b, i) => data[i] === b);
  const blocks: Uint8Array[] = [];
  if (!framed) blocks.push(data);
  else {
    const v = new DataView(data.buffer, data.byteOffset, data.byteLength);
    for (let pos = 16; pos < data.length; ) {
      if (pos + 4 > data.length) throw new CodecError("xerial snappy chunk length truncated");
      const n = v.getInt32(pos);
      if (n < 0 || pos + 4 + n > data.length) throw new CodecError(`xerial snappy chunk length ${n} runs past the batch`);
      blocks.push(data.subarray(pos + 4, pos + 4 + n));
      pos += 4 + n;
    }
  }
  let total = 0;
  for (const b of blocks) total += rawLength(b);
  if (total > limit) throw over("snappy", limit);
  const out = new Uint8Array(total);
  let at = 0;
  for (const b of blocks) {
    const chunk = snappyDecompress(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
    if (at + chunk.length > total) throw new CodecError("snappy block inflates past its declared length");
    out.set(chunk, at);
    at += chunk.length;
  }
  return out.subarray(0, at);
}

/** For tests and the producer's own use: lz4 frame compression. */
export function lz4(data: Uint8Array): Uint8Array {
  return lz4Compress(Buffer.from(data.buffer, data.byteOffset, data.byteLength));
}
