"""Issue 35, finding 5: a done-set forgets, a copy comes back.

A receiver acts on forwards a real `busguard run` admitted, then forgets its
marks (`forget_before`). Anyone who can write the downstream topic puts an
exact copy of an old forward back on it: the seal still verifies, and with
the mark gone the receiver acted on it a second time. The done-set now
keeps its horizon, and `ActOnce` refuses a forward decided before it
(`before_horizon`), while a task admitted after the forget is acted on.
"""

from __future__ import annotations

import time
from pathlib import Path

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, collect, make_setup, produce

from .test_sdk_hostile import forward_tasks, open_receiver, run_until


async def test_an_exact_copy_of_a_forward_decided_before_the_horizon_is_refused_not_acted_on_again(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, partitions=1)
    guard = GuardProcess(s)
    guard.wait_ready()
    group, db = f"{s.group}.executor", tmp_path / "executor.db"
    try:
        await forward_tasks(s, ["t-0", "t-1", "t-2"], 3)
        got = await collect(s.bootstrap, [s.downstream_handoffs], lambda c: len(c[s.downstream_handoffs]) >= 3)
        old = got[s.downstream_handoffs][0]

        loop, done = await open_receiver(s, group, db)
        try:
            first, _ = await run_until(loop, acted=3, refused=0)
            assert done.forget_before(time.time_ns() // 1_000_000 + 1) == 3  # every mark, as after a long retention
            await produce(s.bootstrap, s.downstream_handoffs, [(old.value, list(old.headers))], key=old.key)  # the copy
            await forward_tasks(s, ["t-3"], 4)  # admitted after the forget
            second, reasons = await run_until(loop, acted=1, refused=1)
            work = done.connection.execute("SELECT task_id FROM work").fetchall()
        finally:
            await loop.inbox.close()
            done.close()
        assert (first.acted, first.refused) == (3, 0)
        assert (second.acted, second.skipped, second.refused) == (1, 0, 1)
        assert reasons == {"before_horizon": 1}
        assert sorted(t for (t,) in work) == ["t-0", "t-1", "t-2", "t-3"]
    finally:
        assert guard.terminate() == 0, guard.tail()
