"""The `config.update` kind: a per-key high-water version, across senders from an allow-list.

A record sets configuration key `key` to `value` at `version`. Per key,
busguard keeps the highest version admitted (whoever sent it) and decides:

| the record | decision | reason |
| --- | --- | --- |
| sender not in `senders`, or key not in `keys` | reject, before any state is read (its nonce is not spent) | `sender_not_allowed`, `key_not_allowed` |
| payload not a config update | reject | `bad_config_update` |
| a version above the key's high-water mark (or the key's first) | forward | `admitted` |
| the same version and value as the mark (a re-send, re-signed or the same bytes) | duplicate, naming the admission on its dead letter | `same_config_version` |
| the same version, another value | escalate, settled by the kind's reconciliation | `config_version_conflict` |
| a lower version | reject | `stale_config_version` |

The mark is a permanent row (`ttl_ms=None`): it never resets while the key
is in use. Its bound: one row per key of `keys`, at most 256 of them, each
a value under 128 bytes; whatever the senders send.

A conflict is settled by the kind's own reconciliation hook: automatically
as `keep_admitted` (the admitted value stays; `auto_settle = "keep_admitted"`,
the default), or held for an operator (`auto_settle = "hold"`) who chooses
`keep_admitted` or `admit_value` (`busguard escalations resolve ID --as
admit_value`): the mark then names the escalated value at that version, and
its sender's next send of it (signed afresh) is admitted and forwarded, while
the value first admitted at that version becomes a conflict in turn.

Witness rule (`busguard audit`): one admission per (key, version, value).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Annotated, Final, Literal

import msgspec

from busguard.policies import KindSpec
from busguard.policies.seam import (
    Objection,
    PolicyContext,
    PolicyInput,
    PolicyKey,
    PolicyOutcome,
    PolicyView,
    PolicyWrite,
    SettingError,
    Settlement,
    duplicate_of,
    policy_key,
    settings_of,
)
from busguard.protocol.envelope import Envelope
from busguard.protocol.identity import canonical_principal
from busguard.protocol.reasons import Outcome
from busguard.protocol.records import Decision

KIND: Final = "config.update"
SENDER_NOT_ALLOWED: Final = "sender_not_allowed"
KEY_NOT_ALLOWED: Final = "key_not_allowed"
BAD_UPDATE: Final = "bad_config_update"
SAME_VERSION: Final = "same_config_version"
CONFLICT: Final = "config_version_conflict"
STALE: Final = "stale_config_version"
KEEP: Final = "keep_admitted"
ADMIT: Final = "admit_value"
MAX_KEYS: Final = 256
#: the annotations every admission carries; together, its witness key
ANNOTATIONS: Final = ("config.key", "config.version", "config.value_sha256")


class ConfigUpdateSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The `[config.update]` table of busguard's config."""

    #: agent ids that may send updates (any spelling of one key is that agent)
    senders: list[str] = []
    #: the configuration keys that may be updated: the bound on the kind's permanent rows
    keys: list[Annotated[str, msgspec.Meta(min_length=1, max_length=64)]] = []
    #: how a version conflict is settled: "keep_admitted" at once, or "hold" for an operator
    auto_settle: Literal["keep_admitted", "hold"] = "keep_admitted"

    def __post_init__(self) -> None:
        for i, who in enumerate(self.senders):
            try:
                canonical_principal(who)
            except ValueError as exc:
                raise SettingError(f"senders[{i}]", who, f"an agent id (docs/protocol.md 5.2): {exc}") from None
        if len(self.keys) > MAX_KEYS:
            raise SettingError("keys", len(self.keys), f"at most {MAX_KEYS} keys (each is a permanent row)")
        if len(set(self.keys)) != len(self.keys):
            raise SettingError("keys", sorted(k for k in self.keys if self.keys.count(k) > 1)[0], "each key once")


