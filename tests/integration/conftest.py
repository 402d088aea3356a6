"""Fixtures for tests against real Kafka-protocol brokers the tests start themselves.

``broker`` is the broker a test runs on: Apache Kafka (``kafka``: one KRaft
node, kafka/pom.xml's version) unless the test is marked
``@pytest.mark.brokers(...)``: ``("kafka", "tansu")`` runs it on both (the set
that keeps the demo's embedded broker honest), ``("tansu",)`` on tansu only
(what only tansu can be made to store: empty batches, lying offset deltas).
``BUSGUARD_TEST_BROKERS=tansu`` (or ``kafka,tansu``) runs every test on the
brokers it names instead. Each broker is started once
per session and never skipped: if it cannot start, the tests fail. Every test
gets its own topics and consumer groups from ``topic_factory`` and
``group_id``, so tests never see each other's records.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess
from busguard.devtools.kafka import ApacheKafka
from busguard.runtime.topics import create_topics

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test under tests/integration with ``integration``."""
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(pytest.mark.integration)


BROKERS = ("kafka", "tansu")


def _brokers_for(definition: pytest.Item) -> list[str]:
    """The marker's brokers (Apache Kafka when unmarked); BUSGUARD_TEST_BROKERS
    narrows them, or widens an unmarked test to tansu too. A test marked for
    tansu alone (Kafka refuses its batches at produce) keeps to tansu."""
    marker = definition.get_closest_marker("brokers")
    if marker is not None and (not marker.args or set(marker.args) - set(BROKERS)):
        raise pytest.UsageError(f"{definition.nodeid}: @pytest.mark.brokers{marker.args}: name one or more of {BROKERS}")
    own = list(marker.args) if marker is not None else ["kafka"]
    chosen = os.environ.get("BUSGUARD_TEST_BROKERS", "").strip()
    if not chosen:
        return own
    names = [n.strip() for n in chosen.split(",") if n.strip()]
    unknown = sorted(set(names) - set(BROKERS))
    if unknown or not names:
        raise pytest.UsageError(f"BUSGUARD_TEST_BROKERS={chosen!r}: {unknown or 'empty'}; allowed: a comma-separated list of {BROKERS}")
    allowed = own if marker is not None else list(BROKERS)
    return [n for n in names if n in allowed] or own


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run each test that takes ``broker`` once per broker it is meant for."""
    if "broker" in metafunc.fixturenames:
        metafunc.parametrize("broker", _brokers_for(metafunc.definition), indirect=True, scope="session")


@pytest.fixture(scope="session")
def broker(request: pytest.FixtureRequest) -> EmbeddedBroker | ApacheKafka:
    """The broker of this run of the test: the ``kafka`` or the ``tansu`` fixture's."""
    b: EmbeddedBroker | ApacheKafka = request.getfixturevalue(request.param)
    return b


@pytest.fixture(scope="session")
def tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """One embedded tansu broker for the session. Memory storage: never restart it."""
    with EmbeddedBroker(log_dir=tmp_path_factory.mktemp("tansu")) as b:
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
def topic_factory(broker: EmbeddedBroker | ApacheKafka, request: pytest.FixtureRequest) -> TopicFactory:
    return TopicFactory(broker.bootstrap, _slug(request.node.name))


@pytest.fixture
def group_id(request: pytest.FixtureRequest) -> str:
    """A consumer group id no other test uses."""
    return f"{_slug(request.node.name)}.{uuid.uuid4().hex[:8]}"


@pytest.fixture(autouse=True)
def reap_guards() -> Iterator[None]:
    """A test that failed before its own cleanup leaves no busguard process behind."""
    yield
    left = GuardProcess.reap()
    if left:
        print(f"killed busguard processes left running: {left}")
