"""The batch seal: one guard signature per batch, over a chained Merkle tree head.

Signing every decision (busguard.protocol.attestation, `busguard-seal`) was
about a sixth of the guard's CPU per record. A batch seal signs once per
batch instead (docs/protocol.md, 12.6):

* the leaves are the batch's new attestations, in decision order, hashed as
  RFC 9162 §2.1 does (busguard.protocol.merkle: SHA-256(0x00 || leaf),
  interior SHA-256(0x01 || left || right));
* the signed statement is a `TreeHead` naming the root, the tree size, and
  the SHA-256 of the previous head of the same chain, so the heads form a
  hash chain: an auditor that holds every head can prove that no audit
  record was removed, inserted or moved, as in a Certificate Transparency
  log (up to the newest heads: truncating the chain's end is detectable only
  against a tip kept elsewhere);
* every output carries its attestation, the head, the head's signature and
  the leaf's inclusion proof (`busguard-inclusion`: index and audit path as
  raw bytes, 4 + 32 * depth bytes), so each output is still checkable on its
  own, and a receiver that caches a verified head checks one signature per
  batch.

Why the proof is raw bytes and not hex or base64: Kafka header values are
bytes, the path is up to 17 hashes for the largest batch (100 000 leaves),
and every output of a batch carries one; raw it is half of hex.

Pure: no I/O, no clock. Deterministic (Ed25519 signatures are), so the
head and proofs rebuilt from what the store persisted are byte-identical.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Final, NamedTuple

import msgspec

from busguard.protocol.envelope import b64url_encode
from busguard.protocol.merkle import HASH_BYTES, MAX_TREE_SIZE, ProofError, inclusion_paths, leaf_hash, tree_levels, verify_inclusion
from busguard.protocol.signing import Signer

TREE_HEAD_CONTEXT: Final = b"busguard/tree-head/v1\x00"
TREE_HEAD_VERSION: Final = 1
HEADER_TREE_HEAD: Final = "busguard-tree-head"
HEADER_HEAD_SEAL: Final = "busguard-head-seal"
HEADER_INCLUSION: Final = "busguard-inclusion"
#: The largest batch a guard seals (`[batch] max_records` allows up to this).
MAX_LEAVES: Final = 100_000
#: Levels above the leaves of a tree of MAX_LEAVES: the longest audit path.
MAX_DEPTH: Final = (MAX_LEAVES - 1).bit_length()
#: A chain id: 1 to 64 characters of [0-9a-z-].
_CHAIN: Final = re.compile(r"[0-9a-z-]{1,64}")
_HEX: Final = re.compile(r"[0-9a-f]{64}")

_encoder: Final = msgspec.json.Encoder()


class TreeHead(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the guard signs once per batch (field order is the wire order).

    `chain` names the chain within the guard (`guard`): one per guard
    process run, so processes sharing a store never contend for one tip.
    `prev` is the lowercase hex SHA-256 of the previous head's bytes on the
    chain, null exactly for `seq` 0. `root` is the lowercase hex tree root
    over `size` leaves. `sealed_at` is the batch's clock reading (epoch ms),
    the `decided_at` of each of its decisions."""

    v: int
    guard: str
    chain: str
    seq: int
    prev: str | None
    size: int
    root: str
    sealed_at: int


class TreeHeadError(ValueError):
    """A tree head or inclusion proof that is malformed (not merely false)."""


_head_decoder: Final = msgspec.json.Decoder(TreeHead)


def encode_head(head: TreeHead) -> bytes:
    return _encoder.encode(head)


def decode_head(raw: bytes) -> TreeHead:
    """A head, refusing anything `seal_batch` would not have written."""
    try:
        head = _head_decoder.decode(raw)
    except msgspec.MsgspecError as exc:
        raise TreeHeadError(f"busguard-tree-head is malformed: {exc}") from None
    if head.v != TREE_HEAD_VERSION:
        raise TreeHeadError(f"busguard-tree-head: version {head.v} is not {TREE_HEAD_VERSION}")
    if _CHAIN.fullmatch(head.chain) is None:
        raise TreeHeadError(f"busguard-tree-head: chain {head.chain[:80]!r} is not 1-64 characters of [0-9a-z-]")
    if not 0 <= head.seq <= MAX_TREE_SIZE:
        raise TreeHeadError(f"busguard-tree-head: seq {head.seq} is not from 0 to 2**53 - 1")
    if not 1 <= head.size <= MAX_LEAVES:
        raise TreeHeadError(f"busguard-tree-head: size {head.size} is not from 1 to {MAX_LEAVES}")
    if _HEX.fullmatch(head.root) is None:
        raise TreeHeadError("busguard-tree-head: root is not 64 lowercase hex characters")
    if (head.prev is None) != (head.seq == 0):
        raise TreeHeadError("busguard-tree-head: prev must be null exactly when seq is 0")
    if head.prev is not None and _HEX.fullmatch(head.prev) is None:
        raise TreeHeadError("busguard-tree-head: prev is not 64 lowercase hex characters")
    return head


