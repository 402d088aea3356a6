"""The `busguard` command line as a user runs it: real processes, real broker."""

from __future__ import annotations

import argparse
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from busguard.cli import build_parser, main
from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, collect, header, identity, make_setup
from busguard.protocol.attestation import verify_admitted
from busguard.protocol.identity import canonical_principal
from busguard.protocol.keyfile import read_key
from busguard.protocol.records import Decision

from .paths import REPO

TULPA_ID = re.compile(r"^tulpa:z6Mk[1-9A-HJ-NP-Za-km-z]{44}$")


def busguard(*args: str, stdin: bytes | None = None, cwd: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUSGUARD_")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "busguard.cli", *args],
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
    )


# -- keygen ---------------------------------------------------------------------------


def test_keygen_writes_a_private_key_file_and_prints_its_id(tmp_path: Path) -> None:
    out = tmp_path / "keys" / "planner.key"
    result = busguard("keygen", "--out", str(out))
    assert result.returncode == 0, result.stderr
    agent_id = result.stdout.strip()
    assert TULPA_ID.match(agent_id), agent_id
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    ident = read_key(out)
    assert ident.agent_id == agent_id
    # stderr says where the key went and gives the multikey for a registry
    assert str(out) in result.stderr and agent_id.removeprefix("tulpa:") in result.stderr


def test_keygen_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    out = tmp_path / "guard.key"
    first = busguard("keygen", "--out", str(out))
    assert first.returncode == 0
    before = out.read_bytes()
    again = busguard("keygen", "--out", str(out))
    assert again.returncode == 2
    assert str(out) in again.stderr and "already exists" in again.stderr and "--force" in again.stderr
    assert out.read_bytes() == before  # untouched
    forced = busguard("keygen", "--out", str(out), "--force")
    assert forced.returncode == 0 and forced.stdout.strip() != first.stdout.strip()
    assert read_key(out).agent_id == forced.stdout.strip()
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


# -- check-config -----------------------------------------------------------------------


