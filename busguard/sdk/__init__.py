"""What agents import: sign and send receipts; check busguard's attestations; act once."""

from busguard.sdk.doneset import Claim, SqliteDoneSet, idempotency_token
from busguard.sdk.producer import SigningProducer
from busguard.sdk.receiver import Admitted, HeadCache, open_admitted
from busguard.sdk.scope import ScopeReport, verify_forwarded
from busguard.sdk.sender import Sender, SignedRecord

__all__ = [
    "Admitted",
    "Claim",
    "HeadCache",
    "ScopeReport",
    "Sender",
    "SignedRecord",
    "SigningProducer",
    "SqliteDoneSet",
    "idempotency_token",
    "open_admitted",
    "verify_forwarded",
]
