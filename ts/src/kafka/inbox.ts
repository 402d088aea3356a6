/**
 * The admitting consumer over Kafka (busguard.sdk.consumer
 * `AdmittingConsumer.open`): the one consumer an agent must read through.
 * A member of `groupId` (the client's classic group protocol, heartbeats
 * and rebalances), offsets committed only by `commit` (never automatically),
 * a new group reading each partition from its beginning, and tolerant
 * decoding: the fetch keeps each partition's bytes raw and decode.ts turns
 * them into records, so a record or batch no client can decode is one
 * refusal `undecodable`, past which the position moves. Every record
 * becomes one `Delivery` or one `Refusal` (`Admitter.admit`, the pure core).
 * A partition the broker will not move past (tansu answers a fetch at an
 * offset inside an empty batch with nothing, for ever) is fetched again from
 * the offset before, then skipped offset by offset (stuck.ts decides; this
 * module carries it out), as busguard.runtime.unstick does for Python.
 *
 * Bounds: a batch holds at most `maxRecords` items (the rest wait for the
 * next `getmany`); a fetch asks for at most `maxBytes` (per partition
 * `partitionMaxBytes`); a compressed batch inflates to at most
 * `maxInflatedBytes`.
 */
import { Consumer, ConnectionPool, type Broker, type ClusterMetadata } from "@platformatic/kafka";
import type { HeadCache } from "../attestation.js";
import { Admitter, type Batch, type Fetched, type Reader, type Refusal, type Undecodable } from "../consumer.js";
import { DEFAULT_MAX_INFLATED_BYTES, decodePartition } from "./decode.js";
import { fetchRaw, type PartitionRequest } from "./fetch.js";
import { StuckPartitions, answersEmpty, stuckAfterMs, unfetchable } from "./stuck.js";

export interface OpenOptions<View> {
  /** subscribe: the group assigns their partitions (rebalances included) */
  readonly topics?: string | readonly string[];
  /** or assign partitions yourself: no group membership, offsets still committed to `groupId` (one reader owns them; a restart resumes at once) */
  readonly assign?: ReadonlyArray<{ readonly topic: string; readonly partition: number }>;
  /** "host:port", one or several */
  readonly bootstrapServers: string | readonly string[];
  readonly groupId: string;
  readonly guardPublicKey: Uint8Array;
  readonly agentId: string;
  readonly readers?: ReadonlyMap<string, Reader<View>>;
  readonly heads?: HeadCache;
  /** at most this many records per `getmany` (default 500) */
  readonly maxRecords?: number;
  readonly maxInflatedBytes?: number;
  /** default 10 000 ms; Apache Kafka allows 6 000 ms and more */
  readonly sessionTimeoutMs?: number;
  /** read only committed transactions (the broker's read_committed, and decode.ts skips the batches of aborted ones), as a reader of a transactional guard's outputs should: each output once */
  readonly readCommitted?: boolean;
  readonly clientId?: string;
  /** each refusal, as it is decided (default: one JSON line `record_refused` on stderr) */
  readonly onRefusal?: (refusal: Refusal) => void;
  /** how long a partition's position may stand still below the broker's end before it is fetched again from the offset before (default 10 000 ms, the Python SDK's with aiokafka's default fetch wait) */
  readonly stuckAfterMs?: number;
}

const OFFSET_OUT_OF_RANGE = 1;
const PARTITION_MAX_BYTES = 1_048_576;
const FETCH_MAX_BYTES = 16 * PARTITION_MAX_BYTES;
const EARLIEST = -2n;

function logRefusal(r: Refusal): void {
  const line = { event: "record_refused", topic: r.topic, partition: r.partition, offset: r.offset.toString(), reason: r.reason, detail: r.detail };
  process.stderr.write(JSON.stringify(line) + "\n");
}

function logLine(event: string, fields: Record<string, string>): void {
  process.stderr.write(JSON.stringify({ event, ...fields }) + "\n");
}

function key(topic: string, partition: number): string {
  return `${topic}\u0000${partition}`;
}

