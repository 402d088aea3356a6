"""The auditor's batch-seal checks (invariant 6, and `bad_inclusion`): every
head verified, the chain contiguous and linked, every leaf of every head
proven by an audit record. Each finding is shown to fire, and not to fire on
a complete log fed in any order."""

from __future__ import annotations

import random

from busguard.audit.checks import apply_audit, check_audit_record, check_forwarded, note_head
from busguard.audit.ledger import Ledger
from busguard.audit.lineage import judge
from busguard.protocol.attestation import HeadCache, attest, decision_bytes
from busguard.protocol.records import Coordinates, Decision
from busguard.protocol.signing import Signer
from busguard.protocol.treehead import ChainTip, head_digest, seal_batch
from busguard.runtime.outputs import BatchProof, Sealed, outputs_for

from .test_audit_lineage import DOWNSTREAM, GUARD_ID, GUARD_PK, GUARD_SEED, RECONCILER_PK, ROUTES, TOPICS, Record, codes

SIGNER = Signer(GUARD_SEED)


def _decision(offset: int) -> Decision:
    return Decision(
        decision_id=f"{offset:032x}",
        outcome="reject",
        reason="bad_signature",
        source=Coordinates(topic="agents.in", partition=0, offset=offset),
        decided_at=7,
    )


def _batches(sizes: list[int], *, chain: str = "c0", links: dict[int, bytes] | None = None) -> list[list[Record]]:
    """Audit records of consecutive batches on one chain; `links` overrides
    the head a batch links to (by batch number)."""
    out: list[list[Record]] = []
    tip: ChainTip | None = None
    offset = 0
    for n, size in enumerate(sizes):
        ds = [_decision(offset + i) for i in range(size)]
        offset += size
        bodies = [decision_bytes(d) for d in ds]
        atts = [attest(d, b, GUARD_ID) for d, b in zip(ds, bodies, strict=True)]
        if links and n in links and tip is not None:
            tip = ChainTip(tip.seq, links[n])
        tree = seal_batch(SIGNER, atts, guard=GUARD_ID, chain=chain, tip=tip, sealed_at=7)
        tip = ChainTip(0 if tip is None else tip.seq + 1, tree.head)
        records = []
        for i, (d, b, a) in enumerate(zip(ds, bodies, atts, strict=True)):
            _, audit = outputs_for(
                Sealed(d, b, a, b"", BatchProof(tree.head, tree.seal, tree.inclusion(i))), b"k", b"", [], DOWNSTREAM, TOPICS, 1 << 20
            )
            assert audit.value is not None
            records.append((audit.value, audit.headers))
        out.append(records)
    return out


def _report(records: list[Record]):  # type: ignore[no-untyped-def]
    led = Ledger(routes=dict(ROUTES))
    cache = HeadCache()
    for value, headers in records:
        apply_audit(led, check_audit_record(value, headers, GUARD_PK, RECONCILER_PK, heads=cache))
    return judge(led)


def test_a_complete_chain_passes_in_any_order_and_reports_its_tip() -> None:
    records = [r for b in _batches([3, 1, 4]) for r in b]
    report = _report(records)
    assert report.ok and report.summary.decisions == 8
    (chain,) = report.chains
    assert (chain.heads, chain.leaves, chain.first_seq, chain.tip_seq) == (3, 8, 0, 2)
    shuffled = list(records) + records[:2]  # re-emissions count once
    random.Random(4).shuffle(shuffled)
    assert _report(shuffled) == report


def test_a_removed_audit_record_is_a_missing_leaf() -> None:
    batches = _batches([3, 2])
    del batches[0][1]
    report = _report([r for b in batches for r in b])
    assert codes(report) == ["leaf_missing"] and "leaves 1)" in report.violations[0].detail


def test_a_removed_batch_is_a_gap_and_a_removed_first_batch_too() -> None:
    batches = _batches([2, 2, 2])
    assert codes(_report([*batches[0], *batches[2]])) == ["chain_gap"]
    assert codes(_report([*batches[1], *batches[2]])) == ["chain_gap"]
    assert _report([*batches[0], *batches[1]]).ok  # a truncated end: only the kept tip shows it


def test_a_head_that_does_not_name_its_predecessor_breaks_the_chain() -> None:
    batches = _batches([1, 1], links={1: b"not the previous head"})
    assert codes(_report([r for b in batches for r in b])) == ["chain_broken"]


def test_two_heads_for_one_seq_are_a_fork() -> None:
    a = _batches([2, 1])
    b = _batches([2, 3])  # same chain id, same seq 1, another tree
    report = _report([*a[0], *a[1], *b[1]])
    assert "chain_fork" in codes(report)


def test_a_proof_that_fails_under_a_good_head_is_bad_inclusion() -> None:
    (batch,) = _batches([3])
    value, headers = batch[0]
    tampered = [(k, v if k != "busguard-inclusion" else (2).to_bytes(4, "big") + v[4:]) for k, v in headers]
    report = _report([(value, tampered), *batch[1:]])
    assert sorted(codes(report)) == ["bad_inclusion", "leaf_missing"]


def test_chains_are_separate_and_heads_seen_only_downstream_still_need_their_records() -> None:
    one, two = _batches([2], chain="aa"), _batches([1], chain="bb")
    assert len(_report([*one[0], *two[0]]).chains) == 2
    # a forward's head counts as seen; with no audit record for it, its leaves are missing
    led = Ledger(routes=dict(ROUTES))
    (value, headers) = one[0][0]
    checked = check_audit_record(value, headers, GUARD_PK)
    assert checked.opened is not None
    note_head(led, checked.opened, leaf=False)
    assert codes(judge(led)) == ["leaf_missing"]
    assert check_forwarded(DOWNSTREAM, b"", headers, GUARD_PK).opened is None  # not a forward: refused before its head counts


def test_head_digest_links_what_the_report_prints() -> None:
    batches = _batches([1])
    (chain,) = _report(batches[0]).chains
    head = dict(batches[0][0][1])["busguard-tree-head"]
    assert chain.tip_sha256 == head_digest(head)


def test_the_chain_facts_survive_a_checkpoint_and_the_table_prints_the_tip() -> None:
    import msgspec

    from busguard.audit.report import render_table

    batches = _batches([3, 2])
    led = Ledger(routes=dict(ROUTES))
    for value, headers in [*batches[0], batches[1][0]]:
        apply_audit(led, check_audit_record(value, headers, GUARD_PK))
    resumed = msgspec.json.decode(msgspec.json.encode(led), type=Ledger)
    assert judge(resumed) == judge(led) and codes(judge(led)) == ["leaf_missing"]
    value, headers = batches[1][1]
    apply_audit(resumed, check_audit_record(value, headers, GUARD_PK))  # the rest of the log, read later
    report = judge(resumed)
    assert report.ok and report.chains[0].tip_sha256 in render_table(report)
