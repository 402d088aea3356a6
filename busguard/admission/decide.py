"""Admission: one record, a view of the state and the time in; a decision and
the state changes it needs out. No I/O, no clock, no Kafka (docs/design.md,
"Principles", 1: pure core, thin I/O shell).

The shape follows Bytewax's `stateful_map`, not its `StatefulLogic`: the
shell owns the state and the clock and hands this module a view of both; it
only computes and returns what to write. It runs in three stages so the shell can
batch the expensive middle one across threads:

1. `precheck`  — parse and cheap checks; never touches state.
2. `verify`    — the Ed25519 check (~58 µs, releases the GIL).
3. `decide`    — store warming, nonce, session window, task index.

Between 2 and 3, for records whose signature verified, a kind's policy
parses (admission/policystep.py `prepare`). Checks run cheapest first, and
nothing is recorded or parsed for a record whose signature did not verify,
so a forger cannot burn nonces, claim task ids or make a policy work.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Final, Protocol

import msgspec

from busguard.admission import policystep
from busguard.admission import window as win
from busguard.admission.fence import fenced
from busguard.admission.freshness import check_freshness, is_valid_nonce
from busguard.admission.types import NO_EFFECTS, AdmissionPolicy, Effects
from busguard.policies import KINDS, run_policies
from busguard.policies.seam import PERMANENT_EXPIRY_MS
from busguard.protocol.envelope import DEFAULT_MAX_PAYLOAD_BYTES, Envelope, open_envelope
from busguard.protocol.identity import canonical_principal
from busguard.protocol.reasons import Outcome, Reason
from busguard.protocol.receipt import ReceiptError, payload_hash, payload_hash_problem, signing_input
from busguard.protocol.records import Coordinates, Decision, TaskEntry, carried_by_hash, decision_id
from busguard.protocol.registry import KeyRegistry, KeyWindow
from busguard.protocol.signing import verify_signature
from busguard.protocol.timestamps import parse_timestamp
from busguard.state.keys import NonceKey, PolicyKey, TaskKey, WindowKey
from busguard.state.snapshot import WindowState
from busguard.state.writes import NonceRecord, PolicyRecord, WindowRecord


class StateView(Protocol):
    """Read side of the state store as admission sees it."""

    @property
    def trusted_from(self) -> int | None: ...

    def nonce_seen(self, key: NonceKey) -> bool: ...

    def window(self, key: WindowKey) -> WindowState | None: ...

    def task(self, key: TaskKey) -> TaskEntry | None: ...

    def policy_value(self, key: PolicyKey) -> bytes | None: ...


class Candidate(msgspec.Struct, frozen=True, gc=False):  # positional on the hot path: keep the order
    """A record that passed every stateless check and awaits its signature check."""

    source: Coordinates
    envelope: Envelope
    principal: str
    keys: tuple[KeyWindow, ...]
    issued_at_ms: int
    nonce_key: NonceKey
    task_key: TaskKey
    window_key: WindowKey | None
    record_sha256: str | None = None  # the input record's (protocol.records.record_sha256)


def _decision(
    did: str,
    source: Coordinates,
    now_ms: int,
    outcome: Outcome,
    reason: str,
    detail: str,
    envelope: Envelope | None = None,
    principal: str | None = None,
    key: KeyWindow | None = None,
    supersedes: str | None = None,
    prior: TaskEntry | None = None,
    record: str | None = None,
) -> Decision:
    """`record`: the input record's `record_sha256`, set here rather than by
    copying the decision afterwards (a struct copy per record)."""
    if envelope is None:
        return Decision(did, outcome, reason, source, now_ms, detail, record_sha256=record)
    r = envelope.receipt
    # Positional, in Decision's field order (see its docstring for why).
    return Decision(
        did,  # decision_id
        outcome,
        reason,
        source,
        now_ms,  # decided_at
        detail,
        envelope.receipt_id,
        r.kind,
        r.task_id,
        r.sender,
        principal,
        r.receiver,
        r.nonce,
        r.session_id,
        r.sequence,
        r.payload_hash,
        r.issued_at,
        key.key_id if key is not None else r.key_id,
        key.public_key if key is not None else None,
        envelope.receipt_bytes,  # receipt
        envelope.signature,
        supersedes,
        prior,
        record,
    )


def precheck(
    source: Coordinates,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes]],
    registry: KeyRegistry,
    now_ms: int,
    policy: AdmissionPolicy,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    receivers: frozenset[str] | None = None,
    record_sha256: str | None = None,
) -> Candidate | Decision:
    """Stateless checks, cheapest first. Returns a reject decision or a candidate.

    `receivers`: the canonical principals the record's route serves, or None
    when the route declares none (any receiver is accepted)."""
    checked = _precheck(source, value, headers, registry, now_ms, policy, max_payload_bytes, receivers, record_sha256)
    if isinstance(checked, Candidate):
        return checked
    reason, detail, env, principal = checked
    return _decision(
        decision_id(policy.namespace, source), source, now_ms, Outcome.REJECT, reason, detail, env, principal, record=record_sha256
    )


def undecodable(
    source: Coordinates,
    now_ms: int,
    policy: AdmissionPolicy,
    reason: Reason,
    detail: str,
    record_sha256: str | None = None,
    last_offset: int | None = None,
) -> Decision:
    """The reject decision for a record the Kafka client could not decode
    (busguard.runtime.tolerant_fetch): there is no receipt to look at. With
    `last_offset`, one span decision for every offset from `source` to it
    (docs/protocol.md 2.1), its id that of its first offset."""
    did = decision_id(policy.namespace, source)
    if last_offset is None:
        return _decision(did, source, now_ms, Outcome.REJECT, reason, detail, record=record_sha256)
    return Decision(did, Outcome.REJECT, reason, source, now_ms, detail, record_sha256=record_sha256, last_offset=last_offset)


_Refusal = tuple[Reason, str, Envelope | None, str | None]

#: A stream has few senders and every record names one: memoise the mapping
#: (pure, bounded; a malformed id raises every time, errors are not cached).
_principal_of: Final = functools.lru_cache(maxsize=4096)(canonical_principal)


def _precheck(
    source: Coordinates,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes]],
    registry: KeyRegistry,
    now_ms: int,
    policy: AdmissionPolicy,
    max_payload_bytes: int,
    receivers: frozenset[str] | None,
    record_sha256: str | None,
) -> Candidate | _Refusal:
    try:
        env = open_envelope(value, headers, max_payload_bytes)
    except ReceiptError as exc:
        return exc.reason, exc.detail, None, None
    r = env.receipt
    if r.kind not in KINDS:
        return Reason.UNKNOWN_KIND, f"kind {r.kind[:64]!r} is not one busguard guards", env, None
    try:
        principal = _principal_of(r.sender)
        if len(r.receiver) > 256:  # only then can it pass 512 UTF-16 units (the parse capped code points)
            canonical_principal(r.receiver)
    except ValueError as exc:
        return Reason.MALFORMED_AGENT_ID, str(exc), env, None
    if not is_valid_nonce(r.nonce):
        return Reason.MALFORMED_NONCE, "nonce must be 16-256 characters of [A-Za-z0-9_-]", env, principal
    try:
        issued = parse_timestamp(r.issued_at)
    except ValueError as exc:
        return Reason.MALFORMED_TIMESTAMP, str(exc), env, principal
    stale = check_freshness(issued, now_ms, policy.max_age_ms, policy.max_future_ms)
    if stale is not None:
        if stale is Reason.TIMESTAMP_EXPIRED:
            return stale, f"issued_at {r.issued_at} is {now_ms - issued} ms old", env, principal
        return stale, f"issued_at {r.issued_at} is {issued - now_ms} ms ahead of the receiver clock", env, principal
    if payload_hash(env.payload) != r.payload_hash:
        malformed = payload_hash_problem(r.payload_hash)
        if malformed is not None:
            return Reason.MALFORMED_FIELD, malformed, env, principal
        return Reason.PAYLOAD_HASH_MISMATCH, "SHA-256 of the record value differs from payload_hash", env, principal
    found = registry.lookup(principal, r.key_id, now_ms)
    if found.reason is not None:
        return found.reason, found.detail, env, principal
    # Last of the stateless checks, so before the signature: a record for
    # another receiver records nothing (no nonce, sequence or task), and a
    # handoff copied onto the wrong route cannot use up the nonce of its
    # delivery on the right one.
    if receivers is not None:
        try:
            to = _principal_of(r.receiver)
        except ValueError as exc:
            return Reason.MALFORMED_AGENT_ID, str(exc), env, principal
        if to not in receivers:
            return Reason.WRONG_RECEIVER, f"receiver {r.receiver[:128]!r} is not one this route serves", env, principal
    nonce_key = (principal if policy.nonce_scope == "principal" else "", r.nonce)
    window_key = None if r.session_id is None else (principal, r.session_id)
    return Candidate(source, env, principal, found.keys, issued, nonce_key, (r.kind, r.task_id), window_key, record_sha256)


def verify(candidate: Candidate) -> KeyWindow | None:
    """The key that signed the receipt, or None. Tries each usable key once
    (more than one only while a named agent's rotation windows overlap)."""
    message = signing_input(candidate.envelope.receipt_bytes)
    for key in candidate.keys:
        if verify_signature(key.public_key, message, candidate.envelope.signature):
            return key
    return None


def decide(
    c: Candidate,
    key: KeyWindow | None,
    view: StateView,
    now_ms: int,
    policy: AdmissionPolicy,
    prepared: policystep.Prepared | None = None,
) -> tuple[Decision, Effects]:
    """The stateful part of the admission table (docs/protocol.md, "Decisions").

    `prepared`: the kind's policy, parsed (busguard.admission.policystep);
    it decides a record the core would admit (docs/design.md, "The policy seam")."""
    env = c.envelope
    r = env.receipt
    # Every decision below shares this head and `env, principal, key` tail;
    # spelled out rather than a closure, which would cost an object per record.
    did, src, principal, rs = decision_id(policy.namespace, c.source), c.source, c.principal, c.record_sha256

    if key is None:
        detail = "Ed25519 signature does not verify over the receipt bytes"
        return _decision(did, src, now_ms, Outcome.REJECT, Reason.BAD_SIGNATURE, detail, env, principal, None, None, None, rs), NO_EFFECTS
    spec = KINDS[r.kind]
    objection = run_policies(env, policy.policy_settings) if spec.interceptors else None
    if objection is not None:
        return _decision(
            did, src, now_ms, objection.outcome, objection.reason, objection.detail, env, principal, key, None, None, rs
        ), NO_EFFECTS
    # The fence (admission/fence.py): a store that is new, was lost or was
    # rolled back refuses what it could have forgotten, while that can be fresh.
    if fenced(c.issued_at_ms, now_ms, view.trusted_from, policy.max_age_ms, policy.max_future_ms):
        detail = (
            f"issued at most max_future_ms after this state store became trusted ({view.trusted_from}); "
            "refused until one freshness window (max_future_ms + max_age_ms) has passed"
        )
        return _decision(did, src, now_ms, Outcome.REJECT, Reason.STORE_WARMING, detail, env, principal, key, None, None, rs), NO_EFFECTS

    # A kind without the task index (KindSpec.task_index) has no entry to find.
    prior = view.task(c.task_key) if spec.task_index else None
    # The task index outlives the nonce store, so an exact resend is
    # recognised even after its nonce has aged out.
    if prior is not None and prior.nonce == r.nonce and prior.payload_hash == r.payload_hash and prior.principal == principal:
        detail = "already admitted; not forwarded again"
        return _decision(
            did, src, now_ms, Outcome.DUPLICATE, Reason.EXACT_DUPLICATE, detail, env, principal, key, None, prior, rs
        ), NO_EFFECTS
    if view.nonce_seen(c.nonce_key):
        if not spec.task_index and prepared is not None:
            # A kind that owns its tasks has no task entry to recognise an
            # exact copy by: its policy may, as a duplicate of what it admitted
            # (seam.duplicate_of). Anything else it would say is moot: a replay.
            answered = _policy_decision(prepared, view, c, key, did, now_ms, NO_EFFECTS)
            if answered[0].outcome == Outcome.DUPLICATE:
                return answered[0], NO_EFFECTS
        detail = "nonce already used inside the retention window"
        return _decision(did, src, now_ms, Outcome.REJECT, Reason.NONCE_REPLAY, detail, env, principal, key, None, None, rs), NO_EFFECTS

    window_record: WindowRecord | None = None
    if c.window_key is not None and r.sequence is not None:
        state = view.window(c.window_key)
        after = win.slide(state, r.sequence, policy.window_size)
        if after is win.Verdict.REPLAY:
            detail = f"sequence {r.sequence} already seen in session"
            return _decision(
                did, src, now_ms, Outcome.REJECT, Reason.SEQUENCE_REPLAY, detail, env, principal, key, None, None, rs
            ), NO_EFFECTS
        if isinstance(after, win.Verdict):  # TOO_OLD
            detail = f"sequence {r.sequence} is left of the {policy.window_size}-wide window (highest {state.top if state else None})"
            return _decision(
                did, src, now_ms, Outcome.REJECT, Reason.SEQUENCE_TOO_OLD, detail, env, principal, key, None, None, rs
            ), NO_EFFECTS
        window_record = WindowRecord(c.window_key, after, now_ms + policy.session_retention_ms)

    nonce_record = NonceRecord(c.nonce_key, now_ms + policy.nonce_retention_ms)
    if prior is None and not spec.task_index:
        assert prepared is not None  # KindSpec: a kind without the task index has a policy
        return _policy_decision(prepared, view, c, key, did, now_ms, Effects(nonce_record, window_record))
    if prior is None:
        entry = TaskEntry(  # positional, in field order
            r.kind,
            r.task_id,
            env.receipt_id,
            did,
            principal,
            r.nonce,
            r.payload_hash,
            r.session_id,
            r.sequence,
            src,
            env.receipt_bytes,
            env.signature,
            now_ms,
        )
        if prepared is not None:
            return _policy_decision(prepared, view, c, key, did, now_ms, Effects(nonce_record, window_record, entry))
        return _decision(did, src, now_ms, Outcome.FORWARD, Reason.ADMITTED, "", env, principal, key, None, None, rs), Effects(
            nonce_record, window_record, entry
        )
    consumed = Effects(nonce_record, window_record)
    if prior.payload_hash != r.payload_hash:
        detail = f"task {r.task_id!r} was admitted with a different payload_hash"
        return _decision(did, src, now_ms, Outcome.ESCALATE, Reason.TASK_CONFLICT, detail, env, principal, key, None, prior, rs), consumed
    if (
        r.session_id is not None
        and r.sequence is not None
        and prior.principal == principal
        and prior.session_id == r.session_id
        and prior.sequence is not None
        and r.sequence > prior.sequence
    ):
        detail = f"crash-recovery retransmission in session {r.session_id!r} (sequence {prior.sequence} -> {r.sequence})"
        return _decision(
            did, src, now_ms, Outcome.DUPLICATE, Reason.RETRANSMISSION, detail, env, principal, key, prior.receipt_id, prior, rs
        ), consumed
    detail = (
        f"task {r.task_id!r} already admitted under nonce {prior.nonce!r}; "
        "same payload, new nonce, and no session/sequence to tell a retransmission from a second witness"
    )
    return _decision(
        did, src, now_ms, Outcome.ESCALATE, Reason.AMBIGUOUS_RETRANSMISSION, detail, env, principal, key, prior.receipt_id, prior, rs
    ), consumed


def _policy_decision(
    prepared: policystep.Prepared,
    view: StateView,
    c: Candidate,
    key: KeyWindow,
    did: str,
    now_ms: int,
    admitted: Effects,
) -> tuple[Decision, Effects]:
    """A record the core would admit, as its kind's policy decides it.

    Whatever the outcome, its state writes, annotations and notices are kept
    (a refused award still sends its rebid notice); only an admission records
    the task and forwards (the replacement, if any). An objection still
    consumes the nonce and sequence: the record was authentic and fresh.
    A forward of a kind with `forward_annotations` records in `surfaced`
    which of them its forward carries (Decision)."""
    env, principal = c.envelope, c.principal
    outcome = policystep.run(prepared, view, now_ms, did)
    o = outcome.objection
    rows = tuple(PolicyRecord(w.key, w.value, PERMANENT_EXPIRY_MS if w.ttl_ms is None else now_ms + w.ttl_ms) for w in outcome.writes)
    if o is None:
        decision = _decision(did, c.source, now_ms, Outcome.FORWARD, Reason.ADMITTED, "", env, principal, key, None, None, c.record_sha256)
        effects = msgspec.structs.replace(admitted, policy=rows)
    else:
        decision = _decision(did, c.source, now_ms, o.outcome, o.reason, o.detail, env, principal, key, None, None, c.record_sha256)
        effects = Effects(admitted.nonce, admitted.window, None, rows)
    annotations = dict(outcome.annotations) if outcome.annotations else None
    surfaced = prepared.spec.forward_annotations
    decision = msgspec.structs.replace(
        decision,
        annotations=annotations,
        # the policy's bytes, each with its hash: the decision record carries them by hash (docs/protocol.md 12.5)
        **carried_by_hash(outcome.replacement if o is None else None, outcome.notices),
        # a forward of a kind that surfaces annotations names the ones it
        # carries, so its attestation binds them (even none: a reader can
        # then tell that none was removed)
        surfaced=tuple(n for n in surfaced if annotations and n in annotations) if o is None and surfaced else None,
        # a duplicate names the admission it repeats, as the core's do through `prior` (runtime.outputs)
        prior_decision_id=o.prior_decision_id if o is not None else None,
    )
    return decision, effects
