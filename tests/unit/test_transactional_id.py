"""kafka.transactional_id (exactly-once outputs on Kafka transactions):
off by default, one id per role so a guard and a reconciler never fence each
other, refused at load with the file, key, value and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from busguard.config import load_config
from busguard.config_checks import transactional_id
from busguard.errors import ConfigError
from busguard.runtime.clients import loop_producer

ROUTE = '[[routes]]\nname = "handoffs"\ninputs = ["agents.handoffs"]\ndownstream = "agents.handoffs.admitted"\n'


def _config(tmp_path: Path, kafka: str) -> Path:
    path = tmp_path / "busguard.toml"
    path.write_text(f"[kafka]\n{kafka}\n{ROUTE}", encoding="utf-8")
    return path


async def test_off_by_default(tmp_path: Path) -> None:
    cfg = load_config(_config(tmp_path, ""), env={})
    assert transactional_id(cfg, "guard") is None
    assert loop_producer(cfg, role="guard")._txn_manager.transactional_id is None  # idempotent, not transactional


async def test_one_id_per_role_with_the_hostname_replaced(tmp_path: Path) -> None:
    cfg = load_config(_config(tmp_path, 'transactional_id = "busguard-{hostname}"'), env={})
    assert transactional_id(cfg, "guard", hostname="h1") == "busguard-h1-guard"
    assert transactional_id(cfg, "reconciler", hostname="h1") == "busguard-h1-reconciler"
    producer = loop_producer(cfg, role="reconciler")
    assert producer._txn_manager.transactional_id == transactional_id(cfg, "reconciler")


def test_the_environment_sets_it_per_process(tmp_path: Path) -> None:
    cfg = load_config(_config(tmp_path, ""), env={"BUSGUARD_KAFKA__TRANSACTIONAL_ID": "guard-7"})
    assert transactional_id(cfg, "guard") == "guard-7-guard"


@pytest.mark.parametrize(
    "kafka",
    [
        'transactional_id = "bad id"',
        'transactional_id = "g-{pid}"',
        f'transactional_id = "{"x" * 241}"',
        'transactional_id = "g"\nidempotence = false',
        'transactional_id = "g"\nacks = "1"',
    ],
)
def test_refused_at_load_naming_the_file_key_value_and_what_is_allowed(tmp_path: Path, kafka: str) -> None:
    path = _config(tmp_path, kafka)
    with pytest.raises(ConfigError) as raised:
        load_config(path, env={})
    text = str(raised.value)
    assert str(path) in text and "kafka.transactional_id" in text and "[A-Za-z0-9._-]" in text and 'acks = "all"' in text
