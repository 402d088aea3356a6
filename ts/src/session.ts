/**
 * Crash-safe session/sequence allocation (docs/protocol.md 8;
 * busguard.sdk.session.SessionAllocator), the same session file:
 * `{"v": 1, "session_id": "…", "reserved_through": N}`. A sequence number is
 * handed out only after a block holding it was durably reserved (temporary
 * file, fsync, rename, fsync of the directory); a restart jumps past the
 * block, so a number may be skipped but is never used twice.
 */
import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync, writeSync } from "node:fs";
import { dirname } from "node:path";
import { b64urlEncode } from "./bytes.js";
import { randomBytes } from "./ed25519.js";

interface SessionFile {
  v: 1;
  session_id: string;
  reserved_through: number;
}

function readSession(path: string): SessionFile {
  const parsed: unknown = JSON.parse(readFileSync(path, "utf8"));
  const ok =
    typeof parsed === "object" &&
    parsed !== null &&
    Object.keys(parsed).every((k) => ["v", "session_id", "reserved_through"].includes(k)) &&
    (parsed as SessionFile).v === 1 &&
    typeof (parsed as SessionFile).session_id === "string" &&
    Number.isSafeInteger((parsed as SessionFile).reserved_through);
  if (!ok) throw new Error(`${path}: not a session file; expected {"v": 1, "session_id": "…", "reserved_through": N}`);
  return parsed as SessionFile;
}

export class SessionAllocator {
  readonly sessionId: string;
  #next: number;
  #reservedThrough: number;

  constructor(
    readonly path: string,
    readonly block = 64,
  ) {
    if (!Number.isInteger(block) || block < 1) throw new Error(`block: ${block}; at least 1`);
    if (existsSync(path)) {
      const state = readSession(path);
      this.sessionId = state.session_id;
      this.#next = state.reserved_through + 1;
    } else {
      this.sessionId = b64urlEncode(randomBytes(16));
      this.#next = 0;
    }
    this.#reservedThrough = this.#next - 1;
    this.#reserve();
  }

  #reserve(): void {
    this.#reservedThrough = this.#next + this.block - 1;
    const body = JSON.stringify({ v: 1, session_id: this.sessionId, reserved_through: this.#reservedThrough });
    mkdirSync(dirname(this.path), { recursive: true });
    const tmp = this.path + ".tmp";
    const fd = openSync(tmp, "w");
    try {
      writeSync(fd, body);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, this.path);
    const dir = openSync(dirname(this.path), "r");
    try {
      fsyncSync(dir);
    } finally {
      closeSync(dir);
    }
  }

  /** A sequence number never handed out before, even across crashes. */
  next(): bigint {
    if (this.#next > this.#reservedThrough) this.#reserve();
    return BigInt(this.#next++);
  }
}
