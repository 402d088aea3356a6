"""Canonicalizers: JCS against the RFC 8785 reference data, strictness, plugins."""

from __future__ import annotations

import hashlib
import json
import sys
import textwrap
import tomllib
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from busguard.policies.award import canonicalizers as canon
from busguard.policies.award.canonicalizers import (
    BUILTIN,
    CANONICALIZER_ID,
    ENTRY_POINT_GROUP,
    Canonicalizer,
    JcsSha256,
    MalformedOutput,
    PluginError,
    available_canonicalizers,
    discover_plugins,
    jcs_canonical,
)

REPO = Path(__file__).resolve().parents[2]
JCS_DIR = REPO / "tests" / "vectors" / "external" / "jcs"
JCS_NAMES = ["arrays", "french", "structures", "unicode", "values", "weird"]
EXAMPLE = REPO / "examples" / "canonicalizer-plugin"


# ------------------------------------------------------- RFC 8785 reference


def test_jcs_reference_data_is_complete() -> None:
    for sub, ext in (("input", ".json"), ("output", ".json"), ("outhex", ".txt")):
        assert sorted(p.stem for p in (JCS_DIR / sub).iterdir() if p.suffix == ext) == JCS_NAMES, sub


@pytest.mark.parametrize("name", JCS_NAMES)
def test_jcs_reproduces_reference_output_byte_for_byte(name: str) -> None:
    expected = (JCS_DIR / "output" / f"{name}.json").read_bytes()
    hex_form = bytes.fromhex("".join((JCS_DIR / "outhex" / f"{name}.txt").read_text(encoding="ascii").split()))
    assert expected == hex_form  # the two renderings of the reference agree
    got = jcs_canonical((JCS_DIR / "input" / f"{name}.json").read_bytes())
    assert got == expected
    assert JcsSha256().root((JCS_DIR / "input" / f"{name}.json").read_bytes()) == hashlib.sha256(expected).hexdigest()


@pytest.mark.parametrize("name", JCS_NAMES)
def test_jcs_is_idempotent_on_reference_output(name: str) -> None:
    expected = (JCS_DIR / "output" / f"{name}.json").read_bytes()
    assert jcs_canonical(expected) == expected


# ------------------------------------------------------------- strictness


@pytest.mark.parametrize(
    ("raw", "problem", "mentions"),
    [
        (b"", "not-json", "line 1 column 1"),
        (b'{"a":1,}', "not-json", "line 1 column 8"),
        (b"{} {}", "not-json", "Extra data"),
        (b'{"a":1,"a":1}', "duplicate-key", "'a'"),
        (b'{"x":{"\\u0062":1,"b":2}}', "duplicate-key", "'b'"),
        (b"[9007199254740993]", "inexact-integer", "9007199254740993"),
        (b"-9007199254740993", "inexact-integer", "-9007199254740993"),
        (b"[123456789012345678901234567890]", "inexact-integer", "would become 1.2345678901234568e+29"),
        (b"1" * 5000, "inexact-integer", "(5000 digits)"),
        (b"1" + b"0" * 309, "inexact-integer", "past the largest"),
        (b"[1e309]", "non-finite-number", "1e309"),
        (b"NaN", "non-finite-number", "NaN"),
        (b"[-Infinity]", "non-finite-number", "-Infinity"),
        (b'{"k":"\xe9"}', "invalid-utf8", "byte 6"),
        (b"\xef\xbb\xbf{}", "byte-order-mark", "byte 0"),
        (b'{"k":["ok","\\udfff"]}', "lone-surrogate", "$.k[1]"),
        (b'{"\\ud800x":1}', "lone-surrogate", "(key)"),
        (b"[" * 129 + b"]" * 129, "too-deep", "128"),
        (b"[" * 100_000 + b"]" * 100_000, "too-deep", "128"),
    ],
)
def test_jcs_refuses_ambiguous_output_and_says_what_and_where(raw: bytes, problem: str, mentions: str) -> None:
    with pytest.raises(MalformedOutput) as info:
        JcsSha256().root(raw)
    assert info.value.problem == problem
    assert info.value.canonicalizer == "jcs-sha256"
    assert mentions in str(info.value)


def test_jcs_refuses_non_bytes() -> None:
    with pytest.raises(MalformedOutput) as info:
        JcsSha256().root("{}")  # type: ignore[arg-type]
    assert info.value.problem == "not-bytes"


