"""The guard's own CPU per record, without a broker: the whole batch stage
(`Guard.prepare` then `Guard.process_prepared`: prechecks, 2-thread verify,
decide, the SQLite transaction with `synchronous = full`, the batch seal,
the outputs) and the producer's side of `Publisher.publish` (aiokafka's
record batches built and compressed with the configured codec, as its
sender does), over the records `benchmarks/compare.py` sends (same
generator: 8 senders, half with sessions, 5 % exact re-sends, 300-byte JSON
payloads).

Why it exists: on the shared 2-core VM, `compare.py`'s CPU per record moves
by ±10 % between rounds, more than most single changes to the hot path are
worth. This measures the same code paths in one process with nothing else
of busguard's running, as the process's CPU time (every thread: the verify
pool, the SQLite checkpoint thread) over batches of `--batch` records,
median over `--repeats` runs. With `--trees A,B,...` it runs itself under
each source tree in turn (`PYTHONPATH`), interleaved, so an A/B of a change
is measured in one invocation.

    .venv/bin/python benchmarks/guard_stage_cost.py [--records 20000] [--batch 500] [--repeats 5]
    .venv/bin/python benchmarks/guard_stage_cost.py --trees /tmp/base,. --repeats 5

What it leaves out: fetching and decoding the input (aiokafka and
runtime/decoding.py) and the socket writes; `compare.py` has those.
The last line of stdout is one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

HERE = Path(__file__).resolve().parent


class Rec(NamedTuple):
    """What the loop hands the stage: an aiokafka ConsumerRecord's fields the guard reads."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int = 0


class _Sent:
    """A delivery that is already done (`send_batch` returns an awaitable)."""

    def __await__(self):  # type: ignore[no-untyped-def]
        return iter(())


class BuildingProducer:
    """The part of AIOKafkaProducer that `Publisher.publish` calls, building
    every record batch it is sent exactly as aiokafka's sender does before a
    produce request (`BatchBuilder._build`: the v2 batch, compressed)."""

    def __init__(self, batch_size: int, codec: int, partitions: int) -> None:
        from aiokafka.producer.message_accumulator import BatchBuilder

        self._new = lambda: BatchBuilder(batch_size, codec)
        # what runtime/loop.py reads to build a batch without compression, as on aiokafka's producer
        self._message_accumulator = SimpleNamespace(_batch_size=batch_size, _txn_manager=None)
        self._key_serializer = self._value_serializer = None
        self._partitions = set(range(partitions))
        self.bytes = 0
        self.batches = 0

    async def partitions_for(self, topic: str) -> set[int]:
        return self._partitions

    def create_batch(self) -> Any:
        return self._new()

    async def send_batch(self, batch: Any, topic: str, *, partition: int) -> _Sent:
        self.bytes += len(batch._build())
        self.batches += 1
        return _Sent()


def _identity(name: str) -> Any:
    from busguard.protocol.identity import agent_id_for_key
    from busguard.protocol.keyfile import Identity
    from busguard.protocol.signing import public_key_from_seed

    seed = hashlib.sha256(b"guard_stage_cost/" + name.encode()).digest()
    pk = public_key_from_seed(seed)
    return Identity(seed=seed, public_key=pk, agent_id=agent_id_for_key(pk))


def _callgrind(on: bool) -> None:
    """Count instructions only over the measured batches (the run is under
    `valgrind --tool=callgrind --instr-atstart=no`, see `--callgrind`)."""
    subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(os.getpid())], check=True, capture_output=True)


