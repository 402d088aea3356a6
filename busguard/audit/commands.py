"""`busguard audit` and `busguard escalations list|show`: the auditor's commands.

`run_audit` is the in-process entry point (the demo and the tests call it);
`add_commands` registers the CLI commands on busguard.cli's parser.

Exit codes: 0 the log proves every invariant (for `audit`), 1 a violation
(or, for `escalations show`, no such escalation), 2 the log could not be
read as configured.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import sys
import textwrap
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final, TypeVar

import msgspec
from aiokafka.errors import KafkaError

from busguard.protocol.records import Decision
from busguard.audit.deployment import Deployment
from busguard.audit.lineage import AuditReport, Ledger
from busguard.audit.reader import AuditReadError, Offsets, find_escalation, read_log
from busguard.audit.report import progress_bar, render_json, render_pending, render_table
from busguard.config import Config, load_config
from busguard.errors import ConfigError
from busguard.protocol.identity import multikey_decode, multikey_encode
from busguard.protocol.keyfile import read_key
from busguard.reconcile.operators import Operators
from busguard.protocol.records import Resolution

CHECKPOINT_FORMAT: Final = "busguard.audit-checkpoint.v1"
DEFAULT_IDLE_MS: Final = 1500

_T = TypeVar("_T")


class Checkpoint(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What `--checkpoint FILE` holds: where to resume and what was learned."""

    format: str = CHECKPOINT_FORMAT
    guard_public_key: str  # multikey: the ledger's verdicts were made with this key
    audit_topic: str
    reconciler_public_key: str | None = None  # multikey: and resolutions' with this one (None: none declared)
    offsets: Offsets
    ledger: Ledger


# -- in-process API -------------------------------------------------------------


def deployment_of(cfg: Config) -> Deployment:
    """The deployment an audit is bound to: the namespace its guards derive
    decision ids from (`admission.namespace`, else `kafka.group_id`, as
    `busguard run` does), its routes' input topics, its reconciliation
    topic, and what `[audit]` adds (docs/operations.md section 9)."""
    current = cfg.policy().namespace
    namespaces = [current, *(n for n in dict.fromkeys(cfg.audit.former_namespaces) if n != current)]
    return Deployment(
        namespaces=namespaces,
        inputs=sorted({*cfg.input_topics, *cfg.audit.former_inputs}),
        reconciliation=cfg.topics.reconciliation,
        audit=cfg.topics.audit,
    )


def new_ledger(cfg: Config, operators: Operators | None = None) -> Ledger:
    """`operators`: who may resolve under which name (default: `keys.operators`, if set)."""
    if operators is None and cfg.keys.operators is not None:
        operators = Operators.load(cfg.path(cfg.keys.operators))
    return Ledger(
        nonce_scope=cfg.admission.nonce_scope,
        routes={t: r.downstream for r in cfg.routes for t in r.inputs},
        operators=operators.by_name() if operators is not None else {},
        single_key_audit=cfg.keys.single_key_audit,
        single_key_until=cfg.keys.single_key_until_ms,
        deployment=deployment_of(cfg),
    )


