/**
 * The admitting decision (busguard.sdk.consumer `AdmittingConsumer.admit`):
 * every consumed record becomes exactly one `Delivery` (attested, addressed
 * to this agent, read by its kind's reader) or one `Refusal` with the same
 * reason codes as the Python SDK, never an exception; and the batch says
 * which offsets to commit once the agent has acted on it. Pure: no I/O, no
 * logging, no clock. The Kafka client that feeds it is later work.
 */
import { HEADER_ANNOTATION_PREFIX, HeadCache, checkAdmitted, openAttestation, type Attestation } from "./attestation.js";
import { HEADER_RECEIPT, type Header } from "./envelope.js";
import { canonicalPrincipal } from "./identity.js";
import { decodeReceipt, type Receipt } from "./receipt.js";

export const MAX_DETAIL = 300;
export const UNATTESTED = "unattested";
export const NOT_FOR_ME = "not_for_me";
export const UNREADABLE = "unreadable";
export const UNDECODABLE = "undecodable";
/** decided before the done-set's horizon (the act-once loop's refusal) */
export const BEFORE_HORIZON = "before_horizon";
export type RefusalReason = typeof UNATTESTED | typeof NOT_FOR_ME | typeof UNREADABLE | typeof UNDECODABLE | typeof BEFORE_HORIZON;

/** The parts of a consumed record the consumer reads. */
export interface Fetched {
  readonly topic: string;
  readonly partition: number;
  readonly offset: bigint;
  readonly value: Uint8Array | null;
  readonly headers: readonly Header[];
}

/**
 * A record the Kafka client could not decode (busguard's `undecodable_header`,
 * `undecodable_record` or `undecodable_batch`), as a tolerant reader hands it
 * over; `lastOffset` when it covers a whole batch's span.
 */
export interface Undecodable {
  readonly undecodable: "undecodable_header" | "undecodable_record" | "undecodable_batch";
  readonly topic: string;
  readonly partition: number;
  readonly offset: bigint;
  readonly lastOffset?: bigint;
  readonly detail: string;
}

export interface Delivery<View = unknown> {
  readonly topic: string;
  readonly partition: number;
  readonly offset: bigint;
  readonly decision_id: string;
  readonly receipt: Receipt;
  readonly payload: Uint8Array;
  /** each `busguard-annotation-<name>` header, name without the prefix, value as UTF-8; all under the seal */
  readonly annotations: Readonly<Record<string, string>>;
  readonly attestation: Attestation;
  readonly view: View | undefined;
}

export interface Refusal {
  readonly topic: string;
  readonly partition: number;
  readonly offset: bigint;
  readonly reason: RefusalReason;
  readonly detail: string;
  readonly last_offset?: bigint;
}

export interface Batch<View = unknown> {
  readonly deliveries: Array<Delivery<View>>;
  readonly refusals: Refusal[];
  /** `${topic}\u0000${partition}` -> the next offset to read there */
  readonly positions: Map<string, { topic: string; partition: number; offset: bigint }>;
}

/** A kind's reader: the typed view of an admitted payload; throwing refuses it as `unreadable`. */
export type Reader<View> = (delivery: Delivery<View>) => View;

export interface AdmitterOptions<View> {
  readonly guardPublicKey: Uint8Array;
  readonly agentId: string;
  readonly readers?: ReadonlyMap<string, Reader<View>>;
  readonly heads?: HeadCache;
}

const EMPTY = new Uint8Array(0);
const lossy = new TextDecoder("utf-8");

function isUndecodable(r: Fetched | Undecodable): r is Undecodable {
  return "undecodable" in r;
}

function principalOrNull(agentId: string): string | null {
  try {
    return canonicalPrincipal(agentId);
  } catch {
    return null;
  }
}

export class Admitter<View = unknown> {
  readonly guardPublicKey: Uint8Array;
  readonly agentId: string;
  readonly readers: ReadonlyMap<string, Reader<View>>;
  readonly heads: HeadCache;
  readonly #me: string;

