"""What the agent-side interceptors cost over bare aiokafka (issue 22), in one run.

On one embedded tansu broker, every round runs each contender once, in
rotating order, on the same records, in this process:

* producer side, N handoffs with realistic JSON payloads, pipelined (send,
  then await every acknowledgment):
  ``produce_bare`` (``AIOKafkaProducer.send`` of the payload with no
  headers), ``produce_hand`` (what an agent wrote by hand before the SDK:
  ``Sender.sign`` with a session, then ``send``), ``produce_sdk``
  (``SigningProducer.submit``);
* consumer side, the same N records as busguard forwards them (made by a
  real ``Guard`` offline, batch-sealed as by default, addressed to the
  reader), read from offset 0 by a consumer of its own:
  ``consume_bare`` (``getmany`` and nothing else), ``consume_hand``
  (``getmany``, then ``open_admitted`` with a ``HeadCache`` per record,
  catching its errors), ``consume_sdk`` (``AdmittingConsumer.getmany``).

A warm-up round runs every contender once first and is not counted. CPU
per record is this process's user + system time (``time.process_time``)
over the contender's span, divided by N; the broker is a separate process
and not counted. Ratios are per round, then the median. Two ratios answer
two questions: ``*_sdk / *_hand`` is what the interceptor adds over doing
the same protocol work by hand (its wrapping), and ``*_sdk / *_bare`` is
the whole price of the protocol on that side (an Ed25519 signature per
record out; the batch head's signature once per batch plus, per record, an
inclusion proof, the receipt decode and the payload hash in).

    python benchmarks/interceptors.py [--records 5000] [--rounds 3] [--check]

``--check`` exits 1 unless both ``sdk / hand`` medians are at most 1.10.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import structlog  # noqa: E402
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: E402

from busguard.config import load_config  # noqa: E402
from busguard.devtools.broker import EmbeddedBroker  # noqa: E402
from busguard.protocol.attestation import AttestationError, HeadCache  # noqa: E402
from busguard.protocol.keyfile import Identity  # noqa: E402
from busguard.protocol.registry import KeyRegistry  # noqa: E402
from busguard.protocol.signing import public_key_from_seed  # noqa: E402
from busguard.runtime.guard import Guard  # noqa: E402
from busguard.runtime.watched import WatchedFile  # noqa: E402
from busguard.sdk import AdmittingConsumer, Sender, SigningProducer, open_admitted  # noqa: E402
from busguard.state.sqlite.store import SqliteStore  # noqa: E402
from busguard.testing import agent, seed  # noqa: E402

PAYLOAD = b'{"op":"transform","input":"s3://bucket/in.parquet","params":{"mode":"fast"}}' * 4
READER = agent("executor")
PARTITIONS = 4


class _Rec:
    """What `Guard.prepare` reads of a consumed record."""

    __slots__ = ("topic", "partition", "offset", "key", "value", "headers")

    def __init__(self, topic: str, partition: int, offset: int, key: bytes, value: bytes, headers: list[tuple[str, bytes]]) -> None:
        self.topic, self.partition, self.offset, self.key, self.value, self.headers = topic, partition, offset, key, value, headers


async def forwards(tmp: Path, n: int) -> tuple[bytes, list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]]]:
    """N forwards as a real guard emits them (batch seal), and the guard's public key."""
    planners = [Sender(seed(f"planner-{i}")) for i in range(8)]
    (tmp / "keys.toml").write_text("".join(f'[[agent]]\nid = "{s.agent_id}"\n' for s in planners))
    (tmp / "busguard.toml").write_text('[[routes]]\nname = "r"\ninputs = ["agents.in"]\ndownstream = "out"\n[ops]\nport = 0\n')
    now = time.time_ns() // 1_000_000
    ident = Identity(seed=seed("guard"), public_key=public_key_from_seed(seed("guard")), agent_id=agent("guard"))
    store = SqliteStore(tmp / "state.db", now_ms=now - 60_000, synchronous="OFF", genesis=True)
    guard = Guard(
        load_config(tmp / "busguard.toml", env={}),
        keys=WatchedFile(tmp / "keys.toml", KeyRegistry.load, what="key registry"),
        identity=ident,
        store=store,
        clock_ms=lambda: now,
    )
    out: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]] = []
    for start in range(0, n, 500):
        chunk = []
        for i in range(start, min(n, start + 500)):
            r = planners[i % 8].sign(kind="handoff", task_id=f"task-{i}", receiver=READER, payload=PAYLOAD)
            chunk.append(_Rec("agents.in", i % PARTITIONS, i // PARTITIONS, b"k", r.value, r.headers))
        outputs = await guard.process_prepared(await guard.prepare(chunk))
        out.extend((o.key, o.value, o.headers) for o in outputs if o.topic == "out")
    store.close()
    assert len(out) == n, f"{len(out)} forwards for {n} inputs"
    return ident.public_key, out


async def fresh_topic(admin: AIOKafkaAdminClient, prefix: str) -> str:
    name = f"{prefix}.{uuid.uuid4().hex[:8]}"
    await admin.create_topics([NewTopic(name, num_partitions=PARTITIONS, replication_factor=1)])
    return name


async def run(args: argparse.Namespace) -> dict[str, Any]:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    n = args.records
    with tempfile.TemporaryDirectory() as tmp:
        guard_pk, fwd = await forwards(Path(tmp), n)
        async with EmbeddedBroker(log_dir=Path(tmp)) as broker:
            bootstrap = broker.bootstrap
            admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
            await admin.start()
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, max_batch_size=256 * 1024)
            await producer.start()
            source = await fresh_topic(admin, "bench.forwards")
            acks = [await producer.send(source, value=v, key=k, headers=h) for k, v, h in fwd]
            await asyncio.gather(*acks)
            hand_sender = Sender(seed("executor-hand"), session_path=Path(tmp) / "hand.session.json")
            sdk = SigningProducer(producer, Sender(seed("executor-sdk"), session_path=Path(tmp) / "sdk.session.json"))

            async def produce_bare() -> None:
                topic = await fresh_topic(admin, "bench.bare")
                t0 = time.process_time()
                futs = [await producer.send(topic, value=PAYLOAD, key=b"executor") for _ in range(n)]
                await asyncio.gather(*futs)
                spans["produce_bare"] = (time.process_time() - t0) / n * 1e6

            async def produce_hand() -> None:
                topic = await fresh_topic(admin, "bench.hand")
                key = hand_sender.agent_id.encode()
                t0 = time.process_time()
                futs = []
                for i in range(n):
                    r = hand_sender.sign(kind="ack", task_id=f"task-{i}", receiver="planner", payload=PAYLOAD)
                    futs.append(await producer.send(topic, value=r.value, key=key, headers=r.headers))
                await asyncio.gather(*futs)
                spans["produce_hand"] = (time.process_time() - t0) / n * 1e6

            async def produce_sdk() -> None:
                topic = await fresh_topic(admin, "bench.sdk")
                t0 = time.process_time()
                futs = [
                    (await sdk.submit(topic, kind="ack", task_id=f"task-{i}", receiver="planner", payload=PAYLOAD))[1] for i in range(n)
                ]
                await asyncio.gather(*futs)
                spans["produce_sdk"] = (time.process_time() - t0) / n * 1e6

            def consumer() -> AIOKafkaConsumer:
                return AIOKafkaConsumer(source, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)

            async def consume(name: str, handle: Callable[[list[Any]], Awaitable[int]]) -> None:
                c = consumer()
                await c.start()
                try:
                    first = await c.getmany(timeout_ms=5000, max_records=500)  # joins and fetches; not timed
                    untimed = got = await handle([r for rs in first.values() for r in rs])
                    t0 = time.process_time()
                    while got < n:
                        batch = await c.getmany(timeout_ms=2000, max_records=500)
                        got += await handle([r for rs in batch.values() for r in rs])
                    spans[name] = (time.process_time() - t0) / max(1, got - untimed) * 1e6
                finally:
                    await c.stop()

            async def consume_bare() -> None:
                async def handle(records: list[Any]) -> int:
                    return len(records)

                await consume("consume_bare", handle)

            async def consume_hand() -> None:
                heads = HeadCache()

                async def handle(records: list[Any]) -> int:
                    ok = 0
                    for r in records:
                        try:
                            open_admitted(r.value, r.headers, guard_pk, READER, heads=heads)
                            ok += 1
                        except AttestationError:
                            pass
                    assert ok == len(records)
                    return len(records)

                await consume("consume_hand", handle)

            async def consume_sdk() -> None:
                inbox = AdmittingConsumer(None, guard_public_key=guard_pk, agent_id=READER)

                async def handle(records: list[Any]) -> int:
                    batch = inbox.admit(records)
                    assert not batch.refusals
                    return len(records)

                await consume("consume_sdk", handle)

            contenders: dict[str, Callable[[], Awaitable[None]]] = {
                "produce_bare": produce_bare,
                "produce_hand": produce_hand,
                "produce_sdk": produce_sdk,
                "consume_bare": consume_bare,
                "consume_hand": consume_hand,
                "consume_sdk": consume_sdk,
            }
            per: dict[str, list[float]] = {k: [] for k in contenders}
            spans: dict[str, float] = {}
            names = list(contenders)
            for name in names:  # a warm-up round, not counted: first-use costs land on no contender
                await contenders[name]()
            for rnd in range(args.rounds):
                order = names[rnd % len(names) :] + names[: rnd % len(names)]
                for name in order:
                    await contenders[name]()
                    per[name].append(spans[name])
            await producer.stop()
            await admin.close()
    result: dict[str, Any] = {"bench": "interceptors", "records": n, "rounds": args.rounds, "loadavg": os.getloadavg()[0]}
    for name, xs in per.items():
        result[f"{name}_us"] = round(statistics.median(xs), 1)
        result[f"{name}_us_range"] = [round(min(xs), 1), round(max(xs), 1)]
    for side in ("produce", "consume"):
        for base in ("hand", "bare"):
            rs = [s / b for s, b in zip(per[f"{side}_sdk"], per[f"{side}_{base}"], strict=True)]
            result[f"{side}_sdk_over_{base}"] = round(statistics.median(rs), 3)
            result[f"{side}_sdk_over_{base}_range"] = [round(min(rs), 3), round(max(rs), 3)]
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--records", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--check", action="store_true", help="exit 1 unless sdk / hand <= 1.10 on both sides")
    args = p.parse_args()
    result = asyncio.run(run(args))
    for side in ("produce", "consume"):
        print(
            f"{side}: bare {result[f'{side}_bare_us']} µs, by hand {result[f'{side}_hand_us']} µs, sdk {result[f'{side}_sdk_us']} µs "
            f"per record; sdk/hand {result[f'{side}_sdk_over_hand']}, sdk/bare {result[f'{side}_sdk_over_bare']}"
        )
    print(json.dumps(result))
    if args.check and max(result["produce_sdk_over_hand"], result["consume_sdk_over_hand"]) > 1.10:
        sys.exit(1)


if __name__ == "__main__":
    main()