def load_checkpoint(path: Path, cfg: Config, guard_public_key: bytes, reconciler_public_key: bytes | None = None) -> Checkpoint | None:
    """The saved checkpoint, or None if `path` does not exist. Refuses one
    made for another audit topic or with another guard or reconciler key."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        cp = msgspec.json.decode(data, type=Checkpoint)
    except msgspec.ValidationError as exc:
        raise ConfigError.from_validation(str(path), exc) from None
    except msgspec.DecodeError as exc:
        raise ConfigError(str(path), "", None, f"not an audit checkpoint (JSON): {exc}") from None
    if cp.format != CHECKPOINT_FORMAT:
        raise ConfigError(str(path), "format", cp.format, CHECKPOINT_FORMAT)
    key = multikey_encode(guard_public_key)
    if cp.guard_public_key != key:
        raise ConfigError(str(path), "guard_public_key", cp.guard_public_key, f"the guard key of this audit ({key}); start a new checkpoint file")
    rkey = multikey_encode(reconciler_public_key) if reconciler_public_key is not None else None
    if cp.reconciler_public_key != rkey:
        raise ConfigError(str(path), "reconciler_public_key", cp.reconciler_public_key, f"the reconciler key of this audit ({rkey}); start a new checkpoint file")
    if cp.audit_topic != cfg.topics.audit:
        raise ConfigError(str(path), "audit_topic", cp.audit_topic, f"the configured audit topic ({cfg.topics.audit}); start a new checkpoint file")
    return cp


def save_checkpoint(path: Path, cp: Checkpoint) -> None:
    """Atomically: write a temporary file, fsync, rename over, fsync the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(msgspec.json.encode(cp))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _run(factory: Callable[[], Awaitable[_T]]) -> _T:
    """asyncio.run, also when called from inside a running event loop (then in a worker thread)."""

    async def main() -> _T:
        return await factory()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="busguard-audit-run") as ex:
        return ex.submit(asyncio.run, main()).result()


def run_audit(
    cfg: Config,
    *,
    guard_public_key: bytes,
    reconciler_public_key: bytes | None = None,
    operators: Operators | None = None,
    idle_ms: int = DEFAULT_IDLE_MS,
    checkpoint: Path | None = None,
    progress: bool = False,
) -> AuditReport:
    """Read the audit log (and the downstream topics) to its end and judge it.

    Decisions must be sealed with `guard_public_key`, resolutions with
    `reconciler_public_key` (None: no reconciler key is declared, so only a
    one-key deployment's guard-sealed resolutions can pass, under
    `keys.single_key_audit`); operators' names are checked against
    `operators` (default: the `keys.operators` file).

    With `checkpoint`: resume from the offsets and ledger saved there (if the
    file exists), read only what is new, and save the result back.
    """
    cp = load_checkpoint(checkpoint, cfg, guard_public_key, reconciler_public_key) if checkpoint is not None else None
    fresh = new_ledger(cfg, operators)  # the report follows the current config
    ledger = cp.ledger if cp is not None else fresh
    ledger.nonce_scope, ledger.routes, ledger.operators = fresh.nonce_scope, fresh.routes, fresh.operators
    ledger.single_key_audit, ledger.single_key_until = fresh.single_key_audit, fresh.single_key_until
    ledger.deployment = fresh.deployment
    bar = progress_bar("audit") if progress else None
    try:
        offsets = _run(lambda: read_log(cfg, guard_public_key, ledger, cp.offsets if cp is not None else None, idle_ms, bar, reconciler_public_key))
    finally:
        if bar is not None:
            bar.close()
    if checkpoint is not None:
        save_checkpoint(
            checkpoint,
            Checkpoint(
                guard_public_key=multikey_encode(guard_public_key),
                reconciler_public_key=multikey_encode(reconciler_public_key) if reconciler_public_key is not None else None,
                audit_topic=cfg.topics.audit,
                offsets=offsets,
                ledger=ledger,
            ),
        )
    return ledger.report()


class EscalationFacts(msgspec.Struct, kw_only=True):
    """`busguard escalations show`: everything the log says about one escalation."""

    escalation_id: str
    status: str  # pending | held | resolved | not_an_escalation | forged | foreign (another deployment's: `foreign` says why)
    verified: bool
    escalation: Decision
    receipt: str | None  # base64 of the escalated receipt's bytes
    prior_receipt: str | None  # base64 of the task witness's receipt bytes
    resolutions: list[ShownResolution]
    conflicting_records: int = 0  # more than one distinct record under this id (a violation)
    foreign: str | None = None  # why the escalation is not this deployment's (busguard.audit.deployment)


class ShownResolution(msgspec.Struct, kw_only=True):
    verified: bool
    resolution: Resolution