  constructor(opts: AdmitterOptions<View>) {
    if (!(opts.guardPublicKey instanceof Uint8Array) || opts.guardPublicKey.length !== 32) {
      throw new Error("guardPublicKey: the raw 32 bytes of an Ed25519 public key (`guardKeyFromMultikey('z6Mk…')` converts the config's string)");
    }
    this.guardPublicKey = opts.guardPublicKey;
    this.agentId = opts.agentId;
    this.#me = canonicalPrincipal(opts.agentId); // a malformed own id is the caller's bug: it throws now
    this.readers = opts.readers ?? new Map<string, Reader<View>>();
    this.heads = opts.heads ?? new HeadCache();
  }

  /** Decide each record in order; never throws for a record's contents. */
  admit(records: ReadonlyArray<Fetched | Undecodable>): Batch<View> {
    const batch: Batch<View> = { deliveries: [], refusals: [], positions: new Map() };
    for (const r of records) {
      const at = `${r.topic}\u0000${r.partition}`;
      if (isUndecodable(r)) {
        const span = r.lastOffset === undefined || r.lastOffset === r.offset ? undefined : r.lastOffset;
        batch.positions.set(at, { topic: r.topic, partition: r.partition, offset: (span ?? r.offset) + 1n });
        const where = span === undefined ? "" : ` (offsets ${r.offset}..${span})`;
        const refusal: Refusal = {
          topic: r.topic,
          partition: r.partition,
          offset: r.offset,
          reason: UNDECODABLE,
          detail: `${r.undecodable}${where}: ${r.detail}`.slice(0, MAX_DETAIL),
          ...(span === undefined ? {} : { last_offset: span }),
        };
        batch.refusals.push(refusal);
        continue;
      }
      batch.positions.set(at, { topic: r.topic, partition: r.partition, offset: r.offset + 1n });
      const outcome = this.#open(r);
      if ("reason" in outcome) batch.refusals.push(outcome);
      else batch.deliveries.push(outcome);
    }
    return batch;
  }

  #open(r: Fetched): Delivery<View> | Refusal {
    const value = r.value ?? EMPTY;
    const refuse = (reason: RefusalReason, detail: string): Refusal => ({ topic: r.topic, partition: r.partition, offset: r.offset, reason, detail: detail.slice(0, MAX_DETAIL) });
    let att: Attestation;
    let receipt: Receipt;
    try {
      att = checkAdmitted(openAttestation(r.headers, this.guardPublicKey, this.heads), value, r.headers);
      receipt = decodeReceipt(r.headers.find(([k]) => k === HEADER_RECEIPT)?.[1] ?? EMPTY);
    } catch (exc) {
      return refuse(UNATTESTED, (exc as Error).message);
    }
    if (receipt.receiver !== this.agentId && principalOrNull(receipt.receiver) !== this.#me) {
      return refuse(NOT_FOR_ME, `addressed to ${JSON.stringify(receipt.receiver.slice(0, 128))}, not to ${JSON.stringify(this.agentId.slice(0, 128))}`);
    }
    const annotations: Record<string, string> = {};
    for (const [k, v] of r.headers) {
      if (k.startsWith(HEADER_ANNOTATION_PREFIX)) annotations[k.slice(HEADER_ANNOTATION_PREFIX.length)] = lossy.decode(v ?? EMPTY);
    }
    const delivery: Delivery<View> = {
      topic: r.topic,
      partition: r.partition,
      offset: r.offset,
      decision_id: att.decision_id,
      receipt,
      payload: value,
      annotations,
      attestation: att,
      view: undefined,
    };
    const reader = this.readers.get(receipt.kind);
    if (reader === undefined) return delivery;
    try {
      return { ...delivery, view: reader(delivery) };
    } catch (exc) {
      return refuse(UNREADABLE, `${receipt.kind}: ${(exc as Error).message}`);
    }
  }
}
