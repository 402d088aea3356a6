"""The `taint-replay` kind: replay and containment requests, forwarded only with a valid plan.

A request (docs/taint.md, "Replay requests on the stream") carries a recorded
trace, optionally its idempotency ledger, and the tainted output(s), inline.
The core verifies the signature and the nonce like every receipt; this policy
then runs the same validator as `busguard taint check`:

- a valid plan: the request is forwarded with the plan attached, as the
  replacement value `busguard.taint-replay-plan.v1` (the request's exact
  bytes, their SHA-256 and the plan), whose hash the guard attests in
  `forwarded_sha256`, so a containment agent can check that this plan is the
  guard's verdict on that signed request;
- a refusal: rejected with `taint_replay_refused`, the refusal's conditions
  and node set in the detail as bounded JSON, so the dead-letter record is a
  first-class signal a responder reads, never a graph;
- input that is not a request, or a trace or ledger that is malformed:
  `taint_request_malformed`; more nodes or edges than the policy's bound:
  `taint_trace_too_large`.

The validation runs in `parse`, outside the batch's state transaction (it
needs no state), so a big trace never holds the store's write lock. Its cost
is linear in nodes plus edges and bounded by `MAX_NODES` / `MAX_EDGES` and
by `batch.max_payload_bytes`, which the core applies first. Never raises:
every input gets an outcome (the seam's rule).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Annotated, Final, Literal

import msgspec

from busguard.policies.seam import Objection, PolicyContext, PolicyInput, PolicyOutcome, PolicyView
from busguard.policies.taint.model import Ledger, Trace, TraceError, _decode, build_graph, check_ledger
from busguard.policies.taint.plan import ReplayPlan, ReplayRefused
from busguard.policies.taint.validate import validate
from busguard.protocol.reasons import Outcome, Reason

KIND: Final = "taint-replay"
REQUEST_FORMAT: Final = "busguard.taint-replay.v1"
FORWARD_FORMAT: Final = "busguard.taint-replay-plan.v1"
#: Bounds on one request's trace, checked after decoding and before the graph
#: is built: validation costs about 2-5 us per node plus edge
#: (benchmarks/taint_validate.py), so one request stays under ~1 s even on the
#: worst shape, and a batch of them cannot starve the poll loop.
MAX_NODES: Final = 100_000
MAX_EDGES: Final = 400_000
#: The dead-letter header `busguard-detail` keeps 1024 bytes; the refusal's
#: JSON detail is built to fit whole.
MAX_DETAIL_BYTES: Final = 1024

Id = Annotated[str, msgspec.Meta(min_length=1)]


class Request(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The payload of a `taint-replay` receipt. `trace` and `ledger` are the
    file formats of docs/taint.md, inline; kept raw so they are decoded by
    the same strict decoders as `busguard taint check`."""

    format: Literal["busguard.taint-replay.v1"]
    action: Literal["replay", "contain"]
    trace: msgspec.Raw
    #: Raw cannot be a union member: JSON null (or absent) means no ledger.
    ledger: msgspec.Raw = msgspec.Raw(b"null")
    outputs: list[Id] = []


class Forward(msgspec.Struct, kw_only=True):
    """The value forwarded for a request with a valid plan."""

    format: str
    action: str
    request_sha256: str
    request: msgspec.Raw
    plan: ReplayPlan


class Parsed(msgspec.Struct, frozen=True):
    """What `parse` found: the verdict, already computed (decide needs no state)."""

    action: str
    trace_id: str | None
    result: ReplayPlan | ReplayRefused
    forward: bytes | None


_request = msgspec.json.Decoder(Request)
_encode = msgspec.json.Encoder().encode


class _DuplicateKey(Exception):
    pass


def _refuse_duplicate_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    if len(pairs) > 1 and len({k for k, _ in pairs}) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise _DuplicateKey(k)
            seen.add(k)
    return {}


def _malformed(where: str, detail: str) -> Objection:
    text = f"{where}: {detail}"
    return Objection(Outcome.REJECT, Reason.TAINT_REQUEST_MALFORMED, _cut(text))


def _cut(text: str) -> str:
    raw = text.encode()
    return text if len(raw) <= MAX_DETAIL_BYTES else raw[: MAX_DETAIL_BYTES - 3].decode(errors="ignore") + "..."


