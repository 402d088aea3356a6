"""Kinds from other packages (busguard.policies.plugins) and their config sections."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import msgspec
import pytest
from busguard_quota.kind import SPEC as QUOTA
from busguard_quota.kind import QuotaSettings

import busguard.policies as registry
from busguard import cli
from busguard.config import load_config
from busguard.errors import ConfigError
from busguard.policies import KINDS, KindSpec, plugins
from tests.unit.test_config import ROUTE

BUILTIN = {"handoff", "ack"}


def ep(name: str, value: str) -> importlib.metadata.EntryPoint:
    return importlib.metadata.EntryPoint(name, value, plugins.ENTRY_POINT_GROUP)


def quota_factory() -> KindSpec:
    return QUOTA


NOT_A_SPEC = object()


def test_a_plugin_spec_or_factory_is_loaded_and_every_bad_one_is_refused_with_its_origin() -> None:
    specs, errors = plugins.discover(
        BUILTIN,
        KindSpec,
        [
            ep("quota", "busguard_quota.kind:SPEC"),
            ep("quota", "tests.unit.test_kind_plugins:quota_factory"),  # a second plugin for one kind
            ep("handoff", "busguard_quota.kind:SPEC"),  # a built-in's name
            ep("missing", "no_such_module.kind:SPEC"),
            ep("thing", "tests.unit.test_kind_plugins:NOT_A_SPEC"),
            ep("other", "busguard_quota.kind:SPEC"),  # the spec is for "quota"
        ],
    )
    assert specs == [QUOTA]
    assert len(errors) == 5 and all("kind plugin" in e and "unknown distribution" in e for e in errors)
    joined = "\n".join(errors)
    for expected in (
        "already registers kind 'quota'",
        "is a built-in kind",
        "failed to load: ModuleNotFoundError",
        "loads a object, not a",
        "its KindSpec is for kind 'quota'",
    ):
        assert expected in joined, joined
    assert plugins.discover(BUILTIN, KindSpec, [ep("quota", "tests.unit.test_kind_plugins:quota_factory")]) == ([QUOTA], [])


def test_no_command_runs_while_a_plugin_is_refused(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(
        registry, "_PLUGIN_ERRORS", ["kind plugin 'x' = 'x:y' (an unknown distribution): failed to load: ImportError: nope"]
    )
    assert cli.main(["kinds"]) == 2
    assert "kind plugin 'x'" in capsys.readouterr().err
    monkeypatch.setattr(registry, "_PLUGIN_ERRORS", [])
    assert cli.main(["kinds"]) == 0


@pytest.fixture
def quota(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(KINDS, QUOTA.kind, QUOTA)  # type: ignore[index]


def test_a_kinds_section_is_decoded_and_reaches_its_policy(quota: None, tmp_path: Path) -> None:
    (tmp_path / "b.toml").write_text(ROUTE + "[quota]\nmax_per_task = 7\n")
    cfg = load_config(tmp_path / "b.toml", env={})
    assert cfg.kind_settings["quota"] == QuotaSettings(max_per_task=7)
    assert cfg.policy().policy_settings["quota"] == QuotaSettings(max_per_task=7)
    (tmp_path / "none.toml").write_text(ROUTE)
    assert load_config(tmp_path / "none.toml", env={}).kind_settings["quota"] == QuotaSettings()  # absent: the defaults
    over = load_config(tmp_path / "b.toml", env={"BUSGUARD_QUOTA__WINDOW_MS": "5000"})
    assert over.kind_settings["quota"] == QuotaSettings(max_per_task=7, window_ms=5000)


@pytest.mark.parametrize(
    ("table", "field", "value"),
    [("max_per_task = 0", "quota.max_per_task", 0), ("window_ms = 'soon'", "quota.window_ms", "soon"), ("limit = 3", "quota.limit", 3)],
)
def test_errors_in_a_kinds_section_name_the_file_the_key_and_what_is_allowed(
    quota: None, tmp_path: Path, table: str, field: str, value: object
) -> None:
    (tmp_path / "b.toml").write_text(ROUTE + f"[quota]\n{table}\n")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "b.toml", env={})
    assert (info.value.field, info.value.value) == (field, value) and "b.toml" in str(info.value) and info.value.allowed


def test_without_the_kind_its_section_is_an_unknown_key(tmp_path: Path) -> None:
    (tmp_path / "b.toml").write_text(ROUTE + "[quota]\nmax_per_task = 7\n")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "b.toml", env={})
    assert info.value.field == "quota"


def test_a_kind_cannot_take_a_section_busguard_has(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(KINDS, "quota", msgspec.structs.replace(QUOTA, settings_section="kafka"))  # type: ignore[index]
    (tmp_path / "b.toml").write_text(ROUTE)
    with pytest.raises(ConfigError, match="settings_section"):
        load_config(tmp_path / "b.toml", env={})
