"""The TypeScript PostgreSQL done-set (ts/src/pgdoneset.ts) against a real PostgreSQL, killed -9.

Real processes only: the embedded PostgreSQL (tests/pgkit.py) and
`node ts/dist/test/pg-agent-cli.js` (built by `make ts`), a receiving agent
running `ActOnce` on `PostgresDoneSet` over forwards this test's guard
decided (admitted by the TypeScript `Admitter`; each forward appears twice,
as the guard's crash recovery re-emits it, and a few were decided before
the done-set's horizon, which busguard.sdk.PostgresDoneSet set). The agent is
killed with SIGKILL at every ActOnce crash point (BUSGUARD_AGENT_CRASH_AT)
and at random instants, and restarted until it has committed every forward;
then two replicas on one done-set are killed at random instants together.

Asserted: one effect per admitted decision (none for the ones before the
horizon, each refused `before_horizon`), every ack sent at least once and
always as the same signed bytes, the outbox empty, and Python's
PostgresDoneSet reading the same marks and horizon. A second test runs the
same done-set operations through both languages (claims, rollbacks, staged
replies, the horizon and its rules) and fails on any difference.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg

from busguard.sdk import PostgresDoneSet
from busguard.sdk.once import CRASH_ENV, CRASH_POINTS
from busguard.testing import GUARD_PUBLIC_KEY, NOW, Harness, agent, seed, sender

from .paths import REPO

CLI = REPO / "ts" / "dist" / "test" / "pg-agent-cli.js"
EXECUTOR = agent("executor")
#: decided before this, a forward is refused by the done-set's horizon
HORIZON = NOW - 60_000
KILLS_PER_KIND = 4


def _built() -> None:
    assert CLI.is_file(), f"{CLI} is missing: build the TypeScript package first (`make ts`; `make test` does it)"


def _forwards(tasks: int, old: int, rng: random.Random) -> list[tuple[bytes, list[tuple[str, bytes]]]]:
    """`tasks` forwards decided at NOW, each re-emitted later in the stream, among `old` decided before HORIZON."""
    h = Harness()
    new = [h.forward(sender("planner").sign(kind="handoff", task_id=f"t-{i}", receiver=EXECUTOR, payload=b"{}")) for i in range(tasks)]
    at = HORIZON - 600_000
    h_old = Harness(now=at, store_created=at - 3_600_000)
    stale = [
        h_old.forward(sender("planner", now=at).sign(kind="handoff", task_id=f"old-{i}", receiver=EXECUTOR, payload=b"{}"))
        for i in range(old)
    ]
    first = new + stale
    rng.shuffle(first)
    copies = list(new)
    rng.shuffle(copies)
    return first + copies


def _prepare(dsn: str, schema: str) -> None:
    """Python's done-set makes the tables and sets the horizon; the agent's own table is made here."""
    done = PostgresDoneSet(dsn, schema=schema)
    try:
        assert done.forget_before(HORIZON) == 0
        done.connection.execute(f'CREATE TABLE "{schema}".work (decision_id text NOT NULL, task_id text NOT NULL)')
    finally:
        done.close()


def _config(d: Path, dsn: str, schema: str, forwards: list[tuple[bytes, list[tuple[str, bytes]]]], name: str) -> Path:
    cfg = {
        "dsn": dsn,
        "schema": schema,
        "guard_public_key_hex": GUARD_PUBLIC_KEY.hex(),
        "agent_id": EXECUTOR,
        "seed_hex": seed("executor").hex(),
        "forwards": [[v.hex(), [[k, hv.hex()] for k, hv in hs]] for v, hs in forwards],
        "offsets_path": str(d / f"{name}.offset"),
        "session_path": str(d / f"{name}.session.json"),
        "sent_path": str(d / "sent.jsonl"),
        "batch": 2,
        "effect_sleep_s": 0.05,
    }
    path = d / f"{name}.json"
    path.write_text(json.dumps(cfg))
    return path


class Replica:
    """One agent process, run again and again until it exits 0; each run
    armed at one crash point in turn, or killed at a random instant."""

    def __init__(self, cfg: Path, rng: random.Random, *, points: tuple[str, ...]) -> None:
        self.cfg, self.rng, self.points = cfg, rng, points
        self.kills: Counter[str] = Counter()
        self.logs: list[Path] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self.deadline = self.started = 0.0
        self.finished = False

    def satisfied(self) -> bool:
        return all(self.kills[p] >= KILLS_PER_KIND for p in (*self.points, "random"))

    def tick(self) -> None:
        if self.finished:
            return
        if self.proc is None:
            run = len(self.logs)
            slot = run % (len(self.points) + 1)
            point = self.points[slot - 1] if slot and not self.satisfied() else None
            env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
            if point is not None:  # after_claim: the run's first new delivery (it rolls back, so no progress is lost)
                env[CRASH_ENV] = f"{point}:{1.0 if point == 'after_claim' else 0.5}"
            log = self.cfg.with_name(f"{self.cfg.stem}-{run}.log")
            self.logs.append(log)
            with open(log, "wb") as out:
                self.proc = subprocess.Popen(["node", str(CLI), str(self.cfg), "run"], stdout=out, stderr=subprocess.STDOUT, env=env)
            self.deadline = 0.0 if point is None and not self.satisfied() else float("inf")
            self.started = time.monotonic()
            return
        log = self.logs[-1]
        if self.proc.poll() is None:
            if not self.deadline and b'{"ready"' in log.read_bytes():
                self.deadline = time.monotonic() + self.rng.uniform(0.02, 0.5)
            if self.deadline and time.monotonic() >= self.deadline:
                self.proc.send_signal(signal.SIGKILL)
            else:
                assert time.monotonic() - self.started < 60, log.read_text()[-3000:]
                return
        rc = self.proc.wait(30)
        self.proc = None
        if rc == 0:
            self.finished = True
            return
        assert rc == -signal.SIGKILL, log.read_text()[-3000:]
        crashed = [line.split()[1] for line in log.read_text(errors="replace").splitlines() if line.startswith("busguard-agent-crash ")]
        self.kills[crashed[-1] if crashed else "random"] += 1

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def lines(self) -> list[dict[str, Any]]:
        out = []
        for log in self.logs:
            out += [json.loads(line) for line in log.read_text(errors="replace").splitlines() if line.startswith("{")]
        return out


def _drive(replicas: list[Replica]) -> None:
    try:
        deadline = time.monotonic() + 90
        while not all(r.finished for r in replicas):
            assert time.monotonic() < deadline, {id(r): r.kills for r in replicas}
            for r in replicas:
                r.tick()
            time.sleep(0.01)
    finally:
        for r in replicas:
            r.stop()
    for r in replicas:
        assert r.satisfied(), f"the stream ran out before every kind of kill: {r.kills}"


def _check(dsn: str, schema: str, d: Path, tasks: int, old: int, replicas: list[Replica]) -> None:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f'SELECT decision_id, task_id FROM "{schema}".work').fetchall()
    per_task = Counter(t for _, t in rows)
    assert per_task == Counter({f"t-{i}": 1 for i in range(tasks)}), per_task  # once each; nothing for the old ones
    assert len({dec for dec, _ in rows}) == tasks
    sent: dict[str, set[str]] = {}
    for line in (d / "sent.jsonl").read_text().splitlines():
        r = json.loads(line)
        sent.setdefault(r["topic"], set()).add(r["value"])
    assert sorted(sent) == sorted(f"acks.t-{i}" for i in range(tasks))
    assert all(len(values) == 1 for values in sent.values()), "an ack was re-signed, not re-sent"
    refused = {(line["refused"], line["offset"]) for r in replicas for line in r.lines() if "refused" in line}
    assert {reason for reason, _ in refused} == {"before_horizon"}
    assert len({offset for _, offset in refused}) == old
    done = PostgresDoneSet(dsn, schema=schema)
    try:
        assert done.outbox() == []
        assert done.horizon_ms() == HORIZON
        assert all(done.is_done(dec) for dec, _ in rows)
    finally:
        done.close()


def test_killed_at_every_crash_point_and_at_random_the_agent_acts_once_per_decision(postgres: Any, pg_schema: str, tmp_path: Path) -> None:
    _built()
    rng = random.Random(39)
    tasks, old = 60, 3
    _prepare(postgres.dsn, pg_schema)
    cfg = _config(tmp_path, postgres.dsn, pg_schema, _forwards(tasks, old, rng), "agent")
    replica = Replica(cfg, rng, points=CRASH_POINTS)
    _drive([replica])
    _check(postgres.dsn, pg_schema, tmp_path, tasks, old, [replica])


def test_two_replicas_on_one_postgres_done_set_killed_at_random_act_once_per_decision(
    postgres: Any, pg_schema: str, tmp_path: Path
) -> None:
    _built()
    rng = random.Random(3939)
    tasks, old = 40, 2
    _prepare(postgres.dsn, pg_schema)
    forwards = _forwards(tasks, old, rng)
    replicas = [Replica(_config(tmp_path, postgres.dsn, pg_schema, forwards, name), rng, points=()) for name in ("a", "b")]
    _drive(replicas)
    _check(postgres.dsn, pg_schema, tmp_path, tasks, old, replicas)


OPS: list[dict[str, Any]] = [
    {"op": "claim", "id": "d-1", "now_ms": 100, "decided_at": 90, "stage": [["acks", "6b", "76", [["h", "01"]]]]},
    {"op": "claim", "id": "d-1", "now_ms": 100},
    {"op": "claim", "id": "d-2", "now_ms": 100, "stage": [["acks", None, "77", []]], "fail": True},
    {"op": "is_done", "id": "d-2"},
    {"op": "claim", "id": "d-1", "now_ms": 100, "stage": [["acks", None, "78", []]]},  # nothing to reply for a done id
    {"op": "claim", "id": "d-3", "now_ms": 100, "decided_at": 150},  # stamped at decided_at
    {"op": "horizon"},
    {"op": "forget", "at": 120},
    {"op": "horizon"},
    {"op": "is_done", "id": "d-1"},
    {"op": "is_done", "id": "d-3"},
    {"op": "claim", "id": "d-1", "now_ms": 300, "decided_at": 90},  # a copy from before the horizon
    {"op": "claim", "id": "d-4", "now_ms": 300, "decided_at": 130},
    {"op": "claim", "id": "d-5", "now_ms": 50},  # no decided_at: the horizon is not consulted
    {"op": "forget", "at": 110},  # drops d-5's mark, keeps the horizon at 120
    {"op": "horizon"},
    {"op": "claim", "id": "d-6", "now_ms": 300, "stage": [["acks", None, "79", [["a", ""], ["a", "ff"]]], ["next", "6b6b", "7a", []]]},
    {"op": "outbox"},
    {"op": "sent_first"},
    {"op": "outbox"},
    {"op": "claim", "id": "", "now_ms": 1},
    {"op": "claim", "id": "x" * 257, "now_ms": 1},
]


def _python_ops(done: PostgresDoneSet) -> list[Any]:
    out: list[Any] = []
    for op in OPS:
        if op["op"] == "claim":
            try:
                with done.claim(op["id"], now_ms=op.get("now_ms"), decided_at=op.get("decided_at")) as tx:
                    for topic, key, value, hs in op.get("stage", []):
                        tx.stage(
                            topic, None if key is None else bytes.fromhex(key), bytes.fromhex(value), [(k, bytes.fromhex(v)) for k, v in hs]
                        )
                    if op.get("fail"):
                        raise RuntimeError("the effect failed")
                    out.append([tx.claimed, tx.before_horizon, tx.horizon_ms])
            except (RuntimeError, ValueError):
                out.append("error")
        elif op["op"] == "forget":
            out.append(done.forget_before(op["at"]))
        elif op["op"] == "horizon":
            out.append(done.horizon_ms())
        elif op["op"] == "is_done":
            out.append(done.is_done(op["id"]))
        elif op["op"] == "outbox":
            out.append([_shown(s) for s in done.outbox()])
        else:
            pending = done.outbox()
            if pending:
                done.sent(pending[0])
            out.append(bool(pending))
    return out


def _shown(s: Any) -> list[Any]:
    return [s.decision_id, s.topic, None if s.key is None else s.key.hex(), s.value.hex(), [[k, v.hex()] for k, v in s.headers]]


def test_the_done_set_operations_give_the_same_results_in_both_languages_on_the_same_tables(
    postgres: Any, pg_schema: str, tmp_path: Path
) -> None:
    _built()
    py = PostgresDoneSet(postgres.dsn, schema=pg_schema + "_py")
    try:
        expected = _python_ops(py)
        py_outbox = [_shown(s) for s in py.outbox()]
    finally:
        py.close()
    cfg = tmp_path / "ops.json"
    cfg.write_text(json.dumps({"dsn": postgres.dsn, "schema": pg_schema + "_ts"}))
    done = subprocess.run(["node", str(CLI), str(cfg), "ops"], input=json.dumps(OPS).encode(), capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    got = json.loads(done.stdout)
    assert got["results"] == expected
    assert expected[11] == [False, True, 120] and expected[7] == 1  # the horizon refused the copy; the forget dropped one mark
    # the TypeScript done-set's tables, read by Python: the same rows, the same header encoding
    again = PostgresDoneSet(postgres.dsn, schema=pg_schema + "_ts")
    try:
        assert [_shown(s) for s in again.outbox()] == py_outbox
        assert again.horizon_ms() == 120 and again.is_done("d-6") and not again.is_done("d-2")
    finally:
        again.close()
    # replicas opening a fresh schema together: the tables are made once, none fails
    cfg.write_text(json.dumps({"dsn": postgres.dsn, "schema": pg_schema + "_fresh"}))
    together = subprocess.run(["node", str(CLI), str(cfg), "together"], capture_output=True, timeout=60)
    assert together.returncode == 0, together.stderr.decode()[-3000:]
    # an effect that caught its own failed query: PostgreSQL answers COMMIT with ROLLBACK; the claim must not pass for done
    assert got["swallowed"].startswith("Error: COMMIT answered ROLLBACK"), got["swallowed"]
    assert got["swallowed"].endswith("is_done=false")
