/**
 * busguard's signed statement about each decision (docs/protocol.md 12.1,
 * 12.6; busguard.protocol.attestation): opening a sealed output (a
 * per-record `busguard-seal`, or a batch seal: tree head, head seal and
 * inclusion proof), the checks a receiver makes on an admitted forward
 * (`checkAdmitted`, the sealed annotations of `annotations_sha256`), the
 * receiver binding, and an auditor's decision-record check.
 */
import { b64urlDecodeStrict, concat, sha256Hex, toHex, utf8 } from "./bytes.js";
import { verifySignature } from "./ed25519.js";
import { HEADER_RECEIPT, type Header } from "./envelope.js";
import { canonicalPrincipal } from "./identity.js";
import { StrictJsonError, decodeObject, field, type DecodedObject, type FieldSpec } from "./json.js";
import { decodeReceipt, payloadHash, receiptId } from "./receipt.js";
import { headersEncoding, type Coordinates } from "./records.js";
import { HEADER_HEAD_SEAL, HEADER_INCLUSION, HEADER_TREE_HEAD, TreeHeadError, decodeHead, headMessage, included, type TreeHead } from "./treehead.js";

export const ATTESTATION_CONTEXT: Uint8Array = utf8("busguard/attestation/v1\x00");
export const HEADER_ATTESTATION = "busguard-attestation";
export const HEADER_SEAL = "busguard-seal";
export const HEADER_DECISION_ID = "busguard-decision-id";
export const HEADER_ANNOTATION_PREFIX = "busguard-annotation-";
const SEAL_HEADERS = new Set([HEADER_ATTESTATION, HEADER_SEAL, HEADER_TREE_HEAD, HEADER_HEAD_SEAL, HEADER_INCLUSION]);

export interface Attestation {
  readonly v: bigint;
  readonly guard: string;
  readonly decision_id: string;
  readonly outcome: string;
  readonly reason: string;
  readonly receipt_id: string | null;
  readonly source: Coordinates;
  readonly decided_at: bigint;
  readonly decision_sha256: string;
  readonly forwarded_sha256?: string | undefined;
  readonly annotations_sha256?: string | undefined;
}

export class AttestationError extends Error {}
/** A batch seal whose head verifies but whose inclusion proof does not prove this attestation. */
export class InclusionError extends AttestationError {}

const INT = { kind: "int" } as const;
const STR = { kind: "str" } as const;
// Coordinates (msgspec Struct without forbid_unknown_fields): unknown keys inside `source` are skipped.
const SOURCE = {
  forbidUnknown: false,
  fields: new Map<string, FieldSpec>([
    ["topic", field(STR)],
    ["partition", field(INT)],
    ["offset", field(INT)],
  ]),
};
const ATTESTATION_SCHEMA = {
  forbidUnknown: true,
  fields: new Map<string, FieldSpec>([
    ["v", field(INT)],
    ["guard", field(STR)],
    ["decision_id", field(STR)],
    ["outcome", field(STR)],
    ["reason", field(STR)],
    ["receipt_id", field(STR, { nullable: true })],
    ["source", field({ kind: "object", schema: SOURCE })],
    ["decided_at", field(INT)],
    ["decision_sha256", field(STR)],
    ["forwarded_sha256", field(STR, { nullable: true, required: false })],
    ["annotations_sha256", field(STR, { nullable: true, required: false })],
  ]),
};

/** Parse an attestation's exact bytes (never re-serialised); unknown fields are refused. */
export function decodeAttestation(raw: Uint8Array): Attestation {
  let values;
  try {
    ({ values } = decodeObject(raw, ATTESTATION_SCHEMA));
  } catch (exc) {
    if (exc instanceof StrictJsonError) throw new AttestationError(`busguard-attestation is malformed: ${exc.message}`);
    throw exc;
  }
  const source = (values.get("source") as DecodedObject).values;
  const optional = (name: string): string | undefined => (values.get(name) as string | null | undefined) ?? undefined;
  return {
    v: values.get("v") as bigint,
    guard: values.get("guard") as string,
    decision_id: values.get("decision_id") as string,
    outcome: values.get("outcome") as string,
    reason: values.get("reason") as string,
    receipt_id: values.get("receipt_id") as string | null,
    source: { topic: source.get("topic") as string, partition: source.get("partition") as bigint, offset: source.get("offset") as bigint },
    decided_at: values.get("decided_at") as bigint,
    decision_sha256: values.get("decision_sha256") as string,
    forwarded_sha256: optional("forwarded_sha256"),
    annotations_sha256: optional("annotations_sha256"),
  };
}

