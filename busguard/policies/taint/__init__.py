"""Taint replay guard (seed 003): may the causal cone of a tainted output be replayed, and by which unit?

Pure: a recorded trace and idempotency ledger in, a `ReplayPlan` or
`ReplayRefused` out. Imports only the standard library, msgspec and
busguard.errors, so the stream interceptor can wrap it later without pulling
in admission or the runtime. See docs/taint.md.
"""

from busguard.policies.taint.model import Graph, Ledger, Trace, TraceError, build_graph, decode_ledger, decode_trace
from busguard.policies.taint.plan import ReplayPlan, ReplayRefused, Result
from busguard.policies.taint.validate import validate

__all__ = [
    "Graph",
    "Ledger",
    "ReplayPlan",
    "ReplayRefused",
    "Result",
    "Trace",
    "TraceError",
    "build_graph",
    "decode_ledger",
    "decode_trace",
    "validate",
]
