"""Unit and property tests for busguard.protocol.identity."""

from __future__ import annotations

import base58
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from busguard.protocol import identity
from busguard.protocol.identity import (
    MAX_AGENT_ID_UTF16_UNITS,
    agent_id_for_key,
    canonical_principal,
    multikey_decode,
    multikey_encode,
    public_key_from_agent_id,
)
from busguard.protocol.signing import generate_keypair

# From the INK principal-normalization vectors.
KEY_BODY = "z6MkgosDnsjFCTf73Ms7S4Nzwe78GD7Bzn94hTU462M4GirX"
KEY_BYTES = bytes.fromhex("22fec375ea0fe9d1b05996aac2485c17fafda30b7b6718c76e3169fa16c419c4")
X25519_BODY = "z6LSe2nLiwHfxNtP2FQBH8w7R8mcHnNTHW4rtRGokD2a4squ"


def _b58(raw: bytes) -> str:
    return "z" + base58.b58encode(raw).decode("ascii")


# ------------------------------------------------------------------ multikey


def test_multikey_roundtrip_known_key() -> None:
    assert multikey_decode(KEY_BODY) == KEY_BYTES
    assert multikey_encode(KEY_BYTES) == KEY_BODY


@pytest.mark.parametrize("raw", [bytes(32), b"\xff" * 32, bytes(range(32))])
def test_multikey_extremes_are_z6mk_and_48_chars(raw: bytes) -> None:
    encoded = multikey_encode(raw)
    assert encoded.startswith("z6Mk")
    assert len(encoded) == 48
    assert multikey_decode(encoded) == raw


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "z",
        "6MkgosDnsjFCTf73Ms7S4Nzwe78GD7Bzn94hTU462M4GirX",  # missing multibase prefix
        "Z6MkgosDnsjFCTf73Ms7S4Nzwe78GD7Bzn94hTU462M4GirX",  # wrong multibase code
        "z16MkgosDnsjFCTf73Ms7S4Nzwe78GD7Bzn94hTU462M4GirX",  # leading-zero padding
        KEY_BODY + " ",  # base58 lib rstrips; canonical check must catch it
        KEY_BODY + "\n",
        X25519_BODY,  # 0xec01 key agreement, not a signer
        "z6Mk",
        "zNotBase58_0IOl",
        "z6MkgosDnsjFCTf73Ms7S4Nzwe78GD7Bzn94hTU462M4Gir\u00e9",  # non-ASCII
        "z" + "1" * 200,  # over the decode cap
        _b58(b"\xed\x01" + bytes(31)),  # 31-byte key
        _b58(b"\xed\x01" + bytes(33)),  # 33-byte key
        _b58(b"\xed\x02" + bytes(32)),  # wrong varint continuation
    ],
)
def test_multikey_decode_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        multikey_decode(bad)


def test_multikey_decode_rejects_non_str() -> None:
    with pytest.raises(ValueError):
        multikey_decode(KEY_BODY.encode())  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [b"", bytes(31), bytes(33), "x" * 32, None])
def test_multikey_encode_rejects_wrong_length_or_type(bad: object) -> None:
    with pytest.raises(ValueError):
        multikey_encode(bad)  # type: ignore[arg-type]


# ------------------------------------------------------------ agent ids


def test_agent_id_for_key_and_back() -> None:
    assert agent_id_for_key(KEY_BYTES) == "tulpa:" + KEY_BODY
    assert agent_id_for_key(KEY_BYTES, prefix="ink:") == "ink:" + KEY_BODY
    assert public_key_from_agent_id("tulpa:" + KEY_BODY) == KEY_BYTES
    assert public_key_from_agent_id("ink:" + KEY_BODY) == KEY_BYTES


@pytest.mark.parametrize("prefix", ["key:", "raw:", "did:key:", "", "TULPA:", "tulpa"])
def test_agent_id_for_key_rejects_other_prefixes(prefix: str) -> None:
    with pytest.raises(ValueError):
        agent_id_for_key(KEY_BYTES, prefix=prefix)


