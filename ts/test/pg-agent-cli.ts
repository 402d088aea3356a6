/**
 * A receiving agent on the PostgreSQL done-set, for
 * tests/integration/test_ts_pgdoneset.py (which starts a real PostgreSQL and
 * kills this process with SIGKILL). `node pg-agent-cli.js <config.json> run`:
 * ActOnce over the config's forwards (admitted by the real `Admitter`; the
 * committed position is a file, as Kafka's would be a broker's), effect = one
 * row in `work` and one signed ack staged, replies "sent" by appending them
 * to a file; it exits 0 once every forward is committed and the outbox is
 * empty. `ops`: the done-set operations on stdin (JSON), one result each on
 * stdout, which the test compares with busguard.sdk.PostgresDoneSet's.
 * `together`: three done-sets opening fresh schemas at once, five times.
 */
import { appendFileSync, existsSync, readFileSync, renameSync, writeFileSync } from "node:fs";
// the modules it needs, not the package's index: the Kafka client's import costs ~2 s of each restart on a loaded box
import { fromHex, toHex } from "../src/bytes.js";
import { Admitter, type Batch, type Fetched } from "../src/consumer.js";
import type { Staged } from "../src/doneset.js";
import type { Header } from "../src/envelope.js";
import type { SigningProducer } from "../src/kafka/producer.js";
import { ActOnce, type Inbox, type Reply } from "../src/once.js";
import { PostgresDoneSet } from "../src/pgdoneset.js";
import { Sender } from "../src/sender.js";

interface Config {
  dsn: string;
  schema: string;
  guard_public_key_hex: string;
  agent_id: string;
  seed_hex: string;
  /** [value hex, [[name, value hex]]] per offset */
  forwards: Array<[string, Array<[string, string]>]>;
  offsets_path: string;
  session_path: string;
  sent_path: string;
  batch: number;
  effect_sleep_s: number;
}

const [configPath = "", mode = "run"] = process.argv.slice(2);
const config = JSON.parse(readFileSync(configPath, "utf8")) as Config;
const line = (o: unknown): boolean => process.stdout.write(JSON.stringify(o) + "\n");
if (mode === "together") {
  // replicas opening a fresh schema at once: the first makes the tables, the others wait and find them
  for (let i = 0; i < 5; i++) {
    const opened = await Promise.all([0, 1, 2].map(() => PostgresDoneSet.open(config.dsn, { schema: `${config.schema}_${i}` })));
    await Promise.all(opened.map((d) => d.close()));
  }
  process.exit(0);
}
const done = await PostgresDoneSet.open(config.dsn, { schema: config.schema });

function headersOf(hs: Array<[string, string]>): Header[] {
  return hs.map(([k, v]): Header => [k, fromHex(v)]);
}

async function run(): Promise<void> {
  const work = `"${config.schema}".work`; // made by the test (replicas creating it together would race)
  const admitter = new Admitter({ guardPublicKey: fromHex(config.guard_public_key_hex), agentId: config.agent_id });
  const records: Fetched[] = config.forwards.map(([v, hs], i) => ({ topic: "agents.out", partition: 0, offset: BigInt(i), value: fromHex(v), headers: headersOf(hs) }));
  let position = existsSync(config.offsets_path) ? Number(readFileSync(config.offsets_path, "utf8")) : 0;
  const inbox: Inbox<unknown> = {
    getmany: () => Promise.resolve(admitter.admit(records.slice(position, position + config.batch))),
    commit(batch: Batch<unknown>) {
      for (const p of batch.positions.values()) position = Number(p.offset);
      writeFileSync(config.offsets_path + ".tmp", String(position));
      renameSync(config.offsets_path + ".tmp", config.offsets_path);
      return Promise.resolve();
    },
  };
  const sender = new Sender(fromHex(config.seed_hex), { agentId: config.agent_id, sessionPath: config.session_path });
  // the wire: a reply is "sent" when its line is in the file (the test reads them back)
  const producer = {
    sender,
    key: Buffer.from(config.agent_id),
    sendRaw(topic: string, key: Uint8Array | null, value: Uint8Array, headers: readonly Header[]): Promise<void> {
      appendFileSync(config.sent_path, JSON.stringify({ topic, key: key === null ? null : toHex(key), value: toHex(value), headers: headers.length }) + "\n");
      return Promise.resolve();
    },
  } as unknown as SigningProducer;
  const loop = new ActOnce(inbox, done, {
    producer,
    onRefusal: (r) => line({ refused: r.reason, offset: Number(r.offset) }),
    effect: async (d, tx): Promise<Reply[]> => {
      await tx.connection.query(`INSERT INTO ${work} VALUES ($1, $2)`, [d.decision_id, d.receipt.task_id]);
      await tx.connection.query("SELECT pg_sleep($1)", [config.effect_sleep_s]);
      return [{ topic: `acks.${d.receipt.task_id}`, kind: "ack", taskId: d.receipt.task_id, receiver: d.receipt.sender, payload: Buffer.from("done") }];
    },
  });
  line({ ready: position });
  for (;;) {
    const step = await loop.step(0);
    line({ step });
    if (position >= records.length && (await done.outbox()).length === 0) break;
  }
}

type Op =
  | { op: "claim"; id: string; now_ms?: number; decided_at?: number; stage?: Array<[string, string | null, string, Array<[string, string]>]>; fail?: boolean }
  | { op: "forget"; at: number }
  | { op: "horizon" }
  | { op: "is_done"; id: string }
  | { op: "outbox" }
  | { op: "sent_first" };

function shown(s: Staged): unknown[] {
  return [s.decisionId, s.topic, s.key === null ? null : toHex(s.key), toHex(s.value), s.headers.map(([k, v]) => [k, toHex(v ?? new Uint8Array(0))])];
}

async function apply(op: Op): Promise<unknown> {
  switch (op.op) {
    case "claim": {
      const opts = { ...(op.now_ms === undefined ? {} : { nowMs: op.now_ms }), ...(op.decided_at === undefined ? {} : { decidedAt: op.decided_at }) };
      try {
        return await done.claim(
          op.id,
          (tx) => {
            for (const [topic, key, value, hs] of op.stage ?? []) tx.stage(topic, key === null ? null : fromHex(key), fromHex(value), headersOf(hs));
            if (op.fail === true) throw new Error("the effect failed");
            return Promise.resolve([tx.claimed, tx.beforeHorizon, tx.horizonMs]);
          },
          opts,
        );
      } catch {
        return "error";
      }
    }
    case "forget":
      return done.forgetBefore(op.at);
    case "horizon":
      return done.horizonMs();
    case "is_done":
      return done.isDone(op.id);
    case "outbox":
      return (await done.outbox()).map(shown);
    case "sent_first": {
      const [first] = await done.outbox();
      if (first !== undefined) await done.sent(first);
      return first !== undefined;
    }
  }
}

async function swallowed(): Promise<string> {
  // an effect that catches its own failed query: the transaction is aborted, COMMIT must not pass for a commit
  try {
    await done.claim("swallowed", async (tx) => {
      await tx.connection.query("SELECT 1/0").catch(() => undefined);
    });
    return "committed";
  } catch (exc) {
    return `${String(exc)}; is_done=${String(await done.isDone("swallowed"))}`;
  }
}

if (mode === "run") await run();
else if (mode === "ops") {
  const ops = JSON.parse(readFileSync(0, "utf8")) as Op[];
  const results: unknown[] = [];
  for (const op of ops) results.push(await apply(op));
  line({ results, swallowed: await swallowed() });
} else throw new Error(`mode ${JSON.stringify(mode)}; allowed run, ops, together`);
await done.close();