def show_escalation(
    cfg: Config, *, guard_public_key: bytes, escalation_id: str, idle_ms: int = DEFAULT_IDLE_MS, progress: bool = False, reconciler_public_key: bytes | None = None
) -> EscalationFacts | None:
    """The escalation's decision (both receipts) and its resolutions, from the log; None if absent."""
    bar = progress_bar("scan") if progress else None
    try:
        found = _run(lambda: find_escalation(cfg, guard_public_key, escalation_id, idle_ms, bar, reconciler_public_key))
    finally:
        if bar is not None:
            bar.close()
    if not found.decisions:
        return None
    verified = [d for d, ok in found.decisions if ok]
    d = verified[0] if verified else found.decisions[0][0]
    finals = [r for r, ok in found.resolutions if ok and r.stage == "final"]
    helds = [r for r, ok in found.resolutions if ok and r.stage == "held"]
    foreign = deployment_of(cfg).source_problem(d.decision_id, d.source) if verified else None
    if not verified:
        status = "forged"
    elif foreign is not None:
        status = "foreign"
    elif d.outcome != "escalate":
        status = "not_an_escalation"
    else:
        status = "resolved" if finals else "held" if helds else "pending"

    def as_b64(data: bytes | None) -> str | None:
        return None if data is None else base64.b64encode(data).decode("ascii")

    return EscalationFacts(
        escalation_id=escalation_id,
        status=status,
        verified=bool(verified),
        escalation=d,
        receipt=as_b64(d.receipt),
        prior_receipt=as_b64(d.prior.receipt) if d.prior is not None else None,
        resolutions=[ShownResolution(verified=ok, resolution=r) for r, ok in found.resolutions],
        conflicting_records=len(verified) - 1 if len(verified) > 1 else 0,
        foreign=foreign,
    )


# -- CLI glue ------------------------------------------------------------------


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
    sp.add_argument("--guard-public-key", metavar="MULTIKEY", help="the guard's public key (z6Mk…), for auditors without the private key file")
    sp.add_argument(
        "--reconciler-public-key", metavar="MULTIKEY", help="the reconciler's public key (z6Mk…), which seals resolutions (default: the keys.reconciler_key file's)"
    )
    sp.add_argument("--idle-ms", type=_idle_ms, default=DEFAULT_IDLE_MS, help=f"the log has ended after this long without a new record (default {DEFAULT_IDLE_MS})")
    sp.add_argument("--progress", action="store_true", help="show progress on stderr even when it is not a terminal")


def _operators_option(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--operators", metavar="FILE", help="check operators' names against this operators file (default: keys.operators), e.g. an archived copy")


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
    sp.add_argument("--checkpoint", "--since", dest="checkpoint", metavar="FILE", help="resume from FILE's offsets and state if it exists, then save them there")

    if add_esc is None:
        esc = sub.add_parser("escalations", help="List and show escalations.", description="List and show escalations.")
        actions = esc.add_subparsers(dest="escalations_command", required=True, metavar="ACTION")

        def own(name: str, fn: Callable[[argparse.Namespace], int], help: str, examples: str) -> argparse.ArgumentParser:
            p: argparse.ArgumentParser = actions.add_parser(name, help=help, description=help, epilog=_examples(examples), formatter_class=argparse.RawDescriptionHelpFormatter)
            p.set_defaults(fn=fn)
            return p

        add_esc = own

    p = add_esc("list", _guarded(cmd_escalations_list), "List escalations without a final resolution (from the audit log): task, reason, both receipt ids, supersedes.", """
        busguard escalations list --config configs/busguard.toml
        busguard escalations list --config configs/busguard.toml --json
        """)  # fmt: skip
    _common(p)
    _operators_option(p)
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.add_argument("--checkpoint", "--since", dest="checkpoint", metavar="FILE", help="as for `busguard audit`")

    p = add_esc("show", _guarded(cmd_escalations_show), "Print one escalation's facts from the audit log as JSON: both receipts (base64), the supersedes link, any resolution.", """
        busguard escalations show 3f9c0a1e5b7d2c4e8f6a1b3c5d7e9f01 --config configs/busguard.toml
        """)  # fmt: skip
    p.add_argument("id", metavar="ID", help="the escalation's decision id")
    _common(p)
