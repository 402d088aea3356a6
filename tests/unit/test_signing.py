"""Unit and property tests for busguard.protocol.signing."""

from __future__ import annotations

import nacl.bindings
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from busguard.protocol.signing import (
    generate_keypair,
    is_acceptable_public_key,
    public_key_from_seed,
    sign,
    verify_signature,
)

# RFC 8032 section 7.1, TEST 1 and TEST 2.
RFC_SEED_1 = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
RFC_PK_1 = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
RFC_SIG_1 = bytes.fromhex(
    "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
)
RFC_SEED_2 = bytes.fromhex("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb")
RFC_PK_2 = bytes.fromhex("3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c")
RFC_MSG_2 = bytes.fromhex("72")
RFC_SIG_2 = bytes.fromhex(
    "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"
)

# The eight small-order points of edwards25519, canonically encoded (the
# "-x" entries are the negations, distinct points with the x sign bit set).
SMALL_ORDER_POINTS = {
    "identity (order 1)": "0100000000000000000000000000000000000000000000000000000000000000",
    "order 2 (y = -1)": "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "order 4 (y = 0)": "0000000000000000000000000000000000000000000000000000000000000000",
    "order 4 (y = 0, -x)": "0000000000000000000000000000000000000000000000000000000000000080",
    "order 8 a": "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
    "order 8 a, -x": "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
    "order 8 b": "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
    "order 8 b, -x": "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
}

P = 2**255 - 19


def _noncanonical(y: int, sign_bit: int = 0) -> bytes:
    return (P + y + (sign_bit << 255)).to_bytes(32, "little")


NON_CANONICAL = {
    "y = p (0 + p)": _noncanonical(0),
    "y = p + 1 (identity + p)": _noncanonical(1),
    "y = p + 3": _noncanonical(3),
    "y = p + 18, sign set": _noncanonical(18, 1),
    "identity with x sign bit": bytes.fromhex("01" + "00" * 30 + "80"),
    "all ones": b"\xff" * 32,
}


# -------------------------------------------------------------- RFC 8032


def test_rfc8032_vectors() -> None:
    assert public_key_from_seed(RFC_SEED_1) == RFC_PK_1
    assert sign(RFC_SEED_1, b"") == RFC_SIG_1
    assert verify_signature(RFC_PK_1, b"", RFC_SIG_1)
    assert public_key_from_seed(RFC_SEED_2) == RFC_PK_2
    assert sign(RFC_SEED_2, RFC_MSG_2) == RFC_SIG_2
    assert verify_signature(RFC_PK_2, RFC_MSG_2, RFC_SIG_2)


def test_sign_accepts_64_byte_secret_key() -> None:
    assert sign(RFC_SEED_1 + RFC_PK_1, b"") == RFC_SIG_1


def test_sign_rejects_mismatched_64_byte_secret_key() -> None:
    with pytest.raises(ValueError, match="public half"):
        sign(RFC_SEED_1 + RFC_PK_2, b"")


@pytest.mark.parametrize("bad", [b"", bytes(31), bytes(33), bytes(63), bytes(65), "x" * 32, None])
def test_sign_rejects_bad_keys(bad: object) -> None:
    with pytest.raises(ValueError):
        sign(bad, b"msg")  # type: ignore[arg-type]


def test_sign_rejects_non_bytes_message() -> None:
    with pytest.raises(ValueError):
        sign(RFC_SEED_1, "text")  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [bytes(31), bytes(64), "seed", None])
def test_public_key_from_seed_rejects(bad: object) -> None:
    with pytest.raises(ValueError):
        public_key_from_seed(bad)  # type: ignore[arg-type]


def test_generate_keypair() -> None:
    seed, pk = generate_keypair()
    seed2, pk2 = generate_keypair()
    assert len(seed) == 32 and len(pk) == 32
    assert isinstance(seed, bytes) and isinstance(pk, bytes)
    assert seed != seed2 and pk != pk2
    assert public_key_from_seed(seed) == pk
    assert is_acceptable_public_key(pk)
    assert verify_signature(pk, b"hello", sign(seed, b"hello"))


def test_bytes_like_inputs_accepted() -> None:
    # Typed as bytes, but bytes-like buffers are accepted at runtime.
    sig = sign(bytearray(RFC_SEED_2), memoryview(RFC_MSG_2))  # type: ignore[arg-type]
    assert sig == RFC_SIG_2
    assert verify_signature(
        bytearray(RFC_PK_2),  # type: ignore[arg-type]
        bytearray(RFC_MSG_2),  # type: ignore[arg-type]
        memoryview(RFC_SIG_2),  # type: ignore[arg-type]
    )


# ----------------------------------------------------- verify never raises


@pytest.mark.parametrize(
    ("pk", "msg", "sig"),
    [
        (RFC_PK_1[:31], b"", RFC_SIG_1),  # short key: must not reach libsodium
        (RFC_PK_1 + b"\x00", b"", RFC_SIG_1),
        (b"", b"", RFC_SIG_1),
        (RFC_PK_1, b"", RFC_SIG_1[:63]),
        (RFC_PK_1, b"", RFC_SIG_1 + b"\x00"),
        (RFC_PK_1, b"", b""),
        (RFC_PK_1, "", RFC_SIG_1),
        (RFC_PK_1.hex(), b"", RFC_SIG_1),
        (RFC_PK_1, b"", RFC_SIG_1.hex()),
        (None, None, None),
        (RFC_PK_1, None, RFC_SIG_1),
        (1, 2, 3),
        (list(RFC_PK_1), b"", list(RFC_SIG_1)),
        (memoryview(RFC_PK_1 * 2).cast("H"), b"", RFC_SIG_1),  # 32 items, 64 bytes
    ],
)
def test_verify_malformed_is_false(pk: object, msg: object, sig: object) -> None:
    assert verify_signature(pk, msg, sig) is False  # type: ignore[arg-type]


