/**
 * The taint-replay kind's reader (busguard.sdk.taint.read_plan;
 * docs/protocol.md 13): for a containment agent, the plan busguard forwarded
 * in place of its signed request, as a `PlanView` whose `units` are what to
 * replay, in order. Throwing makes the consumer refuse the delivery as
 * `unreadable` (the agent never acts on it): a value that is not a
 * `busguard.taint-replay-plan.v1` forward with a valid plan; a
 * `request_sha256` that is not the SHA-256 of the request carried, or not
 * the receipt's `payload_hash` (a plan for another request); a `taint.unit`
 * annotation missing or differing from the plan's `unit`. The request is
 * hashed as the exact bytes the forward carries (never re-serialised).
 * Judged with Python's reader on tests/vectors/readers/taint-plan.json.
 */
import { createHash } from "node:crypto";
import type { Delivery, Reader } from "../consumer.js";

export const TAINT_KIND = "taint-replay";
export const PLAN_FORMAT = "busguard.taint-replay-plan.v1";
export const UNIT_ANNOTATION = "taint.unit";

export type Unit = "span" | "token";

/** One thing to replay: `span:<node>` from the span log, or `token:<token>` rebuilt from the ledger. */
export interface ReplayUnit {
  readonly key: string;
  readonly unit: Unit;
  readonly nodes: readonly string[];
  readonly sinks: readonly string[];
}

export interface PlanView {
  readonly taskId: string;
  readonly action: "replay" | "contain";
  readonly unit: Unit;
  readonly requestSha256: string;
  /** the request's exact bytes (what the asker signed) */
  readonly request: Uint8Array;
  /** the full verdict (docs/taint.md, "The verdict"), as JSON */
  readonly plan: Readonly<Record<string, unknown>>;
  readonly units: readonly ReplayUnit[];
}

const text = new TextDecoder("utf-8", { fatal: true });

/** The byte span of each top-level member's value of a JSON object (the last one of a repeated key). */
function memberSpans(raw: string): Map<string, [number, number]> {
  const spans = new Map<string, [number, number]>();
  let i = 0;
  const ws = (): void => {
    while (i < raw.length && " \t\r\n".includes(raw[i] as string)) i++;
  };
  const str = (): string => {
    const start = i++;
    while (raw[i] !== '"') i += raw[i] === "\\" ? 2 : 1;
    i++;
    return JSON.parse(raw.slice(start, i)) as string;
  };
  const value = (): void => {
    ws();
    if (raw[i] === '"') {
      str();
      return;
    }
    if (raw[i] === "{" || raw[i] === "[") {
      let depth = 0;
      do {
        if (raw[i] === '"') {
          str();
          continue;
        }
        if (raw[i] === "{" || raw[i] === "[") depth++;
        else if (raw[i] === "}" || raw[i] === "]") depth--;
        i++;
      } while (depth > 0 && i < raw.length);
      return;
    }
    while (i < raw.length && !",}] \t\r\n".includes(raw[i] as string)) i++;
  };
  ws();
  i++; // {
  for (;;) {
    ws();
    if (raw[i] !== '"') break;
    const key = str();
    ws();
    i++; // :
    ws();
    const start = i;
    value();
    spans.set(key, [start, i]);
    ws();
    if (raw[i] !== ",") break;
    i++;
  }
  return spans;
}

