"""`busguard taint check`: the taint replay guard on recorded files.

Exit codes: 0 the cone can be replayed (a plan, span- or token-level),
1 the replay is refused, 2 the input is malformed or unreadable (and argparse
usage errors, which also exit 2). A refusal is a verdict, not an error: it
goes to stdout like a plan. Malformed input goes to stderr, or with --json to
stdout as {"verdict": "malformed", ...}.
"""

from __future__ import annotations

import argparse
import gc
import sys
import textwrap
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, TextIO

import msgspec

from busguard.policies.taint.model import TraceError, build_graph, decode_ledger, decode_trace
from busguard.policies.taint.plan import ReplayPlan
from busguard.policies.taint.render import FORMATS, Format, render
from busguard.policies.taint.validate import validate

EXIT_VALID: Final = 0
EXIT_REFUSED: Final = 1
EXIT_MALFORMED: Final = 2

_EXAMPLES: Final = """
busguard taint check examples/taint/incident.trace.json
busguard taint check examples/taint/incident.trace.json --ledger examples/taint/incident.ledger.json
busguard taint check trace.json --output post_message --json
busguard taint check trace.json --format mermaid > taint.mmd
busguard taint check trace.json --format dot | dot -Tsvg > taint.svg
"""


class Malformed(msgspec.Struct, kw_only=True, tag_field="verdict", tag="malformed"):
    file: str
    field: str
    value: Any
    error: str


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TraceError(str(path), "", None, f"cannot be read: {exc.strerror or exc}") from None


@contextmanager
def cycle_collection_paused() -> Iterator[None]:
    """Decoding a big trace allocates millions of containers, and the cyclic GC re-walks them all
    over and over (half the time at a million nodes). Nothing here makes reference cycles, so
    reference counting frees everything anyway; the collector resumes afterwards."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def check(trace_path: Path, ledger_path: Path | None, outputs: Sequence[str], fmt: Format, out: TextIO, err: TextIO) -> int:
    """Judge one trace file; the in-process entry point behind `busguard taint check`."""
    source = str(trace_path)
    try:
        data = _read(trace_path)
        ledger_data = _read(ledger_path) if ledger_path is not None else None
        with cycle_collection_paused():
            trace = decode_trace(data, source)
            graph = build_graph(trace, source)
            ledger = decode_ledger(ledger_data, str(ledger_path)) if ledger_data is not None else None
            result = validate(graph, ledger, outputs or None, source=source, ledger_source=str(ledger_path or "ledger"))
    except TraceError as exc:
        if fmt == "json":
            out.write(msgspec.json.encode(Malformed(file=exc.file, field=exc.field, value=exc.value, error=str(exc))).decode() + "\n")
        else:
            print(f"busguard taint check: malformed input: {exc}", file=err)
        return EXIT_MALFORMED
    out.write(render(result, fmt))
    return EXIT_VALID if isinstance(result, ReplayPlan) else EXIT_REFUSED


def cmd_check(args: argparse.Namespace) -> int:
    fmt: Format = "json" if args.json else args.format
    ledger = Path(args.ledger) if args.ledger else None
    return check(Path(args.trace), ledger, args.output or [], fmt, sys.stdout, sys.stderr)


def add_commands(sub: Any) -> None:
    """Register `busguard taint check` on busguard.cli's subcommand parser."""
    help_ = "Check whether a tainted output's causal cone may be replayed, and at which unit (see docs/taint.md)."
    epilog = "examples:\n" + textwrap.indent(_EXAMPLES.strip(), "  ") + "\n\nexit codes: 0 valid plan, 1 replay refused, 2 malformed input"
    taint = sub.add_parser(
        "taint",
        help="Taint replay guard over recorded agent traces.",
        description=help_,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = taint.add_subparsers(dest="taint_command", required=True, metavar="ACTION")
    sp = actions.add_parser("check", help=help_, description=help_, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    sp.set_defaults(fn=cmd_check)
    sp.add_argument("trace", metavar="TRACE.json", help="the recorded trace (busguard.taint-trace.v1)")
    sp.add_argument("--ledger", metavar="LEDGER.json", help="the idempotency ledger (busguard.taint-ledger.v1)")
    sp.add_argument(
        "--output",
        metavar="NODE",
        action="append",
        help="the tainted output node (repeatable); default: the trace's tainted_output, else every leaf (the whole trace)",
    )
    sp.add_argument("--json", action="store_true", help="machine-readable verdict (same as --format json)")
    sp.add_argument("--format", choices=FORMATS, default="text", help="text (default), json, mermaid or dot")
