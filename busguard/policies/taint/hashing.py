"""How a node's expected input hash follows from its predecessors' outputs (condition 4).

The rule is text, not a binary layout, so that anyone can check a trace with
`printf ... | sha256sum`: the preimage is the ASCII lines

    busguard.taint.input.v1
    <external_input_hash, or "-" when the node took nothing from outside the trace>
    <output_hash of predecessors[0]>
    <output_hash of predecessors[1]>
    ...

each ending in "\\n", in the order of the node's `predecessors` array, and
the input hash is the lowercase hex SHA-256 of those bytes. Every line is a
fixed tag, "-" or 64 hex digits, so no two inputs share a preimage.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Final

INPUT_TAG: Final = "busguard.taint.input.v1"


def input_preimage(external_input_hash: str | None, predecessor_outputs: Sequence[str]) -> bytes:
    lines = [INPUT_TAG, "-" if external_input_hash is None else external_input_hash, *predecessor_outputs]
    return ("\n".join(lines) + "\n").encode("ascii")


def derive_input_hash(external_input_hash: str | None, predecessor_outputs: Sequence[str]) -> str:
    """The input hash a node must have recorded, given what fed it."""
    return hashlib.sha256(input_preimage(external_input_hash, predecessor_outputs)).hexdigest()
