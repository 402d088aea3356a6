"""The wire schemas of busguard's own records, and their identities.

What busguard writes and reads back on its topics: the guard's `Decision`
(with the `TaskEntry` it may carry as `prior` and the `Coordinates` of its
input), the reconciler's `Resolution`, `Reply` and the operator's
`ResolveCommand`, and the audit topic's union of the two. They live in the
protocol layer, not in the modules that produce them, so the SDK, the
auditor and any other reader depend on `busguard.protocol` alone
(docs/design.md, "Layers").

Everything here is a frozen msgspec Struct so it can be persisted, put on the
audit topic and compared byte for byte after a crash without custom code.
The per-record ones are `gc=False`: frozen and holding only immutable values,
they cannot form a reference cycle, so the cyclic collector has no reason to
walk the thousands of them a batch keeps alive.
`bytes` fields encode as standard base64 in JSON (msgspec's convention).

Audit topic values are a tagged union on `"type"`: a guard `Decision`
(`"decision"`) or a `Resolution` (`"resolution"`). Both are sealed the same
way (busguard.protocol.attestation), decisions with the guard's key and
resolutions with the reconciler's own (`keys.reconciler_key`), so the
auditor can tell who wrote which. A resolution made by an operator carries
the operator's signed command, byte for byte, so the auditor can check
from the log and the operators file that the named operator's key signed
exactly that command: the reconciler's key cannot put words in an
operator's mouth.

Escalations are resolved at most once. A resolution id is a pure function of
the escalation id and the resolution's stage (`held` or `final`), so a worker
that crashes and re-processes an escalation re-emits the same id, byte for
byte; two different ids for one escalation in the log are a violation the
auditor reports.
"""

from __future__ import annotations

import functools
import hashlib
import struct
from collections.abc import Sequence
from typing import Annotated, Final, Literal

import msgspec
from msgspec import UNSET, UnsetType

from busguard.protocol.envelope import b64url_decode_strict
from busguard.protocol.signing import verify_signature

DECISION_ID_CONTEXT: Final = b"busguard/decision/v1\x00"
RECORD_CONTEXT: Final = b"busguard/record/v1\x00"


class Coordinates(msgspec.Struct, frozen=True, kw_only=True):
    """Where a record was read from; the identity of an input record."""

    topic: str
    partition: int
    offset: int


@functools.lru_cache(maxsize=4096)
def _partition_prefix(namespace: str, topic: str, partition: int) -> str:
    return hashlib.sha256(DECISION_ID_CONTEXT + f"{namespace}\x00{topic}\x00{partition}".encode()).hexdigest()[:16]


def decision_id(namespace: str, source: Coordinates) -> str:
    """Deterministic in the input position alone, so re-processing after a crash
    re-derives the same id and downstream consumers can dedupe on it.

    First 16 hex of SHA-256(context || namespace NUL topic NUL partition),
    then the offset as 16 hex digits: one hash per partition, not per record.
    """
    return _partition_prefix(namespace, source.topic, source.partition) + source.offset.to_bytes(8).hex()


def _field(data: bytes | None) -> bytes:
    return b"\x00" if data is None else b"\x01" + len(data).to_bytes(4) + data


def headers_encoding(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    """An unambiguous encoding of a record's headers, in order: u32 count,
    then per header u32 name length, UTF-8 name, and its value as a field
    (0x00 for null, else 0x01, u32 length, bytes). Lengths are big-endian."""
    parts = [len(headers).to_bytes(4)]
    for name, value in headers:
        raw = name.encode()
        parts += (len(raw).to_bytes(4), raw, _field(value))
    return b"".join(parts)


_RECORD_HASH: Final = hashlib.sha256(RECORD_CONTEXT)
_flag_len: Final = struct.Struct(">BI").pack
_u32: Final = struct.Struct(">I").pack


def record_sha256(key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]]) -> str:
    """The identity of an input record's bytes (key, value and headers), for
    telling the record a decision was made for from another one later found
    at the same position: the receipt alone does not cover the headers, and
    the value only through a hash the guard may never have reached.

    SHA-256 of RECORD_CONTEXT, F(key), F(value) and `headers_encoding`.
    Spelled out (one join, one update) because it runs per record."""
    h = _RECORD_HASH.copy()
    parts = [
        b"\x00" if key is None else _flag_len(1, len(key)),
        key or b"",
        b"\x00" if value is None else _flag_len(1, len(value)),
        value or b"",
    ]
    parts.append(_u32(len(headers)))
    for name, v in headers:
        raw = name.encode()
        parts += (_u32(len(raw)), raw, b"\x00" if v is None else _flag_len(1, len(v)), v or b"")
    h.update(b"".join(parts))
    return h.hexdigest()


