"""busguard: admission middleware for agent traffic on Kafka.

The stable public surface (conformance hooks and the sender SDK) is
re-exported here; everything else is internal and may move.
"""

from __future__ import annotations

from busguard.admission.freshness import ReplayVerdict, check_replay
from busguard.protocol.attestation import AttestationError, HeadCache, verify_admitted
from busguard.protocol.identity import canonical_principal
from busguard.protocol.signing import verify_signature
from busguard.protocol.timestamps import parse_timestamp
from busguard.sdk.receiver import Admitted, open_admitted
from busguard.sdk.sender import Sender, SignedRecord

__all__ = [
    "Admitted",
    "AttestationError",
    "HeadCache",
    "ReplayVerdict",
    "Sender",
    "SignedRecord",
    "canonical_principal",
    "check_replay",
    "open_admitted",
    "parse_timestamp",
    "verify_admitted",
    "verify_signature",
]
__version__ = "0.1.0"