@pytest.mark.parametrize(
    "agent_id",
    [
        "key:" + KEY_BODY,
        "raw:tulpa:" + KEY_BODY,
        "did:key:" + KEY_BODY,
        "TULPA:" + KEY_BODY,
        "tulpa:",
        "tulpa:z16MkgosDnsjFCTf73Ms7S4Nzwe78GD7Bzn94hTU462M4GirX",
        "tulpa:" + X25519_BODY,
        "tulpa:" + KEY_BODY + " ",
        "planner",
        "",
    ],
)
def test_public_key_from_agent_id_none(agent_id: str) -> None:
    assert public_key_from_agent_id(agent_id) is None


def test_public_key_from_agent_id_non_str_is_none() -> None:
    assert public_key_from_agent_id(None) is None  # type: ignore[arg-type]


# ----------------------------------------------------- canonical_principal


@pytest.mark.parametrize(
    ("agent_id", "expected"),
    [
        ("tulpa:" + KEY_BODY, "key:" + KEY_BODY),
        ("ink:" + KEY_BODY, "key:" + KEY_BODY),
        ("key:" + KEY_BODY, "raw:key:" + KEY_BODY),
        ("raw:anything", "raw:raw:anything"),
        ("raw:", "raw:raw:"),
        ("key:", "raw:key:"),
        ("tulpa:", "raw:tulpa:"),
        ("ink:", "raw:ink:"),
        ("tulpa:" + KEY_BODY + " ", "raw:tulpa:" + KEY_BODY + " "),
        ("tulpa:" + X25519_BODY, "raw:tulpa:" + X25519_BODY),
        ("did:web:example.com", "did:web:example.com"),
        ("did:key:" + KEY_BODY, "did:key:" + KEY_BODY),
        ("planner", "planner"),
        ("Tulpa:" + KEY_BODY, "Tulpa:" + KEY_BODY),  # prefixes are case-sensitive
        ("KEY:x", "KEY:x"),
        (" tulpa:" + KEY_BODY, " tulpa:" + KEY_BODY),
        ("\u4f60\u597d", "\u4f60\u597d"),
    ],
)
def test_canonical_principal_examples(agent_id: str, expected: str) -> None:
    assert canonical_principal(agent_id) == expected


def test_canonical_principal_rejects_empty() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        canonical_principal("")


def test_canonical_principal_rejects_non_str() -> None:
    with pytest.raises(ValueError):
        canonical_principal(b"planner")  # type: ignore[arg-type]


def test_utf16_cap_ascii_boundary() -> None:
    ok = "a" * MAX_AGENT_ID_UTF16_UNITS
    assert canonical_principal(ok) == ok
    with pytest.raises(ValueError, match="UTF-16"):
        canonical_principal(ok + "a")


def test_utf16_cap_counts_code_units_not_bytes_or_code_points() -> None:
    bmp = "\u4f60" * 512  # 512 units, 1536 UTF-8 bytes
    assert canonical_principal(bmp) == bmp
    with pytest.raises(ValueError):
        canonical_principal(bmp + "\u4f60")
    astral = "\U0001f600" * 256  # 256 code points, 512 UTF-16 units
    assert canonical_principal(astral) == astral
    with pytest.raises(ValueError):
        canonical_principal(astral + "a")  # 513 units but only 257 code points


def test_utf16_cap_applies_before_prefix_handling() -> None:
    with pytest.raises(ValueError):
        canonical_principal("raw:" + "a" * MAX_AGENT_ID_UTF16_UNITS)


def test_lone_surrogate_does_not_crash() -> None:
    weird = "\ud800" * 300
    assert canonical_principal(weird) == weird
    with pytest.raises(ValueError):
        canonical_principal("\ud800" * 513)


def test_decode_and_principal_are_cached() -> None:
    _, pk = generate_keypair()
    agent_id = agent_id_for_key(pk)
    outer = identity._alias_principal.cache_info()
    canonical_principal(agent_id)
    canonical_principal(agent_id)
    assert identity._alias_principal.cache_info().hits >= outer.hits + 1
    inner = identity._decode_ed25519_multikey.cache_info()
    public_key_from_agent_id(agent_id)
    assert identity._decode_ed25519_multikey.cache_info().hits >= inner.hits + 1
    assert identity._decode_ed25519_multikey.cache_info().maxsize == 65536
    assert identity._alias_principal.cache_info().maxsize == 65536


