/**
 * The key registry's semantics (docs/protocol.md 5.3; busguard.protocol.registry),
 * from the keys.toml structure as JSON (what the shared vectors carry): who
 * may send, with which keys, when. Lookups are pure functions of
 * (principal, key id, the receiver's clock).
 */
import { isAcceptablePublicKey } from "./ed25519.js";
import { canonicalPrincipal, multikeyDecode, publicKeyFromAgentId } from "./identity.js";
import { parseTimestamp } from "./timestamps.js";

export interface RegistryKeyEntry {
  readonly key_id: string;
  readonly public_key: string;
  readonly not_before?: string;
  readonly not_after?: string;
  readonly revoked_at?: string;
}
export interface RegistryAgentEntry {
  readonly id: string;
  readonly key?: readonly RegistryKeyEntry[];
  readonly not_before?: string;
  readonly not_after?: string;
  readonly revoked_at?: string;
}
export interface RegistryFile {
  readonly open_enrollment?: boolean;
  readonly agent?: readonly RegistryAgentEntry[];
}

export interface KeyWindow {
  readonly key_id: string;
  readonly public_key: Uint8Array;
  readonly not_before: number;
  readonly not_after: number;
  readonly revoked_at: number;
}

export type KeyLookup = { readonly keys: readonly KeyWindow[] } | { readonly reason: "unknown_sender" | "unknown_key" | "revoked_key" | "expired_key"; readonly detail: string };

const FAR_PAST = -(2 ** 62);
const FAR_FUTURE = 2 ** 62;

function status(k: KeyWindow, nowMs: number): "revoked_key" | "expired_key" | null {
  if (nowMs >= k.revoked_at) return "revoked_key";
  if (!(k.not_before <= nowMs && nowMs < k.not_after)) return "expired_key";
  return null;
}

interface Bounds {
  not_before?: string | undefined;
  not_after?: string | undefined;
  revoked_at?: string | undefined;
}

function tighten(w: KeyWindow, b: Bounds, where: string): KeyWindow {
  const ms = (name: keyof Bounds): number | null => {
    const v = b[name];
    if (v === undefined) return null;
    try {
      return parseTimestamp(v);
    } catch {
      throw new Error(`${where}.${name}: ${JSON.stringify(v)}: an RFC 3339 timestamp such as 2026-01-01T00:00:00Z`);
    }
  };
  const nb = ms("not_before");
  const na = ms("not_after");
  const ra = ms("revoked_at");
  return {
    ...w,
    not_before: nb === null ? w.not_before : Math.max(w.not_before, nb),
    not_after: na === null ? w.not_after : Math.min(w.not_after, na),
    revoked_at: ra === null ? w.revoked_at : Math.min(w.revoked_at, ra),
  };
}

function implicitKey(principal: string): KeyWindow | null {
  if (!principal.startsWith("key:")) return null;
  const pk = publicKeyFromAgentId("tulpa:" + principal.slice(4));
  return pk === null ? null : { key_id: principal.slice(4), public_key: pk, not_before: FAR_PAST, not_after: FAR_FUTURE, revoked_at: FAR_FUTURE };
}

export class KeyRegistry {
  private constructor(
    readonly agents: ReadonlyMap<string, readonly KeyWindow[]>,
    readonly openEnrollment: boolean,
  ) {}

  /** Build from the keys.toml structure; throws naming the field and value, as busguard refuses such a file. */
  static fromEntries(file: RegistryFile, source = "registry"): KeyRegistry {
    const agents = new Map<string, readonly KeyWindow[]>();
    (file.agent ?? []).forEach((agent, i) => {
      const where = `${source}: agent[${i}]`;
      const principal = canonicalPrincipal(agent.id);
      if (agents.has(principal)) throw new Error(`${where}.id: ${JSON.stringify(agent.id)}: each agent may be listed once`);
      const implicit = implicitKey(principal);
      const keys = agent.key ?? [];
      if (implicit !== null) {
        if (keys.length > 0) throw new Error(`${where}.key: a self-certifying tulpa:/ink: agent carries its key in its id; list no keys`);
        if (!isAcceptablePublicKey(implicit.public_key)) throw new Error(`${where}.id: not a canonical Ed25519 public key of large prime order`);
        agents.set(principal, [tighten(implicit, agent, where)]);
        return;
      }
      if (keys.length === 0) throw new Error(`${where}.key: named agent ${JSON.stringify(agent.id)} needs at least one [[agent.key]]`);
      const seen = new Set<string>();
      agents.set(
        principal,
        keys.map((key, j) => {
          const kwhere = `${where}.key[${j}]`;
          if (seen.has(key.key_id)) throw new Error(`${kwhere}.key_id: ${JSON.stringify(key.key_id)}: key ids must be unique within an agent`);
          seen.add(key.key_id);
          const pk = multikeyDecode(key.public_key);
          if (!isAcceptablePublicKey(pk)) throw new Error(`${kwhere}.public_key: not a canonical Ed25519 public key of large prime order`);
          const own = tighten({ key_id: key.key_id, public_key: pk, not_before: FAR_PAST, not_after: FAR_FUTURE, revoked_at: FAR_FUTURE }, key, kwhere);
          return tighten(own, agent, where);
        }),
      );
    });
    return new KeyRegistry(agents, file.open_enrollment ?? false);
  }

  lookup(principal: string, keyId: string | undefined, nowMs: number): KeyLookup {
    let keys = this.agents.get(principal);
    if (keys === undefined) {
      const implicit = implicitKey(principal);
      if (!(this.openEnrollment && implicit !== null)) return { reason: "unknown_sender", detail: `${JSON.stringify(principal)} is not in the key registry` };
      if (!isAcceptablePublicKey(implicit.public_key)) return { reason: "unknown_sender", detail: `${JSON.stringify(principal)} carries a small-order or non-canonical key` };
      keys = [implicit];
    }
    if (keyId !== undefined) {
      keys = keys.filter((k) => k.key_id === keyId);
      if (keys.length === 0) return { reason: "unknown_key", detail: `${JSON.stringify(principal)} has no key ${JSON.stringify(keyId)}` };
    }
    const usable = keys.filter((k) => status(k, nowMs) === null);
    if (usable.length === 0) {
      const revoked = keys.every((k) => status(k, nowMs) === "revoked_key");
      return { reason: revoked ? "revoked_key" : "expired_key", detail: `no key of ${JSON.stringify(principal)} is valid now` };
    }
    return { keys: usable };
  }
}
