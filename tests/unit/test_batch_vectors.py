"""tests/vectors/batches.json: fetched bytes through aiokafka's fetcher with
busguard's tolerant hook; every item decodes to what the vector says (an
undecodable span as one item), each span's decision record is the one the
guard makes, and the generator reproduces the file byte for byte."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiokafka.consumer import fetcher
from aiokafka.structs import TopicPartition

from busguard.protocol.attestation import decision_bytes
from busguard.protocol.records import Decision, decision_id
from busguard.runtime.tolerant_fetch import RAW_KEYS, consumer_options
from busguard.runtime.undecodable import Undecodable

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
DOC = json.loads((VECTORS / "batches.json").read_text(encoding="ascii"))


@pytest.mark.parametrize("vec", DOC["vectors"], ids=lambda v: v["name"])
def test_batch_vector(vec: Any) -> None:
    consumer_options()
    raw = bytes.fromhex(vec["fetch_hex"])
    records = fetcher.PartitionRecords(
        TopicPartition(DOC["topic"], DOC["partition"]),
        fetcher.MemoryRecords(raw),
        vec.get("aborted"),
        vec["fetch_offset"],
        RAW_KEYS,
        None,
        True,
        fetcher.READ_COMMITTED if "aborted" in vec else 0,
    )
    got = [[i.offset, i.next_offset - 1, i.reason] if type(i) is Undecodable else [i.offset, i.offset, "record"] for i in records]
    assert got == vec["expect"]
    assert records.next_fetch_offset == vec.get("next", vec["expect"][-1][1] + 1 if vec["expect"] else vec["fetch_offset"])


def test_the_vectors_cover_every_decode_reason() -> None:
    assert DOC["format"] == "busguard.batches.v2"
    assert {what for v in DOC["vectors"] for *_, what in v["expect"]} == {
        "record",
        "undecodable_header",
        "undecodable_record",
        "undecodable_batch",
    }
    assert len(DOC["vectors"]) >= 21
    spans = {v["name"]: v["expect"] for v in DOC["vectors"] if v["name"].startswith("claimed_span_")}
    assert {n: e[0][1] - e[0][0] + 1 for n, e in spans.items()} == {
        "claimed_span_1": 1,
        "claimed_span_20000": 20_000,
        "claimed_span_2147483647": 2**31 - 1,
    }


@pytest.mark.parametrize("rec", DOC["span_decisions"], ids=lambda r: r["vector"])
def test_a_span_decision_record_names_its_whole_span(rec: Any) -> None:
    d = msgspec.json.decode(rec["decision"].encode(), type=Decision)
    assert (d.source.offset, d.covers_to, d.reason, d.outcome) == (rec["first_offset"], rec["last_offset"], "undecodable_batch", "reject")
    assert d.decision_id == decision_id(DOC["namespace"], d.source) and d.decided_at == DOC["decided_at"]
    assert decision_bytes(d) == rec["decision"].encode()  # re-encodes byte for byte, as a stored decision is re-emitted


def test_generator_reproduces_batches_json(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(VECTORS / "generate_batches.py"), "--out", str(tmp_path)], check=True)
    assert (tmp_path / "batches.json").read_bytes() == (VECTORS / "batches.json").read_bytes()
