"""A test-only kind with a stateful policy: the seam's smallest real user.

`probe` records carry {"slot": str, "claim": str}. The first claim of a slot
is admitted and remembered (a policy row); the same claim again is admitted
and annotated; a different claim of a claimed slot escalates and sends a
notice to the kind's `probe-notices` route. Admitted records are forwarded
as their canonical re-encoding (a replacement value).

Registering it is one line: `monkeypatch.setitem(KINDS, PROBE.kind, PROBE)`.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from busguard.policies import KindSpec
from busguard.policies.seam import Objection, PolicyContext, PolicyInput, PolicyOutcome, PolicyView, PolicyWrite
from busguard.protocol.reasons import Outcome, Reason
from busguard.protocol.records import Notice
from busguard.state.keys import PolicyKey


class Claim(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    slot: str
    claim: str


_decode = msgspec.json.Decoder(Claim).decode


class ProbePolicy:
    def parse(self, record: PolicyInput, context: PolicyContext) -> Claim | Objection:
        try:
            return _decode(record.envelope.payload)
        except msgspec.DecodeError as exc:
            return Objection(Outcome.REJECT, Reason.MALFORMED_FIELD, f"probe payload: {exc}")

    def keys(self, parsed: Claim) -> Iterable[PolicyKey]:
        return [("probe", parsed.slot)]

    def decide(self, parsed: Claim, view: PolicyView, now_ms: int) -> PolicyOutcome:
        held = view.get(("probe", parsed.slot))
        annotations = {"slot": parsed.slot}
        if held is None:
            write = PolicyWrite(("probe", parsed.slot), parsed.claim.encode(), ttl_ms=60_000)
            return PolicyOutcome(writes=(write,), annotations=annotations, replacement=msgspec.json.encode(parsed))
        if held == parsed.claim.encode():
            return PolicyOutcome(annotations={**annotations, "again": "yes"}, replacement=msgspec.json.encode(parsed))
        notice = Notice(route="probe-notices", key=parsed.slot.encode(), value=b"contested by " + parsed.claim.encode())
        objection = Objection(Outcome.ESCALATE, Reason.TASK_CONFLICT, f"slot {parsed.slot!r} is held by {held.decode()!r}")
        return PolicyOutcome(objection=objection, annotations=annotations, notices=(notice,))


PROBE = KindSpec(
    kind="probe",
    policy=ProbePolicy(),
    reasons=(Reason.MALFORMED_FIELD, Reason.TASK_CONFLICT),
    routes=("probe-notices",),
)
