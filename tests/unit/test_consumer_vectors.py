"""tests/vectors/consumer/: reproducible from its independent generator, and
busguard's `AdmittingConsumer.admit` decides the fetch exactly as the file
says (each delivery, each refusal's reason, the positions); the TypeScript
package decides the same file (tests/unit/test_ts_vectors.py compares)."""

from __future__ import annotations

import ast
import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from busguard.runtime.undecodable import Undecodable
from busguard.sdk.consumer import AdmittingConsumer, Batch, Delivery, Fetched

DIR = Path(__file__).resolve().parents[1] / "vectors" / "consumer"
DOC: dict[str, Any] = json.loads((DIR / "consumer.json").read_text(encoding="ascii"))


def _b64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text, validate=True)


def _refuse(_: Delivery) -> object:
    raise ValueError("this fetch's reader refuses every payload of its kind")


def admit(doc: dict[str, Any]) -> Batch:
    """`AdmittingConsumer.admit` over the file's fetch, with its readers."""
    readers = {kind: _refuse for kind, what in doc["readers"].items() if what == "refuse"}
    inbox = AdmittingConsumer(
        None, guard_public_key=bytes.fromhex(doc["guard"]["public_key_hex"]), agent_id=doc["agent_id"], readers=readers
    )
    fetched: list[Any] = []
    for r in doc["records"]:
        if "undecodable" in r:
            fetched.append(
                Undecodable(
                    r["topic"],
                    r["partition"],
                    r["offset"],
                    r["undecodable"],
                    r["detail"],
                    None,
                    r["offset"],
                    "",
                    last_offset=r["last_offset"],
                )
            )
        else:
            headers = [(k, _b64(v)) for k, v in r["headers"]]
            fetched.append(Fetched(r["topic"], r["partition"], r["offset"], _b64(r["value_b64"]), headers))
    return inbox.admit(fetched)


def decided(batch: Batch) -> dict[str, Any]:
    """The batch in the file's `expect` form."""
    refusals = []
    for r in batch.refusals:
        one: dict[str, Any] = {"partition": r.partition, "offset": r.offset, "reason": r.reason}
        if r.reason == "undecodable":
            one["detail"] = r.detail
        if r.last_offset is not None:
            one["last_offset"] = r.last_offset
        refusals.append(one)
    return {
        "deliveries": [
            {
                "partition": d.partition,
                "offset": d.offset,
                "decision_id": d.decision_id,
                "task_id": d.receipt.task_id,
                "payload_b64": base64.b64encode(d.payload).decode(),
                "annotations": d.annotations,
            }
            for d in batch.deliveries
        ],
        "refusals": refusals,
        "positions": [[t, p, o] for (t, p), o in sorted(batch.positions.items())],
    }


def test_the_file_is_what_the_generator_writes(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(DIR / "generate.py"), "--out", str(tmp_path)], check=True)
    assert (tmp_path / "consumer.json").read_bytes() == (DIR / "consumer.json").read_bytes()


def test_the_generator_imports_no_busguard() -> None:
    tree = ast.parse((DIR / "generate.py").read_text(encoding="utf-8"))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= set(sys.stdlib_module_names) | {"__future__", "nacl"}, imported


def test_every_reason_of_the_consumer_is_earned() -> None:
    assert {r["reason"] for r in DOC["expect"]["refusals"]} == {"unattested", "not_for_me", "unreadable", "undecodable"}


def test_busguard_decides_the_fetch_as_the_file_says() -> None:
    assert decided(admit(DOC)) == DOC["expect"]
