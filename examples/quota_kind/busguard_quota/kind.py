"""The `quota` kind: at most `max_per_task` records per sender and task.

A sender may send several records under one task id (the parts of a
stream, say); busguard admits the first `max_per_task` of them and
dead-letters the rest as `quota_exceeded`. It shows the whole extension
seam: the kind turns busguard's task index off (it owns its tasks), reads
its settings from the config's `[quota]` table, keeps one counter row per
(sender, task) and gives a reason code of its own.

What busguard still does for it: signatures, freshness, nonces (an exact
copy of an admitted record is `nonce_replay`), session windows, the audit
record of every decision and the byte-identical re-emission after a crash.

Bounds: one row per (sender, task) with a sender's records inside one
`window_ms`, at most 20 bytes each; a row lives `window_ms` after the last
record it admitted.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Final, NamedTuple

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
    policy_key,
    settings_of,
)
from busguard.protocol.reasons import Outcome

KIND: Final = "quota"
QUOTA_EXCEEDED: Final = "quota_exceeded"
DAY_MS: Final = 86_400_000


class QuotaSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The `[quota]` table of busguard's config."""

    #: records admitted per (sender, task); the next is `quota_exceeded`
    max_per_task: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 3
    #: how long a task's count is kept after its last admitted record
    window_ms: Annotated[int, msgspec.Meta(ge=1_000, le=30 * DAY_MS)] = 3_600_000


class Counter(NamedTuple):
    row: PolicyKey
    settings: QuotaSettings


class QuotaPolicy:
    """Pure: the count is the row, the limit comes through the context."""

    def parse(self, record: PolicyInput, context: PolicyContext) -> Counter:
        settings = settings_of(context, QuotaSettings, KIND)  # [quota], or its defaults
        return Counter(policy_key(KIND, record.principal, record.task_key[1]), settings)

    def keys(self, parsed: Counter) -> Iterable[PolicyKey]:
        return (parsed.row,)

    def decide(self, parsed: Counter, view: PolicyView, now_ms: int) -> PolicyOutcome:
        held = view.get(parsed.row)
        used = int(held) if held is not None else 0
        limit = parsed.settings.max_per_task
        if used >= limit:
            return PolicyOutcome(
                objection=Objection(
                    Outcome.REJECT, QUOTA_EXCEEDED, f"{used} records of this task admitted; at most {limit} (quota.max_per_task)"
                )
            )
        write = PolicyWrite(parsed.row, str(used + 1).encode(), ttl_ms=parsed.settings.window_ms)
        return PolicyOutcome(writes=(write,), annotations={"quota.used": str(used + 1)})


SPEC: Final = KindSpec(
    kind=KIND,
    policy=QuotaPolicy(),
    reasons=(QUOTA_EXCEEDED,),
    task_index=False,  # the kind owns its tasks: several records of one task reach its policy
    witness="several",  # what `busguard audit` checks and prints: several admitted per task allowed
    settings=QuotaSettings,
)
