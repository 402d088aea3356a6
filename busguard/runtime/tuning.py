"""Interpreter settings for the long-running processes.

CPython's default generation-0 threshold (700 allocations) makes the cyclic
collector run several times per batch: each record allocates a few dozen
short-lived objects (structs, tuples, bytes), none of them cyclic. Measured
with benchmarks/admission_cost.py, that collector accounts for about a
third of admission time. Raising the threshold keeps collections to roughly
one per batch; `gc.freeze()` moves everything loaded at start-up (modules,
the key registry) out of the collector's view for good.
"""

from __future__ import annotations

import gc


def tune_gc(gen0: int = 50_000) -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(gen0, 20, 50)
