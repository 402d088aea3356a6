/**
 * The contract-net kinds, read (busguard.sdk.award): typed views of the
 * `cnet.call`, `cnet.bid`, `cnet.award` and `cnet.result` payloads busguard
 * admitted, decoded as strictly as the guard's own decoder
 * (busguard.policies.award.wire.decode_payload, docs/protocol.md 15): an
 * unknown, missing, repeated (at any depth) or mistyped field, a value
 * outside its bounds or a cross-field rule broken throws, which the consumer
 * refuses as `unreadable`. A result's view carries `verification`, how
 * busguard settled it, from the sealed `busguard-annotation-verification`
 * header (`recomputed`, `delegated` or `unverified`; missing or other:
 * refused). Judged with Python's readers on tests/vectors/readers/award.json.
 */
import { b64urlDecodeStrict } from "../bytes.js";
import type { Delivery, Reader } from "../consumer.js";

export const KIND_CALL = "cnet.call";
export const KIND_BID = "cnet.bid";
export const KIND_AWARD = "cnet.award";
export const KIND_RESULT = "cnet.result";
export const ANNOTATION_VERIFICATION = "verification";
export type Mode = "verified" | "delegated" | "best_effort";
export type Verification = "recomputed" | "delegated" | "unverified";
/** How a result of an award in each mode is settled. */
export const SETTLES_AS: Readonly<Record<Mode, Verification>> = { verified: "recomputed", delegated: "delegated", best_effort: "unverified" };

export interface CallPayload {
  readonly awarder: string;
  readonly task_class: string;
  readonly task: string;
  readonly requires_check: boolean;
  readonly award_deadline: string;
}
export interface ReceiptTemplate {
  readonly canonicalizer_id: string;
  readonly commits: "output" | "trace";
  readonly verifier_manifest?: string;
}
export interface BidPayload {
  readonly call: string;
  readonly cost: number;
  readonly deadline: string;
  readonly receipt: ReceiptTemplate;
}
export interface AwardPayload {
  readonly winner: string;
  readonly ranked: readonly string[];
  readonly mode: Mode;
  readonly verifier?: string;
  readonly risk_price?: number;
}
export interface ResultPayload {
  readonly state_root: string;
  readonly output?: string;
  readonly trace?: string;
  readonly attestation?: string;
}

export interface CallView {
  readonly call: string;
  readonly awarder: string;
  readonly payload: CallPayload;
}
export interface BidView {
  readonly call: string;
  readonly bid: string;
  readonly bidder: string;
  readonly payload: BidPayload;
}
export interface AwardView {
  readonly call: string;
  readonly awarder: string;
  readonly payload: AwardPayload;
}
export interface ResultView {
  readonly call: string;
  readonly bidder: string;
  readonly payload: ResultPayload;
  readonly delivered: Uint8Array;
  readonly verification: Verification;
}
export type CnetView = CallView | BidView | AwardView | ResultView;

/** Whether `verification` is how a result of an award in `awardedMode` is settled. */
export function settles(view: ResultView, awardedMode: string): boolean {
  return (SETTLES_AS as Readonly<Record<string, Verification>>)[awardedMode] === view.verification;
}

// ---- a strict JSON reader: integers exact, repeated keys refused at any depth ----

class Bad extends Error {}
type J = null | boolean | string | { int: bigint } | { float: number } | J[] | { obj: Map<string, J> };

function parse(raw: Uint8Array): J {
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(raw);
  } catch {
    throw new Bad("not UTF-8");
  }
  let i = 0;
  const ws = (): void => {
    while (i < text.length && " \t\r\n".includes(text[i] as string)) i++;
  };
  const value = (depth: number): J => {
    if (depth > 64) throw new Bad("nested too deep");
    ws();
    const c = text[i];
    if (c === "{") {
      i++;
      const obj = new Map<string, J>();
      ws();
      if (text[i] === "}") {
        i++;
        return { obj };
      }
      for (;;) {
        ws();
        if (text[i] !== '"') throw new Bad("expected a key");
        const key = str();
        if (obj.has(key)) throw new Bad(`key ${JSON.stringify(key)} appears more than once in one object`);
        ws();
        if (text[i++] !== ":") throw new Bad("expected ':'");
        obj.set(key, value(depth + 1));
        ws();
        const sep = text[i++];
        if (sep === "}") return { obj };
        if (sep !== ",") throw new Bad("expected ',' or '}'");
      }
    }
    if (c === "[") {
      i++;
      const arr: J[] = [];
      ws();
      if (text[i] === "]") {
        i++;
        return arr;
      }
      for (;;) {
        arr.push(value(depth + 1));
        ws();
        const sep = text[i++];
        if (sep === "]") return arr;
        if (sep !== ",") throw new Bad("expected ',' or ']'");
      }
    }
    if (c === '"') return str();
    for (const [lit, v] of [["true", true], ["false", false], ["null", null]] as const) {
      if (text.startsWith(lit, i)) {
        i += lit.length;
        return v;
      }
    }
    const m = /^-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/.exec(text.slice(i, i + 400));
    if (m === null) throw new Bad("not JSON");
    i += m[0].length;
    if (m[1] === undefined && m[2] === undefined) return { int: BigInt(m[0]) };
    const f = Number(m[0]);
    if (!Number.isFinite(f)) throw new Bad("number out of range");
    return { float: f };
  };
  const str = (): string => {
    const start = i++;
    for (;;) {
      const ch = text[i];
      if (ch === undefined) throw new Bad("unterminated string");
      if (ch === '"') break;
      if (ch < " ") throw new Bad("control character in a string");
      i += ch === "\\" ? 2 : 1;
    }
    i++;
    try {
      return JSON.parse(text.slice(start, i)) as string;
    } catch {
      throw new Bad("bad string escape");
    }
  };
  const top = value(0);
  ws();
  if (i !== text.length) throw new Bad("trailing data");
  return top;
}

