"""Agent identity: INK ``canonicalAgentPrincipal`` and Ed25519 multikeys.

Why this exists: every per-sender control (nonce store scope, block lists,
rate limits, duplicate-payload checks) must key on *one* spelling of an
actor.  ``tulpa:zKEY`` and ``ink:zKEY`` name the same Ed25519 key, so a store
keyed on the raw ``from`` string would split one replay set into two and let a
captured request be replayed under the other prefix.  ``canonical_principal``
is applied once, at the storage boundary, and is the only key those controls
may use.

The mapping is injective apart from that deliberate alias:

* a well-formed ``tulpa:``/``ink:`` Ed25519 multikey  -> ``key:<multibase>``
* anything else starting ``tulpa:``/``ink:``/``key:``/``raw:`` -> ``raw:<id>``
* everything else (DIDs, named agents, non-ASCII)     -> unchanged

so an attacker can never pick an agent id whose principal collides with a
key principal or with another escaped id.

Everything here is pure: no I/O, no clock, no global mutable state other
than two bounded LRU caches (multikey decodes, and tulpa:/ink: principals),
both keyed on strings of at most 54 characters, because this runs per record.
"""

from __future__ import annotations

import functools
from collections.abc import Sized

import base58

__all__ = [
    "MAX_AGENT_ID_UTF16_UNITS",
    "agent_id_for_key",
    "canonical_principal",
    "multikey_decode",
    "multikey_encode",
    "public_key_from_agent_id",
]

#: INK caps agent ids at 512 UTF-16 code units (the JS reference measures
#: ``string.length``); we count the same unit so that both sides agree on which
#: ids are rejected.
MAX_AGENT_ID_UTF16_UNITS = 512

#: multicodec varint for ``ed25519-pub`` (0xed, LEB128-encoded as ed 01).
_ED25519_MULTICODEC = b"\xed\x01"
_ED25519_KEY_BYTES = 32
_MULTIBASE_BASE58BTC = "z"

#: Every canonical base58btc encoding of ``ed 01`` + 32 bytes is exactly 47
#: characters (the value lies in [0xed01 * 2**256, 0xed02 * 2**256), entirely
#: inside 58**46 .. 58**47), so with the ``z`` prefix a valid body is exactly 48
#: characters.  Checking that first skips the decode and the cache for most
#: garbage.
_ED25519_MULTIKEY_CHARS = 48

#: Upper bound on what ``multikey_decode`` will even try to decode: base58
#: decoding is quadratic in the input length, so an unbounded body would be a
#: cheap CPU amplification vector.
_MAX_MULTIBASE_CHARS = 128

_ALIAS_PREFIXES = ("tulpa:", "ink:")
_KEY_PRINCIPAL_PREFIX = "key:"
_HALF_CAP = MAX_AGENT_ID_UTF16_UNITS // 2
_TULPA_ID_CHARS = len("tulpa:") + _ED25519_MULTIKEY_CHARS
_INK_ID_CHARS = len("ink:") + _ED25519_MULTIKEY_CHARS
#: First four characters of every id that canonical_principal must rewrite.
_SPECIAL_HEADS = frozenset({"tulp", "ink:", "key:", "raw:"})
_RAW_PRINCIPAL_PREFIX = "raw:"


@functools.lru_cache(maxsize=65536)
def _decode_ed25519_multikey(body: str) -> bytes | None:
    """Decode ``z<base58btc(ed01 || key)>`` to the 32-byte key, or ``None``.

    Cached because ``canonical_principal`` runs per record and the set of
    live senders is small, while a base58 decode is tens of microseconds.  The
    cache is bounded, so a flood of distinct bogus ids only evicts entries; the
    callers bound the key length so evicted memory is bounded too.

    Canonical-only: the decoded bytes must re-encode to exactly ``body``.
    That rejects leading-``1`` zero padding (which base58 maps to extra 0x00
    bytes) and anything ``base58`` silently tolerates such as trailing
    whitespace, so two distinct spellings can never reach the same key.
    """
    if not body.startswith(_MULTIBASE_BASE58BTC):
        return None
    encoded = body[1:]
    try:
        raw = base58.b58decode(encoded)
        if base58.b58encode(raw).decode("ascii") != encoded:
            return None
    except (ValueError, TypeError):
        # Invalid alphabet characters raise ValueError; non-ASCII input raises
        # UnicodeEncodeError (a ValueError) inside base58's scrub_input.
        return None
    if len(raw) != len(_ED25519_MULTICODEC) + _ED25519_KEY_BYTES:
        return None
    if raw[:2] != _ED25519_MULTICODEC:
        # e.g. X25519 (0xec01) is a key-agreement key, never a signer.
        return None
    return raw[2:]


def multikey_encode(public_key: bytes) -> str:
    """Encode a 32-byte Ed25519 key as a ``z6Mk...`` multikey.

    This is the only spelling ``canonical_principal`` accepts, so ids built
    with it always canonicalise to ``key:<this>``.
    """
    if not isinstance(public_key, (bytes, bytearray)) or len(public_key) != _ED25519_KEY_BYTES:
        raise ValueError(
            f"Ed25519 public key must be {_ED25519_KEY_BYTES} bytes, got {type(public_key).__name__} of length {_safe_len(public_key)}"
        )
    encoded = base58.b58encode(_ED25519_MULTICODEC + bytes(public_key)).decode("ascii")
    return _MULTIBASE_BASE58BTC + encoded


