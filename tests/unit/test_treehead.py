"""The batch seal (busguard.protocol.treehead): vectors, properties, tampering."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from busguard.protocol.attestation import (
    HEADER_ATTESTATION,
    HEADER_SEAL,
    AttestationError,
    HeadCache,
    InclusionError,
    attest_record,
    open_sealed,
)
from busguard.protocol.merkle import inclusion_path, leaf_hash, merkle_root, tree_levels, verify_inclusion
from busguard.protocol.records import Coordinates
from busguard.protocol.signing import Signer, public_key_from_seed
from busguard.protocol.treehead import (
    HEADER_HEAD_SEAL,
    HEADER_INCLUSION,
    HEADER_TREE_HEAD,
    MAX_DEPTH,
    MAX_LEAVES,
    ChainTip,
    TreeHeadError,
    decode_head,
    decode_inclusion,
    head_digest,
    rebuild,
    seal_batch,
    worst_head,
    worst_inclusion,
)

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "treehead"
DOC: Any = json.loads((VECTORS / "tree-heads.json").read_text(encoding="utf-8"))
SEED = bytes.fromhex(DOC["seed_hex"])
KEY = public_key_from_seed(SEED)
SIGNER = Signer(SEED)


def _att(body: bytes) -> bytes:
    return attest_record("tulpa:g", "ab" * 16, "forward", "ok", None, Coordinates(topic="in", partition=0, offset=len(body)), 1, body)


def _headers(att: bytes, head: bytes, seal: bytes, inclusion: bytes) -> list[tuple[str, bytes]]:
    return [(HEADER_ATTESTATION, att), (HEADER_TREE_HEAD, head), (HEADER_HEAD_SEAL, seal), (HEADER_INCLUSION, inclusion)]


def test_the_generator_reproduces_the_committed_vectors(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(VECTORS / "generate.py"), "--out", str(tmp_path)], check=True)
    assert (tmp_path / "tree-heads.json").read_bytes() == (VECTORS / "tree-heads.json").read_bytes()


def test_busguard_seals_exactly_the_vectors() -> None:
    assert KEY.hex() == DOC["public_key_hex"]
    tip: ChainTip | None = None
    for seq, h in enumerate(DOC["heads"]):
        atts = [a.encode() for a in h["attestations"]]
        tree = seal_batch(SIGNER, atts, guard=DOC["guard"], chain=DOC["chain"], tip=tip, sealed_at=1_700_000_000_000 + seq)
        assert tree.head == h["head"].encode()
        assert head_digest(tree.head) == h["head_sha256"]
        assert tree.seal == h["head_seal"].encode()
        assert [tree.inclusion(i).hex() for i in range(len(atts))] == h["inclusion_hex"]
        tip = ChainTip(seq, tree.head)


def test_the_vectors_verify_and_chain() -> None:
    cache = HeadCache()
    prev = None
    for h in DOC["heads"]:
        head = decode_head(h["head"].encode())
        assert head.prev == prev
        prev = h["head_sha256"]
        for i, (att, inc) in enumerate(zip(h["attestations"], h["inclusion_hex"], strict=True)):
            opened = open_sealed(_headers(att.encode(), h["head"].encode(), h["head_seal"].encode(), bytes.fromhex(inc)), KEY, cache)
            assert opened.index == i and opened.head == head


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(min_size=0, max_size=40), min_size=1, max_size=70))
def test_every_proof_verifies_and_matches_the_root(leaves: list[bytes]) -> None:
    hashes = [leaf_hash(x) for x in leaves]
    levels = tree_levels(hashes)
    root = levels[-1][0]
    assert root == merkle_root(hashes)
    for i, h in enumerate(hashes):
        assert verify_inclusion(i, len(hashes), h, inclusion_path(levels, i), root)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.binary(min_size=1, max_size=30), min_size=1, max_size=40, unique=True),
    st.data(),
)
def test_any_tampering_fails(bodies: list[bytes], data: st.DataObject) -> None:
    leaves = [_att(b) for b in bodies]
    tree = seal_batch(SIGNER, leaves, guard="tulpa:g", chain="c", tip=None, sealed_at=5)
    i = data.draw(st.integers(0, len(leaves) - 1))
    good = _headers(leaves[i], tree.head, tree.seal, tree.inclusion(i))
    assert open_sealed(good, KEY).index == i
    what = data.draw(st.sampled_from(["att", "head", "seal", "inclusion", "index"]))
    bad = list(good)
    if what == "att":
        bad[0] = (HEADER_ATTESTATION, _att(bodies[i] + b"!"))
    elif what == "head":
        bad[1] = (HEADER_TREE_HEAD, tree.head.replace(b'"sealed_at":5', b'"sealed_at":6'))
    elif what == "seal":
        s = bytearray(tree.seal)
        s[3] = ord("A") if s[3] != ord("A") else ord("B")
        bad[2] = (HEADER_HEAD_SEAL, bytes(s))
    elif what == "inclusion":
        inc = bytearray(tree.inclusion(i))
        if len(inc) == 4:
            inc += b"\x00" * 32
        else:
            inc[4 + data.draw(st.integers(0, len(inc) - 5))] ^= 1 << data.draw(st.integers(0, 7))
        bad[3] = (HEADER_INCLUSION, bytes(inc))
    else:
        j = data.draw(st.integers(0, len(leaves)).filter(lambda j: j != i))
        bad[3] = (HEADER_INCLUSION, j.to_bytes(4, "big") + tree.inclusion(i)[4:])
    with pytest.raises(AttestationError):
        open_sealed(bad, KEY)


def test_a_failed_proof_under_a_good_head_is_an_inclusion_error() -> None:
    a, b, c = _att(b"a"), _att(b"bb"), _att(b"ccc")
    tree = seal_batch(SIGNER, [a, b, c], guard="tulpa:g", chain="c", tip=None, sealed_at=1)
    with pytest.raises(InclusionError):
        open_sealed(_headers(a, tree.head, tree.seal, tree.inclusion(1)), KEY)
    with pytest.raises(AttestationError) as bad_seal:
        open_sealed(_headers(a, tree.head, tree.seal[:-2] + b"AA", tree.inclusion(0)), KEY)
    assert not isinstance(bad_seal.value, InclusionError)


def test_heads_chain_and_rebuild_byte_for_byte() -> None:
    first = seal_batch(SIGNER, [b"x", b"y"], guard="tulpa:g", chain="c", tip=None, sealed_at=1)
    second = seal_batch(SIGNER, [b"z"], guard="tulpa:g", chain="c", tip=ChainTip(0, first.head), sealed_at=2)
    h0, h1 = decode_head(first.head), decode_head(second.head)
    assert (h0.seq, h0.prev, h1.seq, h1.prev) == (0, None, 1, head_digest(first.head))
    again = rebuild(first.head, first.seal, b"".join(first.leaves))
    assert [again.inclusion(i) for i in range(2)] == [first.inclusion(i) for i in range(2)]


def test_one_seal_kind_per_record() -> None:
    tree = seal_batch(SIGNER, [b"a"], guard="tulpa:g", chain="c", tip=None, sealed_at=1)
    both = [*_headers(b"a", tree.head, tree.seal, tree.inclusion(0)), (HEADER_SEAL, b"A" * 86)]
    with pytest.raises(AttestationError, match="busguard-seal and a batch seal"):
        open_sealed(both, KEY)
    with pytest.raises(AttestationError, match="not all of"):
        open_sealed(_headers(b"a", tree.head, tree.seal, tree.inclusion(0))[:3], KEY)
    with pytest.raises(AttestationError, match="exactly one"):
        open_sealed([*_headers(b"a", tree.head, tree.seal, tree.inclusion(0)), (HEADER_TREE_HEAD, tree.head)], KEY)


def test_the_cache_spares_the_signature_but_not_the_proof() -> None:
    a, b = _att(b"a"), _att(b"bb")
    tree = seal_batch(SIGNER, [a, b], guard="tulpa:g", chain="c", tip=None, sealed_at=1)
    cache = HeadCache()
    open_sealed(_headers(a, tree.head, tree.seal, tree.inclusion(0)), KEY, cache)
    with pytest.raises(InclusionError):
        open_sealed(_headers(a, tree.head, tree.seal, tree.inclusion(1)), KEY, cache)
    other = public_key_from_seed(b"\x07" * 32)
    with pytest.raises(AttestationError):  # cached per key: another key verifies afresh
        open_sealed(_headers(b, tree.head, tree.seal, tree.inclusion(1)), other, cache)


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda h: h.replace(b'"v":1', b'"v":2'), "version"),
        (lambda h: h.replace(b'"prev":null', b'"prev":"' + b"0" * 64 + b'"'), "prev must be null"),
        (lambda h: h.replace(b'"size":1', b'"size":0'), "size"),
        (lambda h: h.replace(b'"chain":"c"', b'"chain":"C!"'), "chain"),
        (lambda h: h[:-1] + b',"extra":1}', "malformed"),
    ],
)
def test_malformed_heads_are_refused(mutate: Any, match: str) -> None:
    head = seal_batch(SIGNER, [b"a"], guard="tulpa:g", chain="c", tip=None, sealed_at=1).head
    with pytest.raises(TreeHeadError, match=match):
        decode_head(mutate(head))


def test_inclusion_bounds() -> None:
    with pytest.raises(TreeHeadError):
        decode_inclusion(b"\x00\x00\x00")
    with pytest.raises(TreeHeadError):
        decode_inclusion(b"\x00" * (4 + 32 * (MAX_DEPTH + 1)))
    assert len(worst_inclusion()) == 4 + 32 * MAX_DEPTH
    tree = seal_batch(
        SIGNER,
        [i.to_bytes(3, "big") for i in range(MAX_LEAVES)],
        guard="tulpa:g",
        chain="z" * 64,
        tip=ChainTip(2**53 - 2, b"{}"),
        sealed_at=-(2**63),
    )
    assert len(tree.head) <= len(worst_head("tulpa:g"))
    assert max(len(tree.inclusion(i)) for i in (0, MAX_LEAVES // 2, MAX_LEAVES - 1)) <= len(worst_inclusion())


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 300))
def test_all_paths_at_once_are_each_leafs_path(n: int) -> None:
    from busguard.protocol.merkle import inclusion_paths

    levels = tree_levels([leaf_hash(i.to_bytes(2, "big")) for i in range(n)])
    assert inclusion_paths(levels) == [b"".join(inclusion_path(levels, i)) for i in range(n)]
