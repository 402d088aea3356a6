"""`compare.py --check` holds a run to issue 37's targets, and a target whose
contender did not run fails as "not measured" instead of passing unseen.

The check is judged on made-up result dicts (no broker, no timing): the
figures are the JSON keys compare.py writes. The contender selection is
judged in a subprocess with quixstreams hidden, as on a plain `make test`
install without the bench extra.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compare_check", BENCH / "compare_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


cc = _load()

MET: dict[str, Any] = {
    "ratio_quix": 1.25,
    "ratio_naive": 0.9,
    "cpu_ratio_quix": 0.75,
    "floor_ratio": 1.5,
    "ratio_relay": 0.2,
    "preload": None,
}
AGENT: dict[str, Any] = {"rate_kind": "fixed", "cpu_ratio_quix": 0.9, "p50_over_relay_ms": 4.0, "p99_over_relay_ms": 9.0}
HALF: dict[str, Any] = {"rate_kind": "half_peak", "p99_over_relay_ms": 40.0}


def test_throughput_all_targets_met_passes() -> None:
    assert cc.check("throughput", dict(MET)) == []


def test_the_hand_written_guard_is_reported_not_a_target() -> None:
    """Issue 37's targets replaced issue 20's: ratio_naive is printed, not judged."""
    assert cc.check("throughput", {**MET, "ratio_naive": 0.5}) == []
    assert cc.check("throughput", {k: v for k, v in MET.items() if k != "ratio_naive"}) == []


def test_ratio_quix_below_target_fails() -> None:
    [failure] = cc.check("throughput", {**MET, "ratio_quix": 0.56})
    assert failure.startswith("ratio_quix 0.56 < 1.2")


def test_cpu_ratio_quix_above_0_8_fails() -> None:
    assert cc.check("throughput", {**MET, "cpu_ratio_quix": 0.8}) == []
    [failure] = cc.check("throughput", {**MET, "cpu_ratio_quix": 0.95})
    assert failure.startswith("cpu_ratio_quix 0.95 > 0.8")


def test_floor_ratio_above_1_6_fails_and_needs_verify_and_the_relay() -> None:
    assert cc.check("throughput", {**MET, "floor_ratio": 1.6}) == []
    [failure] = cc.check("throughput", {**MET, "floor_ratio": 2.1})
    assert failure.startswith("floor_ratio 2.1 > 1.6")
    [missing] = cc.check("throughput", {**MET, "floor_ratio": None})
    assert missing.startswith("floor_ratio not measured") and "busguard,verify_1t,relay" in missing


def test_quix_not_run_fails_as_not_measured() -> None:
    """`--contenders naive,busguard --check`: no Quix figures, so both Quix targets fail."""
    result = {k: v for k, v in MET.items() if k not in ("ratio_quix", "cpu_ratio_quix")}
    failures = cc.check("throughput", result)
    assert [f.split()[0] for f in failures] == ["ratio_quix", "cpu_ratio_quix"]
    assert all("not measured" in f and "busguard,quix" in f for f in failures)


@pytest.mark.parametrize("bad", [float("nan"), True, "1.5"])
def test_a_figure_that_is_not_a_number_is_not_measured(bad: object) -> None:
    [failure] = cc.check("throughput", {**MET, "ratio_quix": bad})
    assert failure.startswith("ratio_quix not measured")


def test_agent_rate_targets_cpu_and_latency_added_over_the_relay() -> None:
    """Issue 37 at 200/s: CPU per record <= the Quix guard's, p50 added <= 5 ms, p99 added <= 10 ms."""
    assert cc.check("rate", dict(AGENT)) == []
    [cpu] = cc.check("rate", {**AGENT, "cpu_ratio_quix": 3.9})
    assert cpu.startswith("cpu_ratio_quix 3.9 > 1.0")
    [p50] = cc.check("rate", {**AGENT, "p50_over_relay_ms": 10.0})
    assert p50.startswith("p50_over_relay_ms 10.0 > 5.0")
    [p99] = cc.check("rate", {**AGENT, "p99_over_relay_ms": 19.2})
    assert p99.startswith("p99_over_relay_ms 19.2 > 10.0")


def test_half_peak_target_is_p99_over_the_relay() -> None:
    """At half the peak: busguard's p99 at most 50 ms above the relay's, whatever the absolute p99."""
    assert cc.check("rate", {**HALF, "p99_ms": 300.0}) == []
    [failure] = cc.check("rate", {**HALF, "p99_over_relay_ms": 60.5})
    assert failure.startswith("p99_over_relay_ms 60.5 > 50.0")


