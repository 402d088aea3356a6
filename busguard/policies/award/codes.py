"""The reason codes each contract-net kind may give (`KindSpec.reasons`):
docs/protocol.md 15 lists them per kind, and the vectors cover each."""

from __future__ import annotations

from typing import Final

from busguard.protocol.reasons import Reason

#: The reason codes each kind may give (KindSpec.reasons).
_PARSE = (
    Reason.UNKNOWN_FIELD,
    Reason.MISSING_FIELD,
    Reason.WRONG_TYPE,
    Reason.MALFORMED_FIELD,
    Reason.NOT_JSON,
    Reason.DUPLICATE_KEY,
    Reason.MALFORMED_AGENT_ID,
)
CALL_REASONS: Final = (
    *_PARSE,
    Reason.MALFORMED_TIMESTAMP,
    Reason.AWARD_WRONG_PARTY,
    Reason.AWARD_CALL_EXISTS,
    Reason.AWARD_DEADLINE_TOO_FAR,
)
BID_REASONS: Final = (
    *_PARSE,
    Reason.MALFORMED_TIMESTAMP,
    Reason.AWARD_UNKNOWN_CALL,
    Reason.AWARD_CLOSED,
    Reason.AWARD_DEADLINE_TOO_FAR,
    Reason.AWARD_BID_EXISTS,
    Reason.AWARD_BIDDER_LIMIT,
    Reason.AWARD_TOO_MANY_BIDS,
)
AWARD_REASONS: Final = (
    *_PARSE,
    Reason.AWARD_UNKNOWN_CALL,
    Reason.AWARD_WRONG_PARTY,
    Reason.AWARD_ALREADY_AWARDED,
    Reason.AWARD_CLOSED,
    Reason.AWARD_UNKNOWN_BID,
    Reason.AWARD_UNRANKED_BID,
    Reason.AWARD_UNRECOMPUTABLE,
    Reason.AWARD_UNTRUSTED_VERIFIER,
    Reason.AWARD_BEST_EFFORT_NOT_TOLERATED,
    Reason.AWARD_CHECK_REQUIRED,
)
RESULT_REASONS: Final = (
    *_PARSE,
    Reason.AWARD_UNKNOWN_CALL,
    Reason.AWARD_WRONG_PARTY,
    Reason.SETTLEMENT_NO_AWARD,
    Reason.SETTLEMENT_MISMATCH,
    Reason.SETTLEMENT_UNRECOMPUTABLE,
    Reason.SETTLEMENT_BAD_ATTESTATION,
)
