"""What the awarder and the bidders share: the net file, their key, Kafka clients and a done-set.

The net file (`DIR/net.json`, written by run.py or by hand) says where the
agents meet busguard:

    {"bootstrap": "127.0.0.1:9092",
     "outbox": "<the topic busguard run consumes>",
     "inbox": "<the topic it forwards admitted records to>",
     "guard_public_key": "<busguard's public key, multikey z6Mk...>",
     "audience": "cnet.bidders",
     "tag": "<prefix of the agents' consumer groups>"}

and each agent's key is `DIR/<name>.key` (`busguard keygen`'s format).
Every record an agent sends goes to `outbox`, signed; every record it acts
on comes from `inbox`, admitted by busguard for it (`AdmittingConsumer`).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from busguard.protocol.identity import multikey_decode
from busguard.protocol.keyfile import read_key
from busguard.protocol.timestamps import format_timestamp
from busguard.sdk import SigningProducer, SqliteDoneSet
from busguard.sdk.award import READERS
from busguard.sdk.consumer import AdmittingConsumer
from busguard.sdk.sender import Sender

NET_FILE: Final = "net.json"


class Net(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    bootstrap: str
    outbox: str
    inbox: str
    guard_public_key: str
    audience: str = "cnet.bidders"
    tag: str = "award"


def load_net(directory: Path) -> Net:
    path = directory / NET_FILE
    try:
        return msgspec.json.decode(path.read_bytes(), type=Net)
    except (OSError, msgspec.MsgspecError) as exc:
        raise SystemExit(f"{path}: {exc}") from None


def write_net(directory: Path, net: Net) -> None:
    (directory / NET_FILE).write_bytes(msgspec.json.format(msgspec.json.encode(net), indent=2) + b"\n")


class Agent:
    """One agent's Kafka clients, signing key (with a crash-safe session) and done-set."""

    def __init__(self, directory: Path, name: str) -> None:
        self.net = load_net(directory)
        self.name = name
        ident = read_key(directory / f"{name}.key")
        self.sender = Sender(ident.seed, session_path=directory / f"{name}.session")
        self.id = self.sender.agent_id
        self.guard_key = multikey_decode(self.net.guard_public_key)
        self.done = SqliteDoneSet(directory / f"{name}.db")  # the agent's own database: effects and done-marks
        self._clients: list[AIOKafkaConsumer | AIOKafkaProducer] = []

    async def producer(self, *, crash_after_sending: str | None = None) -> SigningProducer:
        p = AIOKafkaProducer(bootstrap_servers=self.net.bootstrap, acks="all", enable_idempotence=False)
        await p.start()
        self._clients.append(p)
        wire: Any = p if crash_after_sending is None else CrashAfterSending(p, crash_after_sending, self.name)
        return SigningProducer(wire, self.sender)

    async def inbox(self, role: str, *, addressed_to: str) -> AdmittingConsumer:
        """Records busguard admitted for `addressed_to` (this agent, or an
        audience it belongs to), read by the award readers; one consumer group per role."""
        inbox = await AdmittingConsumer.open(
            self.net.inbox,
            bootstrap_servers=self.net.bootstrap,
            group_id=f"{self.net.tag}.{self.name}.{role}",
            guard_public_key=self.guard_key,
            agent_id=addressed_to,
            readers=READERS,
        )
        self._clients.append(inbox.consumer)
        return inbox

    async def close(self) -> None:
        for client in reversed(self._clients):
            await client.stop()
        self.done.close()


class CrashAfterSending:
    """For the tests: SIGKILL this process right after the broker acknowledged
    the first record of `kind`, before ActOnce drops it from the outbox, so
    the restarted agent sends the very same bytes again."""

    def __init__(self, producer: AIOKafkaProducer, kind: str, name: str) -> None:
        self.producer = producer
        self.kind = kind.encode()
        self.name = name

    async def send_and_wait(
        self, topic: str, *, value: bytes, key: bytes | None, headers: Sequence[tuple[str, bytes]], partition: int | None = None
    ) -> Any:
        sent = await self.producer.send_and_wait(topic, value=value, key=key, headers=list(headers), partition=partition)
        receipt = dict(headers).get("busguard-receipt", b"")
        if msgspec.json.decode(receipt).get("kind", "").encode() == self.kind:
            say(self.name, f"CRASH: killed after sending a {self.kind.decode()}, before dropping it from the outbox")
            os.kill(os.getpid(), signal.SIGKILL)
        return sent


def stop_on_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT: the loops finish their step and exit."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


def in_ms(ms: int) -> str:
    """A protocol timestamp `ms` from now."""
    return format_timestamp(time.time_ns() // 1_000_000 + ms)


def say(agent: str, message: str) -> None:
    print(f"{agent}: {message}", flush=True)


def die(message: str, code: int = 2) -> None:
    print(message, file=sys.stderr, flush=True)
    raise SystemExit(code)
