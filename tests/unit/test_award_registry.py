"""The local verification registry: the [verification] section, loaded from TOML snippets."""

from __future__ import annotations

import hashlib
import textwrap
import tomllib
from typing import Any

import pytest

from busguard.errors import ConfigError
from busguard.policies.award.canonicalizers import BUILTIN, JcsSha256
from busguard.policies.award.registry import VerificationConfig, build_registry, load_verification
from busguard.protocol.identity import agent_id_for_key, canonical_principal, multikey_encode
from busguard.protocol.signing import public_key_from_seed

SOURCE = "busguard.toml"
PK_A = public_key_from_seed(hashlib.sha256(b"award registry verifier a").digest())
PK_B = public_key_from_seed(hashlib.sha256(b"award registry verifier b").digest())
SELF_CERTIFYING = agent_id_for_key(PK_A)
SMALL_ORDER = multikey_encode(bytes([1]) + bytes(31))  # the identity point


class Upper:
    id = "upper-sha256"
    input_format = "ASCII text; root = SHA-256 of it upper-cased"

    def root(self, output: bytes) -> str:
        return hashlib.sha256(output.upper()).hexdigest()


WITH_PLUGIN = {**BUILTIN, "upper-sha256": Upper()}


def load(snippet: str, canonicalizers: Any = None) -> Any:
    raw = tomllib.loads(textwrap.dedent(snippet))
    return load_verification(raw.get("verification"), SOURCE, canonicalizers=canonicalizers)