def head_digest(raw: bytes) -> str:
    """What the next head's `prev` names: SHA-256 of the head's exact bytes."""
    return hashlib.sha256(raw).hexdigest()


def head_message(raw: bytes) -> bytes:
    """The bytes the head seal signs."""
    return TREE_HEAD_CONTEXT + raw


def encode_inclusion(index: int, path: Sequence[bytes]) -> bytes:
    """`busguard-inclusion`: u32 big-endian leaf index, then the audit path's
    32-byte hashes, leaf to root."""
    return index.to_bytes(4, "big") + b"".join(path)


def decode_inclusion(raw: bytes) -> tuple[int, list[bytes]]:
    if len(raw) < 4 or (len(raw) - 4) % HASH_BYTES or (len(raw) - 4) // HASH_BYTES > MAX_DEPTH:
        raise TreeHeadError(f"busguard-inclusion must be 4 + 32 * k bytes with k <= {MAX_DEPTH}, got {len(raw)} bytes")
    return int.from_bytes(raw[:4], "big"), [raw[i : i + HASH_BYTES] for i in range(4, len(raw), HASH_BYTES)]


def included(attestation: bytes, head: TreeHead, inclusion: bytes) -> int:
    """The leaf index `inclusion` proves `attestation` at under `head`;
    TreeHeadError when the proof is malformed or false."""
    index, path = decode_inclusion(inclusion)
    try:
        ok = verify_inclusion(index, head.size, leaf_hash(attestation), path, bytes.fromhex(head.root))
    except ProofError as exc:
        raise TreeHeadError(f"busguard-inclusion: {exc}") from None
    if not ok:
        raise TreeHeadError(f"busguard-inclusion does not prove this attestation at leaf {index} of the head's tree")
    return index


class ChainTip(NamedTuple):
    """The last head of a chain, as the store holds it: what the next one links to."""

    seq: int
    head: bytes


class BatchTree:
    """A sealed batch: the head's bytes, its seal and the tree to prove
    leaves in (every leaf's path is built at the first `inclusion`)."""

    __slots__ = ("head", "seal", "levels", "_paths")

    def __init__(self, head: bytes, seal: bytes, levels: list[list[bytes]]) -> None:
        self.head = head
        self.seal = seal
        self.levels = levels
        self._paths: list[bytes] | None = None

    @property
    def leaves(self) -> list[bytes]:
        return self.levels[0]

    def inclusion(self, index: int) -> bytes:
        """`busguard-inclusion` for leaf `index` (`encode_inclusion` of its path)."""
        if self._paths is None:
            self._paths = inclusion_paths(self.levels)
        return index.to_bytes(4, "big") + self._paths[index]


def next_link(tip: ChainTip | None) -> tuple[int, str | None]:
    """(seq, prev) of the head after `tip` (a new chain starts at 0, prev null)."""
    return (0, None) if tip is None else (tip.seq + 1, head_digest(tip.head))


def seal_batch(signer: Signer, attestations: Sequence[bytes], *, guard: str, chain: str, tip: ChainTip | None, sealed_at: int) -> BatchTree:
    """Build the tree over `attestations` (decision order), the head that
    follows `tip` on `chain`, and sign it: the batch's one signature."""
    if not 1 <= len(attestations) <= MAX_LEAVES:
        raise ValueError(f"a batch seal covers 1 to {MAX_LEAVES} attestations, not {len(attestations)}")
    levels = tree_levels([leaf_hash(a) for a in attestations])
    seq, prev = next_link(tip)
    head = encode_head(
        TreeHead(
            v=TREE_HEAD_VERSION,
            guard=guard,
            chain=chain,
            seq=seq,
            prev=prev,
            size=len(attestations),
            root=levels[-1][0].hex(),
            sealed_at=sealed_at,
        )
    )
    return BatchTree(head, b64url_encode(signer.sign(head_message(head))).encode("ascii"), levels)


def rebuild(head: bytes, seal: bytes, leaves: bytes) -> BatchTree:
    """A sealed batch as persisted (its head, seal and concatenated leaf
    hashes), to re-emit its decisions' proofs byte for byte."""
    hashes = [leaves[i : i + HASH_BYTES] for i in range(0, len(leaves), HASH_BYTES)]
    return BatchTree(head, seal, tree_levels(hashes))


def worst_head(guard: str) -> bytes:
    """A head at least as long as any `seal_batch` writes for `guard`."""
    big = -(2**63)
    return encode_head(
        TreeHead(
            v=TREE_HEAD_VERSION,
            guard=guard,
            chain="z" * 64,
            seq=MAX_TREE_SIZE,
            prev="f" * 64,
            size=MAX_LEAVES,
            root="f" * 64,
            sealed_at=big,
        )
    )


def worst_inclusion(max_leaves: int = MAX_LEAVES) -> bytes:
    """An inclusion proof at least as long as any in a tree of `max_leaves`."""
    return encode_inclusion(0, [b"\x00" * HASH_BYTES] * (max(1, max_leaves) - 1).bit_length())