function strings(v: unknown): v is string[] {
  return Array.isArray(v) && v.every((s) => typeof s === "string");
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

interface PlanNode {
  id: string;
  token: string | null;
  sinks: string[];
}
interface PlanToken {
  token: string;
  nodes: string[];
  sinks: string[];
}

/** The forward, structurally: every field the view uses, of its type; else null. */
function parseForward(value: Uint8Array): { format: string; action: string; requestSha256: string; request: Uint8Array; plan: Record<string, unknown>; unit: Unit; nodes: PlanNode[]; tokens: PlanToken[] } | null {
  let raw: string;
  let doc: unknown;
  try {
    raw = text.decode(value);
    doc = JSON.parse(raw);
  } catch {
    return null;
  }
  if (!isObject(doc) || typeof doc.format !== "string" || typeof doc.action !== "string" || typeof doc.request_sha256 !== "string" || !("request" in doc)) return null;
  const plan = doc.plan;
  if (!isObject(plan) || plan.verdict !== "valid" || (plan.unit !== "span" && plan.unit !== "token") || !Array.isArray(plan.nodes) || !Array.isArray(plan.tokens)) return null;
  const nodes = plan.nodes as unknown[];
  const tokens = plan.tokens as unknown[];
  if (!nodes.every((n) => isObject(n) && typeof n.id === "string" && (n.token === null || typeof n.token === "string") && strings(n.sinks))) return null;
  if (!tokens.every((t) => isObject(t) && typeof t.token === "string" && strings(t.nodes) && strings(t.sinks))) return null;
  const span = memberSpans(raw).get("request");
  if (span === undefined) return null;
  return {
    format: doc.format,
    action: doc.action,
    requestSha256: doc.request_sha256,
    request: Buffer.from(raw.slice(span[0], span[1]), "utf8"),
    plan,
    unit: plan.unit,
    nodes: nodes as PlanNode[],
    tokens: tokens as PlanToken[],
  };
}

function q(s: string): string {
  return JSON.stringify(s.slice(0, 64));
}

/** The reader: the delivery's replaced value as a `PlanView`, or an Error (refused `unreadable`). */
export function readPlan(d: Delivery<unknown>): PlanView {
  const fwd = parseForward(d.payload);
  if (fwd === null) throw new Error(`not a ${PLAN_FORMAT} forward with a valid plan`);
  if (fwd.format !== PLAN_FORMAT) throw new Error(`format ${q(fwd.format)}; allowed ${JSON.stringify(PLAN_FORMAT)}`);
  if (fwd.action !== "replay" && fwd.action !== "contain") throw new Error(`action ${q(fwd.action)}; allowed 'replay' or 'contain'`);
  if (createHash("sha256").update(fwd.request).digest("hex") !== fwd.requestSha256) {
    throw new Error(`request_sha256 ${q(fwd.requestSha256)} is not the SHA-256 of the request it carries`);
  }
  if (fwd.requestSha256 !== d.receipt.payload_hash) {
    throw new Error(`request_sha256 ${q(fwd.requestSha256)} is not the receipt's payload_hash ${q(d.receipt.payload_hash)}`);
  }
  const said = d.annotations[UNIT_ANNOTATION];
  if (said !== fwd.unit) throw new Error(`annotation ${UNIT_ANNOTATION} = ${JSON.stringify(said ?? null)} but the attested plan's unit is ${JSON.stringify(fwd.unit)}`);
  return { taskId: d.receipt.task_id, action: fwd.action, unit: fwd.unit, requestSha256: fwd.requestSha256, request: fwd.request, plan: fwd.plan, units: unitsOf(fwd.nodes, fwd.tokens) };
}

/** One unit per token rebuilt from the ledger (at its first cone node), one per other cone node. */
function unitsOf(nodes: readonly PlanNode[], tokens: readonly PlanToken[]): ReplayUnit[] {
  const rebuilt = new Map(tokens.map((t) => [t.token, t]));
  const placed = new Set<string>();
  const units: ReplayUnit[] = [];
  for (const node of nodes) {
    const token = node.token === null ? undefined : rebuilt.get(node.token);
    if (token === undefined) units.push({ key: `span:${node.id}`, unit: "span", nodes: [node.id], sinks: [...node.sinks] });
    else if (!placed.has(token.token)) {
      placed.add(token.token);
      units.push({ key: `token:${token.token}`, unit: "token", nodes: [...token.nodes], sinks: [...token.sinks] });
    }
  }
  return units;
}

/** `AdmittingConsumer.open({ ..., readers: TAINT_READERS })` for a containment agent. */
export const TAINT_READERS: ReadonlyMap<string, Reader<PlanView>> = new Map<string, Reader<PlanView>>([[TAINT_KIND, readPlan]]);
