"""Byte mutations for the differential tests of the TypeScript package: one
to three edits (a byte swapped, a run deleted, a token or a copied run
inserted, the tail cut, a byte inserted), so that both languages meet the
same broken input."""

from __future__ import annotations

import random
from collections.abc import Sequence


def mutate(rng: random.Random, raw: bytes, *, alphabet: bytes, tokens: Sequence[bytes]) -> bytes:
    out = bytearray(raw)
    for _ in range(rng.randint(1, 3)):
        at = rng.randint(0, len(out))
        op = rng.randrange(6)
        if op == 0 and out:
            out[min(at, len(out) - 1)] = rng.choice(alphabet)
        elif op == 1:
            del out[at : at + rng.randint(1, 8)]
        elif op == 2:
            out[at:at] = rng.choice(tokens)
        elif op == 3 and out:
            start = rng.randrange(len(out))
            out[at:at] = out[start : start + rng.randint(1, 24)]
        elif op == 4:
            del out[at:]
        else:
            out[at:at] = bytes([rng.choice(alphabet)])
    return bytes(out)
