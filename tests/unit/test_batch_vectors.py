"""tests/vectors/batches.json: fetched bytes through aiokafka's fetcher with
busguard's tolerant hook; every offset decodes to what the vector says, and
the generator reproduces the file byte for byte."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiokafka.consumer import fetcher
from aiokafka.structs import TopicPartition

from busguard.runtime.records import RAW_KEYS, Undecodable, consumer_options

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
DOC = json.loads((VECTORS / "batches.json").read_text(encoding="ascii"))


@pytest.mark.parametrize("vec", DOC["vectors"], ids=lambda v: v["name"])
def test_batch_vector(vec: Any) -> None:
    consumer_options()
    raw = bytes.fromhex(vec["fetch_hex"])
    records = fetcher.PartitionRecords(TopicPartition(DOC["topic"], DOC["partition"]), fetcher.MemoryRecords(raw), None, vec["fetch_offset"], RAW_KEYS, None, True, 0)
    got = [[i.offset, i.reason if type(i) is Undecodable else "record"] for i in records]
    assert got == vec["expect"]


def test_the_vectors_cover_every_decode_reason() -> None:
    assert {what for v in DOC["vectors"] for _, what in v["expect"]} == {"record", "undecodable_header", "undecodable_record", "undecodable_batch"}
    assert len(DOC["vectors"]) >= 18


def test_generator_reproduces_batches_json(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(VECTORS / "generate_batches.py"), "--out", str(tmp_path)], check=True)
    assert (tmp_path / "batches.json").read_bytes() == (VECTORS / "batches.json").read_bytes()
