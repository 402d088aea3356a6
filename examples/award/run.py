"""Seed 002's contract net end to end: an awarder and three bidders as processes, through `busguard run`.

    python examples/award/run.py [--dir DIR] [--bootstrap HOST:PORT]

1. starts the embedded Kafka broker (or uses `--bootstrap`) and writes a
   deployment into `DIR`: new keys for the guard and the four agents, the
   key registry, topics, `busguard.toml` (with the `[verification]`
   registry: jcs-sha256 and merkle-sha256) and `net.json` for the agents;
2. `busguard state init` (a new deployment with no history: no store
   warming), then `busguard run`, and waits for its /healthz;
3. starts bidder-b (cost 120, jcs-sha256), bidder-c (cost 80, a private
   canonicalizer nobody else can recompute) and bidder-d (cost 150,
   merkle-sha256), then the awarder (3 bids wanted);
4. when the awarder has recorded the settled result, stops the bidders and
   runs `busguard audit` over the sealed log; stops the guard;
5. prints each agent's rows and writes them to `DIR/run.json`.

Exit code: 0 when the awarder settled and `busguard audit` exits 0, else
the first failure's. Every process's log is `DIR/<name>.log`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from common import Net, write_net

from busguard.devconfig import Topics, embedded_config
from busguard.devtools.broker import EmbeddedBroker, free_port
from busguard.protocol.identity import multikey_encode
from busguard.protocol.keyfile import new_identity, write_key
from busguard.runtime.topics import create_topics

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
BIDDERS = (("bidder-b", 120, "jcs-sha256"), ("bidder-c", 80, "c-private-norm.v1"), ("bidder-d", 150, "merkle-sha256"))
CALL = "call-1"


class Proc:
    """A child process writing to `DIR/<name>.log`."""

    def __init__(self, name: str, argv: list[str], directory: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.log = directory / f"{name}.log"
        environ = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])), **(env or {})}
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=environ, cwd=directory)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise SystemExit(f"run: {self.name} did not finish in {timeout:.0f}s; see {self.log}") from None

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout)


def busguard(*args: str) -> list[str]:
    return [sys.executable, "-m", "busguard.cli", *args]


def agent(name: str, script: str, directory: Path, *args: str) -> Proc:
    return Proc(name, [sys.executable, str(HERE / script), "--net", str(directory), "--name", name, *args], directory)


async def deploy(directory: Path, bootstrap: str) -> int:
    """Keys, topics, busguard.toml and net.json; returns the guard's ops port."""
    tag = f"award.{uuid.uuid4().hex[:8]}"
    t = Topics.under(tag)
    await create_topics(bootstrap, t.all(), partitions=2)
    names = ["awarder", *(b for b, _, _ in BIDDERS)]
    ids = {n: new_identity() for n in [*names, "guard", "reconciler"]}
    for n, ident in ids.items():
        write_key(directory / f"{n}.key", ident)
    (directory / "keys.toml").write_text("".join(f'[[agent]]\nid = "{ids[n].agent_id}"\n\n' for n in names))
    port = free_port()
    (directory / "busguard.toml").write_text(
        embedded_config(
            bootstrap,
            group_id=f"{tag}.guard",
            topics=t,
            comment="busguard for the award example (examples/award/run.py).",
            batch={"linger_ms": 20},
            log={"format": "json"},
            ops={"port": port},
            keys={"create_reconciler_key": False},
            reconcile={"group_id": f"{tag}.reconcile", "state_path": "reconcile.db"},
            verification={"canonicalizers": ["jcs-sha256", "merkle-sha256"]},
        )
    )
    net = Net(
        bootstrap=bootstrap,
        outbox=t.handoffs,
        inbox=t.handoffs_admitted,
        guard_public_key=multikey_encode(ids["guard"].public_key),
        tag=tag,
    )
    write_net(directory, net)
    return port


def wait_healthy(p: Proc, port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if p.proc.poll() is not None:
            raise SystemExit(f"run: {p.name} exited ({p.proc.returncode}); see {p.log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"run: {p.name} not ready after {timeout:.0f}s; see {p.log}")


def rows(db: Path, table: str) -> list[dict[str, Any]]:
    with sqlite3.connect(db) as c:
        c.row_factory = sqlite3.Row
        return [{k: (v.decode() if isinstance(v, bytes) else v) for k, v in dict(r).items()} for r in c.execute(f"SELECT * FROM {table}")]


def scenario(directory: Path, bootstrap: str) -> dict[str, Any]:
    port = asyncio.run(deploy(directory, bootstrap))
    config = str(directory / "busguard.toml")
    subprocess.run(busguard("state", "init", "--config", config), check=True, cwd=directory)
    guard = Proc("guard", busguard("run", "--config", config), directory)
    bidders: list[Proc] = []
    try:
        wait_healthy(guard, port)
        print(f"busguard run is ready (:{port}); the agents start", flush=True)
        bidders = [agent(n, "bidder.py", directory, "--cost", str(c), "--canonicalizer", k) for n, c, k in BIDDERS]
        awarder = agent("awarder", "awarder.py", directory, "--call", CALL, "--bids", str(len(BIDDERS)))
        awarder_rc = awarder.wait(180)
        bidder_rcs = [b.stop() for b in bidders]
        audit = subprocess.run(busguard("audit", "--config", config), capture_output=True, text=True, cwd=directory, timeout=180)
    finally:
        for b in bidders:
            b.stop()
        guard_rc = guard.stop(60)
    dbs = {n: directory / f"{n}.db" for n in ["awarder", *(b for b, _, _ in BIDDERS)]}
    return {
        "awarder_exit": awarder_rc,
        "bidder_exits": bidder_rcs,
        "guard_exit": guard_rc,
        "audit_exit": audit.returncode,
        "audit": audit.stdout,
        "awarder": {t: rows(dbs["awarder"], t) for t in ("calls", "bids", "awards", "results")},
        "bidders": {n: {t: rows(dbs[n], t) for t in ("bids", "work")} for n, _, _ in BIDDERS},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", help="where to keep everything (default: a new temporary directory)")
    ap.add_argument("--bootstrap", help="use this Kafka broker instead of starting the embedded one")
    args = ap.parse_args()
    directory = Path(args.dir).resolve() if args.dir else Path(tempfile.mkdtemp(prefix="award-"))
    directory.mkdir(parents=True, exist_ok=True)
    broker = EmbeddedBroker(log_dir=directory).start() if args.bootstrap is None else None
    try:
        result = scenario(directory, broker.bootstrap if broker is not None else str(args.bootstrap))
    finally:
        if broker is not None:
            broker.stop()
    (directory / "run.json").write_text(json.dumps(result, indent=2) + "\n")
    for name in ["awarder", *(b for b, _, _ in BIDDERS)]:
        said = [line for line in (directory / f"{name}.log").read_text(errors="replace").splitlines() if line.startswith(f"{name}: ")]
        print("\n".join(said), flush=True)  # the rest of the log is the SDK's structured lines (each refusal)
    print("\n--- busguard audit\n" + result["audit"].rstrip())
    settled = result["awarder"]["results"]
    print(f"\nrun.json and every log are in {directory}")
    if result["awarder_exit"] != 0 or not settled:
        return result["awarder_exit"] or 1
    return int(result["audit_exit"])


if __name__ == "__main__":
    raise SystemExit(main())
