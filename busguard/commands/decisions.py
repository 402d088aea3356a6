"""`busguard decisions`: an operator's view of where each record of a topic went.

Reads the audit topic the way `busguard audit` does (the same scan, batch
audit records as their entries, each seal checked with the guard key) and
prints one row per decision (busguard.audit.view), filtered by input topic,
kind, task or key. So nobody writes a topic tap of their own to find out
what happened to a record.
"""

from __future__ import annotations

import argparse
import sys

import msgspec

from busguard.audit.reader import read_audit_log
from busguard.audit.run import _run
from busguard.audit.view import Filter, Row, Where, render, rows
from busguard.commands.audit import AddFn, _common, _guarded, guard_key_for, reconciler_key_for
from busguard.config import Config, load_config
from busguard.policies import KINDS
from busguard.protocol.records import Decision, Resolution


def where(cfg: Config) -> Where:
    t = cfg.topics
    routes = {r: t.route_topic(r) for spec in KINDS.values() for r in spec.routes}
    return Where(downstreams=cfg.downstreams, reconciliation=t.reconciliation, dead_letter=t.dead_letter, routes=routes)


def read(
    cfg: Config, guard_public_key: bytes, reconciler_public_key: bytes | None, idle_ms: int
) -> tuple[list[tuple[Decision, bool]], list[Resolution]]:
    """Every decision on the audit topic (with whether its guard seal
    verified) and every verified resolution."""
    decisions: list[tuple[Decision, bool]] = []
    resolutions: list[Resolution] = []
    found = _run(lambda: read_audit_log(cfg, guard_public_key, reconciler_public_key, idle_ms, lambda _: True))
    for _, rec, checked in found:
        if isinstance(rec, Decision):
            decisions.append((rec, checked.verified and checked.sealed_by == "guard"))
        elif checked.verified:
            resolutions.append(rec)
    return decisions, resolutions


def cmd_decisions(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    found = read(cfg, guard_key_for(cfg, args.guard_public_key), reconciler_key_for(cfg, args.reconciler_public_key), args.idle_ms)
    shown = rows(*found, where(cfg), Filter(topic=args.topic, kind=args.kind, task_id=args.task, key=args.key))
    if args.json:
        sys.stdout.buffer.write(msgspec.json.encode(shown) + b"\n")
        sys.stdout.flush()
    else:
        print(render(shown))
    return 0


def add_command(add: AddFn) -> None:
    sp = add(
        "decisions",
        _guarded(cmd_decisions),
        "Show where each record went: one row per decision of the audit log (kind, task, key, outcome, reason, "
        "the topic it went to, the admission a duplicate repeats, how an escalation was settled).",
        """
        busguard decisions --config configs/busguard.toml
        busguard decisions --config configs/busguard.toml --topic agents.handoffs --kind config.update --key db.pool
        busguard decisions --config configs/busguard.toml --task t-42 --json
        """,
    )
    _common(sp)
    sp.add_argument("--topic", help="only records read from this input topic")
    sp.add_argument("--kind", help="only records of this kind")
    sp.add_argument("--task", help="only records with this task id")
    sp.add_argument("--key", help="only records whose kind's witness key (KindSpec.witness_key) is, or includes, this value")
    sp.add_argument("--json", action="store_true", help="print the rows as JSON")


__all__ = ["Row", "add_command", "cmd_decisions", "read", "where"]
