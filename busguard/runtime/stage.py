"""What the guard and the reconciler share as stages of the batch loop.

Both read a topic through the crash-safe loop (runtime/loop.py), seal what
they write with their own key, read one clock, count reloads of the files
they follow, and stop on request. That part is here once, so the two
constructors differ only in what is theirs (the guard's store and key
registry; the reconciler's store, operators and the guard key it trusts).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from busguard.config import Config
from busguard.protocol.keyfile import Identity
from busguard.protocol.signing import Signer
from busguard.runtime.faults import Faults
from busguard.runtime.loop import BatchLoop, BeforeFirst
from busguard.runtime.ops import Metrics
from busguard.runtime.outputs import Output
from busguard.runtime.watched import WatchedFile


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class SealingStage(ABC):
    """Base of `Guard` and `Reconciler`: a `Stage` of the loop (runtime/loop.py)."""

    @abstractmethod
    async def process(self, records: Sequence[Any]) -> list[Output]:
        """Decide, persist, and return the outputs for one batch."""

    @abstractmethod
    async def housekeeping(self) -> None:
        """Periodic work between batches (expiry, gauges)."""

    def _start_stage(
        self,
        cfg: Config,
        identity: Identity,
        metrics: Metrics,
        clock_ms: Callable[[], int] | None,
        faults: Faults | None,
        *,
        topics: Sequence[str],
        group_id: str,
        role: str,
        before_first: BeforeFirst | None = None,
    ) -> None:
        """Set the shared attributes and build the loop; call it last in the
        subclass's constructor, once everything the loop's stage reads is set."""
        self.cfg = cfg
        self.identity = identity
        self.signer = Signer(identity.seed)
        self.metrics = metrics
        self.clock_ms = clock_ms or wall_clock_ms
        self.faults = faults or Faults(None)
        self.loop = BatchLoop(
            cfg, self, topics=topics, group_id=group_id, role=role, metrics=metrics, faults=self.faults, before_first=before_first
        )

    def _follow(self, watched: WatchedFile[Any] | None, what: str) -> None:
        """Count each reload of a followed file (ok / failed) under `what`."""
        if watched is not None:
            watched.on_reload = lambda result: self.metrics.reloads.labels(what, result).inc()

    def request_stop(self) -> None:
        """SIGTERM: finish the batch in hand, commit it, leave the group."""
        self.loop.request_stop()
