/**
 * Partitions whose position the broker will not move: what to do next
 * (busguard.runtime.stuck, the same rules). Pure: no clock, no broker; the
 * consumer (inbox.ts) passes what it saw and when.
 *
 * A broker that stores record batches as it receives them (tansu) answers a
 * fetch AT an offset inside a batch that holds no record (61 bytes, a record
 * count of 0) with nothing, for ever, while its log end lies past it: the
 * position never moves and every record behind it waits for good, across
 * restarts. A fetch from an EARLIER offset does return that batch, and
 * decode.ts then refuses every offset it claims as one span. So, per
 * partition:
 *
 * 1. the position has not moved for `afterMs` while the broker's high
 *    watermark (capped by its last stable offset) says there is more:
 *    `refetch` from the offset before, with a floor at the position (the
 *    decoder keeps nothing below the floor: it was decided already);
 * 2. still there `afterMs` after that, and the broker has answered since
 *    (no earlier offset to fetch from, as at the start of the log, or the
 *    broker answers nothing even so): `skip` the one offset, refused as a
 *    span of one with nothing fetched (`unfetchable`), and go on from the
 *    next. A broker that answers nothing new (away, electing a leader) is
 *    waited for, never skipped past.
 *
 * A partition whose position moves, or that has caught up with the high
 * watermark, is forgotten. A high watermark BELOW the position is said once
 * (`rewound`): tansu hands offsets out again after a batch with a negative
 * lastOffsetDelta, and the records it stores there get no decision.
 */
import type { Undecodable } from "../consumer.js";

export type StuckAction =
  | { readonly action: "refetch"; readonly topic: string; readonly partition: number; readonly start: bigint; readonly floor: bigint }
  | { readonly action: "skip"; readonly topic: string; readonly partition: number; readonly offset: bigint; readonly highWatermark: bigint }
  | { readonly action: "rewound"; readonly topic: string; readonly partition: number; readonly position: bigint; readonly highWatermark: bigint };

interface Seen {
  readonly position: bigint;
  readonly since: number;
  readonly refetched: boolean;
  /** the broker's last answer for the partition when this phase began */
  readonly fetched: number | undefined;
  /** a refetch from position - 1 was asked for */
  readonly inFlight: boolean;
}

function key(topic: string, partition: number): string {
  return `${topic}\u0000${partition}`;
}

export class StuckPartitions {
  readonly afterMs: number;
  readonly #seen = new Map<string, Seen>();
  /** the last offset skipped, per partition */
  readonly #skipped = new Map<string, bigint>();
  /** the last rewound said, per partition */
  readonly #rewound = new Map<string, string>();

  constructor(afterMs: number) {
    if (!(afterMs > 0) || !Number.isFinite(afterMs)) throw new Error(`stuckAfterMs: ${afterMs}; allowed a positive number of milliseconds`);
    this.afterMs = afterMs;
  }

  /**
   * The action for one partition after a fetch that saw `position` and
   * `highWatermark` (undefined: not known yet) at `now` (ms, any monotonic
   * origin); `fetched` counts the broker's answers for the partition (a
   * larger number: a later answer), undefined before the first.
   */
  observe(topic: string, partition: number, position: bigint, highWatermark: bigint | undefined, fetched: number | undefined, now: number): StuckAction | undefined {
    const k = key(topic, partition);
    if (highWatermark === undefined || position >= highWatermark) {
      this.#seen.delete(k);
      this.#skipped.delete(k);
      if (highWatermark !== undefined && position > highWatermark) {
        const said = `${position}/${highWatermark}`;
        const before = this.#rewound.get(k);
        this.#rewound.set(k, said);
        if (before !== said) return { action: "rewound", topic, partition, position, highWatermark };
      }
      return undefined;
    }
    const seen = this.#seen.get(k);
    const refetching = seen !== undefined && seen.inFlight && position === seen.position - 1n;
    if (refetching && seen.position >= highWatermark) {
      this.#seen.delete(k); // the log ends where the refetch started: nothing to skip
      return undefined;
    }
    if (seen === undefined || (seen.position !== position && !refetching)) {
      // after a skip, the offset before answers nothing either: no refetch from it
      this.#seen.set(k, { position, since: now, refetched: position === 0n || this.#skipped.get(k) === position - 1n, fetched, inFlight: false });
      return undefined;
    }
    if (now - seen.since < this.afterMs) return undefined;
    if (!seen.refetched) {
      this.#seen.set(k, { position, since: now, refetched: true, fetched, inFlight: true });
      return { action: "refetch", topic, partition, start: position - 1n, floor: position };
    }
    if (fetched === undefined || (seen.fetched !== undefined && fetched <= seen.fetched)) return undefined;
    this.#seen.delete(k);
    this.#skipped.set(k, seen.position);
    return { action: "skip", topic, partition, offset: seen.position, highWatermark };
  }

  /** A partition revoked or assigned anew: its history means nothing to the next owner. */
  forget(topic: string, partition: number): void {
    const k = key(topic, partition);
    this.#seen.delete(k);
    this.#skipped.delete(k);
    this.#rewound.delete(k);
  }

  /** Every partition's history (a rebalance). */
  clear(): void {
    this.#seen.clear();
    this.#skipped.clear();
    this.#rewound.clear();
  }

  /** Partitions being watched. */
  get size(): number {
    return this.#seen.size;
  }
}

/**
 * The refusal's input for a skipped offset: a span of one, as for an
 * undecodable batch. The detail is busguard.runtime.stuck's, word for word,
 * and names no broker reading, so a re-decision says the same.
 */
export function unfetchable(skip: { readonly topic: string; readonly partition: number; readonly offset: bigint }): Undecodable {
  return {
    undecodable: "undecodable_batch",
    topic: skip.topic,
    partition: skip.partition,
    offset: skip.offset,
    detail: `the broker returns no record at offset ${skip.offset} though its log goes on: fetched at it and from the offset before it`,
  };
}

/**
 * Whether a fetch response whose partitions hold `recordBytes` in all is the
 * broker's answer for a partition it left empty: Kafka stops adding
 * partitions to a response at `maxBytes`, so a full one says nothing about
 * the rest (a backlog elsewhere), and counting it would let a partition
 * merely passed over be skipped past a real record.
 */
export function answersEmpty(recordBytes: number, maxBytes: number, partitionMaxBytes: number): boolean {
  return recordBytes + partitionMaxBytes <= maxBytes;
}

/** How long a position may stand still below the broker's end (busguard.runtime.unstick.stuck_after_s, in ms). */
export function stuckAfterMs(fetchMaxWaitMs: number): number {
  return Math.max(2000, fetchMaxWaitMs * 20);
}
