/**
 * busguard's agent SDK for TypeScript: the pure protocol core, byte-compatible
 * with the Python `busguard.sdk` (docs/sdk.md, "TypeScript"). Importing it
 * waits once for libsodium's WebAssembly to initialise.
 */
export * from "./bytes.js";
export { PUBLIC_KEY_BYTES, SEED_BYTES, SIGNATURE_BYTES, Signer, isAcceptablePublicKey, publicKeyFromSeed, verifySignature } from "./ed25519.js";
export * from "./identity.js";
export * from "./timestamps.js";
export {
  MAX_RECEIPT_BYTES,
  MAX_SEQUENCE,
  RECEIPT_VERSION,
  ReceiptError,
  SIGNING_CONTEXT,
  decodeReceipt,
  encodeReceipt,
  payloadHash,
  receiptId,
  signingInput,
  type Receipt,
  type ReceiptReason,
} from "./receipt.js";
export * from "./envelope.js";
export * from "./records.js";
export * from "./merkle.js";
export * from "./treehead.js";
export {
  ATTESTATION_CONTEXT,
  AttestationError,
  HEADER_ANNOTATION_PREFIX,
  HEADER_ATTESTATION,
  HEADER_DECISION_ID,
  HEADER_SEAL,
  HeadCache,
  InclusionError,
  annotationsSha256,
  checkAdmitted,
  checkAnnotations,
  checkReceiver,
  decodeAttestation,
  openAttestation,
  openSealed,
  verifyAdmitted,
  verifyDecisionRecord,
  checkDecisionRecord,
  carriedMismatch,
  type Attestation,
  type Opened,
} from "./attestation.js";
export * from "./auditbatch.js";
export * from "./registry.js";
export * from "./precheck.js";
export * from "./consumer.js";
export * from "./guardkey.js";
export * from "./session.js";
export * from "./sender.js";
export { canonicalize } from "./jcs.js";
export * from "./doneset.js";
export * from "./once.js";
export * from "./pgdoneset.js";
export { AdmittingConsumer, type OpenOptions } from "./kafka/inbox.js";
export { SigningProducer, kafkaHeaders, type OutgoingRecord, type ProducerOptions } from "./kafka/producer.js";
export { DEFAULT_MAX_INFLATED_BYTES, decodePartition, type AbortedTransaction, type Decoded } from "./kafka/decode.js";
export * from "./readers/taint.js";
export * from "./readers/award.js";
export * from "./readers/scope.js";
export * from "./readers/compromise.js";
