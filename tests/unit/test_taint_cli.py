"""`busguard taint check`: exit codes, renderings, the shipped examples and schemas, the import boundary."""

from __future__ import annotations

import ast
import io
import json
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from busguard.cli import main
from busguard.commands.taint import EXIT_MALFORMED, EXIT_REFUSED, EXIT_VALID, check
from busguard.policies.taint.model import Ledger, Trace, build_graph, decode_ledger, decode_trace, schema_document
from busguard.policies.taint.plan import ReplayPlan, ReplayRefused
from busguard.policies.taint.render import FORMATS, Format
from busguard.policies.taint.validate import validate

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "taint"
INCIDENT = EXAMPLES / "incident.trace.json"
LEDGER = EXAMPLES / "incident.ledger.json"


def run(*argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["taint", "check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_exit_codes_distinguish_valid_refused_and_malformed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (EXIT_VALID, EXIT_REFUSED, EXIT_MALFORMED) == (0, 1, 2)
    code, out, _ = run(str(INCIDENT), capsys=capsys)
    assert code == 1 and out.startswith("REFUSED (condition 1)") and "post_message" in out
    assert "none cleared: post_message, read_secret, summarize" in out
    code, out, _ = run(str(INCIDENT), "--ledger", str(LEDGER), capsys=capsys)
    assert code == 0 and out.startswith("VALID: token-level replay") and "webhook:partner-archive  <- post_message" in out
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "busguard.taint-trace.v1", "nodes": [{"id": "a"}]}')
    code, out, err = run(str(bad), capsys=capsys)
    assert (code, out) == (2, "")
    assert err == f"busguard taint check: malformed input: {bad}: nodes[0] = {{'id': 'a'}}: Object missing required field `operation`\n"
    code, _, err = run(str(tmp_path / "missing.json"), capsys=capsys)
    assert code == 2 and "cannot be read" in err
    code, _, err = run(str(INCIDENT), "--output", "nope", capsys=capsys)
    assert code == 2 and "output = 'nope': must name a node" in err


def test_json_verdicts_decode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(str(INCIDENT), "--json", capsys=capsys)
    refused = msgspec.json.decode(out, type=ReplayPlan | ReplayRefused)
    assert code == 1 and isinstance(refused, ReplayRefused) and refused.nodes == ["post_message"]
    code, out, _ = run(str(INCIDENT), "--ledger", str(LEDGER), "--output", "post_message", "--json", capsys=capsys)
    plan = msgspec.json.decode(out, type=ReplayPlan | ReplayRefused)
    assert code == 0 and isinstance(plan, ReplayPlan) and plan.unit == "token"
    bad = tmp_path / "ledger.json"
    bad.write_text('{"format": "busguard.taint-ledger.v1", "entries": [{"token": "t", "effects": [{"status": "maybe"}]}]}')
    code, out, _ = run(str(INCIDENT), "--ledger", str(bad), "--json", capsys=capsys)
    doc = json.loads(out)
    assert code == 2 and (doc["verdict"], doc["file"], doc["field"], doc["value"]) == (
        "malformed",
        str(bad),
        "entries[0].effects[0].status",
        "maybe",
    )


def test_usage_errors_also_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["taint", "check"])
    assert exc.value.code == 2


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_refusal_is_never_drawn_as_a_graph(fmt: Format) -> None:
    out = io.StringIO()
    assert check(EXAMPLES / "causal-violation.trace.json", None, [], fmt, out, io.StringIO()) == EXIT_REFUSED
    text = out.getvalue()
    assert "approve" in text and "execute" in text
    assert "predecessors" not in text and "<-" not in text  # json, text
    assert "-->" not in text and "-.->" not in text  # mermaid
    assert " -> " not in text  # dot


def test_pictures_of_a_plan_draw_every_edge_and_sink() -> None:
    out = io.StringIO()
    assert check(EXAMPLES / "diamond.trace.json", None, [], "mermaid", out, io.StringIO()) == EXIT_VALID
    mermaid = out.getvalue()
    assert mermaid.startswith("flowchart LR\n") and mermaid.count(" --> ") == 5 and mermaid.count("-.->") == 1
    assert "metrics" not in mermaid  # outside the cone of publish
    out = io.StringIO()
    assert check(INCIDENT, LEDGER, [], "dot", out, io.StringIO()) == EXIT_VALID
    dot = out.getvalue()
    assert dot.count('-> "sink:') == 2 and '"node:summarize" -> "node:post_message";' in dot
    assert dot.startswith("digraph taint {") and dot.rstrip().endswith("}")


# -- the shipped examples and schemas --------------------------------------------

EXPECTED = {
    ("incident.trace.json", None): ("refused", 1),
    ("incident.trace.json", "incident.ledger.json"): ("valid", "token"),
    ("diamond.trace.json", None): ("valid", "span"),
    ("causal-violation.trace.json", None): ("refused", 3),
    ("input-mismatch.trace.json", None): ("refused", 4),
}


