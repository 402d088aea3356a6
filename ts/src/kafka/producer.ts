/**
 * A signing producer (busguard.sdk.producer.SigningProducer): every record
 * sent carries a receipt signed by the agent's `Sender`, and its key is the
 * sender's agent id (docs/protocol.md 2: one sender, one partition, in
 * order). It refuses a sender without a session unless `legacyReceipts`,
 * because a nonce-only resend after a crash is escalated, while a session
 * resend is a provable retransmission. The Kafka producer under it is
 * idempotent with acks=all (a retried produce is not written twice).
 */
import { Producer, type CompressionAlgorithmValue, type MessageToProduce } from "@platformatic/kafka";
import { utf8 } from "../bytes.js";
import type { Header } from "../envelope.js";
import type { Sender, SignedRecord } from "../sender.js";

/** What `send` takes besides the topic (the `Sender.sign` arguments). */
export interface OutgoingRecord {
  readonly kind: string;
  readonly taskId: string;
  readonly receiver: string;
  readonly payload: Uint8Array;
  readonly partition?: number;
  readonly extraHeaders?: readonly Header[];
}

export interface ProducerOptions {
  readonly bootstrapServers: string | readonly string[];
  readonly clientId?: string;
  /** default "none"; "gzip", "snappy" and "lz4" everywhere, "zstd" on Node 22.15 and later (every busguard reader reads all five) */
  readonly compression?: CompressionAlgorithmValue;
  /** default true (acks=all either way); false for a broker without InitProducerId, as tansu */
  readonly idempotent?: boolean;
  /** allow a sender without a session (nonce-only receipts; module doc) */
  readonly legacyReceipts?: boolean;
}

function toBuffer(b: Uint8Array): Buffer {
  return Buffer.from(b.buffer, b.byteOffset, b.byteLength);
}

/** Kafka headers in order, repeats kept (a Map keyed by distinct Buffers). */
export function kafkaHeaders(headers: readonly Header[]): Map<Buffer, Buffer> {
  const out = new Map<Buffer, Buffer>();
  for (const [name, value] of headers) out.set(Buffer.from(name, "utf8"), toBuffer(value ?? new Uint8Array(0)));
  return out;
}

export class SigningProducer {
  readonly client: Producer;
  readonly sender: Sender;
  readonly key: Uint8Array;
  /** the last record signed to send (its `receiptId` is what the guard judges) */
  lastSent: SignedRecord | undefined;

  constructor(client: Producer, sender: Sender, opts: { legacyReceipts?: boolean } = {}) {
    if (sender.session === undefined && opts.legacyReceipts !== true) {
      throw new Error("sender: no sessionPath; a crash-safe session is required (or pass legacyReceipts: true)");
    }
    this.client = client;
    this.sender = sender;
    this.key = utf8(sender.agentId);
  }

  /** An idempotent, acks=all producer on `bootstrapServers`, signing with `sender`. */
  static create(sender: Sender, opts: ProducerOptions): SigningProducer {
    const servers = typeof opts.bootstrapServers === "string" ? opts.bootstrapServers.split(",") : [...opts.bootstrapServers];
    const client = new Producer({
      clientId: opts.clientId ?? "busguard-sdk",
      bootstrapBrokers: servers,
      idempotent: opts.idempotent ?? true,
      acks: -1,
      compression: opts.compression ?? "none",
    });
    return new SigningProducer(client, sender, opts.legacyReceipts === undefined ? {} : { legacyReceipts: opts.legacyReceipts });
  }

  /** Sign and send one record, waiting for the broker's acknowledgment; returns what was sent. */
  async send(topic: string, record: OutgoingRecord): Promise<SignedRecord> {
    const rec = this.sender.sign({
      kind: record.kind,
      taskId: record.taskId,
      receiver: record.receiver,
      payload: record.payload,
      ...(record.extraHeaders === undefined ? {} : { extraHeaders: record.extraHeaders }),
    });
    this.lastSent = rec;
    await this.sendRaw(topic, this.key, rec.value, rec.headers, record.partition);
    return rec;
  }

  /** Send bytes already signed (the act-once outbox re-sends exactly what it staged). */
  async sendRaw(topic: string, key: Uint8Array | null, value: Uint8Array, headers: readonly Header[], partition?: number): Promise<void> {
    const message: MessageToProduce = {
      topic,
      value: toBuffer(value),
      headers: kafkaHeaders(headers),
      ...(key === null ? {} : { key: toBuffer(key) }),
      ...(partition === undefined ? {} : { partition }),
    };
    await this.client.send({ messages: [message] });
  }

  async close(): Promise<void> {
    await this.client.close();
  }
}
