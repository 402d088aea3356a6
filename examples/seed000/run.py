"""Seed 000, reproduced with three real agent processes - with or without busguard.

    python examples/seed000/run.py                       # busguard, legacy nonce-only receipts
    python examples/seed000/run.py --receipts session    # busguard, session/sequence receipts
    python examples/seed000/run.py --no-guard            # the incident as it happened: no busguard

What it does:

1. starts an embedded Kafka broker (or uses `--bootstrap`) and writes a
   throwaway deployment into `--dir` (keys, topics, busguard's config, and
   the guard's state store made as `busguard state init` does: a new
   deployment with no history, so it admits from the first record instead
   of warming as a store `busguard run` had to create would);
2. with busguard: starts `busguard run` (the guard) and waits for its
   /healthz, then `busguard reconcile`;
3. starts the executor, told to SIGKILL itself right after sending the ack
   for task `--crash-at` (before journaling it), and the planner;
4. when the executor has died, starts it again: it recovers from its journal
   and re-sends the lost ack (see executor.py), then finishes the rest;
5. stops the planner (SIGTERM; it writes planner.json) and runs the auditor.

Exit code: the auditor's (0: every task provably ran exactly once; 1: not),
or 2 if the scenario itself could not run. Everything is kept in `--dir`:
logs of every process, the executor's journal, planner.json, audit.json and
run.json (a summary for machines).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import IO, Any

from common import Pipeline, create_pipeline, write_json

from busguard.devtools.broker import EmbeddedBroker

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


class Proc:
    """A child process whose output goes to `DIR/<name>.log` (and, if `echo`, to our stdout)."""

    def __init__(self, name: str, argv: list[str], directory: Path, *, echo: bool, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.log = directory / f"{name}.log"
        full_env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=full_env, cwd=REPO, text=True)
        assert self.proc.stdout is not None
        self._pump = threading.Thread(target=self._copy, args=(self.proc.stdout, echo), daemon=True)
        self._pump.start()

    def _copy(self, stream: IO[str], echo: bool) -> None:
        with open(self.log, "a") as log:
            for line in stream:
                log.write(line)
                log.flush()
                if echo:
                    print(line, end="", flush=True)

    def wait(self, timeout: float) -> int:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise SystemExit(f"run: {self.name} did not finish in {timeout:.0f}s; see {self.log}") from None
        self._pump.join(5)
        return rc

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def wait_healthy(self, port: int, timeout: float = 30) -> None:
        """GET /healthz on the process's [ops] port until it answers 200."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"run: {self.name} exited ({self.proc.returncode}) before it was ready; see {self.log}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise SystemExit(f"run: {self.name} not ready after {timeout:.0f}s; see {self.log}")


def agent(name: str, p: Pipeline, *args: str, run: int = 0) -> Proc:
    log = f"{name}-{run}" if run else name
    return Proc(log, [sys.executable, str(HERE / f"{name}.py"), "--pipeline", p.dir, *args], p.path, echo=True)


def busguard(command: str, p: Pipeline, port: int | None) -> Proc:
    env = {"BUSGUARD_OPS__PORT": str(port)} if port is not None else {}
    return Proc(command, [sys.executable, "-m", "busguard.cli", command, "--config", str(p.busguard_config)], p.path, echo=False, env=env)


def banner(text: str) -> None:
    print(f"\n=== {text}", flush=True)