async def run_all(guard: Any, loop: Any, producer: BuildingProducer, batches: list[list[Rec]]) -> tuple[float, float]:
    """Every batch through the stage, then produced: (stage, produce) CPU seconds."""
    stage = produce = 0.0
    # runtime/publish.py; trees before it had BatchLoop._publish (--trees)
    publish = loop.publisher.publish if hasattr(loop, "publisher") else loop._publish
    for batch in batches:
        c0 = time.process_time()
        ready = await guard.prepare(batch)
        outputs = await guard.process_prepared(ready)
        c1 = time.process_time()
        await publish(producer, outputs)
        c2 = time.process_time()
        stage += c1 - c0
        produce += c2 - c1
    return stage, produce


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import busguard  # first, from PYTHONPATH (--trees): compare.py puts its own tree first on sys.path

    sys.path.insert(0, str(HERE))
    from compare import Generator, Signers, generate  # benchmarks/compare.py's workload, unchanged

    from busguard.config import load_config
    from busguard.devconfig import Topics, embedded_config
    from busguard.protocol.keyfile import write_key
    from busguard.runtime.batch_size import _CODEC_IDS, producer_batch_size
    from busguard.runtime.logs import configure

    try:
        from busguard.runtime.publish import key_partition
    except ImportError:  # a tree from before runtime/publish.py (--trees)
        from busguard.runtime.loop import key_partition  # type: ignore[attr-defined,no-redef]
    from busguard.runtime.tuning import tune_gc
    from busguard.state.sqlite.store import SqliteStore
    from busguard.wiring import build_guard, open_guard

    results: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="busguard-stage-") as tmpdir:
        tmp = Path(tmpdir)
        (tmp / "sessions").mkdir()
        # fixed identities, so every run places the same records in the same partitions (and batches)
        signers = Signers([_identity(f"sender-{i}") for i in range(8)], tmp / "sessions")
        work = generate(Generator(signers, 0.05, 300), args.records)
        (tmp / "keys.toml").write_text("".join(f'[[agent]]\nid = "{i.agent_id}"\n\n' for i in signers.identities))
        write_key(tmp / "guard.key", _identity("guard"))
        topics = Topics.under("stage")
        topic_of = {"handoffs": topics.handoffs, "acks": topics.acks}
        # placed as compare.py's producer places them: by key, over 4 partitions
        offsets: dict[tuple[str, int], int] = {}
        records = []
        for it in work.items:
            tp = (topic_of[it.route], key_partition(it.key, 4))
            offsets[tp] = offsets.get(tp, -1) + 1
            records.append(Rec(tp[0], tp[1], offsets[tp], it.key, it.value, tuple(it.headers)))
        tune_gc()
        gc.collect()
        gc.freeze()  # the workload is this process's, not the guard's: keep it out of the guard's collections
        for r in range(args.repeats):
            if args.state_backend == "rocksdb":
                from compare import new_store  # noqa: PLC0415  (benchmarks/compare.py: a genesis store of any backend)

                state = tmp / f"state{r}.rocksdb"
                new_store("rocksdb", state, work.created_before_ms).close()
            else:
                state = tmp / f"state{r}.db"
                SqliteStore(state, now_ms=work.created_before_ms, genesis=True).close()
            config = tmp / "busguard.toml"
            config.write_text(
                embedded_config(
                    "127.0.0.1:9",
                    group_id="stage",
                    topics=topics,
                    comment="benchmarks/guard_stage_cost.py",
                    kafka={"create_topics": False, **({"compression": args.compression} if args.compression else {})},
                    admission={"max_age_ms": 3_600_000, "nonce_retention_ms": 3_660_000},
                    state={"path": str(state), "backend": args.state_backend},
                    keys={"registry": str(tmp / "keys.toml"), "guard_key": str(tmp / "guard.key")},
                    batch={"max_records": args.batch, **({"verify_threads": args.verify_threads} if args.verify_threads else {})},
                    log={"level": "warning"},
                )
            )
            cfg = load_config(config, env={})
            configure(cfg.log.format, cfg.log.level)  # as `busguard run` does
            keys, store = open_guard(cfg)
            guard = build_guard(cfg, store, keys)
            producer = BuildingProducer(
                producer_batch_size(cfg.kafka.max_message_bytes, cfg.kafka.compression), _CODEC_IDS.get(cfg.kafka.compression, 0), 4
            )
            loop = guard.loop
            batches = [records[i : i + args.batch] for i in range(0, len(records), args.batch)]

            gc.collect()
            w0 = time.perf_counter()
            if args.callgrind:
                _callgrind(True)
            stage_s, produce_s = asyncio.run(run_all(guard, loop, producer, batches))
            if args.callgrind:
                _callgrind(False)
            wall = time.perf_counter() - w0
            guard._pool.shutdown(wait=True)
            guard._seal_pool.shutdown(wait=True)
            store.close()
            n = len(records)
            results.append(
                {
                    "stage_us": stage_s / n * 1e6,
                    "produce_us": produce_s / n * 1e6,
                    "total_us": (stage_s + produce_s) / n * 1e6,
                    "wall_per_s": n / wall,
                    "out_bytes_per_record": producer.bytes / n,
                }
            )
            print(
                f"repeat {r + 1}/{args.repeats}: {json.dumps({k: round(v, 1) for k, v in results[-1].items()})}",
                file=sys.stderr,
                flush=True,
            )
    out: dict[str, Any] = {
        "busguard": str(Path(busguard.__file__).parent),
        "records": args.records,
        "batch": args.batch,
        "repeats": args.repeats,
    }
    for k in results[0]:
        vals = [x[k] for x in results]
        out[k] = round(statistics.median(vals), 2)
        out[f"{k}_range"] = [round(min(vals), 2), round(max(vals), 2)]
    return out


