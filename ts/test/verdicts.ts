/**
 * One verdict per case of every shared vector file (tests/vectors/**), computed
 * by this package, and every difference from what the file itself expects.
 *
 * The node tests (vectors.test.ts) fail on any difference from the file; the
 * Python test tests/unit/test_ts_vectors.py runs `verdicts-cli.js` and fails
 * on any difference from busguard's own verdict for the same case, so the two
 * languages cannot drift apart unnoticed. Files this package does not read
 * yet are listed in NOT_YET, with why; the Python test checks that every
 * other vector file is here.
 */
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import {
  Admitter,
  AttestationError,
  InclusionError,
  KeyRegistry,
  ProofError,
  ReceiptError,
  Signer,
  UNATTESTED,
  annotationsSha256,
  b64Decode,
  b64Encode,
  b64urlDecodeStrict,
  b64urlEncode,
  canonicalPrincipal,
  canonicalize,
  checkAdmitted,
  checkDecisionRecord,
  checkReplay,
  decodeReceipt,
  decodeHead,
  expand,
  fromHex,
  headDigest,
  headMessage,
  headersEncoding,
  included,
  isBatch,
  decodePartition,
  readPlan,
  CNET_READERS,
  HANDOFF_KIND,
  MessageError,
  handoffReader,
  handoffReaders,
  registryKeys,
  type CnetView,
  type HandoffView,
  type Delivery,
  leafHash,
  merkleRoot,
  multikeyDecode,
  openAttestation,
  openSealed,
  pack,
  parseHash,
  parseTimestamp,
  precheck,
  receiptId,
  sha256Hex,
  signingInput,
  toHex,
  utf8,
  verifyConsistency,
  verifyInclusion,
  verifySignature,
  type Fetched,
  type Header,
  type Reader,
  type Undecodable,
  type Prechecked,
  type RegistryFile,
} from "../src/index.js";

export type Verdict = string | number | boolean | null | Verdict[] | { [key: string]: Verdict };
export interface FileResult {
  readonly verdicts: Record<string, Verdict>;
  /** every case whose verdict differs from what the file expects */
  readonly mismatches: string[];
}

/** Vector files this package does not judge, and why. */
export const NOT_YET: Readonly<Record<string, string>> = {
  "cnet/cnet.json": "the contract-net policy's scenarios (section 15, guard side); the readers are judged on readers/award.json",
  "compromise/compromise.json": "the compromise policy's scenarios (section 14, guard side); the handoff reader is judged on readers/compromise-handoff.json",
  "taint_replay.json": "the taint-replay policy's requests (section 13, guard side); the plan reader is judged on readers/taint-plan.json",
};

const HERE = dirname(fileURLToPath(import.meta.url));
export const VECTORS = resolve(process.env["BUSGUARD_VECTORS"] ?? join(HERE, "..", "..", "..", "tests", "vectors"));

// The vector files are JSON of known shapes; these views name what is read.
/* eslint-disable @typescript-eslint/no-unsafe-member-access, @typescript-eslint/no-unsafe-assignment, @typescript-eslint/no-unsafe-argument, @typescript-eslint/no-unsafe-call */
type Json = ReturnType<typeof JSON.parse>;

function load(relative: string): Json {
  return JSON.parse(readFileSync(join(VECTORS, relative), "utf8"));
}

function headersOf(list: Array<[string, string | null]>): Header[] {
  return list.map(([k, v]) => [k, v === null ? null : b64Decode(v)] as const);
}

function valueOf(v: string | null): Uint8Array | null {
  return v === null ? null : b64Decode(v);
}

class Collector {
  readonly verdicts: Record<string, Verdict> = {};
  readonly mismatches: string[] = [];

  put(id: string, verdict: Verdict, expected?: Verdict): void {
    if (id in this.verdicts) throw new Error(`duplicate case id ${id}`);
    this.verdicts[id] = verdict;
    if (expected !== undefined && JSON.stringify(verdict) !== JSON.stringify(expected)) {
      this.mismatches.push(`${id}: got ${JSON.stringify(verdict)}, the file expects ${JSON.stringify(expected)}`);
    }
  }