def scenario(p: Pipeline, receipts: str, tasks: int, crash_at: int) -> dict[str, Any]:
    services: list[Proc] = []
    service_exits: dict[str, int] = {}
    try:
        if p.guarded:
            assert p.guard_port is not None and p.reconcile_port is not None
            banner(f"busguard: guard and reconciler ({p.busguard_config})")
            guard = busguard("run", p, None)  # its [ops] port is in the config
            services.append(guard)
            guard.wait_healthy(p.guard_port)
            reconciler = busguard("reconcile", p, p.reconcile_port)
            services.append(reconciler)
            reconciler.wait_healthy(p.reconcile_port)
            print(f"guard ready on /healthz :{p.guard_port}; reconciler ready on :{p.reconcile_port}", flush=True)
        else:
            banner("no busguard: the planner and the executor talk directly (pass-through)")

        crash_task = f"task-{crash_at}"
        banner(f"executor (crashes after sending the ack for {crash_task}) and planner ({tasks} tasks, {receipts} receipts)")
        executor = agent("executor", p, "--receipts", receipts, "--tasks", str(tasks), "--crash-after-signing-ack", crash_task, run=1)
        planner = agent("planner", p, "--receipts", receipts, "--tasks", str(tasks))
        exits = [executor.wait(120)]
        if exits[0] == -signal.SIGKILL:
            banner("executor restarts from its journal")
            exits.append(agent("executor", p, "--receipts", receipts, "--tasks", str(tasks), run=2).wait(120))
        if exits[-1] != 0:
            raise SystemExit(f"run: the executor failed (exit codes {exits}); see {p.path}")

        banner("planner: stop and report")
        planner_rc = planner.stop(60)
        banner("auditor")
        audit_rc = agent("auditor", p).wait(180)
    finally:
        for service in reversed(services):
            service_exits[service.name] = service.stop()  # SIGTERM: drain and exit 0
    return {
        "guarded": p.guarded,
        "receipts": receipts,
        "tasks": tasks,
        "crash_task": crash_task,
        "busguard_exits": service_exits,
        "executor_exits": exits,
        "planner_exit": planner_rc,
        "planner": json.loads((p.path / "planner.json").read_text()),
        "audit_exit": audit_rc,
        "audit": json.loads((p.path / "audit.json").read_text()),
        "journal": [json.loads(line) for line in (p.path / "executor.journal").read_text().splitlines()],
    }


def print_commands(p: Pipeline, args: argparse.Namespace) -> None:
    here = os.path.relpath(HERE, Path.cwd())
    agent_args = f"--pipeline {p.dir} --receipts {args.receipts} --tasks {args.tasks}"
    steps = []
    if p.guarded:
        steps += [
            f"# (done by the setup) python -m busguard.cli state init --config {p.busguard_config}    # a new deployment: no store warming",
            f"python -m busguard.cli run --config {p.busguard_config}",
            f"curl -s localhost:{p.guard_port}/healthz    # wait for 200 before any agent signs",
            f"BUSGUARD_OPS__PORT={p.reconcile_port} python -m busguard.cli reconcile --config {p.busguard_config}",
        ]
    steps += [
        f"python {here}/executor.py {agent_args} --crash-at {args.crash_at}    # dies with SIGKILL",
        f"python {here}/planner.py {agent_args}    # leave it running",
        f"python {here}/executor.py {agent_args}    # the restart; then Ctrl-C the planner",
        f"python {here}/auditor.py --pipeline {p.dir}",
    ]
    print("\n".join(["# one terminal each (PYTHONPATH=. from the repository), in this order:", *steps]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-guard", action="store_true", help="no busguard: a plain pass-through between the agents")
    ap.add_argument(
        "--receipts",
        choices=["legacy", "session"],
        default="legacy",
        help="the agents' receipts (default legacy: nonce-only, as in seed 000)",
    )
    ap.add_argument("--tasks", type=int, default=5)
    ap.add_argument("--crash-at", type=int, default=3, help="the executor crashes after sending the ack for task-N")
    ap.add_argument("--dir", help="where to keep everything (default: a new temporary directory)")
    ap.add_argument("--bootstrap", help="use this Kafka broker instead of starting an embedded one")
    ap.add_argument(
        "--setup-only",
        action="store_true",
        help="with --bootstrap: write the deployment into --dir, print the commands to run each process by hand, and exit",
    )
    args = ap.parse_args()
    if args.setup_only:
        if not (args.bootstrap and args.dir):
            ap.error("--setup-only needs --bootstrap and --dir")
        print_commands(asyncio.run(create_pipeline(Path(args.dir).resolve(), args.bootstrap, guarded=not args.no_guard)), args)
        return 0
    directory = Path(args.dir).resolve() if args.dir else Path(tempfile.mkdtemp(prefix="seed000-"))
    directory.mkdir(parents=True, exist_ok=True)
    broker = EmbeddedBroker(log_dir=directory).start() if args.bootstrap is None else None
    try:
        bootstrap = broker.bootstrap if broker is not None else str(args.bootstrap)
        pipeline = asyncio.run(create_pipeline(directory, bootstrap, guarded=not args.no_guard))
        print(f"working directory: {directory}  (broker {bootstrap})", flush=True)
        result = scenario(pipeline, args.receipts, args.tasks, args.crash_at)
    finally:
        if broker is not None:
            broker.stop()
    write_json(directory / "run.json", result)
    print(f"\nrun.json, logs, the executor's journal and audit.json are in {directory}", flush=True)
    return int(result["audit_exit"])


if __name__ == "__main__":
    raise SystemExit(main())
