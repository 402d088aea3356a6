"""Keep a static member's session alive while its restarted process rejoins.

Static membership (kafka.group_instance_id) promises that a process back
within session_timeout_ms takes its own partitions back and nobody else is
rebalanced. On tansu that promise fails about half the time under load
(docs/notes-broker.md, "A restarted static member is evicted while its
JoinGroup is held"): tansu counts neither a static JoinGroup nor a static
SyncGroup as contact from the member, and holds them for
max(3 s, session/2) and 3 s. The member's session therefore keeps running from
its dead predecessor's last heartbeat through the process start and both
holds, and at the default session of 10 s it expires just before the new
process's first heartbeat: the broker evicts the name, every member is
revoked, and the group re-forms around a new member id (about 20 s without
an owner for every partition).

So before a static member joins, it looks up the member id its name holds in
the group (DescribeGroups: static member ids are ``<instance id>-<uuid>`` on
tansu and on Kafka) and heartbeats that id until its own consumer has been
assigned, for at most session_timeout_ms. This is only ever done for the
holder of the name's claim (busguard.runtime.membership), so the id it keeps
alive is its own dead predecessor's, never another live process's.

Apache Kafka needs none of it: its group coordinator answers a known static
member's JoinGroup at once with the old assignment, and the new member id's
session starts with that answer (measured on 4.4.0: three static guards, six
kill -9 + restarts per run, seven runs without these heartbeats, 0 survivor
revocations; docs/notes-broker.md, "Static membership on Apache Kafka"). So
the bridge first asks the coordinator's ApiVersions and does nothing when it
serves ConsumerGroupHeartbeat (API key 68): the mark of KIP-848's group
coordinator, Apache Kafka's default from 4.0, which tansu does not have.
Brokers without it (tansu; Apache Kafka before 4.0, where these heartbeats are
refused with ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID and change nothing) still
get them.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable
from typing import Any, Final

import structlog
from aiokafka.client import AIOKafkaClient, ConnectionGroup, CoordinationType
from aiokafka.protocol.admin import ApiVersionRequest, DescribeGroupsRequest
from aiokafka.protocol.group import HeartbeatRequest

from busguard.config import Config
from busguard.config_checks import group_instance_id

__all__ = ["SessionBridge", "answers_static_joins_at_once", "predecessor_member_id"]

log = structlog.get_logger("busguard.runtime.rejoin")

_UNKNOWN_MEMBER_ID: Final = 25
_NO_GENERATION: Final = -1  # no generation is known before the join; tansu counts the contact anyway
_MAX_INTERVAL_S: Final = 1.0
_CONSUMER_GROUP_HEARTBEAT: Final = 68  # KIP-848's API: served by Apache Kafka's new group coordinator


def answers_static_joins_at_once(api_keys: Iterable[int]) -> bool:
    """Whether a broker serving `api_keys` (its ApiVersions) has Apache Kafka's
    KIP-848 group coordinator, which answers a known static member's JoinGroup
    at once and counts it as contact: then there is no held join to bridge."""
    return _CONSUMER_GROUP_HEARTBEAT in set(api_keys)


def predecessor_member_id(instance: str, member_ids: Iterable[str]) -> str | None:
    """The member id a group gave `instance`: ``<instance>-<uuid>``, nothing
    else (so "guard-1" never matches "guard-10-…"). None when the name has no
    member, or more than one (then which one is ours is unknowable)."""
    prefix = f"{instance}-"
    found = []
    for member in member_ids:
        if not member.startswith(prefix) or len(member) != len(prefix) + 36:
            continue
        tail = member[len(prefix) :]
        try:
            canonical = str(uuid.UUID(tail)) == tail.lower()
        except ValueError:
            continue
        if canonical:
            found.append(member)
    return found[0] if len(found) == 1 else None


def _members(response: Any, group_id: str) -> list[str]:
    for group in response.groups:
        error_code, name, members = group[0], group[1], group[5]
        if name == group_id and error_code == 0:
            return [str(m[0]) for m in members]
    return []


class SessionBridge:
    """Heartbeats the predecessor's member id until `done()` or session_timeout_ms."""

    def __init__(self, cfg: Config, *, group_id: str, role: str) -> None:
        self.cfg = cfg
        self.group_id = group_id
        self.role = role
        self.instance = group_instance_id(cfg)
        self.sent = 0
        self._done = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start heartbeating in the background (nothing with dynamic membership)."""
        if self.instance is not None and self._task is None:
            self._task = asyncio.ensure_future(self._run(self.instance))

    async def done(self) -> None:
        """The consumer is assigned (or stopping): end the heartbeats."""
        self._done.set()
        if self._task is not None:
            try:
                await self._task
            except Exception as exc:  # a bridge that failed must not fail the loop
                log.warning("static rejoin heartbeats failed", group=self.group_id, role=self.role, error=repr(exc))
            self._task = None

    async def _run(self, instance: str) -> None:
        k = self.cfg.kafka
        client = AIOKafkaClient(
            bootstrap_servers=k.bootstrap_servers, client_id=f"{k.client_id}-{self.role}-rejoin", request_timeout_ms=k.request_timeout_ms
        )
        deadline = time.monotonic() + k.session_timeout_ms / 1000
        interval = min(_MAX_INTERVAL_S, k.heartbeat_interval_ms / 1000)
        try:
            await client.bootstrap()
            node = await client.coordinator_lookup(CoordinationType.GROUP, self.group_id)
            versions = await client.send(node, ApiVersionRequest(), group=ConnectionGroup.COORDINATION)
            if answers_static_joins_at_once(key for key, _, _ in versions.api_versions):
                return
            described = await client.send(
                node, DescribeGroupsRequest(groups=[self.group_id], include_authorized_operations=False), group=ConnectionGroup.COORDINATION
            )
            member_id = predecessor_member_id(instance, _members(described, self.group_id))
            if member_id is None:
                return
            log.info(
                "keeping the static member's session alive while it rejoins",
                group=self.group_id,
                group_instance_id=instance,
                member_id=member_id,
            )
            while not self._done.is_set() and time.monotonic() < deadline:
                answer = await client.send(
                    node, HeartbeatRequest(self.group_id, _NO_GENERATION, member_id), group=ConnectionGroup.COORDINATION
                )
                self.sent += 1
                if answer.error_code == _UNKNOWN_MEMBER_ID:
                    return  # the name has a new member id (Kafka) or was evicted: nothing left to keep
                try:
                    await asyncio.wait_for(self._done.wait(), interval)
                except TimeoutError:
                    pass
        finally:
            await client.close()
