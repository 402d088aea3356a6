"""What agents import: sign and send receipts; check busguard's attestations; act once.

The kinds' readers live in one module each (`busguard.sdk.award`,
`busguard.sdk.taint`, `busguard.sdk.compromise`: each has its `READERS` or
`readers(keys)` for `AdmittingConsumer`); their views are re-exported here."""

from busguard.sdk.award import AwardView, BidView, CallView, ResultView, Verification
from busguard.sdk.compromise import HandoffView, handoff_reader, registry_keys
from busguard.sdk.consumer import AdmittingConsumer, Batch, Delivery, Fetched, Refusal
from busguard.sdk.doneset import Claim, DoneSet, SqliteDoneSet, Staged, idempotency_token
from busguard.sdk.guardkey import guard_key_from_multikey
from busguard.sdk.once import ActOnce, Reply, Step
from busguard.sdk.pgdoneset import PostgresDoneSet
from busguard.sdk.producer import SigningProducer
from busguard.sdk.receiver import Admitted, HeadCache, open_admitted
from busguard.sdk.scope import ScopeReport, verify_forwarded
from busguard.sdk.sender import Sender, SignedRecord
from busguard.sdk.taint import PlanView, ReplayUnit, read_plan

__all__ = [
    "ActOnce",
    "Admitted",
    "AdmittingConsumer",
    "AwardView",
    "Batch",
    "BidView",
    "CallView",
    "Claim",
    "Delivery",
    "DoneSet",
    "Fetched",
    "HandoffView",
    "HeadCache",
    "PlanView",
    "PostgresDoneSet",
    "Refusal",
    "ReplayUnit",
    "Reply",
    "ResultView",
    "ScopeReport",
    "Sender",
    "SignedRecord",
    "SigningProducer",
    "SqliteDoneSet",
    "Staged",
    "Step",
    "Verification",
    "guard_key_from_multikey",
    "handoff_reader",
    "idempotency_token",
    "open_admitted",
    "read_plan",
    "registry_keys",
    "verify_forwarded",
]
