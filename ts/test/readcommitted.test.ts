/**
 * read_committed (src/kafka/decode.ts, busguard.runtime.decoding's
 * `_aborted_batch`): the shared vectors (batches.json) fix single fetches;
 * here a simulated Kafka log of interleaved transactional producers is read
 * fetch after fetch, cut anywhere, with the aborted list the broker sends
 * for each fetch (the aborted transactions whose marker lies at or after the
 * fetch offset). Exactly the committed transactions' and the
 * non-transactional records come out, once each, in order, and the reading
 * reaches the log's end.
 */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import { decodePartition, type AbortedTransaction } from "../src/index.js";
import { recordBatch } from "./batchbytes.js";
import { isAbortMarker } from "../src/kafka/decode.js";



/** A v2 batch at `base` with one record per (key, value), deltas 0..; `attributes` 0x10 transactional, 0x30 a control batch. */
function batch(base: bigint, producerId: bigint, attributes: number, recs: Array<[Buffer | null, Buffer]>): Buffer {
  return recordBatch(base, recs, { attributes, producerId, producerEpoch: 0 });
}

function marker(base: bigint, producerId: bigint, commit: boolean): Buffer {
  return batch(base, producerId, 0x30, [[Buffer.from([0, 0, 0, commit ? 1 : 0]), Buffer.from([0, 0, 0, 0, 0, 5])]]);
}

/** A deterministic generator (mulberry32), so a failure names its seed. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface Log {
  readonly batches: Array<{ base: bigint; bytes: Buffer }>;
  readonly aborted: Array<AbortedTransaction & { marker: bigint }>;
  readonly committed: string[];
  readonly all: string[];
  readonly end: bigint;
}

/** Producers 1..3 open, write to, commit or abort transactions at random; producer -1 writes plain batches between them. */
function randomLog(seed: number): Log {
  const r = rng(seed);
  const batches: Log["batches"] = [];
  const aborted: Log["aborted"] = [];
  const committed: string[] = [];
  const all: string[] = [];
  const open = new Map<bigint, { first: bigint; values: string[] }>();
  let end = 0n;
  for (let step = 0; step < 40 || open.size > 0; step++) {
    const pid = BigInt(1 + Math.floor(r() * 3));
    const txn = open.get(pid);
    const choice = step >= 40 ? 0.9 : r();
    if (choice < 0.15) {
      const values = [`p${end}`];
      batches.push({ base: end, bytes: batch(end, -1n, 0, values.map((v) => [null, Buffer.from(v)])) });
      committed.push(...values);
      all.push(...values);
      end += 1n;
    } else if (choice < 0.7 || txn === undefined) {
      if (step >= 40 && txn === undefined) continue;
      const n = 1 + Math.floor(r() * 3);
      const values = Array.from({ length: n }, (_, i) => `t${pid}@${end + BigInt(i)}`);
      batches.push({ base: end, bytes: batch(end, pid, 0x10, values.map((v) => [Buffer.from("k"), Buffer.from(v)])) });
      if (txn === undefined) open.set(pid, { first: end, values });
      else txn.values.push(...values);
      all.push(...values);
      end += BigInt(n);
    } else {
      const commit = r() < 0.5;
      batches.push({ base: end, bytes: marker(end, pid, commit) });
      if (commit) committed.push(...txn.values);
      else aborted.push({ producerId: pid, firstOffset: txn.first, marker: end });
      open.delete(pid);
      end += 1n;
    }
  }
  const order = (v: string): bigint => BigInt(v.startsWith("p") ? v.slice(1) : v.slice(v.indexOf("@") + 1));
  committed.sort((a, b) => (order(a) < order(b) ? -1 : 1));
  return { batches, aborted, committed, all, end };
}

/** Reads `log` as the admitting consumer does, each fetch ending after a random number of batches; the values handed out. */
function read(log: Log, seed: number, readCommitted: boolean): string[] {
  const r = rng(seed);
  const out: string[] = [];
  let position = 0n;
  for (let fetches = 0; position < log.end; fetches++) {
    assert.ok(fetches < 10_000, `stalled at ${position}`);
    const at = log.batches.findIndex((_, i) => (log.batches[i + 1]?.base ?? log.end) > position);
    const bytes = Buffer.concat(log.batches.slice(at, at + 1 + Math.floor(r() * 6)).map((b) => b.bytes));
    // Kafka lists the aborted transactions the fetched range overlaps: those not ended before it
    const aborted = readCommitted ? log.aborted.filter((a) => a.marker >= position).map(({ producerId, firstOffset }) => ({ producerId, firstOffset })) : undefined;
    const decoded = decodePartition("t", 0, bytes, position, undefined, undefined, aborted);
    for (const item of decoded.items) {
      assert.ok(!("undecodable" in item), `refused at ${item.offset}: ${"undecodable" in item ? item.detail : ""}`);
      out.push(Buffer.from(item.value ?? []).toString());
    }
    assert.ok(decoded.next > position, `no progress at ${position}`);
    position = decoded.next;
  }
  return out;
}

void test("read_committed hands out exactly the committed and plain records, once, however the fetches are cut", () => {
  for (let seed = 1; seed <= 300; seed++) {
    const log = randomLog(seed);
    assert.deepEqual(read(log, seed * 7, true), log.committed, `seed ${seed}`);
    assert.deepEqual(read(log, seed * 7, false), log.all, `seed ${seed}: read_uncommitted hands out everything`);
  }
});

void test("the logs generated do abort and commit, interleaved", () => {
  const logs = Array.from({ length: 300 }, (_, i) => randomLog(i + 1));
  assert.ok(logs.filter((l) => l.aborted.length > 0 && l.committed.length > l.all.length / 4).length > 100);
  assert.ok(logs.some((l) => new Set(l.aborted.map((a) => a.producerId)).size > 1));
});

void test("an abort marker is a control record whose key's type is 0; anything that does not parse is not one", () => {
  assert.equal(isAbortMarker(marker(0n, 1n, false)), true);
  assert.equal(isAbortMarker(marker(0n, 1n, true)), false);
  const cut = marker(0n, 1n, false);
  assert.equal(isAbortMarker(cut.subarray(0, 64)), false);
  assert.equal(isAbortMarker(batch(0n, 1n, 0x30, [[null, Buffer.from("x")]])), false);
  assert.equal(isAbortMarker(batch(0n, 1n, 0x30, [[Buffer.from([0, 0]), Buffer.from("x")]])), false);
});

void test("a committed transaction's batch of a producer whose earlier transaction aborted in the same fetch is kept", () => {
  const bytes = Buffer.concat([
    batch(0n, 5n, 0x10, [[null, Buffer.from("a0")]]),
    marker(1n, 5n, false),
    batch(2n, 5n, 0x10, [[null, Buffer.from("c2")]]),
    marker(3n, 5n, true),
  ]);
  const got = decodePartition("t", 0, bytes, 0n, undefined, undefined, [{ producerId: 5n, firstOffset: 0n }]);
  assert.deepEqual(
    got.items.map((i) => Number(i.offset)),
    [2],
  );
  assert.equal(got.next, 4n);
});
