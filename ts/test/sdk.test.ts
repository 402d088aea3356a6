/**
 * The SDK's own behaviour beyond the shared vectors: the sender's bytes are
 * the Python SDK's (the worked example of docs/protocol.md 9, re-signed),
 * the crash-safe session file, the head cache's bound, and the admitting
 * decision's totality (no record's bytes make `admit` throw).
 */
import { strict as assert } from "node:assert";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import {
  Admitter,
  HeadCache,
  Sender,
  SessionAllocator,
  b64Decode,
  decisionId,
  decodeReceipt,
  encodeReceipt,
  formatTimestamp,
  fromHex,
  guardKeyFromMultikey,
  multikeyEncode,
  openEnvelope,
  parseTimestamp,
  publicKeyFromSeed,
  toHex,
  utf8,
  verifySignature,
  signingInput,
  type Header,
} from "../src/index.js";
import { VECTORS } from "./verdicts.js";

interface ValidVector {
  name: string;
  signer: string;
  headers: Array<[string, string]>;
  value_b64: string;
  receipt_text: string;
  signature_b64url: string;
}
interface ValidDoc {
  signers: Record<string, { seed_hex: string; public_key_hex: string }>;
  vectors: ValidVector[];
}
const VALID = JSON.parse(readFileSync(join(VECTORS, "valid.json"), "utf8")) as ValidDoc;
const WORKED = VALID.vectors.find((v) => v.name === "named_agent_handoff_with_session_and_key_id") as ValidVector;

void test("the sender re-signs the worked example byte for byte (docs/protocol.md 9)", () => {
  const seed = fromHex((VALID.signers[WORKED.signer] as { seed_hex: string }).seed_hex);
  const raw = utf8(WORKED.receipt_text);
  const receipt = decodeReceipt(raw);
  assert.equal(toHex(encodeReceipt(receipt)), toHex(raw), "the SDK form is compact JSON in field order");
  const signed = new Sender(seed, { agentId: "planner", keyId: "2026-q4" }).signReceipt(receipt, b64Decode(WORKED.value_b64));
  assert.equal(new TextDecoder().decode(signed.headers[1]?.[1] ?? new Uint8Array(0)), WORKED.signature_b64url);
  assert.equal(signed.receiptId, "89e0197051a34a1a74f9b9f627bcd58016276316f76912b97bee526790357857");
  assert.equal(decisionId("busguard", "agents.in", 0, 0), "738bbc767cb023bb0000000000000000");
});

void test("a session sender stamps increasing sequences, and a restart jumps past the reserved block", () => {
  const dir = mkdtempSync(join(tmpdir(), "busguard-ts-"));
  const path = join(dir, "state", "session.json");
  const seed = new Uint8Array(32).fill(7);
  const first = new Sender(seed, { sessionPath: path, reserveBlock: 4 });
  const sent = [0, 1, 2, 3, 4].map(() => first.sign({ kind: "handoff", taskId: "t", receiver: "executor", payload: utf8("{}") }));
  assert.deepEqual(sent.map((s) => s.receipt.sequence), [0n, 1n, 2n, 3n, 4n]);
  const state = JSON.parse(readFileSync(path, "utf8")) as { v: number; session_id: string; reserved_through: number };
  assert.deepEqual(state, { v: 1, session_id: first.session?.sessionId, reserved_through: 7 });
  const again = new Sender(seed, { sessionPath: path, reserveBlock: 4 });
  assert.equal(again.session?.sessionId, first.session?.sessionId);
  assert.equal(again.sign({ kind: "ack", taskId: "t", receiver: "executor", payload: new Uint8Array(0) }).receipt.sequence, 8n);
  for (const s of sent) {
    const env = openEnvelope(s.value, s.headers);
    assert.ok(verifySignature(first.publicKey, signingInput(env.receiptBytes), env.signature));
    assert.equal(env.receipt.session_id, first.session?.sessionId);
  }
  writeFileSync(path, '{"v":1,"session_id":"s","reserved_through":3,"extra":1}');
  assert.throws(() => new SessionAllocator(path), /not a session file/);
});

void test("a sender without a session writes legacy receipts: no session_id, no sequence", () => {
  const s = new Sender(new Uint8Array(32).fill(9), { clockMs: () => 1_764_417_600_123 });
  const signed = s.sign({ kind: "handoff", taskId: "t", receiver: "executor", payload: utf8("x"), nonce: "AAAAAAAAAAAAAAAAAAAAAA" });
  const text = new TextDecoder().decode(signed.receiptBytes);
  assert.ok(!text.includes("session_id") && !text.includes("sequence"));
  assert.equal(signed.receipt.issued_at, "2025-11-29T12:00:00.123Z");
  assert.equal(s.agentId, "tulpa:" + multikeyEncode(s.publicKey));
});

void test("timestamps: format and parse invert each other across the four-digit years", () => {
  for (const ms of [0, -1, 1_764_417_600_123, -62_167_219_200_000, 253_402_300_799_999]) {
    assert.equal(parseTimestamp(formatTimestamp(ms)), ms);
  }
  assert.throws(() => formatTimestamp(253_402_300_800_000), /outside/);
});

void test("the guard key: every spelling busguard accepts, nothing else", () => {
  const pk = publicKeyFromSeed(new Uint8Array(32).fill(1));
  const mk = multikeyEncode(pk);
  for (const text of [mk, "tulpa:" + mk, "ink:" + mk]) assert.equal(toHex(guardKeyFromMultikey(text)), toHex(pk));
  assert.throws(() => guardKeyFromMultikey("z6Mk-not-a-key"), /not a canonical Ed25519 multikey/);
  assert.throws(() => guardKeyFromMultikey(multikeyEncode(new Uint8Array(32))), /large prime order/);
});

void test("the head cache keeps at most its capacity, oldest first out", () => {
  const cache = new HeadCache(2);
  const head = { v: 1, guard: "g", chain: "c", seq: 0, prev: null, size: 1, root: "0".repeat(64), sealed_at: 0n } as const;
  const k = new Uint8Array(32);
  for (const i of [1, 2, 3]) cache.add(k, new Uint8Array([i]), new Uint8Array([i]), head);
  assert.equal(cache.size, 2);
  assert.equal(cache.get(k, new Uint8Array([1]), new Uint8Array([1])), undefined);
  assert.ok(cache.get(k, new Uint8Array([3]), new Uint8Array([3])) !== undefined);
});

void test("admit decides every record, whatever its bytes, and never throws", () => {
  const admitter = new Admitter({ guardPublicKey: publicKeyFromSeed(new Uint8Array(32).fill(2)), agentId: "executor" });
  const names = ["busguard-receipt", "busguard-attestation", "busguard-seal", "busguard-tree-head", "busguard-head-seal", "busguard-inclusion", "busguard-decision-id", "x"];
  for (let round = 0; round < 300; round++) {
    const headers: Header[] = [];
    for (let i = 0; i < (round % 7); i++) {
      const value = round % 11 === 0 ? null : new Uint8Array(randomBytes(round % 97));
      headers.push([names[(round * 7 + i) % names.length] as string, value]);
    }
    const batch = admitter.admit([{ topic: "t", partition: 0, offset: BigInt(round), value: round % 5 === 0 ? null : new Uint8Array(randomBytes(round % 13)), headers }]);
    assert.equal(batch.deliveries.length + batch.refusals.length, 1);
    assert.equal(batch.positions.get("t\u00000")?.offset, BigInt(round) + 1n);
  }
});
