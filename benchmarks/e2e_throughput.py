"""End-to-end throughput of ONE `busguard run` process on this machine.

Starts an embedded broker and a real guard process (`python -m busguard.cli
run`, default config values apart from the broker-specific ones), waits until
it is ready (records signed before its store exists would be refused as
`store_warming`), pre-signs N records from several senders (half with a
session file, half legacy; handoffs and acks; a share of exact duplicates),
produces them keyed by sender, and times from the first record produced to
the last audit record observed. Also reads the guard's own batch latency
from its /metrics (busguard_batch_seconds), and runs the plain aiokafka relay
of benchmarks/relay_baseline.py on the same broker with the same records'
size, for the ratio. Then runs `busguard audit` over the log the guard
wrote and reports its read rate (`audit_rps`, input records judged per
second).

Prints one JSON line on stdout (logs go to stderr):

    python benchmarks/e2e_throughput.py [--records 20000] [--senders 8] [--duplicates 0.05]

Every input yields two outputs (primary + audit), so the guard produces
twice what the relay does; the relay is per input record too.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import platform
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import structlog  # noqa: E402
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402

from busguard.audit.run import DEFAULT_IDLE_MS, run_audit  # noqa: E402
from busguard.config import load_config  # noqa: E402
from busguard.devconfig import Topics, embedded_config  # noqa: E402
from busguard.devtools.broker import EmbeddedBroker, free_port  # noqa: E402
from busguard.protocol.attestation import HEADER_DECISION_ID, HEADER_OUTCOME, HEADER_REASON  # noqa: E402
from busguard.protocol.keyfile import new_identity, read_key, write_key  # noqa: E402
from busguard.runtime.clients import partitions_at  # noqa: E402
from busguard.runtime.topics import create_topics  # noqa: E402
from busguard.sdk.sender import Sender, SignedRecord  # noqa: E402
from busguard.wiring import init_state  # noqa: E402

TOPICS = Topics.under("bench")


def write_config(tmp: Path, bootstrap: str, args: argparse.Namespace) -> Path:
    config = tmp / "busguard.toml"
    config.write_text(
        embedded_config(
            bootstrap,
            group_id="bench-guard",
            topics=TOPICS,
            comment="Written by benchmarks/e2e_throughput.py.",
            kafka={"create_topics": False, "compression": args.compression},
            state={"synchronous": args.synchronous},
            batch={"max_records": args.max_records, "verify_threads": args.verify_threads},
            log={"level": "warning"},
        )
    )
    # New topics, a new group: a genesis store (`busguard state init`), or the
    # guard would warm and refuse the first 30 s of records as store_warming.
    init_state(load_config(config, env={}), time.time_ns() // 1_000_000)
    return config


class GuardProcess:
    def __init__(self, config: Path, port: int, log: Path, profile: str | None = None) -> None:
        self.port = port
        self.log = log
        env = {k: v for k, v in os.environ.items() if not k.startswith("BUSGUARD_")}
        env["BUSGUARD_OPS__PORT"] = str(port)
        env["PYTHONPATH"] = str(REPO)
        self._out = open(log, "wb")
        python = [sys.executable, "-m", "cProfile", "-o", profile] if profile else [sys.executable]
        self.proc = subprocess.Popen(
            [*python, "-m", "busguard.cli", "run", "--config", str(config)], stdout=self._out, stderr=subprocess.STDOUT, env=env
        )

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as r:
                return int(r.status), r.read().decode()
        except OSError:
            return 0, ""

    def wait_ready(self, timeout: float = 60) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"guard exited ({self.proc.returncode}):\n{self.log.read_text(errors='replace')[-3000:]}")
            if self.get("/healthz")[0] == 200:
                return time.monotonic() - t0
            time.sleep(0.05)
        raise RuntimeError(f"guard not ready after {timeout}s")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        finally:
            self._out.close()


async def produce_and_watch(bootstrap: str, records: list[tuple[str, bytes, SignedRecord]], timeout: float) -> dict[str, Any]:
    parts = await partitions_at(bootstrap, [TOPICS.audit], client_id="bench-watcher", request_timeout_ms=40_000)
    tps = [TopicPartition(TOPICS.audit, p) for p in parts.get(TOPICS.audit, [])]
    watcher = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=50)
    await watcher.start()
    watcher.assign(tps)
    await watcher.seek_to_beginning(*tps)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False, acks="all", linger_ms=5, max_batch_size=256 * 1024)
    await producer.start()
    seen: set[bytes] = set()
    outcomes: dict[str, int] = {}
    reasons: dict[str, int] = {}
    n = len(records)
    timing: dict[str, float] = {}

    async def produce() -> None:
        futures = []
        for topic, key, rec in records:
            futures.append(await producer.send(topic, value=rec.value, key=key, headers=rec.headers))
        await asyncio.gather(*futures)
        timing["produced"] = time.perf_counter()

    try:
        t0 = time.perf_counter()
        task = asyncio.create_task(produce())
        deadline = time.monotonic() + timeout
        last = t0
        while len(seen) < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out: {len(seen)} of {n} audit records after {timeout}s")
            batch = await watcher.getmany(timeout_ms=100, max_records=20_000)
            for recs in batch.values():
                for r in recs:
                    h = dict(r.headers)
                    did = h.get(HEADER_DECISION_ID, b"")
                    if did not in seen:
                        seen.add(did)
                        o = h.get(HEADER_OUTCOME, b"?").decode()
                        outcomes[o] = outcomes.get(o, 0) + 1
                        why = h.get(HEADER_REASON, b"?").decode()
                        reasons[why] = reasons.get(why, 0) + 1
                        last = time.perf_counter()
        await task
    finally:
        await producer.stop()
        await watcher.stop()
    return {"elapsed_s": last - t0, "produce_s": timing["produced"] - t0, "outcomes": outcomes, "reasons": reasons}


_SAMPLE = re.compile(r"^(busguard_batch_(?:seconds|records)_(?:bucket|sum|count))(?:\{le=\"([^\"]+)\"\})? ([0-9.e+-]+)$", re.M)


_PHASE = re.compile(r'^busguard_batch_phase_seconds_sum\{phase="([a-z_]+)"\} ([0-9.e+-]+)$', re.M)


def phase_sums(metrics: str) -> dict[str, float]:
    """Total seconds per batch-protocol phase, from busguard_batch_phase_seconds."""
    return {phase: float(v) for phase, v in _PHASE.findall(metrics)}


def histogram(metrics: str, name: str) -> dict[str, Any]:
    buckets: list[tuple[float, float]] = []
    total = count = 0.0
    for metric, le, value in _SAMPLE.findall(metrics):
        if metric == f"{name}_bucket":
            buckets.append((float("inf") if le == "+Inf" else float(le), float(value)))
        elif metric == f"{name}_sum":
            total = float(value)
        elif metric == f"{name}_count":
            count = float(value)

    def quantile(q: float) -> float | None:
        if not count:
            return None
        rank, prev_le, prev_n = q * count, 0.0, 0.0
        for le, n in sorted(buckets):
            if n >= rank:
                if le == float("inf"):
                    return prev_le
                return prev_le + (le - prev_le) * ((rank - prev_n) / (n - prev_n) if n > prev_n else 1.0)
            prev_le, prev_n = le, n
        return None

    return {"count": int(count), "mean": total / count if count else None, "p50_est": quantile(0.5), "p99_est": quantile(0.99)}


def load_relay() -> Any:
    spec = importlib.util.spec_from_file_location("relay_baseline", REPO / "benchmarks" / "relay_baseline.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def relay(bootstrap: str, n: int, payload_bytes: int, partitions: int) -> dict[str, int]:
    rb = load_relay()
    src = "relay-in"
    await create_topics(bootstrap, [src], partitions=partitions)
    await rb.fill(bootstrap, src, n, os.urandom(payload_bytes), partitions)
    out: dict[str, int] = {}
    for name, fn in (("send", rb.relay_send), ("send_batch", rb.relay_send_batch)):
        dst = f"relay-out-{name}"
        await create_topics(bootstrap, [dst], partitions=partitions)
        seconds = await rb.run_relay(bootstrap, src, dst, f"relay-{name}", n, fn, 2000)
        await rb.verify(bootstrap, dst, n, partitions)
        out[name] = round(n / seconds)
    return out


async def main(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {
        "bench": "e2e_throughput",
        "records": args.records,
        "senders": args.senders,
        "payload_bytes": args.payload_bytes,
    }
    with tempfile.TemporaryDirectory(prefix="busguard-e2e-") as tmpdir:
        tmp = Path(tmpdir)
        async with EmbeddedBroker(log_dir=tmp) as broker:
            await create_topics(broker.bootstrap, TOPICS.all(), partitions=args.partitions)
            config = write_config(tmp, broker.bootstrap, args)
            write_key(tmp / "guard.key", new_identity())
            # The senders are enrolled before the guard starts; their records are
            # signed only once it is ready (store warming).
            senders = [new_identity() for _ in range(args.senders)]
            (tmp / "keys.toml").write_text("\n".join(f'[[agent]]\nid = "{s.agent_id}"\n' for s in senders))
            workload_tmp = tmp / "senders"
            workload_tmp.mkdir()
            guard_log = tmp / "guard.log"
            guard = None
            try:
                guard = GuardProcess(config, free_port(), guard_log, args.profile)
                result["guard_ready_s"] = round(guard.wait_ready(), 2)
                t_sign = time.perf_counter()
                records, duplicates = sign_with(
                    senders, workload_tmp, args.records, args.duplicates, args.payload_bytes, args.shared_session
                )
                result["sign_s"] = round(time.perf_counter() - t_sign, 2)
                result["duplicates"] = duplicates
                run = await produce_and_watch(broker.bootstrap, records, args.timeout)
                await asyncio.sleep(0.5)  # the last batch's latency is observed after its commit
                _, metrics = guard.get("/metrics")
            finally:
                if guard is not None:
                    result["guard_exit"] = guard.stop()
            expected = {"forward": args.records - duplicates, "duplicate": duplicates}
            result["reasons"] = run["reasons"]
            if run["outcomes"] != expected and not args.shared_session:
                raise RuntimeError(
                    f"outcomes {run['outcomes']} ({run['reasons']}) != expected {expected}; guard log:\n{guard_log.read_text(errors='replace')[-3000:]}"
                )
            result["e2e_rps"] = round(args.records / run["elapsed_s"])
            result["elapsed_s"] = round(run["elapsed_s"], 3)
            result["produce_rps"] = round(args.records / run["produce_s"])
            seconds = histogram(metrics, "busguard_batch_seconds")
            sizes = histogram(metrics, "busguard_batch_records")
            result["batches"] = seconds["count"]
            result["batch_records_mean"] = round(sizes["mean"], 1) if sizes["mean"] else None
            result["batch_ms_mean"] = round(seconds["mean"] * 1000, 1) if seconds["mean"] else None
            result["batch_ms_p50_est"] = round(seconds["p50_est"] * 1000, 1) if seconds["p50_est"] else None
            result["batch_ms_p99_est"] = round(seconds["p99_est"] * 1000, 1) if seconds["p99_est"] else None
            if seconds["mean"] and sizes["mean"]:
                result["guard_us_per_record_in_batch"] = round(seconds["mean"] / sizes["mean"] * 1e6, 1)
                result["phase_us_per_record"] = {
                    phase: round(total / seconds["count"] / sizes["mean"] * 1e6, 1) for phase, total in phase_sums(metrics).items()
                }
            result.update(await audit_rate(config, tmp / "guard.key", args.records))
            if not args.no_relay:
                rel = await relay(broker.bootstrap, args.records, args.payload_bytes, args.partitions)
                result["relay_rps_send"] = rel["send"]
                result["relay_rps_send_batch"] = rel["send_batch"]
                result["ratio_vs_relay_send"] = round(result["e2e_rps"] / rel["send"], 3)
                result["ratio_vs_relay_send_batch"] = round(result["e2e_rps"] / rel["send_batch"], 3)
    result["config"] = {
        "max_records": args.max_records,
        "verify_threads": args.verify_threads,
        "synchronous": args.synchronous,
        "partitions": args.partitions,
    }
    result["python"] = platform.python_version()
    result["cpus"] = os.cpu_count()
    return result


async def audit_rate(config: Path, guard_key: Path, records: int) -> dict[str, Any]:
    """`busguard audit` over the log the guard just wrote (audit + downstream
    topics), in input records judged per second. The auditor detects the end
    of the log by an idle period (tansu's end offsets are unreliable), which
    is subtracted; the report must be clean."""
    idle_ms = DEFAULT_IDLE_MS
    t0 = time.perf_counter()
    report = await asyncio.to_thread(
        run_audit, load_config(config, env={}), guard_public_key=read_key(guard_key).public_key, idle_ms=idle_ms
    )
    reading_s = time.perf_counter() - t0 - idle_ms / 1000
    if not report.ok:
        raise RuntimeError(f"audit of the benchmark's log is not clean: {report.violations[:3]}")
    return {"audit_rps": round(records / reading_s), "audit_s": round(reading_s, 2)}


def sign_with(
    senders: list[Any], tmp: Path, n: int, duplicate_share: float, payload_bytes: int, shared_session: bool = False
) -> tuple[list[tuple[str, bytes, SignedRecord]], int]:
    rng = random.Random(7)
    # Half the senders use sessions, one session per (sender, input topic): a
    # session's sequences must reach the guard in order within window_size, and
    # two topics are consumed independently (docs/operations.md).
    # (--shared-session: one session per sender across both topics, to show
    # the `sequence_too_old` refusals that causes under load.)
    signers = {
        (i, kind): Sender(ident.seed, session_path=tmp / f"sender-{i}.{kind}.session.json" if i % 2 == 0 else None)
        for i, ident in enumerate(senders)
        for kind in ("handoff", "ack")
    }
    if shared_session:
        for i, _ in enumerate(senders):
            signers[(i, "ack")] = signers[(i, "handoff")]
    filler = "x" * max(0, payload_bytes - 60)
    dup_every = round(1 / duplicate_share) if duplicate_share > 0 else 0
    out: list[tuple[str, bytes, SignedRecord]] = []
    history: list[list[tuple[str, bytes, SignedRecord]]] = [[] for _ in senders]
    duplicates = t = 0
    while len(out) < n:
        s = t % len(senders)
        if dup_every and t % dup_every == dup_every - 1 and len(history[s]) >= 2:
            out.append(rng.choice(history[s][-20:]))  # an exact re-send, after its original, same partition
            duplicates += 1
        else:
            kind = "ack" if t % 3 == 0 else "handoff"
            payload = json.dumps({"op": "transform", "task": t, "pad": filler}).encode()
            rec = signers[(s, kind)].sign(kind=kind, task_id=f"task-{t}", receiver="executor", payload=payload)
            item = (TOPICS.acks if kind == "ack" else TOPICS.handoffs, senders[s].agent_id.encode(), rec)
            out.append(item)
            history[s].append(item)
        t += 1
    return out, duplicates


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--records", type=int, default=20_000)
    p.add_argument("--senders", type=int, default=8)
    p.add_argument("--duplicates", type=float, default=0.05, help="share of inputs that are exact re-sends (default 0.05)")
    p.add_argument("--payload-bytes", type=int, default=300)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--max-records", type=int, default=500, help="[batch] max_records (default: the config default)")
    p.add_argument("--verify-threads", type=int, default=2)
    p.add_argument("--synchronous", choices=["full", "normal"], default="full")
    p.add_argument(
        "--compression",
        choices=["none", "gzip", "snappy", "lz4", "zstd"],
        default="gzip",
        help="[kafka] compression (default: the config default)",
    )
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--no-relay", action="store_true", help="skip the relay baseline")
    p.add_argument("--profile", metavar="FILE", help="run the guard under cProfile and write its stats to FILE")
    p.add_argument("--shared-session", action="store_true", help="one session per sender across both input topics (shows sequence_too_old)")
    return p.parse_args(argv)


if __name__ == "__main__":
    import logging

    structlog.configure(
        logger_factory=structlog.PrintLoggerFactory(sys.stderr), wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING)
    )
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    print(json.dumps(asyncio.run(main(parse_args()))))
