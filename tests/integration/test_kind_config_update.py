"""examples/config_update, installed for real, through `busguard run` and `busguard reconcile`.

Every rule of the kind shows end to end (admitted, a duplicate naming its
admission on the dead letter, an exact copy also a duplicate, stale, a
conflict settled by the kind's own hook, a sender not on the allow-list
refused), while the guard is killed (kill -9) after persisting a batch it
had not produced yet and the reconciler is killed after committing a
settlement to the guard's store and before keeping its own record of it.
`busguard audit`, where the kind is installed, is OK and prints its rule.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, all_decided, collect, collect_all, header, identity, make_setup, produce, sender
from busguard.devtools.kafka import ApacheKafka
from busguard.protocol.records import Decision, Resolution, audit_decoder

from .example_kinds import busguard, install_example
from .paths import REPO

EXAMPLE = REPO / "examples" / "config_update"


def update(who: str, version: int, value: int, key: str = "db.pool"):  # type: ignore[no-untyped-def]
    payload = msgspec.json.encode({"key": key, "version": version, "value": value})
    return sender(who).sign(kind="config.update", task_id=f"{key}@{version}", receiver=identity("executor").agent_id, payload=payload)


async def test_config_update_end_to_end_through_kill_9_of_the_guard_and_the_reconciler(
    broker: EmbeddedBroker | ApacheKafka, tmp_path: Path
) -> None:
    site = install_example(EXAMPLE, tmp_path)
    env = {"PYTHONPATH": f"{site}:{REPO}"}
    s = await make_setup(tmp_path / "run", broker.bootstrap, agents=("planner", "executor", "intruder"), max_records=5)
    planner, executor = identity("planner").agent_id, identity("executor").agent_id
    with s.config.open("a") as f:  # a dotted kind name is its TOML table
        f.write(f'\n[config.update]\nsenders = ["{planner}", "{executor}"]\nkeys = ["db.pool"]\nauto_settle = "keep_admitted"\n')

    v1, v2 = update("planner", 1, 10), update("executor", 2, 20)
    first = [v1, v2]
    rest = [
        update("planner", 2, 20),  # same version and value, re-signed: duplicate of v2
        v2,  # the exact bytes again: duplicate of v2 as well, not a replay
        update("planner", 1, 11),  # stale
        update("planner", 2, 21),  # conflict: escalated, settled by the kind's hook
        update("intruder", 3, 30),  # not on the allow-list: refused before any state
    ]
    # the guard dies (kill -9) after persisting its second batch, before producing it
    victim = GuardProcess(s, fault="persisted:2", env=env)
    victim.wait_ready()
    await produce(s.bootstrap, s.handoffs, first, key=b"cfg")
    await collect(s.bootstrap, s.outputs, lambda c: all_decided(s, c, 2))
    await produce(s.bootstrap, s.handoffs, rest, key=b"cfg")
    assert victim.wait(60) == -9, victim.tail()
    guard = GuardProcess(s, env=env)
    reconciler = GuardProcess(s, command="reconcile", fault="settled:1", env=env)  # dies after settling, before keeping it
    try:
        guard.wait_ready()
        got = await collect(s.bootstrap, s.outputs, lambda c: all_decided(s, c, 7))
        assert reconciler.wait(60) == -9, reconciler.tail()
        survivor = GuardProcess(s, command="reconcile", env=env)
        try:
            survivor.wait_ready()
            await collect(s.bootstrap, [s.audit], lambda c: any(b'"stage":"final"' in (r.value or b"") for r in c[s.audit]))
        finally:
            assert survivor.terminate() == 0, survivor.tail()
    finally:
        assert guard.terminate() == 0, guard.tail()

    got = await collect_all(s.bootstrap, [*s.outputs])
    records = [audit_decoder.decode(r.value) for r in got[s.audit]]
    decisions = {d.decision_id: d for d in records if isinstance(d, Decision)}
    by_reason = sorted(d.reason for d in decisions.values())
    assert by_reason == sorted(
        [
            "admitted",
            "admitted",
            "same_config_version",
            "same_config_version",
            "stale_config_version",
            "config_version_conflict",
            "sender_not_allowed",
        ]
    )
    admitted_v2 = next(d for d in decisions.values() if d.reason == "admitted" and d.annotations and d.annotations["config.version"] == "2")
    dups = [r for r in got[s.dead_letter] if header(r, "busguard-reason") == b"same_config_version"]
    assert len({header(r, "busguard-decision-id") for r in dups}) == 2
    assert {header(r, "busguard-prior-decision-id") for r in dups} == {admitted_v2.decision_id.encode()}
    assert {header(r, "busguard-outcome") for r in dups} == {b"duplicate"}
    assert [r.value for r in got[s.downstream_handoffs]] == [v1.value, v2.value]  # each admitted value forwarded once
    finals = {r.resolution_id: r for r in records if isinstance(r, Resolution) and r.stage == "final"}
    assert [(f.resolved_as, f.by) for f in finals.values()] == [("keep_admitted", "policy")]  # settled once, by its hook

    report = busguard(site, "audit", "--config", str(s.config), "--idle-ms", "1000", "--json")
    assert report.returncode == 0, report.stdout + report.stderr
    data = json.loads(report.stdout)
    assert data["violations"] == [] and data["summary"]["duplicates"] == 2
    assert {
        "kind": "config.update",
        "witness": "key",
        "rule": "one admitted per key (config.key, config.version, config.value_sha256); several per task allowed",
    } in data["kinds"]
    table = busguard(site, "audit", "--config", str(s.config), "--idle-ms", "1000")
    assert (
        "busguard audit: OK" in table.stdout and "one admitted per key" in table.stdout and "!" not in table.stdout.split("violations")[0]
    )

    # where each record went, for an operator: `busguard decisions`, filtered by kind and key
    shown = busguard(
        site, "decisions", "--config", str(s.config), "--idle-ms", "1000", "--kind", "config.update", "--key", "db.pool", "--json"
    )
    assert shown.returncode == 0, shown.stderr
    seen = {(r["reason"], tuple(r["went_to"]), r["prior_decision_id"], r["settled"]) for r in json.loads(shown.stdout)}
    assert ("same_config_version", (s.dead_letter,), admitted_v2.decision_id, None) in seen
    assert ("config_version_conflict", (s.reconciliation,), None, "resolved as keep_admitted by policy") in seen
    assert ("admitted", (s.downstream_handoffs,), None, None) in seen
    assert len(json.loads(shown.stdout)) == 6  # every decision of the key (the refused sender's record is not parsed: no key)
    table = busguard(site, "decisions", "--config", str(s.config), "--idle-ms", "1000")
    assert "sender_not_allowed" in table.stdout and "WENT TO" in table.stdout, table.stderr


async def test_an_operator_admits_the_other_value_once_though_the_reconciler_is_killed_after_changing_the_mark(
    broker: EmbeddedBroker | ApacheKafka, tmp_path: Path
) -> None:
    from busguard.protocol.keyfile import write_key

    site = install_example(EXAMPLE, tmp_path)
    env = {"PYTHONPATH": f"{site}:{REPO}"}
    alice = identity("alice")
    s = await make_setup(tmp_path / "run", broker.bootstrap, agents=("planner", "executor"), operators=[("alice", alice)])
    write_key(tmp_path / "alice.key", alice)
    planner, executor = identity("planner").agent_id, identity("executor").agent_id
    with s.config.open("a") as f:
        f.write(f'\n["config.update"]\nsenders = ["{planner}", "{executor}"]\nkeys = ["db.pool"]\nauto_settle = "hold"\n')
    a, b = update("planner", 7, 1), update("executor", 7, 2)
    guard = GuardProcess(s, env=env)
    victim = GuardProcess(s, command="reconcile", fault="settled:1", env=env)
    try:
        guard.wait_ready()
        victim.wait_ready()
        await produce(s.bootstrap, s.handoffs, [a, b], key=b"cfg")
        got = await collect(s.bootstrap, [*s.outputs], lambda c: any(b'"stage":"held"' in (r.value or b"") for r in c[s.audit]))
        (esc,) = [d for d in (audit_decoder.decode(r.value) for r in got[s.audit]) if isinstance(d, Decision) and d.outcome == "escalate"]
        resolve = busguard(
            site, "escalations", "resolve", esc.decision_id, "--as", "admit_value", "--note", "2 is right",
            "--operator", "alice", "--key", str(tmp_path / "alice.key"), "--config", str(s.config), "--wait", "0",
        )  # fmt: skip
        assert resolve.returncode == 0, resolve.stderr
        assert victim.wait(60) == -9, victim.tail()  # killed after moving the mark, before keeping the resolution
        # the mark names value 2 at version 7 already: its sender's next send of it is admitted, while no reconciler runs
        await produce(s.bootstrap, s.handoffs, [update("executor", 7, 2)], key=b"cfg")
        await collect(s.bootstrap, [*s.outputs], lambda c: all_decided(s, c, 3))
        survivor = GuardProcess(s, command="reconcile", env=env)
        try:
            survivor.wait_ready()
            await collect(s.bootstrap, [s.audit], lambda c: any(b'"stage":"final"' in (r.value or b"") for r in c[s.audit]))
            # the survivor re-ran the command and changed nothing: value 2 again is a duplicate (applied twice, the
            # mark would have been reset and this admitted a second time), value 1 a conflict
            await produce(s.bootstrap, s.handoffs, [update("executor", 7, 2), update("planner", 7, 1)], key=b"cfg")
            got = await collect(s.bootstrap, [*s.outputs], lambda c: all_decided(s, c, 5))
        finally:
            assert survivor.terminate() == 0, survivor.tail()
    finally:
        assert guard.terminate() == 0, guard.tail()

    got = await collect_all(s.bootstrap, [*s.outputs])
    records = [audit_decoder.decode(r.value) for r in got[s.audit]]
    finals = {(r.escalation_id, r.resolved_as, r.by) for r in records if isinstance(r, Resolution) and r.stage == "final"}
    assert (esc.decision_id, "admit_value", "operator:alice") in finals
    assert (
        len({r.resolution_id for r in records if isinstance(r, Resolution) and r.stage == "final" and r.escalation_id == esc.decision_id})
        == 1
    )
    payloads = [msgspec.json.decode(r.value)["value"] for r in got[s.downstream_handoffs]]
    assert payloads == [1, 2]  # value 1 first, value 2 once the operator admitted it: each forwarded once
    reasons = sorted(d.reason for d in {d.decision_id: d for d in records if isinstance(d, Decision)}.values())
    assert reasons == ["admitted", "admitted", "config_version_conflict", "config_version_conflict", "same_config_version"]
    report = busguard(site, "audit", "--config", str(s.config), "--idle-ms", "1000", "--json")
    assert report.returncode == 0 and json.loads(report.stdout)["violations"] == [], report.stdout + report.stderr
