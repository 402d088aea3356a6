"""Admission cost per record, excluding the Ed25519 verify (target: ≤ 15 µs median).

Runs the real `admit_batch` (parse, prechecks, policies, nonce/window/task
index, decision building) over batches of signed records, with the signature
step replaced by "the first candidate key", and reports the median per-record
cost over many batches: for the pure core (a store that holds nothing), with
the in-memory store, and with the SQLite store (one transaction per batch,
which is what `busguard run` pays). In the same run it measures the verify
itself, so the ratio is what to compare across machines.

Times are CPU time of the measuring thread (`time.thread_time_ns`). Each
batch's cost is also divided by the verify cost measured right after it on
the same records, and the median of those ratios times the issue's 58 µs
verify is reported as `*_us_at_58us_verify`: this VM's speed wanders by
±40% from minute to minute, and the ratio is what survives that. Every
configuration runs `--repeats` times, interleaved; the figure is the median
run and `*_range` the slowest and fastest.

    .venv/bin/python benchmarks/admission_cost.py [--records 20000] [--batch 500] [--repeats 5]

Exits 1 when the core misses the target.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from busguard.admission.batch import Input, admit_batch  # noqa: E402
from busguard.admission.decide import Candidate, precheck, verify  # noqa: E402
from busguard.admission.types import AdmissionPolicy  # noqa: E402
from busguard.protocol.identity import agent_id_for_key, canonical_principal  # noqa: E402
from busguard.protocol.records import Coordinates  # noqa: E402
from busguard.protocol.registry import KeyRegistry, KeyWindow  # noqa: E402
from busguard.protocol.signing import generate_keypair  # noqa: E402
from busguard.runtime.tuning import tune_gc  # noqa: E402
from busguard.sdk.sender import Sender  # noqa: E402
from busguard.state.memory.store import MemoryStore  # noqa: E402
from busguard.state.sqlite.store import SqliteStore  # noqa: E402


class CoreOnly:
    """A store that holds nothing: what is left is the pure core (prechecks,
    decide, the batch overlay), i.e. admission without state I/O."""

    def __init__(self, created_at: int) -> None:
        self.created_at = created_at

    def run_batch(self, keys, now_ms, fn):  # type: ignore[no-untyped-def]
        from busguard.state.snapshot import Snapshot

        return fn(Snapshot(trusted_from=self.created_at))

    def close(self) -> None:
        pass


def skip_verify(cands: Sequence[Candidate]) -> list[KeyWindow | None]:
    return [c.keys[0] for c in cands]


def build(records: int, session_dir: Path) -> tuple[list[Input], KeyRegistry, int]:
    senders = []
    agents: dict[str, tuple[KeyWindow, ...]] = {}
    for i in range(8):
        seed, pk = generate_keypair()
        s = Sender(seed, session_path=session_dir / f"s{i}.json" if i % 2 else None)
        senders.append(s)
        agents[canonical_principal(agent_id_for_key(pk))] = (KeyWindow(key_id=str(i), public_key=pk),)
    now = time.time_ns() // 1_000_000
    payload = b'{"op":"transform","input":"s3://bucket/in.parquet","params":{"mode":"fast"}}' * 4
    inputs = []
    for n in range(records):
        s = senders[n % len(senders)]
        rec = s.sign(kind="handoff" if n % 3 else "ack", task_id=f"task-{n}", receiver="executor", payload=payload)
        inputs.append(Input(Coordinates(topic="agents.in", partition=n % 4, offset=n), rec.value, rec.headers))
    return inputs, KeyRegistry(agents), now


def per_record_us(inputs: list[Input], batch: int, store_factory, registry: KeyRegistry, now: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(median µs per record, median of admission/verify ratios per batch).

    After each admission batch, 100 of its records are verified and timed:
    both measurements see the same CPU conditions, so the ratio holds still
    on a machine whose speed wanders (this one's does, by ±40%)."""
    store = store_factory()
    policy = AdmissionPolicy()
    samples, ratios = [], []
    gc.collect()  # untimed: the previous configuration's garbage is not this one's cost
    for i in range(0, len(inputs), batch):
        chunk = inputs[i : i + batch]
        t0 = time.thread_time_ns()
        decisions = admit_batch(chunk, store=store, registry=registry, now_ms=now, policy=policy, verify_many=skip_verify)
        admit = (time.thread_time_ns() - t0) / len(chunk) / 1000
        assert all(d.outcome == "forward" for d in decisions), {d.reason for d in decisions}
        cands = [precheck(x.source, x.value, x.headers, registry, now, policy) for x in chunk[:100]]
        t0 = time.thread_time_ns()
        for c in cands:
            assert isinstance(c, Candidate) and verify(c) is not None
        verify_us = (time.thread_time_ns() - t0) / len(cands) / 1000
        samples.append(admit)
        ratios.append(admit / verify_us)
    store.close()
    return statistics.median(samples), statistics.median(ratios)


VERIFY_REFERENCE_US = 58.0  # the figure for this machine's Ed25519 verify
TARGET_US = 15.0  # the target: median admission cost per record, excluding the verify


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=5, help="interleaved runs of every configuration; the median run is reported")
    args = ap.parse_args()
    results: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        inputs, registry, now = build(args.records, Path(tmp))
        results["memory_default_gc"] = [
            per_record_us(inputs, args.batch, lambda: MemoryStore(created_at=now - 3_600_000), registry, now) for _ in range(args.repeats)
        ]
        tune_gc()  # as `busguard run` does at start-up
        stores = {
            "core": lambda: CoreOnly(now - 3_600_000),
            "memory": lambda: MemoryStore(created_at=now - 3_600_000),
            "sqlite": lambda: SqliteStore(Path(tmp) / f"bench-{time.monotonic_ns()}.db", now_ms=now - 3_600_000),
        }
        for _ in range(args.repeats):  # interleaved, so a slow minute hits every configuration alike
            for name, factory in stores.items():
                results.setdefault(name, []).append(per_record_us(inputs, args.batch, factory, registry, now))
    result: dict[str, object] = {"benchmark": "admission_cost", "records": args.records, "batch": args.batch, "repeats": args.repeats}
    for name, runs in results.items():
        at_reference = sorted(ratio * VERIFY_REFERENCE_US for _, ratio in runs)
        result[f"{name}_us_median"] = round(statistics.median(us for us, _ in runs), 2)
        result[f"{name}_over_verify_median"] = round(statistics.median(ratio for _, ratio in runs), 3)
        result[f"{name}_us_at_58us_verify"] = round(statistics.median(at_reference), 2)
        result[f"{name}_us_at_58us_verify_range"] = [round(at_reference[0], 2), round(at_reference[-1], 2)]
    result["target_us"] = TARGET_US
    meets = statistics.median(ratio for _, ratio in results["core"]) * VERIFY_REFERENCE_US <= TARGET_US
    result["core_meets_target_at_58us_verify"] = meets
    print(json.dumps(result))
    sys.exit(0 if meets else 1)  # a missed target fails `make bench`


if __name__ == "__main__":
    main()
