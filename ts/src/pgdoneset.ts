/**
 * The done-set in PostgreSQL (busguard.sdk.pgdoneset.PostgresDoneSet, the
 * same tables), for an agent whose own data lives there or whose replicas
 * share one done-set. `claim` opens a transaction on the agent's `pg`
 * client, inserts the mark with `ON CONFLICT DO NOTHING` and hands the
 * client to the effect, so the effect's writes and the mark commit together
 * or not at all. Two replicas claiming one id serialize on its row: the
 * second waits for the first to commit (then sees it done) or to roll back
 * (then claims it); a process killed inside a claim closes its socket, and
 * PostgreSQL rolls its transaction back.
 *
 * pg is asynchronous, so this done-set is (`mode` "async"): every method
 * returns a Promise and the claim's body (ActOnce's effect) may await
 * queries on `tx.connection`; the transaction stays open until it settles.
 *
 * The horizon is as in doneset.ts: a claim given `decidedAt` reads the
 * horizon row `FOR SHARE` before it marks, and `forgetBefore` updates that
 * row before it deletes, so claims and forgets on several connections
 * serialize on it.
 *
 * One check Python's lacks: PostgreSQL answers COMMIT of a transaction an
 * earlier statement aborted with ROLLBACK, not an error; an effect that
 * caught its own failed query would otherwise look committed while its mark
 * was not, and ActOnce would commit the offset past a task never acted on.
 * Here that COMMIT throws.
 */
import pg from "pg";
import { Claim, checkDecisionId, decodeHeaders, encodeHeaders, markTime, type ClaimOptions, type DoneSet, type Staged } from "./doneset.js";

export interface PostgresOptions {
  /** the tables' schema (created if missing); default: the connection's search path */
  readonly schema?: string;
}

interface OutboxRow {
  id: string;
  decision_id: string;
  topic: string;
  key: Buffer | null;
  value: Buffer;
  headers: Buffer;
}

