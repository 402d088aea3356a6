/**
 * The I/O-free halves of the Kafka layer and the act-once loop: the tolerant
 * decoder's bound on inflation (the shared vectors, batches.json, cover the
 * rest), the done-set's transaction, outbox and horizon, the crash points'
 * spec, and ActOnce's order around a crash (a kill inside the claim rolls
 * the effect back; a kill after the commit leaves it done, never twice).
 */
import { strict as assert } from "node:assert";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import zlib from "node:zlib";
import {
  ActOnce,
  CrashPoints,
  SqliteDoneSet,
  decodePartition,
  idempotencyToken,
  type Attestation,
  type Batch,
  type Delivery,
  type Receipt,
} from "../src/index.js";
import { recordBatch } from "./batchbytes.js";


/** One v2 record batch at `base` of `values` (no key, no headers), its records compressed with `codec`. */
function batch(base: bigint, values: Uint8Array[], codec = 0, compress: (b: Uint8Array) => Uint8Array = (b) => b): Uint8Array {
  return recordBatch(base, values.map((v) => [null, v] as const), { attributes: codec, compress });
}

void test("a gzip batch inflating past the bound is one undecodable span, unread", () => {
  const bomb = batch(0n, [new Uint8Array(4 * 1024 * 1024), new Uint8Array(4 * 1024 * 1024)], 1, (b) => zlib.gzipSync(b));
  const small = batch(2n, [Buffer.from("ok")], 1, (b) => zlib.gzipSync(b));
  const got = decodePartition("t", 0, Buffer.concat([bomb, small]), 0n, 1024 * 1024);
  assert.equal(got.items.length, 2);
  const [first, second] = got.items;
  assert.ok(first !== undefined && "undecodable" in first && first.undecodable === "undecodable_batch");
  assert.equal(first.lastOffset, 1n);
  assert.match(first.detail, /inflate to more than 1048576 bytes/);
  assert.ok(second !== undefined && !("undecodable" in second));
  assert.deepEqual(Buffer.from(second.value ?? []).toString(), "ok");
  assert.equal(got.next, 3n);
});

void test("a batch cut by the fetch's size limit is left for the next fetch", () => {
  const whole = batch(0n, [Buffer.from("a")]);
  const cut = batch(1n, [Buffer.from("b")]).subarray(0, 40);
  const got = decodePartition("t", 0, Buffer.concat([whole, cut]), 0n);
  assert.deepEqual(got.items.map((i) => i.offset), [0n]);
  assert.equal(got.next, 1n);
});

void test("the idempotency token is the Python SDK's", () => {
  assert.equal(idempotencyToken("d-1").slice(0, 16), "a5698ebf8738cd42");
});

function doneSet(): SqliteDoneSet {
  const done = new SqliteDoneSet(join(mkdtempSync(join(tmpdir(), "doneset-")), "agent.db"));
  done.connection.exec("CREATE TABLE work (task TEXT)");
  return done;
}

void test("a claim commits mark, effect and outbox together, or none of them", () => {
  const done = doneSet();
  assert.equal(done.claim("d-1", (tx) => tx.claimed), true);
  assert.equal(done.claim("d-1", (tx) => tx.claimed), false);
  assert.throws(() =>
    done.claim("d-2", (tx) => {
      done.connection.prepare("INSERT INTO work VALUES (?)").run("t-2");
      tx.stage("acks", null, Buffer.from("x"), [["h", Buffer.from("v")]]);
      throw new Error("the effect failed");
    }),
  );
  assert.equal(done.isDone("d-2"), false);
  assert.equal(done.outbox().length, 0);
  assert.deepEqual(done.connection.prepare("SELECT count(*) AS n FROM work").get(), { n: 0 });
  done.claim("d-3", (tx) => tx.stage("acks", Buffer.from("k"), Buffer.from("x"), [["h", Buffer.from("v")]]));
  const [staged] = done.outbox();
  assert.ok(staged !== undefined);
  assert.deepEqual(staged.headers.map(([k, v]) => [k, Buffer.from(v ?? []).toString()]), [["h", "v"]]);
  done.sent(staged);
  assert.equal(done.outbox().length, 0);
});

