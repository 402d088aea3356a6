"""The targets `benchmarks/compare.py --check` holds a run to (issue 20),
apart from the run itself so they can be tested on made-up results.

A target whose figure the run did not produce fails as "not measured":
a check that passes because its contender was left out would let a
regression through unseen (`--contenders busguard --check` must not pass).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Target:
    key: str  # the result's key
    bound: float
    at_least: bool  # True: key >= bound; False: key <= bound
    meaning: str
    needs: str  # the contenders whose runs produce the key


#: Throughput mode (a burst of --records, interleaved rounds).
THROUGHPUT = (
    Target("ratio_quix", 1.2, True, "busguard / Quix Streams stateful guard, records/s", "busguard,quix"),
    Target("ratio_naive", 1.2, True, "busguard / hand-written guard, records/s", "busguard,naive"),
    Target("cpu_ratio_quix", 1.0, False, "busguard's CPU per record / the Quix Streams stateful guard's", "busguard,quix"),
)
#: Throughput with --preload N: the filled store against the empty one.
PRELOAD = (
    Target("ratio_preload", 0.9, True, "busguard on the preloaded store / on the empty one, records/s", "busguard,busguard_preload"),
)
#: --rate: busguard's p99 above the relay's at the same rate (same two hops, no work between).
RATE = (Target("p99_over_relay_ms", 50.0, False, "busguard p99 minus the relay's p99, ms", "busguard,relay"),)


def _held(result: dict[str, Any], t: Target) -> str | None:
    """None if the target holds, else why not."""
    value = result.get(t.key)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:  # missing, or NaN
        return f"{t.key} not measured ({t.meaning}): needs --contenders including {t.needs}"
    if t.at_least and value < t.bound:
        return f"{t.key} {value} < {t.bound} ({t.meaning})"
    if not t.at_least and value > t.bound:
        return f"{t.key} {value} > {t.bound} ({t.meaning})"
    return None


def targets(mode: str, result: dict[str, Any]) -> tuple[Target, ...]:
    """The mode's targets. A preload run is judged on the store's scale
    target; the side-by-side ratios are judged too when it measured them."""
    if mode == "rate":
        return RATE
    if mode == "throughput" and result.get("preload"):
        return PRELOAD + tuple(t for t in THROUGHPUT if t.key in result)
    if mode == "throughput":
        return THROUGHPUT
    return ()


def check(mode: str, result: dict[str, Any]) -> list[str]:
    """The targets this run missed or did not measure, one line each."""
    failures = [why for t in targets(mode, result) if (why := _held(result, t)) is not None]
    if mode == "soak":
        failures += _soak(result)
    return failures


def _soak(result: dict[str, Any]) -> list[str]:
    failures = []
    if result.get("rss_mb") is None:
        failures.append("no RSS samples in the steady window")
    if result.get("rss_dev_pct") is not None and result["rss_dev_pct"] > 10:
        failures.append(f"rss_dev_pct {result['rss_dev_pct']} > 10 once steady")
    if any((result.get(f"{t}_dev_pct") or 0) > 10 for t in ("nonces", "tasks", "decisions")):
        failures.append(f"state rows moved more than 10 % once 'steady' (nonces {result.get('nonces_dev_pct')} %): not a steady state")
    if result.get("rss_drift_pct") is not None and abs(result["rss_drift_pct"]) > 10:
        failures.append(f"rss_drift_pct {result['rss_drift_pct']}: RSS moved more than 10 % from the first steady sample to the last")
    return failures