def test_rate_without_the_relay_or_quix_fails_as_not_measured() -> None:
    failures = cc.check("rate", {"rate_kind": "fixed", "p99_ms": 30.0, "rate_per_s": 200})
    assert [f.split()[0] for f in failures] == ["cpu_ratio_quix", "p50_over_relay_ms", "p99_over_relay_ms"]
    assert all("not measured" in f for f in failures)


def test_suite_is_judged_phase_by_phase_and_a_missing_phase_fails() -> None:
    suite = {"throughput": dict(MET), "rate_200": dict(AGENT), "half_peak": dict(HALF)}
    assert cc.check("suite", suite) == []
    [failure] = cc.check("suite", {**suite, "rate_200": {**AGENT, "p99_over_relay_ms": 19.0}})
    assert failure.startswith("rate_200: p99_over_relay_ms 19.0 > 10.0")
    [missing] = cc.check("suite", {k: v for k, v in suite.items() if k != "half_peak"})
    assert missing == "half_peak: not measured"
    lines = cc.target_lines("suite", {**suite, "throughput": {**MET, "floor_ratio": 2.0}})
    assert len(lines) == 3 + 3 + 1
    assert any(line.startswith("throughput: floor_ratio 2.0 (target <= 1.6): MISSED") for line in lines)
    assert sum(line.endswith("]") and ": met" in line for line in lines) == 6


def test_preload_run_is_judged_on_the_store_and_must_measure_it() -> None:
    base = {"preload": 1_000_000}
    assert cc.check("throughput", {**base, "ratio_preload": 0.93}) == []
    [low] = cc.check("throughput", {**base, "ratio_preload": 0.85})
    assert low.startswith("ratio_preload 0.85 < 0.9")
    [missing] = cc.check("throughput", base)
    assert missing.startswith("ratio_preload not measured")
    # side-by-side figures a preload run did measure are held to their targets too
    [quix] = cc.check("throughput", {**base, "ratio_preload": 0.93, "ratio_quix": 0.7})
    assert quix.startswith("ratio_quix 0.7 < 1.2")


def _parse(*argv: str) -> subprocess.CompletedProcess[str]:
    """compare.parse_args in a process where quixstreams cannot be imported."""
    code = (
        "import sys; sys.modules['quixstreams'] = None; sys.path.insert(0, sys.argv[1]); import compare; "
        "a = compare.parse_args(sys.argv[2:]); print(','.join(a.contender_list)); print(','.join(a.not_run))"
    )
    return subprocess.run([sys.executable, "-c", code, str(BENCH), *argv], capture_output=True, text=True, timeout=120)


def test_selecting_quix_without_the_bench_extra_says_how_to_install_it() -> None:
    proc = _parse("--contenders", "busguard,quix")
    assert proc.returncode == 2
    assert "quixstreams is not installed" in proc.stderr and "make bench" in proc.stderr and "pip install '.[bench]'" in proc.stderr


def test_defaults_without_the_bench_extra_leave_quix_out_and_say_so() -> None:
    proc = _parse()
    assert proc.returncode == 0, proc.stderr
    ran, not_run = proc.stdout.splitlines()[-2:]
    assert ran.split(",") == ["verify_1t", "verify_nt", "relay", "naive", "busguard"]
    assert not_run.split(",") == ["quix", "quix_stateless"]
    proc = _parse("--rate", "auto")
    assert proc.stdout.splitlines()[-2:] == ["relay,busguard", "quix"]


def test_suite_leaves_quix_stateless_out_and_refuses_a_rate() -> None:
    proc = _parse("--suite")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-2:] == ["verify_1t,verify_nt,relay,naive,busguard", "quix"]
    proc = _parse("--suite", "--rate", "200")
    assert proc.returncode == 2 and "--suite runs its own rates" in proc.stderr


def test_the_broker_is_apache_kafka_unless_told() -> None:
    code = "import sys; sys.path.insert(0, sys.argv[1]); import compare; print(compare.parse_args(sys.argv[2:]).broker)"
    run = [sys.executable, "-c", code, str(BENCH)]
    assert subprocess.run(run, capture_output=True, text=True, timeout=120).stdout.split() == ["kafka"]
    assert subprocess.run([*run, "--broker", "embedded"], capture_output=True, text=True, timeout=120).stdout.split() == ["embedded"]
