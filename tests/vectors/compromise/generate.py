#!/usr/bin/env python3
"""Generate the compromise-notice lifecycle vectors (docs/protocol.md 14.2,
14.4; docs/compromise-handoff.md 4): compromise.json.

Deterministic: re-running this script reproduces the committed file byte for
byte (tests/unit/test_compromise_vectors.py checks that, and replays every
scenario through busguard's admission).

Independent of busguard: every payload is written out here as the exact
bytes a sender sends (compact JSON in the field order of the docs' tables),
a clearance's `notice_sha256` is hashlib's SHA-256 of the notice's bytes,
agent ids are built from the Ed25519 keys with a hand-written base58btc
multikey, and each expected outcome and annotation is written down by hand
from the docs. Only PyNaCl (Ed25519, for the agent ids) is used.

    python tests/vectors/compromise/generate.py [--out DIR]   (default: this directory)
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nacl.signing

FORMAT = "busguard.compromise.v1"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NOW_MS = int((datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC) - EPOCH) / timedelta(milliseconds=1))
HORIZON_MS = 3_600_000
B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
PLAN = b'{"next":"deploy"}'


def ts(ms: int) -> str:
    dt = EPOCH + timedelta(milliseconds=ms)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def seed(name: str) -> bytes:
    """The unit harness's key for `name` (tests/unit/harness.py)."""
    return hashlib.sha256(b"busguard-test-key:" + name.encode()).digest()


def base58(data: bytes) -> str:
    n = int.from_bytes(data, "big")
    out = ""
    while n:
        n, r = divmod(n, 58)
        out = B58[r] + out
    return "1" * (len(data) - len(data.lstrip(b"\0"))) + out


def agent(name: str) -> str:
    return "tulpa:z" + base58(b"\xed\x01" + bytes(nacl.signing.SigningKey(seed(name)).verify_key))


OPERATOR, AUDITOR, SESSION, STRANGER = "operator", "auditor", "session", "stranger"


def notice(notice_id: str, *, issuer: str = OPERATOR, subject: str = SESSION, expires_at: int | None = None) -> str:
    end = "" if expires_at is None else f',"expires_at":"{ts(expires_at)}"'
    return (
        f'{{"v":1,"notice_id":"{notice_id}","issuer":"{agent(issuer)}","subject":"{agent(subject)}",'
        f'"detected":["corrupted_context"],"compromised_from":"{ts(NOW_MS - 60_000)}","issued_at":"{ts(NOW_MS - 30_000)}"{end}}}'
    )


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def clearance(notice_text: str, cleared_at: int, *, issuer: str = OPERATOR, digest: str | None = None) -> str:
    n = json.loads(notice_text)
    return (
        f'{{"v":1,"notice_id":"{n["notice_id"]}","notice_sha256":"{digest or sha256(notice_text)}","issuer":"{agent(issuer)}",'
        f'"subject":"{n["subject"]}","cleared_at":"{ts(cleared_at)}"}}'
    )


def handoff() -> str:
    """An undeclared handoff of one operational component, no successor receipt: prohibited under a notice, standard without."""
    content = base64.urlsafe_b64encode(PLAN).rstrip(b"=").decode()
    return f'{{"v":1,"components":[{{"name":"plan","operational":true,"encoding":"application/json","content":"{content}"}}]}}'


def admitted_notice(text: str, on_row: int) -> dict[str, str]:
    n = json.loads(text)
    out = {
        "notice_id": n["notice_id"],
        "subject": n["subject"],
        "covers": "agent",
        "compromised_from": n["compromised_from"],
        "notices_on_row": str(on_row),
        "notice_sha256": sha256(text),
    }
    if "expires_at" in n:
        out["expires_at"] = n["expires_at"]
    return out


def step(
    batch: int, sender: str, kind: str, task_id: str, payload: str, outcome: str, reason: str, *, at: int = NOW_MS, **expect: Any
) -> dict[str, Any]:
    return {
        "batch": batch,
        "at": ts(at),
        "sender": sender,
        "kind": kind,
        "task_id": task_id,
        "payload": payload,
        "expect": {"outcome": outcome, "reason": reason, **expect},
    }


N, C, H = "compromise-notice", "compromise-clearance", "session-handoff"