  result(): FileResult {
    return { verdicts: this.verdicts, mismatches: this.mismatches };
  }
}

function wycheproof(): FileResult {
  const c = new Collector();
  for (const group of load("external/wycheproof/ed25519_test.json").testGroups) {
    const pk = fromHex(group.publicKey.pk);
    for (const t of group.tests) {
      const ok = verifySignature(pk, fromHex(t.msg), fromHex(t.sig));
      c.put(`tcId${t.tcId}`, ok ? "valid" : "invalid", t.result);
    }
  }
  return c.result();
}

function inkPrincipal(): FileResult {
  const c = new Collector();
  for (const k of load("external/ink/principal-normalization.json").cases) {
    let got: string;
    try {
      got = canonicalPrincipal(k.input.agentId);
    } catch {
      got = "reject";
    }
    c.put(k.caseId, got, k.expect.result === "reject" ? "reject" : k.expect.canonicalPrincipal);
  }
  return c.result();
}

function inkTimestamp(): FileResult {
  const c = new Collector();
  for (const k of load("external/ink/timestamp-validity.json").cases) {
    let got: Verdict;
    try {
      got = parseTimestamp(k.input.timestamp);
    } catch {
      got = "reject";
    }
    c.put(k.caseId, got, k.expect.result === "reject" ? "reject" : k.expect.epochMs);
  }
  return c.result();
}

function inkReplay(): FileResult {
  const c = new Collector();
  for (const k of load("external/ink/replay-freshness.json").cases) {
    const r = k.input.replay;
    const reason = checkReplay(r.messageTimestamp, r.nonce, new Set<string>(r.previouslySeenNonces), parseTimestamp(r.receiverClock));
    const got = reason ?? "accept";
    c.put(k.caseId, got, k.expect.result === "accept" ? "accept" : got === "accept" ? "a reason" : got);
  }
  return c.result();
}

function consistency(first: number, second: number, firstRoot: string, secondRoot: string, proof: string[]): string {
  try {
    const path = proof.map((h, n) => parseHash(h, `proof[${n}]`));
    return verifyConsistency(first, second, parseHash(firstRoot, "firstRoot"), parseHash(secondRoot, "secondRoot"), path) ? "accept" : "reject";
  } catch (exc) {
    if (exc instanceof ProofError) return "reject";
    throw exc;
  }
}

function inkMerkle(): FileResult {
  const c = new Collector();
  for (const k of load("external/ink/merkle-consistency.json").cases) {
    const i = k.input;
    c.put(k.caseId, consistency(i.first, i.second, i.firstRoot, i.secondRoot, i.proof), k.expect.result);
  }
  return c.result();
}

function jcs(): FileResult {
  const c = new Collector();
  for (const name of readdirSync(join(VECTORS, "external/jcs/input")).sort()) {
    const got = toHex(canonicalize(readFileSync(join(VECTORS, "external/jcs/input", name), "utf8")));
    const want = readFileSync(join(VECTORS, "external/jcs/outhex", name.replace(/\.json$/, ".txt")), "utf8").replace(/\s+/g, "").toLowerCase();
    c.put(name, got, want);
  }
  return c.result();
}

function merkleSha256(): FileResult {
  const c = new Collector();
  const doc = load("merkle/merkle-sha256.json");
  for (const t of doc.trees) {
    const records: unknown[] = JSON.parse(new TextDecoder().decode(fromHex(t.outputHex)));
    const leaves = records.map((r) => leafHash(canonicalize(JSON.stringify(r))));
    c.put(`trees/${t.caseId}`, toHex(merkleRoot(leaves)), t.root);
  }
  for (const t of doc.inclusion) {
    let got: string;
    try {
      got = verifyInclusion(t.leafIndex, t.treeSize, fromHex(t.leafHash), t.proof.map(fromHex), fromHex(t.root)) ? "accept" : "reject";
    } catch (exc) {
      if (!(exc instanceof ProofError)) throw exc;
      got = "reject";
    }
    c.put(`inclusion/${t.caseId}`, got, t.expect);
  }
  for (const t of doc.consistency) c.put(`consistency/${t.caseId}`, consistency(t.first, t.second, t.firstRoot, t.secondRoot, t.proof), t.expect);
  return c.result();
}

