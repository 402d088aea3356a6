"""The `busguard.toml` of a two-route deployment on the embedded broker.

The demo, the seed-000 example, the integration-test kit and the end-to-end
benchmark all run busguard against an embedded tansu broker and differ only
in names and a few knobs, so they render their config here: what the broker
needs, and why, is written down once. The file is generated with
`msgspec.toml.encode`, so quoting is never hand-made.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from busguard.policies import KINDS

#: tansu refuses the idempotent producer, holds each JoinGroup for
#: max(1 s, session timeout / 2) (a short session keeps rebalances quick), and
#: answers a waiting fetch only when its wait expires, not when records arrive.
EMBEDDED_BROKER_KAFKA: Final[Mapping[str, object]] = {
    "idempotence": False,
    "session_timeout_ms": 3000,
    "heartbeat_interval_ms": 300,
    "fetch_max_wait_ms": 20,
}

#: Apache Kafka: busguard's production defaults (idempotent producer,
#: ``acks = "all"``) with the shortest session the broker accepts
#: (``group.min.session.timeout.ms`` is 6000 by default: a 3000 ms session is
#: refused with INVALID_SESSION_TIMEOUT), so a killed guard's partitions move
#: within seconds in the tests.
APACHE_KAFKA_KAFKA: Final[Mapping[str, object]] = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500}

_brokers: dict[str, Mapping[str, object]] = {}


def register_broker(bootstrap: str, kafka: Mapping[str, object]) -> None:
    """Record the ``[kafka]`` keys a deployment on the broker at ``bootstrap``
    needs; the devtools' brokers call this when they start, so every config
    this process renders for them fits the broker it runs on."""
    _brokers[bootstrap] = kafka


#: For a broker this process did not start (``--bootstrap`` of the demo and the
#: examples): ``BUSGUARD_DEV_BROKER=kafka`` says it is Apache Kafka; unset or
#: ``tansu``, the embedded broker (the demo's default).
DEV_BROKER_ENV: Final = "BUSGUARD_DEV_BROKER"
_BY_NAME: Final[Mapping[str, Mapping[str, object]]] = {"tansu": EMBEDDED_BROKER_KAFKA, "kafka": APACHE_KAFKA_KAFKA}


def broker_kafka(bootstrap: str) -> Mapping[str, object]:
    """The ``[kafka]`` keys for ``bootstrap``: a broker this process started
    says its own; for any other, ``BUSGUARD_DEV_BROKER`` names the broker."""
    if bootstrap in _brokers:
        return _brokers[bootstrap]
    name = os.environ.get(DEV_BROKER_ENV, "tansu")
    if name not in _BY_NAME:
        raise ValueError(f"{DEV_BROKER_ENV}={name!r}: allowed: {', '.join(_BY_NAME)}")
    return _BY_NAME[name]


def broker_name(bootstrap: str) -> str:
    """``"kafka"`` or ``"tansu"``: the broker :func:`broker_kafka` takes ``bootstrap`` for,
    for the environment of a process that renders configs for it."""
    return "kafka" if broker_kafka(bootstrap) is APACHE_KAFKA_KAFKA else "tansu"


class Topics(msgspec.Struct, frozen=True, kw_only=True):
    """Every topic of a deployment with a handoffs route and an acks route."""

    handoffs: str
    acks: str
    handoffs_admitted: str
    acks_admitted: str
    reconciliation: str
    dead_letter: str
    audit: str
    replies: str
    #: The registered kinds' extra routes (KindSpec.routes) -> their topics.
    routes: dict[str, str] = msgspec.field(default_factory=dict)

    @classmethod
    def under(cls, prefix: str) -> Topics:
        """`<prefix>.handoffs`, `<prefix>.handoffs-admitted`, ..., and `<prefix>.<route>`
        for every registered kind's route: for throwaway deployments."""
        names = {f: f"{prefix}.{f.replace('_', '-')}" for f in cls.__struct_fields__ if f != "routes"}
        return cls(**names, routes={r: f"{prefix}.{r}" for spec in KINDS.values() for r in spec.routes})

    def all(self) -> list[str]:
        return [getattr(self, f) for f in self.__struct_fields__ if f != "routes"] + sorted(self.routes.values())


def embedded_config(
    bootstrap: str,
    *,
    group_id: str,
    topics: Topics,
    comment: str,
    **sections: Mapping[str, object],
) -> str:
    """The config text; `sections` add to (or override keys of) its tables,
    e.g. `batch={"max_records": 100}` or `state={"path": "/tmp/x.db"}`."""
    doc: dict[str, Any] = {
        "kafka": {"bootstrap_servers": bootstrap, "group_id": group_id, **broker_kafka(bootstrap)},
        "routes": [
            {"name": "handoffs", "inputs": [topics.handoffs], "downstream": topics.handoffs_admitted},
            {"name": "acks", "inputs": [topics.acks], "downstream": topics.acks_admitted},
        ],
        "topics": {
            "reconciliation": topics.reconciliation,
            "dead_letter": topics.dead_letter,
            "audit": topics.audit,
            "replies": topics.replies,
            **({"routes": dict(topics.routes)} if topics.routes else {}),
        },
        "state": {"path": "state.db"},
        # separate keys for separate roles: the reconciler seals resolutions with its own
        "keys": {"registry": "keys.toml", "guard_key": "guard.key", "reconciler_key": "reconciler.key", "create_reconciler_key": True},
    }
    for name, values in sections.items():
        doc[name] = {**doc.get(name, {}), **values}
    header = "".join(f"# {line}\n" for line in comment.splitlines())
    return (
        f"{header}# Session and producer settings fit for the broker at {bootstrap}. Reference: docs/config.md.\n\n"
        + msgspec.toml.encode(doc).decode()
    )
