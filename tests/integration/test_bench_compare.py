"""`benchmarks/compare.py` runs end to end on a tiny workload (issue 13), on
Apache Kafka by default and on the embedded broker with `--broker embedded`
(issue 36 item 9).

Nothing here asserts a time: the run must finish, every contender must
have moved every record (compare.py raises when an output count is off),
and the JSON line must carry the stable keys with usable values, so the
figures `make bench` prints can be trusted to come from complete runs.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from busguard.devtools.broker import EmbeddedBroker

from .conftest import TopicFactory

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
KEYS = (
    "verify_1t_per_s",
    "verify_nt_per_s",
    "relay_per_s",
    "naive_per_s",
    "busguard_per_s",
    "ratio_naive",
    "ratio_relay",
    "verify_1t_cpu_us_per_record",
    "floor_ratio",
    "p50_ms",
    "p99_ms",
    "rss_mb",
)


def test_compare_smoke(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "compare.py"), "--records", "200", "--rounds", "1", "--keep", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["broker"].startswith("Apache Kafka 4.")  # the default broker
    # busguard ran with the settings Apache Kafka accepts and a production deployment gets
    (guard_dir,) = sorted((tmp_path / "runs").glob("run*-busguard"))
    config = (guard_dir / "busguard.toml").read_text()
    assert "idempotence = true" in config and "session_timeout_ms = 10000" in config
    for k in KEYS:
        assert isinstance(result[k], (int, float)) and result[k] > 0, (k, result.get(k))
    assert result["records"] == 200 and result["duplicates"] > 0
    # The ratio is the per-round one, and with one round it is exactly the quotient.
    runs = result["runs"]
    assert result["ratio_naive"] == round(runs["busguard"][0]["per_s"] / runs["naive"][0]["per_s"], 3)
    # busguard ran as its own process from a config, with SQLite state and audit output.
    run_dirs = sorted((tmp_path / "runs").glob("run*-busguard"))
    assert len(run_dirs) == 1 and (run_dirs[0] / "busguard.toml").is_file()
    assert 'audit = "' in (run_dirs[0] / "busguard.toml").read_text()
    # The table for people precedes the JSON line and names every contender.
    for name in ("verify_1t", "verify_nt", "relay", "naive", "busguard", "ratio_naive"):
        assert name in proc.stdout


def test_compare_runs_busguard_on_rocksdb_beside_sqlite(tmp_path: Path) -> None:
    """`busguard_rocksdb`: the same guard on the RocksDB backend in the same round, with its ratios."""
    argv = [sys.executable, str(REPO / "benchmarks" / "compare.py"), "--broker", "embedded", "--records", "200", "--rounds", "1"]
    proc = subprocess.run(
        [*argv, "--contenders", "busguard,busguard_rocksdb", "--keep", str(tmp_path / "runs")], capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    runs = result["runs"]
    assert result["ratio_rocksdb"] == round(runs["busguard_rocksdb"][0]["per_s"] / runs["busguard"][0]["per_s"], 3)
    assert result["cpu_ratio_rocksdb"] > 0 and result["state_backend"] == "sqlite" and result["broker"] == "tansu (embedded)"
    (rocks,) = sorted((tmp_path / "runs").glob("run*-busguard_rocksdb"))
    assert 'backend = "rocksdb"' in (rocks / "busguard.toml").read_text() and (rocks / "state.rocksdb" / "CURRENT").is_file()
    (sqlite,) = sorted((tmp_path / "runs").glob("run*-busguard"))
    assert 'backend = "sqlite"' in (sqlite / "busguard.toml").read_text()


def test_compare_runs_batch_audit_records_beside_per_record_ones(tmp_path: Path) -> None:
    """`busguard_auditbatch`: batch audit records in the same round, every input's decision counted from their entries."""
    argv = [sys.executable, str(REPO / "benchmarks" / "compare.py"), "--broker", "embedded", "--records", "200", "--rounds", "1"]
    proc = subprocess.run(
        [*argv, "--contenders", "busguard,busguard_auditbatch", "--keep", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    runs = result["runs"]
    assert result["ratio_auditbatch"] == round(runs["busguard_auditbatch"][0]["per_s"] / runs["busguard"][0]["per_s"], 3)
    assert result["cpu_ratio_auditbatch"] > 0 and result["audit"] == "record"
    (batched,) = sorted((tmp_path / "runs").glob("run*-busguard_auditbatch"))
    assert 'audit = "batch"' in (batched / "busguard.toml").read_text()
    (plain,) = sorted((tmp_path / "runs").glob("run*-busguard"))
    assert 'audit = "batch"' not in (plain / "busguard.toml").read_text()


def test_compare_rate_with_the_broker_floor(tmp_path: Path) -> None:
    """--rate with the `direct` contender (nothing between producer and
    reader): the broker's own latency, beside busguard's, in one run."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "compare.py"), "--rate", "300", "--duration", "2", "--contenders", "direct,busguard"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["load_linger_ms"] == 5
    for c in ("direct", "busguard"):
        run = result["runs"][c][0]
        assert run["exit"] == 0 and run["p99_ms"] >= run["p50_ms"] > 0, (c, run)
    # every record read back, each once: the direct reader counts the inputs themselves
    assert result["direct_per_s"] > 0 and result["p99_ms"] == result["busguard_p99_ms"]


def test_suite_runs_every_phase_on_apache_kafka_and_check_fails_on_what_it_did_not_measure() -> None:
    """`make bench`'s mode, cut down: burst, 200 records/s and half of the
    peak, each judged on its targets; without Quix and bare verify those
    targets are "not measured", so --check fails (a target never passes unseen)."""
    argv = [sys.executable, str(REPO / "benchmarks" / "compare.py"), "--suite", "--records", "200", "--rounds", "1"]
    proc = subprocess.run(
        [*argv, "--duration", "1", "--contenders", "relay,busguard", "--check"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["mode"] == "suite" and result["broker"].startswith("Apache Kafka 4.")
    assert result["rate_200"]["rate_per_s"] == 200 and result["rate_200"]["rate_kind"] == "fixed"
    half = result["half_peak"]
    assert half["rate_kind"] == "half_peak" and half["peak_per_s"] == round(result["throughput"]["busguard_per_s"])
    for phase in ("rate_200", "half_peak"):
        for c in ("relay", "busguard"):
            [run] = result[phase]["runs"][c]
            assert run["exit"] == 0 and run["p99_ms"] >= run["p50_ms"] > 0, (phase, c, run)
        assert result[phase]["p50_over_relay_ms"] == result[phase]["busguard_p50_over_relay_ms"]
    failed = [line for line in proc.stderr.splitlines() if line.startswith("check failed: ")]
    assert "check failed: throughput: ratio_quix not measured" in " ".join(failed)
    assert any(f.startswith("check failed: throughput: floor_ratio not measured") for f in failed)
    assert any(f.startswith("check failed: rate_200: cpu_ratio_quix not measured") for f in failed)
    assert "targets (issue 37):" in proc.stdout and "half_peak: p99_over_relay_ms" in proc.stdout


async def test_naive_guard_forwards_only_verified_records(
    broker: EmbeddedBroker, topic_factory: TopicFactory, group_id: str, tmp_path: Path
) -> None:
    """The hand-written guard the benchmark compares against really verifies:
    a record whose payload was changed, or whose signature is another
    record's, is dropped; the valid ones are forwarded with their headers."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    from busguard.protocol.keyfile import new_identity
    from busguard.sdk.sender import Sender

    src, dst = await topic_factory("in", partitions=1), await topic_factory("out", partitions=1)
    ident = new_identity()
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({ident.agent_id: ident.public_key.hex()}))
    sender = Sender(ident.seed)
    good = [sender.sign(kind="handoff", task_id=f"t{i}", receiver="r", payload=b'{"n":%d}' % i) for i in range(3)]
    tampered_payload = (b'{"n":99}', good[0].headers)
    swapped_signature = (good[1].value, [good[1].headers[0], good[2].headers[1]])
    inputs = [
        (good[0].value, good[0].headers),
        tampered_payload,
        (good[1].value, good[1].headers),
        swapped_signature,
        (good[2].value, good[2].headers),
    ]

    proc = subprocess.Popen(
        [sys.executable, str(REPO / "benchmarks" / "naive_guard.py"), broker.bootstrap, group_id, str(keys), f"{src}={dst}"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False, acks="all")
        await producer.start()
        try:
            for value, headers in inputs:
                await (await producer.send(src, value, headers=headers))
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(dst, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        got: list[Any] = []
        try:
            for _ in range(60):
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got.extend(records)
                if len(got) >= 3:
                    break
            for records in (await consumer.getmany(timeout_ms=1000)).values():  # nothing more may come
                got.extend(records)
        finally:
            await consumer.stop()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert [r.value for r in got] == [g.value for g in good]
    assert [list(r.headers) for r in got] == [g.headers for g in good]
    assert json.loads(out.strip().splitlines()[-1]) == {"dropped": 2}