def test_cached_results_match_cold_results() -> None:
    ids = ["tulpa:" + KEY_BODY, "ink:" + KEY_BODY, "tulpa:" + X25519_BODY, "ink:" + KEY_BODY[:-1] + "Y"]
    warm = [canonical_principal(i) for i in ids]
    identity._alias_principal.cache_clear()
    identity._decode_ed25519_multikey.cache_clear()
    assert [canonical_principal(i) for i in ids] == warm


def test_long_bodies_never_reach_the_cache() -> None:
    outer = identity._alias_principal.cache_info().currsize
    inner = identity._decode_ed25519_multikey.cache_info().currsize
    assert canonical_principal("tulpa:z" + "2" * 400) == "raw:tulpa:z" + "2" * 400
    assert public_key_from_agent_id("ink:z" + "2" * 400) is None
    assert identity._alias_principal.cache_info().currsize == outer
    assert identity._decode_ed25519_multikey.cache_info().currsize == inner


# ---------------------------------------------------------------- properties

_id_text = st.text(max_size=80)
_prefixes = st.sampled_from(["", "tulpa:", "ink:", "key:", "raw:", "did:", "raw:key:"])


@st.composite
def _agent_ids(draw: st.DrawFn) -> str:
    """Mix of arbitrary strings and real/near-real key ids under every prefix."""
    kind = draw(st.integers(0, 2))
    prefix = draw(_prefixes)
    if kind == 0:
        body = draw(_id_text)
    else:
        key = draw(st.binary(min_size=32, max_size=32))
        body = multikey_encode(key)
        if kind == 2:
            body = draw(st.sampled_from(["z1", "", " "])) + body[draw(st.integers(0, 3)) :]
    return prefix + body


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(_id_text)
def test_escaped_prefixes_never_look_canonical(s: str) -> None:
    assert canonical_principal("key:" + s) == "raw:key:" + s
    assert canonical_principal("raw:" + s) == "raw:raw:" + s


@settings(max_examples=300)
@given(_agent_ids())
def test_only_well_formed_aliases_map_to_key_principals(agent_id: str) -> None:
    if not agent_id:
        return
    principal = canonical_principal(agent_id)
    if principal.startswith("key:"):
        key = public_key_from_agent_id(agent_id)
        assert key is not None
        assert principal == "key:" + multikey_encode(key)
    elif principal.startswith("raw:"):
        assert principal == "raw:" + agent_id
        assert agent_id.startswith(("tulpa:", "ink:", "key:", "raw:"))
    else:
        assert principal == agent_id
        assert not agent_id.startswith(("tulpa:", "ink:", "key:", "raw:"))


def _alias_pair(a: str, b: str) -> bool:
    def strip(x: str) -> str | None:
        for p in ("tulpa:", "ink:"):
            if x.startswith(p):
                return x[len(p) :]
        return None

    body_a, body_b = strip(a), strip(b)
    return body_a is not None and body_a == body_b


@settings(max_examples=300)
@given(_agent_ids(), _agent_ids())
def test_injective_except_for_the_tulpa_ink_alias(a: str, b: str) -> None:
    if not a or not b or a == b:
        return
    if canonical_principal(a) == canonical_principal(b):
        assert _alias_pair(a, b)
        assert public_key_from_agent_id(a) == public_key_from_agent_id(b) is not None


@settings(max_examples=100)
@given(st.binary(min_size=32, max_size=32))
def test_both_prefixes_same_principal(key: bytes) -> None:
    principal = canonical_principal(agent_id_for_key(key, "tulpa:"))
    assert principal == canonical_principal(agent_id_for_key(key, "ink:"))
    assert principal == "key:" + multikey_encode(key)
    assert multikey_decode(principal[4:]) == key
