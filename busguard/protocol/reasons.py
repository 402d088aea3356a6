"""Stable reason codes carried by every decision.

The strings are part of the wire contract (they appear in audit records and
dead-letter headers, and operators alert on them), so they never change
meaning once released; new situations get new codes. `docs/protocol.md` lists
every member with its meaning, and a unit test keeps the two in step.
"""

from __future__ import annotations

import enum


class Reason(enum.StrEnum):
    # --- forward ---------------------------------------------------------
    ADMITTED = "admitted"
    # --- duplicate (never forwarded again) -------------------------------
    EXACT_DUPLICATE = "exact_duplicate"
    RETRANSMISSION = "retransmission"
    # --- escalate (to reconciliation, never forwarded) -------------------
    AMBIGUOUS_RETRANSMISSION = "ambiguous_retransmission"
    TASK_CONFLICT = "task_conflict"
    # --- reject: the record itself is unusable ---------------------------
    MISSING_HEADER = "missing_header"
    DUPLICATE_HEADER = "duplicate_header"
    RESERVED_HEADER = "reserved_header"
    OVERSIZED = "oversized"
    NOT_JSON = "not_json"
    BAD_BASE64 = "bad_base64"
    WRONG_TYPE = "wrong_type"
    MISSING_FIELD = "missing_field"
    UNKNOWN_FIELD = "unknown_field"
    DUPLICATE_KEY = "duplicate_key"
    UNSUPPORTED_VERSION = "unsupported_version"
    UNKNOWN_KIND = "unknown_kind"
    MALFORMED_FIELD = "malformed_field"
    MALFORMED_AGENT_ID = "malformed_agent_id"
    MALFORMED_TIMESTAMP = "malformed_timestamp"
    MALFORMED_NONCE = "malformed_nonce"
    MALFORMED_SESSION = "malformed_session"
    # --- reject: the client could not decode the record (runtime/tolerant_fetch.py)
    UNDECODABLE_RECORD = "undecodable_record"
    UNDECODABLE_HEADER = "undecodable_header"
    UNDECODABLE_BATCH = "undecodable_batch"
    # --- reject: authenticity --------------------------------------------
    UNKNOWN_SENDER = "unknown_sender"
    UNKNOWN_KEY = "unknown_key"
    REVOKED_KEY = "revoked_key"
    EXPIRED_KEY = "expired_key"
    BAD_SIGNATURE = "bad_signature"
    PAYLOAD_HASH_MISMATCH = "payload_hash_mismatch"
    # --- reject: routing and delivery ------------------------------------
    WRONG_RECEIVER = "wrong_receiver"
    OUTPUT_TOO_LARGE = "output_too_large"
    # --- reject: freshness and replay ------------------------------------
    TIMESTAMP_EXPIRED = "timestamp_expired"
    TIMESTAMP_TOO_FAR_FUTURE = "timestamp_too_far_future"
    STORE_WARMING = "store_warming"
    NONCE_REPLAY = "nonce_replay"
    SEQUENCE_REPLAY = "sequence_replay"
    SEQUENCE_TOO_OLD = "sequence_too_old"
    # --- contract-net awards (seed 002; busguard/policies/award) ----------
    AWARD_UNKNOWN_CALL = "award_unknown_call"
    AWARD_WRONG_PARTY = "award_wrong_party"
    AWARD_CLOSED = "award_closed"
    AWARD_TOO_MANY_BIDS = "award_too_many_bids"
    AWARD_CALL_EXISTS = "award_call_exists"
    AWARD_BID_EXISTS = "award_bid_exists"
    AWARD_BIDDER_LIMIT = "award_bidder_limit"
    AWARD_DEADLINE_TOO_FAR = "award_deadline_too_far"
    AWARD_ALREADY_AWARDED = "award_already_awarded"
    AWARD_UNKNOWN_BID = "award_unknown_bid"
    AWARD_UNRANKED_BID = "award_unranked_bid"
    AWARD_UNRECOMPUTABLE = "award_unrecomputable"
    AWARD_UNTRUSTED_VERIFIER = "award_untrusted_verifier"
    AWARD_BEST_EFFORT_NOT_TOLERATED = "award_best_effort_not_tolerated"
    AWARD_CHECK_REQUIRED = "award_check_required"
    SETTLEMENT_NO_AWARD = "settlement_no_award"
    SETTLEMENT_MISMATCH = "settlement_mismatch"
    SETTLEMENT_UNRECOMPUTABLE = "settlement_unrecomputable"
    SETTLEMENT_BAD_ATTESTATION = "settlement_bad_attestation"
    # --- reject: taint-replay requests (policies/taint/replay.py) ---------
    TAINT_REPLAY_REFUSED = "taint_replay_refused"
    TAINT_REQUEST_MALFORMED = "taint_request_malformed"
    TAINT_TRACE_TOO_LARGE = "taint_trace_too_large"
    # --- session handoffs and compromise notices (seed 004, policies/compromise)
    HANDOFF_MALFORMED = "handoff_malformed"
    HANDOFF_UNAUTHENTIC = "handoff_unauthentic"
    UNDECLARED_COMPROMISE = "undeclared_compromise"
    UNDECLARED_OPERATIONAL_STATE = "undeclared_operational_state"
    NOTHING_TRANSFERABLE = "nothing_transferable"
    DOUBLE_COMPROMISE_QUARANTINE = "double_compromise_quarantine"
    DOUBLE_COMPROMISE_ESCALATE = "double_compromise_escalate"
    DOUBLE_COMPROMISE_NO_RULE = "double_compromise_no_rule"
    NOTICE_MALFORMED = "notice_malformed"
    NOTICE_UNAUTHENTIC = "notice_unauthentic"
    NOTICE_EXPIRY_TOO_FAR = "notice_expiry_too_far"
    NOTICE_ALREADY_CLEARED = "notice_already_cleared"
    CLEARANCE_MALFORMED = "clearance_malformed"
    CLEARANCE_UNAUTHENTIC = "clearance_unauthentic"
    CLEARANCE_TOO_FAR = "clearance_too_far"
    CLEARANCE_UNKNOWN_NOTICE = "clearance_unknown_notice"
    CLEARANCE_NOTICE_MISMATCH = "clearance_notice_mismatch"
    CLEARANCE_ISSUER_UNDER_NOTICE = "clearance_issuer_under_notice"


class Outcome(enum.StrEnum):
    """Where a record goes. Exactly one per input record."""

    FORWARD = "forward"
    DUPLICATE = "duplicate"
    ESCALATE = "escalate"
    REJECT = "reject"
