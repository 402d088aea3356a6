"""Canonicalizers: the functions an awarder uses to recompute a committed root.

Seed 002's failure was an award on a receipt whose `state_root` was computed
by a canonicalization the awarder did not implement: the signature verified,
yet nothing had been verified. A canonicalizer here is the awarder's own,
independent way from a bidder's raw execution output (bytes) to the root the
bidder committed to; an award can only be settlement-grade for the
canonicalizer ids this deployment actually holds (see registry.py).

Each canonicalizer is strict: output it cannot canonicalize unambiguously is
refused with `MalformedOutput` naming the problem and where it is, never
"repaired". Two readings of one byte string (a duplicate key, a number that
rounds, a lone surrogate) are exactly how a self-consistent but wrong result
gets a root that matches.

Built-ins:

* ``jcs-sha256``   one JSON text; root = SHA-256 of its RFC 8785 (JCS) form;
* ``merkle-sha256`` one JSON text whose top level is an array of records;
  leaf i = the JCS bytes of record i; root = the RFC 9162 §2.1 Merkle tree
  hash over the leaves (merkle.py).

More come from installed distributions through the ``busguard.canonicalizers``
entry point group (docs/verification-registry.md, examples/canonicalizer-plugin/).

Roots are 64 lowercase hex characters (a SHA-256 digest).
"""

from __future__ import annotations

import decimal
import hashlib
import importlib.metadata
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Protocol, runtime_checkable

import rfc8785

from busguard.protocol.merkle import leaf_hash, merkle_root

__all__ = [
    "BUILTIN",
    "CANONICALIZER_ID",
    "ENTRY_POINT_GROUP",
    "MAX_DEPTH",
    "Canonicalizer",
    "JcsSha256",
    "MalformedOutput",
    "MerkleSha256",
    "PluginError",
    "available_canonicalizers",
    "discover_plugins",
    "jcs_canonical",
    "merkle_leaves",
    "parse_strict_json",
]

ENTRY_POINT_GROUP: Final = "busguard.canonicalizers"

#: Canonicalizer ids: lowercase, digits, ".", "_", "-"; 1-64 characters,
#: starting with a letter or digit. They travel in receipts
#: (`canonicalizer_id`), so one spelling per function.
CANONICALIZER_ID: Final = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")

#: Deepest array/object nesting accepted. JSON allows any depth; recursive
#: parsers and canonicalizers (ours included) do not, and an output nested
#: past this is a resource attack, not a state.
MAX_DEPTH: Final = 128

#: Integers up to this magnitude are exact doubles and go to rfc8785 as int;
#: larger integer literals are accepted only if JCS writes them back unchanged.
_INT_LIMIT: Final = 2**53 - 1

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class MalformedOutput(ValueError):
    """Output a canonicalizer refuses. `problem` is a stable code, `where` a location.

    Codes used by the built-ins: ``not-bytes``, ``invalid-utf8``,
    ``byte-order-mark``, ``not-json``, ``duplicate-key``, ``non-finite-number``,
    ``inexact-integer``, ``lone-surrogate``, ``too-deep``,
    ``not-an-array``. A plugin may add its own.
    """

    def __init__(self, canonicalizer: str, problem: str, where: str, detail: str) -> None:
        self.canonicalizer = canonicalizer
        self.problem = problem
        self.where = where
        self.detail = detail
        super().__init__(f"{canonicalizer}: {problem} at {where}: {detail}")


class PluginError(ValueError):
    """A canonicalizer plugin that cannot be used; the message names the distribution."""


@runtime_checkable
class Canonicalizer(Protocol):
    """What a canonicalizer provides. Implementations must be pure and deterministic:
    same bytes in, same root out, on every machine, with no I/O or clock."""

    @property
    def id(self) -> str:
        """The value a receipt's `canonicalizer_id` names; matches CANONICALIZER_ID."""
        ...

    @property
    def input_format(self) -> str:
        """One sentence saying exactly which bytes `root` accepts (shown to operators)."""
        ...

    def root(self, output: bytes) -> str:
        """The committed root of `output`, as 64 lowercase hex characters.

        Raises MalformedOutput for anything outside `input_format`.
        """
        ...