def test_verify_rejects_wrong_message_and_key() -> None:
    assert not verify_signature(RFC_PK_1, b"x", RFC_SIG_1)
    assert not verify_signature(RFC_PK_2, b"", RFC_SIG_1)


def test_verify_signature_moved_into_message_is_rejected() -> None:
    # A 65-byte "signature" must not be split as sig(64) || msg-prefix(1).
    msg = b"\x00hello"
    sig = sign(RFC_SEED_1, msg[1:])
    assert not verify_signature(RFC_PK_1, msg[1:], msg[:1] + sig)
    assert not verify_signature(RFC_PK_1, msg, sig)


@pytest.mark.parametrize("name", sorted(SMALL_ORDER_POINTS))
def test_verify_rejects_trivial_forgery_under_small_order_key(name: str) -> None:
    # With A of small order, R = identity and S = 0 satisfies the cofactored
    # equation for *every* message on a lenient verifier.
    pk = bytes.fromhex(SMALL_ORDER_POINTS[name])
    forged = bytes.fromhex(SMALL_ORDER_POINTS["identity (order 1)"]) + bytes(32)
    assert not verify_signature(pk, b"any message", forged)


@settings(max_examples=200)
@given(st.binary(max_size=64), st.binary(max_size=256), st.binary(max_size=80))
def test_verify_random_garbage_never_raises(pk: bytes, msg: bytes, sig: bytes) -> None:
    assert verify_signature(pk, msg, sig) in (True, False)


@settings(max_examples=50)
@given(
    st.binary(min_size=32, max_size=32),
    st.binary(max_size=512),
    st.integers(min_value=0, max_value=64 * 8 - 1),
)
def test_sign_verify_roundtrip_and_bitflip(seed: bytes, msg: bytes, bit: int) -> None:
    pk = public_key_from_seed(seed)
    sig = sign(seed, msg)
    assert len(sig) == 64
    assert sign(seed, msg) == sig  # deterministic
    assert verify_signature(pk, msg, sig)
    tampered = bytearray(sig)
    tampered[bit // 8] ^= 1 << (bit % 8)
    assert not verify_signature(pk, msg, bytes(tampered))
    assert not verify_signature(pk, msg + b"\x00", sig)


# -------------------------------------------------- key acceptability


@pytest.mark.parametrize("name", sorted(SMALL_ORDER_POINTS))
def test_small_order_points_unacceptable(name: str) -> None:
    assert not is_acceptable_public_key(bytes.fromhex(SMALL_ORDER_POINTS[name]))


def test_small_order_list_is_really_small_order() -> None:
    # Sanity-check the fixtures: doubling three times (i.e. 8 * P) reaches
    # the identity for every one of them, and they are pairwise distinct.
    identity = bytes.fromhex(SMALL_ORDER_POINTS["identity (order 1)"])
    assert len(set(SMALL_ORDER_POINTS.values())) == 8
    for name, hex_point in SMALL_ORDER_POINTS.items():
        acc = bytes.fromhex(hex_point)
        for _ in range(3):
            acc = nacl.bindings.crypto_core_ed25519_add(acc, acc)
        assert acc == identity, name


@pytest.mark.parametrize("name", sorted(NON_CANONICAL))
def test_non_canonical_encodings_unacceptable(name: str) -> None:
    assert not is_acceptable_public_key(NON_CANONICAL[name])


def test_non_canonical_fixtures_decode_leniently() -> None:
    # These encodings are not mere garbage: libsodium's lenient decoder
    # (used by crypto_core_ed25519_add) accepts them as curve points, so a
    # verifier that skipped the canonical check would treat them as keys.
    base = bytes.fromhex("5866666666666666666666666666666666666666666666666666666666666666")
    for name in ("y = p (0 + p)", "y = p + 1 (identity + p)", "y = p + 3"):
        nacl.bindings.crypto_core_ed25519_add(NON_CANONICAL[name], base)


def test_mixed_order_key_unacceptable() -> None:
    # A real key plus an order-8 torsion point is on the curve and not small
    # order, but not in the prime-order subgroup.
    _, pk = generate_keypair()
    torsion = bytes.fromhex(SMALL_ORDER_POINTS["order 8 a"])
    mixed = nacl.bindings.crypto_core_ed25519_add(pk, torsion)
    assert is_acceptable_public_key(pk)
    assert not is_acceptable_public_key(mixed)


def test_point_not_on_curve_unacceptable() -> None:
    # y = 2 is not on edwards25519 (x^2 would be a non-square).
    assert not is_acceptable_public_key((2).to_bytes(32, "little"))


@pytest.mark.parametrize("bad", [b"", RFC_PK_1[:31], RFC_PK_1 + b"\x00", RFC_PK_1.hex(), None, 7])
def test_acceptable_wrong_length_or_type(bad: object) -> None:
    assert is_acceptable_public_key(bad) is False  # type: ignore[arg-type]


def test_rfc_keys_acceptable() -> None:
    assert is_acceptable_public_key(RFC_PK_1)
    assert is_acceptable_public_key(bytearray(RFC_PK_2))  # type: ignore[arg-type]
