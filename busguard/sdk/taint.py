"""For a containment agent: the typed view of busguard's replay plan.

Why: a containment agent asks busguard for a replay plan by signing a
`taint-replay` request (docs/taint.md, "Replay requests on the stream");
busguard forwards a valid plan in place of the request, as
`busguard.taint-replay-plan.v1` (docs/protocol.md 13). Every agent used to
decode that JSON itself and had to remember the one check that ties the plan
to the request it signed (`request_sha256` = the receipt's `payload_hash`).
`read_plan` is the kind's reader for `AdmittingConsumer` (`READERS`): the
consumer has already checked the guard's attestation over the replaced value
(`forwarded_sha256`; the decision record on the audit topic carries the same
SHA-256 as `replacement_sha256`, not the plan: docs/protocol.md 12.5, so the
forward is the one place the plan is read from); the reader checks the plan belongs to the signed
request and that the `taint.unit` annotation says what the plan says, and
hands back a `PlanView` whose `units` are what to replay, in order.

    >>> from busguard.demo.taint import INCIDENT_LEDGER, INCIDENT_TRACE
    >>> from busguard.policies.taint.replay import encode_request
    >>> from busguard.sdk.consumer import AdmittingConsumer, Fetched
    >>> from busguard.testing import GUARD_PUBLIC_KEY, Harness, agent, sender
    >>> me = agent("executor")
    >>> ask = sender("planner").sign(kind=KIND, task_id="incident-1", receiver=me,
    ...                              payload=encode_request(INCIDENT_TRACE, INCIDENT_LEDGER))
    >>> value, headers = Harness().forward(ask)
    >>> inbox = AdmittingConsumer(None, guard_public_key=GUARD_PUBLIC_KEY, agent_id=me, readers=READERS)
    >>> (d,) = inbox.admit([Fetched("agents.plans", 0, 0, value, headers)]).deliveries
    >>> d.view.unit, d.view.action, d.view.request_sha256 == ask.receipt.payload_hash
    ('token', 'contain', True)
    >>> [(u.key, u.nodes, u.sinks) for u in d.view.units]  # doctest: +NORMALIZE_WHITESPACE
    [('span:read_secret', ('read_secret',), ()), ('span:summarize', ('summarize',), ()),
     ('token:tok-post-7', ('post_message',), ('chat:#ops', 'webhook:partner-archive'))]

What it refuses (ValueError, so the consumer reports the record as
`unreadable` and the agent never acts on it): a value that is not a
`busguard.taint-replay-plan.v1` forward with a valid plan; a
`request_sha256` that is not the SHA-256 of the embedded request or not the
receipt's `payload_hash` (a plan for another request); a `taint.unit`
annotation that is missing or differs from the plan's `unit` (the
consumer has checked the header against the attestation's
`annotations_sha256`, and the value decides in any case).

Bounds: the plan is what the guard built from a request of at most
`MAX_NODES` nodes (busguard/policies/taint/replay.py), so a view holds at
most that many units; decoding is linear in the forward's bytes, which are at
most the broker's `max.message.bytes`.
"""

from __future__ import annotations

import hashlib
from typing import Final, Literal

import msgspec

from busguard.policies.taint.plan import ReplayPlan
from busguard.policies.taint.replay import FORWARD_FORMAT, KIND, Forward
from busguard.sdk.consumer import Delivery, Reader

__all__ = ["KIND", "READERS", "PlanView", "ReplayUnit", "read_plan"]

#: the forward's annotation naming the unit of replay (docs/protocol.md 13)
UNIT_ANNOTATION: Final = "taint.unit"

_forward = msgspec.json.Decoder(Forward)


class ReplayUnit(msgspec.Struct, frozen=True, kw_only=True):
    """One thing to replay (or contain). `unit` is `span` for a cone node
    replayed from the span log (`key` = `span:<node id>`) and `token` for the
    effects of a token rebuilt from the ledger (`key` = `token:<token>`,
    every cone node carrying it). `key` is unique within a plan, so an agent
    can record one row per unit; `sinks` are the sinks attributed to it."""

    key: str
    unit: Literal["span", "token"]
    nodes: tuple[str, ...]
    sinks: tuple[str, ...]


class PlanView(msgspec.Struct, frozen=True, kw_only=True):
    """An admitted plan, checked against the request it answers.

    `request` is the request's exact bytes (what the asker signed), `plan`
    the full verdict (docs/taint.md, "The verdict"), `units` what to replay,
    in the plan's topological order: a token unit stands at the position of
    the first cone node carrying the token."""

    task_id: str
    action: Literal["replay", "contain"]
    unit: Literal["span", "token"]
    request_sha256: str
    request: bytes
    plan: ReplayPlan
    units: tuple[ReplayUnit, ...]


def read_plan(d: Delivery) -> PlanView:
    """The `taint-replay` reader: the delivery's replaced value as a `PlanView`, or ValueError."""
    try:
        fwd = _forward.decode(d.payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"not a {FORWARD_FORMAT} forward with a valid plan: {exc}") from None
    if fwd.format != FORWARD_FORMAT:
        raise ValueError(f"format {fwd.format[:64]!r}; allowed {FORWARD_FORMAT!r}")
    if fwd.action not in ("replay", "contain"):
        raise ValueError(f"action {fwd.action[:64]!r}; allowed 'replay' or 'contain'")
    request = bytes(fwd.request)
    if hashlib.sha256(request).hexdigest() != fwd.request_sha256:
        raise ValueError(f"request_sha256 {fwd.request_sha256[:64]!r} is not the SHA-256 of the request it carries")
    if fwd.request_sha256 != d.receipt.payload_hash:
        raise ValueError(f"request_sha256 {fwd.request_sha256!r} is not the receipt's payload_hash {d.receipt.payload_hash!r}")
    plan = fwd.plan
    said = d.annotations.get(UNIT_ANNOTATION)
    if said != plan.unit:
        raise ValueError(f"annotation {UNIT_ANNOTATION} = {said!r} but the attested plan's unit is {plan.unit!r}")
    return PlanView(
        task_id=d.receipt.task_id,
        action="contain" if fwd.action == "contain" else "replay",
        unit=plan.unit,
        request_sha256=fwd.request_sha256,
        request=request,
        plan=plan,
        units=units_of(plan),
    )


def units_of(plan: ReplayPlan) -> tuple[ReplayUnit, ...]:
    """The plan's units: one per token rebuilt from the ledger, one per other cone node."""
    rebuilt = {t.token: t for t in plan.tokens}
    units: list[ReplayUnit] = []
    placed: set[str] = set()
    for node in plan.nodes:
        token = rebuilt.get(node.token) if node.token is not None else None
        if token is None:
            units.append(ReplayUnit(key=f"span:{node.id}", unit="span", nodes=(node.id,), sinks=tuple(node.sinks)))
        elif token.token not in placed:
            placed.add(token.token)
            units.append(ReplayUnit(key=f"token:{token.token}", unit="token", nodes=tuple(token.nodes), sinks=tuple(token.sinks)))
    return tuple(units)


#: `AdmittingConsumer(..., readers=READERS)` for a containment agent
READERS: Final[dict[str, Reader]] = {KIND: read_plan}
