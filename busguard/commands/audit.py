"""`busguard audit` and `busguard escalations list|show`: the auditor's commands.

`add_commands` registers them on busguard.cli's parser; the work is
busguard.audit.run's.

Exit codes: 0 the log proves every invariant (for `audit`), 1 a violation
(or, for `escalations show`, no such escalation), 2 the log could not be
read as configured.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import msgspec
from aiokafka.errors import KafkaError

from busguard.audit.lineage import AuditReport
from busguard.audit.reader import AuditReadError
from busguard.audit.report import render_json, render_pending, render_table
from busguard.audit.run import (
    DEFAULT_IDLE_MS,
    run_audit,
    show_escalation,
)
from busguard.config import Config, load_config
from busguard.errors import ConfigError
from busguard.protocol.identity import multikey_decode
from busguard.protocol.keyfile import read_key
from busguard.reconcile.operators import Operators


def _multikey_arg(option: str, multikey: str) -> bytes:
    body = multikey.split(":", 1)[1] if multikey.startswith(("tulpa:", "ink:")) else multikey
    try:
        return multikey_decode(body)
    except ValueError as exc:
        raise ConfigError(option, "", multikey, f"an Ed25519 multikey z6Mk… ({exc})") from None


def guard_key_for(cfg: Config, multikey: str | None) -> bytes:
    """`--guard-public-key` (z6Mk… or tulpa:z6Mk…) if given, else `[keys]
    guard_public_key`, else the public half of the `[keys] guard_key` file."""
    if multikey:
        return _multikey_arg("--guard-public-key", multikey)
    declared = cfg.keys.guard_public_key_bytes
    return declared if declared is not None else read_key(cfg.path(cfg.keys.guard_key)).public_key


def reconciler_key_for(cfg: Config, multikey: str | None) -> bytes | None:
    """`--reconciler-public-key` if given, else the public half of the
    configured `[keys] reconciler_key` file, else None (one-key deployment)."""
    if multikey:
        return _multikey_arg("--reconciler-public-key", multikey)
    if cfg.keys.reconciler_key is None:
        return None
    return read_key(cfg.path(cfg.keys.reconciler_key)).public_key


def _operators_arg(path: str | None) -> Operators | None:
    return Operators.load(Path(path)) if path else None


def _idle_ms(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer number of milliseconds") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1 ms")
    return value


def _show_progress(args: argparse.Namespace) -> bool:
    return bool(args.progress) or sys.stderr.isatty()


def _guarded(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Reading failures are exit 2 with one line on stderr, like config errors."""

    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except (AuditReadError, KafkaError, OSError) as exc:
            print(f"busguard: {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 2

    run.__doc__ = fn.__doc__
    return run


def _report_for(args: argparse.Namespace) -> AuditReport:
    cfg = load_config(args.config)
    return run_audit(
        cfg,
        guard_public_key=guard_key_for(cfg, args.guard_public_key),
        reconciler_public_key=reconciler_key_for(cfg, args.reconciler_public_key),
        operators=_operators_arg(args.operators),
        idle_ms=args.idle_ms,
        checkpoint=Path(args.checkpoint) if args.checkpoint else None,
        progress=_show_progress(args),
    )


def cmd_audit(args: argparse.Namespace) -> int:
    report = _report_for(args)
    if args.json:
        sys.stdout.buffer.write(render_json(report) + b"\n")
        sys.stdout.flush()
    else:
        print(render_table(report))
    return 0 if report.ok else 1


def cmd_escalations_list(args: argparse.Namespace) -> int:
    report = _report_for(args)
    if args.json:
        sys.stdout.buffer.write(msgspec.json.encode(report.pending) + b"\n")
        sys.stdout.flush()
    else:
        print(render_pending(report.pending))
    return 0


def cmd_escalations_show(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    facts = show_escalation(
        cfg,
        guard_public_key=guard_key_for(cfg, args.guard_public_key),
        reconciler_public_key=reconciler_key_for(cfg, args.reconciler_public_key),
        escalation_id=args.id,
        idle_ms=args.idle_ms,
        progress=_show_progress(args),
    )
    if facts is None:
        print(f"busguard: no decision {args.id} in the audit log {cfg.topics.audit}", file=sys.stderr)
        return 1
    sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(facts), indent=2) + b"\n")
    sys.stdout.flush()
    return 0 if facts.status in ("pending", "held", "resolved") else 1


