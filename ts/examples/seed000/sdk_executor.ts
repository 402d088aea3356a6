/**
 * The seed-000 executor in TypeScript (examples/seed000/sdk_executor.py's
 * twin): each handoff busguard admitted for it is acted on once, across
 * kill -9. The effect is a row in `effects` of its own SQLite database
 * (`DIR/executor.db`, the done-set's), and a signed `ack` staged in the same
 * transaction, sent after the commit; offsets are committed after that.
 *
 *     node dist/examples/seed000/sdk_executor.js --pipeline DIR      # until SIGTERM
 */
import { createHash } from "node:crypto";
import { join } from "node:path";
import { ActOnce, AdmittingConsumer, Sender, SigningProducer, SqliteDoneSet, type Claim, type Delivery, type Reply } from "../../src/index.js";
import { arg, guardKey, loadPipeline, readSeed, say, stopSignal } from "./common.js";

const NAME = "ts-executor";
const EFFECTS = "CREATE TABLE IF NOT EXISTS effects (decision_id TEXT PRIMARY KEY, task_id TEXT NOT NULL, handoff_receipt TEXT NOT NULL, result TEXT NOT NULL)";

/** The "work": deterministic, so the ack's payload depends only on the handoff (as in Python). */
export function resultOf(taskId: string, work: Uint8Array): Uint8Array {
  const digest = createHash("sha256").update(work).digest("hex").slice(0, 16);
  return Buffer.from(JSON.stringify({ result: digest, status: "done", task_id: taskId }));
}

async function main(): Promise<void> {
  const dir = arg("pipeline");
  const p = loadPipeline(dir);
  const stop = stopSignal();
  const done = new SqliteDoneSet(join(dir, "executor.db"));
  done.connection.exec(EFFECTS);
  const insert = done.connection.prepare("INSERT INTO effects (decision_id, task_id, handoff_receipt, result) VALUES (?, ?, ?, ?)");
  const sender = new Sender(readSeed(join(dir, "executor.key")), { sessionPath: join(dir, "sdk-executor.session.json") });
  const producer = SigningProducer.create(sender, { bootstrapServers: p.bootstrap, clientId: NAME, idempotent: false } /* as common.py's, for tansu */);
  const inbox = await AdmittingConsumer.open({
    assign: [{ topic: p.executor_inbox, partition: 0 }],
    bootstrapServers: p.bootstrap,
    groupId: `${p.handoffs}.sdk-executor`,
    guardPublicKey: guardKey(p),
    agentId: p.executor,
    clientId: NAME,
  });
  const effect = (d: Delivery, tx: Claim): Reply[] => {
    const r = d.receipt;
    const result = resultOf(r.task_id, d.payload);
    void tx; // the effect's row goes through the done-set's connection, inside the claim's transaction
    insert.run(d.decision_id, r.task_id, d.attestation.receipt_id ?? "", Buffer.from(result).toString());
    return [{ topic: p.acks, kind: "ack", taskId: r.task_id, receiver: r.sender, payload: result }];
  };
  const loop = new ActOnce(inbox, done, { effect, producer });
  say(NAME, `acting on ${p.executor_inbox}; effects in ${join(dir, "executor.db")}`);
  try {
    while (!stop.aborted) {
      const step = await loop.step(300);
      if (step.acted || step.skipped || step.refused) {
        say(NAME, `acted ${step.acted}, skipped ${step.skipped} (done before), refused ${step.refused}, acks sent ${step.repliesSent}`);
      }
    }
  } finally {
    await inbox.close();
    await producer.close();
    done.close();
  }
}

await main();