/**
 * Verified tree heads, so a reader checks one signature per batch. Bounded:
 * the oldest is forgotten first. Keyed by the guard key, head bytes and seal bytes.
 */
export class HeadCache {
  readonly #heads = new Map<string, TreeHead>();
  constructor(readonly capacity = 4096) {}

  static key(guardKey: Uint8Array, raw: Uint8Array, seal: Uint8Array): string {
    return `${toHex(guardKey)}:${toHex(seal)}:${toHex(raw)}`;
  }

  get(guardKey: Uint8Array, raw: Uint8Array, seal: Uint8Array): TreeHead | undefined {
    return this.#heads.get(HeadCache.key(guardKey, raw, seal));
  }

  add(guardKey: Uint8Array, raw: Uint8Array, seal: Uint8Array, head: TreeHead): void {
    this.#heads.set(HeadCache.key(guardKey, raw, seal), head);
    while (this.#heads.size > this.capacity) {
      const oldest = this.#heads.keys().next();
      if (oldest.done === true) break;
      this.#heads.delete(oldest.value);
    }
  }

  get size(): number {
    return this.#heads.size;
  }
}

export interface Opened {
  readonly attestation: Attestation;
  readonly raw: Uint8Array;
  readonly head?: TreeHead;
  readonly headRaw?: Uint8Array;
  readonly index?: number;
}

function strictSignature(value: Uint8Array, header: string): Uint8Array {
  try {
    return b64urlDecodeStrict(value, 64);
  } catch (exc) {
    throw new AttestationError(`${header}: ${(exc as Error).message}`);
  }
}

/** The attestation on a busguard output after checking its seal, either kind. */
export function openSealed(headers: readonly Header[], guardPublicKey: Uint8Array, heads?: HeadCache): Opened {
  const found = new Map<string, Uint8Array[]>();
  for (const [k, v] of headers) {
    if (!SEAL_HEADERS.has(k)) continue;
    if (v === null) throw new AttestationError(`${k} has a null value`);
    const list = found.get(k) ?? [];
    list.push(v);
    found.set(k, list);
  }
  if ([...found.values()].some((vs) => vs.length !== 1) || !found.has(HEADER_ATTESTATION)) {
    throw new AttestationError("exactly one busguard-attestation header, and at most one of each seal header, are required");
  }
  const one = (k: string): Uint8Array => (found.get(k) as Uint8Array[])[0] as Uint8Array;
  const attRaw = one(HEADER_ATTESTATION);
  const batch = [HEADER_TREE_HEAD, HEADER_HEAD_SEAL, HEADER_INCLUSION];
  if (found.has(HEADER_SEAL)) {
    if (batch.some((k) => found.has(k))) throw new AttestationError("busguard-seal and a batch seal (busguard-tree-head) on one record");
    const signature = strictSignature(one(HEADER_SEAL), HEADER_SEAL);
    if (!verifySignature(guardPublicKey, concat(ATTESTATION_CONTEXT, attRaw), signature)) {
      throw new AttestationError("busguard-seal does not verify with the guard's public key");
    }
    return { attestation: decodeAttestation(attRaw), raw: attRaw };
  }
  if (!batch.every((k) => found.has(k))) {
    throw new AttestationError("no busguard-seal, and not all of busguard-tree-head, busguard-head-seal and busguard-inclusion");
  }
  const headRaw = one(HEADER_TREE_HEAD);
  const headSeal = one(HEADER_HEAD_SEAL);
  let head = heads?.get(guardPublicKey, headRaw, headSeal);
  if (head === undefined) {
    const signature = strictSignature(headSeal, HEADER_HEAD_SEAL);
    if (!verifySignature(guardPublicKey, headMessage(headRaw), signature)) {
      throw new AttestationError("busguard-head-seal does not verify with the guard's public key");
    }
    try {
      head = decodeHead(headRaw);
    } catch (exc) {
      if (exc instanceof TreeHeadError) throw new AttestationError(exc.message);
      throw exc;
    }
    heads?.add(guardPublicKey, headRaw, headSeal, head);
  }
  let index: number;
  try {
    index = included(attRaw, head, one(HEADER_INCLUSION));
  } catch (exc) {
    if (exc instanceof TreeHeadError) throw new InclusionError(exc.message);
    throw exc;
  }
  return { attestation: decodeAttestation(attRaw), raw: attRaw, head, headRaw, index };
}

