"""Fixtures for tests against a real Kafka-protocol broker (embedded tansu).

``broker`` starts one broker for the whole session (never skipped: if it cannot
start, the tests fail). Its log is kept under pytest's basetemp. Every test gets
its own topics and consumer groups from ``topic_factory`` and ``group_id``, so
tests never see each other's records.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.kafka import ApacheKafka
from busguard.runtime.topics import create_topics

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test under tests/integration with ``integration``."""
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """One embedded broker for the session. Memory storage: never restart it."""
    with EmbeddedBroker(log_dir=tmp_path_factory.mktemp("broker")) as b:
        yield b


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheKafka]:
    """One Apache Kafka node (kafka/pom.xml's version, KRaft) for the session.

    Never skipped: without Java 17+ or Maven it fails with the line saying what
    to install. Auto topic creation is off: create every topic. Its kafka.log is
    kept under pytest's basetemp; its data is removed when the session ends.
    """
    with ApacheKafka(log_dir=tmp_path_factory.mktemp("kafka")) as k:
        yield k


def _slug(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9._-]+", "-", text).strip("-")[:80]


class TopicFactory:
    """``await topic_factory("in", partitions=4)`` -> a new, empty topic name."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.created: list[str] = []

    async def __call__(self, name: str = "topic", partitions: int = 4) -> str:
        topic = f"{self.prefix}.{_slug(name)}.{uuid.uuid4().hex[:8]}"
        await create_topics(self.bootstrap, [topic], partitions=partitions)
        self.created.append(topic)
        return topic


@pytest.fixture
def topic_factory(broker: EmbeddedBroker, request: pytest.FixtureRequest) -> TopicFactory:
    return TopicFactory(broker.bootstrap, _slug(request.node.name))


@pytest.fixture
def group_id(request: pytest.FixtureRequest) -> str:
    """A consumer group id no other test uses."""
    return f"{_slug(request.node.name)}.{uuid.uuid4().hex[:8]}"
