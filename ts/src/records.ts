/**
 * Identities of busguard's records (docs/protocol.md 4.4, 12.3;
 * busguard.protocol.records): the decision id, the headers encoding (also
 * the annotation encoding of 12.1) and a record's `record_sha256`.
 */
import { concat, sha256Hex, u32be, utf8 } from "./bytes.js";
import type { Header } from "./envelope.js";

const DECISION_ID_CONTEXT = utf8("busguard/decision/v1\x00");
const RECORD_CONTEXT = utf8("busguard/record/v1\x00");

/** Where a record was read: the identity of an input record. */
export interface Coordinates {
  readonly topic: string;
  readonly partition: bigint;
  readonly offset: bigint;
}

/** First 16 hex of SHA-256(context || namespace 0x00 topic 0x00 partition), then the offset as 16 hex digits. */
export function decisionId(namespace: string, topic: string, partition: number | bigint, offset: number | bigint): string {
  const prefix = sha256Hex(DECISION_ID_CONTEXT, utf8(`${namespace}\x00${topic}\x00${BigInt(partition)}`)).slice(0, 16);
  return prefix + BigInt(offset).toString(16).padStart(16, "0");
}

function fieldBytes(data: Uint8Array | null): Uint8Array {
  return data === null ? new Uint8Array([0]) : concat(new Uint8Array([1]), u32be(data.length), data);
}

/** u32 count, then per header u32 name length, UTF-8 name, and its value as a field (0x00 null, else 0x01 u32 length bytes). */
export function headersEncoding(headers: readonly Header[]): Uint8Array {
  const parts: Uint8Array[] = [u32be(headers.length)];
  for (const [name, value] of headers) {
    const raw = utf8(name);
    parts.push(u32be(raw.length), raw, fieldBytes(value));
  }
  return concat(...parts);
}

/** The identity of an input record's bytes (key, value and headers). */
export function recordSha256(key: Uint8Array | null, value: Uint8Array | null, headers: readonly Header[]): string {
  return sha256Hex(RECORD_CONTEXT, fieldBytes(key), fieldBytes(value), headersEncoding(headers));
}
