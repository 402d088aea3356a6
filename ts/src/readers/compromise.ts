/**
 * The session-handoff kind's reader, for the successor of a compromised
 * session (busguard.sdk.compromise `handoff_reader`; docs/compromise-handoff.md
 * 12, docs/sdk.md "Compromise-handoff reader"). busguard forwards a handoff
 * with only the components its verdict lets move and says how it judged the
 * session in sealed annotations (`verdict`, `caution`, ...); the successor
 * still checks each component against the scope the session signed, with the
 * session's keys from its own registry (`keys`), never from the record, and
 * uses only what verified: `view.usable`. Everything else (stripped by
 * busguard, unlisted in the scope, contradicting it) is not in `usable`.
 *
 * Throwing makes the consumer refuse the delivery as `unreadable`, as the
 * Python reader's ValueError does: a `verdict` annotation missing or one
 * busguard never forwards; a `caution` annotation other than absent or
 * `double_compromise`, or present exactly when the verdict is not
 * `double_compromise_caution`; a value that is not a session-handoff payload,
 * or whose scope does not verify with the session's keys, names another
 * handoff or is not signed by the handing-off session (a `MessageError` with
 * busguard's code). Judged with Python's reader on
 * tests/vectors/readers/compromise-handoff.json.
 *
 * Bounds: at most 256 components and a scope of at most 64 KiB, so a view
 * holds at most 256 usable components; one Ed25519 verify per scope key tried
 * and one SHA-256 per component.
 */
import type { Delivery, Reader } from "../consumer.js";
import { canonicalPrincipal } from "../identity.js";
import type { KeyRegistry } from "../registry.js";
import { KIND_SESSION_HANDOFF, componentContent, verifyForwarded, type Component, type ScopeReport, type SignerKeys } from "./scope.js";

export const HANDOFF_KIND = KIND_SESSION_HANDOFF;
/** The verdicts busguard forwards (docs/compromise-handoff.md 6); `prohibited` never reaches a successor. */
export const FORWARDED_VERDICTS = ["clean", "scoped", "double_compromise_caution"] as const;
export type ForwardedVerdict = (typeof FORWARDED_VERDICTS)[number];
export const CAUTION = "double_compromise";

/**
 * A forwarded handoff, its components checked against the signed scope.
 * `usable`: the components whose name, hash, operational flag and encoding
 * the session signed, in payload order: the only ones to act on. `notUsable`:
 * the names of every other component received. `verdict`, `caution`,
 * `manifestDigest`, `compromiseNotices`: busguard's annotations. `replaced`:
 * busguard stripped components (the attestation's `forwarded_sha256` covers
 * the value).
 */
export interface HandoffView {
  readonly handoffId: string;
  readonly session: string;
  readonly verdict: ForwardedVerdict;
  readonly caution: boolean;
  readonly manifestDigest: string | null;
  readonly compromiseNotices: readonly string[];
  readonly replaced: boolean;
  readonly usable: readonly Component[];
  readonly notUsable: readonly string[];
  readonly report: ScopeReport;
  /** The bytes of the usable component `name`; throws for a name not usable, or one that travels by hash. */
  content(name: string): Uint8Array;
}

function isForwarded(verdict: string | undefined): verdict is ForwardedVerdict {
  return (FORWARDED_VERDICTS as readonly (string | undefined)[]).includes(verdict);
}

function shown(value: string | undefined): string {
  return value === undefined ? "null" : JSON.stringify(value.slice(0, 64));
}

function read(d: Delivery<unknown>, keys: SignerKeys): HandoffView {
  const verdict = d.annotations["verdict"];
  if (!isForwarded(verdict)) throw new Error(`annotation verdict = ${shown(verdict)}; a forwarded handoff has one of ${FORWARDED_VERDICTS.join(", ")}`);
  const caution = d.annotations["caution"];
  if ((caution === CAUTION) !== (verdict === "double_compromise_caution") || (caution !== undefined && caution !== CAUTION)) {
    throw new Error(`annotation caution = ${shown(caution)} contradicts verdict ${JSON.stringify(verdict)}`);
  }
  const handoffId = d.receipt.task_id;
  const session = d.receipt.sender;
  const report = verifyForwarded(d.payload, { handoffId, session, keys });
  const usable = report.verified;
  const names = new Set(usable.map((c) => c.name));
  const notices = d.annotations["compromise_notices"];
  return {
    handoffId,
    session,
    verdict,
    caution: caution === CAUTION,
    manifestDigest: d.annotations["manifest_digest"] ?? null,
    compromiseNotices: notices === undefined || notices === "" ? [] : notices.split(","),
    replaced: d.attestation.forwarded_sha256 !== undefined,
    usable,
    notUsable: report.checks.filter((c) => !names.has(c.name)).map((c) => c.name),
    report,
    content(name: string): Uint8Array {
      const c = usable.find((u) => u.name === name);
      if (c === undefined) throw new Error(`${JSON.stringify(name)} is not a usable component; usable: ${JSON.stringify(usable.map((u) => u.name))}`);
      const data = componentContent(c, `components[${JSON.stringify(name)}]`);
      if (data === null) throw new Error(`component ${JSON.stringify(name)} travels by hash (${c.sha256 ?? ""}); its bytes are not in the handoff`);
      return data;
    },
  };
}

/** The `session-handoff` reader, verifying scopes with `keys` (the successor's own registry: `registryKeys`). */
export function handoffReader(keys: SignerKeys): Reader<HandoffView> {
  return (d) => read(d, keys);
}

/** `AdmittingConsumer.open({ ..., readers: handoffReaders(keys) })` for a successor (Python's `readers(keys)`). */
export function handoffReaders(keys: SignerKeys): ReadonlyMap<string, Reader<HandoffView>> {
  return new Map<string, Reader<HandoffView>>([[HANDOFF_KIND, handoffReader(keys)]]);
}

/**
 * The successor's own key registry as `keys`: the keys usable at the
 * successor's clock when the record is read (the guard judged them at its own
 * clock; a key revoked since is not used). `clockMs` defaults to the system clock.
 */
export function registryKeys(registry: KeyRegistry, clockMs: () => number = Date.now): SignerKeys {
  return (agentId, keyId) => {
    let p: string;
    try {
      p = canonicalPrincipal(agentId);
    } catch {
      return [];
    }
    const found = registry.lookup(p, keyId ?? undefined, clockMs());
    return "keys" in found ? found.keys.map((k) => [k.key_id, k.public_key] as const) : [];
  };
}
