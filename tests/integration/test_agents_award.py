"""Seed 002's agents end to end: the awarder and three bidders of examples/award as processes,
through a real `busguard run` (busguard.devtools.guardkit) on the embedded broker.

The outcome is read from where each agent keeps it, its own SQLite database,
and checked against busguard's sealed log: one award per call, the winner acts
on it once (and again not at all when it re-reads everything from the start),
the losers act on nothing, the result's verification mode reaches the awarder
typed, and `busguard audit` exits 0.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import Collected, GuardProcess, Setup, collect, collect_all, identity, make_setup
from busguard.protocol.attestation import verify_decision_record
from busguard.protocol.identity import multikey_encode
from busguard.protocol.keyfile import write_key
from busguard.protocol.records import Decision

from .paths import REPO

EXAMPLE = REPO / "examples" / "award"
BIDDERS = {"bidder-b": (120, "jcs-sha256"), "bidder-c": (80, "c-private-norm.v1"), "bidder-d": (150, "merkle-sha256")}
CALL = "call-it"
AWARDER = "awarder"


def net_file(s: Setup, tag: str) -> bytes:
    """net.json as examples/award/README.md documents it."""
    return json.dumps(
        {
            "bootstrap": s.bootstrap,
            "outbox": s.handoffs,
            "inbox": s.downstream_handoffs,
            "guard_public_key": multikey_encode(s.guard.public_key),
            "audience": "cnet.bidders",
            "tag": tag,
        }
    ).encode()


def start(s: Setup, script: str, name: str, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    with open(s.dir / f"{name}.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, str(EXAMPLE / script), "--net", str(s.dir), "--name", name, *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )


def stop(p: subprocess.Popen[bytes]) -> int:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    return p.wait(60)


def rows(s: Setup, name: str, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(s.dir / f"{name}.db") as c:
        return c.execute(sql).fetchall()


def said(s: Setup, name: str) -> str:
    return (s.dir / f"{name}.log").read_text(errors="replace")


async def deploy(broker: EmbeddedBroker, tmp_path: Path) -> tuple[Setup, GuardProcess]:
    """A deployment with the agents' keys and net.json, and `busguard run` ready on it."""
    s = await make_setup(tmp_path, broker.bootstrap, agents=(AWARDER, *BIDDERS), partitions=2)
    with s.config.open("a") as f:  # the deployment's verification registry, as an operator writes it
        f.write('\n[verification]\ncanonicalizers = ["jcs-sha256", "merkle-sha256"]\n')
    for name in (AWARDER, *BIDDERS):
        write_key(tmp_path / f"{name}.key", identity(name))
    (tmp_path / "net.json").write_bytes(net_file(s, "it-award"))
    guard = GuardProcess(s)
    guard.wait_ready()
    return s, guard


def audit(s: Setup) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "busguard.cli", "audit", "--config", str(s.config), "--json", "--idle-ms", "800"],
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def decisions(s: Setup, records: list[Any]) -> list[Decision]:
    out = []
    for r in records:
        verify_decision_record(r.value, list(r.headers), s.guard.public_key)
        out.append(msgspec.json.decode(r.value, type=Decision))
    return out


