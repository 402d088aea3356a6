/**
 * The successor's own check of a forwarded session handoff against the scope
 * the handing-off session signed (busguard.sdk.scope `verify_forwarded`;
 * docs/compromise-handoff.md 2, 3.1, 3.3 and 12). busguard forwards a
 * compromised session's handoff with only the components its verdict lets
 * move, so the receipt's `payload_hash` no longer covers the value; what
 * vouches for each component is then the scope, verified here with the
 * session's keys from the successor's own registry (`keys`), never from the
 * record.
 *
 * Only what the successor needs of busguard's compromise policy is mirrored:
 * the payload decoded as strictly as busguard.policies.compromise.message
 * decodes it (the same `MessageCode` for the same first problem: msgspec's
 * order, then a repeated key, then the version, then names, content or hash,
 * base64url), and the scope opened, verified and matched as checks.py does.
 * The other three statements are read as their schema says and not opened:
 * what the successor uses is decided by the scope alone.
 */
import { b64urlDecodeStrict, sha256Hex, utf8, concat } from "../bytes.js";
import { verifySignature } from "../ed25519.js";
import { canonicalPrincipal } from "../identity.js";
import { StrictJsonError, decodeObject, field, type DecodedObject, type FieldType, type JsonValue, type Schema } from "../json.js";

export const KIND_SESSION_HANDOFF = "session-handoff";
export const HANDOFF_VERSION = 1;
/** the scope's domain separator: its signature covers this, then the statement's exact bytes */
export const SCOPE_CONTEXT: Uint8Array = utf8("busguard/state-scope/v1\u0000");
export const MAX_STATEMENT_BYTES = 65_536;
export const MAX_COMPONENTS = 256;

/** Why a handoff payload or its scope cannot be used: busguard's stable `MessageCode` strings (docs/compromise-handoff.md 11). */
export type MessageCode =
  | "not_json"
  | "wrong_type"
  | "missing_field"
  | "unknown_field"
  | "malformed_field"
  | "duplicate_key"
  | "unsupported_version"
  | "oversized"
  | "bad_base64"
  | "duplicate_name"
  | "malformed_agent_id"
  | "unknown_signer"
  | "bad_signature"
  | "wrong_handoff"
  | "wrong_signer";

/** busguard's `MessageError`: `code`, where it was met (`payload.components[2]`, `scope.signer`, ...) and why. */
export class MessageError extends Error {
  constructor(
    readonly code: MessageCode,
    readonly where: string,
    readonly detail: string,
  ) {
    super(`${where}: ${code}: ${detail}`);
  }
}

/** One piece of the session's state: exactly one of `content` (base64url bytes) and `sha256` (the bytes travel elsewhere). */
export interface Component {
  readonly name: string;
  readonly operational: boolean;
  readonly encoding: string;
  readonly content?: string;
  readonly sha256?: string;
}
export interface SignedStatement {
  readonly statement: string;
  readonly signature: string;
}
/** The record value of a `session-handoff` receipt (wire names). */
export interface SessionHandoff {
  readonly v: number;
  readonly components: readonly Component[];
  readonly declaration?: SignedStatement;
  readonly scope?: SignedStatement;
  readonly successor_integrity?: SignedStatement;
  readonly interaction?: SignedStatement;
}
export interface ScopeEntry {
  readonly name: string;
  readonly sha256: string;
  readonly operational: boolean;
  readonly encoding: string;
}
/** `transferable-state-scope-signature`: the components the session verified as uncompromised. */
export interface StateScope {
  readonly v: number;
  readonly handoff_id: string;
  readonly signer: string;
  readonly components: readonly ScopeEntry[];
  readonly key_id?: string;
}

/** A component against the scope: an entry of its name with equal (sha256, operational, encoding); one with anything else; none. */
export type ScopeMatch = "matches" | "mismatch" | "unlisted";
export interface ComponentCheck {
  readonly name: string;
  readonly sha256: string;
  readonly operational: boolean;
  readonly againstScope: ScopeMatch;
}
/**
 * `verified`: the components whose (name, sha256, operational, encoding) the
 * session signed, in the order received. Without a scope nothing is verified,
 * and `unverifiedNonOperational` lists the non-operational components for the
 * caller to judge.
 */
export interface ScopeReport {
  readonly scopePresent: boolean;
  readonly checks: readonly ComponentCheck[];
  readonly verified: readonly Component[];
  readonly unverifiedNonOperational: readonly Component[];
  /** a scope is signed and every component matches it */
  readonly allVerified: boolean;
}

/** The session's usable keys as (key id, 32-byte public key): busguard's `KeyLookup`, over the successor's own registry. */
export type SignerKeys = (agentId: string, keyId: string | null) => ReadonlyArray<readonly [string, Uint8Array]>;

// ---- the schema, as busguard.policies.compromise.message declares it ----

