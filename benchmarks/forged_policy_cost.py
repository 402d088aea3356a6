"""CPU per forged record on admission's path, by kind: does a forged `taint-replay` request cost more than a forged `handoff`?

A forger needs topic access and a registered agent's name, no key: its
record fails at the signature. This times what admission does for one such
record (`admit_batch`: digest, prechecks, the real Ed25519 verify, the
policies' parse and keys steps where they run, and the decision against an
in-memory store), once as a `taint-replay` request and once with the same
bytes as a `handoff` (a kind without a policy), for a request of about
0.75 MB (the most nodes of benchmarks/taint_validate.py's 64-wide DAGs that
fit) and one at the policy's node and edge caps (100 000 nodes, 399 990
edges, ~35 MB, admitted under `batch.max_payload_bytes` = 64 MiB). The same
request signed is timed too, as the policy's real cost.

CPU time of the measuring thread (`time.thread_time`), best of --repeats,
GC running as in the guard; also the number of Python and C function calls
admission makes (`sys.setprofile`, one run), which does not wander with the
machine. `busguard` names the tree measured (run a copy of this script in
another checkout to compare).

    .venv/bin/python benchmarks/forged_policy_cost.py [--repeats 3] [--no-caps]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import busguard  # noqa: E402
from benchmarks.taint_replay import largest_under  # noqa: E402
from busguard.admission.batch import Input, admit_batch  # noqa: E402
from busguard.admission.types import AdmissionPolicy  # noqa: E402
from busguard.policies.taint.replay import KIND, MAX_NODES, encode_request  # noqa: E402
from busguard.protocol.records import Coordinates, Decision  # noqa: E402
from busguard.state.memory.store import MemoryStore  # noqa: E402
from tests.unit.harness import NOW, agent, forged, registry, sender  # noqa: E402
from tests.unit.taint_build import chain_trace  # noqa: E402

MAX_PAYLOAD = 64 * 1024 * 1024
TO = agent("executor")
Item = tuple[bytes, list[tuple[str, bytes]]]


def records(kind: str, task_id: str, payload: bytes) -> tuple[Item, Item]:
    """(forged, signed): the forged one carries a valid signature of another receipt."""
    s = sender("planner")
    rec = s.sign(kind=kind, task_id=task_id, receiver=TO, payload=payload)
    return forged(rec, s.sign(kind="ack", task_id="donor", receiver=TO, payload=b"{}")), (rec.value, rec.headers)


def admit(item: Item) -> Decision:
    inputs = [Input(Coordinates(topic="agents.in", partition=0, offset=0), *item)]
    store = MemoryStore(created_at=NOW - 3_600_000)
    (d,) = admit_batch(inputs, store=store, registry=KEYS, now_ms=NOW, policy=POLICY, max_payload_bytes=MAX_PAYLOAD)
    return d


def cpu_ms(item: Item, repeats: int) -> tuple[float, str]:
    best, reason = float("inf"), ""
    for _ in range(repeats):
        t0 = time.thread_time()
        reason = admit(item).reason
        best = min(best, time.thread_time() - t0)
    return best * 1000, reason


def calls(item: Item) -> int:
    n = 0

    def count(frame: FrameType, event: str, arg: object) -> None:
        nonlocal n
        if event in ("call", "c_call"):
            n += 1

    sys.setprofile(count)
    try:
        admit(item)
    finally:
        sys.setprofile(None)
    return n


KEYS = registry("planner", "executor")
POLICY = AdmissionPolicy()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-caps", action="store_true", help="skip the request at the node and edge caps")
    args = ap.parse_args()
    small, small_nodes = largest_under(768_000)
    cases = [(f"{small_nodes} nodes", small)]
    if not args.no_caps:
        cases.append((f"{MAX_NODES} nodes, at the caps", encode_request(chain_trace(MAX_NODES, 4))))
    admit(records("ack", "warm-up", b"{}")[0])  # fills the principal cache
    for name, payload in cases:
        forged_taint, signed_taint = records(KIND, "t-taint", payload)
        forged_handoff, _ = records("handoff", "t-handoff", payload)
        row: dict[str, object] = {
            "benchmark": "forged_policy_cost",
            "busguard": str(Path(busguard.__file__).parent.parent),
            "request": name,
            "bytes": len(payload),
        }
        for label, item, repeats in (
            ("forged_taint", forged_taint, args.repeats),
            ("forged_handoff", forged_handoff, args.repeats),
            ("signed_taint", signed_taint, 1),
        ):
            ms, reason = cpu_ms(item, repeats)
            row[f"{label}_ms"] = round(ms, 3)
            row[f"{label}_reason"] = reason
            if label != "signed_taint":
                row[f"{label}_calls"] = calls(item)
        row["forged_taint_over_handoff"] = round(float(row["forged_taint_ms"]) / float(row["forged_handoff_ms"]), 2)  # type: ignore[arg-type]
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