export class AdmittingConsumer<View = unknown> {
  readonly admitter: Admitter<View>;
  readonly client: Consumer;
  readonly #pool: ConnectionPool;
  readonly #topics: readonly string[];
  readonly #maxRecords: number;
  readonly #maxInflated: number;
  readonly #isolation: number;
  readonly #onRefusal: (refusal: Refusal) => void;
  /** next offset to fetch per assigned partition; cleared by a rebalance */
  readonly #positions = new Map<string, bigint>();
  #pending: Array<Fetched | Undecodable> = [];
  #metadata: ClusterMetadata | undefined;
  readonly #stuck: StuckPartitions;
  /** a refetch's floor per partition (stuck.ts): kept until the position passes it */
  readonly #floors = new Map<string, bigint>();
  /** the broker's answers per partition, counted, and its last high watermark (capped by the last stable offset) */
  readonly #answers = new Map<string, number>();
  readonly #high = new Map<string, bigint>();
  #nextCheck = 0;
  readonly #static: ReadonlyArray<{ readonly topic: string; readonly partition: number }> | undefined;

  private constructor(client: Consumer, opts: OpenOptions<View>, topics: readonly string[]) {
    this.client = client;
    this.#topics = topics;
    this.#static = opts.assign;
    this.admitter = new Admitter<View>({
      guardPublicKey: opts.guardPublicKey,
      agentId: opts.agentId,
      ...(opts.readers === undefined ? {} : { readers: opts.readers }),
      ...(opts.heads === undefined ? {} : { heads: opts.heads }),
    });
    this.#maxRecords = opts.maxRecords ?? 500;
    if (!Number.isInteger(this.#maxRecords) || this.#maxRecords < 1) throw new Error(`maxRecords: ${opts.maxRecords}; allowed 1 or more`);
    this.#maxInflated = opts.maxInflatedBytes ?? DEFAULT_MAX_INFLATED_BYTES;
    this.#isolation = opts.readCommitted === true ? 1 : 0;
    this.#onRefusal = opts.onRefusal ?? logRefusal;
    this.#stuck = new StuckPartitions(opts.stuckAfterMs ?? stuckAfterMs(500));
    this.#pool = new ConnectionPool(`${opts.clientId ?? "busguard-sdk"}-fetch`);
    client.on("consumer:group:join", () => this.#forget());
  }

  /** Join the group and return the consumer (module doc). */
  static async open<View = unknown>(opts: OpenOptions<View>): Promise<AdmittingConsumer<View>> {
    if (typeof opts.groupId !== "string" || opts.groupId === "") throw new Error(`groupId: ${JSON.stringify(opts.groupId)}; a non-empty consumer group id (offsets are committed to it)`);
    if ((opts.topics === undefined) === (opts.assign === undefined)) throw new Error("pass exactly one of topics (the group assigns) or assign (you do)");
    const topics = opts.assign !== undefined ? [...new Set(opts.assign.map((a) => a.topic))] : typeof opts.topics === "string" ? [opts.topics] : [...(opts.topics ?? [])];
    const servers = typeof opts.bootstrapServers === "string" ? opts.bootstrapServers.split(",") : [...opts.bootstrapServers];
    const session = opts.sessionTimeoutMs ?? 10_000;
    const client = new Consumer({
      clientId: opts.clientId ?? "busguard-sdk",
      bootstrapBrokers: servers,
      groupId: opts.groupId,
      sessionTimeout: session,
      rebalanceTimeout: Math.max(session, 30_000),
      heartbeatInterval: Math.max(100, Math.floor(session / 3)),
      autocommit: false,
    });
    const inbox = new AdmittingConsumer<View>(client, opts, topics);
    try {
      if (opts.assign !== undefined) {
        client.generationId = -1; // a standalone member: Kafka accepts its commits without a join
        client.memberId = "";
        return inbox;
      }
      for (const t of topics) client.topics.track(t);
      await client.joinGroup({});
    } catch (exc) {
      await inbox.close();
      throw exc;
    }
    return inbox;
  }

  /** Leave the group and close the connections. */
  async close(): Promise<void> {
    await new Promise<void>((resolve, reject) => this.#pool.close((error) => (error ? reject(error) : resolve())));
    await new Promise<void>((resolve, reject) => this.client.close(true, (error) => (error ? reject(error) : resolve())));
  }

  /** Fetch up to `maxRecords` records (waiting up to `timeoutMs`) and decide each. */
  async getmany(timeoutMs = 1000): Promise<Batch<View>> {
    if (this.#pending.length === 0) await this.#fetch(timeoutMs);
    const items = this.#pending.splice(0, this.#maxRecords);
    const batch = this.admitter.admit(items);
    for (const r of batch.refusals) this.#onRefusal(r);
    return batch;
  }

  /** Commit the batch's positions: call only after acting on every delivery in it. */
  async commit(batch: Batch<View>): Promise<void> {
    if (batch.positions.size === 0) return;
    const offsets = [...batch.positions.values()].map((p) => ({ topic: p.topic, partition: p.partition, offset: p.offset, leaderEpoch: -1 }));
    await this.client.commit({ offsets });
  }

  #forget(): void {
    this.#positions.clear();
    this.#pending = [];
    this.#stuck.clear(); // a floor or a watch must never outlive the assignment it was set under
    this.#floors.clear();
    this.#high.clear();
  }

  async #assigned(): Promise<Array<{ topic: string; partition: number }>> {
    const assignments =
      this.#static !== undefined
        ? [...new Set(this.#static.map((a) => a.topic))].map((topic) => ({ topic, partitions: (this.#static ?? []).filter((a) => a.topic === topic).map((a) => a.partition) }))
        : (this.client.assignments ?? []);
    const missing = assignments.map((a) => ({ topic: a.topic, partitions: a.partitions.filter((p) => !this.#positions.has(key(a.topic, p))) })).filter((a) => a.partitions.length > 0);
    if (missing.length > 0) {
      const committed = await this.client.listCommittedOffsets({ topics: missing });
      const unset: Array<{ topic: string; partition: number }> = [];
      for (const a of missing) {
        const offsets = committed.get(a.topic) ?? [];
        for (const p of a.partitions) {
          const o = offsets[p];
          if (o !== undefined && o >= 0n) this.#positions.set(key(a.topic, p), o);
          else unset.push({ topic: a.topic, partition: p });
        }
      }
      if (unset.length > 0) await this.#resetToEarliest(unset);
    }
    return assignments.flatMap((a) => a.partitions.map((partition) => ({ topic: a.topic, partition })));
  }

  async #resetToEarliest(parts: ReadonlyArray<{ topic: string; partition: number }>): Promise<void> {
    const topics = [...new Set(parts.map((p) => p.topic))];
    const partitions: Record<string, number[]> = {};
    for (const p of parts) {
      const list = partitions[p.topic] ?? [];
      partitions[p.topic] = list;
      list.push(p.partition);
    }
    const earliest = await this.client.listOffsets({ topics, partitions, timestamp: EARLIEST });
    for (const p of parts) this.#positions.set(key(p.topic, p.partition), earliest.get(p.topic)?.[p.partition] ?? 0n);
  }

  async #fetch(timeoutMs: number): Promise<void> {
    const assigned = await this.#assigned();
    if (assigned.length === 0) {
      await new Promise((r) => setTimeout(r, Math.min(timeoutMs, 200)));
      return;
    }
    const metadata = (this.#metadata ??= await this.client.metadata({ topics: [...this.#topics] }));
    const byLeader = new Map<number, Map<string, PartitionRequest[]>>();
    for (const { topic, partition } of assigned) {
      const leader = metadata.topics.get(topic)?.partitions[partition]?.leader;
      const fetchOffset = this.#positions.get(key(topic, partition));
      if (leader === undefined || fetchOffset === undefined) continue;
      const topics = byLeader.get(leader) ?? new Map<string, PartitionRequest[]>();
      byLeader.set(leader, topics);
      const list = topics.get(topic) ?? [];
      topics.set(topic, list);
      list.push({ partition, fetchOffset, partitionMaxBytes: PARTITION_MAX_BYTES });
    }
    const maxWaitMs = Math.max(10, Math.min(timeoutMs, 500));
    const got = new Set<string>();
    for (const [leader, topics] of byLeader) {
      const broker: Broker | undefined = metadata.brokers.get(leader);
      if (broker === undefined) {
        this.#metadata = undefined;
        continue;
      }
      let responses;
      try {
        const connection = await this.#pool.get(broker);
        responses = await fetchRaw(connection, { maxWaitMs, maxBytes: FETCH_MAX_BYTES, isolationLevel: this.#isolation, topics });
      } catch {
        this.#metadata = undefined; // a moved leader or a lost connection: look again next time
        continue;
      }
      let size = 0;
      for (const parts of responses.values()) for (const p of parts) size += p.records.length;
      const roomy = answersEmpty(size, FETCH_MAX_BYTES, PARTITION_MAX_BYTES); // a full response is no answer for its empty partitions
      for (const [topic, parts] of responses) {
        for (const p of parts) {
          const at = key(topic, p.partition);
          const from = this.#positions.get(at);
          if (from === undefined) continue; // revoked meanwhile
          if (p.errorCode === OFFSET_OUT_OF_RANGE) {
            await this.#resetToEarliest([{ topic, partition: p.partition }]);
            continue;
          }
          if (p.errorCode !== 0) {
            this.#metadata = undefined;
            continue;
          }
          if (roomy || p.records.length > 0) this.#answers.set(at, (this.#answers.get(at) ?? 0) + 1);
          this.#high.set(at, p.lastStableOffset >= 0n && p.lastStableOffset < p.highWatermark ? p.lastStableOffset : p.highWatermark);
          const floor = this.#floors.get(at);
          const decoded = decodePartition(topic, p.partition, p.records, from, this.#maxInflated, floor, this.#isolation === 1 ? p.abortedTransactions : undefined);
          if (floor !== undefined && decoded.next >= floor) this.#floors.delete(at);
          this.#positions.set(at, decoded.next);
          this.#pending.push(...decoded.items);
          if (decoded.items.length > 0) got.add(at);
        }
      }
    }
    this.#unstick(assigned, got);
  }

  /**
   * The partitions that returned nothing, judged by stuck.ts (at most every
   * quarter of the stuck time, so a quiet fetch costs a clock read): a
   * refetch from the offset before with a floor, or one offset skipped and
   * refused (`unfetchable`).
   */
  #unstick(assigned: ReadonlyArray<{ topic: string; partition: number }>, got: ReadonlySet<string>): void {
    const now = performance.now();
    if (now < this.#nextCheck) return;
    this.#nextCheck = now + this.#stuck.afterMs / 4;
    for (const { topic, partition } of assigned) {
      const at = key(topic, partition);
      const position = this.#positions.get(at);
      if (got.has(at) || position === undefined) continue;
      const high = this.#high.get(at);
      const action = this.#stuck.observe(topic, partition, position, high, this.#answers.get(at), now);
      const where = `${topic}:${partition}`;
      if (action === undefined) continue;
      if (action.action === "rewound") {
        logLine("log end moved back below the decided position: records the broker stores at these offsets get no decision", {
          partition: where,
          offsets: `${action.highWatermark}-${action.position - 1n}`,
        });
      } else if (action.action === "refetch") {
        this.#floors.set(at, action.floor);
        this.#positions.set(at, action.start);
        logLine("partition stuck: fetching again from the offset before", { partition: where, position: String(position), high_watermark: String(high) });
      } else {
        this.#floors.delete(at);
        this.#positions.set(at, action.offset + 1n);
        this.#pending.push(unfetchable(action));
        logLine("offset unfetchable: decided as a span of one", { partition: where, offset: String(action.offset), high_watermark: String(high) });
      }
    }
  }
}
