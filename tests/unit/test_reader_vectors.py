"""tests/vectors/readers/: busguard's kind readers say what each case expects,
and the generator reproduces the committed file byte for byte (the
TypeScript SDK's readers are judged on the same file: test_ts_vectors.py)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.vectors.readers import generate_award, generate_compromise
from tests.vectors.readers.generate import verdict

HERE = Path(__file__).resolve().parents[1] / "vectors" / "readers"
DOC = json.loads((HERE / "taint-plan.json").read_text(encoding="utf-8"))
AWARD = json.loads((HERE / "award.json").read_text(encoding="utf-8"))
HANDOFF = json.loads((HERE / "compromise-handoff.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("vec", DOC["vectors"], ids=lambda v: v["name"])
def test_the_taint_plan_reader_says_what_the_vector_expects(vec: Any) -> None:
    case = {
        "value": base64.b64decode(vec["value_b64"]),
        "payload_hash": vec["payload_hash"],
        "task_id": vec["task_id"],
        "annotations": vec["annotations"],
    }
    assert verdict(case) == vec["expect"]


def test_the_vectors_hold_genuine_plans_and_every_refusal() -> None:
    expects = [v["expect"] for v in DOC["vectors"]]
    assert sum(e != "unreadable" for e in expects) == 2 and expects.count("unreadable") == len(expects) - 2


@pytest.mark.parametrize("vec", AWARD["vectors"], ids=lambda v: v["name"])
def test_the_award_readers_say_what_the_vector_expects(vec: Any) -> None:
    assert generate_award.verdict(vec["kind"], base64.b64decode(vec["payload_b64"]), vec["annotations"]) == vec["expect"]


def test_every_award_kind_has_views_and_refusals() -> None:
    for kind in ("cnet.call", "cnet.bid", "cnet.award", "cnet.result"):
        expects = [v["expect"] for v in AWARD["vectors"] if v["kind"] == kind]
        assert "unreadable" in expects and any(e != "unreadable" for e in expects), kind


@pytest.mark.parametrize("vec", HANDOFF["vectors"], ids=lambda v: v["name"])
def test_the_handoff_reader_says_what_the_vector_expects(vec: Any) -> None:
    case = {k: v for k, v in vec.items() if k not in ("name", "description", "value_b64", "expect")} | {
        "value": base64.b64decode(vec["value_b64"])
    }
    assert generate_compromise.verdict(case, HANDOFF["registry"]) == vec["expect"]


@pytest.mark.parametrize("fwd", HANDOFF["forwards"], ids=lambda f: f["name"])
def test_the_successors_consumer_with_the_handoff_reader_says_what_the_vector_expects(fwd: Any) -> None:
    headers = [(k, base64.b64decode(v)) for k, v in fwd["headers"]]
    assert (
        generate_compromise.admitted(base64.b64decode(fwd["value_b64"]), headers, fwd.get("registry", HANDOFF["registry"])) == fwd["expect"]
    )


def test_the_handoff_vectors_hold_views_and_every_refusal_of_the_reader() -> None:
    """Every code the reader can refuse with (verify_forwarded's MessageError codes and the two annotation
    checks), the three forwarded verdicts, and each way a component is not usable."""
    refusals = {v["expect"]["unreadable"] for v in HANDOFF["vectors"] if "unreadable" in v["expect"]}
    assert refusals == {
        "annotation verdict",
        "annotation caution",
        "not_json",
        "wrong_type",
        "missing_field",
        "unknown_field",
        "malformed_field",
        "duplicate_key",
        "unsupported_version",
        "oversized",
        "bad_base64",
        "duplicate_name",
        "malformed_agent_id",
        "unknown_signer",
        "bad_signature",
        "wrong_handoff",
        "wrong_signer",
    }
    views = [v["expect"] for v in HANDOFF["vectors"] if "unreadable" not in v["expect"]]
    assert {v["verdict"] for v in views} == {"clean", "scoped", "double_compromise_caution"}
    assert {c[3] for v in views for c in v["checks"]} == {"matches", "mismatch", "unlisted"}
    assert {x for v in views for x in v["content"].values()} >= {"by_hash", "not_usable"}
    assert [f["expect"].get("refused") for f in HANDOFF["forwards"]] == [None, None, None, None, "unreadable"]


@pytest.mark.parametrize(
    ("script", "name"),
    [("generate.py", "taint-plan.json"), ("generate_award.py", "award.json"), ("generate_compromise.py", "compromise-handoff.json")],
)
def test_generators_reproduce_the_files(tmp_path: Path, script: str, name: str) -> None:
    subprocess.run([sys.executable, str(HERE / script), "--out", str(tmp_path)], check=True, timeout=120)
    assert (tmp_path / name).read_bytes() == (HERE / name).read_bytes()
