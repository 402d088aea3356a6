"""The `[award]` config section: the bounds the award policy puts on what senders can make it keep.

Both bounds are about other parties' input: without the horizon a call or
bid dated in the year 9999 pins its call's rows for millions of days; without
the per-bidder limit one agent takes every bid slot of someone else's call
(the call id is visible on the topic). docs/config.md documents the keys.
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

DAY_MS: Final = 86_400_000
#: Bids kept per call (protocol.md 15.2): an award names at most this many.
MAX_BIDS: Final = 64


class AwardConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """The `[award]` section (busguard/config.py embeds it)."""

    #: A call's `award_deadline` and a bid's `deadline` may be at most this far
    #: ahead of the guard's clock when they are decided (`award_deadline_too_far`).
    deadline_horizon_ms: Annotated[int, msgspec.Meta(ge=1, le=365 * DAY_MS)] = 30 * DAY_MS
    #: Bids one bidder (canonical principal) may hold on one call (`award_bidder_limit`).
    max_bids_per_bidder: Annotated[int, msgspec.Meta(ge=1, le=MAX_BIDS)] = 8


DEFAULT_LIMITS: Final = AwardConfig()