def refused(snippet: str, canonicalizers: Any = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(snippet, canonicalizers)
    assert info.value.file == SOURCE
    return info.value


# ----------------------------------------------------------------- accepted


def test_absent_section_means_builtins_only_no_delegation_no_best_effort() -> None:
    reg = load("")
    assert sorted(reg.canonicalizers) == ["jcs-sha256", "merkle-sha256"]
    assert reg.verifiers == {}
    assert reg.best_effort_task_classes == frozenset()
    assert reg.recompute("jcs-sha256") is BUILTIN["jcs-sha256"]
    assert reg.recompute("private-normalizer") is None
    assert not reg.tolerates_best_effort("anything")


def test_a_full_section() -> None:
    reg = load(
        f"""
        [verification]
        canonicalizers = ["merkle-sha256", "upper-sha256"]
        best_effort_task_classes = ["advisory.summary", "translate:draft"]

        [[verification.verifiers]]
        manifest = "acme-verifier/v1"
        agent_id = "{SELF_CERTIFYING}"
        canonicalizers = ["private-normalizer"]

        [[verification.verifiers]]
        manifest = "did-verifier/v2"
        agent_id = "did:web:verifier.example"
        public_key = "{multikey_encode(PK_B)}"
        canonicalizers = ["jcs-sha256", "zk-trace.v3"]
        """,
        WITH_PLUGIN,
    )
    assert sorted(reg.canonicalizers) == ["merkle-sha256", "upper-sha256"]
    assert reg.recompute("jcs-sha256") is None  # built-in, but not listed: not claimed
    assert reg.recompute("upper-sha256") is WITH_PLUGIN["upper-sha256"]
    acme = reg.delegation("acme-verifier/v1", "private-normalizer")
    assert acme is not None
    assert (acme.agent_id, acme.public_key, acme.principal) == (SELF_CERTIFYING, PK_A, canonical_principal(SELF_CERTIFYING))
    assert reg.delegation("acme-verifier/v1", "jcs-sha256") is None  # trust is per canonicalizer
    assert reg.delegation("unknown/v1", "private-normalizer") is None
    did = reg.delegation("did-verifier/v2", "zk-trace.v3")
    assert did is not None and did.public_key == PK_B and did.principal == "did:web:verifier.example"
    assert reg.tolerates_best_effort("advisory.summary")
    assert not reg.tolerates_best_effort("advisory")


def test_public_key_may_restate_a_self_certifying_key() -> None:
    reg = load(
        f"""
        [[verification.verifiers]]
        manifest = "m"
        agent_id = "{SELF_CERTIFYING}"
        public_key = "{multikey_encode(PK_A)}"
        canonicalizers = ["x"]
        """
    )
    assert reg.verifiers["m"].public_key == PK_A


def test_build_registry_takes_the_struct_the_config_module_will_embed() -> None:
    section = VerificationConfig(canonicalizers=["jcs-sha256"])
    reg = build_registry(section, SOURCE)
    assert list(reg.canonicalizers) == ["jcs-sha256"]
    assert isinstance(reg.canonicalizers["jcs-sha256"], JcsSha256)


def test_default_discovery_finds_the_builtins() -> None:
    # No canonicalizers= argument: built-ins plus installed plugins (none here).
    assert sorted(load('[verification]\ncanonicalizers = ["jcs-sha256"]').canonicalizers) == ["jcs-sha256"]


# ----------------------------------------------------------------- refused


def test_unknown_canonicalizer_names_file_key_value_and_what_is_loaded() -> None:
    err = refused(
        """
        [verification]
        canonicalizers = ["jcs-sha256", "private-normalizer"]
        """
    )
    assert (err.field, err.value) == ("verification.canonicalizers[1]", "private-normalizer")
    assert "jcs-sha256, merkle-sha256" in err.allowed
    assert "busguard.canonicalizers" in err.allowed
    assert str(err).startswith("busguard.toml: verification.canonicalizers[1] = 'private-normalizer': ")


def test_a_plugin_id_resolves_only_when_the_plugin_is_loaded() -> None:
    snippet = '[verification]\ncanonicalizers = ["upper-sha256"]'
    assert "upper-sha256" in load(snippet, WITH_PLUGIN).canonicalizers
    err = refused(snippet, BUILTIN)
    assert err.value == "upper-sha256"


@pytest.mark.parametrize(
    ("snippet", "field", "value", "allowed"),
    [
        ('canonicalizers = ["jcs-sha256", "jcs-sha256"]', "verification.canonicalizers[1]", "jcs-sha256", "already listed"),
        ('canonicalizers = "jcs-sha256"', "verification.canonicalizers", "jcs-sha256", "Expected `array`"),
        ("canonicalizers = [1]", "verification.canonicalizers[0]", 1, "Expected `str`"),
        ('best_effort = ["x"]', "verification.best_effort", ["x"], "not a known key here"),
        ('best_effort_task_classes = ["has space"]', "verification.best_effort_task_classes[0]", "has space", "task class name"),
        ('best_effort_task_classes = [""]', "verification.best_effort_task_classes[0]", "", "task class name"),
        ('best_effort_task_classes = ["a", "a"]', "verification.best_effort_task_classes[1]", "a", "already listed"),
    ],
)
def test_section_level_errors(snippet: str, field: str, value: object, allowed: str) -> None:
    err = refused(f"[verification]\n{snippet}\n")
    assert (err.field, err.value) == (field, value)
    assert allowed in err.allowed


def verifier(**fields: str | list[str]) -> str:
    body = {"manifest": "acme/v1", "agent_id": SELF_CERTIFYING, "canonicalizers": ["x"], **fields}
    lines = []
    for key, val in body.items():
        if val is None:
            continue
        rendered = "[" + ", ".join(f'"{v}"' for v in val) + "]" if isinstance(val, list) else f'"{val}"'
        lines.append(f"{key} = {rendered}")
    return "[[verification.verifiers]]\n" + "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("entry", "field", "value", "allowed"),
    [
        (verifier(manifest="has space"), "verification.verifiers[0].manifest", "has space", "printable ASCII"),
        (verifier(manifest=""), "verification.verifiers[0].manifest", "", "length >= 1"),
        (verifier(agent_id=""), "verification.verifiers[0].agent_id", "", "length >= 1"),
        (verifier(agent_id="did:web:v.example"), "verification.verifiers[0].public_key", None, "does not carry its key"),
        (verifier(public_key="not-a-key"), "verification.verifiers[0].public_key", "not-a-key", "Ed25519 multikey"),
        (verifier(public_key=multikey_encode(PK_B)), "verification.verifiers[0].public_key", multikey_encode(PK_B), "name different keys"),
        (
            verifier(agent_id="did:web:v.example", public_key=SMALL_ORDER),
            "verification.verifiers[0].public_key",
            SMALL_ORDER,
            "large prime order",
        ),
        (verifier(canonicalizers=[]), "verification.verifiers[0].canonicalizers", [], "at least one canonicalizer"),
        (verifier(canonicalizers=["Bad Id"]), "verification.verifiers[0].canonicalizers[0]", "Bad Id", "a canonicalizer id"),
        (verifier(canonicalizers=["x", "x"]), "verification.verifiers[0].canonicalizers[1]", "x", "already listed"),
        (verifier(trusted="yes"), "verification.verifiers[0].trusted", "yes", "not a known key here"),
        (
            verifier() + verifier(agent_id=agent_id_for_key(PK_B)),
            "verification.verifiers[1].manifest",
            "acme/v1",
            "each verifier manifest once",
        ),
    ],
)
def test_verifier_errors(entry: str, field: str, value: object, allowed: str) -> None:
    err = refused(entry)
    assert (err.field, err.value) == (field, value)
    assert allowed in err.allowed


def test_a_section_that_is_not_a_table_is_named() -> None:
    err = refused('verification = ["jcs-sha256"]')
    assert (err.field, err.value) == ("verification", ["jcs-sha256"])
    assert "Expected `object`" in err.allowed


def test_the_registry_cannot_be_changed_after_validation() -> None:
    reg = load("")
    with pytest.raises(TypeError):
        reg.canonicalizers["private-normalizer"] = Upper()  # type: ignore[index]


def test_missing_required_verifier_keys_are_named() -> None:
    err = refused('[[verification.verifiers]]\nmanifest = "m"\nagent_id = "did:web:x"\n')
    assert err.field == "verification.verifiers[0]"
    assert "canonicalizers" in err.allowed


def test_errors_use_the_key_the_section_is_mounted_under() -> None:
    with pytest.raises(ConfigError) as info:
        load_verification({"canonicalizers": ["nope"]}, "other.toml", key="award.verification")
    assert (info.value.file, info.value.field) == ("other.toml", "award.verification.canonicalizers[0]")
