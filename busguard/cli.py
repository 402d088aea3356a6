"""The `busguard` command line. Each subcommand's --help has examples."""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Callable
from typing import Any

from busguard.commands.admin import cmd_check_config, cmd_keygen, cmd_resolve, cmd_send, cmd_state_init, cmd_state_show
from busguard.commands.audit import add_commands as add_audit_commands
from busguard.commands.decisions import add_command as add_decisions_command
from busguard.commands.kafka import cmd_kafka
from busguard.commands.kinds import cmd_kinds
from busguard.commands.services import cmd_broker, cmd_demo, cmd_reconcile, cmd_run
from busguard.commands.taint import add_commands as add_taint_commands
from busguard.errors import ConfigError, StoreUnreachable
from busguard.policies import kind_names, load_errors, resolution_choices

__all__ = ["build_parser", "main"]


def _examples(text: str) -> str:
    return "examples:\n" + textwrap.indent(textwrap.dedent(text).strip(), "  ")


def _version() -> str:
    """The installed distribution's version: one source of truth, pyproject.toml."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("busguard")
    except PackageNotFoundError:  # imported from a source tree that was never installed
        return "unknown (not installed)"


_Command = Callable[[argparse.Namespace], int]


def _adder(subparsers: Any) -> Callable[[str, _Command, str, str], argparse.ArgumentParser]:
    """`add(name, fn, help, examples)` for one level of subcommands: every
    command gets the same help layout and its examples as the epilog."""

    def add(name: str, fn: _Command, help: str, examples: str) -> argparse.ArgumentParser:
        sp: argparse.ArgumentParser = subparsers.add_parser(
            name, help=help, description=help, epilog=_examples(examples), formatter_class=argparse.RawDescriptionHelpFormatter
        )
        sp.set_defaults(fn=fn)
        return sp

    return add


def _group(subparsers: Any, name: str, help: str, examples: str) -> Any:
    """A command with actions below it (`state init`, `escalations resolve`)."""
    group = subparsers.add_parser(
        name, help=help, description=help, epilog=_examples(examples), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    return group.add_subparsers(dest=f"{name}_command", required=True, metavar="ACTION")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="busguard",
        description="Admission middleware for agent traffic on Kafka: verifies signed receipts, refuses replays, escalates ambiguity.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_examples(
            """
            busguard demo                                   # everything on an embedded broker, one command
            busguard run --config configs/busguard.toml     # the guard
            busguard check-config --config configs/busguard.toml
            """
        ),
    )
    p.add_argument("--version", action="version", version=f"busguard {_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add = _adder(sub)

    sp = add(
        "run",
        cmd_run,
        "Run the guard: consume agent topics, admit, route, audit.",
        """
        busguard run --config configs/busguard.toml
        BUSGUARD_KAFKA__BOOTSTRAP_SERVERS=kafka:9092 busguard run --config configs/busguard.toml
        BUSGUARD_FAULT=persisted:3 busguard run --config ...   # test hook: SIGKILL itself at the 3rd persisted batch
        """,
    )
    sp.add_argument("--config", required=True, help="TOML config file (see docs/config.md)")

    sp = add(
        "reconcile",
        cmd_reconcile,
        "Run a reconciliation worker: settle escalations exactly once, in view of the auditor.",
        """
        busguard reconcile --config configs/busguard.toml
        """,
    )
    sp.add_argument("--config", required=True)

    sp = add(
        "kinds",
        cmd_kinds,
        "List the kinds this installation guards: built-in and from installed busguard.kinds plugins.",
        """
        busguard kinds
        busguard kinds --json
        """,
    )
    sp.add_argument("--json", action="store_true", help="one JSON object per kind")

    sp = add(
        "check-config",
        cmd_check_config,
        "Validate a config file and the key registry it names, then summarise them.",
        """
        busguard check-config --config configs/busguard.toml
        """,
    )
    sp.add_argument("--config", required=True)

    add_state = _adder(
        _group(
            sub,
            "state",
            "Create or inspect the guard's state store.",
            """
            busguard state init --config configs/busguard.toml   # a new deployment: no history, no store warming
            busguard state show --config configs/busguard.toml
            """,
        )
    )
    for name, fn, help, example in (
        (
            "init",
            cmd_state_init,
            "Create a genesis state store for a deployment with no history (refuses an existing one): no store warming.",
            "busguard state init --config configs/busguard.toml   # before the first `busguard run`; never over a lost store",
        ),
        (
            "show",
            cmd_state_show,
            "Print the store's origin, fence and per-partition watermarks.",
            "busguard state show --config configs/busguard.toml",
        ),
    ):
        add_state(name, fn, help, example).add_argument("--config", required=True)

    sp = add(
        "keygen",
        cmd_keygen,
        "Write a new Ed25519 key file (mode 0600) and print its agent id.",
        """
        busguard keygen --out var/planner.key
        busguard keygen --out var/guard.key --force
        """,
    )
    sp.add_argument("--out", required=True, help="where to write the private key file")
    sp.add_argument("--force", action="store_true", help="replace an existing file")

    sp = add(
        "send",
        cmd_send,
        "Sign a payload and produce it, as an agent would (uses the SDK's crash-safe session).",
        """
        echo '{"op":"summarize"}' | busguard send --key var/planner.key --topic agents.handoffs --kind handoff --task t-1 --to executor
        busguard send --key var/exec.key --topic agents.acks --kind ack --task t-1 --to planner --payload ack.json --bootstrap 127.0.0.1:9092
        """,
    )
    sp.add_argument("--key", required=True, help="the sender's key file (from `busguard keygen`)")
    sp.add_argument("--topic", required=True)
    sp.add_argument(
        "--kind", required=True, choices=kind_names(), help="the record kind (the registered kinds: busguard.policies.kind_names())"
    )
    sp.add_argument("--task", required=True, help="task_id")
    sp.add_argument("--to", required=True, help="receiver agent id")
    sp.add_argument("--payload", help="file with the payload bytes; '-' or omitted reads stdin")
    sp.add_argument("--bootstrap", default="127.0.0.1:9092")
    sp.add_argument("--sender", help="sender id to claim (a named agent in the registry); default: the key's tulpa: id")
    sp.add_argument("--key-id", help="key id for named agents with several keys")
    sp.add_argument("--session", help="session file (default: KEYFILE with .session.json)")
    sp.add_argument("--legacy", action="store_true", help="no session/sequence: a legacy nonce-only receipt")
    sp.add_argument("--nonce", help="explicit nonce (default: 128 random bits)")
    sp.add_argument(
        "--idempotence",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="idempotent producer (real Kafka only; tansu refuses it)",
    )

    sp = add(
        "broker",
        cmd_broker,
        "Run the embedded tansu broker (memory storage) until Ctrl-C.",
        """
        busguard broker --port 9092
        """,
    )
    sp.add_argument("--port", type=int, default=9092)

    sp = add(
        "kafka",
        cmd_kafka,
        "Run Apache Kafka (kafka/pom.xml's version, KRaft, on loopback) until Ctrl-C; needs Java 17+ and Maven.",
        """
        busguard kafka                          # one node on 127.0.0.1:9092
        busguard kafka --brokers 3 --port 9092  # three nodes on 9092-9094, replication factor 3
        busguard kafka --dir /tmp/kafka         # keep the nodes' logs (kafka.log) there
        """,
    )
    sp.add_argument("--port", type=int, default=9092, help="the first node's client port; node i listens on PORT+i; 0 picks free ports")
    sp.add_argument("--brokers", type=int, default=1, choices=[1, 3], help="1 node, or a 3-node cluster (default: 1)")
    sp.add_argument("--heap-mb", type=int, default=512, help="each node's -Xmx in MiB (default: 512)")
    sp.add_argument("--dir", help="where each node's directory goes (default: a temporary one)")

    sp = add(
        "demo",
        cmd_demo,
        "Start a broker, the guard and the reconciler, drive the scripted scenario, print where everything went.",
        """
        busguard demo
        busguard demo --dir /tmp/busguard-demo     # keep configs, keys and state for a look afterwards
        """,
    )
    sp.add_argument("--dir", help="working directory to keep (default: a temporary one)")
    sp.add_argument(
        "scenario",
        nargs="?",
        choices=["award", "taint", "handoff"],
        help=(
            "a seed's own scenario instead of the default one: award (seed 002's contract net), "
            "taint (seed 003's incident through the taint-replay route), handoff (seed 004's compromised-session handoffs)"
        ),
    )

    add_esc = _adder(
        _group(
            sub,
            "escalations",
            "List, show and resolve escalations.",
            """
            busguard escalations list --config configs/busguard.toml
            busguard escalations show 3f2a... --config configs/busguard.toml
            busguard escalations resolve 3f2a... --as retransmission --note "one execution" \\
              --operator alice --key ~/.busguard/alice.key --config configs/busguard.toml
            """,
        )
    )

    sp = add_esc(
        "resolve",
        cmd_resolve,
        "Settle an escalation by hand, signed with your own key; the resolution carries your signed command, so the audit proves your name.",
        """
        busguard escalations resolve 3f2a... --as retransmission --note "executor restarted at 12:04, one execution" \\
          --operator alice --key ~/.busguard/alice.key --config configs/busguard.toml
        busguard escalations resolve 3f2a... --as reject --note "payload differs; sender asked to re-issue" \\
          --operator alice --key ~/.busguard/alice.key --config configs/busguard.toml
        # with the guard key: applied, but the name is unproven
        busguard escalations resolve 3f2a... --as replay --note "second witness" --config configs/busguard.toml
        """,
    )
    sp.add_argument("escalation_id", help="the escalation's decision id (see `busguard escalations list`)")
    sp.add_argument(
        "--as",
        dest="resolve_as",
        required=True,
        choices=resolution_choices(),
        help="busguard's retransmission, replay or reject, or a choice the escalation's kind offers (`busguard kinds`); "
        "the reconciler refuses a kind's choice for another kind's escalation",
    )
    sp.add_argument("--note", required=True, help="why; kept in the audit log")
    sp.add_argument(
        "--operator",
        default=os.environ.get("USER", "operator"),
        help="who is resolving (default: $USER); with --key, the name the operators file gives that key",
    )
    sp.add_argument(
        "--key",
        help="sign with this operator key file (listed in keys.operators); without it the guard key signs, which proves no name and fails `busguard audit`",
    )
    sp.add_argument("--wait", type=float, default=30.0, help="seconds to wait for the reconciler's resolution (0: don't wait)")
    sp.add_argument("--config", required=True)
    _register_audit(sub, add, add_esc)
    add_taint_commands(sub)
    return p


def _register_audit(sub: Any, add: Any, add_esc: Any) -> None:
    add_audit_commands(sub, add, add_esc)
    add_decisions_command(add)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    refused = load_errors()
    if refused:  # a guard must not run without a kind its operator installed
        for why in refused:
            print(f"busguard: {why}", file=sys.stderr)
        return 2
    try:
        return int(args.fn(args))
    except ConfigError as exc:
        print(f"busguard: config error: {exc}", file=sys.stderr)
        return 2
    except StoreUnreachable as exc:
        print(f"busguard: state store unreachable: {exc}", file=sys.stderr)
        return StoreUnreachable.EXIT_STATUS
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