/** The reasons of docs/protocol.md 7.1 rows 1-10: what a record earns before any state is read. */
export const STATELESS_REASONS: ReadonlySet<string> = new Set([
  "missing_field", "oversized", "duplicate_header", "reserved_header", "missing_header", "bad_base64", "not_json", "wrong_type",
  "unknown_field", "duplicate_key", "unsupported_version", "malformed_field", "malformed_agent_id", "malformed_session", "unknown_kind",
  "malformed_nonce", "malformed_timestamp", "timestamp_expired", "timestamp_too_far_future", "payload_hash_mismatch", "unknown_sender",
  "unknown_key", "revoked_key", "expired_key", "wrong_receiver", "bad_signature",
]);

function verdictOf(p: Prechecked): string {
  return p.ok ? `verified ${p.principal} ${p.key.key_id}` : p.reason;
}

function admission(name: "valid.json" | "invalid.json" | "sequences.json"): FileResult {
  const c = new Collector();
  const doc = load(name);
  const registry = KeyRegistry.fromEntries(doc.registry as RegistryFile, name);
  const run = (vec: Json, now: string, policy: Json): Prechecked =>
    precheck(valueOf(vec.value_b64), headersOf(vec.headers), {
      registry,
      nowMs: parseTimestamp(now),
      maxAgeMs: policy.max_age_ms,
      maxFutureMs: policy.max_future_ms,
      maxPayloadBytes: vec.max_payload_bytes ?? doc.max_payload_bytes,
      ...(vec.receivers === undefined ? {} : { receivers: new Set((vec.receivers as string[]).map(canonicalPrincipal)) }),
    });
  if (name === "sequences.json") {
    for (const s of doc.scenarios) {
      const policy = { ...doc.policy, ...(s.policy ?? {}) };
      s.steps.forEach((step: Json, i: number) => {
        const got = run(step, step.now ?? doc.now, policy);
        const want = STATELESS_REASONS.has(step.expect.reason) ? step.expect.reason : undefined;
        c.put(`${s.name}#${i}`, verdictOf(got), want ?? (got.ok ? verdictOf(got) : "verified"));
      });
    }
    return c.result();
  }
  for (const vec of doc.vectors) {
    const got = run(vec, doc.now, doc.policy);
    if (name === "invalid.json") {
      c.put(vec.name, verdictOf(got), vec.expect.reason);
      continue;
    }
    const headers = headersOf(vec.headers);
    const raw = headers.find(([k]) => k === "busguard-receipt")?.[1] ?? new Uint8Array(0);
    const seed = fromHex(doc.signers[vec.signer].seed_hex);
    const resigned = b64urlEncode(new Signer(seed).sign(signingInput(raw)));
    c.put(
      vec.name,
      { receipt_id: receiptId(raw), signing_input_hex: toHex(signingInput(raw)), signature_b64url: resigned, precheck: verdictOf(got) },
      {
        receipt_id: vec.receipt_id,
        signing_input_hex: vec.signing_input_hex,
        signature_b64url: vec.signature_b64url,
        precheck: `verified ${vec.expect.principal} ${vec.expect.key_id}`,
      },
    );
  }
  return c.result();
}

function receipts(): FileResult {
  const c = new Collector();
  for (const v of load("receipts/receipts.json").vectors) {
    const raw = b64Decode(v.receipt_b64);
    let got: Verdict;
    try {
      decodeReceipt(raw);
      got = { reason: "ok", receipt_id: receiptId(raw) };
    } catch (exc) {
      if (!(exc instanceof ReceiptError)) throw exc;
      got = { reason: exc.reason };
    }
    c.put(v.name, got, v.expect);
  }
  return c.result();
}