/** Python's `re.search` with `^…$`: `$` also matches before one final newline. */
const B64URL = /^[A-Za-z0-9_-]*\n?$/u;
const SHA256_HEX = /^[0-9a-f]{64}\n?$/u;
const text = (minLength: number, maxLength: number): FieldType => ({ kind: "str", minLength, maxLength });
const optional = (type: FieldType) => field(type, { nullable: true, required: false });
const schema = (fields: ReadonlyArray<[string, ReturnType<typeof field>]>): Schema => ({ fields: new Map(fields), forbidUnknown: true });
const array = (items: Schema, maxLength: number): FieldType => ({ kind: "array", items: field({ kind: "object", schema: items }), maxLength });
const SIGNED = schema([
  ["statement", field({ kind: "str", pattern: B64URL })],
  ["signature", field({ kind: "str", minLength: 86, maxLength: 86, pattern: B64URL })],
]);
const COMPONENT = schema([
  ["name", field(text(1, 128))],
  ["operational", field({ kind: "bool" })],
  ["encoding", field(text(1, 64))],
  ["content", optional({ kind: "str", pattern: B64URL })],
  ["sha256", optional({ kind: "str", pattern: SHA256_HEX })],
]);
const STATEMENT = { kind: "object", schema: SIGNED } as const;
const HANDOFF = schema([
  ["v", field({ kind: "int" })],
  ["components", field(array(COMPONENT, MAX_COMPONENTS))],
  ["declaration", optional(STATEMENT)],
  ["scope", optional(STATEMENT)],
  ["successor_integrity", optional(STATEMENT)],
  ["interaction", optional(STATEMENT)],
]);
const ENTRY = schema([
  ["name", field(text(1, 128))],
  ["sha256", field({ kind: "str", pattern: SHA256_HEX })],
  ["operational", field({ kind: "bool" })],
  ["encoding", field(text(1, 64))],
]);
const SCOPE = schema([
  ["v", field({ kind: "int" })],
  ["handoff_id", field(text(1, 256))],
  ["signer", field(text(1, 512))],
  ["components", field(array(ENTRY, MAX_COMPONENTS))],
  ["key_id", optional(text(1, 128))],
]);

const CODES: Readonly<Record<StrictJsonError["problem"], MessageCode>> = {
  not_json: "not_json",
  wrong_type: "wrong_type",
  missing_field: "missing_field",
  unknown_field: "unknown_field",
  constraint: "malformed_field",
};