def scenarios() -> list[dict[str, Any]]:
    expiring = notice("n-exp", expires_at=NOW_MS + 60_000)
    later = NOW_MS + 120_000
    expiry = [
        step(1, OPERATOR, N, "n-exp", expiring, "forward", "admitted", annotations=admitted_notice(expiring, 1)),
        step(
            2,
            SESSION,
            H,
            "h-before",
            handoff(),
            "reject",
            "undeclared_operational_state",
            annotations_include={"compromise_notices": "n-exp"},
        ),
        step(
            3,
            SESSION,
            H,
            "h-after",
            handoff(),
            "forward",
            "admitted",
            at=later,
            annotations_include={"verdict": "clean", "lifted_notices": '[["n-exp","expired"]]'},
        ),
        step(4, OPERATOR, N, "n-far", notice("n-far", expires_at=NOW_MS + HORIZON_MS + 1), "reject", "notice_expiry_too_far"),
        step(5, OPERATOR, N, "n-early", notice("n-early", expires_at=NOW_MS - 120_000), "reject", "notice_malformed"),
        step(6, STRANGER, N, "n-strange", notice("n-strange", issuer=STRANGER), "reject", "notice_unauthentic"),
    ]
    n1 = notice("n-1")
    c1 = clearance(n1, NOW_MS - 1_000)
    cleared = {
        "notice_id": "n-1",
        "notice_sha256": sha256(n1),
        "subject": agent(SESSION),
        "covers": "agent",
        "cleared_at": ts(NOW_MS - 1_000),
    }
    clear = [
        step(1, OPERATOR, N, "n-1", n1, "forward", "admitted", annotations=admitted_notice(n1, 1)),
        # One batch: the handoff before the clearance is still under the notice, the one after it is not.
        step(2, SESSION, H, "h-1", handoff(), "reject", "undeclared_operational_state", annotations_include={"compromise_notices": "n-1"}),
        step(2, OPERATOR, C, "c-1", c1, "forward", "admitted", annotations=cleared),
        step(2, SESSION, H, "h-2", handoff(), "forward", "admitted", annotations_include={"lifted_notices": '[["n-1","cleared"]]'}),
        step(3, OPERATOR, C, "c-2", clearance(n1, NOW_MS - 500), "reject", "notice_already_cleared", annotations={"notice_id": "n-1"}),
        step(4, OPERATOR, N, "n-1-again", n1, "reject", "notice_already_cleared", annotations={"notice_id": "n-1"}),
    ]
    n2 = notice("n-2")
    against_operator = notice("n-op", issuer=AUDITOR, subject=OPERATOR)
    refusals = [
        step(1, OPERATOR, C, "c-early", clearance(n2, NOW_MS), "reject", "clearance_unknown_notice"),
        step(2, OPERATOR, N, "n-2", n2, "forward", "admitted", annotations=admitted_notice(n2, 1)),
        step(
            3,
            AUDITOR,
            C,
            "c-other",
            clearance(n2, NOW_MS, issuer=AUDITOR),
            "reject",
            "clearance_unauthentic",
            detail_starts="wrong_issuer: ",
        ),
        step(
            4,
            STRANGER,
            C,
            "c-strange",
            clearance(n2, NOW_MS, issuer=STRANGER),
            "reject",
            "clearance_unauthentic",
            detail_starts="untrusted_issuer: ",
        ),
        step(5, STRANGER, C, "c-forged", clearance(n2, NOW_MS), "reject", "clearance_unauthentic", detail_starts="wrong_signer: "),
        step(6, OPERATOR, C, "c-hash", clearance(n2, NOW_MS, digest="0" * 64), "reject", "clearance_notice_mismatch"),
        step(7, OPERATOR, C, "c-far", clearance(n2, NOW_MS + HORIZON_MS + 1), "reject", "clearance_too_far"),
        step(8, OPERATOR, C, "c-bad", clearance(n2, NOW_MS).replace('"v":1,', '"v":1,"extra":true,'), "reject", "clearance_malformed"),
        step(9, AUDITOR, N, "n-op", against_operator, "forward", "admitted", annotations=admitted_notice(against_operator, 1)),
        step(
            10,
            AUDITOR,
            N,
            "n-2-takeover",
            n2.replace(agent(OPERATOR), agent(AUDITOR), 1),
            "reject",
            "notice_unauthentic",
            detail_starts="wrong_issuer: ",
        ),
        step(11, OPERATOR, C, "c-under", clearance(n2, NOW_MS), "reject", "clearance_issuer_under_notice"),
        step(12, SESSION, H, "h-3", handoff(), "reject", "undeclared_operational_state", annotations_include={"compromise_notices": "n-2"}),
    ]
    return [
        {"name": "expiry", "steps": expiry},
        {"name": "clearance", "steps": clear},
        {"name": "clearance-refusals", "steps": refusals},
    ]


def document() -> dict[str, Any]:
    return {
        "format": FORMAT,
        "now": ts(NOW_MS),
        "agents": {name: {"seed": seed(name).hex(), "agent_id": agent(name)} for name in (OPERATOR, AUDITOR, SESSION, STRANGER)},
        "settings": {"trusted_notice_issuers": [agent(OPERATOR), agent(AUDITOR)], "notice_expiry_horizon_ms": HORIZON_MS},
        "encoding": {
            "batch": "steps of a scenario with the same batch number are decided in one batch, in order; each scenario against a fresh store",
            "at": "the guard's clock for the batch and the sender's clock for the receipt's issued_at",
            "receipts": "ordinary (section 3): receiver 'guard', no session, any unique nonce, signed by the step's sender",
            "annotations": "the decision's annotations exactly; annotations_include: these among them",
        },
        "scenarios": scenarios(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args()
    (args.out / "compromise.json").write_text(json.dumps(document(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
