/**
 * The batch seal (docs/protocol.md 12.6; busguard.protocol.treehead): one
 * guard signature over a chained tree head, and per output the inclusion
 * proof of its attestation (`busguard-inclusion`: u32 big-endian leaf index,
 * then the RFC 9162 audit path, leaf level first).
 */
import { concat, fromHex, sha256Hex, utf8 } from "./bytes.js";
import { StrictJsonError, decodeObject, field, type FieldSpec } from "./json.js";
import { HASH_BYTES, MAX_TREE_SIZE, ProofError, leafHash, verifyInclusion } from "./merkle.js";

export const TREE_HEAD_CONTEXT: Uint8Array = utf8("busguard/tree-head/v1\x00");
export const HEADER_TREE_HEAD = "busguard-tree-head";
export const HEADER_HEAD_SEAL = "busguard-head-seal";
export const HEADER_INCLUSION = "busguard-inclusion";
export const MAX_LEAVES = 100_000;
export const MAX_DEPTH = 17;

export interface TreeHead {
  readonly v: 1;
  readonly guard: string;
  readonly chain: string;
  readonly seq: number;
  readonly prev: string | null;
  readonly size: number;
  readonly root: string;
  readonly sealed_at: bigint;
}

export class TreeHeadError extends Error {}

const INT = { kind: "int" } as const;
const STR = { kind: "str" } as const;
const HEAD_SCHEMA = {
  forbidUnknown: true,
  fields: new Map<string, FieldSpec>([
    ["v", field(INT)],
    ["guard", field(STR)],
    ["chain", field(STR)],
    ["seq", field(INT)],
    ["prev", field(STR, { nullable: true })],
    ["size", field(INT)],
    ["root", field(STR)],
    ["sealed_at", field(INT)],
  ]),
};
const CHAIN = /^[0-9a-z-]{1,64}$/;
const HEX64 = /^[0-9a-f]{64}$/;

/** A head, refusing anything a guard would not have written. */
export function decodeHead(raw: Uint8Array): TreeHead {
  let values;
  try {
    ({ values } = decodeObject(raw, HEAD_SCHEMA));
  } catch (exc) {
    if (exc instanceof StrictJsonError) throw new TreeHeadError(`busguard-tree-head is malformed: ${exc.message}`);
    throw exc;
  }
  const v = values.get("v") as bigint;
  const chain = values.get("chain") as string;
  const seq = values.get("seq") as bigint;
  const size = values.get("size") as bigint;
  const root = values.get("root") as string;
  const prev = values.get("prev") as string | null;
  if (v !== 1n) throw new TreeHeadError(`busguard-tree-head: version ${v} is not 1`);
  if (!CHAIN.test(chain)) throw new TreeHeadError(`busguard-tree-head: chain ${JSON.stringify(chain.slice(0, 80))} is not 1-64 characters of [0-9a-z-]`);
  if (seq < 0n || seq > BigInt(MAX_TREE_SIZE)) throw new TreeHeadError(`busguard-tree-head: seq ${seq} is not from 0 to 2**53 - 1`);
  if (size < 1n || size > BigInt(MAX_LEAVES)) throw new TreeHeadError(`busguard-tree-head: size ${size} is not from 1 to ${MAX_LEAVES}`);
  if (!HEX64.test(root)) throw new TreeHeadError("busguard-tree-head: root is not 64 lowercase hex characters");
  if ((prev === null) !== (seq === 0n)) throw new TreeHeadError("busguard-tree-head: prev must be null exactly when seq is 0");
  if (prev !== null && !HEX64.test(prev)) throw new TreeHeadError("busguard-tree-head: prev is not 64 lowercase hex characters");
  return {
    v: 1,
    guard: values.get("guard") as string,
    chain,
    seq: Number(seq),
    prev,
    size: Number(size),
    root,
    sealed_at: values.get("sealed_at") as bigint,
  };
}

/** What the next head's `prev` names. */
export function headDigest(raw: Uint8Array): string {
  return sha256Hex(raw);
}

/** The bytes the head seal signs. */
export function headMessage(raw: Uint8Array): Uint8Array {
  return concat(TREE_HEAD_CONTEXT, raw);
}

export function decodeInclusion(raw: Uint8Array): { index: number; path: Uint8Array[] } {
  const k = (raw.length - 4) / HASH_BYTES;
  if (raw.length < 4 || !Number.isInteger(k) || k > MAX_DEPTH) {
    throw new TreeHeadError(`busguard-inclusion must be 4 + 32 * k bytes with k <= ${MAX_DEPTH}, got ${raw.length} bytes`);
  }
  const index = new DataView(raw.buffer, raw.byteOffset, raw.byteLength).getUint32(0, false);
  const path: Uint8Array[] = [];
  for (let i = 4; i < raw.length; i += HASH_BYTES) path.push(raw.slice(i, i + HASH_BYTES));
  return { index, path };
}

/** The leaf index `inclusion` proves `attestation` at under `head`; TreeHeadError when malformed or false. */
export function included(attestation: Uint8Array, head: TreeHead, inclusion: Uint8Array): number {
  const { index, path } = decodeInclusion(inclusion);
  let ok: boolean;
  try {
    ok = verifyInclusion(index, head.size, leafHash(attestation), path, fromHex(head.root));
  } catch (exc) {
    if (exc instanceof ProofError) throw new TreeHeadError(`busguard-inclusion: ${exc.message}`);
    throw exc;
  }
  if (!ok) throw new TreeHeadError(`busguard-inclusion does not prove this attestation at leaf ${index} of the head's tree`);
  return index;
}
