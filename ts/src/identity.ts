/**
 * Agent ids, Ed25519 multikeys and INK's canonical principal
 * (docs/protocol.md 5.1-5.2; busguard.protocol.identity).
 *
 * Every per-sender control keys on the canonical principal, never the
 * spelling: `tulpa:zKEY` and `ink:zKEY` are one actor, and the mapping is
 * injective otherwise (`key:`/`raw:` ids are escaped), so no id can imitate
 * another's principal.
 */

export const MAX_AGENT_ID_UTF16_UNITS = 512;
const MULTIKEY_CHARS = 48;
const ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";
const ALPHABET_INDEX = new Map<string, number>([...ALPHABET].map((c, i) => [c, i]));

function base58Encode(bytes: Uint8Array): string {
  let n = 0n;
  for (const b of bytes) n = (n << 8n) | BigInt(b);
  let out = "";
  while (n > 0n) {
    out = ALPHABET.charAt(Number(n % 58n)) + out;
    n /= 58n;
  }
  for (const b of bytes) {
    if (b !== 0) break;
    out = "1" + out;
  }
  return out;
}

function base58Decode(text: string): Uint8Array | null {
  let n = 0n;
  for (const c of text) {
    const v = ALPHABET_INDEX.get(c);
    if (v === undefined) return null;
    n = n * 58n + BigInt(v);
  }
  const body: number[] = [];
  while (n > 0n) {
    body.unshift(Number(n & 0xffn));
    n >>= 8n;
  }
  let zeros = 0;
  for (const c of text) {
    if (c !== "1") break;
    zeros++;
  }
  return new Uint8Array([...new Array<number>(zeros).fill(0), ...body]);
}

/** `z` + base58btc(0xed 0x01 || key): the only spelling a principal accepts. */
export function multikeyEncode(publicKey: Uint8Array): string {
  if (publicKey.length !== 32) throw new Error(`Ed25519 public key must be 32 bytes, got ${publicKey.length}`);
  const raw = new Uint8Array(34);
  raw[0] = 0xed;
  raw[1] = 0x01;
  raw.set(publicKey, 2);
  return "z" + base58Encode(raw);
}

function keyFromBody(body: string): Uint8Array | null {
  if (body.length !== MULTIKEY_CHARS || !body.startsWith("z")) return null;
  const encoded = body.slice(1);
  const raw = base58Decode(encoded);
  if (raw === null || base58Encode(raw) !== encoded) return null; // canonical only
  if (raw.length !== 34 || raw[0] !== 0xed || raw[1] !== 0x01) return null;
  return raw.slice(2);
}

/** The 32-byte key of a canonical Ed25519 multikey; throws otherwise. */
export function multikeyDecode(text: string): Uint8Array {
  const key = text.length <= 128 ? keyFromBody(text) : null;
  if (key === null) {
    throw new Error(
      `not a canonical Ed25519 multikey (expected 'z' + base58btc of 0xed01 || 32-byte key): ${JSON.stringify(text.slice(0, 128))}`,
    );
  }
  return key;
}

export function agentIdForKey(publicKey: Uint8Array, prefix: "tulpa:" | "ink:" = "tulpa:"): string {
  return prefix + multikeyEncode(publicKey);
}

/** The key a well-formed `tulpa:`/`ink:` id carries, else null. */
export function publicKeyFromAgentId(agentId: string): Uint8Array | null {
  if (agentId.startsWith("tulpa:")) return keyFromBody(agentId.slice(6));
  if (agentId.startsWith("ink:")) return keyFromBody(agentId.slice(4));
  return null;
}

/** INK `canonicalAgentPrincipal`; throws for an empty id or one over 512 UTF-16 code units (`string.length`). */
export function canonicalPrincipal(agentId: string): string {
  if (agentId.length === 0) throw new Error("agentId must be a non-empty string");
  if (agentId.length > MAX_AGENT_ID_UTF16_UNITS) {
    throw new Error(`agentId is ${agentId.length} UTF-16 code units long; at most ${MAX_AGENT_ID_UTF16_UNITS} are allowed`);
  }
  if (agentId.startsWith("key:") || agentId.startsWith("raw:")) return "raw:" + agentId;
  let body: string;
  if (agentId.startsWith("tulpa:")) body = agentId.slice(6);
  else if (agentId.startsWith("ink:")) body = agentId.slice(4);
  else return agentId;
  return keyFromBody(body) !== null ? "key:" + body : "raw:" + agentId;
}
