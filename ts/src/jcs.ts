/**
 * RFC 8785 JSON Canonicalization Scheme, through `canonicalize` (the
 * implementation by RFC 8785's co-author): UTF-16 code-unit key order,
 * ECMAScript number serialisation. busguard's `jcs-sha256` canonicalizer
 * (docs/verification-registry.md) hashes exactly these bytes.
 */
import canonicalizeJson from "canonicalize";
import { utf8 } from "./bytes.js";

/** The canonical UTF-8 bytes of a JSON text; throws for text that is not JSON or has no canonical form. */
export function canonicalize(text: string): Uint8Array {
  const parsed: unknown = JSON.parse(text);
  const out = canonicalizeJson(parsed);
  if (out === undefined) throw new Error("the value has no JSON form");
  return utf8(out);
}
