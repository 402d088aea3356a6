"""Issue 19 item 12: the state store unreachable, at start and mid-run,
through the real `busguard run` (docs/operations.md, "Outages").

At start: PostgreSQL at a closed port (dynamic and static membership), and
a SQLite path whose directory cannot be created: one line on stderr naming
the setting, its value (the DSN's password redacted) and what to do; exit
status 3; no traceback. Mid-run, on the embedded PostgreSQL stopped and
started again: a batch that waits out the outage within `state.retry_s`
keeps the clock reading it was judged at (its decided_at precedes the
outage it waited through); one that outlasts `retry_s` stops the guard with
the same one line and status 3, and the next process judges the record
afresh, once."""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import msgspec

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, Setup, collect, identity, make_setup, produce, sender
from busguard.protocol.records import Decision
from busguard.sdk.sender import SignedRecord
from tests.pgkit import EmbeddedPostgres, free_port

from .paths import REPO

SECRET = "hunter2-secret"
PREFIX = "busguard: state store unreachable: "


def _config(tmp: Path, state: str, *, level: str = "info", kafka: str = "") -> Path:
    """A guard config whose Kafka is never reached: the store is opened first."""
    (tmp / "keys.toml").write_text("")
    config = tmp / "busguard.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = "127.0.0.1:{free_port()}"\n{kafka}'
        '[[routes]]\nname = "r"\ninputs = ["in"]\ndownstream = "out"\n'
        f"[state]\n{state}\n"
        '[keys]\nregistry = "keys.toml"\nguard_key = "guard.key"\ncreate_guard_key = true\n'
        f'[log]\nformat = "json"\nlevel = "{level}"\n'
    )
    return config


def _run(config: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUSGUARD_")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "busguard.cli", "run", "--config", str(config)], capture_output=True, text=True, env=env, timeout=120
    )


def test_postgres_unreachable_at_start_is_one_line_and_status_3(tmp_path: Path) -> None:
    port = free_port()
    dsn = f"postgresql://guard:{SECRET}@127.0.0.1:{port}/bus"
    for static in ("", 'group_instance_id = "guard-1"\n'):  # dynamic, then static (the name is claimed on PostgreSQL first)
        where = tmp_path / ("static" if static else "dynamic")
        where.mkdir()
        state = f'backend = "postgres"\ndsn = "{dsn}"\nretry_s = 0.5'
        quiet = _run(_config(where, state, level="error", kafka=static))
        assert quiet.returncode == 3, quiet.stderr
        (line,) = quiet.stderr.splitlines()  # nothing else on stderr
        config = where / "busguard.toml"
        assert line.startswith(f"{PREFIX}{config}: state.dsn = 'postgresql://guard:***@127.0.0.1:{port}/bus': no answer to "), line
        assert "Connection refused" in line and "(waited state.retry_s = 0.5 s); start PostgreSQL there or correct state.dsn" in line, line
        assert SECRET not in quiet.stderr + quiet.stdout

        logged = _run(_config(where, state, kafka=static))  # at the default level: the waits are logged, then the same one line
        assert logged.returncode == 3 and "Traceback" not in logged.stderr and SECRET not in logged.stderr
        *waits, last = logged.stderr.splitlines()
        assert last == line
        assert waits and all(json.loads(w)["event"] == "state database unavailable; retrying" for w in waits), waits


