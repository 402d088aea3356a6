/**
 * A durable done-set (busguard.sdk.doneset.SqliteDoneSet, the same schema
 * and file): each admitted decision is acted on once, across crashes.
 * `claim` opens one IMMEDIATE write transaction on the agent's own SQLite
 * database, marks the decision id done and hands back the connection, so
 * the agent's effect (a row in the same database) and the mark commit
 * together or not at all. Replies are staged in the same transaction (the
 * outbox) and sent after the commit, then dropped; a crash between re-sends
 * the very same bytes, which busguard records as an `exact_duplicate`.
 * WAL and synchronous=FULL: a committed mark survives kill -9.
 *
 * The horizon: `forgetBefore(t)` drops marks older than `t` and records `t`
 * (never moved back); a claim given the decision's `decidedAt` refuses a
 * decision decided before it (`beforeHorizon`).
 *
 * Bound: one row per decision id handled; at most `MAX_STAGED` replies per claim.
 *
 * `DoneSet` is what ActOnce needs of a done-set: this one is synchronous
 * (better-sqlite3 is), `PostgresDoneSet` (pgdoneset.ts) asynchronous (pg is);
 * its `mode` says which, and fixes whether an effect returns a Promise.
 */
import { createHash } from "node:crypto";
import Database from "better-sqlite3";
import { decode, encode } from "@msgpack/msgpack";
import type { Header } from "./envelope.js";

export const IDEMPOTENCY_CONTEXT = "busguard/sdk/idempotency/v1\u0000";
export const MAX_DECISION_ID = 256;
export const MAX_STAGED = 16;

const SCHEMA = [
  "CREATE TABLE IF NOT EXISTS busguard_done (decision_id TEXT PRIMARY KEY, done_at_ms INTEGER NOT NULL) WITHOUT ROWID",
  "CREATE TABLE IF NOT EXISTS busguard_outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, decision_id TEXT NOT NULL," +
    " topic TEXT NOT NULL, key BLOB, value BLOB NOT NULL, headers BLOB NOT NULL)",
  "CREATE TABLE IF NOT EXISTS busguard_horizon (id INTEGER PRIMARY KEY CHECK (id = 0), before_ms INTEGER NOT NULL)",
];

/** A token derived only from the decision id: a re-delivery presents the same one to an external system. */
export function idempotencyToken(decisionId: string): string {
  return createHash("sha256").update(IDEMPOTENCY_CONTEXT, "utf8").update(decisionId, "utf8").digest("hex");
}

/** A reply in the outbox; `id` orders it (0 until stored). */
export interface Staged {
  readonly id: number;
  readonly decisionId: string;
  readonly topic: string;
  readonly key: Uint8Array | null;
  readonly value: Uint8Array;
  readonly headers: Header[];
}

/** One open transaction: write the effect through `connection`; stage replies. */
export class Claim<C = Database.Database> {
  readonly token: string;
  readonly staged: Staged[] = [];

  constructor(
    readonly connection: C,
    readonly decisionId: string,
    /** false: already done, or decided before the horizon (then do nothing) */
    readonly claimed: boolean,
    readonly beforeHorizon = false,
    readonly horizonMs: number | null = null,
  ) {
    this.token = idempotencyToken(decisionId);
  }

  /** Keep a reply to send once this transaction commits. */
  stage(topic: string, key: Uint8Array | null, value: Uint8Array, headers: readonly Header[]): void {
    if (!this.claimed) {
      const why = this.beforeHorizon ? "was decided before the done-set's horizon" : "was already done";
      throw new Error(`decision ${JSON.stringify(this.decisionId)} ${why}: nothing to reply`);
    }
    if (this.staged.length >= MAX_STAGED) throw new Error(`more than ${MAX_STAGED} replies staged for one decision`);
    this.staged.push({ id: 0, decisionId: this.decisionId, topic, key, value, headers: [...headers] });
  }
}

export interface ClaimOptions {
  readonly nowMs?: number;
  /** the attestation's `decided_at`: a decision decided before the horizon is not claimed */
  readonly decidedAt?: number;
}

/** A synchronous done-set returns `T`; an asynchronous one a `Promise<T>`. */
export type DoneSetMode = "sync" | "async";
export type Returned<M extends DoneSetMode, T> = M extends "async" ? Promise<T> : T;

/** What ActOnce needs of a done-set (`SqliteDoneSet`, `PostgresDoneSet`). */
export interface DoneSet<C, M extends DoneSetMode> {
  readonly mode: M;
  readonly connection: C;
  /** `body` is the transaction: it commits when `body` returns (or its Promise resolves), rolls back when it throws. */
  claim<T>(decisionId: string, body: (tx: Claim<C>) => Returned<M, T>, opts?: ClaimOptions): Returned<M, T>;
  isDone(decisionId: string): Returned<M, boolean>;
  horizonMs(): Returned<M, number | null>;
  outbox(): Returned<M, Staged[]>;
  sent(staged: Staged): Returned<M, void>;
}

export function checkDecisionId(decisionId: string): void {
  if (decisionId.length === 0 || decisionId.length > MAX_DECISION_ID) {
    throw new Error(`decisionId: ${decisionId.length} characters; allowed 1..${MAX_DECISION_ID}`);
  }
}

