"""A kind's reconciliation hooks through the reconciler (busguard.reconcile.kinds).

The example kind `config.update` (examples/config_update) settles its
version conflicts itself: automatically as `keep_admitted`, or by an
operator's `admit_value`, which moves its high-water row in the guard's
store. The reconciler applies that change through the store contract,
once: a crash between the guard-store commit and the reconciler's own
re-runs the input and changes nothing again.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest
from busguard_config_update.kind import ADMIT, CONFLICT, KEEP, SPEC, ConfigUpdateSettings, row_of

from busguard.admission.types import AdmissionPolicy
from busguard.config import Config, ReconcileConfig, StateConfig
from busguard.errors import ConfigError
from busguard.policies import KINDS
from busguard.protocol.identity import agent_id_for_key
from busguard.protocol.keyfile import Identity
from busguard.protocol.records import Decision, Resolution
from busguard.protocol.signing import public_key_from_seed
from busguard.reconcile.operators import Operators
from busguard.reconcile.policy import EscalationState
from busguard.reconcile.worker import Reconciler
from busguard.runtime.outputs import Output
from busguard.runtime.watched import WatchedFile
from busguard.state.keys import KeySet
from busguard.state.snapshot import Snapshot
from busguard.state.sqlite.reconcile import SqliteReconcileStore
from busguard.state.sqlite.store import SqliteStore
from busguard.state.writes import BatchWrites
from busguard.wiring import open_kind_store
from tests.unit.harness import NOW, Harness, agent, sender
from tests.unit.test_reconcile_output_size import ALICE, GUARD, RECONCILER, TOPICS, _command, _escalation, _Rec

TO = agent("executor")


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(KINDS, SPEC.kind, SPEC)  # type: ignore[index]


def update(version: int, value: str, who: str = "planner"):  # type: ignore[no-untyped-def]
    payload = msgspec.json.encode({"key": "db.pool", "version": version, "value": value})
    return sender(who).sign(kind="config.update", task_id=f"v{version}", receiver=TO, payload=payload)


def guard_harness(tmp_path: Path, auto: str) -> Harness:
    settings = ConfigUpdateSettings(senders=[agent("planner"), agent("ops")], keys=["db.pool"], auto_settle=auto)  # type: ignore[arg-type]
    store = SqliteStore(tmp_path / "state.db", now_ms=NOW - 3_600_000)
    return Harness("planner", "ops", "executor", policy=AdmissionPolicy(policy_settings={"config.update": settings}), store=store)


def reconciler(tmp_path: Path, name: str = "reconcile") -> Reconciler:
    from busguard.protocol.identity import multikey_encode

    ops = tmp_path / "operators.toml"
    ops.write_text(f'[[operator]]\nname = "alice"\npublic_key = "{multikey_encode(public_key_from_seed(ALICE))}"\n')
    pk = public_key_from_seed(RECONCILER)
    return Reconciler(
        Config(topics=TOPICS, reconcile=ReconcileConfig()),
        identity=Identity(seed=RECONCILER, public_key=pk, agent_id=agent_id_for_key(pk)),
        guard_public_key=public_key_from_seed(GUARD),
        store=SqliteReconcileStore(tmp_path / f"{name}.db", output=Output, state=EscalationState),
        operators=WatchedFile(ops, Operators.load, what="operators file"),
        clock_ms=lambda: 7,
        kind_store=SqliteStore(tmp_path / "state.db", now_ms=NOW),  # the guard's store, opened beside the guard
    )


def run(worker: Reconciler, records: list[_Rec]) -> list[Output]:
    return asyncio.run(worker.process(records))


def resolutions(outputs: list[Output]) -> list[tuple[str, str | None, str]]:
    found = [msgspec.json.decode(o.value or b"", type=Resolution) for o in outputs if o.topic == TOPICS.audit]
    return [(r.stage, r.resolved_as, r.by) for r in found]


def row(h: Harness) -> bytes | None:
    seen: list[Snapshot] = []

    def fn(snap: Snapshot) -> BatchWrites:
        seen.append(snap)
        return BatchWrites()

    h.store.run_batch(KeySet(policy={row_of("db.pool")}), h.now, fn)
    return seen[0].policy.get(row_of("db.pool"))


def conflict(h: Harness) -> Decision:
    first, esc = h.feed(update(7, "a"), update(7, "b", who="ops"))
    assert (first.outcome, esc.reason) == ("forward", CONFLICT)
    return esc


def test_the_kinds_automatic_settlement_is_a_final_resolution_by_policy(tmp_path: Path) -> None:
    h = guard_harness(tmp_path, KEEP)
    esc = conflict(h)
    assert resolutions(run(reconciler(tmp_path), [_escalation(esc, 0)])) == [("final", KEEP, "policy")]


def test_an_operators_choice_of_the_kind_moves_its_row_once_and_a_crash_before_the_resolution_repeats_nothing(tmp_path: Path) -> None:
    h = guard_harness(tmp_path, "hold")
    esc = conflict(h)
    before = row(h)
    records = [_escalation(esc, 0), _command(esc, 1, ADMIT, "b is the right pool size")]
    worker = reconciler(tmp_path)
    first = run(worker, records)
    assert resolutions(first) == [("held", None, "policy"), ("final", ADMIT, "operator:alice")]
    moved = row(h)
    assert moved != before
    # the sender's next send of b is forwarded now
    assert h.one(update(7, "b", who="ops")).outcome == "forward"
    after_forward = row(h)
    # a crash after the guard store committed and before the reconciler's store did: the inputs come again
    again = run(reconciler(tmp_path, "reconcile-lost"), records)
    assert [o.value for o in again] == [o.value for o in first]  # the same resolution, byte for byte
    assert row(h) == after_forward  # and the row was not moved back: the change was applied once


def test_a_choice_the_escalations_kind_does_not_offer_is_dead_lettered(tmp_path: Path) -> None:
    from tests.unit.test_reconcile_policy import escalations

    _, task_conflict = escalations(tmp_path)  # a handoff escalation
    out = run(reconciler(tmp_path), [_escalation(task_conflict, 0), _command(task_conflict, 1, ADMIT, "no")])
    assert resolutions(out) == [("held", None, "policy")]
    (dead,) = [o for o in out if o.topic == TOPICS.dead_letter]
    assert dict(dead.headers)["busguard-reason"] == b"unknown_resolution"


def test_the_reconciler_needs_a_guard_store_it_can_open_beside_the_guard(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        open_kind_store(Config(state=StateConfig(backend="memory")), NOW)
    assert info.value.field == "state.backend" and "config.update" in info.value.allowed
