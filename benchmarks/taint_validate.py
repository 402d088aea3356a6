"""How long `busguard taint check` takes on big traces, and how that grows (target: 10 000 nodes < 1 s, linear).

Builds random DAGs with bounded in-degree (each node takes 0-3 predecessors,
10% of nodes side-effecting with their own token and a sink, every input hash
derived correctly), encodes each as trace JSON, and times what the command
does with the bytes: decode (msgspec, strict), index and check the structure
(build_graph), and validate the cone of every leaf -- the whole trace, the
worst case -- into a span-level plan with its full taint graph, all with the
cyclic GC paused as `busguard taint check` pauses it. File reading and
rendering are not timed.

Three shapes per size: `uniform` (predecessors drawn from all earlier
nodes: every edge a jump anywhere in memory, the harshest case) in recorded
(topological) order, the fast path, and `uniform-shuffled`, which takes
Kahn's algorithm; and `window` (predecessors among the 64 nodes before,
as agent steps mostly consume recent outputs). Times are CPU time of the
measuring thread (`time.thread_time`: the VM is shared, and wall-clock time
there mostly measures the neighbours), best of --repeats (one run at
1 000 000 nodes).

    .venv/bin/python benchmarks/taint_validate.py [--sizes 10000,100000,1000000] [--repeats 3]

Exits 1 when the 10 000-node trace takes 1 s or more.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import random
import sys
import time
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from busguard.commands.taint import cycle_collection_paused  # noqa: E402
from busguard.policies.taint.hashing import derive_input_hash  # noqa: E402
from busguard.policies.taint.model import Node, Trace, build_graph, decode_trace  # noqa: E402
from busguard.policies.taint.plan import ReplayPlan  # noqa: E402
from busguard.policies.taint.validate import validate  # noqa: E402

TARGET_NODES = 10_000
TARGET_S = 1.0


def make_trace(n: int, seed: int, shuffle: bool, window: int | None = None) -> tuple[bytes, int]:
    rng = random.Random(seed)
    outs = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(n)]
    nodes = []
    edges = 0
    for i in range(n):
        lo = 0 if window is None else max(0, i - window)
        preds = rng.sample(range(lo, i), min(i - lo, rng.randint(0, 3))) if i else []
        edges += len(preds)
        fx = rng.random() < 0.1
        nodes.append(
            Node(
                id=f"n{i}",
                predecessors=[f"n{p}" for p in preds],
                operation="tool_call",
                side_effects=fx,
                outcome="success",
                token=f"tok-{i}" if fx else None,
                input_hash=derive_input_hash(None, [outs[p] for p in preds]),
                output_hash=outs[i],
                sinks=[f"sink-{i % 7}"] if fx else [],
            )
        )
    if shuffle:
        rng.shuffle(nodes)
    return msgspec.json.encode(Trace(format="busguard.taint-trace.v1", nodes=nodes)), edges


def measure(data: bytes, n: int) -> tuple[float, float, float]:
    gc.collect()
    with cycle_collection_paused():
        t0 = time.thread_time()
        trace = decode_trace(data)
        t1 = time.thread_time()
        graph = build_graph(trace)
        t2 = time.thread_time()
        result = validate(graph)
        t3 = time.thread_time()
    assert isinstance(result, ReplayPlan) and result.unit == "span" and len(result.nodes) == n, result
    del result, graph, trace
    return t1 - t0, t2 - t1, t3 - t2


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"{'shape':<16} {'nodes':>9} {'edges':>9} {'decode_s':>9} {'graph_s':>8} {'validate_s':>10} {'total_s':>8} {'us/(n+e)':>9}")
    ok = True
    for n in sizes:
        for shape, shuffle, window in (("uniform", False, None), ("uniform-shuffled", True, None), ("window", False, 64)):
            data, edges = make_trace(n, seed=n, shuffle=shuffle, window=window)
            runs = [measure(data, n) for _ in range(1 if n >= 1_000_000 else args.repeats)]
            best = min(runs, key=sum)
            total = sum(best)
            print(
                f"{shape:<16} {n:>9} {edges:>9} {best[0]:>9.3f} {best[1]:>8.3f} {best[2]:>10.3f} {total:>8.3f} {total / (n + edges) * 1e6:>9.2f}",
                flush=True,
            )
            if n == TARGET_NODES and total >= TARGET_S:
                ok = False
            del data
    if TARGET_NODES in sizes:
        print(f"target: {TARGET_NODES} nodes in < {TARGET_S} s: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
