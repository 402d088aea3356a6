/**
 * The guard's public key from the string operators hold (busguard.sdk.guardkey):
 * `z6Mk…`, or `tulpa:z6Mk…` / `ink:z6Mk…`, to the raw 32 bytes readers take.
 * Take it from the operator, never from a record.
 */
import { isAcceptablePublicKey } from "./ed25519.js";
import { multikeyDecode, publicKeyFromAgentId } from "./identity.js";

export function guardKeyFromMultikey(text: string): Uint8Array {
  const allowed = "allowed z6Mk… or tulpa:z6Mk… / ink:z6Mk… (`busguard keygen` prints both)";
  const shown = JSON.stringify(text.slice(0, 128));
  let key: Uint8Array | null;
  if (text.startsWith("tulpa:") || text.startsWith("ink:")) {
    key = publicKeyFromAgentId(text);
  } else {
    try {
      key = multikeyDecode(text);
    } catch {
      key = null;
    }
  }
  if (key === null) throw new Error(`guard public key ${shown}: not a canonical Ed25519 multikey; ${allowed}`);
  if (!isAcceptablePublicKey(key)) throw new Error(`guard public key ${shown}: not a canonical Ed25519 public key of large prime order`);
  return key;
}
