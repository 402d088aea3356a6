/**
 * For tests/integration/test_ts_read_committed.py: `AdmittingConsumer.open`
 * on partition 0 of `--topic` (assigned, offsets to `--group`), with
 * `readCommitted` unless `--uncommitted` is given. Reads until `--decisions`
 * records were decided (delivered or refused), then three more steps (to see
 * any extra), and prints {"decided": [[offset, outcome], ...], "next":
 * offset} as one JSON line: `outcome` is "delivered" or the refusal's reason.
 */
import { AdmittingConsumer } from "../src/index.js";

function arg(name: string): string {
  const i = process.argv.indexOf(`--${name}`);
  const v = process.argv[i + 1];
  if (i < 0 || v === undefined) throw new Error(`--${name} is required`);
  return v;
}

const inbox = await AdmittingConsumer.open({
  assign: [{ topic: arg("topic"), partition: 0 }],
  bootstrapServers: arg("bootstrap"),
  groupId: arg("group"),
  guardPublicKey: new Uint8Array(32).fill(7), // no record here is the guard's: every one is refused unattested
  agentId: "reader",
  readCommitted: !process.argv.includes("--uncommitted"),
  onRefusal: () => undefined,
});
const decided: Array<[string, string]> = [];
let next = "0";
let extra = 3;
const deadline = Date.now() + 60_000;
try {
  while (extra > 0) {
    if (Date.now() > deadline) throw new Error(`so far ${JSON.stringify(decided)}`);
    const batch = await inbox.getmany(500);
    for (const d of batch.deliveries) decided.push([d.offset.toString(), "delivered"]);
    for (const r of batch.refusals) decided.push([r.offset.toString(), r.reason]);
    for (const p of batch.positions.values()) next = p.offset.toString();
    if (decided.length >= Number(arg("decisions"))) extra--;
  }
} finally {
  await inbox.close();
}
process.stdout.write(JSON.stringify({ decided, next }) + "\n");
