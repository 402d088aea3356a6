"""The import rules of docs/design.md, "Layers", checked over every module in
busguard/ (imports inside functions and TYPE_CHECKING blocks included: a late
import is still a dependency)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "busguard"

#: module prefix -> layer; the longest matching prefix wins.
LAYERS: dict[str, int] = {
    "busguard.errors": 0,
    "busguard.protocol": 1,
    "busguard.state": 2,
    "busguard.admission": 3,
    "busguard.policies": 3,
    "busguard.config": 4,
    "busguard.config_checks": 4,
    "busguard.runtime": 5,
    "busguard.reconcile": 5,
    "busguard.audit": 5,
    "busguard.sdk": 5,
    "busguard": 5,  # the package facade re-exports the SDK and conformance hooks
    "busguard.wiring": 6,
    "busguard.testing": 6,  # the admission harness for kind authors: admission + the SDK sender
    "busguard.cli": 7,
    "busguard.commands": 7,
    "busguard.demo": 7,
    "busguard.devconfig": 7,
    "busguard.devtools": 7,
}
#: The state contract: what the pure core may import from `busguard.state`
#: (backends are opened by name, in state/backends.py, by the shell).
STATE_CONTRACT = ("busguard.state.keys", "busguard.state.snapshot", "busguard.state.writes", "busguard.state.store")
CORE = ("busguard.protocol", "busguard.admission", "busguard.policies", *STATE_CONTRACT, "busguard.state.codecs")
#: A backend's own modules (busguard/state/<backend>/): only state/ imports them;
#: everything else goes through state/backends.py (docs/design.md, "Adding a state backend").
BACKEND_PACKAGES = tuple(f"busguard.state.{p.name}" for p in sorted((PACKAGE / "state").iterdir()) if (p / "backend.py").exists())
#: The SDK is embedded by agents: it may use the wire contract, the
#: policies' wire codecs and the one tolerant reader every process shares
#: (runtime.tolerant_fetch and its placeholder), nothing of the guard.
SDK_MAY_IMPORT = (
    "busguard.errors",
    "busguard.protocol",
    "busguard.policies",
    "busguard.sdk",
    "busguard.runtime.tolerant_fetch",
    "busguard.runtime.undecodable",
    "busguard.runtime.unstick",
    "busguard.runtime.stuck",
)


def _name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer(module: str) -> int:
    best = max((p for p in LAYERS if _within(module, p)), key=len, default=None)
    if best is None:
        raise AssertionError(f"{module} has no layer: add it to LAYERS here and to docs/design.md")
    return LAYERS[best]


def _imports(path: Path, text: str | None = None) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text() if text is None else text, str(path))
    found: list[tuple[int, str]] = []
    package = _name(path) if path.name == "__init__.py" else _name(path).rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            found.append((node.lineno, target))
    return [(line, name) for line, name in found if _within(name, "busguard")]


MODULES = sorted(PACKAGE.rglob("*.py"))


def violations(path: Path, text: str | None = None) -> list[str]:
    source = _name(path)
    problems = []
    for line, target in _imports(path, text):
        where = f"{path.relative_to(PACKAGE.parent)}:{line}: {source} imports {target}"
        if layer(target) > layer(source):
            problems.append(f"{where} (layer {layer(target)} above layer {layer(source)})")
        elif _within(source, "busguard.sdk") and not any(_within(target, p) for p in SDK_MAY_IMPORT):
            problems.append(f"{where} (the SDK may import only {', '.join(SDK_MAY_IMPORT)})")
        elif not _within(source, "busguard.state") and any(_within(target, b) for b in BACKEND_PACKAGES):
            problems.append(f"{where} (a backend's modules are reached through busguard.state.backends only)")
        elif any(_within(source, p) for p in ("busguard.admission", "busguard.policies")) and _within(target, "busguard.state"):
            if not any(_within(target, p) for p in STATE_CONTRACT):
                problems.append(f"{where} (the core may use the state contract only: {', '.join(STATE_CONTRACT)})")
    return problems


def test_every_backend_is_a_package_with_the_same_files() -> None:
    assert BACKEND_PACKAGES == ("busguard.state.memory", "busguard.state.postgres", "busguard.state.rocksdb", "busguard.state.sqlite")
    for name in BACKEND_PACKAGES:
        files = {p.name for p in (PACKAGE / "state" / name.rpartition(".")[2]).glob("*.py")}
        assert {"__init__.py", "backend.py", "store.py"} <= files, name


def test_every_module_has_a_layer() -> None:
    for path in MODULES:
        layer(_name(path))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_nothing_imports_upward(path: Path) -> None:
    assert violations(path) == []


@pytest.mark.parametrize(
    ("module", "added"),
    [
        ("protocol/receipt.py", "from busguard.runtime import loop"),
        ("protocol/records.py", "    from busguard.admission.types import AdmissionPolicy"),  # inside a function
        ("state/sqlite/store.py", "from busguard.admission.batch import BatchState"),
        ("admission/batch.py", "from busguard.state.memory.store import MemoryStore"),
        ("sdk/sender.py", "import busguard.state.keys"),
        ("protocol/envelope.py", "from ..reconcile import policy"),
        ("wiring.py", "    from busguard.state.sqlite.store import SqliteStore"),
        ("commands/admin.py", "from busguard.state.postgres import db"),
    ],
)
def test_the_checker_sees_a_broken_rule(module: str, added: str) -> None:
    path = PACKAGE / module
    text = path.read_text()
    if added.startswith(" "):
        added = "def _late() -> None:\n" + added
    assert violations(path, text) == []
    assert len(violations(path, text + "\n" + added + "\n")) == 1


def test_the_pure_core_loads_no_kafka_client_and_no_asyncio() -> None:
    probe = (
        "import importlib, pkgutil, sys\n"
        f"for name in {list(CORE)!r}:\n"
        "    mod = importlib.import_module(name)\n"
        "    for info in pkgutil.walk_packages(getattr(mod, '__path__', []), name + '.'):\n"
        "        importlib.import_module(info.name)\n"
        "print(sorted(m for m in ('aiokafka', 'asyncio', 'sqlite3') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def _runtime_edges(path: Path, text: str | None = None) -> set[str]:
    """The busguard modules `path` imports when it runs: at module level or
    late inside a function (a late import hides a cycle, it does not break
    it), but not under `if TYPE_CHECKING:` (annotations only)."""
    tree = ast.parse(path.read_text() if text is None else text, str(path))
    typing_lines = {
        n.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
        if hasattr(n, "lineno")
    }
    modules = {_name(p) for p in MODULES}
    edges = set()
    for line, target in _imports(path, text):
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != _name(path) and line not in typing_lines:
            edges.add(target)
    return edges


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module; a package and its
    own submodules importing each other are not a cycle."""
    related = lambda a, b: _within(a, b) or _within(b, a)  # noqa: E731
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        order[v] = low[v] = len(order)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if related(v, w):
                continue
            if w not in order:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], order[w])
        if low[v] == order[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in order:
            visit(v)
    return found


def test_no_import_cycles_not_even_behind_a_late_import() -> None:
    graph = {_name(p): _runtime_edges(p) for p in MODULES}
    assert _cycles(graph) == []
    # the checker sees one: the auditor's ledger importing its judge late, as it once did
    ledger = PACKAGE / "audit" / "ledger.py"
    late = ledger.read_text() + "\n\ndef _late() -> None:\n    from busguard.audit.lineage import judge\n"
    assert _cycles({**graph, _name(ledger): _runtime_edges(ledger, late)}) != []
