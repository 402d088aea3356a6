"""The hand-written guard busguard is compared with (issue 13): the loop a
user would write in an afternoon to "verify and forward", kept whole here so
readers can judge what the comparison is against.

It checks what a receipt's signature binds (the payload hash and the Ed25519
signature over the receipt bytes, docs/protocol.md §3) and nothing else: no
freshness, no nonce or session replay check, no task index, no decision
record, no dead-letter or audit output, no crash-safe state. Invalid records
are dropped and counted. One thread, one process, like `busguard run`.

    python benchmarks/naive_guard.py BOOTSTRAP GROUP KEYS.json IN=OUT [IN=OUT ...]

KEYS.json maps sender id to hex Ed25519 public key. Stops on SIGTERM.
$FETCH_MAX_WAIT_MS sets the consumer's long poll (default aiokafka's 500 ms;
on tansu it delays records at low load, see docs/notes-broker.md).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import signal
import sys

import nacl.bindings
import nacl.exceptions
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

CONTEXT = b"busguard/receipt/v1\x00"  # the signature covers CONTEXT || receipt bytes


async def guard(bootstrap: str, group: str, keys: dict[str, bytes], routes: dict[str, str]) -> int:
    consumer = AIOKafkaConsumer(
        *routes,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,  # Apache Kafka refuses less (group.min.session.timeout.ms)
        heartbeat_interval_ms=500,
        fetch_max_wait_ms=int(os.environ.get("FETCH_MAX_WAIT_MS", "500")),
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False, acks="all", linger_ms=5)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await consumer.start()
    await producer.start()
    dropped = 0
    try:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=100, max_records=500)
            deliveries = []
            for tp, records in batch.items():
                for r in records:
                    h = dict(r.headers)
                    try:
                        raw = h["busguard-receipt"]
                        receipt = json.loads(raw)
                        if hashlib.sha256(r.value).hexdigest() != receipt["payload_hash"]:
                            raise ValueError("payload hash")
                        sig = base64.urlsafe_b64decode(h["busguard-signature"] + b"==")
                        nacl.bindings.crypto_sign_open(sig + CONTEXT + raw, keys[receipt["sender"]])
                    except (KeyError, TypeError, ValueError, nacl.exceptions.CryptoError):
                        dropped += 1
                        continue
                    out = routes[tp.topic]
                    deliveries.append(await producer.send(out, r.value, key=r.key, partition=tp.partition, headers=list(r.headers)))
            await asyncio.gather(*deliveries)  # every output delivered before the commit
            if batch:
                await consumer.commit({tp: recs[-1].offset + 1 for tp, recs in batch.items()})
    finally:
        await producer.stop()
        await consumer.stop()
    return dropped


def main(argv: list[str]) -> None:
    bootstrap, group, keys_path, *pairs = argv
    with open(keys_path) as f:
        keys = {agent: bytes.fromhex(pk) for agent, pk in json.load(f).items()}
    routes = dict(pair.split("=", 1) for pair in pairs)
    dropped = asyncio.run(guard(bootstrap, group, keys, routes))
    print(json.dumps({"dropped": dropped}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