/** An admitting consumer's decision on a fetch in consumer.json's form (records, readers, guard key, agent id). */
export function decideFetch(doc: Json): Verdict {
  const readers = new Map<string, Reader<unknown>>();
  for (const [kind, what] of Object.entries(doc.readers as Record<string, string>)) {
    if (what === "refuse") {
      readers.set(kind, () => {
        throw new Error("this fetch's reader refuses every payload of its kind");
      });
    }
  }
  const admitter = new Admitter({ guardPublicKey: fromHex(doc.guard.public_key_hex), agentId: doc.agent_id, readers });
  const fetched: Array<Fetched | Undecodable> = (doc.records as Json[]).map((r: Json) =>
    "undecodable" in r
      ? {
          undecodable: r.undecodable,
          topic: r.topic,
          partition: r.partition,
          offset: BigInt(r.offset),
          detail: r.detail,
          ...(r.last_offset === null ? {} : { lastOffset: BigInt(r.last_offset) }),
        }
      : { topic: r.topic, partition: r.partition, offset: BigInt(r.offset), value: valueOf(r.value_b64), headers: headersOf(r.headers) },
  );
  const batch = admitter.admit(fetched);
  return {
    deliveries: batch.deliveries.map((d) => ({
      partition: d.partition,
      offset: Number(d.offset),
      decision_id: d.decision_id,
      task_id: d.receipt.task_id,
      payload_b64: b64Encode(d.payload),
      annotations: { ...d.annotations },
    })),
    refusals: batch.refusals.map((r) => ({
      partition: r.partition,
      offset: Number(r.offset),
      reason: r.reason,
      ...(r.reason === "undecodable" ? { detail: r.detail } : {}),
      ...(r.last_offset === undefined ? {} : { last_offset: Number(r.last_offset) }),
    })),
    positions: [...batch.positions.values()]
      .sort((a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition)
      .map((p) => [p.topic, p.partition, Number(p.offset)]),
  };
}

function consumer(): FileResult {
  const c = new Collector();
  const doc = load("consumer/consumer.json");
  c.put("fetch", decideFetch(doc), doc.expect);
  return c.result();
}

function treeHeads(): FileResult {
  const c = new Collector();
  const doc = load("treehead/tree-heads.json");
  const key = fromHex(doc.public_key_hex);
  doc.heads.forEach((h: Json, i: number) => {
    const raw = utf8(h.head);
    const head = decodeHead(raw);
    const seal = verifySignature(key, headMessage(raw), b64urlDecodeStrict(h.head_seal, 64));
    const leaves = (h.attestations as string[]).map((a, j) => {
      try {
        return included(utf8(a), head, fromHex(h.inclusion_hex[j]));
      } catch {
        return "refused";
      }
    });
    c.put(`head${i}`, { head_sha256: headDigest(raw), seal, leaves }, { head_sha256: h.head_sha256, seal: true, leaves: leaves.map((_, j) => j) });
  });
  return c.result();
}

function annotations(): FileResult {
  const c = new Collector();
  const doc = load("annotations/annotations.json");
  const admitter = new Admitter({ guardPublicKey: fromHex(doc.guard.public_key_hex), agentId: doc.receiver });
  for (const v of doc.vectors) {
    const headers = headersOf(v.headers);
    const batch = admitter.admit([{ topic: "out", partition: 0, offset: 0n, value: valueOf(v.value_b64), headers }]);
    const d = batch.deliveries[0];
    const got: Record<string, Verdict> = d !== undefined ? { receiver: "admitted", annotations: { ...d.annotations } } : { receiver: batch.refusals.map((r) => r.reason).join(",") };
    const want: Record<string, Verdict> =
      v.expect.receiver === "admitted"
        ? { receiver: "admitted", annotations: Object.fromEntries((v.bound_annotations ?? []).map(([k, x]: [string, string]) => [k.replace(/^busguard-annotation-/, ""), x])) }
        : { receiver: UNATTESTED };
    if (v.bound_annotations !== undefined) {
      const bound = (v.bound_annotations as Array<[string, string]>).map(([k, x]) => [k, utf8(x)] as const);
      got["annotation_encoding_hex"] = toHex(headersEncoding(bound));
      got["annotations_sha256"] = annotationsSha256(bound);
      want["annotation_encoding_hex"] = v.annotation_encoding_hex;
      want["annotations_sha256"] = v.annotations_sha256;
    }
    c.put(v.name, got, want);
  }
  return c.result();
}

function auditVerdict(value: Uint8Array | null, headers: readonly Header[], key: Uint8Array): string {
  if (value === null) return "refused";
  try {
    checkDecisionRecord(value, headers, key);
    return "verified";
  } catch (exc) {
    if (exc instanceof InclusionError) return "bad_inclusion";
    if (exc instanceof AttestationError) return "refused";
    throw exc;
  }
}

function auditBatches(): FileResult {
  const c = new Collector();
  const doc = load("auditbatch/audit-batches.json");
  const key = fromHex(doc.guard.public_key_hex);
  for (const v of doc.vectors) {
    const got: Verdict[] = [];
    const want: Verdict[] = [];
    for (const rec of v.log) {
      const headers = headersOf(rec.headers);
      const value = valueOf(rec.value_b64);
      if (!isBatch(headers)) {
        got.push(auditVerdict(value, headers, key));
        want.push(v.expect.ok === true ? "verified" : got[got.length - 1] ?? null);
        continue;
      }
      let entries;
      try {
        entries = expand(value, headers);
      } catch {
        got.push("malformed");
        want.push(rec.entries === undefined ? "malformed" : "well-formed");
        continue;
      }
      const expanded = entries.map((e) => ({ value_b64: b64Encode(e.value), headers: e.headers.map(([k, x]) => [k, x === null ? null : b64Encode(x)]) }));
      const same = rec.entries !== undefined && JSON.stringify(expanded) === JSON.stringify(rec.entries.map((e: Json) => ({ value_b64: e.value_b64, headers: e.headers })));
      const checked = entries.map((e) => auditVerdict(e.value, e.headers, key));
      const packed = value !== null && toHex(pack(entries.map((e) => ({ decision: e.value, attestation: e.headers[0]?.[1] ?? new Uint8Array(0), inclusion: e.headers[3]?.[1] ?? new Uint8Array(0) })))) === toHex(value);
      got.push({ entries: checked, as_file: same, packs_as_file: packed });
      want.push({ entries: v.expect.ok === true ? checked.map(() => "verified") : checked, as_file: rec.entries !== undefined, packs_as_file: v.expect.ok === true ? true : packed });
    }
    c.put(v.name, got, want);
  }
  return c.result();
}

function carried(): FileResult {
  const c = new Collector();
  const doc = load("carried/carried.json");
  const key = fromHex(doc.guard.public_key_hex);
  for (const v of doc.vectors) {
    const value = valueOf(v.decision_record.value_b64) ?? new Uint8Array(0);
    const audit = auditVerdict(value, headersOf(v.decision_record.headers), key);
    const body = valueOf(v.delivered.value_b64) ?? new Uint8Array(0);
    const dh = headersOf(v.delivered.headers);
    let delivered: string;
    try {
      if (v.delivered.role === "forward") {
        checkAdmitted(openAttestation(dh, key), body, dh, true);
        delivered = "ok";
      } else {
        const att = openAttestation(dh, key);
        const record = JSON.parse(new TextDecoder().decode(value));
        const notice = record.notices[0];
        const carriedOk =
          typeof notice.value === "string"
            ? notice.value === b64Encode(body)
            : notice.value_sha256 === sha256Hex(body) && notice.value_length === body.length;
        delivered = att.decision_sha256 === sha256Hex(value) && carriedOk ? "ok" : "bad";
      }
    } catch (exc) {
      if (!(exc instanceof AttestationError)) throw exc;
      delivered = "bad";
    }
    c.put(v.name, { audit_record: audit, delivered }, { audit_record: v.expect.audit_record, delivered: v.expect.delivered });
  }
  return c.result();
}

function resolutions(): FileResult {
  const c = new Collector();
  const doc = load("resolutions.json");
  const keys = { guard: multikeyDecode(doc.guard_public_key), reconciler: multikeyDecode(doc.reconciler_public_key) };
  const opens = (rec: Json): Verdict => {
    const out: Record<string, Verdict> = {};
    for (const [who, key] of Object.entries(keys)) {
      try {
        openSealed(headersOf(rec.headers), key);
        out[who] = true;
      } catch (exc) {
        if (!(exc instanceof AttestationError)) throw exc;
        out[who] = false;
      }
    }
    return out;
  };
  // the log is guard-sealed decision records: each opens with the guard's key alone
  doc.log.forEach((rec: Json, i: number) => c.put(`log${i}`, opens(rec), { guard: true, reconciler: false }));
  doc.vectors.forEach((rec: Json, i: number) => c.put(`vector${i}`, opens(rec)));
  return c.result();
}
/** Record-batch decoding (section 2.1; src/kafka/decode.ts; read_committed where a vector lists `aborted`): every item as [first offset, last offset, what], and the next fetch offset. */
function batches(): FileResult {
  const c = new Collector();
  const doc = load("batches.json");
  for (const v of doc.vectors) {
    const fetchOffset = BigInt(v.fetch_offset as number);
    const aborted = (v.aborted as Array<[number, number]> | undefined)?.map(([p, o]) => ({ producerId: BigInt(p), firstOffset: BigInt(o) }));
    const decoded = decodePartition(doc.topic as string, doc.partition as number, fromHex(v.fetch_hex as string), fetchOffset, undefined, undefined, aborted);
    const items = decoded.items.map((i) =>
      "undecodable" in i ? [Number(i.offset), Number(i.lastOffset ?? i.offset), i.undecodable] : [Number(i.offset), Number(i.offset), "record"],
    );
    const expect = v.expect as Array<[number, number, string]>;
    const next = (v.next as number | undefined) ?? (expect.length > 0 ? (expect[expect.length - 1] as [number, number, string])[1] + 1 : Number(fetchOffset));
    c.put(v.name as string, { items, next: Number(decoded.next) }, { items: expect, next });
  }
  return c.result();
}
/** The taint-replay kind's reader on what it reads of a delivery: the view's units, or "unreadable". */
function taintPlanReader(): FileResult {
  const c = new Collector();
  for (const v of load("readers/taint-plan.json").vectors) {
    const d = {
      topic: "t",
      partition: 0,
      offset: 0n,
      decision_id: "d",
      receipt: { task_id: v.task_id, payload_hash: v.payload_hash },
      payload: b64Decode(v.value_b64 as string),
      annotations: v.annotations,
      attestation: null,
      view: undefined,
    } as unknown as Delivery;
    let verdict: Verdict;
    try {
      const view = readPlan(d);
      verdict = { task_id: view.taskId, action: view.action, unit: view.unit, units: view.units.map((u) => [u.key, u.unit, [...u.nodes], [...u.sinks]]) };
    } catch {
      verdict = "unreadable";
    }
    c.put(v.name as string, verdict, v.expect as Verdict);
  }
  return c.result();
}
/** The contract-net kinds' readers on a payload: the view as canonical JSON, or "unreadable". */
function awardReaders(): FileResult {
  const c = new Collector();
  const doc = load("readers/award.json");
  for (const v of doc.vectors) {
    const d = {
      receipt: { kind: v.kind, task_id: doc.task_id, sender: doc.sender },
      payload: b64Decode(v.payload_b64 as string),
      annotations: v.annotations,
    } as unknown as Delivery<CnetView>;
    const reader = CNET_READERS.get(v.kind as string);
    let verdict: string;
    try {
      if (reader === undefined) throw new Error("no reader");
      const view = reader(d) as unknown as Record<string, unknown>;
      const shown = "delivered" in view ? { ...view, delivered: b64Encode(view.delivered as Uint8Array) } : view;
      verdict = new TextDecoder().decode(canonicalize(JSON.stringify(shown)));
    } catch {
      verdict = "unreadable";
    }
    c.put(v.name as string, verdict, v.expect as string);
  }
  return c.result();
}
/** A handoff view as the vectors show it (generate_compromise.py `show`). */
function showHandoff(view: HandoffView): Verdict {
  const content: Record<string, string> = {};
  for (const c of view.report.checks) {
    try {
      content[c.name] = b64Encode(view.content(c.name));
    } catch (exc) {
      content[c.name] = (exc as Error).message.includes("travels by hash") ? "by_hash" : "not_usable";
    }
  }
  const r = view.report;
  return {
    handoff_id: view.handoffId,
    session: view.session,
    verdict: view.verdict,
    caution: view.caution,
    manifest_digest: view.manifestDigest,
    compromise_notices: [...view.compromiseNotices],
    replaced: view.replaced,
    usable: view.usable.map((c) => c.name),
    not_usable: [...view.notUsable],
    scope_present: r.scopePresent,
    all_verified: r.allVerified,
    checks: r.checks.map((c) => [c.name, c.sha256, c.operational, c.againstScope]),
    unverified_non_operational: r.unverifiedNonOperational.map((c) => c.name),
    content,
  };
}
/** The session-handoff reader on what it reads of a delivery, and the admitting consumer with it on whole forwards. */
function compromiseHandoffReader(): FileResult {
  const c = new Collector();
  const doc = load("readers/compromise-handoff.json");
  const now = parseTimestamp(doc.now as string);
  const keysOf = (registry: RegistryFile) => registryKeys(KeyRegistry.fromEntries(registry), () => now);
  for (const v of doc.vectors) {
    const d = {
      topic: "t",
      partition: 0,
      offset: 0n,
      decision_id: "d",
      receipt: { kind: HANDOFF_KIND, task_id: v.task_id, sender: v.sender },
      payload: b64Decode(v.value_b64 as string),
      annotations: v.annotations,
      attestation: v.replaced === true ? { forwarded_sha256: "0".repeat(64) } : {},
      view: undefined,
    } as unknown as Delivery<HandoffView>;
    let verdict: Verdict;
    try {
      verdict = showHandoff(handoffReader(keysOf(v.registry ?? doc.registry))(d));
    } catch (exc) {
      verdict = exc instanceof MessageError ? { unreadable: exc.code, where: exc.where } : { unreadable: (exc as Error).message.split(" = ")[0] ?? "", where: "annotations" };
    }
    c.put(v.name as string, verdict, v.expect as Verdict);
  }
  for (const f of doc.forwards) {
    const admitter = new Admitter({ guardPublicKey: fromHex(doc.guard_public_key_hex as string), agentId: doc.agent_id as string, readers: handoffReaders(keysOf(f.registry ?? doc.registry)) });
    const batch = admitter.admit([{ topic: "agents.handoffs", partition: 0, offset: 0n, value: b64Decode(f.value_b64 as string), headers: headersOf(f.headers) }]);
    const delivered = batch.deliveries[0];
    const refused = batch.refusals[0];
    const verdict: Verdict =
      delivered?.view !== undefined ? { view: showHandoff(delivered.view) } : { refused: refused?.reason ?? "none", detail: (refused?.detail ?? "").split(": ").slice(0, 3).join(": ") };
    c.put(`forward:${f.name as string}`, verdict, f.expect as Verdict);
  }
  return c.result();
}
/* eslint-enable @typescript-eslint/no-unsafe-member-access, @typescript-eslint/no-unsafe-assignment, @typescript-eslint/no-unsafe-argument, @typescript-eslint/no-unsafe-call */

/** Every vector file this package judges, by its path under tests/vectors. */
export const FILES: Readonly<Record<string, () => FileResult>> = {
  "external/wycheproof/ed25519_test.json": wycheproof,
  "external/ink/principal-normalization.json": inkPrincipal,
  "external/ink/timestamp-validity.json": inkTimestamp,
  "external/ink/replay-freshness.json": inkReplay,
  "external/ink/merkle-consistency.json": inkMerkle,
  "external/jcs": jcs,
  "merkle/merkle-sha256.json": merkleSha256,
  "valid.json": () => admission("valid.json"),
  "invalid.json": () => admission("invalid.json"),
  "sequences.json": () => admission("sequences.json"),
  "receipts/receipts.json": receipts,
  "consumer/consumer.json": consumer,
  "treehead/tree-heads.json": treeHeads,
  "annotations/annotations.json": annotations,
  "auditbatch/audit-batches.json": auditBatches,
  "carried/carried.json": carried,
  "resolutions.json": resolutions,
  "batches.json": batches,
  "readers/taint-plan.json": taintPlanReader,
  "readers/award.json": awardReaders,
  "readers/compromise-handoff.json": compromiseHandoffReader,
};

export function allVerdicts(): Record<string, FileResult> {
  return Object.fromEntries(Object.entries(FILES).map(([name, run]) => [name, run()]));
}