export function openAttestation(headers: readonly Header[], guardPublicKey: Uint8Array, heads?: HeadCache): Attestation {
  return openSealed(headers, guardPublicKey, heads).attestation;
}

/** Lowercase hex SHA-256 of the annotation encoding (the headers encoding of the annotation headers alone). */
export function annotationsSha256(headers: readonly Header[]): string {
  return sha256Hex(headersEncoding(headers));
}

/** Whether a header name begins with `busguard-annotation-` in any letter case (as busguard's `check_annotations`). */
export function isAnnotationHeader(name: string): boolean {
  return name.length >= HEADER_ANNOTATION_PREFIX.length && name.slice(0, HEADER_ANNOTATION_PREFIX.length).toLowerCase() === HEADER_ANNOTATION_PREFIX;
}

/**
 * Every annotation header, in record order, must be exactly what
 * `annotations_sha256` binds; without it there must be none (a forward from
 * before annotations were sealed, or headers added to one). `unbound` is
 * the auditor's alone.
 */
export function checkAnnotations(att: Attestation, headers: readonly Header[], unbound = false): void {
  const found = headers.filter(([k]) => isAnnotationHeader(k));
  if (att.annotations_sha256 === undefined) {
    if (found.length > 0 && !unbound) {
      throw new AttestationError(
        `${found.length} busguard-annotation-* header(s) (${JSON.stringify((found[0] as Header)[0].slice(0, 64))} first) that the attestation does not bind ` +
          "(no annotations_sha256: a forward from before annotations were sealed, or headers added to one)",
      );
    }
    return;
  }
  if (annotationsSha256(found) !== att.annotations_sha256) {
    const names = found.slice(0, 8).map(([k]) => k.slice(0, 64)).join(", ") || "none";
    throw new AttestationError(`the busguard-annotation-* headers (${found.length}: ${names}) are not the ones the guard attested (annotations_sha256)`);
  }
}

function readPayloadHash(raw: Uint8Array): unknown {
  try {
    const parsed: unknown = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(raw));
    return typeof parsed === "object" && parsed !== null && !Array.isArray(parsed) ? (parsed as Record<string, unknown>)["payload_hash"] : undefined;
  } catch {
    throw new AttestationError("busguard-receipt is not JSON");
  }
}

/**
 * The checks after the seal: outcome `forward`, the `busguard-decision-id`
 * header is the attested one, the attestation names the receipt in this
 * record, the payload is the one the receipt hashed (or the replacement
 * `forwarded_sha256` names), and the annotation headers are the attested ones.
 */
export function checkAdmitted(att: Attestation, value: Uint8Array, headers: readonly Header[], unboundAnnotations = false): Attestation {
  if (att.outcome !== "forward") throw new AttestationError(`outcome is ${JSON.stringify(att.outcome)}, not 'forward'`);
  const ids = headers.filter(([k]) => k === HEADER_DECISION_ID).map(([, v]) => v);
  const want = utf8(att.decision_id);
  if (ids.length !== 1 || ids[0] === null || ids[0] === undefined || toHex(ids[0]) !== toHex(want)) {
    throw new AttestationError("busguard-decision-id is missing, repeated, or not the attested decision id");
  }
  const receipts = headers.filter(([k]) => k === HEADER_RECEIPT).map(([, v]) => v);
  const receipt = receipts[0];
  if (receipts.length !== 1 || receipt === null || receipt === undefined) {
    throw new AttestationError("exactly one busguard-receipt header, with a value, is required");
  }
  if (receiptId(receipt) !== att.receipt_id) throw new AttestationError("the attestation is for a different receipt");
  checkAnnotations(att, headers, unboundAnnotations);
  if (att.forwarded_sha256 !== undefined) {
    if (sha256Hex(value) !== att.forwarded_sha256) throw new AttestationError("the payload is not the replacement the guard attested (forwarded_sha256)");
    return att;
  }
  if (readPayloadHash(receipt) !== payloadHash(value)) throw new AttestationError("the payload is not the one the receipt hashed");
  return att;
}

/** The single receipt in `headers` is addressed to `receiver`, as canonical principals. */
export function checkReceiver(headers: readonly Header[], receiver: string): void {
  const want = canonicalPrincipal(receiver); // a malformed own id is the caller's bug: it throws
  const raw = headers.filter(([k]) => k === HEADER_RECEIPT).map(([, v]) => v);
  const first = raw[0];
  if (raw.length !== 1 || first === null || first === undefined) throw new AttestationError("exactly one busguard-receipt header, with a value, is required");
  let addressed: string;
  let to: string;
  try {
    addressed = decodeReceipt(first).receiver;
    to = canonicalPrincipal(addressed);
  } catch (exc) {
    throw new AttestationError(`busguard-receipt: ${(exc as Error).message}`);
  }
  if (to !== want) {
    throw new AttestationError(`the receipt is addressed to ${JSON.stringify(addressed.slice(0, 128))}, not to ${JSON.stringify(receiver.slice(0, 128))}`);
  }
}

