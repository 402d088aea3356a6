"""tests/vectors/cnet/: reproducible from its independent generator, and every
scenario decides as the vectors say when replayed through admission."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from busguard.policies.award import policy as award
from busguard.policies.award.canonicalizers import BUILTIN
from busguard.policies.award.registry import VerificationConfig, VerifierConfig, build_registry
from busguard.policies.award.wire import attestation_input
from busguard.protocol.envelope import b64url_decode_strict
from busguard.protocol.identity import public_key_from_agent_id
from busguard.protocol.signing import verify_signature
from busguard.protocol.timestamps import parse_timestamp
from tests.unit.harness import Harness, agent, sender

DIR = Path(__file__).resolve().parents[1] / "vectors" / "cnet"
DOC: dict[str, Any] = json.loads((DIR / "cnet.json").read_text(encoding="utf-8"))


def test_the_file_is_what_the_generator_writes(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(DIR / "generate.py"), "--out", str(tmp_path)], check=True)
    assert (tmp_path / "cnet.json").read_bytes() == (DIR / "cnet.json").read_bytes()


def test_the_generator_imports_no_busguard() -> None:
    tree = ast.parse((DIR / "generate.py").read_text(encoding="utf-8"))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= set(sys.stdlib_module_names) | {"__future__", "nacl"}, imported


def test_agent_ids_and_the_attestation_agree_with_busguard() -> None:
    for name, a in DOC["agents"].items():
        assert a["agent_id"] == agent(name)
    att = DOC["attestation"]
    message = attestation_input(**att["fields"])
    assert message is not None and message.hex() == att["signing_input_hex"]
    pk = public_key_from_agent_id(DOC["agents"]["verifier"]["agent_id"])
    assert pk is not None
    assert verify_signature(pk, message, b64url_decode_strict(att["signature"], 64))


@pytest.mark.parametrize("scenario", DOC["scenarios"], ids=lambda s: s["name"])
def test_scenario(scenario: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    r = DOC["registry"]
    registry = build_registry(
        VerificationConfig(
            canonicalizers=r["canonicalizers"],
            best_effort_task_classes=r["best_effort_task_classes"],
            verifiers=[VerifierConfig(**v) for v in r["verifiers"]],
        ),
        "cnet.json",
        canonicalizers=BUILTIN,
    )
    monkeypatch.setattr(award.POLICY, "registry", registry)
    now = parse_timestamp(DOC["now"])
    h = Harness(*DOC["agents"], now=now)
    for i, st in enumerate(scenario["steps"]):
        h.now = at = parse_timestamp(st.get("at", DOC["now"]))  # "at": the guard's and the sender's clock for this step
        record = sender(st["sender"], now=at).sign(
            kind=st["kind"], task_id=st["task_id"], receiver="guard", payload=st["payload"].encode(), nonce=f"vector-nonce-{i:06d}"
        )
        d = h.one(record)
        want = st["expect"]
        assert (d.outcome, d.reason) == (want["outcome"], want["reason"]), (i, d.detail)
        if "annotations" in want:
            assert d.annotations == want["annotations"], i
        if "notice" in want:
            assert d.notices is not None and [n.value.decode() for n in d.notices] == [want["notice"]], i
