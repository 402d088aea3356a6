"""The auditor's entry points: read a deployment's log and judge it.

`run_audit` is what `busguard audit` runs (busguard.commands.audit) and what
the demo and the tests call in process; `show_escalation` backs
`busguard escalations show`. A checkpoint (`--checkpoint`) keeps the
offsets and the ledger between runs so a long log is read once.
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final, TypeVar

import msgspec

from busguard.audit.deployment import Deployment
from busguard.audit.lineage import AuditReport, Ledger, judge
from busguard.audit.reader import Offsets, find_escalation, read_log
from busguard.audit.report import progress_bar
from busguard.config import Config
from busguard.errors import ConfigError
from busguard.protocol.identity import multikey_encode
from busguard.protocol.records import Decision, Resolution
from busguard.reconcile.operators import Operators

CHECKPOINT_FORMAT: Final = "busguard.audit-checkpoint.v1"
DEFAULT_IDLE_MS: Final = 10_000

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
        raise ConfigError(
            str(path), "guard_public_key", cp.guard_public_key, f"the guard key of this audit ({key}); start a new checkpoint file"
        )
    rkey = multikey_encode(reconciler_public_key) if reconciler_public_key is not None else None
    if cp.reconciler_public_key != rkey:
        raise ConfigError(
            str(path),
            "reconciler_public_key",
            cp.reconciler_public_key,
            f"the reconciler key of this audit ({rkey}); start a new checkpoint file",
        )
    if cp.audit_topic != cfg.topics.audit:
        raise ConfigError(
            str(path), "audit_topic", cp.audit_topic, f"the configured audit topic ({cfg.topics.audit}); start a new checkpoint file"
        )
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
        offsets = _run(
            lambda: read_log(cfg, guard_public_key, ledger, cp.offsets if cp is not None else None, idle_ms, bar, reconciler_public_key)
        )
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
    return judge(ledger)


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
    cfg: Config,
    *,
    guard_public_key: bytes,
    escalation_id: str,
    idle_ms: int = DEFAULT_IDLE_MS,
    progress: bool = False,
    reconciler_public_key: bytes | None = None,
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
