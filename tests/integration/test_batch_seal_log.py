"""Batch seals end to end: a guard killed after its batch's transaction
committed (head persisted, nothing produced), then a new process. The
re-delivered records come back under the dead process's head, byte for byte,
the new process starts its own chain, and the auditor proves both chains
whole: every head, every leaf exactly once, no per-record seal anywhere."""

from __future__ import annotations

from pathlib import Path

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, Setup, all_decided, collect, collect_all, distinct_sources, make_setup, produce
from busguard.protocol.attestation import HEADER_SEAL
from busguard.protocol.auditbatch import is_batch
from busguard.protocol.treehead import HEADER_TREE_HEAD, decode_head

from .test_audit import _audit, workload


async def _killed_after_its_second_commit(
    broker: EmbeddedBroker, tmp_path: Path, batch: dict[str, object] | None = None
) -> tuple[Setup, int]:
    """A guard whose 2nd batch (and head) committed in the store, never
    produced, killed there; returns the setup and the inputs sent."""
    s = await make_setup(tmp_path, broker.bootstrap, max_records=20, batch=batch)
    victim = GuardProcess(s, fault="persisted:2")
    victim.wait_ready()
    handoffs, acks, _ = workload(tmp_path, n=60)
    await produce(s.bootstrap, s.handoffs, handoffs, key=b"planner")
    await produce(s.bootstrap, s.acks, acks, key=b"executor")
    assert victim.wait(60) == -9, victim.tail()
    return s, len(handoffs) + len(acks)


async def test_a_crash_after_commit_re_emits_under_the_old_head_and_both_chains_audit_whole(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s, total = await _killed_after_its_second_commit(broker, tmp_path)
    survivor = GuardProcess(s)
    try:
        survivor.wait_ready()
        await collect(s.bootstrap, s.outputs, lambda c: all_decided(s, c, total) and len({(r.topic, r.value) for r in c[s.audit]}) >= total)
    finally:
        assert survivor.terminate() == 0, survivor.tail()
    raw = await collect_all(s.bootstrap, [s.audit])
    heads = [decode_head(dict(r.headers)[HEADER_TREE_HEAD]) for r in raw[s.audit]]
    assert all(HEADER_SEAL not in dict(r.headers) for r in raw[s.audit])
    chains = {h.chain for h in heads}
    assert len(chains) == 2  # the victim's (its committed heads re-emitted by the survivor) and the survivor's

    report, _ = await _audit(s, idle_ms=1000)
    assert report.ok, report.violations
    assert report.summary.decisions == total
    assert sorted(c.chain for c in report.chains) == sorted(chains)
    assert sum(c.leaves for c in report.chains) == total  # every decision is one leaf, of one head
    # the victim sealed two batches: the first produced, the second only committed and re-emitted by the survivor
    assert sorted((c.heads, c.tip_seq) for c in report.chains)[0] == (2, 1)
    assert all(c.first_seq == 0 and c.heads == c.tip_seq + 1 for c in report.chains)


async def test_batch_audit_records_survive_the_same_crash_and_audit_whole(broker: EmbeddedBroker, tmp_path: Path) -> None:
    """`[batch] audit = "batch"` (docs/protocol.md 12.7): the same kill after
    the commit; the survivor re-emits the dead process's groups completed
    from the store, and the auditor, reading every decision from the batch
    audit records' entries, proves both chains whole."""
    s, total = await _killed_after_its_second_commit(broker, tmp_path, {"audit": "batch"})
    survivor = GuardProcess(s)
    try:
        survivor.wait_ready()
        await collect(s.bootstrap, s.outputs, lambda c: all_decided(s, c, total) and distinct_sources(s, c) >= total)
    finally:
        assert survivor.terminate() == 0, survivor.tail()
    raw = (await collect_all(s.bootstrap, [s.audit]))[s.audit]
    assert raw and all(is_batch(r.headers) for r in raw) and len(raw) < total / 2
    report, _ = await _audit(s, idle_ms=1000)
    assert report.ok, report.violations
    assert report.summary.decisions == total
    assert len(report.chains) == 2 and sum(c.leaves for c in report.chains) == total
