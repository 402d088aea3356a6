"""tests/vectors/compromise/: reproducible from its independent generator,
and every scenario (a notice's expiry, its clearance, every refusal of a
clearance) decides as the vectors say when replayed through admission."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from itertools import groupby
from pathlib import Path
from typing import Any

import msgspec
import pytest

from busguard.admission.types import AdmissionPolicy
from busguard.policies.compromise.policy import CompromiseSettings
from busguard.protocol.timestamps import parse_timestamp
from tests.unit.harness import Harness, agent, sender

DIR = Path(__file__).resolve().parents[1] / "vectors" / "compromise"
DOC: dict[str, Any] = json.loads((DIR / "compromise.json").read_text(encoding="utf-8"))


def test_the_file_is_what_the_generator_writes(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(DIR / "generate.py"), "--out", str(tmp_path)], check=True)
    assert (tmp_path / "compromise.json").read_bytes() == (DIR / "compromise.json").read_bytes()


def test_the_generator_imports_no_busguard() -> None:
    tree = ast.parse((DIR / "generate.py").read_text(encoding="utf-8"))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= set(sys.stdlib_module_names) | {"__future__", "nacl"}, imported


def test_agent_ids_agree_with_busguard() -> None:
    for name, a in DOC["agents"].items():
        assert a["agent_id"] == agent(name)


@pytest.mark.parametrize("scenario", DOC["scenarios"], ids=lambda s: s["name"])
def test_scenario(scenario: dict[str, Any]) -> None:
    settings = msgspec.convert(DOC["settings"], CompromiseSettings)
    h = Harness(*DOC["agents"], policy=AdmissionPolicy(policy_settings={"compromise": settings}))
    i = 0
    for _, group in groupby(scenario["steps"], key=lambda s: s["batch"]):
        steps = list(group)
        (at,) = {parse_timestamp(s["at"]) for s in steps}  # one clock per batch
        h.now = at
        records = []
        for st in steps:
            i += 1
            records.append(
                sender(st["sender"], now=at).sign(
                    kind=st["kind"], task_id=st["task_id"], receiver="guard", payload=st["payload"].encode(), nonce=f"vector-nonce-{i:06d}"
                )
            )
        for st, d in zip(steps, h.feed(*records), strict=True):
            want = st["expect"]
            assert (d.outcome, d.reason) == (want["outcome"], want["reason"]), (st["task_id"], d.detail)
            if "annotations" in want:
                assert d.annotations == want["annotations"], st["task_id"]
            for k, v in want.get("annotations_include", {}).items():
                assert (d.annotations or {}).get(k) == v, (st["task_id"], k)
            if "detail_starts" in want:
                assert d.detail.startswith(want["detail_starts"]), (st["task_id"], d.detail)