// ---- the schema, as msgspec checks it (types first, in field order) ----

type Check = (v: J, at: string) => unknown;
const isObj = (v: J): v is { obj: Map<string, J> } => typeof v === "object" && v !== null && "obj" in v;

/** A Python `re` pattern anchored by `^…$` (where `$` also matches before one final newline). */
function pattern(body: string): RegExp {
  return new RegExp(`^(?:${body})\\n?$`, "u");
}
function codePoints(s: string): number {
  return Array.from(s).length;
}
function str(opts: { min?: number; max?: number; re?: RegExp } = {}): Check {
  return (v, at) => {
    if (typeof v !== "string") throw new Bad(`${at}: expected a string`);
    const n = codePoints(v);
    if ((opts.min !== undefined && n < opts.min) || (opts.max !== undefined && n > opts.max) || (opts.re !== undefined && !opts.re.test(v))) {
      throw new Bad(`${at}: ${JSON.stringify(v.slice(0, 64))} is out of bounds`);
    }
    return v;
  };
}
const amount: Check = (v, at) => {
  if (typeof v !== "object" || v === null || !("int" in v)) throw new Bad(`${at}: expected an integer`);
  if (v.int < 0n || v.int > 2n ** 53n - 1n) throw new Bad(`${at}: ${v.int} is out of 0..2^53-1`);
  return Number(v.int);
};
const bool: Check = (v, at) => {
  if (typeof v !== "boolean") throw new Bad(`${at}: expected a boolean`);
  return v;
};
function oneOf(...allowed: string[]): Check {
  return (v, at) => {
    if (typeof v !== "string" || !allowed.includes(v)) throw new Bad(`${at}: expected one of ${allowed.join(", ")}`);
    return v;
  };
}
function list(item: Check): Check {
  return (v, at) => {
    if (!Array.isArray(v)) throw new Bad(`${at}: expected an array`);
    return v.map((x, n) => item(x, `${at}[${n}]`));
  };
}
interface Field {
  readonly check: Check;
  readonly optional?: boolean;
}
function struct(fields: Readonly<Record<string, Field>>): Check {
  return (v, at) => {
    if (!isObj(v)) throw new Bad(`${at}: expected an object`);
    const out: Record<string, unknown> = {};
    for (const [k, x] of v.obj) {
      const f = fields[k];
      if (f === undefined) throw new Bad(`${at}: unknown field ${JSON.stringify(k)}`);
      if (x === null && f.optional === true) continue; // None: the default, omitted
      out[k] = f.check(x, `${at}.${k}`);
    }
    for (const [k, f] of Object.entries(fields)) if (f.optional !== true && !(k in out)) throw new Bad(`${at}: missing required field ${JSON.stringify(k)}`);
    return out;
  };
}

const ID = str({ min: 1, max: 256 });
const STAMP = str({ min: 1, max: 64 });
const MANIFEST = str({ re: pattern("[\\x21-\\x7e]{1,256}") });
const B64 = str({ re: pattern("[A-Za-z0-9_-]*") });
const SCHEMAS: Readonly<Record<string, Check>> = {
  [KIND_CALL]: struct({
    awarder: { check: str() },
    task_class: { check: str({ re: pattern("[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}") }) },
    task: { check: str({ max: 4096 }) },
    requires_check: { check: bool },
    award_deadline: { check: STAMP },
  }),
  [KIND_BID]: struct({
    call: { check: ID },
    cost: { check: amount },
    deadline: { check: STAMP },
    receipt: {
      check: struct({
        canonicalizer_id: { check: str({ re: pattern("[a-z0-9][a-z0-9._-]{0,63}") }) },
        commits: { check: oneOf("output", "trace") },
        verifier_manifest: { check: MANIFEST, optional: true },
      }),
    },
  }),
  [KIND_AWARD]: struct({
    winner: { check: ID },
    ranked: { check: list(ID) },
    mode: { check: oneOf("verified", "delegated", "best_effort") },
    verifier: { check: MANIFEST, optional: true },
    risk_price: { check: amount, optional: true },
  }),
  [KIND_RESULT]: struct({
    state_root: { check: str({ re: pattern("[0-9a-f]{64}") }) },
    output: { check: B64, optional: true },
    trace: { check: B64, optional: true },
    attestation: { check: B64, optional: true },
  }),
};

