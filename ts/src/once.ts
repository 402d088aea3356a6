/**
 * Act on each admitted task exactly once (busguard.sdk.once.ActOnce), in the
 * one order that survives a crash at any instant:
 *
 * 1. send what an earlier run committed but did not send (the outbox: the
 *    exact bytes it signed then; busguard records them as an `exact_duplicate`);
 * 2. fetch a batch through the `AdmittingConsumer` (refusals are logged);
 * 3. for each delivery, in order, claim its decision id in the done-set and,
 *    only when the claim is new, run the effect in the same transaction; its
 *    replies are signed and staged there too; the transaction commits mark,
 *    effect and replies. A delivery decided before the done-set's horizon is
 *    refused (`before_horizon`);
 * 4. send the staged replies, dropping each once acknowledged;
 * 5. commit the batch's offsets.
 *
 * The done-set is `SqliteDoneSet` (synchronous: the effect must be too, and
 * returns its replies) or `PostgresDoneSet` (asynchronous: the effect
 * returns a Promise of them and may await queries on `tx.connection`); the
 * done-set's `mode` fixes which, at compile time.
 *
 * Crash points (`BUSGUARD_AGENT_CRASH_AT`, the same names and spec as
 * Python's): `after_claim`, `after_effect_commit`, `after_reply_sent`,
 * `before_offset_commit`; e.g. `after_claim:0.02,after_reply_sent:0.1`
 * SIGKILLs the process at each point with that probability, after writing
 * `busguard-agent-crash <point>` to stderr.
 */
import { writeSync } from "node:fs";
import type Database from "better-sqlite3";
import { BEFORE_HORIZON, MAX_DETAIL, type Batch, type Delivery, type Refusal } from "./consumer.js";
import { idempotencyToken, type Claim, type DoneSet, type DoneSetMode, type Returned } from "./doneset.js";
import type { SigningProducer } from "./kafka/producer.js";

export const CRASH_ENV = "BUSGUARD_AGENT_CRASH_AT";
export const CRASH_POINTS = ["after_claim", "after_effect_commit", "after_reply_sent", "before_offset_commit"] as const;
export type CrashPoint = (typeof CRASH_POINTS)[number];

/** A record the effect wants sent once it has committed (an ack, the next handoff). */
export interface Reply {
  readonly topic: string;
  readonly kind: string;
  readonly taskId: string;
  readonly receiver: string;
  readonly payload: Uint8Array;
}

export interface Step {
  readonly acted: number;
  readonly skipped: number;
  readonly refused: number;
  readonly repliesSent: number;
}

/** An effect written through the claim's connection, in its transaction; it may return replies (through a Promise for an async done-set). */
export type Effect<View, C = Database.Database, M extends DoneSetMode = "sync"> = (delivery: Delivery<View>, tx: Claim<C>) => Returned<M, Iterable<Reply> | void>;
/** An effect outside the done-set's database, given the idempotency token. */
export type External<View> = (delivery: Delivery<View>, token: string) => Promise<void>;

/** What ActOnce needs of the consumer (the Kafka `AdmittingConsumer`, or a test's). */
export interface Inbox<View> {
  getmany(timeoutMs: number): Promise<Batch<View>>;
  commit(batch: Batch<View>): Promise<void>;
}

export class CrashPoints {
  readonly probability = new Map<CrashPoint, number>();

  constructor(
    spec: string,
    readonly random: () => number = Math.random,
    readonly kill: (point: CrashPoint) => void = sigkill,
  ) {
    for (const item of spec.split(",").map((s) => s.trim()).filter((s) => s !== "")) {
      const [point = "", raw] = item.split(":", 2);
      if (!(CRASH_POINTS as readonly string[]).includes(point)) {
        throw new Error(`${CRASH_ENV}: point ${JSON.stringify(point)} in ${JSON.stringify(spec)}; allowed: ${CRASH_POINTS.join(", ")}`);
      }
      const p = raw === undefined || raw === "" ? 1 : Number(raw);
      if (!(p >= 0 && p <= 1)) throw new Error(`${CRASH_ENV}: probability ${JSON.stringify(raw)} for ${point} in ${JSON.stringify(spec)}; allowed a number in 0..1`);
      this.probability.set(point as CrashPoint, p);
    }
  }

  static fromEnv(): CrashPoints | undefined {
    const spec = process.env[CRASH_ENV] ?? "";
    return spec.trim() === "" ? undefined : new CrashPoints(spec);
  }

  reached(point: CrashPoint): void {
    const p = this.probability.get(point) ?? 0;
    if (p > 0 && this.random() < p) this.kill(point);
  }
}

function sigkill(point: CrashPoint): void {
  writeSync(2, `busguard-agent-crash ${point}\n`);
  process.kill(process.pid, "SIGKILL");
}

function beforeHorizon<View>(d: Delivery<View>, horizon: number | null): Refusal {
  const detail = `decided_at ${d.attestation.decided_at} is before the done-set's horizon ${horizon} (marks before it were forgotten)`;
  return { topic: d.topic, partition: d.partition, offset: d.offset, reason: BEFORE_HORIZON, detail: detail.slice(0, MAX_DETAIL) };
}