def test_a_sqlite_path_that_cannot_be_created_is_one_line_and_status_3(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("not a directory")
    for path in ("afile/state.db", "afile/sub/state.db"):
        done = _run(_config(tmp_path, f'path = "{path}"', level="error"))
        assert done.returncode == 3, done.stderr
        (line,) = done.stderr.splitlines()
        assert line.startswith(
            f"{PREFIX}{tmp_path / 'busguard.toml'}: state.path = '{tmp_path / path}': cannot create or open it for writing (NotADirectoryError"
        ), line
        assert line.endswith("a file in a directory this user can create and write, or correct state.path"), line
    missing = tmp_path / "not" / "yet"  # a missing directory is created, as the file is
    ok = _run(_config(tmp_path, f'path = "{missing / "state.db"}"', level="error"))
    assert (missing / "state.db").exists() and PREFIX not in ok.stderr, ok.stderr


# -- mid-run ------------------------------------------------------------------------------------------


def _handoff(task: str) -> SignedRecord:
    return sender("planner").sign(kind="handoff", task_id=task, receiver=identity("executor").agent_id, payload=b'{"n":1}')


def _waits(log: Path, operation: str) -> list[int]:
    """When (ms, the guard's clock) it logged waiting for the database in `operation`."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("event") == "state database unavailable; retrying" and entry.get("operation") == operation:
            out.append(int(datetime.datetime.fromisoformat(entry["timestamp"]).timestamp() * 1000))
    return out


async def _until_waiting(guard: GuardProcess, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while not _waits(guard.log, "run batch"):
        assert time.monotonic() < deadline, guard.tail()
        await asyncio.sleep(0.1)
    return min(_waits(guard.log, "run batch"))


async def _decisions(s: Setup, n: int) -> list[Decision]:
    got = await collect(s.bootstrap, [s.audit], lambda c: len(c[s.audit]) >= n, timeout=120)
    return sorted((msgspec.json.decode(r.value, type=Decision) for r in got[s.audit]), key=lambda d: (d.source.partition, d.source.offset))


async def test_an_outage_within_retry_s_is_waited_out_on_the_batch_s_own_clock(broker: EmbeddedBroker, tmp_path: Path) -> None:
    with EmbeddedPostgres() as pg:
        # housekeeping once at start, not during the outage: the batch is what waits
        s = await make_setup(
            tmp_path, broker.bootstrap, state={"backend": "postgres", "dsn": pg.dsn, "schema": "outage", "expire_interval_s": 3600}
        )
        guard = GuardProcess(s)
        try:
            guard.wait_ready(60)
            await produce(s.bootstrap, s.handoffs, [_handoff("before")])
            await _decisions(s, 1)
            pg.stop()
            await produce(s.bootstrap, s.handoffs, [_handoff("during")])
            first_wait = await _until_waiting(guard)
            await asyncio.sleep(1)
            pg.start()
            _, during = await _decisions(s, 2)
        finally:
            code = guard.terminate()
        assert code == 0, guard.tail()
        assert (during.task_id, during.reason) == ("during", "admitted")
        # judged at the reading taken before the batch met the outage, not at a reading after it
        assert during.decided_at <= first_wait, (during.decided_at, first_wait)
        assert len(await _decisions(s, 2)) == 2  # one decision each


async def test_an_outage_past_retry_s_stops_the_guard_in_one_line_and_the_next_judges_afresh(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    with EmbeddedPostgres() as pg:
        state = {"backend": "postgres", "dsn": pg.dsn, "schema": "outage", "expire_interval_s": 3600, "retry_s": 2}
        s = await make_setup(tmp_path, broker.bootstrap, state=state)
        guard = GuardProcess(s)
        try:
            guard.wait_ready(60)
            await produce(s.bootstrap, s.handoffs, [_handoff("before")])
            await _decisions(s, 1)  # and housekeeping has run: the batch below is what meets the outage
            pg.stop()
            await produce(s.bootstrap, s.handoffs, [_handoff("across")])
            first_wait = await _until_waiting(guard)
            code = guard.wait(60)
        finally:
            guard.terminate()
        last = guard.log.read_text().splitlines()[-1]
        assert code == 3 and "Traceback" not in guard.log.read_text(), guard.tail()
        assert last.startswith(f"{PREFIX}{s.config}: state.dsn = '{pg.dsn}': no answer to 'run batch': "), last
        pg.start()
        again = GuardProcess(s)
        try:
            again.wait_ready(60)
            _, d = await _decisions(s, 2)
        finally:
            assert again.terminate() == 0, again.tail()
        # nothing was persisted: the record is judged once, by the next process, at its own clock
        assert (d.task_id, d.reason) == ("across", "admitted") and d.decided_at > first_wait
