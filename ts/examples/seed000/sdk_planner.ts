/**
 * The seed-000 planner in TypeScript, acting once on both ends:
 *
 * - each handoff is planned once: `claim("plan:<task>")` in its done-set
 *   stages the signed handoff in the same transaction (the outbox), and
 *   `ActOnce.flush` sends it; a kill -9 before the send re-sends the very
 *   same bytes (busguard: `exact_duplicate`), never a second, re-signed one;
 * - each ack busguard admitted for it is acted on once (`ActOnce`): a row in
 *   `acks` of its own database (`DIR/planner.db`).
 *
 *     node dist/examples/seed000/sdk_planner.js --pipeline DIR --tasks 200 --pace 0.25   # until SIGTERM
 *
 * `DIR/sdk-planner.sent.json` lists the tasks once all are handed off.
 */
import { renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ActOnce, AdmittingConsumer, Sender, SigningProducer, SqliteDoneSet, type Claim, type Delivery } from "../../src/index.js";
import { arg, guardKey, loadPipeline, readSeed, say, stopSignal } from "./common.js";

const NAME = "ts-planner";
const ACKS = "CREATE TABLE IF NOT EXISTS acks (decision_id TEXT PRIMARY KEY, task_id TEXT NOT NULL)";

export function work(i: number): Uint8Array {
  return Buffer.from(JSON.stringify({ op: "summarize", doc: `report-${i}` }));
}

async function main(): Promise<void> {
  const dir = arg("pipeline");
  const tasks = Number(arg("tasks", "200"));
  const paceMs = Number(arg("pace", "0")) * 1000;
  const p = loadPipeline(dir);
  const stop = stopSignal();
  const done = new SqliteDoneSet(join(dir, "planner.db"));
  done.connection.exec(ACKS);
  const insert = done.connection.prepare("INSERT INTO acks (decision_id, task_id) VALUES (?, ?)");
  const sender = new Sender(readSeed(join(dir, "planner.key")), { sessionPath: join(dir, "sdk-planner.session.json") });
  const producer = SigningProducer.create(sender, { bootstrapServers: p.bootstrap, clientId: NAME, idempotent: false }); // as common.py's, for tansu
  const inbox = await AdmittingConsumer.open({
    assign: [{ topic: p.planner_inbox, partition: 0 }],
    bootstrapServers: p.bootstrap,
    groupId: `${p.handoffs}.sdk-planner`,
    guardPublicKey: guardKey(p),
    agentId: p.planner,
    clientId: NAME,
  });
  const effect = (d: Delivery, tx: Claim): void => {
    void tx; // the row goes through the done-set's connection, inside the claim's transaction
    if (d.receipt.kind === "ack") insert.run(d.decision_id, d.receipt.task_id);
  };
  const loop = new ActOnce(inbox, done, { effect, producer });
  say(NAME, `acting on ${p.planner_inbox}; acks in ${join(dir, "planner.db")}`);
  let next = 1;
  let due = Date.now();
  let announced = false;
  try {
    while (!stop.aborted) {
      if (next <= tasks && Date.now() >= due) {
        const task = `task-${next}`;
        const planned = done.claim(`plan:${task}`, (tx) => {
          if (!tx.claimed) return false; // planned by an earlier run: its handoff is in the outbox or sent
          const rec = sender.sign({ kind: "handoff", taskId: task, receiver: p.executor, payload: work(next) });
          tx.stage(p.handoffs, producer.key, rec.value, rec.headers);
          return true;
        });
        next++;
        if (!planned) continue;
        due = Date.now() + paceMs;
        await loop.flush();
      } else if (next > tasks && !announced) {
        const sent = join(dir, "sdk-planner.sent.json");
        writeFileSync(sent + ".tmp", JSON.stringify(Array.from({ length: tasks }, (_, i) => `task-${i + 1}`)));
        renameSync(sent + ".tmp", sent);
        say(NAME, `handed off ${tasks} tasks`);
        announced = true;
      }
      const step = await loop.step(next <= tasks ? Math.max(10, Math.min(100, due - Date.now())) : 300);
      if (step.acted || step.refused) say(NAME, `acks acted on ${step.acted}, skipped ${step.skipped}, refused ${step.refused}`);
    }
  } finally {
    await inbox.close();
    await producer.close();
    done.close();
  }
}

await main();