function isObject(v: JsonValue | undefined): v is DecodedObject {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** The first key repeated in one object, anywhere in the document (compared after unescaping). */
function repeatedKey(v: JsonValue | undefined): string | null {
  if (Array.isArray(v)) {
    for (const item of v as readonly JsonValue[]) {
      const dup = repeatedKey(item);
      if (dup !== null) return dup;
    }
  } else if (isObject(v)) {
    for (const value of v.values.values()) {
      const dup = repeatedKey(value);
      if (dup !== null) return dup;
    }
    const seen = new Set<string>();
    for (const k of v.keys) {
      if (seen.has(k)) return k;
      seen.add(k);
    }
  }
  return null;
}

/** A decoded object as a plain record: null (an optional field left out) dropped, integers as numbers only where they fit. */
function plain(v: JsonValue): unknown {
  if (Array.isArray(v)) return (v as readonly JsonValue[]).map(plain);
  if (isObject(v)) {
    const out: Record<string, unknown> = {};
    for (const [k, x] of v.values) if (x !== null) out[k] = plain(x);
    return out;
  }
  return v;
}

/** `raw` as exactly one object of `s` (busguard's `decode_strict`), or MessageError. */
function decodeStrict(raw: Uint8Array, s: Schema, where: string): Record<string, unknown> {
  let doc: DecodedObject;
  try {
    doc = decodeObject(raw, s);
  } catch (exc) {
    if (!(exc instanceof StrictJsonError)) throw exc;
    // msgspec's "Number out of range" is none of busguard's named cases: malformed_field, wherever it is met
    const code = exc.message.startsWith("Number out of range") ? "malformed_field" : CODES[exc.problem];
    throw new MessageError(code, where, exc.message);
  }
  const dup = repeatedKey(doc);
  if (dup !== null) throw new MessageError("duplicate_key", where, `key ${JSON.stringify(dup)} appears more than once in one object`);
  const v = doc.values.get("v");
  if (v !== BigInt(HANDOFF_VERSION)) throw new MessageError("unsupported_version", where, `v=${typeof v === "bigint" ? v.toString() : "?"}; only ${HANDOFF_VERSION} is supported`);
  return { ...(plain(doc) as Record<string, unknown>), v: HANDOFF_VERSION };
}

/** The record value of a session-handoff receipt, strictly: the schema, then unique names, then one of content/sha256, then the content's base64url. */
export function decodeHandoff(raw: Uint8Array): SessionHandoff {
  const handoff = decodeStrict(raw, HANDOFF, "payload") as unknown as SessionHandoff;
  const names = new Set<string>();
  handoff.components.forEach((component, i) => {
    const where = `payload.components[${i}]`;
    if (names.has(component.name)) throw new MessageError("duplicate_name", where, `component name ${JSON.stringify(component.name)} is used twice`);
    names.add(component.name);
    if ((component.content === undefined) === (component.sha256 === undefined)) {
      throw new MessageError("malformed_field", where, "exactly one of content and sha256 must be given");
    }
    componentContent(component, where);
  });
  return handoff;
}

/** The component's bytes (null when it travels by hash only). */
export function componentContent(component: Component, where = "component"): Uint8Array | null {
  if (component.content === undefined) return null;
  try {
    return b64urlDecodeStrict(component.content);
  } catch (exc) {
    throw new MessageError("bad_base64", `${where}.content`, (exc as Error).message);
  }
}

/** What binds a component: SHA-256 of its bytes, or the hash it travels by. */
export function componentSha256(component: Component): string {
  return component.sha256 ?? sha256Hex(componentContent(component) ?? new Uint8Array(0));
}

function principal(agentId: string, where: string): string {
  try {
    return canonicalPrincipal(agentId);
  } catch (exc) {
    throw new MessageError("malformed_agent_id", where, (exc as Error).message);
  }
}

function b64(value: string, where: string, size?: number): Uint8Array {
  try {
    return b64urlDecodeStrict(value, size);
  } catch (exc) {
    throw new MessageError("bad_base64", where, (exc as Error).message);
  }
}

/** The scope, opened and decoded, its signature checked with its signer's keys (checks.py `verify_statement`). */
function verifyScope(signed: SignedStatement, keys: SignerKeys): StateScope {
  const raw = b64(signed.statement, "scope.statement");
  if (raw.length > MAX_STATEMENT_BYTES) throw new MessageError("oversized", "scope.statement", `${raw.length} bytes; at most ${MAX_STATEMENT_BYTES} allowed`);
  const signature = b64(signed.signature, "scope.signature", 64);
  const scope = decodeStrict(raw, SCOPE, "scope") as unknown as StateScope;
  principal(scope.signer, "scope.signer");
  const candidates = keys(scope.signer, scope.key_id ?? null);
  if (candidates.length === 0) {
    const key = scope.key_id === undefined ? "" : ` with key id ${JSON.stringify(scope.key_id)}`;
    throw new MessageError("unknown_signer", "scope", `no usable key for signer ${JSON.stringify(scope.signer)}${key}`);
  }
  const message = concat(SCOPE_CONTEXT, raw);
  if (!candidates.some(([, publicKey]) => verifySignature(publicKey, message, signature))) {
    throw new MessageError("bad_signature", "scope", `signature does not verify with any usable key of ${JSON.stringify(scope.signer)}`);
  }
  return scope;
}

export interface ScopeContext {
  /** the receipt's `task_id` */
  readonly handoffId: string;
  /** the receipt's `sender`: the handing-off session, who must have signed the scope */
  readonly session: string;
  readonly keys: SignerKeys;
}

/**
 * Check each component against the session's signed scope. Throws
 * MessageError if the scope itself is unusable (bad signature, not signed by
 * `session`, about another handoff); a component that does not match is
 * reported, not thrown, so the caller can still use the rest.
 */
export function verifyComponents(scope: SignedStatement | undefined, components: readonly Component[], ctx: ScopeContext): ScopeReport {
  let entries: Map<string, ScopeEntry> | null = null;
  if (scope !== undefined) {
    const statement = verifyScope(scope, ctx.keys);
    if (statement.handoff_id !== ctx.handoffId) {
      throw new MessageError("wrong_handoff", "scope.handoff_id", `${JSON.stringify(statement.handoff_id)} is not ${JSON.stringify(ctx.handoffId)}`);
    }
    if (principal(statement.signer, "scope.signer") !== principal(ctx.session, "session")) {
      throw new MessageError("wrong_signer", "scope.signer", `${JSON.stringify(statement.signer)} is not the handing-off session ${JSON.stringify(ctx.session)}`);
    }
    entries = new Map();
    for (const [i, entry] of statement.components.entries()) {
      if (entries.has(entry.name)) throw new MessageError("duplicate_name", `scope.components[${i}]`, `scope names ${JSON.stringify(entry.name)} twice`);
      entries.set(entry.name, entry);
    }
  }
  const checks: ComponentCheck[] = [];
  const verified: Component[] = [];
  const loose: Component[] = [];
  components.forEach((component, i) => {
    componentContent(component, `components[${i}]`);
    const sha256 = componentSha256(component);
    const entry = entries?.get(component.name);
    const against: ScopeMatch =
      entry === undefined ? "unlisted" : entry.sha256 === sha256 && entry.operational === component.operational && entry.encoding === component.encoding ? "matches" : "mismatch";
    checks.push({ name: component.name, sha256, operational: component.operational, againstScope: against });
    if (against === "matches") verified.push(component);
    else if (entries === null && !component.operational) loose.push(component);
  });
  const scopePresent = entries !== null;
  return { scopePresent, checks, verified, unverifiedNonOperational: loose, allVerified: scopePresent && verified.length === checks.length };
}

/** `verifyComponents` on a forwarded session-handoff record value (decoded with `decodeHandoff`). */
export function verifyForwarded(payload: Uint8Array, ctx: ScopeContext): ScopeReport {
  const handoff = decodeHandoff(payload);
  return verifyComponents(handoff.scope, handoff.components, ctx);
}
