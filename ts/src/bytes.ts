/**
 * Byte helpers shared by every module: hex, UTF-8, SHA-256, big-endian
 * integers and the two base64 alphabets. One strict base64url decoder, so
 * that a signature or seal has exactly one spelling (docs/protocol.md 2).
 */
import { createHash } from "node:crypto";

const utf8Encoder = new TextEncoder();
const utf8Strict = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

export function utf8(text: string): Uint8Array {
  return utf8Encoder.encode(text);
}

/** Strict UTF-8 decoding: invalid bytes throw instead of becoming U+FFFD. */
export function fromUtf8(bytes: Uint8Array): string {
  return utf8Strict.decode(bytes);
}

export function toHex(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("hex");
}

/** Lowercase or uppercase hex of even length; anything else throws. */
export function fromHex(text: string): Uint8Array {
  if (text.length % 2 !== 0 || !/^[0-9a-fA-F]*$/.test(text)) {
    throw new Error(`not hex: ${JSON.stringify(text.slice(0, 80))}`);
  }
  return new Uint8Array(Buffer.from(text, "hex"));
}

export function concat(...parts: readonly Uint8Array[]): Uint8Array {
  let size = 0;
  for (const p of parts) size += p.length;
  const out = new Uint8Array(size);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

export function sha256(...parts: readonly Uint8Array[]): Uint8Array {
  const h = createHash("sha256");
  for (const p of parts) h.update(p);
  return new Uint8Array(h.digest());
}

export function sha256Hex(...parts: readonly Uint8Array[]): string {
  const h = createHash("sha256");
  for (const p of parts) h.update(p);
  return h.digest("hex");
}

export function u32be(n: number): Uint8Array {
  const out = new Uint8Array(4);
  new DataView(out.buffer).setUint32(0, n, false);
  return out;
}

export function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

export function b64urlEncode(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64url");
}

const B64URL = /^[A-Za-z0-9_-]*$/;

/**
 * Unpadded base64url with canonical trailing bits, else throws (busguard's
 * `b64url_decode_strict`): lenient decoders skip junk characters and ignore
 * stray bits, which would give one signature several spellings.
 */
export function b64urlDecodeStrict(text: string | Uint8Array, expectedLength?: number): Uint8Array {
  const raw = typeof text === "string" ? text : asciiOrNull(text);
  if (raw === null || !B64URL.test(raw) || raw.length % 4 === 1) {
    throw new Error("not unpadded base64url");
  }
  const data = new Uint8Array(Buffer.from(raw, "base64url"));
  if (b64urlEncode(data) !== raw) {
    throw new Error("non-canonical base64url (stray trailing bits)");
  }
  if (expectedLength !== undefined && data.length !== expectedLength) {
    throw new Error(`decodes to ${data.length} bytes, expected ${expectedLength}`);
  }
  return data;
}

/** Standard base64 with padding (RFC 4648 section 4), as busguard's JSON carries bytes. */
export function b64Encode(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64");
}

const B64STD = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** Strict padded standard base64 (Python's `b64decode(validate=True)` plus canonical bits). */
export function b64Decode(text: string): Uint8Array {
  if (!B64STD.test(text)) throw new Error("not padded standard base64");
  const data = new Uint8Array(Buffer.from(text, "base64"));
  if (b64Encode(data) !== text) throw new Error("non-canonical base64 (stray trailing bits)");
  return data;
}

/** The bytes as a string when every byte is ASCII, else null. */
export function asciiOrNull(bytes: Uint8Array): string | null {
  let out = "";
  for (const b of bytes) {
    if (b > 0x7f) return null;
    out += String.fromCharCode(b);
  }
  return out;
}
