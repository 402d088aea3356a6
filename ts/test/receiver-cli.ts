/**
 * A receiver as docs/sdk.md's TypeScript example writes it, for
 * tests/integration/test_ts_hostile.py: `AdmittingConsumer.open` as a group
 * member of `--group` on `--topic`, a SQLite done-set at `--db`, an effect
 * that writes one row per task. Steps until `--acted` deliveries were acted
 * on and `--refused` records refused, then two more steps, and prints
 * {"acted", "skipped", "refused", "reasons"} as one JSON line.
 */
import { ActOnce, AdmittingConsumer, SqliteDoneSet, guardKeyFromMultikey, type Delivery } from "../src/index.js";

function arg(name: string): string {
  const i = process.argv.indexOf(`--${name}`);
  const v = process.argv[i + 1];
  if (i < 0 || v === undefined) throw new Error(`--${name} is required`);
  return v;
}

const reasons: Record<string, number> = {};
const done = new SqliteDoneSet(arg("db"));
done.connection.exec("CREATE TABLE IF NOT EXISTS work (task_id TEXT, decision_id TEXT)");
const insert = done.connection.prepare("INSERT INTO work VALUES (?, ?)");
const inbox = await AdmittingConsumer.open({
  topics: arg("topic"),
  bootstrapServers: arg("bootstrap"),
  groupId: arg("group"),
  guardPublicKey: guardKeyFromMultikey(arg("guard")),
  agentId: arg("agent"),
  sessionTimeoutMs: 6000,
  onRefusal: (r) => {
    reasons[r.reason] = (reasons[r.reason] ?? 0) + 1;
  },
});
const loop = new ActOnce(inbox, done, { effect: (d: Delivery) => void insert.run(d.receipt.task_id, d.decision_id) });
const total = { acted: 0, skipped: 0, refused: 0 };
const deadline = Date.now() + 90_000;
let extra = 2;
try {
  while (extra > 0) {
    if (Date.now() > deadline) throw new Error(`so far ${JSON.stringify(total)}, reasons ${JSON.stringify(reasons)}`);
    const step = await loop.step(300);
    total.acted += step.acted;
    total.skipped += step.skipped;
    total.refused += step.refused;
    if (total.acted >= Number(arg("acted")) && total.refused >= Number(arg("refused"))) extra--;
  }
} finally {
  await inbox.close();
  done.close();
}
process.stdout.write(JSON.stringify({ ...total, reasons }) + "\n");
