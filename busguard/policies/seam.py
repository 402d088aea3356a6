"""The policy seam: what a kind's policy is given and what it may answer.

A policy is pure, shaped like the function of Bytewax's `stateful_map`
rather than its `StatefulLogic` (which holds its own state): the shell owns
the state and the clock and passes a view of both; the policy only computes. Admission calls, in
this order (docs/design.md, "The policy seam"; docs/protocol.md 7.1):

1. `parse(record, context)` -> the kind's parsed payload, or an
   `Objection`. `record` (`PolicyInput`) is the envelope with what admission
   already computed from it: the sender's canonical principal and the task
   key; `context` the batch's key registry, clock reading and the
   deployment's settings. Called before the batch's state transaction
   (it needs no state), after the signatures of the whole batch are
   checked, and only for a record that passed every stateless check, whose
   signature verified and which no interceptor of its kind refused: a
   forged, stale or malformed record never reaches it, so costly stateless
   work (validating a trace, checking signatures inside the payload)
   belongs here. Copies of one signed record in a batch are parsed once.
   Its objection takes effect where `decide` would run.
2. `keys(parsed)` -> the `PolicyKey`s it will read, for the same records:
   loaded with the batch snapshot, in the same round trip and transaction
   as nonces and tasks (and, on PostgreSQL, advisory-locked).
3. `decide(parsed, view, now_ms)` -> a `PolicyOutcome`, inside the
   transaction, only once the replay / session / task core found that the
   record would be forwarded (a record parsed may still be refused there, as
   a replay or a duplicate). `view` reads those keys as the snapshot has
   them overlaid by earlier writes of the same batch (two records of one
   batch see each other, as nonces do).

Outcomes. An objection turns the record into a reject or an escalation with
the policy's reason and detail; the record's nonce and sequence are still
consumed (it was authentic and fresh), its task entry is not (it was not
admitted). Otherwise the record is admitted with the outcome's state writes
(applied in the batch's transaction), its annotations (recorded in the
decision and on the audit topic), an optional replacement for the forwarded
value and extra notices to the kind's routes. The annotations, replacement
and notices are fields of the persisted `Decision`, so a re-emission after a
crash is the same decision and therefore the same bytes.

Policies must be deterministic and must not raise on bad input: a payload
they cannot use is an `Objection`, never an exception.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, NamedTuple, Protocol, TypeVar

import msgspec

from busguard.errors import SettingError as SettingError  # re-exported: the seam's name for it
from busguard.protocol.envelope import Envelope
from busguard.protocol.identity import canonical_principal
from busguard.protocol.reasons import Outcome
from busguard.protocol.records import Notice
from busguard.protocol.registry import KeyLookup, KeyRegistry

#: busguard.state.keys.PolicyKey, spelled out: the policy packages (taint,
#: award, compromise) import this module and must not load the state layer.
PolicyKey = tuple[str, str]

P = TypeVar("P")


class Objection(msgspec.Struct, frozen=True):
    """Not an admission: a reject, an escalation, or (with `prior_decision_id`)
    a duplicate of an earlier admission (`duplicate_of`)."""

    outcome: Outcome
    #: one of busguard's `Reason`s, or one the kind declares (`KindSpec.reasons`)
    reason: str
    detail: str
    #: a duplicate's: the decision id of the admission it repeats, which its
    #: dead letter carries as `busguard-prior-decision-id` (as the core's
    #: duplicates); required with `Outcome.DUPLICATE`, refused with any other
    prior_decision_id: str | None = None


def duplicate_of(prior_decision_id: str, reason: str, detail: str) -> Objection:
    """A duplicate of the admission decided as `prior_decision_id` (which the
    policy learnt from its own row: `PolicyView.decision_id` is what it
    stores when it admits). Dead-lettered, never forwarded, counted by
    `busguard audit` as a duplicate; its nonce and sequence are consumed."""
    return Objection(Outcome.DUPLICATE, reason, detail, prior_decision_id)


class PolicyWrite(msgspec.Struct, frozen=True, gc=False):
    """A row the policy asks to persist: it expires `ttl_ms` after the
    decision, or, with `ttl_ms=None`, never (a permanent row: a high-water
    mark or a counter that must not reset). A permanent row is kept until a
    later write replaces it, so its bound is the kind's: the keys it
    writes permanently must come from a set its settings fix (docs/design.md,
    "The policy seam"; docs/operations.md, "Bounds")."""

    key: PolicyKey
    value: bytes
    ttl_ms: int | None


#: The expiry a permanent row is stored with (`PolicyWrite(ttl_ms=None)`):
#: far past any clock (year 146 million), inside every backend's 64-bit
#: column, so no store needs a second kind of row and `expire` never takes it.
PERMANENT_EXPIRY_MS: Final = 1 << 62


class PolicyOutcome(msgspec.Struct, frozen=True, kw_only=True):
    objection: Objection | None = None
    writes: tuple[PolicyWrite, ...] = ()
    annotations: Mapping[str, str] | None = None
    replacement: bytes | None = None
    notices: tuple[Notice, ...] = ()


class PolicyView(Protocol):
    def get(self, key: PolicyKey) -> bytes | None:
        """The row's bytes, None when absent or expired. Only keys the
        policy named in `keys()` may be read (LookupError otherwise)."""
        ...

    @property
    def decision_id(self) -> str:
        """The id of the decision being made: what a row written on
        admission stores, so that a later record can be answered
        `duplicate_of(that id)`. Deterministic (the input's coordinates,
        docs/protocol.md 4.4), so a re-decided batch stores the same id."""
        ...


class Settlement(msgspec.Struct, frozen=True, kw_only=True):
    """How a kind settles one of its escalations (`Reconciliation.settle`):
    the final resolution's `resolved_as` (one of the kind's `choices`), its
    note, and the state change the reconciler applies through the guard's
    state store, in one transaction with a marker of the resolution, so it
    is applied exactly once however often the reconciler crashes."""

    resolved_as: str
    note: str = ""
    writes: tuple[PolicyWrite, ...] = ()


class Reconciliation(Protocol):
    """A kind's reconciliation hooks (`KindSpec.reconciliation`): pure, like
    its policy. The reconciler calls `settle` for an escalation of the kind
    when it arrives (`choice` None: settle it automatically, or return None
    to hold it for an operator) and for an operator's resolve command naming
    one of `choices` (`busguard escalations resolve ID --as <choice>`). Each
    settlement becomes a final resolution sealed and audited like busguard's
    own, `by: policy` or `by: operator:<name>`."""

    @property
    def choices(self) -> tuple[str, ...]:
        """The operator resolutions the kind offers besides busguard's own
        (`retransmission`, `replay`, `reject`, which change no state); its
        automatic settlements are among them too."""
        ...

    def keys(self, escalation: Any) -> Iterable[PolicyKey]:
        """The rows `settle` reads (`escalation`: the sealed `Decision`)."""
        ...

    def settle(self, escalation: Any, choice: str | None, view: PolicyView) -> Settlement | None: ...


class PolicyInput(NamedTuple):
    """A verified record as its kind's policy parses it: what admission
    already derived from the envelope is passed, not recomputed."""

    envelope: Envelope
    #: the canonical principal of `receipt.sender` (docs/protocol.md 5.2)
    principal: str
    #: (kind, task_id): the task index's key for the record
    task_key: tuple[str, str]


class Policy(Protocol[P]):
    def parse(self, record: PolicyInput, context: PolicyContext) -> P | Objection: ...

    def keys(self, parsed: P) -> Iterable[PolicyKey]: ...

    def decide(self, parsed: P, view: PolicyView, now_ms: int) -> PolicyOutcome: ...


AnyPolicy = Policy[Any]


class KeySource(Protocol):
    """The key registry as admission holds it for this batch (busguard.protocol.registry.KeyRegistry)."""

    def lookup(self, principal: str, key_id: str | None, now_ms: int) -> KeyLookup: ...


class PolicyContext(NamedTuple):
    """What every policy parses with: the batch's key registry (for
    signatures inside a payload, judged at `now_ms`, the receiver's clock) and
    the deployment's per-policy settings (`AdmissionPolicy.policy_settings`,
    from the config). Immutable for the batch, so parsing stays pure."""

    keys: KeySource
    now_ms: int
    settings: Mapping[str, object]


S = TypeVar("S")


def settings_of(context: PolicyContext, cls: type[S], section: str) -> S:
    """The kind's settings Struct (`KindSpec.settings`) as the config gives
    it under `[section]`, or its defaults (a test's bare context, a config
    without the table): typed, for `parse` to put what `decide` needs into
    what it returns."""
    found = context.settings.get(section)
    return found if isinstance(found, cls) else cls()


def policy_key(namespace: str, *parts: str) -> PolicyKey:
    """The row key for a value named by one or more parts: the parts as a
    compact JSON array of strings (`["session","ink:z…","s-1"]`, msgspec's
    encoding, no spaces), so no choice of part text makes two different
    tuples one key, as a separator could. docs/design.md, "The policy seam"."""
    return (namespace, msgspec.json.encode(parts).decode())


def policy_input(envelope: Envelope) -> PolicyInput:
    """The `PolicyInput` admission passes for `envelope`, derived afresh: for
    a policy's own tests and benchmarks, which call `parse` directly."""
    r = envelope.receipt
    return PolicyInput(envelope, canonical_principal(r.sender), (r.kind, r.task_id))


def bare_context(now_ms: int) -> PolicyContext:
    """A context with no keys and no settings (each policy's defaults), for a
    policy's own tests and benchmarks that call `parse` directly."""
    return PolicyContext(KeyRegistry({}), now_ms, {})
