"""The guard's public key as the SDK takes it, from the string operators hold.

Why: `AdmittingConsumer`, `open_admitted` and `verify_admitted` take the raw
32 bytes of the guard's Ed25519 public key, while the config
(`[keys] guard_public_key`), `busguard keygen` and `busguard audit
--guard-public-key` spell it as a multikey string. An agent that passed the
string, or decoded it its own way, either failed on every record or
accepted a spelling busguard refuses; this is the one conversion, with the
config's rules (docs/config.md, `keys.guard_public_key`).

    >>> from busguard.testing import GUARD_PUBLIC_KEY
    >>> from busguard.protocol.identity import multikey_encode
    >>> guard_key_from_multikey(multikey_encode(GUARD_PUBLIC_KEY)) == GUARD_PUBLIC_KEY
    True
    >>> guard_key_from_multikey("tulpa:" + multikey_encode(GUARD_PUBLIC_KEY)) == GUARD_PUBLIC_KEY
    True
    >>> guard_key_from_multikey("z6Mk-not-a-key")
    Traceback (most recent call last):
    ...
    ValueError: guard public key 'z6Mk-not-a-key': not a canonical Ed25519 multikey; allowed z6Mk… or tulpa:z6Mk… / ink:z6Mk… (`busguard keygen` prints both)
"""

from __future__ import annotations

from busguard.protocol.identity import multikey_decode, public_key_from_agent_id
from busguard.protocol.signing import is_acceptable_public_key

__all__ = ["guard_key_from_multikey"]


def guard_key_from_multikey(text: str) -> bytes:
    """The raw 32-byte key of `z6Mk…` (a multikey) or `tulpa:z6Mk…` /
    `ink:z6Mk…` (the same key as an agent id); `ValueError` for anything
    else, or for a key no guard can hold (small or mixed order)."""
    allowed = "allowed z6Mk… or tulpa:z6Mk… / ink:z6Mk… (`busguard keygen` prints both)"
    if not isinstance(text, str):
        raise ValueError(f"guard public key: a {type(text).__name__}; {allowed}")
    shown = repr(text[:128])
    key: bytes | None
    if text.startswith(("tulpa:", "ink:")):
        key = public_key_from_agent_id(text)
    else:
        try:
            key = multikey_decode(text)
        except ValueError:
            key = None
    if key is None:
        raise ValueError(f"guard public key {shown}: not a canonical Ed25519 multikey; {allowed}")
    if not is_acceptable_public_key(key):
        raise ValueError(f"guard public key {shown}: not a canonical Ed25519 public key of large prime order")
    return key