def ab(args: argparse.Namespace) -> int:
    """Each tree once per round, rotating, `--repeats` rounds of one repeat each."""
    trees = [str(Path(t).resolve()) for t in args.trees.split(",")]
    runs: dict[str, list[dict[str, Any]]] = {t: [] for t in trees}
    unit = "instructions per record (callgrind)" if args.callgrind else "CPU µs per record"
    for r in range(args.repeats):
        for t in trees[r % len(trees) :] + trees[: r % len(trees)]:
            env = {**os.environ, "PYTHONPATH": t}
            vg = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=/dev/null"] if args.callgrind else []
            argv = [
                *vg,
                sys.executable,
                str(Path(__file__).resolve()),
                "--records",
                str(args.records),
                "--batch",
                str(args.batch),
                "--repeats",
                "1",
                "--verify-threads",
                str(args.verify_threads),
                *(["--compression", args.compression] if args.compression else []),
                "--state-backend",
                args.state_backend,
            ]
            if args.callgrind:
                argv.append("--callgrind")
            done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
            runs[t].append(json.loads(done.stdout.strip().splitlines()[-1]))
            if args.callgrind:
                collected = re.search(r"Collected : (\d+)", done.stderr)
                assert collected is not None, done.stderr[-2000:]
                runs[t][-1]["total_us"] = int(collected.group(1)) / args.records  # instructions per record, in the same slot

            print(f"round {r + 1} {t}: total {runs[t][-1]['total_us']:.1f} {unit}", file=sys.stderr, flush=True)
    out: dict[str, Any] = {"load_average": os.getloadavg()[0], "total_is": unit, "trees": {}}
    base = runs[trees[0]]
    for t in trees:
        tot = [x["total_us"] for x in runs[t]]
        ratio = [x["total_us"] / b["total_us"] for x, b in zip(runs[t], base, strict=True)]
        out["trees"][t] = {
            "total_us": round(statistics.median(tot), 1),
            "total_us_range": [round(min(tot), 1), round(max(tot), 1)],
            "stage_us": round(statistics.median(x["stage_us"] for x in runs[t]), 1),
            "produce_us": round(statistics.median(x["produce_us"] for x in runs[t]), 1),
            "out_bytes_per_record": round(statistics.median(x["out_bytes_per_record"] for x in runs[t]), 1),
            "ratio_to_first": round(statistics.median(ratio), 3),
            "ratio_to_first_range": [round(min(ratio), 3), round(max(ratio), 3)],
        }
        print(f"{t}: {out['trees'][t]}")
    print(json.dumps(out))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--records", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=500, help="records per batch ([batch] max_records, default 500)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--verify-threads", type=int, default=0, help="[batch] verify_threads (default: the config default)")
    p.add_argument("--state-backend", choices=("sqlite", "rocksdb"), default="sqlite", help="[state] backend (default sqlite)")
    p.add_argument(
        "--compression", choices=("none", "gzip", "snappy", "lz4", "zstd"), help="[kafka] compression (default: the config default)"
    )
    p.add_argument(
        "--callgrind",
        action="store_true",
        help="with --trees: count instructions per record (valgrind callgrind, over the measured batches only) "
        "instead of CPU time: blind to the kernel, to cache misses and to lock waits, but the same on a busy machine",
    )
    p.add_argument("--trees", help="comma list of busguard source trees to A/B, interleaved (the first is the baseline)")
    args = p.parse_args()
    if args.trees:
        return ab(args)
    print(json.dumps(measure(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
