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

The C heap has settings of its own (`limit_malloc_arenas`,
`release_free_heap`): with them the guard's RSS stays flat once its state
has reached its retention steady state (issue 13, `compare.py --soak`).
"""

from __future__ import annotations

import ctypes
import gc
import os
from collections.abc import Callable


def tune_gc(gen0: int = 50_000) -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(gen0, 20, 50)
    limit_malloc_arenas()


#: glibc's mallopt parameter number for M_ARENA_MAX (malloc.h)
_M_ARENA_MAX = -8


def limit_malloc_arenas(arenas: int = 2) -> None:
    """At most `arenas` glibc malloc arenas for the whole process.

    glibc gives threads that contend for the heap arenas of their own (up to
    8 per core). The guard's C-level allocations (SQLite's page cache and
    statements on the executor threads, PyNaCl on the verify and seal
    threads, zstd on the event loop) then spread over a dozen arenas, each
    keeping the holes its frees leave: in `compare.py --soak` the free
    space inside the arenas grew from 3 to 12 MB over five minutes while
    the memory in use stayed flat. Two arenas keep that fragmentation
    bounded; the threads spend their time in libsodium and SQLite, not in
    malloc, so they rarely wait for an arena. Must run before those threads
    start (it is called from `tune_gc`, at process start); a no-op where
    the C library is not glibc. The environment's MALLOC_ARENA_MAX, when
    set, wins.
    """
    if os.environ.get("MALLOC_ARENA_MAX"):
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_ARENA_MAX, arenas)


def _find_malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to call
        return None
    return trim


_malloc_trim = _find_malloc_trim()


def release_free_heap() -> None:
    """Hand the C heap's free pages back to the OS (glibc `malloc_trim`).

    The store's SQLite calls, the verifies and the seals run on several
    threads, and glibc gives each its own malloc arena; the page cache and
    the per-batch buffers they free leave holes in those arenas that glibc
    does not return by itself. Measured in `compare.py --soak`: the arenas'
    free space grew from 3 to 8 MB in three minutes while live memory
    stayed flat, and RSS with it. Called after every housekeeping, off the
    event loop; a no-op where the C library has no `malloc_trim`.
    """
    if _malloc_trim is not None:
        _malloc_trim(0)