def judge(payload: bytes) -> Parsed | Objection:
    """The verdict on one request payload; an Objection for anything that is not a usable request."""
    try:
        req = _request.decode(payload)
    except msgspec.ValidationError as exc:
        return _malformed(
            "request", f"{exc}; a busguard.taint-replay.v1 request is {{format, action, trace, ledger?, outputs?}} (docs/taint.md)"
        )
    except msgspec.DecodeError as exc:
        return _malformed("request", f"not JSON: {exc}")
    except RecursionError:  # msgspec's own limit on nesting
        return _malformed("request", "JSON nested too deeply")
    try:
        # One pass over the whole payload: JSON readers disagree on which copy of a key wins.
        json.loads(payload, object_pairs_hook=_refuse_duplicate_keys)
    except _DuplicateKey as dup:
        return _malformed("request", f"the key {dup.args[0]!r} appears twice in one object; each key at most once")
    except (ValueError, RecursionError) as exc:  # msgspec accepted it, so this is the stdlib's nesting limit
        return _malformed("request", f"not readable as JSON: {type(exc).__name__}")
    try:
        trace = _decode(req.trace, Trace, "request.trace", "trace")
        assert isinstance(trace, Trace)
        edges = sum(len(n.predecessors) for n in trace.nodes)
        if len(trace.nodes) > MAX_NODES or edges > MAX_EDGES:
            return Objection(
                Outcome.REJECT,
                Reason.TAINT_TRACE_TOO_LARGE,
                f"request.trace has {len(trace.nodes)} nodes and {edges} edges; at most {MAX_NODES} nodes and {MAX_EDGES} edges per request "
                "(check a bigger trace offline with `busguard taint check`)",
            )
        ledger = None
        if bytes(req.ledger) != b"null":
            decoded = _decode(req.ledger, Ledger, "request.ledger", "ledger")
            assert isinstance(decoded, Ledger)
            check_ledger(decoded, "request.ledger")
            ledger = decoded
        graph = build_graph(trace, "request.trace")
        result = validate(graph, ledger, req.outputs or None, source="request.trace", ledger_source="request.ledger")
    except TraceError as exc:  # names the field inside the request: "request.trace: nodes[3].predecessors[1] = ..."
        return Objection(Outcome.REJECT, Reason.TAINT_REQUEST_MALFORMED, _cut(str(exc)))
    except RecursionError:
        return _malformed("request", "JSON nested too deeply")
    forward = None
    if isinstance(result, ReplayPlan):
        forward = _encode(
            Forward(
                format=FORWARD_FORMAT,
                action=req.action,
                request_sha256=hashlib.sha256(payload).hexdigest(),
                request=msgspec.Raw(payload),
                plan=result,
            )
        )
    return Parsed(req.action, trace.trace_id, result, forward)


def refusal_detail(refused: ReplayRefused) -> str:
    """The refusal as compact JSON of at most MAX_DETAIL_BYTES: verdict, conditions, the node set
    (as many ids as fit, in sorted order; `nodes_total` says how many there are) and the size of
    the suspect set. Never a graph: no edges, no attribution."""
    head = {"verdict": "refused", "condition": refused.condition, "conditions": refused.conditions, "outputs": refused.outputs[:8]}
    tail = {"nodes_total": len(refused.nodes), "suspect_total": len(refused.suspect)}
    nodes: list[str] = []
    base = len(_encode({**head, "nodes": [], **tail, "nodes_truncated": True}))
    budget = MAX_DETAIL_BYTES - base
    for n in refused.nodes:
        cost = len(_encode(n)) + 1
        if cost > budget:
            break
        nodes.append(n)
        budget -= cost
    body = {**head, "nodes": nodes, **tail}
    if len(nodes) < len(refused.nodes):
        body["nodes_truncated"] = True
    text = _encode(body).decode()
    if len(text.encode()) > MAX_DETAIL_BYTES:  # only absurdly long output ids get here
        body["outputs"] = []
        text = _encode(body).decode()
    return text


class TaintReplayPolicy:
    """Stateless on purpose: the verdict depends on the request alone, so it is the same on every
    guard and at every re-delivery."""

    def parse(self, record: PolicyInput, context: PolicyContext) -> Parsed | Objection:
        try:
            return judge(record.envelope.payload)
        except Exception as exc:  # the seam's rule: never raise on input; a bug here must not stall the partition
            return _malformed("request", f"could not be judged ({type(exc).__name__}); report this as a busguard bug")

    def keys(self, parsed: Parsed) -> Iterable[tuple[str, str]]:
        return ()

    def decide(self, parsed: Parsed, view: PolicyView, now_ms: int) -> PolicyOutcome:
        result = parsed.result
        if isinstance(result, ReplayRefused):
            annotations = {
                "taint.verdict": "refused",
                "taint.condition": str(result.condition),
                "taint.nodes": str(len(result.nodes)),
            }
            objection = Objection(Outcome.REJECT, Reason.TAINT_REPLAY_REFUSED, refusal_detail(result))
            return PolicyOutcome(objection=objection, annotations=annotations)
        annotations = {
            "taint.verdict": "valid",
            "taint.unit": result.unit,
            "taint.nodes": str(len(result.nodes)),
            "taint.sinks": str(len(result.sinks)),
        }
        return PolicyOutcome(annotations=annotations, replacement=parsed.forward)


REASONS: Final = (Reason.TAINT_REPLAY_REFUSED, Reason.TAINT_REQUEST_MALFORMED, Reason.TAINT_TRACE_TOO_LARGE)


def encode_request(
    trace: bytes, ledger: bytes | None = None, outputs: Iterable[str] = (), action: Literal["replay", "contain"] = "contain"
) -> bytes:
    """A request payload around a trace file's (and a ledger file's) bytes, spliced in unchanged,
    for a sender that holds the files `busguard taint check` reads."""
    req = Request(
        format=REQUEST_FORMAT,
        action=action,
        trace=msgspec.Raw(trace),
        ledger=msgspec.Raw(ledger if ledger is not None else b"null"),
        outputs=list(outputs),
    )
    return _encode(req)
