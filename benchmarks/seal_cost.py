"""Guard CPU per record after the signature checks, batch seal vs per-record seal.

`busguard run`'s `process_prepared` (decide and persist in one SQLite
transaction, seal, build every output) timed on the same signed records by
two guards side by side, one with `[batch] seal = "batch"` and one with
`"record"`, each on its own fresh SQLite store, batch after batch
interleaved, so both see the same machine at the same moment (this VM's
speed wanders minute to minute, and others share its two cores). The
signature checks (`prepare`) run untimed before each batch: they are the
same for both. Time is the process's CPU time (the per-record seals run on
the guard's seal threads), so it is the cost, not the latency. Also the
bytes of proof headers each mode adds per input (its primary output and its
audit record).

    .venv/bin/python benchmarks/seal_cost.py [--records 20000] [--batch 500]

One JSON line at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from busguard.config import load_config  # noqa: E402
from busguard.protocol.identity import agent_id_for_key  # noqa: E402
from busguard.protocol.keyfile import Identity  # noqa: E402
from busguard.protocol.registry import KeyRegistry  # noqa: E402
from busguard.protocol.signing import generate_keypair  # noqa: E402
from busguard.runtime.batch_size import record_size  # noqa: E402
from busguard.runtime.guard import Guard  # noqa: E402
from busguard.runtime.outputs import Output  # noqa: E402
from busguard.runtime.watched import WatchedFile  # noqa: E402
from busguard.sdk.sender import Sender  # noqa: E402
from busguard.state.sqlite.store import SqliteStore  # noqa: E402
from tests.unit.harness import Rec  # noqa: E402

PROOF = ("busguard-decision-id", "busguard-attestation", "busguard-seal", "busguard-tree-head", "busguard-head-seal", "busguard-inclusion")


def records(n: int) -> tuple[list[Rec], list[str]]:
    senders, ids = [], []
    for _ in range(8):
        seed, pk = generate_keypair()
        senders.append(Sender(seed))
        ids.append(agent_id_for_key(pk))
    payload = b'{"op":"transform","input":"s3://bucket/in.parquet","params":{"mode":"fast"}}' * 4
    out = []
    for i in range(n):
        r = senders[i % 8].sign(kind="handoff", task_id=f"task-{i}", receiver="executor", payload=payload)
        out.append(Rec("agents.in", i % 4, i // 4, b"k", r.value, r.headers))
    return out, ids


def guard(tmp: Path, mode: str, ids: list[str], now: int) -> Guard:
    d = tmp / mode
    d.mkdir()
    (d / "keys.toml").write_text("".join(f'[[agent]]\nid = "{a}"\n' for a in ids))
    (d / "busguard.toml").write_text(
        f'[[routes]]\nname = "r"\ninputs = ["agents.in"]\ndownstream = "out"\n[ops]\nport = 0\n[batch]\nseal = "{mode}"\n'
    )
    cfg = load_config(d / "busguard.toml", env={})
    seed, pk = generate_keypair()
    ident = Identity(seed=seed, public_key=pk, agent_id=agent_id_for_key(pk))
    store = SqliteStore(d / "state.db", now_ms=now - 60_000, synchronous="FULL", genesis=True)
    return Guard(
        cfg, keys=WatchedFile(d / "keys.toml", KeyRegistry.load, what="key registry"), identity=ident, store=store, clock_ms=lambda: now
    )


def proof_bytes(outputs: list[Output]) -> float:
    return sum(record_size(None, None, [(k, v) for k, v in o.headers if k in PROOF]) for o in outputs)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    recs, ids = records(args.records)
    now = time.time_ns() // 1_000_000
    with tempfile.TemporaryDirectory() as tmp:
        guards = {m: guard(Path(tmp), m, ids, now) for m in ("batch", "record")}
        cpu: dict[str, list[float]] = {m: [] for m in guards}
        size: dict[str, float] = {m: 0.0 for m in guards}
        ratios = []
        for i in range(0, len(recs), args.batch):
            chunk = recs[i : i + args.batch]
            order = list(guards) if (i // args.batch) % 2 == 0 else list(reversed(guards))
            per: dict[str, float] = {}
            for m in order:
                ready = await guards[m].prepare(chunk)
                t0 = time.process_time_ns()
                outputs = await guards[m].process_prepared(ready)
                per[m] = (time.process_time_ns() - t0) / len(chunk) / 1000
                assert len(outputs) == 2 * len(chunk)
                size[m] += proof_bytes(outputs)
            for m in guards:
                cpu[m].append(per[m])
            ratios.append(per["batch"] / per["record"])
        for g in guards.values():
            g.store.close()
    result: dict[str, Any] = {"bench": "seal_cost", "records": args.records, "batch": args.batch}
    for m in cpu:
        result[f"{m}_us_per_record"] = round(statistics.median(cpu[m]), 1)
        result[f"{m}_proof_bytes_per_input"] = round(size[m] / args.records, 1)
    result["batch_over_record"] = round(statistics.median(ratios), 3)
    result["batch_over_record_range"] = [round(min(ratios), 3), round(max(ratios), 3)]
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--records", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=500)
    result = asyncio.run(run(p.parse_args()))
    print(
        f"after the verify, per record: batch seal {result['batch_us_per_record']} µs, per-record seal {result['record_us_per_record']} µs "
        f"(batch/record {result['batch_over_record']}); "
        f"proof headers per input: {result['batch_proof_bytes_per_input']} vs {result['record_proof_bytes_per_input']} bytes"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
