"""The mixed pipeline: TypeScript and Python agents through one `busguard run`, killed -9.

Real processes only: the session broker, `busguard run` (guardkit, on a store
made as `busguard state init` makes one), examples/seed000's Python agents and
their TypeScript twins (ts/examples/seed000, built by `make ts`). An agent is
restarted after every kill; some runs die at an ActOnce crash point
(BUSGUARD_AGENT_CRASH_AT, the same names in both languages), the others at a
random instant chosen here. Both directions:

* a TypeScript planner hands tasks to a Python executor, whose acks come back
  through the guard to the planner;
* a Python planner hands tasks to a TypeScript executor, and back.

Both sides act once and both are killed, at least 20 times each and at every
crash point: the planners stage each handoff in their done-set's outbox
(`claim("plan:<task>")`) and act once on each admitted ack
(tests/integration/mixed/act_once_planner.py is the Python one,
examples/seed000/sdk_planner.py only counts its acks).

Asserted: one effect per admitted task on each side, each effect the admitted
decision's, every ack admitted once, and `busguard audit` OK.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, Setup, make_setup
from busguard.sdk.once import CRASH_ENV, CRASH_POINTS

from .paths import REPO
from .test_agents_seed000 import _crash_point, _effects, _pipeline

PY_EXAMPLES = REPO / "examples" / "seed000"
#: the Python planner that acts once on both ends (examples/seed000/sdk_planner.py only counts its acks)
PY_AGENTS = {"sdk_planner": Path(__file__).parent / "mixed" / "act_once_planner.py"}
TS_AGENTS = REPO / "ts" / "dist" / "examples" / "seed000"
TASKS = 120
MIN_KILLS = 20
#: handoffs spread over the kill loop, so every run has deliveries to die among
PACE = "0.2"
#: every agent's first line once its consumer and producer are up (both languages)
READY = b": acting on "


def _built() -> None:
    assert (TS_AGENTS / "sdk_planner.js").is_file(), (
        f"{TS_AGENTS} is missing: build the TypeScript package first (`make ts`; `make test` does it)"
    )


def _start(lang: str, name: str, d: Path, run: int, *args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], Path]:
    log = d / f"{lang}-{name}-{run}.log"
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "PYTHONUNBUFFERED": "1"}
    environ.pop(CRASH_ENV, None)
    environ.update(env or {})
    cmd = (
        [sys.executable, str(PY_AGENTS.get(name, PY_EXAMPLES / f"{name}.py"))] if lang == "py" else ["node", str(TS_AGENTS / f"{name}.js")]
    )
    with open(log, "wb") as out:
        proc = subprocess.Popen([*cmd, "--pipeline", str(d), *args], stdout=out, stderr=subprocess.STDOUT, env=environ)
    return proc, log


class Killer:
    """Runs one agent again and again, each run killed -9: at a crash point it
    arms (one point per run, in turn, or none) or at a random instant."""

    def __init__(self, lang: str, name: str, d: Path, rng: random.Random, *args: str) -> None:
        self.lang, self.name, self.d, self.rng, self.args = lang, name, d, rng, args
        self.kills: Counter[str] = Counter()
        self.run = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: Path | None = None
        self.deadline = 0.0
        self.started = 0.0

    def satisfied(self) -> bool:
        return self.kills.total() >= MIN_KILLS and all(self.kills[p] for p in (*CRASH_POINTS, "random"))

    def tick(self) -> None:
        """Start a run, or reap one that died, or kill one whose time is up."""
        if self.proc is None:
            self.run += 1
            slot = self.run % (len(CRASH_POINTS) + 1)
            point = CRASH_POINTS[slot - 1] if slot else None
            # after_claim dies on the run's first new delivery (a run rarely sees more than a few); the others at 0.3
            env = {CRASH_ENV: f"{point}:{1.0 if point == 'after_claim' else 0.3}"} if point else {}
            self.proc, self.log = _start(self.lang, self.name, self.d, self.run, *self.args, env=env)
            self.deadline = 0.0  # set once the run says it is ready: the random instant is counted from there
            self.started = time.monotonic()
            return
        assert self.log is not None
        if not self.deadline and self.proc.poll() is None:
            if READY not in self.log.read_bytes():
                assert time.monotonic() - self.started < 60, self.log.read_text()[-3000:]
                return
            self.deadline = time.monotonic() + self.rng.uniform(0.05, 2.0)
        if self.proc.poll() is None and time.monotonic() < self.deadline:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        rc = self.proc.wait(30)
        assert rc == -signal.SIGKILL, self.log.read_text()[-3000:]
        self.kills[_crash_point(self.log) or "random"] += 1
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self.proc = None


def _rows(db: Path, sql: str) -> list[tuple[str, str]]:
    if not db.exists():
        return []
    conn = sqlite3.connect(db)
    try:
        return [(str(a), str(b)) for a, b in conn.execute(sql).fetchall()]
    except sqlite3.OperationalError:  # the table is not there yet
        return []
    finally:
        conn.close()


def _audit(s: Setup) -> dict[tuple[str, str], str]:
    audit = subprocess.run(
        [sys.executable, "-m", "busguard.cli", "audit", "--config", str(s.config), "--json"], capture_output=True, text=True, timeout=180
    )
    assert audit.returncode == 0, audit.stdout[-3000:] + audit.stderr[-3000:]
    report = json.loads(audit.stdout)
    assert all(t["forwards"] == 1 for t in report["tasks"])
    return {(t["kind"], t["task_id"]): t["witness"] for t in report["tasks"]}


def _wait(cond: object, what: str, procs: list[tuple[subprocess.Popen[bytes], Path]], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        for proc, log in procs:
            assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, what
        time.sleep(0.3)


@pytest.mark.parametrize(
    ("planner_lang", "executor_lang"), [("ts", "py"), ("py", "ts")], ids=["ts-planner-py-executor", "py-planner-ts-executor"]
)
async def test_planner_and_executor_in_two_languages_both_killed_at_random(
    broker: EmbeddedBroker, tmp_path: Path, planner_lang: str, executor_lang: str
) -> None:
    _built()
    s = await make_setup(tmp_path, broker.bootstrap, partitions=1, max_records=20)
    d = _pipeline(s)
    guard = GuardProcess(s)
    guard.wait_ready()
    rng = random.Random()
    planner = Killer(planner_lang, "sdk_planner", d, rng, "--tasks", str(TASKS), "--pace", PACE)
    executor = Killer(executor_lang, "sdk_executor", d, rng)
    acks = d / "planner.db"
    started = time.monotonic()
    try:
        while not (planner.satisfied() and executor.satisfied()):  # then clean runs finish the work
            assert planner.run + executor.run < 2 * int(os.environ.get("TSMIX_RUNS", "90")), (
                f"planner kills {dict(planner.kills)}, executor kills {dict(executor.kills)}; effects: {len(_effects(d))}"
            )
            planner.tick()
            executor.tick()
            time.sleep(0.05)
        planner.stop()
        executor.stop()
        finals = [_start(planner_lang, "sdk_planner", d, 999, "--tasks", str(TASKS)), _start(executor_lang, "sdk_executor", d, 999)]

        def settled() -> bool:
            return (
                len({t for t, _ in _effects(d)}) >= TASKS
                and len({t for t, _ in _rows(acks, "SELECT task_id, decision_id FROM acks")}) >= TASKS
            )

        _wait(settled, "every task's effect and ack", finals)
        for proc, log in finals:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0, log.read_text()[-3000:]
    finally:
        planner.stop()
        executor.stop()
        guard.terminate()
    print(
        f"{planner_lang} planner kills: {dict(planner.kills)}; {executor_lang} executor kills: {dict(executor.kills)}; {time.monotonic() - started:.0f} s"
    )

    witness = _audit(s)
    tasks = {f"task-{i}" for i in range(1, TASKS + 1)}
    assert {task for kind, task in witness if kind == "handoff"} == tasks
    effects = _effects(d)
    assert sorted(t for t, _ in effects) == sorted(tasks), Counter(t for t, _ in effects).most_common(3)
    assert all(witness[("handoff", t)] == decision for t, decision in effects)
    planner_acks = _rows(acks, "SELECT task_id, decision_id FROM acks")
    assert sorted(t for t, _ in planner_acks) == sorted(tasks), Counter(t for t, _ in planner_acks).most_common(3)
    assert all(witness[("ack", t)] == decision for t, decision in planner_acks)
