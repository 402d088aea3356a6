"""The bound on the example config.update kind's permanent rows (docs/operations.md, "Bounds").

Its high-water marks never expire, so what bounds them is the kind's
allow-list of keys: one row per key of `[config.update] keys`, at most 256,
whatever the senders send.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from busguard_config_update.kind import KEY_NOT_ALLOWED, MAX_KEYS, SPEC, ConfigUpdateSettings

from busguard.admission.types import AdmissionPolicy
from busguard.config import load_config
from busguard.errors import ConfigError
from busguard.policies import KINDS
from tests.unit.harness import Harness, agent, sender
from tests.unit.test_config import ROUTE


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(KINDS, SPEC.kind, SPEC)  # type: ignore[index]


def test_permanent_rows_are_one_per_allowed_key_whatever_the_senders_send() -> None:
    settings = ConfigUpdateSettings(senders=[agent("planner")], keys=["a", "b"])
    h = Harness(policy=AdmissionPolicy(policy_settings={"config.update": settings}))
    s = sender("planner")
    records = [
        s.sign(
            kind="config.update",
            task_id=f"t{i}",
            receiver=agent("executor"),
            payload=msgspec.json.encode({"key": f"k{i}", "version": i, "value": i}),
        )
        for i in range(300)
    ] + [
        s.sign(
            kind="config.update", task_id=k, receiver=agent("executor"), payload=msgspec.json.encode({"key": k, "version": 1, "value": 1})
        )
        for k in "ab"
    ]
    decisions = h.feed(*records)
    assert [d.reason for d in decisions[:300]] == [KEY_NOT_ALLOWED] * 300 and [d.reason for d in decisions[300:]] == ["admitted"] * 2
    assert h.store.counts()["policy"] == 2


def test_more_than_256_keys_is_a_config_error_naming_the_key(tmp_path: Path) -> None:
    keys = ", ".join(f'"k{i}"' for i in range(MAX_KEYS + 1))
    (tmp_path / "b.toml").write_text(ROUTE + f"[config.update]\nkeys = [{keys}]\n")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "b.toml", env={})
    assert (info.value.field, info.value.value) == ("config.update.keys", MAX_KEYS + 1) and "at most 256" in info.value.allowed
