"""The records reconciliation reads and writes.

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

import hashlib
from typing import Final, Literal

import msgspec

from busguard.admission.types import Coordinates, Decision, TaskEntry
from busguard.protocol.envelope import b64url_decode_strict
from busguard.protocol.signing import verify_signature

RESOLUTION_ID_CONTEXT: Final = b"busguard/resolution/v1\x00"
COMMAND_CONTEXT: Final = b"busguard/command/v1\x00"
HEADER_COMMAND: Final = "busguard-command"
#: On a command signed with an operator's key: that key, as a multikey.
#: Absent: the command is signed with the deployment key.
HEADER_SIGNER: Final = "busguard-signer"

ResolvedAs = Literal["retransmission", "replay", "reject"]
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
audit_decoder: Final = msgspec.json.Decoder(AuditRecord)


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
