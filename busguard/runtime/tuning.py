"""Interpreter settings for the long-running processes.

CPython's default generation-0 threshold (700 allocations) makes the cyclic
collector run several times per batch: each record allocates a few dozen
short-lived objects. The per-record admission structs are already untracked
(`gc=False`, see busguard.admission.types), which took most of the
collector's cost away: benchmarks/admission_cost.py now measures the
default settings about 5% slower than these (it was a third before).
Raising the threshold keeps collections to roughly one per batch for what
is still tracked (aiokafka's records, lists, dicts); `gc.freeze()` moves
everything loaded at start-up (modules, the key registry) out of the
collector's view for good.
"""

from __future__ import annotations

import gc


def tune_gc(gen0: int = 50_000) -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(gen0, 20, 50)
