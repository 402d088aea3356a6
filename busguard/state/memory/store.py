"""In-memory store for tests and throwaway runs: same semantics, no durability."""

from __future__ import annotations

import threading

from busguard.protocol.records import Coordinates, Decision, TaskEntry
from busguard.state.keys import KeySet, Partition, PolicyKey, SourceKey, source_key
from busguard.state.snapshot import Snapshot, StoredHead
from busguard.state.store import BatchFn, rearmed
from busguard.state.writes import PolicyRecord, WindowRecord


class MemoryStore:
    """`genesis=False` (the default) is a store that may have replaced a lost
    one, fenced from its creation; a store `busguard run` makes in memory is
    always that, since it is lost at every restart. `genesis=True` is a store
    whose caller vouches that no history exists (tests that start from
    nothing)."""

    def __init__(
        self,
        created_at: int = 0,
        *,
        genesis: bool = False,
        task_retention_ms: int = 7 * 86_400_000,
        decision_retention_ms: int = 7 * 86_400_000,
    ) -> None:
        self._created_at = created_at
        self._trusted_from: int | None = None if genesis else created_at
        self.genesis = genesis
        self._lock = threading.Lock()
        self.watermarks: dict[Partition, int] = {}
        self.decisions: dict[SourceKey, tuple[Decision, int]] = {}
        self.nonces: dict[tuple[str, str], int] = {}
        self.windows: dict[tuple[str, str], WindowRecord] = {}
        self.tasks: dict[tuple[str, str], tuple[TaskEntry, int]] = {}
        self.policy: dict[PolicyKey, PolicyRecord] = {}
        self.heads: dict[tuple[str, int], StoredHead] = {}
        self._tips: dict[str, int] = {}  # chain -> highest seq held
        self.decision_retention_ms = decision_retention_ms
        self.task_retention_ms = task_retention_ms

    @property
    def created(self) -> bool:
        return True  # lost at every exit, so every open creates it

    @property
    def created_at(self) -> int:
        return self._created_at

    @property
    def origin(self) -> str:
        return "genesis" if self.genesis else "created"

    def location(self) -> str | None:
        return None  # this process's memory: nowhere another process could look

    @property
    def trusted_from(self) -> int | None:
        return self._trusted_from

    def rearm(self, now_ms: int) -> int:
        with self._lock:
            self._trusted_from = rearmed(self._trusted_from, now_ms)
            return self._trusted_from

    def partition_watermarks(self) -> dict[Partition, int]:
        with self._lock:
            return dict(self.watermarks)

    def run_batch(self, keys: KeySet, now_ms: int, fn: BatchFn) -> None:
        with self._lock:
            snap = Snapshot(trusted_from=self._trusted_from)
            for sk in keys.sources:
                found = self.decisions.get(sk)
                if found is not None and found[1] > now_ms:
                    snap.decisions[sk] = found[0]
            snap.nonces = {k for k in keys.nonces if self.nonces.get(k, now_ms) > now_ms}
            for wk in keys.windows:
                w = self.windows.get(wk)
                if w is not None and w.expires_at > now_ms:
                    snap.windows[wk] = w.state
            for tk in keys.tasks:
                current = self.tasks.get(tk)
                if current is not None and current[1] > now_ms:
                    snap.tasks[tk] = current[0]
            for pk in keys.policy:
                row = self.policy.get(pk)
                if row is not None and row.expires_at > now_ms:
                    snap.policy[pk] = row.value
            chain = keys.chain
            tip = self._tips.get(chain) if chain is not None else None
            if chain is not None and tip is not None and (chain, tip) in self.heads:
                snap.tip = (tip, self.heads[(chain, tip)].head)
            if snap.decisions:
                snap.heads = [
                    h
                    for h in self.heads.values()
                    if h.sealed_at + self.decision_retention_ms > now_ms and any(map(h.covers, snap.decisions))
                ]
            writes = fn(snap)
            for h in writes.heads:
                if (h.chain, h.seq) in self.heads:
                    raise ValueError(f"batch seal chain {h.chain!r} already has a head {h.seq}: a chain never forks")
            marks = self.watermarks
            for part, offset in writes.watermarks().items():
                if marks.get(part, -1) < offset:
                    marks[part] = offset
            for sk, d in writes.decisions.items():
                self.decisions[sk] = (d, d.decided_at + self.decision_retention_ms)
            for nk, n in writes.nonces.items():
                self.nonces[nk] = n.expires_at
            self.windows.update(writes.windows)
            self.policy.update(writes.policy)
            for h in writes.heads:
                self.heads[(h.chain, h.seq)] = h
                self._tips[h.chain] = max(h.seq, self._tips.get(h.chain, -1))
            for tk, entry in writes.tasks.items():
                current = self.tasks.get(tk)
                if current is None or current[1] <= now_ms:
                    self.tasks[tk] = (entry, entry.admitted_at + self.task_retention_ms)

    def decision_at(self, source: Coordinates) -> Decision | None:
        found = self.decisions.get(source_key(source))
        return None if found is None else found[0]

    def task(self, kind: str, task_id: str, now_ms: int) -> TaskEntry | None:
        found = self.tasks.get((kind, task_id))
        return found[0] if found is not None and found[1] > now_ms else None

    def expire(self, now_ms: int) -> int:
        with self._lock:
            before = self._total()
            self.decisions = {k: v for k, v in self.decisions.items() if v[1] > now_ms}
            self.nonces = {k: v for k, v in self.nonces.items() if v > now_ms}
            self.windows = {k: v for k, v in self.windows.items() if v.expires_at > now_ms}
            self.tasks = {k: v for k, v in self.tasks.items() if v[1] > now_ms}
            self.policy = {k: v for k, v in self.policy.items() if v.expires_at > now_ms}
            self.heads = {k: h for k, h in self.heads.items() if h.sealed_at + self.decision_retention_ms > now_ms}
            self._tips = {c: seq for c, seq in self._tips.items() if (c, seq) in self.heads}
            return before - self._total()

    def _total(self) -> int:
        return len(self.decisions) + len(self.nonces) + len(self.windows) + len(self.tasks) + len(self.policy) + len(self.heads)

    def counts(self) -> dict[str, int]:
        return {
            "decisions": len(self.decisions),
            "nonces": len(self.nonces),
            "windows": len(self.windows),
            "tasks": len(self.tasks),
            "policy": len(self.policy),
        }

    def close(self) -> None:
        pass
