"""Crash injection for the kill -9 tests: `BUSGUARD_FAULT=<point>:<n>`.

At the n-th batch that reaches <point> the process sends itself SIGKILL —
a real crash, no cleanup, no flush — so the tests exercise exactly what an
OOM kill or a pulled plug would. Points, in batch-protocol order:

    decided    inside the state transaction, before it commits
    persisted  after the state commit, before anything is produced
    produced   after every output is acknowledged, before offsets commit
               (with transactions: inside the open Kafka transaction)
    offsets    with transactions only: the input offsets added to the open
               transaction, before it commits
    committed  after the offset commit (the transaction's commit)
    settled    the reconciler only: a kind's settlement committed to the
               guard's store, before the reconciler's own store commits
               (busguard.reconcile.kinds)
"""

from __future__ import annotations

import os
import signal

POINTS = ("decided", "persisted", "produced", "offsets", "committed", "settled")


class Faults:
    def __init__(self, spec: str | None) -> None:
        self.point: str | None = None
        self.remaining = 0
        if spec:
            point, _, count = spec.partition(":")
            if point not in POINTS:
                raise ValueError(f"BUSGUARD_FAULT point {point!r}; allowed: {', '.join(POINTS)}")
            self.point, self.remaining = point, int(count or 1)

    @classmethod
    def from_env(cls) -> Faults:
        return cls(os.environ.get("BUSGUARD_FAULT"))

    def reached(self, point: str) -> None:
        if point != self.point:
            return
        self.remaining -= 1
        if self.remaining <= 0:
            os.kill(os.getpid(), signal.SIGKILL)