function ident(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/** A bigint column (pg returns int8 as text) as a JS number: epoch milliseconds and outbox ids stay below 2^53. */
function int8(text: string, what: string): number {
  const n = Number(text);
  if (!Number.isSafeInteger(n)) throw new Error(`${what}: ${JSON.stringify(text)}; allowed an integer below 2^53`);
  return n;
}

export class PostgresDoneSet implements DoneSet<pg.Client, "async"> {
  readonly mode = "async";
  readonly #done: string;
  readonly #outbox: string;
  readonly #horizon: string;

  private constructor(
    /** the agent's connection: the effect writes through `tx.connection`, which is this client */
    readonly connection: pg.Client,
    schema: string | undefined,
  ) {
    const prefix = schema === undefined ? "" : `${ident(schema)}.`;
    this.#done = `${prefix}busguard_done`;
    this.#outbox = `${prefix}busguard_outbox`;
    this.#horizon = `${prefix}busguard_horizon`;
  }

  /** Connect (one `pg.Client`) and create the schema and tables if missing. */
  static async open(connection: string | pg.ClientConfig, opts: PostgresOptions = {}): Promise<PostgresDoneSet> {
    const client = new pg.Client(connection);
    // An idle connection that breaks emits "error"; unheard, it would kill the process. Heard, the next query rejects.
    client.on("error", () => undefined);
    await client.connect();
    const done = new PostgresDoneSet(client, opts.schema);
    try {
      await done.#transaction(async () => {
        // CREATE … IF NOT EXISTS races with itself (a unique violation in the catalog): replicas starting together take turns
        await client.query("SELECT pg_advisory_xact_lock(hashtext($1))", [`busguard_doneset:${opts.schema ?? ""}`]);
        if (opts.schema !== undefined) await client.query(`CREATE SCHEMA IF NOT EXISTS ${ident(opts.schema)}`);
        await client.query(`CREATE TABLE IF NOT EXISTS ${done.#done} (decision_id text PRIMARY KEY, done_at_ms bigint NOT NULL)`);
        await client.query(
          `CREATE TABLE IF NOT EXISTS ${done.#outbox} (id bigserial PRIMARY KEY, decision_id text NOT NULL,` +
            " topic text NOT NULL, key bytea, value bytea NOT NULL, headers bytea NOT NULL)",
        );
        await client.query(`CREATE TABLE IF NOT EXISTS ${done.#horizon} (id int PRIMARY KEY CHECK (id = 0), before_ms bigint)`);
        await client.query(`INSERT INTO ${done.#horizon} (id, before_ms) VALUES (0, NULL) ON CONFLICT DO NOTHING`);
      });
    } catch (exc) {
      await client.end();
      throw exc;
    }
    return done;
  }

  async #transaction<T>(body: () => Promise<T>): Promise<T> {
    const c = this.connection;
    await c.query("BEGIN");
    let result: T;
    try {
      result = await body();
    } catch (exc) {
      await c.query("ROLLBACK").catch(() => undefined); // a broken connection has rolled back already
      throw exc;
    }
    const commit = await c.query("COMMIT");
    if (commit.command !== "COMMIT") throw new Error(`COMMIT answered ${commit.command}: a statement in the transaction failed earlier, nothing was committed`);
    return result;
  }

  /**
   * Mark `decisionId` done in one transaction around `body`: it commits
   * (mark, effect, staged replies) when `body`'s Promise resolves, and rolls
   * everything back when it rejects. With `decidedAt`, a decision decided
   * before the horizon is not claimed.
   */
  claim<T>(decisionId: string, body: (tx: Claim<pg.Client>) => Promise<T> | T, opts: ClaimOptions = {}): Promise<T> {
    checkDecisionId(decisionId);
    const at = markTime(opts);
    const c = this.connection;
    return this.#transaction(async () => {
      let horizon: number | null = null;
      if (opts.decidedAt !== undefined) {
        const rows = (await c.query<{ before_ms: string | null }>(`SELECT before_ms FROM ${this.#horizon} WHERE id = 0 FOR SHARE`)).rows;
        const raw = rows[0]?.before_ms ?? null;
        horizon = raw === null ? null : int8(raw, "busguard_horizon.before_ms");
      }
      let tx: Claim<pg.Client>;
      if (opts.decidedAt !== undefined && horizon !== null && opts.decidedAt < horizon) {
        tx = new Claim(c, decisionId, false, true, horizon);
      } else {
        const mark = await c.query(`INSERT INTO ${this.#done} (decision_id, done_at_ms) VALUES ($1, $2) ON CONFLICT DO NOTHING`, [decisionId, at]);
        tx = new Claim(c, decisionId, mark.rowCount === 1, false, horizon);
      }
      const result = await body(tx);
      for (const s of tx.staged) {
        await c.query(`INSERT INTO ${this.#outbox} (decision_id, topic, key, value, headers) VALUES ($1, $2, $3, $4, $5)`, [
          s.decisionId,
          s.topic,
          s.key === null ? null : Buffer.from(s.key),
          Buffer.from(s.value),
          Buffer.from(encodeHeaders(s.headers)),
        ]);
      }
      return result;
    });
  }

  async isDone(decisionId: string): Promise<boolean> {
    return (await this.connection.query(`SELECT 1 FROM ${this.#done} WHERE decision_id = $1`, [decisionId])).rowCount === 1;
  }

  /** The committed replies not yet sent, oldest first. */
  async outbox(): Promise<Staged[]> {
    const rows = (await this.connection.query<OutboxRow>(`SELECT id, decision_id, topic, key, value, headers FROM ${this.#outbox} ORDER BY id`)).rows;
    return rows.map((r) => ({
      id: int8(r.id, "busguard_outbox.id"),
      decisionId: r.decision_id,
      topic: r.topic,
      key: r.key,
      value: r.value,
      headers: decodeHeaders(r.headers),
    }));
  }

  /** Drop a reply the broker acknowledged. */
  async sent(staged: Staged): Promise<void> {
    await this.connection.query(`DELETE FROM ${this.#outbox} WHERE id = $1`, [staged.id]);
  }

  /** Drop marks older than `atMs` and make it the horizon (unless already later), in one transaction; returns how many marks. */
  forgetBefore(atMs: number): Promise<number> {
    const c = this.connection;
    return this.#transaction(async () => {
      await c.query(`UPDATE ${this.#horizon} SET before_ms = GREATEST(COALESCE(before_ms, $1), $1) WHERE id = 0`, [atMs]);
      return (await c.query(`DELETE FROM ${this.#done} WHERE done_at_ms < $1`, [atMs])).rowCount ?? 0;
    });
  }

  /** The latest `forgetBefore` time (epoch ms), null if it never forgot. */
  async horizonMs(): Promise<number | null> {
    const rows = (await this.connection.query<{ before_ms: string | null }>(`SELECT before_ms FROM ${this.#horizon} WHERE id = 0`)).rows;
    const raw = rows[0]?.before_ms ?? null;
    return raw === null ? null : int8(raw, "busguard_horizon.before_ms");
  }

  close(): Promise<void> {
    return this.connection.end();
  }
}
