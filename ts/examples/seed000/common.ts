/**
 * What the TypeScript seed-000 agents share with the Python ones
 * (examples/seed000/common.py): `pipeline.json`, the key files, log lines.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { b64urlDecodeStrict, guardKeyFromMultikey } from "../../src/index.js";

export interface Pipeline {
  readonly dir: string;
  readonly bootstrap: string;
  readonly planner: string;
  readonly executor: string;
  readonly handoffs: string;
  readonly acks: string;
  readonly executor_inbox: string;
  readonly planner_inbox: string;
  readonly guard_public_key: string;
}

export function loadPipeline(dir: string): Pipeline {
  return JSON.parse(readFileSync(join(dir, "pipeline.json"), "utf8")) as Pipeline;
}

export function guardKey(p: Pipeline): Uint8Array {
  return guardKeyFromMultikey(p.guard_public_key);
}

/** The seed of a `busguard keygen` key file: {"v": 1, "agent_id": …, "seed": "<base64url>"}. */
export function readSeed(path: string): Uint8Array {
  const doc = JSON.parse(readFileSync(path, "utf8")) as { seed: string };
  return b64urlDecodeStrict(doc.seed, 32);
}

export function say(name: string, line: string): void {
  process.stdout.write(`${name}: ${line}\n`);
}

export function arg(name: string, fallback?: string): string {
  const i = process.argv.indexOf(`--${name}`);
  const v = i >= 0 ? process.argv[i + 1] : fallback;
  if (v === undefined) throw new Error(`--${name} is required`);
  return v;
}

/** An AbortSignal aborted by SIGTERM or SIGINT. */
export function stopSignal(): AbortSignal {
  const c = new AbortController();
  for (const s of ["SIGTERM", "SIGINT"] as const) process.on(s, () => c.abort());
  return c.signal;
}