/** When a mark is stamped: the agent's clock, or `decidedAt` when later, so `forgetBefore(t)` forgets only decisions decided before `t`. */
export function markTime(opts: ClaimOptions): number {
  const now = opts.nowMs ?? Date.now();
  return opts.decidedAt === undefined ? now : Math.max(now, opts.decidedAt);
}

export function encodeHeaders(headers: readonly Header[]): Uint8Array {
  return encode(headers.map(([k, v]) => [k, v ?? new Uint8Array(0)]));
}

export function decodeHeaders(raw: Uint8Array): Header[] {
  const parsed = decode(raw);
  if (!Array.isArray(parsed)) throw new Error("busguard_outbox.headers: not a msgpack array");
  return parsed.map((h): Header => {
    if (!Array.isArray(h) || typeof h[0] !== "string" || !(h[1] instanceof Uint8Array)) throw new Error("busguard_outbox.headers: an item is not [str, bytes]");
    return [h[0], h[1]];
  });
}

function isThenable(value: unknown): boolean {
  return (typeof value === "object" || typeof value === "function") && value !== null && typeof (value as { then?: unknown }).then === "function";
}

interface OutboxRow {
  id: number;
  decision_id: string;
  topic: string;
  key: Buffer | null;
  value: Buffer;
  headers: Buffer;
}

export class SqliteDoneSet implements DoneSet<Database.Database, "sync"> {
  readonly mode = "sync";
  readonly connection: Database.Database;

  /** `timeoutMs`: how long a claim waits for another process's claim on the same file. */
  constructor(path: string, opts: { timeoutMs?: number } = {}) {
    this.connection = new Database(path, { timeout: opts.timeoutMs ?? 5000 });
    this.connection.pragma("journal_mode = WAL");
    this.connection.pragma("synchronous = FULL");
    for (const s of SCHEMA) this.connection.exec(s);
  }

  /**
   * Mark `decisionId` done in one IMMEDIATE transaction around `body`: it
   * commits (mark, effect, staged replies) when `body` returns, and rolls
   * everything back when it throws. `body` must be synchronous: a Promise
   * (an async effect) is refused and rolled back, since the transaction
   * would commit before it settled (PostgresDoneSet takes async effects).
   */
  claim<T>(decisionId: string, body: (tx: Claim) => T, opts: ClaimOptions = {}): T {
    checkDecisionId(decisionId);
    const at = markTime(opts);
    const db = this.connection;
    db.exec("BEGIN IMMEDIATE");
    try {
      const horizon = opts.decidedAt === undefined ? null : this.horizonMs();
      let tx: Claim;
      if (opts.decidedAt !== undefined && horizon !== null && opts.decidedAt < horizon) {
        tx = new Claim(db, decisionId, false, true, horizon);
      } else {
        const info = db.prepare("INSERT OR IGNORE INTO busguard_done (decision_id, done_at_ms) VALUES (?, ?)").run(decisionId, at);
        tx = new Claim(db, decisionId, info.changes === 1, false, horizon);
      }
      const result = body(tx);
      if (isThenable(result)) throw new TypeError(`claim ${JSON.stringify(decisionId)}: the body returned a Promise; the SQLite done-set's transaction is synchronous (use PostgresDoneSet for an async effect)`);
      const insert = db.prepare("INSERT INTO busguard_outbox (decision_id, topic, key, value, headers) VALUES (?, ?, ?, ?, ?)");
      for (const s of tx.staged) insert.run(s.decisionId, s.topic, s.key === null ? null : Buffer.from(s.key), Buffer.from(s.value), Buffer.from(encodeHeaders(s.headers)));
      db.exec("COMMIT");
      return result;
    } catch (exc) {
      if (db.inTransaction) db.exec("ROLLBACK");
      throw exc;
    }
  }

  /** The committed replies not yet sent, oldest first. */
  outbox(): Staged[] {
    const rows = this.connection.prepare("SELECT id, decision_id, topic, key, value, headers FROM busguard_outbox ORDER BY id").all() as OutboxRow[];
    return rows.map((r) => ({ id: r.id, decisionId: r.decision_id, topic: r.topic, key: r.key, value: r.value, headers: decodeHeaders(r.headers) }));
  }

  /** Drop a reply the broker acknowledged. */
  sent(staged: Staged): void {
    this.connection.prepare("DELETE FROM busguard_outbox WHERE id = ?").run(staged.id);
  }

  isDone(decisionId: string): boolean {
    return this.connection.prepare("SELECT 1 FROM busguard_done WHERE decision_id = ?").get(decisionId) !== undefined;
  }

  /** Drop marks older than `atMs` and make it the horizon (unless already later); returns how many marks. */
  forgetBefore(atMs: number): number {
    const db = this.connection;
    return db.transaction(() => {
      const dropped = db.prepare("DELETE FROM busguard_done WHERE done_at_ms < ?").run(atMs).changes;
      db.prepare("INSERT INTO busguard_horizon (id, before_ms) VALUES (0, ?) ON CONFLICT (id) DO UPDATE SET before_ms = max(before_ms, excluded.before_ms)").run(atMs);
      return dropped;
    }).immediate();
  }

  /** The latest `forgetBefore` time (epoch ms), null if it never forgot. */
  horizonMs(): number | null {
    const row = this.connection.prepare("SELECT before_ms FROM busguard_horizon WHERE id = 0").get() as { before_ms: number } | undefined;
    return row === undefined ? null : row.before_ms;
  }

  close(): void {
    this.connection.close();
  }
}
