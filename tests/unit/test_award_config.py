"""`[verification]` in busguard.toml: loaded, validated with the file's name, and
what `busguard run` hands the award policy (busguard.wiring.build_guard)."""

from __future__ import annotations

from pathlib import Path

import pytest

from busguard.config import load_config
from busguard.errors import ConfigError
from tests.unit.harness import agent

ROUTE = '[[routes]]\nname = "r"\ninputs = ["agents.in"]\ndownstream = "agents.out"\n'


def test_the_section_is_optional_and_defaults_to_the_builtins(tmp_path: Path) -> None:
    (tmp_path / "b.toml").write_text(ROUTE)
    reg = load_config(tmp_path / "b.toml", env={}).verification_registry()
    assert sorted(reg.canonicalizers) == ["jcs-sha256", "merkle-sha256"] and not reg.verifiers and not reg.best_effort_task_classes


def test_a_registry_with_a_verifier_and_a_best_effort_class(tmp_path: Path) -> None:
    text = ROUTE + (
        '[verification]\ncanonicalizers = ["jcs-sha256"]\nbest_effort_task_classes = ["advisory.summary"]\n'
        f'[[verification.verifiers]]\nmanifest = "acme-verifier/v1"\nagent_id = "{agent("verifier")}"\ncanonicalizers = ["zk-trace.v3"]\n'
    )
    (tmp_path / "b.toml").write_text(text)
    reg = load_config(tmp_path / "b.toml", env={}).verification_registry()
    assert list(reg.canonicalizers) == ["jcs-sha256"] and reg.tolerates_best_effort("advisory.summary")
    v = reg.delegation("acme-verifier/v1", "zk-trace.v3")
    assert v is not None and v.agent_id == agent("verifier")


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ('[verification]\ncanonicalizers = ["c-private-norm.v1"]\n', "verification.canonicalizers[0]"),
        ("[verification]\nbest_effort = true\n", "verification"),
        (
            '[[verification.verifiers]]\nmanifest = "m"\nagent_id = "did:web:x.example"\ncanonicalizers = ["a"]\n',
            "verification.verifiers[0].public_key",
        ),
    ],
)
def test_errors_name_the_file_and_the_key(tmp_path: Path, section: str, field: str) -> None:
    (tmp_path / "b.toml").write_text(ROUTE + section)
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "b.toml", env={})
    assert info.value.field.startswith(field) and "b.toml" in str(info.value)


def test_the_award_section_reaches_the_policy_through_its_context(tmp_path: Path) -> None:
    """`Config.policy()` carries the `[award]` limits to the registered award
    policy as a setting; records admitted under that policy are judged by them,
    and nothing process-wide changes."""
    import msgspec

    from busguard.policies.award import policy as award
    from busguard.policies.award.limits import AwardConfig
    from busguard.protocol.reasons import Outcome, Reason
    from tests.unit.test_award_policy import B, Net

    (tmp_path / "b.toml").write_text(ROUTE + "[award]\nmax_bids_per_bidder = 2\n")
    cfg = load_config(tmp_path / "b.toml", env={})
    assert cfg.award == AwardConfig(max_bids_per_bidder=2)
    rules = cfg.policy().policy_settings[award.SETTINGS_KEY]
    assert isinstance(rules, award.AwardPolicy) and rules.limits == cfg.award
    net = Net()
    net.h.policy = msgspec.structs.replace(net.h.policy, policy_settings=cfg.policy().policy_settings)
    assert net.call().outcome == Outcome.FORWARD
    assert [net.bid(B, f"b{i}", 1, "jcs-sha256").reason for i in range(3)] == [Reason.ADMITTED, Reason.ADMITTED, Reason.AWARD_BIDDER_LIMIT]
    assert award.POLICY.limits == AwardConfig()  # the registered policy's own rules are untouched


@pytest.mark.parametrize(
    ("line", "value"),
    [("max_bids_per_bidder = 0", 0), ("max_bids_per_bidder = 65", 65), ("deadline_horizon_ms = 0", 0), ("horizon = 5", None)],
)
def test_award_errors_name_the_file_the_key_and_what_is_allowed(tmp_path: Path, line: str, value: int | None) -> None:
    (tmp_path / "b.toml").write_text(ROUTE + f"[award]\n{line}\n")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "b.toml", env={})
    assert info.value.field.startswith("award") and "b.toml" in str(info.value)
    if value is not None:
        assert info.value.field == f"award.{line.split()[0]}" and info.value.value == value and info.value.allowed
