/**
 * The batch audit record (docs/protocol.md 12.7; busguard.protocol.auditbatch):
 * headers `busguard-audit-batch: 1`, the tree head and its seal; value a
 * msgpack array of `[decision, attestation, inclusion]` bin triples. Each
 * entry stands for one per-record audit record, which `expand` rebuilds so
 * that every per-record check applies unchanged.
 */
import { decode, encode } from "@msgpack/msgpack";
import { HEADER_ATTESTATION } from "./attestation.js";
import type { Header } from "./envelope.js";
import { HEADER_HEAD_SEAL, HEADER_INCLUSION, HEADER_TREE_HEAD, MAX_LEAVES } from "./treehead.js";

export const HEADER_AUDIT_BATCH = "busguard-audit-batch";

export interface Entry {
  readonly decision: Uint8Array;
  readonly attestation: Uint8Array;
  readonly inclusion: Uint8Array;
}

/** A record that says it is a batch audit record and is not a well-formed one. */
export class AuditBatchError extends Error {}

const WATCHED = new Set([HEADER_AUDIT_BATCH, HEADER_TREE_HEAD, HEADER_HEAD_SEAL, HEADER_ATTESTATION, HEADER_INCLUSION]);

/** The record's value, as busguard's writer packs it (msgspec's msgpack: shortest headers, bin values). */
export function pack(entries: readonly Entry[]): Uint8Array {
  return encode(entries.map((e) => [e.decision, e.attestation, e.inclusion]));
}

export function isBatch(headers: readonly Header[]): boolean {
  return headers.some(([k]) => k === HEADER_AUDIT_BATCH);
}

/** Each entry as the per-record audit record it stands for; AuditBatchError names what is wrong. */
export function expand(value: Uint8Array | null, headers: readonly Header[]): Array<{ value: Uint8Array; headers: Header[] }> {
  const found = new Map<string, Array<Uint8Array | null>>();
  for (const [k, v] of headers) {
    if (!WATCHED.has(k)) continue;
    const list = found.get(k) ?? [];
    list.push(v);
    found.set(k, list);
  }
  const versions = found.get(HEADER_AUDIT_BATCH) ?? [];
  const version = versions[0];
  if (versions.length !== 1 || version === null || version === undefined || version.length !== 1 || version[0] !== 0x31) {
    throw new AuditBatchError(`${HEADER_AUDIT_BATCH} must appear once with value b'1'`);
  }
  const heads = found.get(HEADER_TREE_HEAD) ?? [];
  const seals = found.get(HEADER_HEAD_SEAL) ?? [];
  const head = heads[0];
  const seal = seals[0];
  if (heads.length !== 1 || seals.length !== 1 || head === null || head === undefined || seal === null || seal === undefined) {
    throw new AuditBatchError(`a batch audit record needs exactly one ${HEADER_TREE_HEAD} and one ${HEADER_HEAD_SEAL} header`);
  }
  if (found.has(HEADER_ATTESTATION) || found.has(HEADER_INCLUSION)) {
    throw new AuditBatchError(`a batch audit record carries no ${HEADER_ATTESTATION} or ${HEADER_INCLUSION} header of its own`);
  }
  if (value === null) throw new AuditBatchError("a batch audit record has no value");
  let decoded: unknown;
  try {
    decoded = decode(value);
  } catch (exc) {
    throw new AuditBatchError(`the value is not a msgpack array of [decision, attestation, inclusion] bin triples: ${(exc as Error).message}`);
  }
  const shape = "the value is not a msgpack array of [decision, attestation, inclusion] bin triples";
  if (!Array.isArray(decoded)) throw new AuditBatchError(shape);
  const entries: Entry[] = [];
  for (const item of decoded as unknown[]) {
    if (!Array.isArray(item) || item.length !== 3 || !(item as unknown[]).every((x) => x instanceof Uint8Array)) throw new AuditBatchError(shape);
    const [decision, attestation, inclusion] = item as [Uint8Array, Uint8Array, Uint8Array];
    entries.push({ decision, attestation, inclusion });
  }
  if (entries.length < 1 || entries.length > MAX_LEAVES) {
    throw new AuditBatchError(`a batch audit record holds 1 to ${MAX_LEAVES} entries, this one ${entries.length}`);
  }
  return entries.map((e) => ({
    value: e.decision,
    headers: [
      [HEADER_ATTESTATION, e.attestation],
      [HEADER_TREE_HEAD, head],
      [HEADER_HEAD_SEAL, seal],
      [HEADER_INCLUSION, e.inclusion],
    ],
  }));
}
