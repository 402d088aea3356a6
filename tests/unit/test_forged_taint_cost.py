"""A forged `taint-replay` request costs the guard no more than a forged
record of a kind without a policy (issue 19, item 3).

The policy's whole trace validation runs in its parse step; parse runs only
for records whose signature verified. Cost is counted, not timed: calls into
the validator (none), and every Python and C function call admission makes
for the record (`sys.setprofile`), against the same bytes sent as a
`handoff`. On a guard that parsed before the signature check, the forged
request at the node and edge caps took 1.5-3 s of CPU and millions of calls.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import msgspec
import pytest

from busguard.admission.batch import Input, admit_batch
from busguard.admission.types import AdmissionPolicy
from busguard.policies.taint import replay
from busguard.protocol.reasons import Reason
from busguard.protocol.records import Coordinates, Decision
from busguard.sdk.sender import SignedRecord
from busguard.state.memory.store import MemoryStore
from tests.unit.harness import NOW, agent, forged, registry, sender
from tests.unit.taint_build import chain_trace, incident

TO = agent("executor")
MAX_PAYLOAD = 64 * 1024 * 1024  # the most `batch.max_payload_bytes` allows: room for a request at the caps


class Calls:
    """Counts calls of the validator's entry points, as the policy module calls them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n: dict[str, int] = {}
        for name in ("judge", "build_graph", "validate"):
            monkeypatch.setattr(replay, name, self._counted(name, getattr(replay, name)))

    def _counted(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.n[name] = self.n.get(name, 0) + 1
            return fn(*args, **kwargs)

        return wrapper


def forge(record: SignedRecord) -> tuple[bytes, list[tuple[str, bytes]]]:
    return forged(record, sender("planner").sign(kind="ack", task_id="donor", receiver=TO, payload=b"{}"))


def admit_counted(item: tuple[bytes, list[tuple[str, bytes]]]) -> tuple[Decision, int]:
    """The decision for one record, and how many function calls admission made for it."""
    calls = 0

    def count(frame: FrameType, event: str, arg: object) -> None:
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    store, keys, policy = MemoryStore(created_at=NOW - 3_600_000), registry("planner", "executor"), AdmissionPolicy()
    inputs = [Input(Coordinates(topic="agents.in", partition=0, offset=0), *item)]
    sys.setprofile(count)
    try:
        (decision,) = admit_batch(inputs, store=store, registry=keys, now_ms=NOW, policy=policy, max_payload_bytes=MAX_PAYLOAD)
    finally:
        sys.setprofile(None)
    return decision, calls


def test_a_forged_request_at_the_node_and_edge_caps_costs_what_a_forged_handoff_costs(monkeypatch: pytest.MonkeyPatch) -> None:
    payload = replay.encode_request(chain_trace(replay.MAX_NODES, 4))
    assert len(payload) > 30_000_000  # the caps' 100 000 nodes and 399 990 edges
    calls = Calls(monkeypatch)
    s = sender("planner")
    admit_counted(forge(s.sign(kind="ack", task_id="warm-up", receiver=TO, payload=b"{}")))  # fills the principal cache
    taint, taint_calls = admit_counted(forge(s.sign(kind=replay.KIND, task_id="t-taint", receiver=TO, payload=payload)))
    handoff, handoff_calls = admit_counted(forge(s.sign(kind="handoff", task_id="t-handoff", receiver=TO, payload=payload)))
    assert (taint.reason, handoff.reason) == (Reason.BAD_SIGNATURE, Reason.BAD_SIGNATURE)
    assert calls.n == {}  # the validator never ran
    # The one extra step: the test of whether its signature verified, made
    # only for records of a kind with a policy (an id() and a dict lookup):
    # 130 calls against 129 here; parsing before the signature made 3 862 635.
    assert taint_calls <= handoff_calls + 2, (taint_calls, handoff_calls)


def test_the_same_request_signed_is_validated_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The counters see the validator when it runs: an authentic request is judged."""
    calls = Calls(monkeypatch)
    payload = replay.encode_request(msgspec.json.encode(incident()))
    rec = sender("planner").sign(kind=replay.KIND, task_id="t-real", receiver=TO, payload=payload)
    d, _ = admit_counted((rec.value, rec.headers))
    assert d.reason == Reason.TAINT_REPLAY_REFUSED
    assert calls.n == {"judge": 1, "build_graph": 1, "validate": 1}
