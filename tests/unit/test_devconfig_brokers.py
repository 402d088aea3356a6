"""The `[kafka]` keys busguard.devconfig renders for each broker (docs/notes-broker.md)."""

from __future__ import annotations

import pytest

from busguard.config import KafkaConfig
from busguard.devconfig import (
    APACHE_KAFKA_KAFKA,
    DEV_BROKER_ENV,
    EMBEDDED_BROKER_KAFKA,
    broker_kafka,
    broker_name,
    register_broker,
)


def test_an_unknown_bootstrap_is_the_embedded_broker_unless_the_environment_says_kafka(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DEV_BROKER_ENV, raising=False)
    assert broker_kafka("10.0.0.1:9092") is EMBEDDED_BROKER_KAFKA
    monkeypatch.setenv(DEV_BROKER_ENV, "kafka")
    assert broker_kafka("10.0.0.1:9092") is APACHE_KAFKA_KAFKA
    assert broker_name("10.0.0.1:9092") == "kafka"


def test_a_broker_this_process_started_says_its_own_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DEV_BROKER_ENV, "tansu")
    register_broker("127.0.0.1:1", APACHE_KAFKA_KAFKA)
    assert broker_kafka("127.0.0.1:1") is APACHE_KAFKA_KAFKA


def test_a_misspelt_broker_name_is_refused_with_the_allowed_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DEV_BROKER_ENV, "kafak")
    with pytest.raises(ValueError, match="BUSGUARD_DEV_BROKER='kafak': allowed: tansu, kafka"):
        broker_kafka("10.0.0.2:9092")


def test_kafkas_settings_keep_busguards_production_defaults_and_the_brokers_least_session() -> None:
    cfg = KafkaConfig(**APACHE_KAFKA_KAFKA)  # type: ignore[arg-type]
    assert cfg.idempotence and cfg.acks == "all" and cfg.fetch_max_wait_ms == 500
    assert cfg.session_timeout_ms >= 6000  # Apache Kafka's group.min.session.timeout.ms
    tansu = KafkaConfig(**EMBEDDED_BROKER_KAFKA)  # type: ignore[arg-type]
    assert not tansu.idempotence and tansu.fetch_max_wait_ms == 20