def _examples(text: str) -> str:
    return "examples:\n" + textwrap.indent(textwrap.dedent(text).strip(), "  ")


def _common(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--config", required=True, help="TOML config file (its topics, routes and guard key)")
    sp.add_argument(
        "--guard-public-key", metavar="MULTIKEY", help="the guard's public key (z6Mk…), for auditors without the private key file"
    )
    sp.add_argument(
        "--reconciler-public-key",
        metavar="MULTIKEY",
        help="the reconciler's public key (z6Mk…), which seals resolutions (default: the keys.reconciler_key file's)",
    )
    sp.add_argument(
        "--idle-ms",
        type=_idle_ms,
        default=DEFAULT_IDLE_MS,
        help="a partition whose read position does not move for this long below its end offset is unfinished, "
        f"a violation (default {DEFAULT_IDLE_MS}; a complete read never waits for it)",
    )
    sp.add_argument("--progress", action="store_true", help="show progress on stderr even when it is not a terminal")


def _operators_option(sp: argparse.ArgumentParser) -> None:
    sp.add_argument(
        "--operators",
        metavar="FILE",
        help="check operators' names against this operators file (default: keys.operators), e.g. an archived copy",
    )


AddFn = Callable[[str, Callable[[argparse.Namespace], int], str, str], argparse.ArgumentParser]


def add_commands(
    sub: argparse._SubParsersAction,  # type: ignore[type-arg]
    add: AddFn,
    add_esc: AddFn | None = None,
) -> None:
    """Register `audit` and `escalations list|show` on busguard.cli's parser.

    `add(name, fn, help, examples)` is cli.py's helper for top-level commands;
    `add_esc`, the same for actions of an `escalations` command cli.py already
    made (it has `resolve`). Without `add_esc`, `escalations` is created here.
    """
    sp = add(
        "audit",
        _guarded(cmd_audit),
        "Prove exactly-once admission from the audit log alone: one witness per task, escalations resolved, every forward attested.",
        """
        busguard audit --config configs/busguard.toml
        busguard audit --config configs/busguard.toml --json > audit.json     # exit 1 on any violation
        busguard audit --config configs/busguard.toml --checkpoint var/audit.ckpt   # incremental: only new records
        busguard audit --config configs/busguard.toml --guard-public-key z6Mk... --reconciler-public-key z6Mk...   # without the private keys
        """,
    )
    _common(sp)
    _operators_option(sp)
    sp.add_argument("--json", action="store_true", help="print the report as JSON")
    sp.add_argument(
        "--checkpoint",
        "--since",
        dest="checkpoint",
        metavar="FILE",
        help="resume from FILE's offsets and state if it exists, then save them there",
    )

    if add_esc is None:
        esc = sub.add_parser("escalations", help="List and show escalations.", description="List and show escalations.")
        actions = esc.add_subparsers(dest="escalations_command", required=True, metavar="ACTION")

        def own(name: str, fn: Callable[[argparse.Namespace], int], help: str, examples: str) -> argparse.ArgumentParser:
            p: argparse.ArgumentParser = actions.add_parser(
                name, help=help, description=help, epilog=_examples(examples), formatter_class=argparse.RawDescriptionHelpFormatter
            )
            p.set_defaults(fn=fn)
            return p

        add_esc = own

    p = add_esc("list", _guarded(cmd_escalations_list), "List escalations without a final resolution (audit log): task, reason, receipt ids, link.", """
        busguard escalations list --config configs/busguard.toml
        busguard escalations list --config configs/busguard.toml --json
        """)  # fmt: skip
    _common(p)
    _operators_option(p)
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.add_argument("--checkpoint", "--since", dest="checkpoint", metavar="FILE", help="as for `busguard audit`")

    p = add_esc("show", _guarded(cmd_escalations_show), "Print one escalation's facts as JSON: both receipts (base64), the link, any resolution.", """
        busguard escalations show 3f9c0a1e5b7d2c4e8f6a1b3c5d7e9f01 --config configs/busguard.toml
        """)  # fmt: skip
    p.add_argument("id", metavar="ID", help="the escalation's decision id")
    _common(p)
