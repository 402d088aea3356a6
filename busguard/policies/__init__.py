"""The seam where kind-specific policies plug in (DESIGN principle 7).

Every record kind busguard accepts is registered here. After a record's
signature verifies and before the replay/task-index machinery records
anything, its kind's interceptors run in order; the first that objects turns
the record into a reject or an escalation. Adding a policy (contract-net
awards, taint replays, compromised-session handoffs) is one new module plus
one line in `KINDS`.

Interceptors are pure: (verified record) -> objection or None.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import msgspec

from busguard.protocol.envelope import Envelope
from busguard.protocol.reasons import Outcome, Reason


class Objection(msgspec.Struct, frozen=True):
    outcome: Outcome
    reason: Reason
    detail: str


Interceptor = Callable[[Envelope], Objection | None]

KINDS: Final[dict[str, tuple[Interceptor, ...]]] = {
    "handoff": (),
    "ack": (),
}


def is_known_kind(kind: str) -> bool:
    return kind in KINDS


def run_policies(envelope: Envelope) -> Objection | None:
    for interceptor in KINDS[envelope.receipt.kind]:
        objection = interceptor(envelope)
        if objection is not None:
            return objection
    return None