def test_every_example_decodes_against_the_model_and_gives_its_documented_verdict() -> None:
    files = {p.name for p in EXAMPLES.glob("*.json")}
    assert files == {t for t, _ in EXPECTED} | {led for _, led in EXPECTED if led}
    for (trace_name, ledger_name), (verdict, detail) in EXPECTED.items():
        trace = decode_trace((EXAMPLES / trace_name).read_bytes(), trace_name)
        ledger = decode_ledger((EXAMPLES / ledger_name).read_bytes(), ledger_name) if ledger_name else None
        result = validate(build_graph(trace), ledger)
        got = ("valid", result.unit) if isinstance(result, ReplayPlan) else ("refused", result.condition)
        assert got == (verdict, detail), trace_name
    docs = (ROOT / "docs" / "taint.md").read_text()
    for trace_name, _ in EXPECTED:
        assert f"examples/taint/{trace_name}" in docs


@pytest.mark.parametrize(("name", "typ"), [("taint-trace.schema.json", Trace), ("taint-ledger.schema.json", Ledger)])
def test_the_shipped_schemas_are_the_models(name: str, typ: type[Trace] | type[Ledger]) -> None:
    shipped = json.loads((ROOT / "docs" / "schemas" / name).read_text())
    assert shipped == json.loads(json.dumps(schema_document(typ))), "regenerate: .venv/bin/python examples/taint/make_examples.py"


def test_the_incident_vector_in_the_docs_is_right() -> None:
    """docs/taint.md works the derivation through for summarize in the incident example."""
    doc = json.loads(INCIDENT.read_text())
    summarize = next(n for n in doc["nodes"] if n["id"] == "summarize")
    docs = (ROOT / "docs" / "taint.md").read_text()
    assert summarize["input_hash"] in docs and summarize["external_input_hash"] in docs


# -- the package boundary ----------------------------------------------------------

# policies.seam: the stream policy (replay.py) implements the seam, which imports only protocol.
ALLOWED_BUSGUARD = ("busguard.errors", "busguard.protocol", "busguard.policies.taint", "busguard.policies.seam")


def test_the_taint_package_imports_only_the_standard_library_msgspec_and_errors() -> None:
    for path in (ROOT / "busguard" / "policies" / "taint").glob("*.py"):
        for stmt in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in stmt.names]
                if isinstance(stmt, ast.Import)
                else [stmt.module or ""]
                if isinstance(stmt, ast.ImportFrom)
                else []
            )
            for name in names:
                top = name.split(".")[0]
                ok = top in sys.stdlib_module_names or top == "msgspec" or name == "__future__" or name.startswith(ALLOWED_BUSGUARD)
                assert ok, f"{path.name} imports {name}"
    # `import busguard` itself loads parts of admission and the SDK; the taint package must add nothing of that kind.
    probe = (
        "import sys, busguard; before = set(sys.modules);"
        "import busguard.policies.taint, busguard.commands.taint, busguard.policies.taint.render, busguard.policies.taint.replay;"
        "print(sorted(m for m in set(sys.modules) - before if m.split('.')[:2] in "
        "[['busguard', x] for x in ('admission', 'runtime', 'state', 'reconcile', 'audit', 'cli', 'config', 'sdk')]))"
    )
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip() == "[]"


def test_exit_codes_from_a_real_process(tmp_path: Path) -> None:
    def rc(*argv: str) -> int:
        return subprocess.run([sys.executable, "-m", "busguard.cli", "taint", "check", *argv], capture_output=True).returncode

    cyclic = tmp_path / "cyclic.json"
    cyclic.write_text(
        json.dumps(
            {
                "format": "busguard.taint-trace.v1",
                "nodes": [
                    {
                        "id": "a",
                        "predecessors": ["b"],
                        "operation": "x",
                        "side_effects": False,
                        "outcome": "success",
                        "input_hash": None,
                        "output_hash": None,
                    },
                    {
                        "id": "b",
                        "predecessors": ["a"],
                        "operation": "x",
                        "side_effects": False,
                        "outcome": "success",
                        "input_hash": None,
                        "output_hash": None,
                    },
                ],
            }
        )
    )
    assert (rc(str(INCIDENT), "--ledger", str(LEDGER)), rc(str(INCIDENT)), rc(str(cyclic))) == (0, 1, 2)


def test_the_picture_in_the_docs_is_what_the_command_draws() -> None:
    out = io.StringIO()
    assert check(INCIDENT, LEDGER, [], "mermaid", out, io.StringIO()) == EXIT_VALID
    assert f"```mermaid\n{out.getvalue()}```" in (ROOT / "docs" / "taint.md").read_text()
