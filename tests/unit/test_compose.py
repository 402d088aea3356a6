"""compose/ runs the broker the tests run: same Apache Kafka version, same settings.

No container engine runs where the tests run, so compose/docker-compose.yml is
never started by them; what can drift is checked here instead. The one source
of the broker's settings is busguard.devtools.kafka.cluster_settings (what
ApacheKafka writes into every node's server.properties, beside the per-node
NODE_SETTINGS); each Apache Kafka service of the compose file must set exactly
those, as the apache/kafka image's KAFKA_* variables, and name the image of
kafka/pom.xml's version.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from busguard.devtools.kafka import NODE_SETTINGS, ApacheKafka, _Node, cluster_settings, kafka_version

COMPOSE = Path(__file__).resolve().parents[2] / "compose" / "docker-compose.yml"
IMAGE = "apache/kafka"
# The image's own inputs that are not broker settings: the log is formatted with it.
NOT_SETTINGS = frozenset({"CLUSTER_ID"})


def property_name(env: str) -> str:
    """The apache/kafka image's mapping of KAFKA_<NAME> to a server.properties key
    (docker/kafka's configure script: ``___`` is ``-``, ``__`` is ``_``, ``_`` is ``.``)."""
    name = env.removeprefix("KAFKA_")
    return name.replace("___", "\0").replace("__", "\1").replace("_", ".").replace("\0", "-").replace("\1", "_").lower()


def kafka_services() -> dict[str, dict[str, Any]]:
    doc = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    found = {name: svc for name, svc in doc["services"].items() if str(svc.get("image", "")).split(":")[0] == IMAGE}
    assert found, f"{COMPOSE}: no service runs the {IMAGE} image"
    return found


def broker_env(name: str, service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    assert isinstance(env, dict), f"{COMPOSE}: services.{name}.environment must be a mapping, not {type(env).__name__}"
    unknown = set(env) - NOT_SETTINGS - {k for k in env if k.startswith("KAFKA_")}
    assert not unknown, f"{COMPOSE}: services.{name}.environment has {sorted(unknown)}, neither KAFKA_* settings nor {sorted(NOT_SETTINGS)}"
    # YAML reads `1` as an int and `false` as a bool; the image writes them as text
    return {property_name(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in env.items() if k.startswith("KAFKA_")}


def test_property_name_follows_the_image() -> None:
    assert property_name("KAFKA_AUTO_CREATE_TOPICS_ENABLE") == "auto.create.topics.enable"
    assert property_name("KAFKA_A__B___C_D") == "a_b-c.d"


def test_compose_image_is_the_pinned_kafka_version() -> None:
    for name, svc in kafka_services().items():
        assert svc["image"] == f"{IMAGE}:{kafka_version()}", (
            f"{COMPOSE}: services.{name}.image is {svc['image']!r}; kafka/pom.xml pins {kafka_version()}"
        )


def test_compose_broker_settings_are_the_test_clusters() -> None:
    """Every shared setting has the test broker's value; nothing else but the per-node ones is set."""
    services = kafka_services()
    expected = cluster_settings(len(services))
    for name, svc in services.items():
        props = broker_env(name, svc)
        shared = {k: v for k, v in props.items() if k not in NODE_SETTINGS}
        assert shared == expected, (
            f"{COMPOSE}: services.{name} differs from busguard.devtools.kafka.cluster_settings({len(services)}): "
            f"missing {sorted(expected.keys() - shared.keys())}, extra {sorted(shared.keys() - expected.keys())}, "
            f"different {sorted(k for k in expected.keys() & shared.keys() if expected[k] != shared[k])}"
        )
        assert NODE_SETTINGS <= props.keys(), f"{COMPOSE}: services.{name} lacks {sorted(NODE_SETTINGS - props.keys())}"


def test_compose_node_ids_and_quorum_agree() -> None:
    services = kafka_services()
    ids = sorted(int(broker_env(n, s)["node.id"]) for n, s in services.items())
    assert ids == list(range(1, len(services) + 1))
    for name, svc in services.items():
        voters = broker_env(name, svc)["controller.quorum.voters"].split(",")
        assert sorted(int(v.split("@")[0]) for v in voters) == ids, f"{COMPOSE}: services.{name} quorum {voters} is not nodes {ids}"


@pytest.mark.parametrize("brokers", [1, 3])
def test_apache_kafka_writes_the_shared_settings(brokers: int, tmp_path: Path) -> None:
    """The fixture's server.properties is NODE_SETTINGS plus cluster_settings(n): nothing set beside the shared source."""
    kafka = ApacheKafka(brokers=brokers)
    kafka._nodes = [_Node(index=i, dir=tmp_path / f"node-{i}", port=9092 + i, controller_port=9192 + i) for i in range(brokers)]
    for node in kafka._nodes:
        lines = kafka._server_properties(node).splitlines()
        props = dict(line.split("=", 1) for line in lines)
        assert len(props) == len(lines)
        assert props.keys() - NODE_SETTINGS == cluster_settings(brokers).keys()
        assert {k: v for k, v in props.items() if k not in NODE_SETTINGS} == cluster_settings(brokers)


def test_three_node_cluster_replicates() -> None:
    """What the fault tests rely on: a 3-node cluster keeps 3 copies and accepts acks=all with one node down."""
    s = cluster_settings(3)
    assert s["auto.create.topics.enable"] == "false"
    for key in ("default.replication.factor", "offsets.topic.replication.factor", "transaction.state.log.replication.factor"):
        assert s[key] == "3", key
    assert s["min.insync.replicas"] == s["transaction.state.log.min.isr"] == "2"
