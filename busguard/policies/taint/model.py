"""The recorded trace and idempotency ledger a taint replay is judged on.

Decoding is strict on purpose: a replay verdict is only as good as the record
it reads, so a field this model does not know, a node id used twice, a
predecessor that names nothing, or a cycle makes the input malformed rather
than something to be guessed around. docs/taint.md is the reference; the JSON
schemas in docs/schemas/ are generated from these Structs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Final, Literal

import msgspec

from busguard.errors import ConfigError, ExplainedError

TRACE_FORMAT: Final = "busguard.taint-trace.v1"
LEDGER_FORMAT: Final = "busguard.taint-ledger.v1"

Outcome = Literal["success", "failure", "abort", "pending", "unknown"]
TERMINAL: Final[frozenset[str]] = frozenset({"success", "failure", "abort"})
EXECUTED: Final[frozenset[str]] = frozenset({"success", "failure"})

Hash = Annotated[
    str,
    msgspec.Meta(pattern="^[0-9a-f]{64}$", description="SHA-256, 64 lowercase hex digits"),
]
Id = Annotated[str, msgspec.Meta(min_length=1)]


class Node(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, gc=False):
    """One recorded step: a tool call, a model output, a retrieval read or an inter-agent message."""

    id: Annotated[str, msgspec.Meta(min_length=1, description="unique within the trace")]
    predecessors: Annotated[
        list[Id],
        msgspec.Meta(
            description="ids of the nodes whose outputs this node consumed, in the order its input hash commits to them; no repeats"
        ),
    ] = []
    operation: Annotated[str, msgspec.Meta(description="what ran, e.g. read_secret, summarize, post_message")]
    side_effects: Annotated[
        bool, msgspec.Meta(description="true if the step can change state outside the trace (only such nodes touch sinks)")
    ]
    outcome: Annotated[Outcome, msgspec.Meta(description="success, failure and abort are terminal; pending and unknown are not")]
    token: Annotated[
        Id | None,
        msgspec.Meta(description="the idempotency token the step ran under (required in effect for side-effecting nodes: see condition 2)"),
    ] = None
    external_input_hash: Annotated[
        Hash | None,
        msgspec.Meta(description="hash of the input that came from outside the trace (prompt, literal arguments); null if none"),
    ] = None
    input_hash: Annotated[
        Hash | None,
        msgspec.Meta(
            description=(
                "the recorded input hash; must equal the one derived from external_input_hash and the predecessors' "
                "output hashes (docs/taint.md); null only for an aborted node that took no input"
            )
        ),
    ]
    output_hash: Annotated[Hash | None, msgspec.Meta(description="SHA-256 of the step's output; null if it produced none")]
    sinks: Annotated[
        list[Id], msgspec.Meta(description="external destinations the step touched (channels, endpoints, stores); no repeats")
    ] = []


class Trace(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A recorded agent trace: a DAG of nodes, each naming its predecessors."""

    format: Literal["busguard.taint-trace.v1"]
    trace_id: Annotated[str | None, msgspec.Meta(description="free-form label, shown nowhere in the verdict")] = None
    tainted_output: Annotated[
        Id | None, msgspec.Meta(description="the node whose output is tainted; the CLI's --output overrides it; absent: every leaf")
    ] = None
    nodes: Annotated[
        list[Node],
        msgspec.Meta(min_length=1, description="in any order; node ids unique, predecessors must name nodes of this list, no cycles"),
    ]