void test("the horizon: a decision decided before it is not claimed", () => {
  const done = doneSet();
  assert.equal(done.claim("d-3", (tx) => tx.claimed, { nowMs: 100, decidedAt: 90 }), true);
  assert.equal(done.forgetBefore(200), 1);
  assert.equal(done.horizonMs(), 200);
  assert.deepEqual(done.claim("d-3", (tx) => [tx.claimed, tx.beforeHorizon], { nowMs: 300, decidedAt: 90 }), [false, true]);
  done.forgetBefore(150); // never moved back
  assert.equal(done.horizonMs(), 200);
});

void test("crash point specs: names and probabilities are checked", () => {
  assert.throws(() => new CrashPoints("after_lunch:0.5"), /point "after_lunch".*allowed: after_claim/);
  assert.throws(() => new CrashPoints("after_claim:2"), /probability "2"/);
  const hit: string[] = [];
  const points = new CrashPoints("after_claim, before_offset_commit:0.5", () => 0.4, (p) => hit.push(p));
  points.reached("after_claim");
  points.reached("before_offset_commit");
  points.reached("after_reply_sent");
  assert.deepEqual(hit, ["after_claim", "before_offset_commit"]);
});

class Crash extends Error {}

function delivery(id: string, task: string): Delivery {
  const receipt = { kind: "handoff", task_id: task, sender: "planner", receiver: "executor" } as unknown as Receipt;
  const attestation = { decided_at: 1000n, receipt_id: "r" } as unknown as Attestation;
  return { topic: "in", partition: 0, offset: 0n, decision_id: id, receipt, payload: new Uint8Array(0), annotations: {}, attestation, view: undefined };
}

function inbox(deliveries: Delivery[]): { getmany(): Promise<Batch>; commit(): Promise<void>; commits: number } {
  return {
    commits: 0,
    getmany: () => Promise.resolve({ deliveries, refusals: [], positions: new Map() }),
    commit() {
      this.commits++;
      return Promise.resolve();
    },
  };
}

void test("ActOnce acts once per decision id, and a kill inside or after the claim never makes two effects", async () => {
  const done = doneSet();
  const effect = (d: Delivery): void => {
    done.connection.prepare("INSERT INTO work VALUES (?)").run(d.receipt.task_id);
  };
  const twice = inbox([delivery("d-1", "t-1"), delivery("d-1", "t-1")]);
  assert.deepEqual(await new ActOnce(twice, done, { effect }).step(), { acted: 1, skipped: 1, refused: 0, repliesSent: 0 });
  assert.equal(twice.commits, 1);

  const die = (point: string) => (p: string) => {
    if (p === point) throw new Crash(p);
  };
  const inside = new ActOnce(inbox([delivery("d-2", "t-2")]), done, { effect, crash: new CrashPoints("after_claim", () => 0, die("after_claim")) });
  await assert.rejects(inside.step(), Crash);
  assert.equal(done.isDone("d-2"), false); // rolled back with its effect
  const after = new ActOnce(inbox([delivery("d-2", "t-2")]), done, { effect, crash: new CrashPoints("after_effect_commit", () => 0, die("after_effect_commit")) });
  await assert.rejects(after.step(), Crash);
  assert.equal(done.isDone("d-2"), true);
  const again = inbox([delivery("d-2", "t-2")]);
  assert.deepEqual(await new ActOnce(again, done, { effect }).step(), { acted: 0, skipped: 1, refused: 0, repliesSent: 0 });
  const rows = done.connection.prepare("SELECT task FROM work ORDER BY task").all();
  assert.deepEqual(rows, [{ task: "t-1" }, { task: "t-2" }]);
});

void test("the SQLite done-set's transaction is synchronous: an async body is refused and rolled back, an async effect does not compile", () => {
  const done = doneSet();
  assert.throws(
    () => done.claim("d-1", (tx) => Promise.resolve(tx.claimed)),
    /the body returned a Promise; the SQLite done-set's transaction is synchronous/,
  );
  assert.equal(done.isDone("d-1"), false);
  const effect = (d: Delivery): Promise<void> => {
    done.connection.prepare("INSERT INTO work VALUES (?)").run(d.receipt.task_id);
    return Promise.resolve();
  };
  // @ts-expect-error an async effect needs an async done-set (PostgresDoneSet)
  assert.ok(new ActOnce(inbox([]), done, { effect }));
});