def test_jcs_accepts_integers_a_double_holds_exactly_and_the_nesting_limit() -> None:
    assert jcs_canonical(b"[9007199254740991,-9007199254740991]") == b"[9007199254740991,-9007199254740991]"
    # JCS writes these integers back as they are, so they are accepted past 2**53.
    assert jcs_canonical(b"[9007199254740992,-9007199254740994]") == b"[9007199254740992,-9007199254740994]"
    assert jcs_canonical(b"[100000000000000000000]") == b"[100000000000000000000]"
    assert jcs_canonical(b"[1000000000000000000000, 1.0]") == b"[1e+21,1]"
    assert jcs_canonical(b"[44645830841738290]") == b"[44645830841738290]"  # JCS's own form of 4.464583084173829e16
    assert jcs_canonical(b"[1" + b"0" * 308 + b"]") == b"[1e+308]"  # 10**308: JCS writes the same value


@pytest.mark.parametrize(
    ("literal", "becomes"),
    [("9007199254740993", "9007199254740992"), (str(2**60), "1152921504606847000"), (str(int(1e308)), "1e+308")],
)
def test_jcs_refuses_an_integer_it_would_change_and_says_into_what(literal: str, becomes: str) -> None:
    # int(1e308) is exactly a double, but JCS writes it as 1e+308 = 10**308, another integer.
    with pytest.raises(MalformedOutput) as info:
        jcs_canonical(literal.encode())
    assert info.value.problem == "inexact-integer"
    assert f"would become {becomes} in JCS" in str(info.value)
    nested = b"[" * 128 + b"]" * 128
    assert jcs_canonical(nested) == nested


def test_lone_surrogate_path_quotes_odd_keys() -> None:
    with pytest.raises(MalformedOutput) as info:
        JcsSha256().root(b'{"a b":{"c":"\\ud800"}}')
    assert info.value.where == '$["a b"].c'


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=("Cs",))),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(st.characters(exclude_categories=("Cs",)), max_size=5), inner, max_size=5)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(_JSON, st.booleans(), st.booleans())
def test_jcs_root_ignores_spelling(value: Any, ascii_only: bool, indent: bool) -> None:
    # Two spellings of one JSON value (escaped or raw non-ASCII, indented or
    # compact, keys in reverse order) have one root, and canonical bytes are a
    # fixed point.
    def reversed_keys(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: reversed_keys(v[k]) for k in reversed(list(v))}
        if isinstance(v, list):
            return [reversed_keys(x) for x in v]
        return v

    compact = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    other = json.dumps(reversed_keys(value), ensure_ascii=ascii_only, indent=2 if indent else None).encode("utf-8")
    canonical = jcs_canonical(compact)
    assert jcs_canonical(other) == canonical
    assert jcs_canonical(canonical) == canonical
    assert json.loads(canonical, parse_int=float) == value  # numbers are doubles in JCS


# ------------------------------------------------------------------ built-ins


def test_builtins_satisfy_the_protocol() -> None:
    assert sorted(BUILTIN) == ["jcs-sha256", "merkle-sha256"]
    for cid, c in BUILTIN.items():
        assert isinstance(c, Canonicalizer)
        assert c.id == cid
        assert CANONICALIZER_ID.fullmatch(cid)
        assert c.input_format
        root = c.root(b"[]")
        assert len(root) == 64 and root == root.lower()
    # The two built-ins are different functions even on the same input.
    assert BUILTIN["jcs-sha256"].root(b"[]") != BUILTIN["merkle-sha256"].root(b"[]")


# -------------------------------------------------------------------- plugins


@pytest.fixture
def clean_modules() -> Iterator[None]:
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


def fake_distribution(root: Path, name: str, entry_points: dict[str, str], modules: dict[str, str] | None = None) -> None:
    """What pip leaves behind for an installed distribution, minus the installer."""
    dist = root / f"{name.replace('-', '_')}-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n", encoding="utf-8")
    lines = [f"[{ENTRY_POINT_GROUP}]", *(f"{k} = {v}" for k, v in entry_points.items())]
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for module, source in (modules or {}).items():
        (root / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")


_PLUGIN_MODULE = """
    import hashlib

    class Upper:
        id = "upper-sha256"
        input_format = "ASCII text; root = SHA-256 of it upper-cased"

        def root(self, output: bytes) -> str:
            return hashlib.sha256(bytes(output).upper()).hexdigest()

    INSTANCE = Upper()

    class Misnamed(Upper):
        id = "something-else"

    class NotOne:
        id = "upper-sha256"

    def broken_factory():
        raise RuntimeError("no config")
"""


def test_no_plugins_means_builtins_only() -> None:
    # An explicit empty set of entry points: the test holds even where a
    # developer has installed the example plugin into the venv.
    assert discover_plugins([]) == {}
    assert available_canonicalizers([]) == dict(BUILTIN)


@pytest.mark.parametrize("target", ["fakeplug_a:Upper", "fakeplug_a:INSTANCE"])
def test_a_plugin_is_discovered_through_its_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_modules: None, target: str
) -> None:
    before = set(discover_plugins())  # empty unless a developer installed the example plugin
    fake_distribution(tmp_path, "fake-plug-a", {"upper-sha256": target}, {"fakeplug_a": _PLUGIN_MODULE})
    monkeypatch.syspath_prepend(str(tmp_path))
    found = discover_plugins()
    assert set(found) - before == {"upper-sha256"}
    assert found["upper-sha256"].root(b"abc") == hashlib.sha256(b"ABC").hexdigest()
    assert set(available_canonicalizers()) == {"jcs-sha256", "merkle-sha256", "upper-sha256"} | before


