"""Contract-net award guard (seed 002): the pure parts.

An award is settlement-grade only if the awarder can recompute the winning
receipt's committed root (a local canonicalizer), or has recorded a
delegation to a verifier it trusts, or the task explicitly tolerates
best-effort. This package holds the canonicalizers (canonicalizers.py,
merkle.py), the local verification registry (registry.py), the wire format
of the four `cnet.*` kinds (wire.py), the policy that judges them on the
policy seam (policy.py, registered in busguard.policies), its state rows and
their lifetimes (rows.py), the `[award]` limits (limits.py) and settlement,
whose root recomputation runs before the state transaction (settle.py).
"""

from __future__ import annotations

from busguard.policies.award.canonicalizers import (
    BUILTIN,
    ENTRY_POINT_GROUP,
    Canonicalizer,
    JcsSha256,
    MalformedOutput,
    MerkleSha256,
    PluginError,
    available_canonicalizers,
    discover_plugins,
)
from busguard.policies.award.registry import (
    TrustedVerifier,
    VerificationConfig,
    VerificationRegistry,
    VerifierConfig,
    build_registry,
    load_verification,
)

__all__ = [
    "BUILTIN",
    "ENTRY_POINT_GROUP",
    "Canonicalizer",
    "JcsSha256",
    "MalformedOutput",
    "MerkleSha256",
    "PluginError",
    "TrustedVerifier",
    "VerificationConfig",
    "VerificationRegistry",
    "VerifierConfig",
    "available_canonicalizers",
    "build_registry",
    "discover_plugins",
    "load_verification",
]
