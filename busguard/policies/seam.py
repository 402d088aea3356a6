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
from typing import Any, NamedTuple, Protocol, TypeVar

import msgspec

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
    outcome: Outcome
    #: one of busguard's `Reason`s, or one the kind declares (`KindSpec.reasons`)
    reason: str
    detail: str


class PolicyWrite(msgspec.Struct, frozen=True, gc=False):
    """A row the policy asks to persist: it expires `ttl_ms` after the decision."""

    key: PolicyKey
    value: bytes
    ttl_ms: int


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
