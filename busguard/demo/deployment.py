"""The throwaway deployment the demo writes: its files, topics, config and key registry.

The config is rendered by busguard.devconfig, as for every deployment on the
embedded broker; only the demo's names and knobs are here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final, NamedTuple

from busguard.devconfig import Topics, embedded_config
from busguard.protocol.identity import multikey_encode
from busguard.protocol.keyfile import Identity, new_identity, write_key

#: Everything the demo writes into its work directory; a kept `--dir` is
#: cleared of these at the start of each run (the broker's memory is new each
#: time, so old state would contradict it).
DEMO_FILES: Final = (
    "busguard.toml",
    "keys.toml",
    "guard.key",
    "reconciler.key",
    "operator.key",
    "operators.toml",
    "planner.key",
    "executor.key",
    "executor.session.json",
    "executor.session.json.tmp",
    "state.db",
    "state.db-wal",
    "state.db-shm",
    "reconcile.db",
    "reconcile.db-wal",
    "reconcile.db-shm",
    "broker.log",
)

DEMO_TOPICS: Final = Topics(
    handoffs="agents.handoffs",
    acks="agents.acks",
    handoffs_admitted="agents.handoffs.admitted",
    acks_admitted="agents.acks.admitted",
    reconciliation="busguard.reconciliation",
    dead_letter="busguard.dead-letter",
    audit="busguard.audit",
    replies="busguard.replies",
)


def config_text(bootstrap: str) -> str:
    return embedded_config(
        bootstrap,
        group_id="busguard-demo",
        topics=DEMO_TOPICS,
        comment="Written by `busguard demo`. ops.port = 0: in-process, readiness is read from the loops directly.",
        kafka={"client_id": "busguard-demo", "create_topics": True, "topic_partitions": 4},
        state={"synchronous": "normal"},
        keys={"create_guard_key": False, "create_reconciler_key": False, "operators": "operators.toml"},
        log={"level": "warning"},
        ops={"port": 0},
        reconcile={"group_id": "busguard-demo-reconcile", "state_path": "reconcile.db"},
    )


def registry_text(planner: Identity, executor: Identity) -> str:
    return f"""\
# Written by `busguard demo`: two named agents, one key each. Reference: docs/config.md.
[[agent]]
id = "planner"
  [[agent.key]]
  key_id = "planner-1"
  public_key = "{multikey_encode(planner.public_key)}"

[[agent]]
id = "executor"
  [[agent.key]]
  key_id = "executor-1"
  public_key = "{multikey_encode(executor.public_key)}"
"""


class Identities(NamedTuple):
    guard: Identity
    reconciler: Identity  # separate keys for separate roles
    operator: Identity
    planner: Identity
    executor: Identity


def write_deployment(work: Path) -> Identities:
    """Fresh keys for every role, the operators file and the key registry, in `work`."""
    ids = Identities(new_identity(), new_identity(), new_identity(), new_identity(), new_identity())
    write_key(work / "guard.key", ids.guard)
    write_key(work / "reconciler.key", ids.reconciler)
    write_key(work / "operator.key", ids.operator)
    (work / "operators.toml").write_text(
        f'[[operator]]\nname = "demo"\npublic_key = "{multikey_encode(ids.operator.public_key)}"\n', encoding="utf-8"
    )
    write_key(work / "planner.key", ids.planner)
    write_key(work / "executor.key", ids.executor)
    (work / "keys.toml").write_text(registry_text(ids.planner, ids.executor), encoding="utf-8")
    return ids