async def test_the_award_net_runs_as_agents_through_busguard_run(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s, guard = await deploy(broker, tmp_path)
    bidders = {n: start(s, "bidder.py", n, "--cost", str(c), "--canonicalizer", k) for n, (c, k) in BIDDERS.items()}
    try:
        awarder = start(s, "awarder.py", AWARDER, "--call", CALL, "--bids", str(len(BIDDERS)), "--timeout", "150")
        assert awarder.wait(180) == 0, said(s, AWARDER)
        assert [stop(p) for p in bidders.values()] == [0, 0, 0], [said(s, n) for n in BIDDERS]

        # the winner re-reads the whole downstream topic (new consumer groups): every forward is skipped
        (tmp_path / "net.json").write_bytes(net_file(s, "it-award-again"))
        first_run = len(said(s, "bidder-b"))
        again = start(s, "bidder.py", "bidder-b", "--cost", "120")
        deadline = time.monotonic() + 90
        while said(s, "bidder-b")[first_run:].count("already acted on (re-delivered)") < 2:
            assert again.poll() is None and time.monotonic() < deadline, said(s, "bidder-b")
            time.sleep(0.2)
        assert stop(again) == 0
        sent = await collect_all(s.bootstrap, [s.handoffs, s.audit])
    finally:
        for p in bidders.values():
            stop(p)
        assert guard.terminate() == 0, guard.tail()
    b = identity("bidder-b").agent_id

    # the awarder: three bids, one award (to B: C is cheaper but its root cannot be recomputed), the result typed
    assert rows(s, AWARDER, "SELECT bid, cost, canonicalizer_id FROM bids ORDER BY cost") == [
        (f"{CALL}/bidder-c", 80, "c-private-norm.v1"),
        (f"{CALL}/bidder-b", 120, "jcs-sha256"),
        (f"{CALL}/bidder-d", 150, "merkle-sha256"),
    ]
    assert rows(s, AWARDER, "SELECT call, bid, bidder, mode FROM awards") == [(CALL, f"{CALL}/bidder-b", b, "verified")]
    assert rows(s, AWARDER, "SELECT call, bidder, verification, settles, recomputed_here FROM results") == [(CALL, b, "recomputed", 1, 1)]

    # the winner acted once, also after re-reading everything; the losers bid and did nothing else
    (work,) = rows(s, "bidder-b", "SELECT call, bid, state_root, output FROM work")
    assert work[:2] == (CALL, f"{CALL}/bidder-b") and json.loads(work[3]) == ["apple", "banana", "fig", "pear"]
    for loser in ("bidder-c", "bidder-d"):
        assert rows(s, loser, "SELECT call, bid FROM bids") == [(CALL, f"{CALL}/{loser}")]
        assert rows(s, loser, "SELECT * FROM work") == []
        assert "reason=not_for_me" in said(s, loser)  # the award reached it, addressed to B, and was refused
    for name in (AWARDER, *BIDDERS):
        assert rows(s, name, "SELECT count(*) FROM busguard_outbox") == [(0,)]  # every staged reply was sent

    # busguard's log: exactly six records were sent and each admitted once, whatever the re-reading did
    kinds = sorted(json.loads(dict(r.headers)["busguard-receipt"])["kind"] for r in sent[s.handoffs])
    assert kinds == ["cnet.award", "cnet.bid", "cnet.bid", "cnet.bid", "cnet.call", "cnet.result"]
    decided = decisions(s, sent[s.audit])
    assert sorted((d.kind, d.outcome, d.reason) for d in decided) == sorted((k, "forward", "admitted") for k in kinds)
    (award,) = [d for d in decided if d.kind == "cnet.award"]
    assert award.annotations is not None and (award.annotations["winner"], award.annotations["bidder"]) == (f"{CALL}/bidder-b", b)
    (result,) = [d for d in decided if d.kind == "cnet.result"]
    assert result.annotations is not None and result.annotations["verification"] == "recomputed"

    # the auditor agrees, and exits 0
    (call,) = audit(s)["calls"]
    assert (call["call"], call["bids"], call["winner"], call["mode"], call["settlement"], call["refused_awards"]) == (
        CALL,
        3,
        f"{CALL}/bidder-b",
        "verified",
        "settled",
        [],
    )


async def test_the_winner_killed_between_sending_its_result_and_dropping_it_acts_once(broker: EmbeddedBroker, tmp_path: Path) -> None:
    """kill -9 after the broker acknowledged the result and before the outbox
    dropped it: the restarted winner re-sends the same bytes, which busguard
    records as an exact duplicate; the work row and the settled result are one each."""
    s, guard = await deploy(broker, tmp_path)
    crashing = ("--crash-after-sending", "cnet.result")
    bidders = {
        n: start(s, "bidder.py", n, "--cost", str(c), "--canonicalizer", k, *(crashing if n == "bidder-b" else ()))
        for n, (c, k) in BIDDERS.items()
    }
    try:
        awarder = start(s, "awarder.py", AWARDER, "--call", CALL, "--bids", str(len(BIDDERS)), "--timeout", "150")
        assert bidders["bidder-b"].wait(120) == -signal.SIGKILL, said(s, "bidder-b")
        bidders["bidder-b"] = start(s, "bidder.py", "bidder-b", "--cost", "120")  # the restart, same groups, same database
        assert awarder.wait(180) == 0, said(s, AWARDER)

        def complete(got: Collected) -> bool:
            return len(got[s.handoffs]) >= 7 and len(got[s.audit]) >= 7

        sent = await collect(s.bootstrap, [s.handoffs, s.audit], complete, timeout=90)
        assert [stop(p) for p in bidders.values()] == [0, 0, 0], [said(s, n) for n in BIDDERS]
    finally:
        for p in bidders.values():
            stop(p)
        assert guard.terminate() == 0, guard.tail()
    assert "CRASH: killed after sending a cnet.result" in said(s, "bidder-b")
    assert len(rows(s, "bidder-b", "SELECT * FROM work")) == 1 and rows(s, "bidder-b", "SELECT count(*) FROM busguard_outbox") == [(0,)]
    results = [r.value for r in sent[s.handoffs] if json.loads(dict(r.headers)["busguard-receipt"])["kind"] == "cnet.result"]
    assert len(results) == 2 and results[0] == results[1]
    outcomes = sorted((d.outcome, d.reason) for d in decisions(s, sent[s.audit]) if d.kind == "cnet.result")
    assert outcomes == [("duplicate", "exact_duplicate"), ("forward", "admitted")]
    assert rows(s, AWARDER, "SELECT call, verification, settles FROM results") == [(CALL, "recomputed", 1)]
    (call,) = audit(s)["calls"]
    assert (call["winner"], call["settlement"]) == (f"{CALL}/bidder-b", "settled")


def test_the_documented_command_runs_the_net_end_to_end(tmp_path: Path) -> None:
    """`python examples/award/run.py` as examples/award/README.md has it: its own broker, its own deployment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUSGUARD_")}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, str(EXAMPLE / "run.py"), "--dir", str(tmp_path / "net")], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    run = json.loads((tmp_path / "net" / "run.json").read_text())
    assert (run["awarder_exit"], run["bidder_exits"], run["guard_exit"], run["audit_exit"]) == (0, [0, 0, 0], 0, 0)
    (award,) = run["awarder"]["awards"]
    assert award["bid"] == "call-1/bidder-b" and award["mode"] == "verified"
    (result,) = run["awarder"]["results"]
    assert (result["verification"], result["settles"], result["recomputed_here"]) == ("recomputed", 1, 1)
    assert [len(run["bidders"][n]["work"]) for n in ("bidder-b", "bidder-c", "bidder-d")] == [1, 0, 0]
    assert "awarder: not awardable: call-1/bidder-c (cost 80): I cannot recompute a root under c-private-norm.v1" in done.stdout
    assert "busguard audit: OK" in done.stdout
