"""Errors that explain themselves: which file, which field, which value, what is allowed."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, ClassVar

import msgspec


class ExplainedError(ValueError):
    """An input error that names the file, the field, the value and what is allowed."""

    def __init__(self, file: str, field: str, value: object, allowed: str) -> None:
        self.file = file
        self.field = field
        self.value = value
        self.allowed = allowed
        where = f"{file}: {field}" if field else file
        shown = "" if value is None else f" = {value!r}"
        super().__init__(f"{where}{shown}: {allowed}")


class StoreUnreachable(ExplainedError):
    """The state store could not be reached or opened: PostgreSQL did not
    answer for `state.retry_s`, or the SQLite file cannot be created or
    written. Not a bug and not bad input, so one line naming the setting, its
    value (a DSN with its password redacted) and what to do, and exit status
    `EXIT_STATUS`, which a supervisor can tell from a config error (2)."""

    EXIT_STATUS: ClassVar[int] = 3

    @classmethod
    def postgres(cls, file: str, dsn_redacted: str, problem: str, retry_s: float) -> StoreUnreachable:
        return cls(
            file,
            "state.dsn",
            dsn_redacted,
            f"{problem} (waited state.retry_s = {retry_s:g} s); start PostgreSQL there or correct state.dsn, then start busguard again",
        )

    @classmethod
    def unwritable(cls, file: str, field: str, path: str, problem: str) -> StoreUnreachable:
        return cls(file, field, path, f"{problem}; a file in a directory this user can create and write, or correct {field}")


class SettingError(ValueError):
    """Raised by a kind's settings Struct (in its `__post_init__`) for a value
    its type cannot refuse by itself: the config error then names the file,
    `<section>.<key>`, the value and what is allowed, as for busguard's own
    keys. Kinds import it as `busguard.policies.seam.SettingError`."""

    def __init__(self, key: str, value: object, allowed: str) -> None:
        super().__init__(f"{key} = {value!r}: {allowed}")
        self.key, self.value, self.allowed = key, value, allowed


class ConfigError(ExplainedError):
    @classmethod
    def from_validation(cls, file: str, exc: msgspec.ValidationError, data: object = None, *roots: type) -> ConfigError:
        """Turn msgspec's `Expected int, got str - at $.a.b[0]` into file/field/value.
        With `roots` (the types `data` was converted to), a field with named
        values lists them: msgspec's own "Invalid enum value 'x'" does not."""
        message = str(exc)
        m = re.search(r" - at `\$\.?(.*)`$", message)
        path = m.group(1) if m else ""
        allowed = message[: m.start()] if m else message
        choices = next((c for c in (_choices(r, path) for r in roots) if c), None)
        if choices:
            allowed = f"{allowed}; allowed: {choices}" if allowed.startswith("Expected") else f"one of {choices}"
        unknown = re.match(r"Object contains unknown field `(.+)`$", allowed)
        if unknown:  # name the key itself, not the table that holds it
            path = f"{path}.{unknown.group(1)}" if path else unknown.group(1)
            allowed = "not a known key here (see docs/config.md)"
        setting = exc.__context__
        if isinstance(setting, SettingError):  # a kind's settings Struct refused one of its keys
            return cls(file, f"{path}.{setting.key}" if path else setting.key, setting.value, setting.allowed)
        value = _lookup(data, path) if data is not None and path else None
        return cls(file, path, value, allowed)


def _lookup(data: object, path: str) -> object:
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        try:
            if part.startswith("["):
                data = data[int(part[1:-1])]  # type: ignore[index]
            else:
                data = data[part]  # type: ignore[index]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def read_toml(path: Path, what: str) -> dict[str, Any]:
    """A TOML file's contents, or a ConfigError naming the file and the problem."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(str(path), "", None, f"the {what} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), "", None, f"not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            str(path), "", None, f"UTF-8 text (TOML); byte 0x{exc.object[exc.start]:02x} at offset {exc.start} is not"
        ) from None
    except OSError as exc:
        raise ConfigError(str(path), "", None, f"a readable file ({type(exc).__name__}: {exc.strerror or exc})") from exc


def _choices(root: type, path: str) -> str | None:
    """What a field whose type names its values (a `Literal`, alone or in a
    union with an integer range) allows, or None."""
    t: msgspec.inspect.Type = msgspec.inspect.type_info(root)
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        if isinstance(t, msgspec.inspect.UnionType):  # an optional table or list
            inner = [u for u in t.types if not isinstance(u, msgspec.inspect.NoneType)]
            t = inner[0] if len(inner) == 1 else t
        if part.startswith("["):
            if not isinstance(t, msgspec.inspect.ListType | msgspec.inspect.TupleType | msgspec.inspect.VarTupleType):
                return None
            t = t.item_type if not isinstance(t, msgspec.inspect.TupleType) else msgspec.inspect.AnyType()
        elif isinstance(t, msgspec.inspect.StructType):
            t = next((f.type for f in t.fields if f.encode_name == part), msgspec.inspect.AnyType())
        else:
            return None
    leaves = t.types if isinstance(t, msgspec.inspect.UnionType) else (t,)
    named = [repr(v) for leaf in leaves if isinstance(leaf, msgspec.inspect.LiteralType) for v in leaf.values]
    if not named:
        return None
    ranges = [_int_range(leaf) for leaf in leaves if isinstance(leaf, msgspec.inspect.IntType)]
    return ", ".join(named) + (f", or {' or '.join(ranges)}" if ranges else "")


def _int_range(t: msgspec.inspect.IntType) -> str:
    if t.ge is not None and t.le is not None:
        return f"an integer {t.ge}–{t.le}"
    if t.ge is not None or t.le is not None:
        return f"an integer {'>= ' + str(t.ge) if t.ge is not None else '<= ' + str(t.le)}"
    return "an integer"
