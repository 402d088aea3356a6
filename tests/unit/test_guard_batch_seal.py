"""The guard's batch seal without Kafka: one head per batch, chained, every
output provable, and a re-delivered record re-emitted byte for byte (even in
another poll, after a restart, or under the other `[batch] seal` mode)."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from busguard.config import load_config
from busguard.protocol.attestation import HEADER_SEAL, HeadCache, open_sealed
from busguard.protocol.identity import agent_id_for_key
from busguard.protocol.keyfile import Identity
from busguard.protocol.registry import KeyRegistry
from busguard.protocol.signing import public_key_from_seed
from busguard.protocol.treehead import HEADER_TREE_HEAD, decode_head, head_digest
from busguard.runtime.guard import Guard
from busguard.runtime.outputs import Output
from busguard.runtime.watched import WatchedFile
from busguard.state.memory.store import MemoryStore
from busguard.state.store import StateStore

from .harness import NOW, Rec, agent, sender

SEED = hashlib.sha256(b"batch-seal-guard").digest()
KEY = public_key_from_seed(SEED)
IDENT = Identity(seed=SEED, public_key=KEY, agent_id=agent_id_for_key(KEY))


def _guard(tmp_path: Path, store: StateStore, mode: str = "batch") -> Guard:
    (tmp_path / "keys.toml").write_text(f'[[agent]]\nid = "{agent("planner")}"\n')
    (tmp_path / "busguard.toml").write_text(
        f'[[routes]]\nname = "r"\ninputs = ["in"]\ndownstream = "out"\n[ops]\nport = 0\n[batch]\nseal = "{mode}"\n'
    )
    cfg = load_config(tmp_path / "busguard.toml", env={})
    keys = WatchedFile(tmp_path / "keys.toml", KeyRegistry.load, what="key registry")
    return Guard(cfg, keys=keys, identity=IDENT, store=store, clock_ms=lambda: NOW)


def _records(offsets: range, partition: int = 0) -> list[Rec]:
    s = sender("planner")
    out = []
    for o in offsets:
        r = s.sign(kind="handoff", task_id=f"t{partition}-{o}", receiver=agent("executor"), payload=b"work %d" % o)
        out.append(Rec("in", partition, o, b"k", r.value, r.headers))
    return out


def _run(guard: Guard, records: list[Rec]) -> list[Output]:
    return asyncio.run(guard.process(records))


def test_one_head_per_batch_chained_and_every_output_proves_its_decision(tmp_path: Path, store: StateStore) -> None:
    guard = _guard(tmp_path, store)
    cache = HeadCache()
    heads = []
    for batch in (_records(range(0, 7)), _records(range(7, 10))):
        outputs = _run(guard, batch)
        assert len(outputs) == 2 * len(batch)  # a forward and an audit record each
        assert all(HEADER_SEAL not in dict(o.headers) for o in outputs)
        opened = [open_sealed(o.headers, KEY, cache) for o in outputs]
        assert len({o.head_raw for o in opened}) == 1
        assert sorted({o.index or 0 for o in opened}) == list(range(len(batch)))  # primary and audit share a leaf
        heads.append(opened[0].head_raw)
    h0, h1 = decode_head(heads[0]), decode_head(heads[1])  # type: ignore[arg-type]
    assert (h0.seq, h0.prev, h0.size) == (0, None, 7)
    assert (h1.seq, h1.prev, h1.size, h1.chain) == (1, head_digest(heads[0]), 3, h0.chain)  # type: ignore[arg-type]


def test_a_redelivered_record_is_re_emitted_byte_for_byte_in_another_poll_after_a_restart(tmp_path: Path, store: StateStore) -> None:
    recs = _records(range(0, 8))
    first = _run(_guard(tmp_path, store), recs[:6])
    restarted = _guard(tmp_path, store)  # a new process: a new chain
    # offsets 3..5 come back with new records 6..7, then 0..2 in a later poll
    again = _run(restarted, recs[3:8])
    late = _run(restarted, recs[0:3])
    old = [o for o in again + late if decode_head(dict(o.headers)[HEADER_TREE_HEAD]).size == 6]
    assert len(old) == 12 and all(o in first for o in old) and all(o in first for o in late)
    new = [o for o in again if o not in old]
    head = decode_head(dict(new[0].headers)[HEADER_TREE_HEAD])
    assert len(new) == 4 and head.seq == 0 and head.size == 2 and head.chain != decode_head(dict(old[0].headers)[HEADER_TREE_HEAD]).chain


def test_switching_modes_keeps_re_emissions_identical(tmp_path: Path, store: StateStore) -> None:
    recs = _records(range(0, 6))
    batch_sealed = _run(_guard(tmp_path, store, "batch"), recs[:3])
    record_sealed = _run(_guard(tmp_path, store, "record"), recs[3:])
    assert all(HEADER_SEAL in dict(o.headers) for o in record_sealed)
    assert _run(_guard(tmp_path, store, "record"), recs[:3]) == batch_sealed
    assert _run(_guard(tmp_path, store, "batch"), recs[3:]) == record_sealed


def test_record_mode_writes_no_head(tmp_path: Path) -> None:
    store = MemoryStore(created_at=NOW - 3_600_000, genesis=True)
    outputs = _run(_guard(tmp_path, store, "record"), _records(range(0, 4)))
    assert store.heads == {} and all(open_sealed(o.headers, KEY).head is None for o in outputs)


def test_the_sdk_opens_batch_sealed_forwards_checking_one_signature_per_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import busguard.protocol.attestation as attestation
    from busguard import HeadCache, open_admitted

    outputs = _run(_guard(tmp_path, MemoryStore(created_at=NOW - 3_600_000, genesis=True)), _records(range(0, 5)))
    forwards = [o for o in outputs if o.topic == "out"]
    calls = []
    real = attestation.verify_signature
    monkeypatch.setattr(attestation, "verify_signature", lambda *a: calls.append(1) or real(*a))
    heads = HeadCache()
    opened = [open_admitted(o.value, o.headers, KEY, agent("executor"), heads=heads) for o in forwards]
    assert [a.payload for a in opened] == [b"work %d" % i for i in range(5)] and len(calls) == 1
    with pytest.raises(attestation.AttestationError):  # the head proves this record, not another payload
        open_admitted(b"other", forwards[0].headers, KEY, agent("executor"), heads=heads)


def test_the_size_budget_bounds_every_batch_proof(tmp_path: Path) -> None:
    from busguard.runtime.batch_size import record_size
    from busguard.runtime.outputs import worst_proof

    outputs = _run(_guard(tmp_path, MemoryStore(created_at=NOW - 3_600_000, genesis=True)), _records(range(0, 9)))
    worst = record_size(None, None, worst_proof(IDENT.agent_id))
    for o in outputs:
        proof = [
            (k, v)
            for k, v in o.headers
            if k in ("busguard-decision-id", "busguard-attestation", "busguard-tree-head", "busguard-head-seal", "busguard-inclusion")
        ]
        assert len(proof) == 5 and record_size(None, None, proof) <= worst