class Effect(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One execution the gateway performed under a token, and the sinks it reached."""

    id: Annotated[str | None, msgspec.Meta(description="the gateway's own id for this execution (a delivery id), for people")] = None
    status: Annotated[Outcome, msgspec.Meta(description="success, failure and abort are terminal")]
    sinks: Annotated[list[Id], msgspec.Meta(description="sinks this execution reached; no repeats")] = []


class LedgerEntry(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Everything the gateway did under one idempotency token."""

    token: Annotated[str, msgspec.Meta(min_length=1, description="at most one entry per token")]
    effects: Annotated[list[Effect], msgspec.Meta(min_length=1, description="every execution performed under the token, retries included")]


class Ledger(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The idempotency ledger: token -> effects and the sinks they touched."""

    format: Literal["busguard.taint-ledger.v1"]
    entries: list[LedgerEntry]


SCHEMA_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"


def schema_document(typ: type[Trace] | type[Ledger]) -> dict[str, object]:
    """The JSON schema shipped in docs/schemas/ (generated, so it cannot drift from the decoder).

    JSON Schema cannot say "ids unique", "predecessors name existing nodes"
    or "no cycles"; build_graph enforces those and docs/taint.md states them.
    """
    generated = msgspec.json.schema(typ)
    what = "trace" if typ is Trace else "ledger"
    return {"$schema": SCHEMA_DIALECT, "title": f"busguard taint {what} ({TRACE_FORMAT if typ is Trace else LEDGER_FORMAT})", **generated}


class TraceError(ExplainedError):
    """Malformed trace or ledger input, naming the file, the field, the value and what is allowed."""

    @classmethod
    def from_validation(cls, file: str, exc: msgspec.ValidationError, data: object) -> TraceError:
        c = ConfigError.from_validation(file, exc, data)
        allowed = c.allowed.replace("docs/config.md", "docs/taint.md")
        if allowed.startswith("Invalid enum value"):
            last = c.field.rsplit(".", 1)[-1]
            allowed = _ENUMS.get(last, allowed)
        elif "matching regex '^[0-9a-f]{64}$'" in allowed:
            allowed = "a SHA-256 as 64 lowercase hex digits, or null"
        return cls(c.file, c.field, c.value, allowed)


_OUTCOMES: Final = "one of success, failure, abort (terminal), pending, unknown"
_ENUMS: Final = {
    "outcome": _OUTCOMES,
    "status": _OUTCOMES,
    "format": f"{TRACE_FORMAT!r} for a trace, {LEDGER_FORMAT!r} for a ledger",
}


class Graph:
    """A structurally valid trace, indexed: node i's predecessors are `preds[i]` (indices).

    `order` is a topological order (every predecessor before its successors),
    computed once so that nothing downstream needs recursion or re-sorting.
    """

    __slots__ = ("trace", "nodes", "index", "preds", "order", "edges")

    def __init__(self, trace: Trace, index: dict[str, int], preds: list[list[int]], order: list[int], edges: int) -> None:
        self.trace = trace
        self.nodes = trace.nodes
        self.index = index
        self.preds = preds
        self.order = order
        self.edges = edges


def _decode(data: bytes, typ: type[msgspec.Struct], file: str, what: str) -> object:
    try:
        return msgspec.json.decode(data, type=typ)
    except msgspec.ValidationError as exc:
        try:
            raw: object = msgspec.json.decode(data)
        except (msgspec.DecodeError, RecursionError):  # only to show the value; deep nesting is msgspec's RecursionError
            raw = None
        raise TraceError.from_validation(file, exc, raw) from None
    except msgspec.DecodeError as exc:
        raise TraceError(file, "", None, f"not valid JSON for a {what}: {exc}") from None
    except RecursionError:  # msgspec's own nesting limit, raised as RecursionError
        raise TraceError(file, "", None, f"not a {what}: JSON nested deeper than the decoder allows") from None


class _DuplicateKey(Exception):
    pass


def _refuse_duplicate_keys(pairs: list[tuple[str, object]]) -> None:
    if len(pairs) > 1 and len({k for k, _ in pairs}) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise _DuplicateKey(k, next((v for key, v in pairs if key in ("id", "token") and isinstance(v, str)), None))
            seen.add(k)


def _no_duplicate_keys(data: bytes, file: str) -> None:
    """msgspec keeps the last of two equal keys; another reader may keep the first. Two `outcome`s
    in one node would let two checkers disagree about the same file, so such input is malformed."""
    try:
        json.loads(data, object_pairs_hook=_refuse_duplicate_keys)
    except _DuplicateKey as dup:
        key, owner = dup.args
        where = f" (in the object with id/token {owner!r})" if owner is not None else ""
        raise TraceError(file, key, None, f"the key appears twice in one object{where}; each key at most once") from None


def decode_trace(data: bytes, file: str = "trace") -> Trace:
    trace = _decode(data, Trace, file, "trace")
    assert isinstance(trace, Trace)
    _no_duplicate_keys(data, file)
    return trace


def decode_ledger(data: bytes, file: str = "ledger") -> Ledger:
    ledger = _decode(data, Ledger, file, "ledger")
    assert isinstance(ledger, Ledger)
    _no_duplicate_keys(data, file)
    check_ledger(ledger, file)
    return ledger


def check_ledger(ledger: Ledger, file: str = "ledger") -> dict[str, LedgerEntry]:
    """The ledger by token; one entry per token, or the ledger is malformed."""
    by_token: dict[str, LedgerEntry] = {}
    for i, entry in enumerate(ledger.entries):
        if entry.token in by_token:
            raise TraceError(
                file, f"entries[{i}].token", entry.token, "a token has at most one ledger entry (list every effect under it there)"
            )
        for j, effect in enumerate(entry.effects):
            _no_duplicates(effect.sinks, file, f"entries[{i}].effects[{j}].sinks", "sink")
        by_token[entry.token] = entry
    return by_token


def _no_duplicates(items: Sequence[str], file: str, field: str, what: str) -> None:
    if len(items) > 1 and len(set(items)) != len(items):
        seen: set[str] = set()
        for k, item in enumerate(items):
            if item in seen:
                raise TraceError(file, f"{field}[{k}]", item, f"each {what} is listed once")
            seen.add(item)


def build_graph(trace: Trace, file: str = "trace") -> Graph:
    """Index the trace and refuse what is not a DAG of uniquely named nodes."""
    nodes = trace.nodes
    index: dict[str, int] = {}
    for i, node in enumerate(nodes):
        if index.setdefault(node.id, i) != i:
            raise TraceError(file, f"nodes[{i}].id", node.id, f"node ids are unique; nodes[{index[node.id]}] already has this id")
    preds: list[list[int]] = []
    edges = 0
    in_order = True  # is the list itself already topological? (recorders append in execution order)
    get = index.get
    for i, node in enumerate(nodes):
        ps = node.predecessors
        row: list[int] = []
        for k, pid in enumerate(ps):
            j = get(pid)
            if j is None:
                raise TraceError(file, f"nodes[{i}].predecessors[{k}]", pid, "a predecessor names a node of this trace (no such node id)")
            if j >= i:
                in_order = False
            row.append(j)
        if len(row) > 1 and len(set(row)) != len(row):
            _no_duplicates(ps, file, f"nodes[{i}].predecessors", "predecessor")
        if node.sinks:
            if not node.side_effects:
                raise TraceError(file, f"nodes[{i}].sinks", node.sinks, "only a node with side_effects: true touches sinks")
            _no_duplicates(node.sinks, file, f"nodes[{i}].sinks", "sink")
        edges += len(row)
        preds.append(row)
    order = list(range(len(nodes))) if in_order else _topological(nodes, preds, file)
    if trace.tainted_output is not None and trace.tainted_output not in index:
        raise TraceError(file, "tainted_output", trace.tainted_output, "must name a node of this trace")
    return Graph(trace, index, preds, order, edges)


def _topological(nodes: Sequence[Node], preds: list[list[int]], file: str) -> list[int]:
    """Kahn's algorithm; on a cycle, name one cycle (found by walking predecessors, no recursion)."""
    n = len(nodes)
    pending = [len(row) for row in preds]
    succs: list[list[int]] = [[] for _ in range(n)]
    for i, row in enumerate(preds):
        for j in row:
            succs[j].append(i)
    order = [i for i in range(n) if pending[i] == 0]
    k = 0
    while k < len(order):
        for s in succs[order[k]]:
            pending[s] -= 1
            if pending[s] == 0:
                order.append(s)
        k += 1
    if len(order) == n:
        return order
    # Every node left over has a left-over predecessor, so walking those must revisit a node.
    start = next(i for i in range(n) if pending[i] > 0)
    seen: dict[int, int] = {}
    path: list[int] = []
    i = start
    while i not in seen:
        seen[i] = len(path)
        path.append(i)
        i = next(j for j in preds[i] if pending[j] > 0)
    loop = path[seen[i] :][::-1]  # in execution order: each node is the next one's predecessor
    first = min(loop)
    at = loop.index(first)
    cycle = [nodes[j].id for j in loop[at:] + loop[:at]]
    shown = " -> ".join([*cycle, cycle[0]])
    raise TraceError(file, f"nodes[{first}].predecessors", None, f"the trace has a cycle ({shown}); a trace is a DAG")
