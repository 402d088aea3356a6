"""The key registry: who may send, with which keys, and when.

Operators list agents in a TOML file (see configs/keys.toml). A named agent
(`planner`, a DID) lists its Ed25519 keys with optional validity windows, so a
key can be rotated (overlapping windows) or revoked (`revoked_at`). A
self-certifying INK id (`tulpa:z6Mk…` / `ink:z6Mk…`) carries its own key and
needs no key list; listing it admits it, and `revoked_at` on the agent bans
it. With `open_enrollment = true`, unlisted self-certifying senders are
admitted too (their signatures still have to verify).

Validity is judged at the receiver's clock, not the sender's `issued_at`: a
compromised key can backdate a receipt, so the moment the operator revokes it
nothing signed with it is admitted any more.

Keys are checked when the file is loaded: a small-order, non-canonical or
off-curve key is refused, because libsodium would accept forgeries-by-design
against such keys in some protocols and no honest signer has one.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from busguard.errors import ConfigError, read_toml
from busguard.protocol.identity import canonical_principal, multikey_decode, public_key_from_agent_id
from busguard.protocol.reasons import Reason
from busguard.protocol.signing import is_acceptable_public_key
from busguard.protocol.timestamps import parse_timestamp

_FAR_PAST = -(2**62)
_FAR_FUTURE = 2**62


class _KeyEntry(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    key_id: str
    public_key: str
    not_before: str | None = None
    not_after: str | None = None
    revoked_at: str | None = None


class _AgentEntry(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    id: str
    key: list[_KeyEntry] = []
    not_before: str | None = None
    not_after: str | None = None
    revoked_at: str | None = None


class _RegistryFile(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    open_enrollment: bool = False
    agent: list[_AgentEntry] = []


class KeyWindow(msgspec.Struct, frozen=True, kw_only=True):
    key_id: str
    public_key: bytes
    not_before: int = _FAR_PAST
    not_after: int = _FAR_FUTURE
    revoked_at: int = _FAR_FUTURE

    def status(self, now_ms: int) -> Reason | None:
        if now_ms >= self.revoked_at:
            return Reason.REVOKED_KEY
        if not (self.not_before <= now_ms < self.not_after):
            return Reason.EXPIRED_KEY
        return None


class KeyLookup(msgspec.Struct, frozen=True):
    """Either usable keys, or the reason there are none."""

    keys: tuple[KeyWindow, ...] = ()
    reason: Reason | None = None
    detail: str = ""


class KeyRegistry:
    """Immutable after construction; lookups are pure functions of (sender, key id, now)."""

    def __init__(self, agents: dict[str, tuple[KeyWindow, ...]], open_enrollment: bool = False) -> None:
        self._agents = agents
        self.open_enrollment = open_enrollment
        # The answer for an agent with one key, while that key is valid: built
        # once, as every record of such an agent gets it.
        self._only_key = {p: KeyLookup(keys) for p, keys in agents.items() if len(keys) == 1}

    @property
    def principals(self) -> frozenset[str]:
        return frozenset(self._agents)

    def lookup(self, principal: str, key_id: str | None, now_ms: int) -> KeyLookup:
        found = self._only_key.get(principal)
        if found is not None and key_id is None:
            only = found.keys[0]  # the common case, kept cheap: it runs per record
            if only.not_before <= now_ms < only.not_after and now_ms < only.revoked_at:
                return found
        keys = self._agents.get(principal)
        if keys is None:
            implicit = _implicit_key(principal)
            if not (self.open_enrollment and implicit is not None):
                return KeyLookup(reason=Reason.UNKNOWN_SENDER, detail=f"{principal!r} is not in the key registry")
            if not is_acceptable_public_key(implicit.public_key):  # the same bar as registered keys
                return KeyLookup(reason=Reason.UNKNOWN_SENDER, detail=f"{principal!r} carries a small-order or non-canonical key")
            keys = (implicit,)
        if key_id is not None:
            keys = tuple(k for k in keys if k.key_id == key_id)
            if not keys:
                return KeyLookup(reason=Reason.UNKNOWN_KEY, detail=f"{principal!r} has no key {key_id!r}")
        usable = tuple(k for k in keys if k.status(now_ms) is None)
        if not usable:
            revoked = all(k.status(now_ms) is Reason.REVOKED_KEY for k in keys)
            reason = Reason.REVOKED_KEY if revoked else Reason.EXPIRED_KEY
            return KeyLookup(reason=reason, detail=f"no key of {principal!r} is valid now")
        return KeyLookup(keys=usable)

    @classmethod
    def load(cls, path: str | Path) -> KeyRegistry:
        path = Path(path)
        raw = read_toml(path, "key registry file")
        try:
            parsed = msgspec.convert(raw, _RegistryFile)
        except msgspec.ValidationError as exc:
            raise ConfigError.from_validation(str(path), exc, raw) from None
        return cls.from_entries(parsed, str(path))

    @classmethod
    def from_entries(cls, parsed: _RegistryFile, source: str) -> KeyRegistry:
        agents: dict[str, tuple[KeyWindow, ...]] = {}
        for i, agent in enumerate(parsed.agent):
            where = f"agent[{i}]"
            try:
                principal = canonical_principal(agent.id)
            except ValueError as exc:
                raise ConfigError(source, f"{where}.id", agent.id, str(exc)) from None
            if principal in agents:
                raise ConfigError(
                    source, f"{where}.id", agent.id, "each agent may be listed once (tulpa:/ink: spellings of one key are the same agent)"
                )
            bounds = {name: _ms(source, f"{where}.{name}", getattr(agent, name)) for name in ("not_before", "not_after", "revoked_at")}
            implicit = _implicit_key(principal)
            if implicit is not None:
                if agent.key:
                    raise ConfigError(
                        source, f"{where}.key", "[...]", "a self-certifying tulpa:/ink: agent carries its key in its id; list no keys"
                    )
                _check_key(source, f"{where}.id", agent.id, implicit.public_key)
                windows: tuple[KeyWindow, ...] = (msgspec.structs.replace(implicit, **_tighten(implicit, bounds)),)
            else:
                if not agent.key:
                    raise ConfigError(source, f"{where}.key", "[]", f"named agent {agent.id!r} needs at least one [[agent.key]]")
                built = []
                seen_ids: set[str] = set()
                for j, key in enumerate(agent.key):
                    kwhere = f"{where}.key[{j}]"
                    if key.key_id in seen_ids:
                        raise ConfigError(source, f"{kwhere}.key_id", key.key_id, "key ids must be unique within an agent")
                    seen_ids.add(key.key_id)
                    try:
                        pk = multikey_decode(key.public_key)
                    except ValueError as exc:
                        raise ConfigError(
                            source, f"{kwhere}.public_key", key.public_key, f"an Ed25519 multikey 'z6Mk…' is required ({exc})"
                        ) from None
                    _check_key(source, f"{kwhere}.public_key", key.public_key, pk)
                    own = {name: _ms(source, f"{kwhere}.{name}", getattr(key, name)) for name in ("not_before", "not_after", "revoked_at")}
                    window = KeyWindow(key_id=key.key_id, public_key=pk)
                    window = msgspec.structs.replace(window, **_tighten(window, own))
                    built.append(msgspec.structs.replace(window, **_tighten(window, bounds)))
                windows = tuple(built)
            agents[principal] = windows
        return cls(agents, parsed.open_enrollment)


def _implicit_key(principal: str) -> KeyWindow | None:
    if not principal.startswith("key:"):
        return None
    pk = public_key_from_agent_id("tulpa:" + principal[4:])
    return None if pk is None else KeyWindow(key_id=principal[4:], public_key=pk)


def _check_key(source: str, field: str, value: str, pk: bytes) -> None:
    if not is_acceptable_public_key(pk):
        raise ConfigError(
            source, field, value, "a canonical Ed25519 public key of large prime order (small-order and non-canonical keys are refused)"
        )


def _ms(source: str, field: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_timestamp(value)
    except ValueError:
        raise ConfigError(source, field, value, "an RFC 3339 timestamp such as 2026-01-01T00:00:00Z") from None


def _tighten(window: KeyWindow, bounds: dict[str, int | None]) -> dict[str, int]:
    """Combine agent-wide and per-key bounds: the narrower one wins."""
    out: dict[str, int] = {}
    if (nb := bounds.get("not_before")) is not None:
        out["not_before"] = max(window.not_before, nb)
    if (na := bounds.get("not_after")) is not None:
        out["not_after"] = min(window.not_after, na)
    if (ra := bounds.get("revoked_at")) is not None:
        out["revoked_at"] = min(window.revoked_at, ra)
    return out
