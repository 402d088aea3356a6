/**
 * Build and sign receipts as docs/protocol.md specifies (busguard.sdk.sender.Sender):
 * the payload is never touched, and the receipt is signed over the exact
 * bytes put in the header. With a session path the sender stamps
 * `session_id` and `sequence` (a crash-recovery resend is then a provable
 * retransmission); without one it emits legacy nonce-only receipts.
 */
import { b64urlEncode, utf8 } from "./bytes.js";
import { Signer, randomBytes } from "./ed25519.js";
import { HEADER_RECEIPT, HEADER_SIGNATURE, type Header } from "./envelope.js";
import { agentIdForKey } from "./identity.js";
import { RECEIPT_VERSION, encodeReceipt, payloadHash, receiptId, signingInput, type Receipt } from "./receipt.js";
import { SessionAllocator } from "./session.js";
import { formatTimestamp } from "./timestamps.js";

export interface SignedRecord {
  readonly value: Uint8Array;
  readonly headers: Header[];
  readonly receipt: Receipt;
  readonly receiptBytes: Uint8Array;
  readonly receiptId: string;
}

/** 128 random bits as 22 base64url characters, fresh per receipt. */
export function newNonce(): string {
  return b64urlEncode(randomBytes(16));
}

export interface SenderOptions {
  /** default: `tulpa:` + the key's multikey (self-certifying) */
  readonly agentId?: string;
  readonly keyId?: string;
  /** the session file; without it, legacy nonce-only receipts */
  readonly sessionPath?: string;
  readonly reserveBlock?: number;
  readonly clockMs?: () => number;
}

export interface SignArgs {
  readonly kind: string;
  readonly taskId: string;
  readonly receiver: string;
  readonly payload: Uint8Array;
  readonly nonce?: string;
  readonly issuedAtMs?: number;
  readonly extraHeaders?: readonly Header[];
}

export class Sender {
  readonly publicKey: Uint8Array;
  readonly agentId: string;
  readonly keyId: string | undefined;
  readonly session: SessionAllocator | undefined;
  readonly #signer: Signer;
  readonly #clockMs: () => number;

  constructor(seed: Uint8Array, opts: SenderOptions = {}) {
    this.#signer = new Signer(seed);
    this.publicKey = this.#signer.publicKey;
    this.agentId = opts.agentId ?? agentIdForKey(this.publicKey);
    this.keyId = opts.keyId;
    this.session = opts.sessionPath === undefined ? undefined : new SessionAllocator(opts.sessionPath, opts.reserveBlock);
    this.#clockMs = opts.clockMs ?? Date.now;
  }

  sign(args: SignArgs): SignedRecord {
    const receipt: Receipt = {
      v: RECEIPT_VERSION,
      kind: args.kind,
      task_id: args.taskId,
      sender: this.agentId,
      receiver: args.receiver,
      payload_hash: payloadHash(args.payload),
      nonce: args.nonce ?? newNonce(),
      issued_at: formatTimestamp(args.issuedAtMs ?? this.#clockMs()),
      session_id: this.session?.sessionId,
      sequence: this.session?.next(),
      key_id: this.keyId,
    };
    return this.signReceipt(receipt, args.payload, args.extraHeaders);
  }

  /** Sign an already-built receipt (e.g. one re-derived from a journal). */
  signReceipt(receipt: Receipt, payload: Uint8Array, extraHeaders: readonly Header[] = []): SignedRecord {
    const raw = encodeReceipt(receipt);
    const signature = this.#signer.sign(signingInput(raw));
    return {
      value: payload,
      headers: [[HEADER_RECEIPT, raw], [HEADER_SIGNATURE, utf8(b64urlEncode(signature))], ...extraHeaders],
      receipt,
      receiptBytes: raw,
      receiptId: receiptId(raw),
    };
  }
}
