"""`compare.py --check` holds a run to issue 20's targets, and a target whose
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

MET: dict[str, Any] = {"ratio_quix": 1.25, "ratio_naive": 1.3, "cpu_ratio_quix": 0.95, "ratio_relay": 0.2, "preload": None}


def test_throughput_all_targets_met_passes() -> None:
    assert cc.check("throughput", dict(MET)) == []


def test_ratio_naive_target_is_issue_20s_1_2() -> None:
    assert cc.check("throughput", {**MET, "ratio_naive": 1.21}) == []
    [failure] = cc.check("throughput", {**MET, "ratio_naive": 1.19})
    assert failure.startswith("ratio_naive 1.19 < 1.2")


def test_ratio_quix_below_target_fails() -> None:
    [failure] = cc.check("throughput", {**MET, "ratio_quix": 0.56})
    assert failure.startswith("ratio_quix 0.56 < 1.2")


def test_cpu_ratio_quix_above_one_fails() -> None:
    assert cc.check("throughput", {**MET, "cpu_ratio_quix": 1.0}) == []
    [failure] = cc.check("throughput", {**MET, "cpu_ratio_quix": 1.45})
    assert failure.startswith("cpu_ratio_quix 1.45 > 1.0")


def test_quix_not_run_fails_as_not_measured() -> None:
    """`--contenders naive,busguard --check`: no Quix figures, so both Quix targets fail."""
    result = {k: v for k, v in MET.items() if k not in ("ratio_quix", "cpu_ratio_quix")}
    failures = cc.check("throughput", result)
    assert [f.split()[0] for f in failures] == ["ratio_quix", "cpu_ratio_quix"]
    assert all("not measured" in f and "busguard,quix" in f for f in failures)


def test_naive_not_run_fails_as_not_measured() -> None:
    [failure] = cc.check("throughput", {**MET, "ratio_naive": None})
    assert failure.startswith("ratio_naive not measured")


@pytest.mark.parametrize("bad", [float("nan"), True, "1.5"])
def test_a_figure_that_is_not_a_number_is_not_measured(bad: object) -> None:
    [failure] = cc.check("throughput", {**MET, "ratio_quix": bad})
    assert failure.startswith("ratio_quix not measured")


def test_rate_target_is_p99_over_the_relay() -> None:
    """Issue 20: busguard's p99 at most 50 ms above the relay's at the same rate,
    whatever the absolute p99 (issue 13's 50 ms absolute bound is gone)."""
    assert cc.check("rate", {"p99_ms": 300.0, "relay_p99_ms": 260.0, "p99_over_relay_ms": 40.0}) == []
    [failure] = cc.check("rate", {"p99_ms": 45.0, "relay_p99_ms": 10.0, "p99_over_relay_ms": 60.5})
    assert failure.startswith("p99_over_relay_ms 60.5 > 50.0")


def test_rate_without_the_relay_fails_as_not_measured() -> None:
    [failure] = cc.check("rate", {"p99_ms": 30.0, "rate_per_s": 3000})
    assert failure.startswith("p99_over_relay_ms not measured") and "busguard,relay" in failure


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
