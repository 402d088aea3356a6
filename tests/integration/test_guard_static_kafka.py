"""Issue 36 item 6: static membership on Apache Kafka.

tests/integration/test_guard_static_kill_loop.py's loop, on the `kafka`
fixture: three `busguard run` processes on one PostgreSQL state, static
members guard-0..2 (session 10 s, heartbeat 3 s: busguard's defaults, above
Kafka's `group.min.session.timeout.ms` of 6 s), the idempotent producer on;
guard-1 is killed with SIGKILL and started again six times (at once, or 2.5 s
later) while a trickle of signed records reaches every input partition. The
survivors are never revoked, each restarted process gets its predecessor's
partitions and nothing else, and every input gets exactly one decision and
reaches downstream once.

On Apache Kafka a known static member's JoinGroup is answered at once with its
old assignment, so busguard.runtime.rejoin (tansu's workaround) does not run
here; the measurement with it and without it is in docs/notes-broker.md,
"Static membership on Apache Kafka".
"""

from __future__ import annotations

from pathlib import Path

from busguard.devtools.kafka import ApacheKafka

from .test_guard_static_kill_loop import SESSION, check_kill_loop, run_kill_loop

ON_KAFKA = {**SESSION, "BUSGUARD_KAFKA__IDEMPOTENCE": "true"}


async def test_a_static_guard_killed_six_times_never_rebalances_the_others_on_kafka(kafka: ApacheKafka, tmp_path: Path) -> None:
    run = await run_kill_loop(kafka.bootstrap, tmp_path, ON_KAFKA)
    check_kill_loop(run)
    # Kafka serves KIP-848's ConsumerGroupHeartbeat: no restart heartbeated for its predecessor
    assert run.bridged == 0, run.bridged
