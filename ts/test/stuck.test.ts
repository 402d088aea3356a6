/**
 * Partitions the broker will not move past (src/kafka/stuck.ts, the pure
 * rules; busguard.runtime.stuck's twin) and the decoder's side of them: a
 * refetch's floor, and legacy (v0/v1) message sets refused one span per
 * message. A simulated tansu log (it answers a fetch at an offset inside an
 * empty batch with nothing) is read by the same steps the admitting
 * consumer takes, with the times passed in: every offset gets exactly one
 * item, in order, and the reading ends.
 */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import zlib from "node:zlib";
import { decodePartition, type Fetched, type Undecodable } from "../src/index.js";
import { recordBatch } from "./batchbytes.js";
import { StuckPartitions, answersEmpty, stuckAfterMs, unfetchable, type StuckAction } from "../src/kafka/stuck.js";


/** A v2 batch at `base` holding one record per value at deltas 0.., claiming `claims` offsets (count 0 when no values). */
function batch(base: bigint, values: string[], claims = values.length): Buffer {
  return recordBatch(base, values.map((v) => [null, Buffer.from(v)] as const), { claims });
}

type Item = Fetched | Undecodable;
const span = (i: Item): [number, number, string] =>
  "undecodable" in i ? [Number(i.offset), Number(i.lastOffset ?? i.offset), i.undecodable] : [Number(i.offset), Number(i.offset), "record"];

/** A log as tansu keeps it: batches as produced; a fetch inside an empty batch answers nothing. */
class TansuLog {
  readonly batches: Array<{ base: bigint; last: bigint; empty: boolean; bytes: Buffer }> = [];
  end = 0n;
  add(values: string[], claims = values.length): void {
    const base = this.end;
    this.batches.push({ base, last: base + BigInt(claims - 1), empty: values.length === 0, bytes: batch(base, values, claims) });
    this.end = base + BigInt(claims);
  }
  fetch(offset: bigint): Buffer {
    const at = this.batches.findIndex((b) => b.base <= offset && offset <= b.last);
    if (at < 0 || this.batches[at]?.empty === true) return Buffer.alloc(0);
    return Buffer.concat(this.batches.slice(at).map((b) => b.bytes));
  }
}

/** The admitting consumer's steps on one partition (inbox.ts), 300 ms apart: the items, in order, and the steps taken. */
function read(log: TansuLog, afterMs = 2000, start = 0n): { items: Item[]; steps: number; actions: string[] } {
  const stuck = new StuckPartitions(afterMs);
  const items: Item[] = [];
  const actions: string[] = [];
  let position = start;
  let floor: bigint | undefined;
  let answers = 0;
  let steps = 0;
  for (let now = 0; position < log.end; now += 300) {
    assert.ok(++steps < 10_000, `stalled at ${position}`);
    answers++;
    const decoded = decodePartition("t", 0, log.fetch(position), position, undefined, floor);
    if (floor !== undefined && decoded.next >= floor) floor = undefined;
    position = decoded.next;
    items.push(...decoded.items);
    if (decoded.items.length > 0) continue;
    const action: StuckAction | undefined = stuck.observe("t", 0, position, log.end, answers, now);
    if (action === undefined) continue;
    actions.push(action.action);
    if (action.action === "refetch") {
      floor = action.floor;
      position = action.start;
    } else if (action.action === "skip") {
      floor = undefined;
      position = action.offset + 1n;
      items.push(unfetchable(action));
    }
  }
  return { items, steps, actions };
}

/** Every offset of [start, end) in exactly one item, in order. */
function exactlyOnce(items: Item[], start: bigint, end: bigint): void {
  let next = Number(start);
  for (const [lo, hi] of items.map(span)) {
    assert.equal(lo, next, `offset ${next} has no item, or two`);
    next = hi + 1;
  }
  assert.equal(BigInt(next), end);
}

void test("an empty batch behind the position is fetched from the offset before and refused as one span", () => {
  const log = new TansuLog();
  log.add(["before"]);
  log.add([], 10);
  log.add(["a", "b", "c"]);
  // the reader's position is the empty batch's first offset (it committed the record before): a fetch there answers nothing
  const got = read(log, 2000, 1n);
  assert.deepEqual(got.items.map(span), [
    [1, 10, "undecodable_batch"],
    [11, 11, "record"],
    [12, 12, "record"],
    [13, 13, "record"],
  ]);
  assert.deepEqual(got.actions, ["refetch"]);
  assert.match((got.items[0] as Undecodable).detail, /holds no record/);
});