@pytest.mark.parametrize("builtin", sorted(BUILTIN))
def test_a_plugin_cannot_replace_a_builtin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_modules: None, builtin: str) -> None:
    fake_distribution(tmp_path, "evil-plug", {builtin: "fakeplug_b:Upper"}, {"fakeplug_b": _PLUGIN_MODULE})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError) as info:
        discover_plugins()
    message = str(info.value)
    assert f"collides with the built-in canonicalizer {builtin!r}" in message
    assert "'evil-plug' 1.0" in message
    assert "fakeplug_b" not in sys.modules  # refused before any of its code ran


def test_two_plugins_cannot_share_an_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_modules: None) -> None:
    fake_distribution(tmp_path / "one", "plug-one", {"upper-sha256": "fakeplug_c:Upper"}, {"fakeplug_c": _PLUGIN_MODULE})
    fake_distribution(tmp_path / "two", "plug-two", {"upper-sha256": "fakeplug_c:INSTANCE"})
    monkeypatch.syspath_prepend(str(tmp_path / "one"))
    monkeypatch.syspath_prepend(str(tmp_path / "two"))
    with pytest.raises(PluginError, match="two plugins cannot share an id") as info:
        discover_plugins()
    assert "plug-one" in str(info.value) and "plug-two" in str(info.value)


@pytest.mark.parametrize(
    ("name", "target", "message"),
    [
        ("upper-sha256", "fakeplug_d:Misnamed", "whose id is 'something-else'"),
        ("upper-sha256", "fakeplug_d:NotOne", "neither a canonicalizer nor a no-argument factory"),
        ("upper-sha256", "fakeplug_d:broken_factory", "RuntimeError: no config"),
        ("upper-sha256", "fakeplug_missing:Upper", "failed to load: ModuleNotFoundError"),
        ("Upper SHA", "fakeplug_d:Upper", "is not a canonicalizer id"),
    ],
)
def test_a_bad_plugin_is_refused_naming_its_distribution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_modules: None, name: str, target: str, message: str
) -> None:
    fake_distribution(tmp_path, "bad-plug", {name: target}, {"fakeplug_d": _PLUGIN_MODULE})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError) as info:
        discover_plugins()
    assert message in str(info.value)
    assert "'bad-plug' 1.0" in str(info.value)


def test_the_documented_example_plugin_is_discovered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_modules: None) -> None:
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    entry_points = project["entry-points"][ENTRY_POINT_GROUP]
    assert entry_points == {"nfc-text-sha256": "busguard_nfc_text:NfcTextSha256"}
    fake_distribution(tmp_path, project["name"], entry_points)
    monkeypatch.syspath_prepend(str(EXAMPLE / "src"))
    monkeypatch.syspath_prepend(str(tmp_path))
    found = discover_plugins()
    plugin = found["nfc-text-sha256"]
    decomposed = "Cafe\u0301\r\nnai\u0308ve\r".encode()
    composed = unicodedata.normalize("NFC", "Caf\u00e9\nna\u00efve\n").encode()
    assert plugin.root(decomposed) == plugin.root(composed) == hashlib.sha256(composed).hexdigest()
    with pytest.raises(MalformedOutput) as info:
        plugin.root(b"caf\xe9")
    assert (info.value.canonicalizer, info.value.problem, info.value.where) == ("nfc-text-sha256", "invalid-utf8", "byte 3")


def test_the_module_only_imports_what_it_may() -> None:
    # The award package may use the stdlib, msgspec, rfc8785, busguard.protocol
    # busguard.errors and the policy seam it plugs into, and itself; nothing
    # of the runtime or admission.
    import ast

    allowed_roots = {"msgspec", "rfc8785", "__future__"} | set(sys.stdlib_module_names)
    package = Path(canon.__file__).parent
    for path in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                ok = name.split(".")[0] in allowed_roots or name.startswith(
                    ("busguard.protocol", "busguard.errors", "busguard.policies.award", "busguard.policies.seam")
                )
                assert ok, f"{path.name} imports {name}"
