/**
 * Ed25519 through libsodium itself (libsodium-wrappers-sumo, libsodium compiled to
 * WebAssembly): busguard verifies with libsodium's strict verifier (PyNaCl),
 * so using the same library makes the two agree by construction on every
 * edge case (non-canonical S, R or A, small-order points). The shared
 * Wycheproof vectors pin it (test/vectors.test.ts).
 *
 * The module waits for libsodium's initialisation once, at import (top-level
 * await), so every function here is synchronous. Booleans, never exceptions,
 * for verification: it runs on untrusted input.
 */
import sodium from "libsodium-wrappers-sumo";

await sodium.ready;

export const PUBLIC_KEY_BYTES = 32;
export const SEED_BYTES = 32;
export const SIGNATURE_BYTES = 64;

/** True iff `signature` is a valid strict Ed25519 signature of `message` by `publicKey`. */
export function verifySignature(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): boolean {
  if (publicKey.length !== PUBLIC_KEY_BYTES || signature.length !== SIGNATURE_BYTES) return false;
  try {
    return sodium.crypto_sign_verify_detached(signature, message, publicKey);
  } catch {
    return false;
  }
}

/**
 * True iff `publicKey` may be an identity: canonical, on the curve, of large
 * prime order (libsodium's `crypto_core_ed25519_is_valid_point`, as
 * busguard's `is_acceptable_public_key`).
 */
export function isAcceptablePublicKey(publicKey: Uint8Array): boolean {
  if (publicKey.length !== PUBLIC_KEY_BYTES) return false;
  try {
    return sodium.crypto_core_ed25519_is_valid_point(publicKey);
  } catch {
    return false;
  }
}

export function publicKeyFromSeed(seed: Uint8Array): Uint8Array {
  if (seed.length !== SEED_BYTES) throw new Error(`Ed25519 seed must be ${SEED_BYTES} bytes, got ${seed.length}`);
  return sodium.crypto_sign_seed_keypair(seed).publicKey;
}

/** A key expanded once (the seed is the RFC 8032 private key). Signing is deterministic. */
export class Signer {
  readonly publicKey: Uint8Array;
  readonly #secretKey: Uint8Array;

  constructor(seed: Uint8Array) {
    if (seed.length !== SEED_BYTES) throw new Error(`Ed25519 seed must be ${SEED_BYTES} bytes, got ${seed.length}`);
    const pair = sodium.crypto_sign_seed_keypair(seed);
    this.publicKey = pair.publicKey;
    this.#secretKey = pair.privateKey;
  }

  sign(message: Uint8Array): Uint8Array {
    return sodium.crypto_sign_detached(message, this.#secretKey);
  }
}

export function randomBytes(n: number): Uint8Array {
  return sodium.randombytes_buf(n);
}
