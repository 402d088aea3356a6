"""The sender never reuses a sequence number, even when killed with -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from busguard.sdk.session import SessionAllocator

REPO = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    from busguard.sdk.session import SessionAllocator
    alloc = SessionAllocator({path!r}, block={block})
    print("session", alloc.session_id, flush=True)
    while True:
        print(alloc.next(), flush=True)   # "used": written out before anything else happens
    """
)


def _run_and_kill(path: Path, block: int, count: int) -> tuple[str, list[int]]:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD.format(repo=str(REPO), path=str(path), block=block)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    session = child.stdout.readline().split()[1]
    used = []
    for line in child.stdout:
        used.append(int(line))
        if len(used) >= count:
            os.kill(child.pid, signal.SIGKILL)
            break
    child.wait()
    # Lines already in the pipe were used too.
    used += [int(x) for x in child.stdout.read().split()]
    return session, used


def test_restart_after_kill_9_never_reuses_a_sequence(tmp_path: Path) -> None:
    path = tmp_path / "session.json"
    all_used: list[int] = []
    sessions = set()
    for count in (37, 5, 130):
        session, used = _run_and_kill(path, block=16, count=count)
        sessions.add(session)
        assert not set(used) & set(all_used), "a sequence number was handed out twice"
        assert min(used) > max(all_used, default=-1)
        all_used += used
    assert len(sessions) == 1  # the session id is stable across crash recovery


def test_allocator_reserves_before_use(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    a = SessionAllocator(path, block=4)
    got = [a.next() for _ in range(6)]
    assert got == [0, 1, 2, 3, 4, 5]
    b = SessionAllocator(path, block=4)  # as if `a` crashed right now
    assert b.next() == 8 and b.session_id == a.session_id
