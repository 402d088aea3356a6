"""The targets `benchmarks/compare.py --check` holds a run to (issue 37,
which replaced issue 20's), apart from the run itself so they can be tested
on made-up results.

A target whose figure the run did not produce fails as "not measured":
a check that passes because its contender was left out would let a
regression through unseen (`--contenders busguard --check` must not pass).
A `--suite` run (what `make bench` runs) is judged phase by phase: its
throughput rounds, its steady 200 records/s and its half-peak rate.
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
    Target("cpu_ratio_quix", 0.8, False, "busguard's CPU per record / the Quix Streams stateful guard's", "busguard,quix"),
    Target(
        "floor_ratio",
        1.6,
        False,
        "busguard's CPU per record / (bare verify on one thread + the relay's CPU per record)",
        "busguard,verify_1t,relay",
    ),
)
#: Throughput with --preload N: the filled store against the empty one.
PRELOAD = (
    Target("ratio_preload", 0.9, True, "busguard on the preloaded store / on the empty one, records/s", "busguard,busguard_preload"),
)
#: --rate N: an agent-typical steady rate (issue 37 names 200/s). The added
#: latency is busguard's percentile minus the relay's in the same round
#: (same two hops, no work between).
RATE = (
    Target("cpu_ratio_quix", 1.0, False, "busguard's CPU per record / the Quix Streams stateful guard's", "busguard,quix"),
    Target("p50_over_relay_ms", 5.0, False, "busguard p50 minus the relay's p50, ms", "busguard,relay"),
    Target("p99_over_relay_ms", 10.0, False, "busguard p99 minus the relay's p99, ms", "busguard,relay"),
)
#: --rate auto: half of busguard's measured peak.
HALF_PEAK = (Target("p99_over_relay_ms", 50.0, False, "busguard p99 minus the relay's p99, ms", "busguard,relay"),)
#: --suite: each phase's result under its key, judged on that phase's targets.
SUITE = {"throughput": "throughput", "rate_200": "rate", "half_peak": "rate"}


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
        return HALF_PEAK if result.get("rate_kind") == "half_peak" else RATE
    if mode == "throughput" and result.get("preload"):
        return PRELOAD + tuple(t for t in THROUGHPUT if t.key in result)
    if mode == "throughput":
        return THROUGHPUT
    return ()


def check(mode: str, result: dict[str, Any]) -> list[str]:
    """The targets this run missed or did not measure, one line each."""
    if mode == "suite":
        failures = []
        for phase, phase_mode in SUITE.items():
            if not isinstance(result.get(phase), dict):
                failures.append(f"{phase}: not measured")
                continue
            failures += [f"{phase}: {why}" for why in check(phase_mode, result[phase])]
        return failures
    failures = [why for t in targets(mode, result) if (why := _held(result, t)) is not None]
    if mode == "soak":
        failures += _soak(result)
    return failures


def target_lines(mode: str, result: dict[str, Any]) -> list[str]:
    """One line per target of the run, for people: its value, bound and verdict."""
    if mode == "suite":
        return [
            f"{phase}: {line}"
            for phase, phase_mode in SUITE.items()
            if isinstance(result.get(phase), dict)
            for line in target_lines(phase_mode, result[phase])
        ]
    lines = []
    for t in targets(mode, result):
        why = _held(result, t)
        op = ">=" if t.at_least else "<="
        verdict = "met" if why is None else "not measured" if "not measured" in why else "MISSED"
        lines.append(f"{t.key} {result.get(t.key, '-')} (target {op} {t.bound}): {verdict}  [{t.meaning}]")
    return lines


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