void test("an empty batch at the start of the log is skipped offset by offset, each one refusal", () => {
  const log = new TansuLog();
  log.add([], 3);
  log.add(["a", "b"]);
  const got = read(log);
  assert.deepEqual(got.items.map(span), [
    [0, 0, "undecodable_batch"],
    [1, 1, "undecodable_batch"],
    [2, 2, "undecodable_batch"],
    [3, 3, "record"],
    [4, 4, "record"],
  ]);
  assert.deepEqual(got.actions, ["skip", "skip", "skip"]);
  assert.equal((got.items[0] as Undecodable).detail, "the broker returns no record at offset 0 though its log goes on: fetched at it and from the offset before it");
});

void test("any run of empty, claiming and full batches is read to its end, every offset exactly once", () => {
  // every sequence of up to four batches drawn from five shapes (625 + 125 + 25 + 5 logs), read from each batch on
  const shapes: Array<[string[], number]> = [
    [[], 1],
    [[], 3],
    [["r"], 1],
    [["r"], 4], // one record claiming four offsets
    [["r", "s"], 2],
  ];
  let logs = 0;
  const walk = (prefix: number[]): void => {
    if (prefix.length > 0) {
      const log = new TansuLog();
      for (const i of prefix) log.add(...(shapes[i] as [string[], number]));
      for (const b of log.batches) {
        // a reader resuming at each batch's first offset (a committed position): at an empty one, tansu answers nothing
        exactlyOnce(read(log, 1000, b.base).items, b.base, log.end);
      }
      logs++;
    }
    if (prefix.length < 4) for (let i = 0; i < shapes.length; i++) walk([...prefix, i]);
  };
  walk([]);
  assert.equal(logs, 780);
});

void test("a partition that moves, or has caught up, is never refetched", () => {
  const stuck = new StuckPartitions(1000);
  for (let t = 0; t < 10_000; t += 500) assert.equal(stuck.observe("t", 0, BigInt(t), BigInt(t) + 5n, t, t), undefined);
  for (let t = 0; t < 10_000; t += 500) assert.equal(stuck.observe("t", 1, 7n, 7n, t, t), undefined);
  assert.equal(stuck.observe("t", 2, 7n, undefined, 1, 0), undefined);
  assert.equal(stuck.observe("t", 2, 7n, undefined, 2, 5000), undefined);
  assert.equal(stuck.size, 1);
});

void test("a broker that answers nothing new is waited for, never skipped past", () => {
  const stuck = new StuckPartitions(1000);
  assert.equal(stuck.observe("t", 0, 5n, 9n, 1, 0), undefined);
  assert.deepEqual(stuck.observe("t", 0, 5n, 9n, 2, 1000), { action: "refetch", topic: "t", partition: 0, start: 4n, floor: 5n });
  for (let t = 2000; t < 60_000; t += 1000) assert.equal(stuck.observe("t", 0, 4n, 9n, 2, t), undefined); // no answer since the refetch
  assert.deepEqual(stuck.observe("t", 0, 4n, 9n, 3, 60_000), { action: "skip", topic: "t", partition: 0, offset: 5n, highWatermark: 9n });
});

void test("a response filled to its bound is no answer for the partitions it left empty", () => {
  const mib = 1_048_576;
  assert.equal(answersEmpty(0, 16 * mib, mib), true);
  assert.equal(answersEmpty(15 * mib, 16 * mib, mib), true);
  assert.equal(answersEmpty(15 * mib + 1, 16 * mib, mib), false);
  // so a partition passed over by full responses is refetched (harmless: the floor) but never skipped
  const stuck = new StuckPartitions(1000);
  stuck.observe("t", 0, 5n, 9n, 1, 0);
  assert.equal(stuck.observe("t", 0, 5n, 9n, 1, 1000)?.action, "refetch");
  for (let t = 2000; t < 30_000; t += 1000) assert.equal(stuck.observe("t", 0, 4n, 9n, 1, t), undefined);
});

