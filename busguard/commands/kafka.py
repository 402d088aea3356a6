"""`busguard kafka`: Apache Kafka itself on loopback, for an operator trying busguard on the broker users run.

Beside `busguard broker` (the embedded tansu, the demo's default): this one
fetches the pinned Apache Kafka with Maven (first time only), formats and starts
one KRaft node or a cluster of them, prints the bootstrap address and runs until
Ctrl-C. Needs Java 17+ and Maven; without them it stops with one line.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

__all__ = ["cmd_kafka"]


def cmd_kafka(args: argparse.Namespace) -> int:
    from busguard.commands.services import _install_stop
    from busguard.devtools.broker import BrokerError
    from busguard.devtools.kafka import ApacheKafka, KafkaUnavailable
    from busguard.runtime.logs import configure

    configure("console", "info")

    async def main() -> None:
        kafka = ApacheKafka(brokers=args.brokers, log_dir=args.dir, heap_mb=args.heap_mb)
        # Ctrl-C is ours before the ready line (whoever reads it may signal at
        # once); one during the start stops the nodes once they are up
        stopped = asyncio.Event()
        _install_stop(stopped.set)
        await kafka.astart(args.port or None)  # 0: free ports; a failed start stops what it started
        if stopped.is_set():
            await kafka.astop()
            return
        nodes = (
            "1 KRaft node" if args.brokers == 1 else f"{args.brokers} KRaft nodes, replication factor {args.brokers}, min.insync.replicas 2"
        )
        kept = f"logs kept under {args.dir}" if args.dir else f"logs under {kafka.log_dir}"
        print(
            f"Apache Kafka {kafka.version} ready at {kafka.bootstrap} ({nodes}, -Xmx{args.heap_mb}m each, "
            f"auto topic creation off; {kept}; the data is removed when it stops)",
            flush=True,
        )
        try:
            await stopped.wait()
        finally:
            await kafka.astop()

    try:
        asyncio.run(main())
    except KafkaUnavailable as exc:
        print(f"busguard: {exc}", file=sys.stderr)
        return 2
    except BrokerError as exc:
        print(f"busguard: {exc}", file=sys.stderr)
        return 1
    return 0
