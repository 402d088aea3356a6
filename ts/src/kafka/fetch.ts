/**
 * Fetch v12 (topics by name; every Kafka from 2.7 serves it, 4.x included)
 * with a response parser that keeps each partition's record bytes raw, so
 * they are decoded by busguard's tolerant reader (decode.ts) and a corrupt
 * batch is one refusal, never a failed fetch. The request is the client's own.
 */
import { createAPI, fetchV12, type Connection, type Reader } from "@platformatic/kafka";
import type { AbortedTransaction } from "./decode.js";

export interface PartitionRequest {
  readonly partition: number;
  readonly fetchOffset: bigint;
  readonly partitionMaxBytes: number;
}

export interface PartitionResponse {
  readonly partition: number;
  readonly errorCode: number;
  readonly highWatermark: bigint;
  /** -1 when the broker does not know it */
  readonly lastStableOffset: bigint;
  /** read_committed: the aborted transactions the records overlap, as the broker lists them (decode.ts skips their batches) */
  readonly abortedTransactions: readonly AbortedTransaction[];
  readonly records: Uint8Array;
}

export interface FetchArgs {
  readonly maxWaitMs: number;
  readonly maxBytes: number;
  /** 0: read_uncommitted, 1: read_committed */
  readonly isolationLevel: number;
  readonly topics: ReadonlyMap<string, readonly PartitionRequest[]>;
}

const EMPTY = new Uint8Array(0);

function parseResponse(_correlationId: number, _apiKey: number, _apiVersion: number, reader: Reader): Map<string, PartitionResponse[]> {
  reader.readInt32(); // throttle
  const errorCode = reader.readInt16();
  if (errorCode !== 0) throw new Error(`Fetch v12: error code ${errorCode} for the whole request`);
  reader.readInt32(); // session id
  const out = new Map<string, PartitionResponse[]>();
  reader.readArray((r) => {
    const topic = r.readString();
    const partitions = r.readArray((p): PartitionResponse => {
      const partition = p.readInt32();
      const code = p.readInt16();
      const highWatermark = p.readInt64();
      const lastStableOffset = p.readInt64();
      p.readInt64(); // log start offset
      const abortedTransactions = p.readNullableArray((a): AbortedTransaction => ({ producerId: a.readInt64(), firstOffset: a.readInt64() })) ?? [];
      p.readInt32(); // preferred read replica
      const size = p.readUnsignedVarInt() - 1;
      const records: Uint8Array = size > 0 ? p.buffer.slice(p.position, p.position + size) : EMPTY;
      if (size > 0) p.skip(size);
      return { partition, errorCode: code, highWatermark, lastStableOffset, abortedTransactions, records };
    });
    out.set(topic, partitions);
  });
  return out;
}

const api = createAPI<fetchV12.FetchRequest, Map<string, PartitionResponse[]>>(1, 12, fetchV12.createRequest, parseResponse);

export function fetchRaw(connection: Connection, args: FetchArgs): Promise<Map<string, PartitionResponse[]>> {
  const topics = [...args.topics].map(([topic, parts]) => ({
    topicId: topic,
    partitions: parts.map((p) => ({ partition: p.partition, currentLeaderEpoch: -1, fetchOffset: p.fetchOffset, lastFetchedEpoch: -1, partitionMaxBytes: p.partitionMaxBytes })),
  }));
  return api.async(connection, args.maxWaitMs, 1, args.maxBytes, args.isolationLevel, 0, -1, topics, [], "");
}
