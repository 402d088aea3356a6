/**
 * Reads JSON lines `{"what": "receipt" | "attestation" | "head" | "timestamp" | "principal", "b64": ...}`
 * on stdin and prints, per line, what this package's strict decoder makes of
 * the bytes: `ok` or the receipt's reason code (`malformed` for an
 * attestation or head it refuses); for a timestamp its epoch ms, for an
 * agent id its canonical principal, or `reject`. `{"what": "encode",
 * "fields": {...}}` prints the SDK form of that receipt instead (base64). tests/unit/test_ts_decode_differential.py
 * feeds it mutated bytes and compares with busguard's decoders.
 * `{"what": "handoff", "b64", "handoff_id", "session", "registry", "now"}` prints what `verifyForwarded`
 * makes of a session-handoff value with the keys of that registry at `now`: each component's
 * `[name, sha256, operational, against]` (JSON) or `<code>@<where>` (tests/unit/test_ts_handoff_differential.py).
 */
import { readFileSync } from "node:fs";
import {
  AttestationError,
  ReceiptError,
  TreeHeadError,
  b64Decode,
  b64Encode,
  canonicalPrincipal,
  decodeAttestation,
  decodeHead,
  decodeReceipt,
  encodeReceipt,
  fromUtf8,
  KeyRegistry,
  MessageError,
  parseTimestamp,
  registryKeys,
  verifyForwarded,
  type Receipt,
  type RegistryFile,
  type SignerKeys,
} from "../src/index.js";

interface HandoffItem {
  readonly b64: string;
  readonly handoff_id: string;
  readonly session: string;
  readonly registry: RegistryFile;
  readonly now: string;
}
const keyCache = new Map<string, SignerKeys>();

function handoff(item: HandoffItem): string {
  const cacheKey = JSON.stringify([item.registry, item.now]);
  let keys = keyCache.get(cacheKey);
  if (keys === undefined) {
    const now = parseTimestamp(item.now);
    keys = registryKeys(KeyRegistry.fromEntries(item.registry), () => now);
    keyCache.set(cacheKey, keys);
  }
  try {
    const report = verifyForwarded(b64Decode(item.b64), { handoffId: item.handoff_id, session: item.session, keys });
    return JSON.stringify([report.scopePresent, report.checks.map((c) => [c.name, c.sha256, c.operational, c.againstScope])]);
  } catch (exc) {
    if (exc instanceof MessageError) return `${exc.code}@${exc.where}`;
    throw exc;
  }
}

function judge(what: string, raw: Uint8Array): string {
  if (what === "timestamp" || what === "principal") {
    try {
      const text = fromUtf8(raw);
      return what === "timestamp" ? String(parseTimestamp(text)) : canonicalPrincipal(text);
    } catch {
      return "reject";
    }
  }
  try {
    if (what === "receipt") decodeReceipt(raw);
    else if (what === "attestation") decodeAttestation(raw);
    else decodeHead(raw);
    return "ok";
  } catch (exc) {
    if (exc instanceof ReceiptError) return exc.reason;
    if (exc instanceof AttestationError || exc instanceof TreeHeadError) return "malformed";
    throw exc;
  }
}

/** The SDK form of a receipt given as JSON fields (a `sequence` as a decimal string), standard base64. */
function encode(fields: Record<string, string>): string {
  const { sequence, ...rest } = fields;
  const receipt = { ...rest, v: 1, ...(sequence === undefined ? {} : { sequence: BigInt(sequence) }) } as unknown as Receipt;
  return b64Encode(encodeReceipt(receipt));
}

const out: string[] = [];
for (const line of readFileSync(0, "utf8").split("\n")) {
  if (line === "") continue;
  const item = JSON.parse(line) as { what: string; b64?: string; fields?: Record<string, string> };
  if (item.what === "handoff") out.push(handoff(item as unknown as HandoffItem));
  else out.push(item.what === "encode" ? encode(item.fields ?? {}) : judge(item.what, b64Decode(item.b64 ?? "")));
}
process.stdout.write(JSON.stringify(out) + "\n");