# ---------------------------------------------------------------- strict JSON


class _Refused(Exception):
    def __init__(self, problem: str, where: str, detail: str) -> None:
        super().__init__(detail)
        self.problem = problem
        self.where = where
        self.detail = detail


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused("duplicate-key", "an object", f"the key {key!r} appears more than once in one object")
        out[key] = value
    return out


def _constant(name: str) -> Any:
    raise _Refused("non-finite-number", "a number", f"{name} is not JSON and has no JCS form")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused("non-finite-number", "a number", f"{text} is outside the IEEE 754 double range")
    return value


def _int(text: str) -> int | float:
    """An integer literal, refused if canonicalization would change its value.

    RFC 8785 reads every number as the nearest IEEE 754 double and writes the
    shortest decimal that reads back as that double, so past 2**53 an integer
    can come out as another integer (9007199254740993 becomes
    9007199254740992, 2**60 becomes 1152921504606847000). For a fraction that
    rounding is what JCS is; for an integer (an id, a counter, an amount) it
    means the root commits to a number the output never said, so such a
    literal is refused. Integers JCS writes back unchanged are accepted,
    including every integer in JCS's own output (44645830841738290,
    100000000000000000000, 1e21 as 1e+21), which keeps canonical output a
    fixed point.
    """
    digits = text.lstrip("-")
    value = int(text) if len(digits) <= 400 else None  # no finite double has more than 309 integer digits
    if value is not None and -_INT_LIMIT <= value <= _INT_LIMIT:
        return value
    shown = text if len(text) <= 40 else f"{text[:40]}… ({len(digits)} digits)"
    try:
        as_double = float(value) if value is not None else math.inf
    except OverflowError:
        as_double = math.inf
    if not math.isfinite(as_double):
        raise _Refused(
            "inexact-integer", "a number", f"the integer {shown} is past the largest IEEE 754 double, so JCS cannot represent it"
        )
    written = rfc8785.dumps(as_double).decode("ascii")
    if decimal.Decimal(written) != value:
        raise _Refused(
            "inexact-integer",
            "a number",
            f"the integer {shown} would become {written} in JCS (the nearest IEEE 754 double); send it as a string",
        )
    return as_double


