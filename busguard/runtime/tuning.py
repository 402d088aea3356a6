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
free space fragment inside the heap under steady load (measured with
`benchmarks/compare.py --soak`).
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


#: glibc's mallopt parameter number for M_ARENA_MAX (malloc.h)
_M_ARENA_MAX = -8


def tune_malloc(arenas: int = 2) -> None:
    """Allow at most `arenas` glibc malloc arenas.

    Why, measured with `compare.py --soak` (500 records/s, the store steady
    from 40 s) and glibc's `mallinfo2` read inside the guard: with glibc's
    defaults the free space inside the C heap grew from 2.6 to 12.5 MB in
    five minutes, a third of the RSS climb. Each thread that contends for
    the heap gets an arena of its own (the executor threads running SQLite,
    the verify and seal threads), and each keeps the holes its frees leave.
    With 2 arenas it grew from 2.4–3.0 to 6.6–7.5 MB in four minutes (9.7 MB
    with the defaults): a quarter less, a mitigation rather than a fix; the
    threads spend their time in libsodium and SQLite, not in malloc, and
    CPU per record did not move. (A fixed 256 KiB mmap
    threshold kept it at 2.8–4.2 MB, but cost 10–15 % more CPU per record
    at peak, large buffers then being mapped and faulted in every time, so
    it is not set.) Must run before those threads start (`tune_gc` calls it
    at process start); a no-op where the C library is not glibc; the
    environment's MALLOC_ARENA_MAX wins.
    """
    if os.environ.get("MALLOC_ARENA_MAX"):
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_ARENA_MAX, arenas)
