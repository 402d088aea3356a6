/**
 * The signed receipt (docs/protocol.md 3-4; busguard.protocol.receipt): its
 * strict decoding, the form the SDK emits, the signing input, the receipt id
 * and the payload hash. The receipt travels as the exact bytes that were
 * signed and is never re-serialised: a reader verifies and parses those bytes.
 */
import { concat, sha256Hex, utf8 } from "./bytes.js";
import { StrictJsonError, decodeObject, encodeString, field, isWellFormed, type FieldSpec, type JsonValue } from "./json.js";

export const SIGNING_CONTEXT: Uint8Array = utf8("busguard/receipt/v1\x00");
export const RECEIPT_VERSION = 1;
export const MAX_RECEIPT_BYTES = 4096;
export const MAX_SEQUENCE = 2n ** 63n - 1n;

/** A receipt's fields, wire names; absent optional fields are `undefined`. */
export interface Receipt {
  readonly v: 1;
  readonly kind: string;
  readonly task_id: string;
  readonly sender: string;
  readonly receiver: string;
  readonly payload_hash: string;
  readonly nonce: string;
  readonly issued_at: string;
  readonly session_id?: string | undefined;
  readonly sequence?: bigint | undefined;
  readonly key_id?: string | undefined;
}

/** The stable reason codes a receipt (or its record's envelope, docs/protocol.md 2) can be refused with. */
export type ReceiptReason =
  | "missing_header"
  | "duplicate_header"
  | "reserved_header"
  | "bad_base64"
  | "oversized"
  | "not_json"
  | "wrong_type"
  | "unknown_field"
  | "missing_field"
  | "duplicate_key"
  | "unsupported_version"
  | "malformed_field"
  | "malformed_agent_id"
  | "malformed_session";

export class ReceiptError extends Error {
  constructor(
    readonly reason: ReceiptReason,
    readonly detail: string,
  ) {
    super(`${reason}: ${detail}`);
  }
}

const str = (minLength: number, maxLength: number): FieldSpec["type"] => ({ kind: "str", minLength, maxLength });
const FIELDS = new Map<string, FieldSpec>([
  ["v", field({ kind: "int" })],
  ["kind", field({ kind: "str" })],
  ["task_id", field(str(1, 256))],
  ["sender", field(str(1, 512))],
  ["receiver", field(str(1, 512))],
  ["payload_hash", field(str(64, 64))],
  ["nonce", field({ kind: "str" })],
  ["issued_at", field({ kind: "str" })],
  ["session_id", field(str(1, 128), { nullable: true, required: false })],
  ["sequence", field({ kind: "int", min: 0n, max: MAX_SEQUENCE }, { nullable: true, required: false })],
  ["key_id", field(str(1, 128), { nullable: true, required: false })],
]);
const SCHEMA = { fields: FIELDS, forbidUnknown: true };

const CONSTRAINT_REASONS: Readonly<Record<string, ReceiptReason>> = {
  "$.task_id": "malformed_field",
  "$.payload_hash": "malformed_field",
  "$.key_id": "malformed_field",
  "$.sender": "malformed_agent_id",
  "$.receiver": "malformed_agent_id",
  "$.session_id": "malformed_session",
  "$.sequence": "malformed_session",
};

export function signingInput(receiptBytes: Uint8Array): Uint8Array {
  return concat(SIGNING_CONTEXT, receiptBytes);
}

/** Lowercase hex SHA-256 of the signing input: names the signed statement, not a signature. */
export function receiptId(receiptBytes: Uint8Array): string {
  return sha256Hex(SIGNING_CONTEXT, receiptBytes);
}

export function payloadHash(payload: Uint8Array): string {
  return sha256Hex(payload);
}

/** Why a `payload_hash` that did not match is malformed, if it is. */
export function payloadHashProblem(claimed: string): string | null {
  return /^[0-9a-f]{64}$/.test(claimed) ? null : `payload_hash ${JSON.stringify(claimed.slice(0, 80))} is not 64 lowercase hex digits (SHA-256)`;
}

/**
 * Parse the received bytes strictly (docs/protocol.md 3.3), or throw
 * ReceiptError with the same reason busguard gives.
 */
export function decodeReceipt(raw: Uint8Array): Receipt {
  if (raw.length > MAX_RECEIPT_BYTES) {
    throw new ReceiptError("oversized", `receipt is ${raw.length} bytes; at most ${MAX_RECEIPT_BYTES} allowed`);
  }
  let values: ReadonlyMap<string, JsonValue>;
  let keys: readonly string[];
  try {
    ({ values, keys } = decodeObject(raw, SCHEMA));
  } catch (exc) {
    if (!(exc instanceof StrictJsonError)) throw exc;
    switch (exc.problem) {
      case "not_json":
        throw new ReceiptError("not_json", `receipt is not valid UTF-8 JSON: ${exc.message}`);
      case "constraint":
        throw new ReceiptError(CONSTRAINT_REASONS[exc.path] ?? "wrong_type", exc.message);
      default:
        throw new ReceiptError(exc.problem, exc.message);
    }
  }
  const seen = new Set<string>();
  for (const k of keys) {
    if (seen.has(k)) throw new ReceiptError("duplicate_key", `key ${JSON.stringify(k)} appears more than once in the signed receipt`);
    seen.add(k);
  }
  const s = (name: string): string => values.get(name) as string;
  const opt = <T>(name: string): T | undefined => {
    const v = values.get(name);
    return v === null || v === undefined ? undefined : (v as T);
  };
  const v = values.get("v") as bigint;
  if (v !== 1n) throw new ReceiptError("unsupported_version", `v=${v}; only ${RECEIPT_VERSION} is supported`);
  const sessionId = opt<string>("session_id");
  const sequence = opt<bigint>("sequence");
  if ((sessionId === undefined) !== (sequence === undefined)) {
    throw new ReceiptError("malformed_session", "session_id and sequence must be given together or not at all");
  }
  return {
    v: 1,
    kind: s("kind"),
    task_id: s("task_id"),
    sender: s("sender"),
    receiver: s("receiver"),
    payload_hash: s("payload_hash"),
    nonce: s("nonce"),
    issued_at: s("issued_at"),
    session_id: sessionId,
    sequence,
    key_id: opt<string>("key_id"),
  };
}

/**
 * Compact JSON in the field order of docs/protocol.md 3.1, absent optional
 * fields omitted: the form busguard's Python SDK emits, byte for byte.
 */
export function encodeReceipt(r: Receipt): Uint8Array {
  const parts: string[] = [`"v":${r.v}`];
  const put = (name: string, value: string): void => {
    if (!isWellFormed(value)) throw new Error(`receipt field ${name} holds an unpaired surrogate: it has no UTF-8 encoding`);
    parts.push(`${encodeString(name)}:${encodeString(value)}`);
  };
  put("kind", r.kind);
  put("task_id", r.task_id);
  put("sender", r.sender);
  put("receiver", r.receiver);
  put("payload_hash", r.payload_hash);
  put("nonce", r.nonce);
  put("issued_at", r.issued_at);
  if (r.session_id !== undefined) put("session_id", r.session_id);
  if (r.sequence !== undefined) parts.push(`"sequence":${r.sequence}`);
  if (r.key_id !== undefined) put("key_id", r.key_id);
  return utf8(`{${parts.join(",")}}`);
}