def _path(parent: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    if _IDENTIFIER.fullmatch(key):
        return f"{parent}.{key}"
    return f"{parent}[{json.dumps(key)}]"


def _check_tree(value: Any, canonicalizer: str) -> None:
    """Depth and lone surrogates, iteratively (the parser has no hook for either)."""
    stack: list[tuple[Any, str, int]] = [(value, "$", 0)]
    while stack:
        node, where, depth = stack.pop()
        if isinstance(node, str):
            _check_string(node, where, canonicalizer)
            continue
        if not isinstance(node, (dict, list)):
            continue
        if depth >= MAX_DEPTH:
            raise MalformedOutput(canonicalizer, "too-deep", where, f"arrays and objects nest deeper than {MAX_DEPTH} levels")
        if isinstance(node, dict):
            for key, child in node.items():
                _check_string(key, _path(where, key) + " (key)", canonicalizer)
                stack.append((child, _path(where, key), depth + 1))
        else:
            stack.extend((child, _path(where, i), depth + 1) for i, child in enumerate(node))


def _check_string(text: str, where: str, canonicalizer: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise MalformedOutput(
            canonicalizer,
            "lone-surrogate",
            where,
            f"the string has an unpaired UTF-16 surrogate \\u{ord(text[exc.start]):04x} at character {exc.start}; "
            "it is not Unicode text and has no UTF-8 (hence no JCS) form",
        ) from None


def parse_strict_json(output: bytes, canonicalizer: str) -> Any:
    """One JSON text (RFC 8259) in UTF-8, read with no ambiguity left, or MalformedOutput.

    Refused: bytes that are not UTF-8, a leading byte order mark, anything
    that is not exactly one JSON value (surrounding whitespace allowed),
    duplicate object keys, NaN/Infinity, numbers outside the double range,
    integer literals no double holds exactly, unpaired surrogate escapes, nesting deeper
    than MAX_DEPTH.
    """
    if not isinstance(output, (bytes, bytearray, memoryview)):
        raise MalformedOutput(canonicalizer, "not-bytes", "$", f"output must be bytes, got {type(output).__name__}")
    raw = bytes(output)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedOutput(canonicalizer, "invalid-utf8", f"byte {exc.start}", f"not UTF-8: {exc.reason}") from None
    if text.startswith("\ufeff"):
        raise MalformedOutput(canonicalizer, "byte-order-mark", "byte 0", "JSON text must not start with a byte order mark (RFC 8259 §8.1)")
    try:
        value = json.loads(
            text,
            object_pairs_hook=_pairs,
            parse_constant=_constant,
            parse_float=_float,
            parse_int=_int,
        )
    except _Refused as exc:
        raise MalformedOutput(canonicalizer, exc.problem, exc.where, exc.detail) from None
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno} (character {exc.pos})"
        raise MalformedOutput(canonicalizer, "not-json", where, exc.msg) from None
    except RecursionError:
        raise MalformedOutput(canonicalizer, "too-deep", "$", f"arrays and objects nest deeper than {MAX_DEPTH} levels") from None
    _check_tree(value, canonicalizer)
    return value


def _jcs(value: Any, canonicalizer: str, where: str) -> bytes:
    try:
        return rfc8785.dumps(value)
    except rfc8785.CanonicalizationError as exc:  # parse_strict_json already refuses all of these
        raise MalformedOutput(canonicalizer, "not-canonicalizable", where, str(exc)) from None


def jcs_canonical(output: bytes, canonicalizer: str = "jcs-sha256") -> bytes:
    """The RFC 8785 canonical bytes of one strict JSON text."""
    return _jcs(parse_strict_json(output, canonicalizer), canonicalizer, "$")


def merkle_leaves(output: bytes, canonicalizer: str = "merkle-sha256") -> list[bytes]:
    """The leaf bytes of a `merkle-sha256` output: JCS of each top-level array element, in order."""
    value = parse_strict_json(output, canonicalizer)
    if not isinstance(value, list):
        raise MalformedOutput(
            canonicalizer, "not-an-array", "$", f"the top-level value must be a JSON array of records, got a {_json_type(value)}"
        )
    return [_jcs(record, canonicalizer, f"$[{i}]") for i, record in enumerate(value)]


def _json_type(value: Any) -> str:
    if isinstance(value, dict):
        return "JSON object"
    if isinstance(value, str):
        return "JSON string"
    if isinstance(value, bool):
        return "JSON boolean"
    if value is None:
        return "JSON null"
    return "JSON number"


class JcsSha256:
    """SHA-256 over the RFC 8785 canonical form of one JSON document."""

    id: Final = "jcs-sha256"
    input_format: Final = (
        "one JSON text (RFC 8259) in UTF-8 without a byte order mark, no duplicate keys, numbers within the "
        "IEEE 754 double range, no integer literal that JCS would change (past 2**53), nesting at most 128 deep; "
        "root = lowercase hex SHA-256 of its RFC 8785 (JCS) serialization"
    )

    def root(self, output: bytes) -> str:
        return hashlib.sha256(jcs_canonical(output, self.id)).hexdigest()


class MerkleSha256:
    """RFC 9162 §2.1 Merkle tree hash over an ordered list of JSON records."""

    id: Final = "merkle-sha256"
    input_format: Final = (
        "one JSON text as for jcs-sha256 whose top-level value is an array (possibly empty) of records, each any "
        "JSON value; leaf i = the RFC 8785 (JCS) bytes of element i; root = lowercase hex RFC 9162 §2.1 Merkle "
        "tree hash over the leaves with SHA-256 (leaf SHA-256(0x00||leaf), node SHA-256(0x01||left||right), split "
        "at the largest power of two below n, empty tree SHA-256(''))"
    )

    def root(self, output: bytes) -> str:
        return merkle_root([leaf_hash(leaf) for leaf in merkle_leaves(output, self.id)]).hex()


BUILTIN: Final[Mapping[str, Canonicalizer]] = {c.id: c for c in (JcsSha256(), MerkleSha256())}


# -------------------------------------------------------------------- plugins


def _describe(ep: importlib.metadata.EntryPoint) -> str:
    dist = ep.dist
    owner = f"distribution {dist.name!r} {dist.version}" if dist is not None else "an unknown distribution"
    return f"entry point {ep.name!r} = {ep.value!r} (group {ENTRY_POINT_GROUP!r}, {owner})"


def _load(ep: importlib.metadata.EntryPoint) -> Canonicalizer:
    where = _describe(ep)
    try:
        obj: object = ep.load()
    except Exception as exc:  # an import-time failure of third-party code, reported with its origin
        raise PluginError(f"{where} failed to load: {type(exc).__name__}: {exc}") from exc
    # A class has the protocol's attributes too (isinstance would pass), so
    # a class is always treated as the factory of its instances.
    if isinstance(obj, type) or (not isinstance(obj, Canonicalizer) and callable(obj)):
        factory: Callable[[], object] = obj
        try:
            obj = factory()
        except Exception as exc:
            raise PluginError(f"{where}: calling it with no arguments failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(obj, Canonicalizer):
        raise PluginError(
            f"{where} is neither a canonicalizer nor a no-argument factory of one "
            "(needs attributes id and input_format and a method root(output: bytes) -> str)"
        )
    if obj.id != ep.name:
        raise PluginError(f"{where} loads a canonicalizer whose id is {obj.id!r}; the entry point name must equal the id")
    if not isinstance(obj.input_format, str) or not obj.input_format.strip():
        raise PluginError(f"{where}: input_format must say, in a non-empty string, which bytes root() accepts")
    return obj


def discover_plugins(entry_points: Iterable[importlib.metadata.EntryPoint] | None = None) -> dict[str, Canonicalizer]:
    """Load every canonicalizer installed under ENTRY_POINT_GROUP.

    Refused (PluginError): an id that is not a CANONICALIZER_ID, an id that a
    built-in has (a built-in's meaning is fixed by this documentation and
    cannot be swapped by installing a package), the same id from two
    distributions, and anything that does not load into a canonicalizer.
    """
    found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if entry_points is None else entry_points
    plugins: dict[str, Canonicalizer] = {}
    origin: dict[str, str] = {}
    for ep in sorted(found, key=lambda e: (e.name, e.value)):
        where = _describe(ep)
        if CANONICALIZER_ID.fullmatch(ep.name) is None:
            raise PluginError(f"{where}: the name is not a canonicalizer id (1-64 of [a-z0-9._-], starting with a letter or digit)")
        if ep.name in BUILTIN:
            raise PluginError(
                f"{where} collides with the built-in canonicalizer {ep.name!r}; built-ins cannot be replaced, choose another id"
            )
        if ep.name in origin:
            raise PluginError(f"{where} collides with {origin[ep.name]}; two plugins cannot share an id")
        origin[ep.name] = where
        plugins[ep.name] = _load(ep)
    return plugins


def available_canonicalizers(entry_points: Iterable[importlib.metadata.EntryPoint] | None = None) -> dict[str, Canonicalizer]:
    """Built-ins plus installed plugins, by id."""
    return {**BUILTIN, **discover_plugins(entry_points)}
