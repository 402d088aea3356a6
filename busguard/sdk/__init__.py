"""What agents import: sign and send receipts; check busguard's attestations; act once."""

from busguard.sdk.consumer import AdmittingConsumer, Batch, Delivery, Fetched, Refusal
from busguard.sdk.doneset import Claim, DoneSet, SqliteDoneSet, Staged, idempotency_token
from busguard.sdk.once import ActOnce, Reply, Step
from busguard.sdk.pgdoneset import PostgresDoneSet
from busguard.sdk.producer import SigningProducer
from busguard.sdk.receiver import Admitted, HeadCache, open_admitted
from busguard.sdk.scope import ScopeReport, verify_forwarded
from busguard.sdk.sender import Sender, SignedRecord

__all__ = [
    "ActOnce",
    "AdmittingConsumer",
    "Admitted",
    "Batch",
    "Claim",
    "Delivery",
    "DoneSet",
    "Fetched",
    "HeadCache",
    "PostgresDoneSet",
    "Refusal",
    "Reply",
    "ScopeReport",
    "Sender",
    "SignedRecord",
    "SigningProducer",
    "SqliteDoneSet",
    "Staged",
    "Step",
    "idempotency_token",
    "open_admitted",
    "verify_forwarded",
]