def test_check_config_accepts_the_shipped_config() -> None:
    result = busguard("check-config", "--config", "configs/busguard.toml", cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("configs/busguard.toml: ok")
    assert "agents.handoffs -> agents.handoffs.admitted" in result.stdout
    assert "3 agents" in result.stdout


def test_check_config_names_file_field_and_value(tmp_path: Path) -> None:
    config = tmp_path / "busguard.toml"
    config.write_text('[kafka]\nsession_timeout_ms = 0\n[[routes]]\nname = "r"\ninputs = ["in"]\ndownstream = "out"\n')
    result = busguard("check-config", "--config", str(config))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip() == f"busguard: config error: {config}: kafka.session_timeout_ms = 0: Expected `int` >= 1"


def test_check_config_reports_a_cross_field_rule(tmp_path: Path) -> None:
    config = tmp_path / "busguard.toml"
    config.write_text(
        '[[routes]]\nname = "r"\ninputs = ["in"]\ndownstream = "out"\n[[routes]]\nname = "s"\ninputs = ["in"]\ndownstream = "out2"\n'
    )
    result = busguard("check-config", "--config", str(config))
    assert result.returncode == 2
    assert f"{config}: routes[1].inputs = 'in': each input topic belongs to one route (already in 'r')" in result.stderr


def test_check_config_reports_a_bad_key_registry(tmp_path: Path) -> None:
    config = tmp_path / "busguard.toml"
    config.write_text('[[routes]]\nname = "r"\ninputs = ["in"]\ndownstream = "out"\n[keys]\nregistry = "keys.toml"\n')
    (tmp_path / "keys.toml").write_text('[[agent]]\nid = "planner"\n  [[agent.key]]\n  key_id = "k1"\n  public_key = "not-a-key"\n')
    result = busguard("check-config", "--config", str(config))
    assert result.returncode == 2
    assert f"{tmp_path / 'keys.toml'}: agent[0].key[0].public_key = 'not-a-key'" in result.stderr
    assert "multikey" in result.stderr


def test_a_missing_config_file_is_a_config_error(tmp_path: Path) -> None:
    result = busguard("check-config", "--config", str(tmp_path / "nope.toml"))
    assert result.returncode == 2 and "the config file does not exist" in result.stderr


# -- send, through a running guard -------------------------------------------------------


async def test_send_produces_a_signed_record_the_guard_forwards(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, agents=("executor",))
    made = busguard("keygen", "--out", str(tmp_path / "agent.key"))
    agent_id = made.stdout.strip()
    with (tmp_path / "keys.toml").open("a") as f:  # enrol the new agent before the guard starts
        f.write(f'\n[[agent]]\nid = "{agent_id}"\n')
    payload = tmp_path / "work.json"
    payload.write_bytes(b'{"op":"summarize","doc":"q3"}')
    guard = GuardProcess(s)
    try:
        guard.wait_ready()  # before signing: receipts older than the guard's store are refused (store_warming)
        to = identity("executor").agent_id
        common = [
            "--key",
            str(tmp_path / "agent.key"),
            "--topic",
            s.handoffs,
            "--kind",
            "handoff",
            "--task",
            "t-cli",
            "--to",
            to,
            "--bootstrap",
            s.bootstrap,
        ]
        first = busguard("send", *common, "--payload", str(payload))
        assert first.returncode == 0, first.stderr
        m = re.fullmatch(rf"sent handoff for task t-cli to {re.escape(s.handoffs)}/\d+@\d+; receipt_id ([0-9a-f]{{64}})\n", first.stdout)
        assert m is not None, first.stdout
        receipt_id = m.group(1)
        # the same handoff again from stdin, as a restarted agent would: the
        # default session file makes it a provable retransmission, not a second witness
        again = busguard("send", *common, "--payload", "-", stdin=payload.read_bytes())
        assert again.returncode == 0, again.stderr
        assert (tmp_path / "agent.session.json").exists()

        got = await collect(s.bootstrap, [s.downstream_handoffs, s.dead_letter, s.audit], lambda c: len(c[s.audit]) >= 2)
    finally:
        assert guard.terminate() == 0, guard.tail()

    (fwd,) = got[s.downstream_handoffs]
    att = verify_admitted(fwd.value, list(fwd.headers), s.guard.public_key, None, any_receiver=True)
    assert att.receipt_id == receipt_id and fwd.value == payload.read_bytes()
    assert fwd.key == agent_id.encode()  # keyed by sender, as operations.md asks
    (dup,) = got[s.dead_letter]
    assert header(dup, "busguard-reason") == b"retransmission"
    decisions = sorted((msgspec.json.decode(r.value, type=Decision) for r in got[s.audit]), key=lambda d: d.source.offset)
    assert [(d.outcome, d.reason) for d in decisions] == [("forward", "admitted"), ("duplicate", "retransmission")]
    assert decisions[1].supersedes == receipt_id
    assert decisions[0].principal == canonical_principal(agent_id)
    # one session across both processes; the second process jumped past the block the first reserved (64)
    assert decisions[0].session_id == decisions[1].session_id
    assert (decisions[0].sequence, decisions[1].sequence) == (0, 64)


def test_send_with_a_missing_key_file_is_a_config_error(tmp_path: Path) -> None:
    result = busguard(
        "send",
        "--key",
        str(tmp_path / "none.key"),
        "--topic",
        "t",
        "--kind",
        "ack",
        "--task",
        "x",
        "--to",
        "y",
        "--payload",
        "-",
        stdin=b"",
    )
    assert result.returncode == 2 and "does not exist" in result.stderr and "busguard keygen" in result.stderr


# -- every command explains itself ------------------------------------------------------------


def _commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found: list[tuple[str, ...]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append((*prefix, name))
                found += _commands(sub, (*prefix, name))
    return found


COMMANDS = _commands(build_parser())


def test_the_expected_commands_exist() -> None:
    top = {c[0] for c in COMMANDS}
    assert {"run", "reconcile", "escalations", "audit", "keygen", "send", "check-config", "broker", "demo"} <= top
    assert {("escalations", "list"), ("escalations", "show"), ("escalations", "resolve")} <= set(COMMANDS)


@pytest.mark.parametrize("command", [(), *COMMANDS], ids=lambda c: " ".join(c) or "busguard")
def test_every_help_exits_zero_with_examples(command: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([*command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out, f"`busguard {' '.join(command)} --help` has no examples:\n{out}"


def test_help_from_a_real_process() -> None:
    result = busguard("--help")
    assert result.returncode == 0 and "examples:" in result.stdout and "busguard demo" in result.stdout
    assert busguard().returncode == 2  # a command is required


def test_check_config_reads_the_operators_file(tmp_path: Path) -> None:
    config = tmp_path / "busguard.toml"
    config.write_text(
        '[[routes]]\nname = "r"\ninputs = ["in"]\ndownstream = "out"\n[keys]\nregistry = "keys.toml"\noperators = "operators.toml"\n'
    )
    (tmp_path / "keys.toml").write_text("")
    (tmp_path / "operators.toml").write_text('[[operator]]\nname = "alice"\npublic_key = "z6Mkxyz"\n')
    result = busguard("check-config", "--config", str(config))
    assert result.returncode == 2
    assert f"{tmp_path / 'operators.toml'}: operator[0].public_key = 'z6Mkxyz'" in result.stderr
    alice = busguard("keygen", "--out", str(tmp_path / "alice.key"))
    multikey = next(word for word in (alice.stdout + alice.stderr).split() if word.startswith("z6Mk"))
    (tmp_path / "operators.toml").write_text(f'[[operator]]\nname = "alice"\npublic_key = "{multikey}"\n')
    result = busguard("check-config", "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert "(1 with their own keys)" in result.stdout