class TaskEntry(msgspec.Struct, frozen=True, gc=False):
    """The first admitted receipt for a (kind, task_id): the task's witness.

    Not kw_only, like `Decision`: msgspec builds a struct from positional
    arguments about seven times faster than from keywords, and these are
    built for every admitted record. Keyword construction still works."""

    kind: str
    task_id: str
    receipt_id: str
    decision_id: str
    principal: str
    nonce: str
    payload_hash: str
    session_id: str | None
    sequence: int | None
    source: Coordinates
    receipt: bytes
    signature: bytes
    admitted_at: int


class Notice(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """An extra record a kind's policy emits with a decision (busguard.policies.
    seam): to the topic of one of the kind's routes (`KindSpec.routes`).

    `value_sha256` and `value_length`, set by admission (`carried_by_hash`),
    make the decision record carry the value by hash (docs/protocol.md 12.5):
    the persisted decision keeps `value`, which the notice record is
    produced with; the record on the audit topic has the hash in its place.
    A notice without them (a decision stored before they existed) is
    carried by value, as it first was. The three are UNSET, never None,
    when absent: UNSET fields are left out of the encoding, so a notice
    without them encodes exactly as before they existed (`key` still
    encodes as null)."""

    route: str
    key: bytes | None = None
    value: bytes | UnsetType = UNSET
    value_sha256: str | UnsetType = UNSET
    value_length: int | UnsetType = UNSET

    @property
    def data(self) -> bytes:
        """The notice record's value (a persisted notice always has it)."""
        return self.value if isinstance(self.value, bytes) else b""


class Decision(msgspec.Struct, frozen=True, gc=False, omit_defaults=True, tag_field="type", tag="decision"):
    """One per input record. Everything reconciliation and audit need is here,
    so neither has to consult busguard's private state. Tagged (`"type":
    "decision"`) because the audit topic also carries resolutions. Built
    positionally on the hot path (decide._decision): keep the field order.
    `record_sha256` (set by admit_batch) names the exact input record, so a
    decided position re-emits its decision only for that record; None in
    decisions stored before it existed. `annotations`, `replacement` (the value
    forwarded instead of the input's) and `notices` are a kind policy's
    outcome (busguard.policies.seam), absent for kinds without one.
    `last_offset` makes it a span decision: one `undecodable_batch` decision
    for every input offset from `source.offset` to it, inclusive
    (docs/protocol.md 2.1); absent on a decision for one offset, so records
    written before spans existed are unchanged.
    `surfaced` names, in order, the annotations its forward carries as
    `busguard-annotation-<name>` headers, which the attestation then binds
    (`annotations_sha256`, docs/protocol.md 12.1): set by admission on every
    forward of a kind that surfaces annotations (empty when the decision has
    none of them: the forward then carries none, and that is bound too).
    Absent on every other decision and on those stored before it existed,
    so those re-emit byte for byte as they first did.
    `replacement_sha256` and `replacement_length` (set by admission with
    `replacement`, `carried_by_hash`) make the decision record carry the
    replacement by hash (`carried`, docs/protocol.md 12.5); the persisted
    decision keeps the bytes, which its forward is re-emitted with."""

    decision_id: str
    outcome: str
    reason: str
    source: Coordinates
    decided_at: int
    detail: str = ""
    receipt_id: str | None = None
    kind: str | None = None
    task_id: str | None = None
    sender: str | None = None
    principal: str | None = None
    receiver: str | None = None
    nonce: str | None = None
    session_id: str | None = None
    sequence: int | None = None
    payload_hash: str | None = None
    issued_at: str | None = None
    key_id: str | None = None
    public_key: bytes | None = None
    receipt: bytes | None = None
    signature: bytes | None = None
    supersedes: str | None = None
    prior: TaskEntry | None = None
    record_sha256: str | None = None
    annotations: dict[str, str] | None = None
    replacement: bytes | None = None
    notices: tuple[Notice, ...] | None = None
    last_offset: int | None = None
    surfaced: tuple[str, ...] | None = None
    replacement_sha256: str | None = None
    replacement_length: int | None = None
    #: a kind policy's duplicate (seam.duplicate_of): the decision id of the
    #: admission it repeats; the core's duplicates name theirs in `prior`
    prior_decision_id: str | None = None

    @property
    def prior_admission(self) -> str | None:
        """The decision id of the admission this decision repeats or
        conflicts with: `prior`'s (the task's witness) or a policy's
        duplicate's `prior_decision_id`; None for every other decision."""
        return self.prior.decision_id if self.prior is not None else self.prior_decision_id

    @property
    def covers_to(self) -> int:
        """The last input offset this decision covers."""
        return self.source.offset if self.last_offset is None else self.last_offset


def carried_by_hash(replacement: bytes | None, notices: Sequence[Notice] | None) -> dict[str, object]:
    """The fields a decision gets for a kind policy's replacement and notices:
    each with its length and SHA-256 beside it, so its record carries them
    by hash (`carried`). Admission's only way to put bytes of a policy's
    making into a decision."""
    if replacement is None:
        fields: dict[str, object] = {"replacement": None, "replacement_sha256": None, "replacement_length": None}
    else:
        fields = {
            "replacement": replacement,
            "replacement_sha256": hashlib.sha256(replacement).hexdigest(),
            "replacement_length": len(replacement),
        }
    fields["notices"] = tuple(_notice_by_hash(n) for n in notices) if notices else None
    return fields


def _notice_by_hash(n: Notice) -> Notice:
    return msgspec.structs.replace(n, value_sha256=hashlib.sha256(n.data).hexdigest(), value_length=len(n.data))


def carried(d: Decision) -> Decision:
    """The decision as its record carries it (the audit topic's value,
    docs/protocol.md 12.5): without the bytes it names by hash (a
    `replacement` beside its `replacement_sha256`, a notice's `value`
    beside its `value_sha256`), so a decision record is bounded by the
    receipt, never by a value a policy derived from the input. A decision
    stored before those fields existed is carried as it first was."""
    if d.replacement is None and d.notices is None:
        return d  # every decision of a kind without a policy outcome
    notices = d.notices
    if notices is not None and any(isinstance(n.value_sha256, str) for n in notices):
        notices = tuple(msgspec.structs.replace(n, value=UNSET) if isinstance(n.value_sha256, str) else n for n in notices)
    replacement = None if d.replacement_sha256 is not None else d.replacement
    if replacement is d.replacement and notices is d.notices:
        return d
    return msgspec.structs.replace(d, replacement=replacement, notices=notices)


def replacement_sha256(d: Decision) -> str | None:
    """The SHA-256 of the value d's forward carries instead of the input's,
    from whichever form d holds (by value or by hash); None without one."""
    if d.replacement_sha256 is not None:
        return d.replacement_sha256
    return None if d.replacement is None else hashlib.sha256(d.replacement).hexdigest()


def carried_mismatch(d: Decision, forwarded_sha256: str | None) -> str | None:
    """What is wrong with how a decision record carries its replacement, for
    the auditor (docs/protocol.md 12.5), or None: whichever form it has (by
    value, or by `replacement_sha256`) names the value its attestation's
    `forwarded_sha256` binds, which is what every forward of it is checked
    against; and a record with both forms has them agree. A replacement by
    value under an attestation without `forwarded_sha256` was sealed before
    that field existed and proves nothing either way."""
    if d.replacement is not None and d.replacement_sha256 is not None:
        if hashlib.sha256(d.replacement).hexdigest() != d.replacement_sha256:
            return "the decision's replacement is not the one its replacement_sha256 names"
    if d.replacement_sha256 is not None and (d.replacement_length is None or d.replacement_length < 0):
        return "a decision with replacement_sha256 needs a replacement_length (a non-negative integer)"
    named = replacement_sha256(d)
    if named != forwarded_sha256 and not (d.replacement_sha256 is None and forwarded_sha256 is None):
        # (by value without forwarded_sha256: a decision sealed before forwards were, let through)
        return f"the decision names the replacement {named}, its attestation's forwarded_sha256 is {forwarded_sha256}"
    return None


RESOLUTION_ID_CONTEXT: Final = b"busguard/resolution/v1\x00"
COMMAND_CONTEXT: Final = b"busguard/command/v1\x00"
HEADER_COMMAND: Final = "busguard-command"
#: On a command signed with an operator's key: that key, as a multikey.
#: Absent: the command is signed with the deployment key.
HEADER_SIGNER: Final = "busguard-signer"

#: busguard's own `retransmission`, `replay`, `reject`, or a choice an
#: escalation's kind offers (KindSpec.reconciliation), which the reconciler
#: checks against the escalation it resolves.
ResolvedAs = Annotated[str, msgspec.Meta(pattern="^[a-z][a-z0-9_]{0,63}$")]
Stage = Literal["held", "final"]


def resolution_id(escalation_id: str, stage: Stage) -> str:
    return hashlib.sha256(RESOLUTION_ID_CONTEXT + f"{escalation_id}\x00{stage}".encode()).hexdigest()[:32]


class SignedCommand(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """An operator's resolve command exactly as the reconciler read it:
    `body` is the record value (standard base64 in JSON), `seal` the
    `busguard-seal` header's text, `signer` the `busguard-signer` header's
    multikey (None: the command was signed with the guard key, which proves
    no operator's name)."""

    body: bytes
    seal: str
    signer: str | None = None


def command_seal_ok(body: bytes, seal: str | bytes, public_key: bytes) -> bool:
    """Whether `seal` is `public_key`'s signature over a resolve command's bytes."""
    try:
        signature = b64url_decode_strict(seal, 64)
    except ValueError:
        return False
    return verify_signature(public_key, COMMAND_CONTEXT + body, signature)


class Resolution(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type", tag="resolution"):
    """How an escalation was settled (stage `final`), or that it is held for
    an operator (stage `held`). `by` is `policy` or `operator:<name>`; an
    operator's final resolution carries the signed `command` it applied."""

    resolution_id: str
    escalation_id: str
    stage: Stage
    resolved_as: ResolvedAs | None = None
    by: str
    note: str = ""
    kind: str | None = None
    task_id: str | None = None
    receipt_id: str | None = None
    supersedes: str | None = None
    prior_decision_id: str | None = None
    source: Coordinates
    resolved_at: int
    command: SignedCommand | None = None


AuditRecord = Decision | Resolution


class _AuditDecoder:
    """msgspec's decoder of audit records, except that a value nested deeper
    than msgspec can follow (a 6 KB `{"a":{"a":…}}` 1000 levels deep) is a
    `msgspec.DecodeError` like any other bad value, not a `RecursionError`:
    anyone may write the audit topic, and every reader of it (`busguard
    audit`, `escalations show`, `escalations resolve`) refuses what it
    cannot decode by catching `msgspec.MsgspecError`."""

    __slots__ = ()
    _inner: Final = msgspec.json.Decoder(AuditRecord)

    def decode(self, data: bytes) -> AuditRecord:
        try:
            return self._inner.decode(data)
        except RecursionError:
            raise msgspec.DecodeError("JSON nested too deeply to decode") from None


audit_decoder: Final = _AuditDecoder()


class ResolveCommand(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What `busguard escalations resolve` sends to the reconciliation topic
    (keyed by task id, so it follows its escalation in the same partition).
    Sealed with the deployment's key or an operator's (busguard.reconcile.
    operators); an unsealed command is dead-lettered."""

    v: int = 1
    escalation_id: str
    resolve_as: ResolvedAs
    operator: str
    note: str = ""
    issued_at: int


class Reply(msgspec.Struct, frozen=True, kw_only=True):
    """Re-emitted to the sender on the replies topic when a retransmission is
    resolved: the first admission of its task, which is its acknowledgment."""

    resolution_id: str
    escalation_id: str
    to: str
    task_id: str
    admission: TaskEntry
