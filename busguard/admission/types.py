"""Values private to admission: its knobs and the state changes a decision asks for.

The records admission produces (`Decision`, `TaskEntry`) are wire schemas and
live in busguard.protocol.records; the state rows in busguard.state.writes.
`Effects` is `gc=False` for the reason protocol/records.py gives.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal

import msgspec

from busguard.admission.window import DEFAULT_WINDOW_SIZE
from busguard.protocol.records import TaskEntry
from busguard.state.writes import NonceRecord, PolicyRecord, WindowRecord

NonceScope = Literal["global", "principal"]


class AdmissionPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """The knobs of the pure core. Validated by busguard.config at load."""

    namespace: str = "busguard"
    max_age_ms: int = 300_000
    max_future_ms: int = 30_000
    nonce_retention_ms: int = 600_000
    nonce_scope: NonceScope = "global"
    window_size: int = DEFAULT_WINDOW_SIZE
    session_retention_ms: int = 7 * 24 * 3600 * 1000
    task_retention_ms: int = 7 * 24 * 3600 * 1000
    decision_retention_ms: int = 7 * 24 * 3600 * 1000
    #: Per-policy settings by name (a policy's own Struct), handed to
    #: every policy's `parse` in its `PolicyContext`; e.g. "compromise", "award"
    #: (busguard.config `Config.policy`).
    policy_settings: Mapping[str, object] = msgspec.field(default_factory=dict)


class Effects(msgspec.Struct, frozen=True, gc=False):  # positional on the hot path: keep the order
    """State changes one decision asks for; applied by the shell, atomically
    with the decision itself."""

    nonce: NonceRecord | None = None
    window: WindowRecord | None = None
    task: TaskEntry | None = None
    policy: tuple[PolicyRecord, ...] = ()


NO_EFFECTS: Final = Effects()
