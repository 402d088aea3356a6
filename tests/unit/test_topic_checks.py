"""The pure half of the start-up topic check (busguard.runtime.topic_checks) and its config keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from busguard.config import Config, load_config
from busguard.errors import ConfigError
from busguard.runtime.topic_checks import Described, creation_configs, topic_problem

ROUTE = '[[routes]]\nname = "h"\ninputs = ["in"]\ndownstream = "out"\n'


def config(tmp_path: Path, kafka: str = "") -> Config:
    path = tmp_path / "busguard.toml"
    path.write_text(f"[kafka]\n{kafka}\n{ROUTE}", encoding="utf-8")
    return load_config(path, env={})


def described(cfg: Config, **configs: dict[str, str]) -> Described:
    names = cfg.input_topics + cfg.output_topics
    return Described({n: 1 for n in names}, {n: configs.get(n, {}) for n in names}, 1_048_588)


def test_created_topics_get_what_busguard_needs_and_inputs_nothing(tmp_path: Path) -> None:
    cfg = config(tmp_path, "max_message_bytes = 65536\naudit_retention_ms = -1")
    made = creation_configs(cfg, cfg.input_topics + cfg.output_topics)
    assert "in" not in made
    assert made["busguard.audit"] == {"max.message.bytes": "65536", "cleanup.policy": "delete", "retention.ms": "-1"}
    assert made["busguard.reconciliation"] == {"max.message.bytes": "65536", "cleanup.policy": "delete"}
    assert made["out"] == {"max.message.bytes": "65536"}


def test_a_broker_that_describes_no_configs_gets_the_existence_check_only(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    names = cfg.input_topics + cfg.output_topics
    assert topic_problem(cfg, names, Described({n: 4 for n in names}, {}, None)) is None
    err = topic_problem(cfg, names, Described({n: 4 for n in names if n != "out"}, {}, None))
    assert err is not None and err.field == "topic out"


@pytest.mark.parametrize(
    ("topic", "configs", "field", "value"),
    [
        ("busguard.audit", {"cleanup.policy": "compact"}, "topic busguard.audit cleanup.policy", "compact"),
        ("busguard.reconciliation", {"cleanup.policy": "compact,delete"}, "topic busguard.reconciliation cleanup.policy", "compact,delete"),
        ("busguard.audit", {"retention.ms": "604799999"}, "topic busguard.audit retention.ms", 604_799_999),
        ("busguard.audit", {"retention.bytes": "1000000"}, "topic busguard.audit retention.bytes", 1_000_000),
        ("out", {"max.message.bytes": "1048587"}, "kafka.max_message_bytes", 1_048_588),
    ],
)
def test_each_mismatch_names_topic_setting_value(tmp_path: Path, topic: str, configs: dict[str, str], field: str, value: object) -> None:
    cfg = config(tmp_path)
    err = topic_problem(cfg, cfg.input_topics + cfg.output_topics, described(cfg, **{topic: configs}))
    assert err is not None and (err.field, err.value) == (field, value)


def test_what_passes(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    ok = described(
        cfg,
        **{
            "busguard.audit": {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1", "max.message.bytes": "1048588"},
            "busguard.dead-letter": {"cleanup.policy": "compact"},  # only audit and reconciliation must not be compacted
            "in": {"max.message.bytes": "100"},  # an input: busguard does not write it
        },
    )
    assert topic_problem(cfg, cfg.input_topics + cfg.output_topics, ok) is None
    assert (
        topic_problem(
            config(tmp_path, "audit_min_retention_ms = 3600000"),
            ["busguard.audit"],
            described(cfg, **{"busguard.audit": {"retention.ms": "3600000"}}),
        )
        is None
    )


@pytest.mark.parametrize(
    ("kafka", "field"),
    [
        ("audit_retention_ms = 0", "kafka.audit_retention_ms"),
        ("audit_retention_ms = 3600000", "kafka.audit_retention_ms"),  # below the default minimum, 7 days
        ("audit_retention_ms = 3600000\naudit_min_retention_ms = -1", "kafka.audit_retention_ms"),
        ("audit_min_retention_ms = 0", "kafka.audit_min_retention_ms"),
    ],
)
def test_busguard_never_creates_an_audit_topic_it_would_refuse(tmp_path: Path, kafka: str, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        config(tmp_path, kafka)
    assert info.value.field == field
