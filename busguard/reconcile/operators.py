"""Who may resolve escalations besides the deployment key: the operators file.

    [[operator]]
    name = "alice"                 # recorded as `by: operator:alice`
    public_key = "z6Mk…"           # Ed25519 multikey (`busguard keygen` prints it)

An operator signs resolve commands with their own key, so resolving does not
need the deployment's private key on an operator's machine, and the name in
the audit log is authenticated: a command signed with alice's key must say
`operator = "alice"`. Removing an operator from the file (the reconciler
follows it while running) withdraws that key at once. Keys are checked as the
key registry's are: small-order and non-canonical keys are refused.
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from busguard.errors import ConfigError, read_toml
from busguard.protocol.identity import multikey_decode, multikey_encode
from busguard.protocol.signing import is_acceptable_public_key

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")


class _Operator(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    name: str
    public_key: str


class _OperatorsFile(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    operator: list[_Operator] = []


class Operators:
    """Immutable after loading: public key -> operator name."""

    def __init__(self, by_key: dict[bytes, str]) -> None:
        self._by_key = by_key

    def name_for(self, public_key: bytes) -> str | None:
        return self._by_key.get(public_key)

    def __len__(self) -> int:
        return len(self._by_key)

    def by_name(self) -> dict[str, str]:
        """name -> multikey: what the auditor checks `by: operator:<name>` against."""
        return {name: multikey_encode(pk) for pk, name in self._by_key.items()}

    @classmethod
    def none(cls) -> Operators:
        return cls({})

    @classmethod
    def load(cls, path: Path) -> Operators:
        raw = read_toml(path, "operators file")
        try:
            parsed = msgspec.convert(raw, _OperatorsFile)
        except msgspec.ValidationError as exc:
            raise ConfigError.from_validation(str(path), exc, raw) from None
        by_key: dict[bytes, str] = {}
        names: set[str] = set()
        for i, op in enumerate(parsed.operator):
            where = f"operator[{i}]"
            if _NAME.fullmatch(op.name) is None:
                raise ConfigError(
                    str(path), f"{where}.name", op.name, "1-64 characters of [A-Za-z0-9._@-], starting with a letter or digit"
                )
            if op.name in names:
                raise ConfigError(str(path), f"{where}.name", op.name, "each operator name may be listed once")
            try:
                pk = multikey_decode(op.public_key)
            except ValueError as exc:
                raise ConfigError(
                    str(path), f"{where}.public_key", op.public_key, f"an Ed25519 multikey 'z6Mk…' is required ({exc})"
                ) from None
            if not is_acceptable_public_key(pk):
                raise ConfigError(str(path), f"{where}.public_key", op.public_key, "a canonical Ed25519 public key of large prime order")
            if pk in by_key:
                raise ConfigError(
                    str(path), f"{where}.public_key", op.public_key, f"already the key of operator {by_key[pk]!r}; one key per operator"
                )
            names.add(op.name)
            by_key[pk] = op.name
        return cls(by_key)
