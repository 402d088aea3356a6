"""What busguard needs of its topics, checked at start (`busguard run`, `busguard reconcile`).

A topic with the wrong configs does not fail at start by itself: a compacted
audit topic silently keeps one record per task id (the proof is gone), a
finite retention deletes it, and an output topic whose `max.message.bytes`
is below `kafka.max_message_bytes` makes the broker refuse a produce the guard
sized as fitting, which stops the guard at the same record at every restart
(a crash loop). So the topics are described once at start and the first
mismatch is one ConfigError line naming the topic, the setting, its value
and what is allowed (docs/operations.md, "Topics busguard needs").

`topic_problem` and `creation_configs` are pure; `check_topics` does the I/O
(Metadata and DescribeConfigs through aiokafka's admin client). A broker that
describes no configs (tansu answers DescribeConfigs with an empty list,
docs/notes-broker.md) gets the existence check only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from busguard.errors import ConfigError

if TYPE_CHECKING:
    from busguard.config import Config

__all__ = ["Described", "check_topics", "creation_configs", "describe", "topic_problem"]

_log = structlog.get_logger(__name__)

_TOPIC_RESOURCE = 2  # DescribeConfigs resource types
_BROKER_RESOURCE = 4
_WHY_DELETE = "compaction keeps one record per key (task id), which drops decisions and escalations (docs/operations.md section 2)"


@dataclass(frozen=True)
class Described:
    """What the cluster said about the topics: partition counts of those that
    exist, each topic's configs (empty when the broker describes none), and the
    smallest `message.max.bytes` of the brokers that described theirs."""

    partitions: Mapping[str, int]
    configs: Mapping[str, Mapping[str, str]]
    broker_max: int | None


def creation_configs(cfg: Config, names: Sequence[str]) -> dict[str, dict[str, str]]:
    """The topic configs busguard gives the topics it creates (`kafka.create_topics`):
    every topic it writes gets `max.message.bytes = kafka.max_message_bytes`,
    the audit and reconciliation topics `cleanup.policy = delete`, the audit
    topic `retention.ms = kafka.audit_retention_ms`. Input topics get none."""
    inputs = set(cfg.input_topics)
    out: dict[str, dict[str, str]] = {}
    for name in names:
        if name in inputs:
            continue
        c = {"max.message.bytes": str(cfg.kafka.max_message_bytes)}
        if name in (cfg.topics.audit, cfg.topics.reconciliation):
            c["cleanup.policy"] = "delete"
        if name == cfg.topics.audit:
            c["retention.ms"] = str(cfg.kafka.audit_retention_ms)
        out[name] = c
    return out


def topic_problem(cfg: Config, names: Sequence[str], d: Described) -> ConfigError | None:
    """The first reason these topics cannot serve `cfg`, or None."""
    where = f"broker {cfg.kafka.bootstrap_servers}"
    inputs = set(cfg.input_topics)
    for name in names:
        if d.partitions.get(name, 0) < 1:
            how = "set kafka.create_topics = true" if not cfg.kafka.create_topics else "check the broker's log"
            return ConfigError(where, f"topic {name}", None, f"does not exist; create it or {how} (docs/operations.md section 2)")
    for name in names:
        c = d.configs.get(name, {})
        if name in (cfg.topics.audit, cfg.topics.reconciliation) and "cleanup.policy" in c and c["cleanup.policy"] != "delete":
            return ConfigError(where, f"topic {name} cleanup.policy", c["cleanup.policy"], f"'delete': {_WHY_DELETE}")
        if name == cfg.topics.audit:
            problem = _audit_retention(cfg, name, c, where)
            if problem is not None:
                return problem
        if name not in inputs and "max.message.bytes" in c and int(c["max.message.bytes"]) < cfg.kafka.max_message_bytes:
            broker = "" if d.broker_max is None else f"; the brokers' message.max.bytes is {d.broker_max}"
            return ConfigError(
                cfg.source,
                "kafka.max_message_bytes",
                cfg.kafka.max_message_bytes,
                f"at most {c['max.message.bytes']}, the max.message.bytes of topic {name} on {where}{broker}: the broker refuses"
                " a larger record batch, so a record sized to kafka.max_message_bytes would stop the guard at every restart;"
                " lower kafka.max_message_bytes or raise the topic's max.message.bytes",
            )
    return None


def _audit_retention(cfg: Config, name: str, c: Mapping[str, str], where: str) -> ConfigError | None:
    least = cfg.kafka.audit_min_retention_ms
    if "retention.ms" in c:
        ms = int(c["retention.ms"])
        if ms != -1 and (least == -1 or ms < least):
            allowed = "-1 (kept forever)" if least == -1 else f"-1 (kept forever) or at least {least} (kafka.audit_min_retention_ms)"
            return ConfigError(where, f"topic {name} retention.ms", ms, f"{allowed}: the audit topic is the proof of every decision")
    if "retention.bytes" in c and int(c["retention.bytes"]) != -1:
        return ConfigError(
            where,
            f"topic {name} retention.bytes",
            int(c["retention.bytes"]),
            "-1: a size limit deletes the oldest decisions whatever their age, and the audit topic is the proof of every decision",
        )
    return None


async def describe(bootstrap: str, names: Sequence[str], timeout_ms: int = 30_000) -> Described:
    """Describe `names` and the brokers' `message.max.bytes` (one admin client, three requests)."""
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="busguard-check-topics", request_timeout_ms=timeout_ms)
    await admin.start()
    try:
        described: list[dict[str, Any]] = await admin.describe_topics(list(names))
        partitions = {t["topic"]: len(t["partitions"]) for t in described if t["error_code"] == 0}
        cluster = await admin.describe_cluster()
        # No config names in the request: tansu 0.6 closes the connection on a
        # DescribeConfigs that names them, and answers an unfiltered one.
        resources = [ConfigResource(ConfigResourceType.TOPIC, n) for n in names if n in partitions]
        resources += [ConfigResource(ConfigResourceType.BROKER, str(b["node_id"])) for b in cluster["brokers"]]
        responses = await admin.describe_configs(resources)
    finally:
        await admin.close()
    configs: dict[str, dict[str, str]] = {}
    broker_limits: list[int] = []
    for response in responses:
        for res in response.to_object()["resources"]:
            entries = {e["config_names"]: e["config_value"] for e in res["config_entries"] if e["config_value"] is not None}
            if res["error_code"] != 0:  # e.g. no DescribeConfigs permission: existence checked only, said once
                _log.warning("topics.configs_not_described", resource=res["resource_name"], error_code=res["error_code"])
                continue
            if res["resource_type"] == _TOPIC_RESOURCE:
                configs[res["resource_name"]] = entries
            elif res["resource_type"] == _BROKER_RESOURCE and "message.max.bytes" in entries:
                broker_limits.append(int(entries["message.max.bytes"]))
    return Described(partitions, configs, min(broker_limits) if broker_limits else None)


async def check_topics(cfg: Config, names: Sequence[str]) -> Described:
    """Raise the first mismatch as one ConfigError; log what was checked."""
    d = await describe(cfg.kafka.bootstrap_servers, names, cfg.kafka.request_timeout_ms)
    problem = topic_problem(cfg, names, d)
    if problem is not None:
        raise problem
    described = sorted(n for n in names if d.configs.get(n))
    _log.info(
        "topics.checked",
        topics=len(names),
        configs_described=len(described),
        broker_message_max_bytes=d.broker_max,
        **({} if described else {"note": "the broker described no topic configs: existence checked only"}),
    )
    return d
