"""A kind's typed settings reach its interceptors as well as `parse`, and a
dotted kind name is a usable TOML table and environment name.

The test kind `cfg.set` has a settings Struct (`[cfg.set]`): an allow-list of
senders, checked by a stateless interceptor, so a sender not on it is refused
before its nonce is spent; and a limit its policy reads through `parse`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

import msgspec
import pytest

from busguard.admission.types import AdmissionPolicy
from busguard.config import load_config
from busguard.errors import ConfigError
from busguard.policies import KINDS, KindSpec
from busguard.policies.seam import (
    Objection,
    PolicyContext,
    PolicyInput,
    PolicyKey,
    PolicyOutcome,
    PolicyView,
    SettingError,
    settings_of,
)
from busguard.protocol.envelope import Envelope
from busguard.protocol.identity import canonical_principal
from busguard.protocol.reasons import Outcome, Reason
from busguard.state.sqlite.store import SqliteStore
from tests.unit.harness import NOW, Harness, agent, sender
from tests.unit.test_config import ROUTE

KIND = "cfg.set"
TO = agent("executor")


class CfgSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    senders: list[str] = []
    limit: Annotated[int, msgspec.Meta(ge=1)] = 10
    label: str = "x"

    def __post_init__(self) -> None:
        for i, who in enumerate(self.senders):
            if not canonical_principal(who).startswith("key:") if who else True:
                raise SettingError(f"senders[{i}]", who, "an agent id bound to a key (tulpa:z6Mk…, docs/protocol.md 5.2)")


def allowed(envelope: Envelope, settings: CfgSettings) -> Objection | None:
    principal = canonical_principal(envelope.receipt.sender)
    if principal in {canonical_principal(s) for s in settings.senders}:
        return None
    return Objection(Outcome.REJECT, "sender_not_allowed", f"{principal} is not in cfg.set.senders")


class LimitPolicy:
    def parse(self, record: PolicyInput, context: PolicyContext) -> int:
        return settings_of(context, CfgSettings, KIND).limit

    def keys(self, parsed: int) -> Iterable[PolicyKey]:
        return ()

    def decide(self, parsed: int, view: PolicyView, now_ms: int) -> PolicyOutcome:
        return PolicyOutcome(annotations={"cfg.limit": str(parsed)})


SPEC = KindSpec(
    kind=KIND,
    interceptors=(allowed,),
    policy=LimitPolicy(),
    reasons=("sender_not_allowed",),
    task_index=False,
    settings=CfgSettings,
)


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(KINDS, KIND, SPEC)  # type: ignore[index]


def record(task: str = "t", who: str = "planner"):  # type: ignore[no-untyped-def]
    return sender(who).sign(kind=KIND, task_id=task, receiver=TO, payload=b"{}")


def settings(**kw: object) -> AdmissionPolicy:
    return AdmissionPolicy(policy_settings={KIND: CfgSettings(**kw)})  # type: ignore[arg-type]


def test_the_interceptor_gets_the_typed_settings_and_its_refusal_spends_no_nonce(tmp_path: Path) -> None:
    rec = record()
    h = Harness(policy=settings(senders=[agent("executor")]), store=SqliteStore(tmp_path / "s.db", now_ms=NOW - 3_600_000))
    refused = h.one(rec)
    assert (refused.outcome, refused.reason) == (Outcome.REJECT, "sender_not_allowed")
    # the operator adds the sender; the same signed record is then admitted: its nonce was not spent
    h.policy = settings(senders=[agent("planner")], limit=4)
    admitted = h.one(rec)
    assert (admitted.outcome, admitted.annotations) == (Outcome.FORWARD, {"cfg.limit": "4"})  # parse saw the settings too
    assert h.one(rec).reason == Reason.NONCE_REPLAY


def test_without_a_table_the_interceptor_and_parse_get_the_structs_defaults() -> None:
    d = Harness().one(record())
    assert (d.reason, d.detail) == ("sender_not_allowed", f"{canonical_principal(agent('planner'))} is not in cfg.set.senders")


@pytest.mark.parametrize(
    "table",
    [
        '[cfg.set]\nsenders = ["{who}"]\nlimit = 3\n',  # nested tables: what `[cfg.set]` is in TOML
        '["cfg.set"]\nsenders = ["{who}"]\nlimit = 3\n',  # one quoted key
    ],
)
def test_a_dotted_kind_name_is_its_toml_table_either_way(tmp_path: Path, table: str) -> None:
    (tmp_path / "b.toml").write_text(ROUTE + table.replace("{who}", agent("planner")))
    cfg = load_config(tmp_path / "b.toml", env={})
    assert cfg.kind_settings[KIND] == CfgSettings(senders=[agent("planner")], limit=3)
    d = Harness(policy=cfg.policy()).one(record())
    assert (d.outcome, d.annotations) == (Outcome.FORWARD, {"cfg.limit": "3"})


def test_a_dotted_kind_names_its_environment_override_with_one_double_underscore_per_dot(tmp_path: Path) -> None:
    (tmp_path / "b.toml").write_text(ROUTE + "[cfg.set]\nlimit = 3\n")
    env = {"BUSGUARD_CFG__SET__LIMIT": "5", "BUSGUARD_CFG__SET__LABEL": "42", "BUSGUARD_CFG__SET__SENDERS": f'["{agent("planner")}"]'}
    cfg = load_config(tmp_path / "b.toml", env=env)
    assert cfg.kind_settings[KIND] == CfgSettings(senders=[agent("planner")], limit=5, label="42")  # a string key keeps its text
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "b.toml", env={"BUSGUARD_CFG__SET__LIMIT": "0"})
    assert (info.value.file, info.value.field, info.value.value) == ("$BUSGUARD_CFG__SET__LIMIT", "cfg.set.limit", 0)


@pytest.mark.parametrize(
    ("table", "field", "value", "allowed"),
    [
        ('senders = ["ok", "nobody"]', "cfg.set.senders[0]", "ok", "an agent id"),
        ("limit = 0", "cfg.set.limit", 0, ">= 1"),
        ("limmit = 3", "cfg.set.limmit", 3, "not a known key"),
    ],
)
def test_a_settings_error_names_the_file_the_section_key_the_value_and_what_is_allowed(
    tmp_path: Path, table: str, field: str, value: object, allowed: str
) -> None:
    (tmp_path / "b.toml").write_text(ROUTE + f"[cfg.set]\n{table}\n")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "b.toml", env={})
    e = info.value
    assert (e.file, e.field, e.value) == (str(tmp_path / "b.toml"), field, value) and allowed in e.allowed


def test_an_outer_table_that_is_not_the_kinds_is_still_an_unknown_key(tmp_path: Path) -> None:
    (tmp_path / "b.toml").write_text(ROUTE + "[cfg.set]\nlimit = 3\n[cfg.other]\nx = 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "b.toml", env={})
    assert info.value.field == "cfg"
