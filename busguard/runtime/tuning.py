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

The C heap has settings of its own (`tune_malloc`): glibc's defaults let
free space fragment inside the heap under steady load (issue 13,
`compare.py --soak`).
"""

from __future__ import annotations

import ctypes
import gc
import os


def tune_gc(gen0: int = 50_000) -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(gen0, 20, 50)
    tune_malloc()


#: glibc's mallopt parameter numbers (malloc.h)
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
#: Blocks at least this large get their own mapping, returned to the OS on free.
MMAP_THRESHOLD = 256 * 1024


def tune_malloc(arenas: int = 2) -> None:
    """Fix glibc's mmap threshold and allow at most `arenas` malloc arenas.

    Why, measured with `compare.py --soak` (500 records/s, the store steady
    from 40 s) and glibc's `mallinfo2` read inside the guard: with glibc's
    defaults the free space inside the heap grew from 2.6 to 12.5 MB in
    five minutes, a third of the RSS climb. glibc raises its mmap threshold
    (from 128 KiB up to 32 MiB) each time a mapped block is freed, so after
    the first large fetch response or compression buffer, later ones of
    varying size are carved out of the heap and leave holes when freed; and
    each thread that contends for the heap gets an arena of its own (the
    executor, verify and seal threads). With a fixed 256 KiB threshold and
    2 arenas the heap's free space went from 2.8 to 4.2 MB over the same
    five minutes. (The rest of the climb is SQLite's page cache following
    the store file, +3 MB, and Python's own allocator, +3 MB; see the
    README's performance section.) Must run before those threads start
    (`tune_gc` calls it at process start); a no-op where the C library is
    not glibc. A setting given in the environment (MALLOC_MMAP_THRESHOLD_,
    MALLOC_ARENA_MAX) wins.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    if not os.environ.get("MALLOC_MMAP_THRESHOLD_"):
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    if not os.environ.get("MALLOC_ARENA_MAX"):
        mallopt(_M_ARENA_MAX, arenas)
