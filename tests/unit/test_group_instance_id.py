"""kafka.group_instance_id (static membership): resolved per process, refused
at load when it cannot be a Kafka instance id, and handed to the one group
consumer factory (busguard.runtime.clients) for the guard and the reconciler."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

from busguard.config import load_config
from busguard.config_checks import group_instance_id
from busguard.errors import ConfigError
from busguard.runtime.clients import SortedRoundRobin, group_consumer

ROUTE = '[[routes]]\nname = "handoffs"\ninputs = ["agents.handoffs"]\ndownstream = "agents.handoffs.admitted"\n'


def _config(tmp_path: Path, instance: str | None, env: dict[str, str] | None = None) -> Path:
    kafka = "" if instance is None else f"[kafka]\ngroup_instance_id = {instance!r}\n"
    path = tmp_path / "busguard.toml"
    path.write_text(kafka + ROUTE, encoding="utf-8")
    return path


def test_unset_is_dynamic_membership(tmp_path: Path) -> None:
    cfg = load_config(_config(tmp_path, None), env={})
    assert cfg.kafka.group_instance_id == "" and group_instance_id(cfg) is None


def test_hostname_placeholder_is_replaced_per_process(tmp_path: Path) -> None:
    cfg = load_config(_config(tmp_path, "guard-{hostname}-a"), env={})
    assert cfg.kafka.group_instance_id == "guard-{hostname}-a"  # stored as written: one file serves every host
    assert group_instance_id(cfg, hostname="db7.example") == "guard-db7.example-a"
    assert group_instance_id(cfg) == f"guard-{socket.gethostname()}-a"


def test_environment_sets_it_per_process(tmp_path: Path) -> None:
    cfg = load_config(_config(tmp_path, "from-file"), env={"BUSGUARD_KAFKA__GROUP_INSTANCE_ID": "guard-2"})
    assert group_instance_id(cfg) == "guard-2"
    # a string key: digits stay text
    cfg = load_config(_config(tmp_path, None), env={"BUSGUARD_KAFKA__GROUP_INSTANCE_ID": "42"})
    assert group_instance_id(cfg) == "42"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("guard {hostname}", "guard {hostname}"),  # a space
        ("guard/1", "guard/1"),
        ("x" * 250, "x" * 250),
        ("guard-{pid}", "guard-{pid}"),  # a placeholder that would change on every restart
        ("guard-{host}", "guard-{host}"),
    ],
)
def test_what_cannot_be_an_instance_id_is_refused_at_load(tmp_path: Path, value: str, shown: str) -> None:
    path = _config(tmp_path, value)
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    err = info.value
    assert (err.file, err.field) == (str(path), "kafka.group_instance_id")
    assert str(err.value).startswith(shown) and "[A-Za-z0-9._-]" in err.allowed


def test_a_bad_id_from_the_environment_blames_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(_config(tmp_path, None), env={"BUSGUARD_KAFKA__GROUP_INSTANCE_ID": "two words"})
    assert (info.value.file, info.value.field, info.value.value) == (
        "$BUSGUARD_KAFKA__GROUP_INSTANCE_ID",
        "kafka.group_instance_id",
        "two words",
    )


def test_a_hostname_that_cannot_be_an_id_is_refused_with_both_forms(tmp_path: Path) -> None:
    cfg = load_config(_config(tmp_path, "g-{hostname}"), env={})
    with pytest.raises(ConfigError) as info:
        group_instance_id(cfg, hostname="bad host")
    assert info.value.value == "g-{hostname} (= g-bad host)"


async def test_the_group_consumer_is_a_static_member_under_that_id(tmp_path: Path) -> None:
    static = load_config(_config(tmp_path, "guard-{hostname}"), env={})
    dynamic = load_config(_config(tmp_path, None), env={})
    for role in ("guard", "reconciler"):
        c = group_consumer(static, group_id="g", role=role)
        assert c._group_instance_id == f"guard-{socket.gethostname()}"
        assert group_consumer(dynamic, group_id="g", role=role)._group_instance_id is None


_METADATA = """
import sys
from busguard.runtime.clients import SortedRoundRobin
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
topics = set(sys.argv[1:])
print(RoundRobinPartitionAssignor.metadata(topics).encode().hex(), SortedRoundRobin.metadata(topics).encode().hex())
"""


def _metadata_under_seeds(topics: list[str]) -> tuple[set[str], set[str]]:
    """The distinct JoinGroup metadata of (aiokafka's assignor, ours) over 12 hash seeds."""
    runs = [
        subprocess.run(
            [sys.executable, "-c", _METADATA, *topics],
            env={**os.environ, "PYTHONHASHSEED": str(seed), "PYTHONPATH": str(Path(__file__).parents[2])},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        for seed in range(12)
    ]
    return {r[0] for r in runs}, {r[1] for r in runs}


def test_join_metadata_is_the_same_bytes_in_every_process() -> None:
    """A static member started again must send its predecessor's JoinGroup
    metadata, or the group rebalances (and tansu never assigns it). aiokafka's
    own assignor lists the topics in the per-process order of a set."""
    aiokafka, ours = _metadata_under_seeds(["agents.handoffs", "agents.acks", "agents.awards"])
    assert len(aiokafka) > 1  # the hazard is real
    assert len(ours) == 1
    assert SortedRoundRobin.name == RoundRobinPartitionAssignor.name  # one protocol with aiokafka's members


async def test_the_group_consumer_uses_the_sorted_assignor(tmp_path: Path) -> None:
    cfg = load_config(_config(tmp_path, "guard-a"), env={})
    for role in ("guard", "reconciler"):
        assert group_consumer(cfg, group_id="g", role=role)._partition_assignment_strategy == (SortedRoundRobin,)
