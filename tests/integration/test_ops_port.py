"""Issue 35, finding 8: a guard and a reconciler started from one config on
one host want one ops port. The second says so in one config-error line
(the process, host:port, `ops.port` and how to give it its own), exit 2, no
traceback; with its own port (`BUSGUARD_OPS__PORT`) it runs beside the guard."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from busguard.devtools.broker import EmbeddedBroker, free_port
from busguard.devtools.guardkit import GuardProcess, make_setup

from .paths import REPO


async def test_a_reconciler_on_the_guards_ops_port_says_so_in_one_line(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap)
    port = free_port()
    text = s.config.read_text()
    assert "[ops]\nport = 0\n" in text
    s.config.write_text(text.replace("[ops]\nport = 0\n", f"[ops]\nport = {port}\n"))  # one config, one port, for both
    guard = GuardProcess(s, port=port)
    try:
        guard.wait_ready()
        env = {k: v for k, v in os.environ.items() if k != "BUSGUARD_OPS__PORT"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        cli = [sys.executable, "-m", "busguard.cli", "reconcile", "--config", str(s.config)]
        second = subprocess.run(cli, capture_output=True, text=True, timeout=120, cwd=REPO, env=env)
        assert second.returncode == 2, second.stderr
        assert "Traceback" not in second.stderr and "Traceback" not in second.stdout, second.stderr
        [line] = [x for x in second.stderr.splitlines() if x.startswith("busguard:")]
        assert line.startswith(f"busguard: config error: {s.config}: ops.port = {port}: the reconciler (busguard reconcile) "), line
        assert f"127.0.0.1:{port}" in line and "[ops] port" in line and "BUSGUARD_OPS__PORT" in line, line
        assert guard.healthy()  # the guard keeps its port and runs on

        # the per-process override, blamed by name when it is the one in use
        second = subprocess.run(cli, capture_output=True, text=True, timeout=120, cwd=REPO, env={**env, "BUSGUARD_OPS__PORT": str(port)})
        assert second.returncode == 2 and "Traceback" not in second.stderr, second.stderr
        assert f"busguard: config error: $BUSGUARD_OPS__PORT: ops.port = {port}: " in second.stderr, second.stderr

        # its own port: both run on one host
        reconciler = GuardProcess(s, command="reconcile", port=free_port())
        try:
            reconciler.wait_ready()
            assert guard.healthy()
        finally:
            assert reconciler.terminate() == 0, reconciler.tail()
    finally:
        assert guard.terminate() == 0, guard.tail()