/**
 * For downstream agents: the record was admitted by busguard, for `receiver`
 * (`null` only for readers that act for no one: auditors, taps).
 */
export function verifyAdmitted(value: Uint8Array, headers: readonly Header[], guardPublicKey: Uint8Array, receiver: string | null, heads?: HeadCache): Attestation {
  const att = checkAdmitted(openAttestation(headers, guardPublicKey, heads), value, headers);
  if (receiver !== null) checkReceiver(headers, receiver);
  return att;
}

/** For auditors: the attestation on an audit or escalation record, bound to its value. */
export function verifyDecisionRecord(value: Uint8Array, headers: readonly Header[], guardPublicKey: Uint8Array, heads?: HeadCache): Attestation {
  const opened = openSealed(headers, guardPublicKey, heads);
  if (sha256Hex(value) !== opened.attestation.decision_sha256) throw new AttestationError("the record's value is not the decision the guard attested");
  return opened.attestation;
}


function replacementFrom(record: Record<string, unknown>): { bytes?: Uint8Array; sha?: string; length?: unknown } {
  const out: { bytes?: Uint8Array; sha?: string; length?: unknown } = {};
  if (typeof record["replacement"] === "string") out.bytes = new Uint8Array(Buffer.from(record["replacement"], "base64"));
  if (typeof record["replacement_sha256"] === "string") out.sha = record["replacement_sha256"];
  if ("replacement_length" in record && record["replacement_length"] !== null) out.length = record["replacement_length"];
  return out;
}

/**
 * What is wrong with how a decision record carries its replacement
 * (docs/protocol.md 12.3, 12.5; busguard's `carried_mismatch`), or null:
 * whichever form it has names the value its attestation's
 * `forwarded_sha256` binds, and a record with `replacement_sha256` has a
 * non-negative `replacement_length`.
 */
export function carriedMismatch(record: Record<string, unknown>, forwardedSha256: string | undefined): string | null {
  const r = replacementFrom(record);
  if (r.bytes !== undefined && r.sha !== undefined && sha256Hex(r.bytes) !== r.sha) {
    return "the decision's replacement is not the one its replacement_sha256 names";
  }
  if (r.sha !== undefined && !(typeof r.length === "number" && Number.isInteger(r.length) && r.length >= 0)) {
    return "a decision with replacement_sha256 needs a replacement_length (a non-negative integer)";
  }
  const named = r.sha ?? (r.bytes === undefined ? undefined : sha256Hex(r.bytes));
  if (named !== forwardedSha256 && !(r.sha === undefined && forwardedSha256 === undefined)) {
    return `the decision names the replacement ${named ?? "None"}, its attestation's forwarded_sha256 is ${forwardedSha256 ?? "None"}`;
  }
  return null;
}

/**
 * An auditor's check of one audit-topic record: the seal and
 * `decision_sha256` (`verifyDecisionRecord`), then, when the value is a
 * decision or resolution record, that the attestation names its id and that
 * a decision carries its replacement as its attestation says. A value that
 * is not such a record stays verified (as busguard's `check_audit_record`).
 */
export function checkDecisionRecord(value: Uint8Array, headers: readonly Header[], guardPublicKey: Uint8Array, heads?: HeadCache): Attestation {
  const att = verifyDecisionRecord(value, headers, guardPublicKey, heads);
  let record: unknown;
  try {
    record = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(value));
  } catch {
    return att;
  }
  if (typeof record !== "object" || record === null || Array.isArray(record)) return att;
  const rec = record as Record<string, unknown>;
  const own = rec["type"] === "decision" ? rec["decision_id"] : rec["type"] === "resolution" ? rec["resolution_id"] : undefined;
  if (typeof own !== "string") return att;
  if (att.decision_id !== own) throw new AttestationError(`the attestation names ${att.decision_id}, the record is ${own}`);
  if (rec["type"] === "decision") {
    const mismatch = carriedMismatch(rec, att.forwarded_sha256);
    if (mismatch !== null) throw new AttestationError(mismatch);
  }
  return att;
}