def multikey_decode(s: str) -> bytes:
    """Decode a ``z6Mk...`` Ed25519 multikey to its 32-byte public key.

    Raises ``ValueError`` for anything that is not the canonical encoding of
    an Ed25519 (multicodec 0xed01) key: we refuse rather than normalise,
    because accepting alternative spellings is what lets principals collide.
    """
    if not isinstance(s, str):
        raise ValueError(f"multikey must be a str, got {type(s).__name__}")
    if len(s) > _MAX_MULTIBASE_CHARS:
        raise ValueError(f"multikey is {len(s)} characters; at most {_MAX_MULTIBASE_CHARS} are decoded")
    key = _key_from_body(s)
    if key is None:
        raise ValueError(f"not a canonical Ed25519 multikey (expected 'z' + base58btc of 0xed01 || 32-byte key): {s!r}")
    return key


def agent_id_for_key(public_key: bytes, prefix: str = "tulpa:") -> str:
    """Build the agent id ``<prefix><multikey>`` for an Ed25519 key.

    Only ``tulpa:`` and ``ink:`` are allowed because only those prefixes are
    recognised as key-bearing by ``canonical_principal``; any other prefix
    would produce an id that never maps back to the key principal.
    """
    if prefix not in _ALIAS_PREFIXES:
        raise ValueError(f"agent id prefix must be one of {_ALIAS_PREFIXES}, got {prefix!r}")
    return prefix + multikey_encode(public_key)


def _alias_body(agent_id: str) -> str | None:
    """Return the multibase body after a ``tulpa:``/``ink:`` prefix, else None."""
    if agent_id.startswith("tulpa:"):
        return agent_id[6:]
    if agent_id.startswith("ink:"):
        return agent_id[4:]
    return None


def _key_from_body(body: str) -> bytes | None:
    # Exact-length gate before the (cached) decode: cheap, and it keeps
    # arbitrarily long attacker strings out of the LRU cache.
    if len(body) != _ED25519_MULTIKEY_CHARS:
        return None
    return _decode_ed25519_multikey(body)


def public_key_from_agent_id(agent_id: str) -> bytes | None:
    """Return the 32-byte Ed25519 key named by a well-formed ``tulpa:``/``ink:`` id.

    ``None`` for everything else (named agents, DIDs, malformed or
    non-canonical multikeys): the caller then has to resolve the key some other
    way (e.g. a registry) instead of trusting the id.
    """
    if not isinstance(agent_id, str):
        return None
    body = _alias_body(agent_id)
    if body is None:
        return None
    return _key_from_body(body)


def _utf16_units(s: str) -> int:
    """Length in UTF-16 code units, i.e. JavaScript ``string.length``."""
    if s.isascii():
        return len(s)
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


def canonical_principal(agent_id: str) -> str:
    """Map a raw ``agentId`` to the INK canonical principal.

    Raises ``ValueError`` for an empty id or one longer than 512 UTF-16 code
    units: those are rejected outright rather than escaped, matching INK.
    See the module docstring for the mapping and why it is injective.
    """
    if not isinstance(agent_id, str):
        raise ValueError(f"agentId must be a str, got {type(agent_id).__name__}")
    n = len(agent_id)
    if not n:
        raise ValueError("agentId must be a non-empty string")
    # len() counts code points: a lower bound on UTF-16 units, and 2*len() an
    # upper bound, so the exact count is only computed for long ids.
    if n > _HALF_CAP and _utf16_units(agent_id) > MAX_AGENT_ID_UTF16_UNITS:
        raise ValueError(f"agentId is {_utf16_units(agent_id)} UTF-16 code units long; at most {MAX_AGENT_ID_UTF16_UNITS} are allowed")
    # One 4-character slice and a frozenset probe route almost every id: named
    # agents and DIDs leave here.
    head = agent_id[:4]
    if head not in _SPECIAL_HEADS:
        return agent_id
    if head == "key:" or head == "raw:":
        # A literal "key:..." must never be confused with a canonical key
        # principal, and escaping "raw:..." too keeps the map injective.
        return _RAW_PRINCIPAL_PREFIX + agent_id
    if head == "ink:":
        if n == _INK_ID_CHARS:
            return _alias_principal(agent_id)
    elif not agent_id.startswith("tulpa:"):
        return agent_id  # "tulp" but not "tulpa:", e.g. "tulpamancer"
    elif n == _TULPA_ID_CHARS:
        return _alias_principal(agent_id)
    # tulpa:/ink: with a body of the wrong length can never be a key.
    return _RAW_PRINCIPAL_PREFIX + agent_id


@functools.lru_cache(maxsize=65536)
def _alias_principal(agent_id: str) -> str:
    """Principal for a right-length ``tulpa:``/``ink:`` id (memoised).

    Cached on the whole id so the per-record hit costs one hash and lookup,
    with no slicing or concatenation; keys are at most 54 characters, so the
    bounded cache also bounds memory.
    """
    body = agent_id[4:] if agent_id.startswith("ink:") else agent_id[6:]
    if _decode_ed25519_multikey(body) is not None:
        return _KEY_PRINCIPAL_PREFIX + body
    return _RAW_PRINCIPAL_PREFIX + agent_id


def _safe_len(value: object) -> int | str:
    return len(value) if isinstance(value, Sized) else "n/a"
