"""Strict Ed25519 signing and verification (libsodium via PyNaCl).

Why libsodium: Ed25519 verifiers disagree on edge cases (non-canonical
``S``/``R``/``A``, small-order points, malleable ``S + L``).  A receipt that
one hop accepts and another rejects is a consensus bug, and lenient checks
are forgery or malleability bugs.  libsodium's verifier is strict on all of
these and matches every Project Wycheproof Ed25519 case, which the test suite
pins.

Why booleans instead of exceptions: ``verify_signature`` runs on untrusted
input on the hot path; the caller only needs accept/reject, and a verifier
that can raise on odd lengths or types is a denial-of-service vector and an
easy place to accidentally fail open in a broad ``except``.

No PyNaCl objects leak out of this module: keys, seeds and signatures are
plain ``bytes`` so other modules never depend on the crypto library's types.
"""

from __future__ import annotations

import nacl.bindings
import nacl.exceptions
import nacl.utils

__all__ = [
    "PUBLIC_KEY_BYTES",
    "SEED_BYTES",
    "SECRET_KEY_BYTES",
    "SIGNATURE_BYTES",
    "generate_keypair",
    "is_acceptable_public_key",
    "public_key_from_seed",
    "sign",
    "verify_signature",
]

PUBLIC_KEY_BYTES = 32
SEED_BYTES = 32
#: libsodium's secret key layout: seed || public key.
SECRET_KEY_BYTES = 64
SIGNATURE_BYTES = 64

_BYTES_LIKE = (bytes, bytearray, memoryview)


def _as_bytes(value: object, length: int) -> bytes | None:
    """Return ``value`` as ``bytes`` if it is bytes-like of exactly ``length``."""
    if isinstance(value, bytes):
        return value if len(value) == length else None
    if isinstance(value, (bytearray, memoryview)):
        try:
            raw = bytes(value)
        except (TypeError, ValueError, BufferError):
            return None
        return raw if len(raw) == length else None
    return None


def verify_signature(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """Return True iff ``signature`` is a valid strict Ed25519 signature.

    Never raises: wrong types or lengths are simply invalid.  Lengths are
    checked here rather than left to libsodium because PyNaCl's
    ``crypto_sign_open`` does not check the public key length (a short key
    would be read past its end), and because ``signature + message`` with a
    wrong-length signature would silently shift bytes between the two.
    """
    pk = _as_bytes(public_key, PUBLIC_KEY_BYTES)
    sig = _as_bytes(signature, SIGNATURE_BYTES)
    if pk is None or sig is None:
        return False
    if isinstance(message, bytes):
        msg = message
    elif isinstance(message, (bytearray, memoryview)):
        try:
            msg = bytes(message)
        except (TypeError, ValueError, BufferError):
            return False
    else:
        return False
    try:
        # crypto_sign_open is libsodium's strict verifier on sig || msg; the
        # detached variant is not exposed by PyNaCl's public bindings.
        nacl.bindings.crypto_sign_open(sig + msg, pk)
    except (nacl.exceptions.CryptoError, ValueError, TypeError):
        return False
    return True


def is_acceptable_public_key(public_key: bytes) -> bool:
    """Return True iff ``public_key`` is safe to register as a signer identity.

    Rejects wrong lengths, non-canonical encodings (y >= p, or x = 0 with the
    sign bit set), points not on the curve, small-order points, and points
    with a torsion component (not in the prime-order subgroup).  That is
    stricter than what ``verify_signature`` requires, on purpose: a
    small-order or mixed-order key lets its holder produce signatures that
    verify for many messages or under differing verifier rules, so such keys
    must never become identities.  Never raises.
    """
    pk = _as_bytes(public_key, PUBLIC_KEY_BYTES)
    if pk is None:
        return False
    try:
        return bool(nacl.bindings.crypto_core_ed25519_is_valid_point(pk))
    except (nacl.exceptions.CryptoError, ValueError, TypeError):
        return False


def public_key_from_seed(seed: bytes) -> bytes:
    """Derive the 32-byte Ed25519 public key from a 32-byte seed.

    Raises ``ValueError`` on a wrong-length or non-bytes seed.
    """
    raw = _as_bytes(seed, SEED_BYTES)
    if raw is None:
        raise ValueError(f"Ed25519 seed must be {SEED_BYTES} bytes")
    pk, _sk = nacl.bindings.crypto_sign_seed_keypair(raw)
    return bytes(pk)


def generate_keypair() -> tuple[bytes, bytes]:
    """Return a fresh ``(seed, public_key)`` pair from the OS CSPRNG.

    The seed (not libsodium's 64-byte secret key) is what callers store:
    it is the RFC 8032 private key and everything else derives from it.
    """
    seed = nacl.utils.random(SEED_BYTES)
    return seed, public_key_from_seed(seed)


def _secret_key(seed_or_signing_key: bytes) -> bytes:
    """Expand a seed, or validate a libsodium ``seed || pk`` secret key."""
    seed = _as_bytes(seed_or_signing_key, SEED_BYTES)
    if seed is not None:
        _pk, sk = nacl.bindings.crypto_sign_seed_keypair(seed)
        return bytes(sk)
    full = _as_bytes(seed_or_signing_key, SECRET_KEY_BYTES)
    if full is None:
        raise ValueError(f"signing key must be a {SEED_BYTES}-byte seed or a {SECRET_KEY_BYTES}-byte seed || public key")
    _pk, sk = nacl.bindings.crypto_sign_seed_keypair(full[:SEED_BYTES])
    # Ed25519 hashes the public half into every signature.  Signing with a
    # mismatched public half yields invalid signatures and, worse, lets whoever
    # chose that half recover the private key from two signatures of one
    # message, so a 64-byte key must be internally consistent.
    if bytes(sk) != full:
        raise ValueError("64-byte signing key's public half does not match its seed")
    return full


class Signer:
    """A key expanded once. `sign()` from a bare seed re-derives the key pair
    every call, which doubles the cost; busguard seals every decision, so
    the guard keeps one of these."""

    __slots__ = ("_sk", "public_key")

    def __init__(self, seed_or_signing_key: bytes) -> None:
        self._sk = _secret_key(seed_or_signing_key)
        self.public_key = self._sk[SEED_BYTES:]

    def sign(self, message: bytes) -> bytes:
        return bytes(nacl.bindings.crypto_sign(message, self._sk)[:SIGNATURE_BYTES])


def sign(seed_or_signing_key: bytes, message: bytes) -> bytes:
    """Return the 64-byte detached Ed25519 signature of ``message``.

    Accepts either the 32-byte seed or libsodium's 64-byte ``seed || pk``;
    raises ``ValueError`` for anything else.  Ed25519 signing is
    deterministic, so the same key and message always give the same bytes.
    """
    sk = _secret_key(seed_or_signing_key)
    if not isinstance(message, _BYTES_LIKE):
        raise ValueError(f"message must be bytes, got {type(message).__name__}")
    signed = nacl.bindings.crypto_sign(bytes(message), sk)
    return bytes(signed[:SIGNATURE_BYTES])
