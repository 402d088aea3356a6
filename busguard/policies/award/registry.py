"""The local verification registry: what this deployment can check before an award.

Seed 002's condition of validity is checkable before award only against a
local list: the canonicalizers this awarder can itself recompute, the
verifiers it has chosen to trust-delegate to (each pinned to a key, so a
delegated attestation can be checked rather than assumed), and the task
classes for which a best-effort award is acceptable at all. This module is
that list as a typed config section plus its load-time validation.

busguard/config.py embeds `VerificationConfig` as the `[verification]`
section and calls `build_registry` from its validation; busguard.wiring
installs the result in the award policy (policy.configure). Every error is a
ConfigError naming the file, the key, the value and what is allowed.

Pure apart from plugin discovery, which imports the installed canonicalizer
plugins once, at load.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Annotated, Any, Final

import msgspec

from busguard.errors import ConfigError
from busguard.policies.award.canonicalizers import (
    BUILTIN,
    CANONICALIZER_ID,
    Canonicalizer,
    PluginError,
    available_canonicalizers,
)
from busguard.protocol.identity import canonical_principal, multikey_decode, public_key_from_agent_id
from busguard.protocol.signing import is_acceptable_public_key

__all__ = [
    "TASK_CLASS",
    "TrustedVerifier",
    "VerificationConfig",
    "VerificationRegistry",
    "VerifierConfig",
    "build_registry",
    "load_verification",
]

#: Task class names: 1-128 characters of [A-Za-z0-9._:/-], starting with a
#: letter or digit (no whitespace, so a name in a log line is unambiguous).
TASK_CLASS: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")

#: A verifier manifest id is opaque (the receipt's `verifier_manifest`), but
#: bounded and printable so it can be logged and compared as it is.
_MANIFEST: Final = re.compile(r"[\x21-\x7e]{1,256}")

_Text = Annotated[str, msgspec.Meta(min_length=1)]


class VerifierConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """One trust-delegated verifier (`[[verification.verifiers]]`)."""

    manifest: _Text
    agent_id: _Text
    canonicalizers: list[str]
    public_key: str | None = None


class VerificationConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """The `[verification]` section."""

    canonicalizers: list[str] = msgspec.field(default_factory=lambda: sorted(BUILTIN))
    verifiers: list[VerifierConfig] = []
    best_effort_task_classes: list[str] = []


class TrustedVerifier(msgspec.Struct, frozen=True, kw_only=True):
    """A delegation as recorded: an award relying on it names `manifest` and this key."""

    manifest: str
    agent_id: str
    principal: str
    public_key: bytes
    canonicalizers: frozenset[str]


class VerificationRegistry(msgspec.Struct, frozen=True, kw_only=True):
    """The validated registry: lookups, and which mode they allow; the award decision lives in policy.py."""

    canonicalizers: Mapping[str, Canonicalizer]
    verifiers: Mapping[str, TrustedVerifier]
    best_effort_task_classes: frozenset[str]

    def recompute(self, canonicalizer_id: str) -> Canonicalizer | None:
        """The local implementation of `canonicalizer_id`, if this deployment holds one."""
        return self.canonicalizers.get(canonicalizer_id)

    def delegation(self, verifier_manifest: str, canonicalizer_id: str) -> TrustedVerifier | None:
        """The verifier trusted to attest roots under `canonicalizer_id` for this manifest, if any.

        A verifier trusted for other canonicalizers is no delegation for this
        one: trust is granted per function, not per party.
        """
        verifier = self.verifiers.get(verifier_manifest)
        if verifier is None or canonicalizer_id not in verifier.canonicalizers:
            return None
        return verifier

    def tolerates_best_effort(self, task_class: str) -> bool:
        return task_class in self.best_effort_task_classes

    def mode(
        self, canonicalizer_id: str, verifier_manifest: str | None, *, requires_check: bool, task_class: str
    ) -> tuple[str, str | None] | None:
        """The first mode, in verified > delegated > best_effort order, in
        which a bid under `canonicalizer_id` (naming `verifier_manifest`) could
        be awarded here, with the verifier for delegated; None for none."""
        if self.recompute(canonicalizer_id) is not None:
            return "verified", None
        if verifier_manifest is not None and self.delegation(verifier_manifest, canonicalizer_id) is not None:
            return "delegated", verifier_manifest
        if not requires_check and self.tolerates_best_effort(task_class):
            return "best_effort", None
        return None


def load_verification(
    raw: object,
    source: str,
    *,
    key: str = "verification",
    canonicalizers: Mapping[str, Canonicalizer] | None = None,
) -> VerificationRegistry:
    """Validate the raw `[verification]` table (as tomllib gives it) into a registry.

    `canonicalizers` is what may be listed (default: built-ins plus installed
    plugins); `key` is the section's name in `source`, used in error messages.
    """
    table: Any = {} if raw is None else raw
    try:
        section = msgspec.convert(table, VerificationConfig)
    except msgspec.ValidationError as exc:
        err = ConfigError.from_validation(source, exc, table)
        if err.field:
            raise ConfigError(source, f"{key}.{err.field}", err.value, err.allowed) from None
        raise ConfigError(source, key, table, err.allowed) from None
    return build_registry(section, source, key=key, canonicalizers=canonicalizers)


def build_registry(
    section: VerificationConfig,
    source: str,
    *,
    key: str = "verification",
    canonicalizers: Mapping[str, Canonicalizer] | None = None,
) -> VerificationRegistry:
    """Cross-field rules msgspec cannot express, and id resolution."""
    if canonicalizers is None:
        try:
            canonicalizers = available_canonicalizers()
        except PluginError as exc:
            raise ConfigError(
                source, f"{key}.canonicalizers", None, f"installed canonicalizer plugins could not be loaded: {exc}"
            ) from None
    loaded = ", ".join(sorted(canonicalizers)) or "(none)"
    local: dict[str, Canonicalizer] = {}
    for i, cid in enumerate(section.canonicalizers):
        field = f"{key}.canonicalizers[{i}]"
        if cid not in canonicalizers:
            raise ConfigError(
                source,
                field,
                cid,
                f"one of the canonicalizers loaded here: {loaded} (built-in, or installed through the "
                "'busguard.canonicalizers' entry point group; see docs/verification-registry.md)",
            )
        if cid in local:
            raise ConfigError(source, field, cid, "each canonicalizer once (already listed)")
        local[cid] = canonicalizers[cid]
    verifiers: dict[str, TrustedVerifier] = {}
    for i, entry in enumerate(section.verifiers):
        verifier = _verifier(entry, source, f"{key}.verifiers[{i}]")
        if verifier.manifest in verifiers:
            raise ConfigError(source, f"{key}.verifiers[{i}].manifest", verifier.manifest, "each verifier manifest once (already listed)")
        verifiers[verifier.manifest] = verifier
    classes = _names(section.best_effort_task_classes, source, f"{key}.best_effort_task_classes")
    return VerificationRegistry(
        canonicalizers=MappingProxyType(local), verifiers=MappingProxyType(verifiers), best_effort_task_classes=classes
    )


def _verifier(entry: VerifierConfig, source: str, where: str) -> TrustedVerifier:
    if _MANIFEST.fullmatch(entry.manifest) is None:
        raise ConfigError(source, f"{where}.manifest", entry.manifest, "1-256 printable ASCII characters without spaces")
    try:
        principal = canonical_principal(entry.agent_id)
    except ValueError as exc:
        raise ConfigError(source, f"{where}.agent_id", entry.agent_id, f"an agent id ({exc})") from None
    implicit = public_key_from_agent_id(entry.agent_id)
    if entry.public_key is None:
        if implicit is None:
            raise ConfigError(
                source,
                f"{where}.public_key",
                None,
                f"required: agent id {entry.agent_id!r} does not carry its key, so name the verifier's Ed25519 "
                "multikey 'z6Mk…' here (a delegation nobody can check is not a delegation)",
            )
        public_key = implicit
        shown = entry.agent_id
        field = f"{where}.agent_id"
    else:
        try:
            public_key = multikey_decode(entry.public_key)
        except ValueError as exc:
            raise ConfigError(source, f"{where}.public_key", entry.public_key, f"an Ed25519 multikey 'z6Mk…' ({exc})") from None
        if implicit is not None and implicit != public_key:
            raise ConfigError(
                source,
                f"{where}.public_key",
                entry.public_key,
                f"the key agent id {entry.agent_id!r} carries, or no public_key at all (they name different keys)",
            )
        shown = entry.public_key
        field = f"{where}.public_key"
    if not is_acceptable_public_key(public_key):
        raise ConfigError(
            source, field, shown, "a canonical Ed25519 public key of large prime order (small-order and non-canonical keys are refused)"
        )
    if not entry.canonicalizers:
        raise ConfigError(
            source,
            f"{where}.canonicalizers",
            [],
            "at least one canonicalizer id this verifier is trusted to attest roots for",
        )
    ids: set[str] = set()
    for j, cid in enumerate(entry.canonicalizers):
        field = f"{where}.canonicalizers[{j}]"
        if CANONICALIZER_ID.fullmatch(cid) is None:
            raise ConfigError(source, field, cid, "a canonicalizer id: 1-64 of [a-z0-9._-], starting with a letter or digit")
        if cid in ids:
            raise ConfigError(source, field, cid, "each canonicalizer once (already listed)")
        ids.add(cid)
    return TrustedVerifier(
        manifest=entry.manifest,
        agent_id=entry.agent_id,
        principal=principal,
        public_key=public_key,
        canonicalizers=frozenset(ids),
    )


def _names(names: Iterable[str], source: str, where: str) -> frozenset[str]:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if TASK_CLASS.fullmatch(name) is None:
            raise ConfigError(
                source, f"{where}[{i}]", name, "a task class name: 1-128 of [A-Za-z0-9._:/-], starting with a letter or digit"
            )
        if name in seen:
            raise ConfigError(source, f"{where}[{i}]", name, "each task class once (already listed)")
        seen.add(name)
    return frozenset(seen)
