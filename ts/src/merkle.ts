/**
 * RFC 9162 section 2.1 Merkle trees over SHA-256 (busguard.protocol.merkle):
 * leaf hash SHA-256(0x00 || leaf), node SHA-256(0x01 || left || right), split
 * at the largest power of two below n, nothing padded; inclusion (2.1.3.2)
 * and consistency (2.1.4.2) proof checks with the boundary cases explicit.
 */
import { concat, equalBytes, sha256 } from "./bytes.js";

export const HASH_BYTES = 32;
export const MAX_TREE_SIZE = 2 ** 53 - 1;
export const EMPTY_ROOT: Uint8Array = sha256(new Uint8Array(0));

/** A proof question that cannot even be asked (bad size, bad hash), apart from a false proof. */
export class ProofError extends Error {}

export function leafHash(leaf: Uint8Array): Uint8Array {
  return sha256(new Uint8Array([0]), leaf);
}

export function nodeHash(left: Uint8Array, right: Uint8Array): Uint8Array {
  return sha256(concat(new Uint8Array([1]), left, right));
}

/** MTH over already-hashed leaves (bottom-up, an odd last node carried up). */
export function merkleRoot(leafHashes: readonly Uint8Array[]): Uint8Array {
  let level = [...leafHashes];
  if (level.length === 0) return EMPTY_ROOT;
  while (level.length > 1) {
    const next: Uint8Array[] = [];
    for (let i = 0; i + 1 < level.length; i += 2) next.push(nodeHash(level[i] as Uint8Array, level[i + 1] as Uint8Array));
    if (level.length % 2 === 1) next.push(level[level.length - 1] as Uint8Array);
    level = next;
  }
  return level[0] as Uint8Array;
}

function checkSize(size: number, what: string): void {
  if (!Number.isSafeInteger(size) || size < 0 || size > MAX_TREE_SIZE) {
    throw new ProofError(`${what} must be an integer from 0 to 2**53 - 1, got ${size}`);
  }
}

function checkHash(h: Uint8Array, what: string): void {
  if (h.length !== HASH_BYTES) throw new ProofError(`${what} must be ${HASH_BYTES} bytes, got ${h.length}`);
}

/** Does `proof` show the leaf hash `leaf` at `index` of the tree of `size` leaves with `root`? */
export function verifyInclusion(index: number, size: number, leaf: Uint8Array, proof: readonly Uint8Array[], root: Uint8Array): boolean {
  checkSize(size, "tree size");
  checkSize(index, "leaf index");
  checkHash(leaf, "leaf hash");
  checkHash(root, "root");
  proof.forEach((p, i) => checkHash(p, `proof[${i}]`));
  if (index >= size) return false;
  // BigInt: sizes up to 2**53 - 1 overflow JavaScript's 32-bit shifts.
  let fn = BigInt(index);
  let sn = BigInt(size - 1);
  let r = leaf;
  for (const p of proof) {
    if (sn === 0n) return false;
    if ((fn & 1n) === 1n || fn === sn) {
      r = nodeHash(p, r);
      while (fn !== 0n && (fn & 1n) === 0n) {
        fn >>= 1n;
        sn >>= 1n;
      }
    } else {
      r = nodeHash(r, p);
    }
    fn >>= 1n;
    sn >>= 1n;
  }
  return sn === 0n && equalBytes(r, root);
}

/** Is the tree of size `first` with `firstRoot` a prefix of the one of size `second`? */
export function verifyConsistency(first: number, second: number, firstRoot: Uint8Array, secondRoot: Uint8Array, proof: readonly Uint8Array[]): boolean {
  checkSize(first, "first tree size");
  checkSize(second, "second tree size");
  checkHash(firstRoot, "first root");
  checkHash(secondRoot, "second root");
  proof.forEach((p, i) => checkHash(p, `proof[${i}]`));
  if (first > second) throw new ProofError(`first tree size ${first} is larger than second tree size ${second}: it cannot be a prefix`);
  if (first === second) return proof.length === 0 && equalBytes(firstRoot, secondRoot);
  if (first === 0) return proof.length === 0 && equalBytes(firstRoot, EMPTY_ROOT);
  if (proof.length === 0) return false;
  let path = [...proof];
  let fn = BigInt(first - 1);
  let sn = BigInt(second - 1);
  if ((BigInt(first) & (BigInt(first) - 1n)) === 0n) path = [firstRoot, ...path];
  while ((fn & 1n) === 1n) {
    fn >>= 1n;
    sn >>= 1n;
  }
  let fr = path[0] as Uint8Array;
  let sr = fr;
  for (const c of path.slice(1)) {
    if (sn === 0n) return false;
    if ((fn & 1n) === 1n || fn === sn) {
      fr = nodeHash(c, fr);
      sr = nodeHash(c, sr);
      while (fn !== 0n && (fn & 1n) === 0n) {
        fn >>= 1n;
        sn >>= 1n;
      }
    } else {
      sr = nodeHash(sr, c);
    }
    fn >>= 1n;
    sn >>= 1n;
  }
  return sn === 0n && equalBytes(fr, firstRoot) && equalBytes(sr, secondRoot);
}

/** A hash given as 64 lowercase hex characters, or ProofError naming `what`. */
export function parseHash(text: unknown, what: string): Uint8Array {
  if (typeof text !== "string" || !/^[0-9a-f]{64}$/.test(text)) {
    throw new ProofError(`${what} must be 64 lowercase hex characters (a SHA-256 hash), got ${JSON.stringify(text)}`);
  }
  return new Uint8Array(Buffer.from(text, "hex"));
}