export interface ActOnceOptions<View, C = Database.Database, M extends DoneSetMode = "sync"> {
  readonly effect?: Effect<View, C, M>;
  readonly external?: External<View>;
  readonly producer?: SigningProducer;
  /** fault injection; from `BUSGUARD_AGENT_CRASH_AT` unless given */
  readonly crash?: CrashPoints;
  /** refusals decided here (`before_horizon`); default: one JSON line on stderr */
  readonly onRefusal?: (refusal: Refusal) => void;
}

/** Run `then` on a value, or on what a Promise of it resolves to: synchronous for a synchronous done-set. */
function then<A, B>(value: A | PromiseLike<A>, next: (a: A) => B): B | Promise<B> {
  const thenable = typeof value === "object" && value !== null && typeof (value as { then?: unknown }).then === "function";
  return thenable ? Promise.resolve(value).then(next) : next(value as A);
}

export class ActOnce<View = unknown, C = Database.Database, M extends DoneSetMode = "sync"> {
  readonly crash: CrashPoints | undefined;
  /** the done-set, seen as either mode: every result is awaited */
  readonly #done: DoneSet<C, DoneSetMode>;
  readonly #effect: Effect<View, C, DoneSetMode> | undefined;
  readonly #external: External<View> | undefined;
  readonly #producer: SigningProducer | undefined;
  readonly #onRefusal: (refusal: Refusal) => void;

  constructor(
    readonly inbox: Inbox<View>,
    readonly done: DoneSet<C, M>,
    opts: ActOnceOptions<View, C, M>,
  ) {
    if ((opts.effect === undefined) === (opts.external === undefined)) {
      throw new TypeError("pass exactly one of effect (in the done-set's transaction) or external (idempotency token)");
    }
    this.#done = done;
    this.#effect = opts.effect;
    this.#external = opts.external;
    this.#producer = opts.producer;
    this.crash = opts.crash ?? CrashPoints.fromEnv();
    this.#onRefusal = opts.onRefusal ?? ((r) => process.stderr.write(JSON.stringify({ event: "record_refused", ...r, offset: r.offset.toString() }) + "\n"));
  }

  /** One turn of the loop (the module doc's five steps). */
  async step(timeoutMs = 1000): Promise<Step> {
    let sent = await this.flush();
    const batch = await this.inbox.getmany(timeoutMs);
    let acted = 0;
    let skipped = 0;
    let late = 0;
    for (const d of batch.deliveries) {
      const outcome = await this.#handle(d);
      if (outcome === true) acted++;
      else if (outcome === false) skipped++;
      else {
        late++;
        this.#onRefusal(outcome);
      }
    }
    sent += await this.flush();
    this.crash?.reached("before_offset_commit");
    await this.inbox.commit(batch);
    return { acted, skipped, refused: batch.refusals.length + late, repliesSent: sent };
  }

  /** Step until `signal` is aborted (checked between batches). */
  async run(signal: AbortSignal, timeoutMs = 500): Promise<void> {
    while (!signal.aborted) await this.step(timeoutMs);
  }

  /** Send the outbox in order, dropping each reply once acknowledged. */
  async flush(): Promise<number> {
    const pending = await this.#done.outbox();
    if (pending.length > 0 && this.#producer === undefined) throw new Error("replies are staged but ActOnce has no producer to send them");
    for (const staged of pending) {
      await this.#producer?.sendRaw(staged.topic, staged.key, staged.value, staged.headers);
      this.crash?.reached("after_reply_sent");
      await this.#done.sent(staged);
    }
    return pending.length;
  }

  /** true: acted; false: already done; a refusal: decided before the horizon. */
  async #handle(d: Delivery<View>): Promise<boolean | Refusal> {
    const decidedAt = Number(d.attestation.decided_at);
    const done = this.#done;
    if (this.#external !== undefined) {
      if (await done.isDone(d.decision_id)) return false;
      const horizon = await done.horizonMs();
      if (horizon !== null && decidedAt < horizon) return beforeHorizon(d, horizon);
      await this.#external(d, idempotencyToken(d.decision_id));
      return await done.claim(d.decision_id, (tx) => (tx.beforeHorizon ? beforeHorizon(d, tx.horizonMs) : tx.claimed), { decidedAt });
    }
    const effect = this.#effect as Effect<View, C, DoneSetMode>;
    const outcome = await done.claim(
      d.decision_id,
      (tx): boolean | Refusal | Promise<boolean | Refusal> => {
        if (tx.beforeHorizon) return beforeHorizon(d, tx.horizonMs);
        if (!tx.claimed) return false;
        return then(effect(d, tx), (replies) => {
          for (const reply of replies ?? []) this.#stage(tx, reply);
          this.crash?.reached("after_claim");
          return true;
        });
      },
      { decidedAt },
    );
    if (outcome === true) this.crash?.reached("after_effect_commit");
    return outcome;
  }

  #stage(tx: Claim<C>, reply: Reply): void {
    const producer = this.#producer;
    if (producer === undefined) throw new Error("the effect returned a reply but ActOnce has no producer to sign it");
    const rec = producer.sender.sign({ kind: reply.kind, taskId: reply.taskId, receiver: reply.receiver, payload: reply.payload });
    tx.stage(reply.topic, producer.key, rec.value, rec.headers);
  }
}
