/**
 * From a Kafka record to a parsed, not yet verified, receipt
 * (docs/protocol.md 2; busguard.protocol.envelope). Every way it can be
 * wrong maps to one reason code.
 */
import { ReceiptError, decodeReceipt, receiptId, type Receipt } from "./receipt.js";
import { asciiOrNull, b64urlDecodeStrict } from "./bytes.js";

/** A Kafka header: its name, and its value (`null` when Kafka carries none). */
export type Header = readonly [name: string, value: Uint8Array | null];

export const HEADER_RECEIPT = "busguard-receipt";
export const HEADER_SIGNATURE = "busguard-signature";
export const RESERVED_PREFIX = "busguard-";
export const DEFAULT_MAX_PAYLOAD_BYTES = 1_048_576;

export interface Envelope {
  readonly receipt: Receipt;
  readonly receiptBytes: Uint8Array;
  readonly signature: Uint8Array;
  readonly receiptId: string;
  readonly payload: Uint8Array;
}

const SIGNATURE_SHAPE = `${HEADER_SIGNATURE} must be 86 characters of canonical unpadded base64url (64 bytes)`;
const SIGNATURE = /^[A-Za-z0-9_-]{85}[AQgw]$/;
const EMPTY = new Uint8Array(0);

/** Envelope checks 1-7 of docs/protocol.md 2, in order; ReceiptError carries the reason. */
export function openEnvelope(value: Uint8Array | null, headers: readonly Header[], maxPayloadBytes = DEFAULT_MAX_PAYLOAD_BYTES): Envelope {
  if (value === null) throw new ReceiptError("missing_field", "record has a null value; the payload is required (it may be empty)");
  if (value.length > maxPayloadBytes) throw new ReceiptError("oversized", `payload is ${value.length} bytes; at most ${maxPayloadBytes} allowed`);
  let receipt: Uint8Array | undefined;
  let signature: Uint8Array | undefined;
  for (const [name, v] of headers) {
    if (name === HEADER_RECEIPT) {
      if (receipt !== undefined) throw new ReceiptError("duplicate_header", `header '${HEADER_RECEIPT}' appears more than once`);
      receipt = v ?? EMPTY;
    } else if (name === HEADER_SIGNATURE) {
      if (signature !== undefined) throw new ReceiptError("duplicate_header", `header '${HEADER_SIGNATURE}' appears more than once`);
      signature = v ?? EMPTY;
    } else if (name.slice(0, 9).toLowerCase() === RESERVED_PREFIX) {
      throw new ReceiptError("reserved_header", `header ${JSON.stringify(name.slice(0, 128))} is reserved for busguard's own output`);
    }
  }
  if (receipt === undefined) throw new ReceiptError("missing_header", `header '${HEADER_RECEIPT}' is required`);
  if (signature === undefined) throw new ReceiptError("missing_header", `header '${HEADER_SIGNATURE}' is required`);
  const text = asciiOrNull(signature);
  if (text === null || !SIGNATURE.test(text)) throw new ReceiptError("bad_base64", SIGNATURE_SHAPE);
  const sig = b64urlDecodeStrict(text, 64);
  return { receipt: decodeReceipt(receipt), receiptBytes: receipt, signature: sig, receiptId: receiptId(receipt), payload: value };
}
