"""RFC 9162 §2.1 Merkle trees for the award policy.

The hashing core moved to busguard.protocol.merkle when the guard's batch
seal came to use the same tree (the wire layer may not import a policy);
this module keeps the award's import path and names.
"""

from __future__ import annotations

from busguard.protocol.merkle import (
    EMPTY_ROOT,
    HASH_BYTES,
    MAX_TREE_SIZE,
    ProofError,
    leaf_hash,
    merkle_root,
    node_hash,
    parse_hash,
    verify_consistency,
    verify_inclusion,
)

__all__ = [
    "EMPTY_ROOT",
    "HASH_BYTES",
    "MAX_TREE_SIZE",
    "ProofError",
    "leaf_hash",
    "merkle_root",
    "node_hash",
    "parse_hash",
    "verify_consistency",
    "verify_inclusion",
]