class Update(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The payload: `{"key": "db.pool", "version": 7, "value": <any JSON>}`."""

    key: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    version: Annotated[int, msgspec.Meta(ge=0, le=2**53)]
    value: msgspec.Raw


class Mark(msgspec.Struct, frozen=True, array_like=True):
    """A key's row: its high-water version, the SHA-256 of the value admitted
    at it, and that admission's decision id ("" once an operator admitted a
    value whose record has not been forwarded yet)."""

    version: int
    value_sha256: str
    decision: str


class Parsed(msgspec.Struct, frozen=True):
    key: str
    version: int
    value_sha256: str
    row: PolicyKey
    #: `[config.update] auto_settle` when parsed: a conflict records it, so
    #: the reconciler settles it as the guard's config said (and the audit shows it)
    auto_settle: str


def _update(envelope: Envelope) -> Update | None:
    try:
        return msgspec.json.decode(envelope.payload, type=Update)
    except msgspec.MsgspecError:
        return None


def allowed(envelope: Envelope, settings: ConfigUpdateSettings) -> Objection | None:
    """Stateless, so before the nonce is spent: the allow-lists."""
    principal = canonical_principal(envelope.receipt.sender)
    if principal not in {canonical_principal(s) for s in settings.senders}:
        return Objection(Outcome.REJECT, SENDER_NOT_ALLOWED, f"{principal[:80]} is not in config.update.senders")
    u = _update(envelope)
    if u is not None and u.key not in settings.keys:
        return Objection(Outcome.REJECT, KEY_NOT_ALLOWED, f"key {u.key!r} is not in config.update.keys")
    return None


def row_of(key: str) -> PolicyKey:
    return policy_key(KIND, key)


def _mark(raw: bytes | None) -> Mark | None:
    return None if raw is None else msgspec.msgpack.decode(raw, type=Mark)


def _annotations(p: Parsed | Decision) -> dict[str, str]:
    if isinstance(p, Parsed):
        return dict(zip(ANNOTATIONS, (p.key, str(p.version), p.value_sha256), strict=True))
    return dict(p.annotations or {})


class ConfigUpdatePolicy:
    def parse(self, record: PolicyInput, context: PolicyContext) -> Parsed | Objection:
        u = _update(record.envelope)
        if u is None:
            return Objection(Outcome.REJECT, BAD_UPDATE, 'payload is not {"key": str, "version": int >= 0, "value": JSON}')
        auto = settings_of(context, ConfigUpdateSettings, KIND).auto_settle
        return Parsed(u.key, u.version, hashlib.sha256(bytes(u.value)).hexdigest(), row_of(u.key), auto)

    def keys(self, parsed: Parsed) -> Iterable[PolicyKey]:
        return (parsed.row,)

    def decide(self, parsed: Parsed, view: PolicyView, now_ms: int) -> PolicyOutcome:
        mark = _mark(view.get(parsed.row))
        notes = _annotations(parsed)  # on every decision of the kind, so `busguard decisions --key` finds them all
        if (
            mark is None
            or parsed.version > mark.version
            or (parsed.version == mark.version and not mark.decision and parsed.value_sha256 == mark.value_sha256)
        ):
            row = PolicyWrite(parsed.row, msgspec.msgpack.encode(Mark(parsed.version, parsed.value_sha256, view.decision_id)), ttl_ms=None)
            return PolicyOutcome(writes=(row,), annotations=notes)
        if parsed.version < mark.version:
            return PolicyOutcome(
                objection=Objection(Outcome.REJECT, STALE, f"version {parsed.version} < {mark.version}, the key's high-water mark"),
                annotations=notes,
            )
        if parsed.value_sha256 == mark.value_sha256:
            return PolicyOutcome(
                objection=duplicate_of(mark.decision, SAME_VERSION, f"version {parsed.version} with this value already admitted"),
                annotations=notes,
            )
        detail = f"version {parsed.version} was admitted with another value (SHA-256 {mark.value_sha256[:16]}…)"
        return PolicyOutcome(
            objection=Objection(Outcome.ESCALATE, CONFLICT, detail), annotations={**notes, "config.auto_settle": parsed.auto_settle}
        )


class ConfigUpdateReconciliation:
    """Settles `config_version_conflict` escalations (seam.Reconciliation)."""

    choices = (KEEP, ADMIT)

    def keys(self, escalation: Decision) -> Iterable[PolicyKey]:
        key = _annotations(escalation).get("config.key")
        return (row_of(key),) if key is not None else ()

    def settle(self, escalation: Decision, choice: str | None, view: PolicyView) -> Settlement | None:
        notes = _annotations(escalation)
        if escalation.reason != CONFLICT or not all(n in notes for n in ANNOTATIONS):
            return None
        if choice is None:
            # automatic, as `auto_settle` was when the guard escalated it (recorded in the escalation)
            if notes.get("config.auto_settle") != KEEP:
                return None  # held for an operator
            return Settlement(resolved_as=KEEP, note="the value admitted first at this version stays (auto_settle)")
        if choice == KEEP:
            return Settlement(resolved_as=KEEP, note="")
        mark = _mark(view.get(row_of(notes["config.key"])))
        version = int(notes["config.version"])
        if mark is None or mark.version != version:
            return None  # the key moved past this version: admitting an old value would lower it
        row = PolicyWrite(row_of(notes["config.key"]), msgspec.msgpack.encode(Mark(version, notes["config.value_sha256"], "")), ttl_ms=None)
        return Settlement(resolved_as=ADMIT, writes=(row,))


SPEC: Final = KindSpec(
    kind=KIND,
    interceptors=(allowed,),
    policy=ConfigUpdatePolicy(),
    reasons=(SENDER_NOT_ALLOWED, KEY_NOT_ALLOWED, BAD_UPDATE, SAME_VERSION, CONFLICT, STALE),
    task_index=False,
    witness="key",
    witness_key=ANNOTATIONS,
    settings=ConfigUpdateSettings,
    reconciliation=ConfigUpdateReconciliation(),
)