void test("a refetch that finds the log ending where it started skips nothing", () => {
  const stuck = new StuckPartitions(1000);
  stuck.observe("t", 0, 5n, 9n, 1, 0);
  assert.equal(stuck.observe("t", 0, 5n, 9n, 2, 1000)?.action, "refetch");
  assert.equal(stuck.observe("t", 0, 4n, 5n, 3, 1500), undefined);
  assert.equal(stuck.size, 0);
});

void test("a log end below the position is said once per reading, and forget drops a partition's history", () => {
  const stuck = new StuckPartitions(1000);
  assert.deepEqual(stuck.observe("t", 0, 17n, 9n, 1, 0), { action: "rewound", topic: "t", partition: 0, position: 17n, highWatermark: 9n });
  assert.equal(stuck.observe("t", 0, 17n, 9n, 2, 500), undefined);
  stuck.forget("t", 0);
  assert.equal(stuck.observe("t", 0, 17n, 9n, 3, 1000)?.action, "rewound");
});

void test("the stuck time is the Python SDK's, and a bad one is refused by name", () => {
  assert.equal(stuckAfterMs(500), 10_000);
  assert.equal(stuckAfterMs(10), 2000);
  assert.throws(() => new StuckPartitions(0), /stuckAfterMs: 0; allowed a positive number/);
  assert.throws(() => new StuckPartitions(Number.NaN), /stuckAfterMs: NaN/);
});

void test("a refetch's floor keeps nothing below it and passes over the batches that end there", () => {
  const bytes = Buffer.concat([batch(0n, ["a", "b"]), batch(2n, [], 3), batch(5n, ["c"])]);
  assert.deepEqual(decodePartition("t", 0, bytes, 1n, undefined, 2n).items.map(span), [
    [2, 4, "undecodable_batch"],
    [5, 5, "record"],
  ]);
  // a floor inside a batch: its records below the floor are not handed out again
  assert.deepEqual(decodePartition("t", 0, bytes, 0n, undefined, 1n).items.map(span), [
    [1, 1, "record"],
    [2, 4, "undecodable_batch"],
    [5, 5, "record"],
  ]);
});

/** A legacy message (v0, or v1 with a timestamp): offset, size, crc, magic, attributes, [timestamp], key, value. */
function legacy(offset: bigint, magic: 0 | 1, value: Buffer, codec = 0): Buffer {
  const body = Buffer.concat([
    Buffer.from([magic, codec]),
    magic === 1 ? Buffer.alloc(8) : Buffer.alloc(0),
    Buffer.from([0xff, 0xff, 0xff, 0xff]), // null key
    Buffer.from([(value.length >>> 24) & 0xff, (value.length >>> 16) & 0xff, (value.length >>> 8) & 0xff, value.length & 0xff]),
    value,
  ]);
  const head = Buffer.alloc(16);
  head.writeBigInt64BE(offset, 0);
  head.writeInt32BE(4 + body.length, 8);
  head.writeUInt32BE(zlib.crc32(body), 12);
  return Buffer.concat([head, body]);
}

void test("a legacy message set is one undecodable span per top-level message, every offset once", () => {
  // small messages (shorter than a v2 header) must not be read as a broken length that ends the fetch
  const inner = Buffer.concat([legacy(0n, 1, Buffer.from("x")), legacy(1n, 1, Buffer.from("y")), legacy(2n, 1, Buffer.from("z"))]);
  const bytes = Buffer.concat([
    legacy(0n, 0, Buffer.from("a")),
    legacy(1n, 1, Buffer.from("b")),
    legacy(4n, 1, zlib.gzipSync(inner), 1), // a gzip wrapper holding offsets 2-4, at its last inner offset
    batch(5n, ["after"]),
  ]);
  const got = decodePartition("t", 0, bytes, 0n);
  assert.deepEqual(got.items.map(span), [
    [0, 0, "undecodable_batch"],
    [1, 1, "undecodable_batch"],
    [2, 4, "undecodable_batch"],
    [5, 5, "record"],
  ]);
  assert.match((got.items[0] as Undecodable).detail, /message format v0/);
  assert.equal(got.next, 6n);
  // fetched from inside the wrapper: the offsets from there on, in one span
  assert.deepEqual(decodePartition("t", 0, bytes.subarray(bytes.indexOf(legacy(4n, 1, zlib.gzipSync(inner), 1))), 3n).items.map(span), [
    [3, 4, "undecodable_batch"],
    [5, 5, "record"],
  ]);
});