/** Cross-field rules a schema cannot say (wire.py `_shape`). */
function shape(kind: string, p: Record<string, unknown>): void {
  if (kind === KIND_AWARD) {
    const a = p as unknown as AwardPayload;
    if (new Set(a.ranked).size !== a.ranked.length) throw new Bad("ranked lists a bid more than once");
    if (a.ranked.length > 64) throw new Bad(`ranked lists ${a.ranked.length} bids; at most 64`);
    for (const [field, mode] of [["verifier", "delegated"], ["risk_price", "best_effort"]] as const) {
      if (a[field] === undefined && a.mode === mode) throw new Bad(`${field} is required for mode ${mode}`);
      if (a[field] !== undefined && a.mode !== mode) throw new Bad(`${field} is allowed only for mode ${mode}, not ${a.mode}`);
    }
  }
  if (kind === KIND_RESULT) {
    const r = p as unknown as ResultPayload;
    if ((r.output === undefined) === (r.trace === undefined)) throw new Bad("exactly one of output and trace");
    for (const [name, size] of [["output", undefined], ["trace", undefined], ["attestation", 64]] as const) {
      const t = r[name];
      if (t === undefined) continue;
      try {
        b64urlDecodeStrict(t, size);
      } catch (exc) {
        throw new Bad(`${name}: ${(exc as Error).message}`);
      }
    }
  }
}

/** The kind's payload, decoded as the guard decodes it; throws for one it would refuse. */
export function decodeCnetPayload(kind: string, raw: Uint8Array): CallPayload | BidPayload | AwardPayload | ResultPayload {
  const schema = SCHEMAS[kind];
  if (schema === undefined) throw new Error(`kind ${JSON.stringify(kind)} is not a contract-net kind`);
  try {
    const p = schema(parse(raw), "$") as Record<string, unknown>;
    shape(kind, p);
    return p as unknown as CallPayload;
  } catch (exc) {
    if (exc instanceof Bad) throw new Error(`${kind} payload: ${exc.message}`);
    throw exc;
  }
}

function payload(d: Delivery<unknown>, kind: string): unknown {
  if (d.receipt.kind !== kind) throw new Error(`receipt kind ${JSON.stringify(d.receipt.kind)}: this reader reads ${JSON.stringify(kind)}`);
  return decodeCnetPayload(kind, d.payload);
}

export function readCall(d: Delivery<unknown>): CallView {
  return { call: d.receipt.task_id, awarder: d.receipt.sender, payload: payload(d, KIND_CALL) as CallPayload };
}

export function readBid(d: Delivery<unknown>): BidView {
  const p = payload(d, KIND_BID) as BidPayload;
  return { call: p.call, bid: d.receipt.task_id, bidder: d.receipt.sender, payload: p };
}

export function readAward(d: Delivery<unknown>): AwardView {
  return { call: d.receipt.task_id, awarder: d.receipt.sender, payload: payload(d, KIND_AWARD) as AwardPayload };
}

export function readResult(d: Delivery<unknown>): ResultView {
  const p = payload(d, KIND_RESULT) as ResultPayload;
  const mode = d.annotations[ANNOTATION_VERIFICATION];
  if (mode === undefined) throw new Error(`${KIND_RESULT}: no busguard-annotation-${ANNOTATION_VERIFICATION} header; every forwarded result has one (docs/protocol.md 15.4)`);
  if (mode !== "recomputed" && mode !== "delegated" && mode !== "unverified") {
    throw new Error(`${KIND_RESULT}: busguard-annotation-${ANNOTATION_VERIFICATION} is ${JSON.stringify(mode.slice(0, 64))}; allowed delegated, recomputed, unverified`);
  }
  return { call: d.receipt.task_id, bidder: d.receipt.sender, payload: p, delivered: b64urlDecodeStrict(p.output ?? p.trace ?? ""), verification: mode };
}

/** The readers of the four contract-net kinds, for `AdmittingConsumer.open({ readers: CNET_READERS })`. */
export const CNET_READERS: ReadonlyMap<string, Reader<CnetView>> = new Map<string, Reader<CnetView>>([
  [KIND_CALL, readCall],
  [KIND_BID, readBid],
  [KIND_AWARD, readAward],
  [KIND_RESULT, readResult],
]);
