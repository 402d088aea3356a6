/**
 * The stateless part of admission (docs/protocol.md 7.1 rows 1-10;
 * busguard.admission.decide.precheck and verify): what busguard decides about
 * a record before it reads any state. A sender can run it on its own record
 * before producing; the shared vectors run it against busguard's verdicts.
 */
import { payloadHash, payloadHashProblem, ReceiptError, type ReceiptReason } from "./receipt.js";
import { openEnvelope, type Envelope, type Header } from "./envelope.js";
import { canonicalPrincipal } from "./identity.js";
import { parseTimestamp } from "./timestamps.js";
import { verifySignature } from "./ed25519.js";
import { signingInput } from "./receipt.js";
import type { KeyRegistry, KeyWindow } from "./registry.js";

/** The receipt kinds busguard guards without plugins (docs/protocol.md 3.1). */
export const BUILTIN_KINDS: ReadonlySet<string> = new Set([
  "handoff",
  "ack",
  "taint-replay",
  "session-handoff",
  "compromise-notice",
  "compromise-clearance",
  "cnet.call",
  "cnet.bid",
  "cnet.award",
  "cnet.result",
]);

export const DEFAULT_MAX_AGE_MS = 300_000;
export const DEFAULT_MAX_FUTURE_MS = 30_000;
const NONCE = /^[A-Za-z0-9_-]{16,256}$/;

export function isValidNonce(nonce: string): boolean {
  return NONCE.test(nonce);
}

/** `timestamp_expired` / `timestamp_too_far_future` outside the window (both bounds inclusive), else null. */
export function checkFreshness(issuedAtMs: number, nowMs: number, maxAgeMs = DEFAULT_MAX_AGE_MS, maxFutureMs = DEFAULT_MAX_FUTURE_MS): "timestamp_expired" | "timestamp_too_far_future" | null {
  if (nowMs - issuedAtMs > maxAgeMs) return "timestamp_expired";
  if (issuedAtMs - nowMs > maxFutureMs) return "timestamp_too_far_future";
  return null;
}

/** INK `checkReplay`: nonce grammar, timestamp grammar, window, then `nonce in seen`. */
export function checkReplay(
  messageTimestamp: string,
  nonce: string,
  seen: ReadonlySet<string>,
  nowMs: number,
  maxAgeMs = DEFAULT_MAX_AGE_MS,
  maxFutureMs = DEFAULT_MAX_FUTURE_MS,
): "malformed_nonce" | "malformed_timestamp" | "timestamp_expired" | "timestamp_too_far_future" | "nonce_replay" | null {
  if (!isValidNonce(nonce)) return "malformed_nonce";
  let issued: number;
  try {
    issued = parseTimestamp(messageTimestamp);
  } catch {
    return "malformed_timestamp";
  }
  return checkFreshness(issued, nowMs, maxAgeMs, maxFutureMs) ?? (seen.has(nonce) ? "nonce_replay" : null);
}

export interface PrecheckOptions {
  readonly registry: KeyRegistry;
  readonly nowMs: number;
  readonly maxAgeMs?: number;
  readonly maxFutureMs?: number;
  readonly maxPayloadBytes?: number;
  /** the canonical principals the record's route serves; absent when it declares none */
  readonly receivers?: ReadonlySet<string>;
  readonly kinds?: ReadonlySet<string>;
}

/** The reasons of docs/protocol.md 7.1 rows 1-10: what a record earns before any state is read. */
export type PrecheckReason =
  | ReceiptReason
  | "unknown_kind"
  | "malformed_nonce"
  | "malformed_timestamp"
  | "timestamp_expired"
  | "timestamp_too_far_future"
  | "payload_hash_mismatch"
  | "unknown_sender"
  | "unknown_key"
  | "revoked_key"
  | "expired_key"
  | "wrong_receiver"
  | "bad_signature";

export type Prechecked =
  | { readonly ok: true; readonly envelope: Envelope; readonly principal: string; readonly key: KeyWindow }
  | { readonly ok: false; readonly reason: PrecheckReason; readonly detail: string; readonly receiptId: string | null };

/** Rows 1-10 of docs/protocol.md 7.1, in order: the reject busguard would give, or the key that verified. */
export function precheck(value: Uint8Array | null, headers: readonly Header[], opts: PrecheckOptions): Prechecked {
  let env: Envelope;
  try {
    env = openEnvelope(value, headers, opts.maxPayloadBytes);
  } catch (exc) {
    if (exc instanceof ReceiptError) return { ok: false, reason: exc.reason, detail: exc.detail, receiptId: null };
    throw exc;
  }
  const refuse = (reason: PrecheckReason, detail: string): Prechecked => ({ ok: false, reason, detail, receiptId: env.receiptId });
  const r = env.receipt;
  if (!(opts.kinds ?? BUILTIN_KINDS).has(r.kind)) return refuse("unknown_kind", `kind ${JSON.stringify(r.kind.slice(0, 64))} is not one busguard guards`);
  let principal: string;
  try {
    principal = canonicalPrincipal(r.sender);
    canonicalPrincipal(r.receiver);
  } catch (exc) {
    return refuse("malformed_agent_id", (exc as Error).message);
  }
  if (!isValidNonce(r.nonce)) return refuse("malformed_nonce", "nonce must be 16-256 characters of [A-Za-z0-9_-]");
  let issued: number;
  try {
    issued = parseTimestamp(r.issued_at);
  } catch (exc) {
    return refuse("malformed_timestamp", (exc as Error).message);
  }
  const stale = checkFreshness(issued, opts.nowMs, opts.maxAgeMs, opts.maxFutureMs);
  if (stale === "timestamp_expired") return refuse(stale, `issued_at ${r.issued_at} is ${opts.nowMs - issued} ms old`);
  if (stale !== null) return refuse(stale, `issued_at ${r.issued_at} is ${issued - opts.nowMs} ms ahead of the receiver clock`);
  if (payloadHash(env.payload) !== r.payload_hash) {
    const malformed = payloadHashProblem(r.payload_hash);
    return malformed !== null ? refuse("malformed_field", malformed) : refuse("payload_hash_mismatch", "SHA-256 of the record value differs from payload_hash");
  }
  const found = opts.registry.lookup(principal, r.key_id, opts.nowMs);
  if ("reason" in found) return refuse(found.reason, found.detail);
  if (opts.receivers !== undefined && !opts.receivers.has(canonicalPrincipal(r.receiver))) {
    return refuse("wrong_receiver", `receiver ${JSON.stringify(r.receiver.slice(0, 128))} is not one this route serves`);
  }
  const message = signingInput(env.receiptBytes);
  for (const key of found.keys) {
    if (verifySignature(key.public_key, message, env.signature)) return { ok: true, envelope: env, principal, key };
  }
  return refuse("bad_signature", "the signature does not verify with any usable key of the sender");
}
