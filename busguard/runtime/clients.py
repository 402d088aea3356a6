"""Every aiokafka client busguard builds, built here.

One place decides what a client of each role looks like, so the tolerant
fetch decoding (busguard.runtime.tolerant_fetch) and the settings derived from the
config (client id, timeouts, fetch sizes, acks, idempotence, compression)
cannot be forgotten by one of the readers. Roles:

* the batch loop's group consumer and its producer (guard and reconciler);
* a *reader*: a group-less consumer that is assigned partitions by hand and
  reads from the beginning (the auditor, the operator commands, the demo tap);
* a plain *producer* for one-off sends (operator commands, the demo's agents).

Partition discovery goes through the admin client's public describe call
(``partitions_of``), never a consumer's private metadata client, and asks
for all topics so the question auto-creates nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

from busguard.config import Config
from busguard.config_checks import group_instance_id, transactional_id
from busguard.runtime.batch_size import producer_batch_size
from busguard.runtime.tolerant_fetch import consumer_options

__all__ = ["SortedRoundRobin", "group_consumer", "loop_producer", "partitions_at", "partitions_of", "producer", "reader"]

_FETCH_MAX_BYTES = 52_428_800  # aiokafka's default, stated: one fetch of many partitions
_FETCH_HEADROOM = 262_144  # record headers and batch framing beyond the largest payload


def _client_id(cfg: Config, name: str) -> str:
    return f"{cfg.kafka.client_id}-{name}"


class SortedRoundRobin(RoundRobinPartitionAssignor):  # type: ignore[misc]
    """aiokafka's round-robin assignor, with the member metadata in one order.

    aiokafka lists a member's topics in the order of its subscription set,
    which Python's per-process string hashing shuffles. A static member
    started again could then send JoinGroup metadata that differs from its
    predecessor's only in topic order. Kafka takes changed metadata from a
    known static member as a reason to rebalance (KIP-345), which is what static
    membership exists to avoid. tansu puts the group back to forming and
    then waits for a leader that never rejoins, so the member is never
    assigned (docs/notes-broker.md). Sorted, the bytes are the same in every
    process. The protocol name stays "roundrobin", so members running
    aiokafka's own assignor still agree on the protocol."""

    @classmethod
    def metadata(cls, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        return ConsumerProtocolMemberMetadata(cls.version, sorted(topics), b"")


def group_consumer(cfg: Config, *, group_id: str, role: str) -> AIOKafkaConsumer:
    """The batch loop's consumer: a member of `group_id`, manual commits, tolerant.

    With kafka.group_instance_id set it is a static member (KIP-345) under
    that name in every group it joins (the guard's and the reconciler's are
    different groups, so one name per process is enough). aiokafka then sends
    no LeaveGroup on stop: the partitions wait for this name for up to
    session_timeout_ms, which is the point (docs/operations.md)."""
    k = cfg.kafka
    return AIOKafkaConsumer(
        bootstrap_servers=k.bootstrap_servers,
        group_id=group_id,
        group_instance_id=group_instance_id(cfg),
        partition_assignment_strategy=(SortedRoundRobin,),
        client_id=_client_id(cfg, f"{role}-consumer"),
        enable_auto_commit=False,
        auto_offset_reset=k.auto_offset_reset,
        session_timeout_ms=k.session_timeout_ms,
        heartbeat_interval_ms=k.heartbeat_interval_ms,
        max_poll_interval_ms=k.max_poll_interval_ms,
        # aiokafka defaults this to session_timeout_ms; a rebalance must be
        # allowed to wait for the in-flight batch (revoke_budget_ms).
        rebalance_timeout_ms=k.rebalance_timeout_ms,
        request_timeout_ms=k.request_timeout_ms,
        max_partition_fetch_bytes=max(1_048_576, cfg.batch.max_payload_bytes + _FETCH_HEADROOM),
        fetch_max_bytes=_FETCH_MAX_BYTES,
        fetch_max_wait_ms=k.fetch_max_wait_ms,
        # a record the client cannot decode arrives as an Undecodable
        # placeholder instead of raising out of getmany()
        **consumer_options(cfg.batch.max_inflated_bytes),
    )


def loop_producer(cfg: Config, *, role: str) -> AIOKafkaProducer:
    """The batch loop's producer: batches sized for the brokers' limit after
    compression; transactional when kafka.transactional_id is set."""
    k = cfg.kafka
    return AIOKafkaProducer(
        bootstrap_servers=k.bootstrap_servers,
        client_id=_client_id(cfg, f"{role}-producer"),
        acks="all" if k.acks == "all" else 1,
        enable_idempotence=k.idempotence,
        transactional_id=transactional_id(cfg, role),
        linger_ms=5,
        # Batches fill to a size that compresses to at most the brokers'
        # limit; a larger output travels alone, checked by OutputBudget.
        compression_type=None if k.compression == "none" else k.compression,
        max_batch_size=producer_batch_size(k.max_message_bytes, k.compression),
        max_request_size=k.max_message_bytes,
        request_timeout_ms=k.request_timeout_ms,
    )


def reader(cfg: Config, *, name: str, min_partition_fetch_bytes: int = 1_048_576, **extra: Any) -> AIOKafkaConsumer:
    """A group-less, tolerant consumer the caller assigns partitions to.

    An offset before the log start (retention) resumes at the start; a record
    the client cannot decode arrives as an `Undecodable`, which the caller
    reports or passes over, never a crash. `extra` is for aiokafka settings
    a reader needs beyond these (e.g. a benchmark's short fetch wait).
    """
    return AIOKafkaConsumer(
        bootstrap_servers=cfg.kafka.bootstrap_servers,
        client_id=_client_id(cfg, name),
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=cfg.kafka.request_timeout_ms,
        max_partition_fetch_bytes=max(min_partition_fetch_bytes, cfg.batch.max_payload_bytes + _FETCH_HEADROOM),
        fetch_max_bytes=_FETCH_MAX_BYTES,
        **consumer_options(cfg.batch.max_inflated_bytes),
        **extra,
    )


def producer(cfg: Config, *, name: str) -> AIOKafkaProducer:
    """A producer for one-off sends: every record acknowledged by all replicas."""
    return AIOKafkaProducer(
        bootstrap_servers=cfg.kafka.bootstrap_servers,
        client_id=_client_id(cfg, name),
        enable_idempotence=cfg.kafka.idempotence,
        acks="all",
        request_timeout_ms=cfg.kafka.request_timeout_ms,
    )


async def partitions_at(bootstrap: str, topics: Sequence[str], *, client_id: str, request_timeout_ms: int) -> dict[str, list[int]]:
    """Partition ids of those `topics` that exist (asks for all topics, so
    nothing is auto-created by the question)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id=client_id, request_timeout_ms=request_timeout_ms)
    await admin.start()
    try:
        described: list[dict[str, Any]] = await admin.describe_topics(None)
    finally:
        await admin.close()
    found = {t["topic"]: sorted(p["partition"] for p in t["partitions"]) for t in described if t["error_code"] == 0 and t["partitions"]}
    return {t: found[t] for t in topics if t in found}


async def partitions_of(cfg: Config, topics: Sequence[str], *, name: str = "metadata") -> dict[str, list[int]]:
    """`partitions_at` with the config's bootstrap servers and timeouts."""
    return await partitions_at(
        cfg.kafka.bootstrap_servers, topics, client_id=_client_id(cfg, name), request_timeout_ms=cfg.kafka.request_timeout_ms
    )
