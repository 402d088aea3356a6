#!/usr/bin/env python3
"""Generate the contract-net vectors (docs/protocol.md, section 15): cnet.json.

Deterministic: re-running this script reproduces the committed file byte for
byte (tests/unit/test_award_vectors.py checks that, and replays every
scenario through busguard's admission).

Independent of busguard: payloads are written out here as the exact bytes a
sender sends, expected roots come from a small RFC 8785 serializer that only
handles what these outputs contain (strings without escapes, integers,
arrays, objects), agent ids are built from the Ed25519 keys with a
hand-written base58btc multikey, attestation inputs are assembled from the
byte layout of section 15.4, and the expected rebid notices are written as
the section 15.3 table orders their fields. Only PyNaCl (Ed25519) is used.

    python tests/vectors/cnet/generate.py [--out DIR]   (default: this directory)
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import nacl.signing

FORMAT = "busguard.cnet.v1"
NOW = "2026-11-29T12:00:00.000Z"
DEADLINE = "2026-11-29T13:00:00.000Z"
LATE_DEADLINE = "2026-12-07T12:00:00.000Z"  # NOW + 8 days: inside the default 30-day horizon, past the 7-day task retention
LATER = "2026-12-06T13:00:00.000Z"  # NOW + 7 days + 1 hour: the calls' task entries have expired, their rows have not
FAR = "9999-12-31T23:59:59Z"  # beyond any horizon
BIDDERS = tuple(f"bidder-{i}" for i in range(7))
MANIFEST = "acme-verifier/v1"
B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def seed(name: str) -> bytes:
    """The unit harness's key for `name` (tests/unit/harness.py)."""
    return hashlib.sha256(b"busguard-test-key:" + name.encode()).digest()


def public_key(name: str) -> bytes:
    return bytes(nacl.signing.SigningKey(seed(name)).verify_key)


def base58(data: bytes) -> str:
    n = int.from_bytes(data, "big")
    out = ""
    while n:
        n, r = divmod(n, 58)
        out = B58[r] + out
    return "1" * (len(data) - len(data.lstrip(b"\0"))) + out


def agent(name: str) -> str:
    return "tulpa:z" + base58(b"\xed\x01" + public_key(name))


def jcs(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ",".join(f'"{k}":{jcs(value[k])}' for k in sorted(value)) + "}"
    if isinstance(value, list):
        return "[" + ",".join(jcs(v) for v in value) + "]"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    assert isinstance(value, str) and value.isascii() and '"' not in value and "\\" not in value
    return f'"{value}"'


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


OUTPUT = b'{"rows": [{"v": "a", "id": 1}, {"id": 2, "v": "b"}], "count": 2}'
JCS_ROOT = hashlib.sha256(jcs(json.loads(OUTPUT)).encode()).hexdigest()
RAW_ROOT = hashlib.sha256(OUTPUT).hexdigest()  # "self-consistent but wrong": not the jcs-sha256 root


def attestation_input(manifest: str, call: str, bid: str, canonicalizer: str, root: str, output: bytes) -> bytes:
    fields = [manifest, call, bid, canonicalizer, root, hashlib.sha256(output).hexdigest()]
    return b"busguard/cnet-attestation/v1\x00" + b"".join(f.encode() + b"\x00" for f in fields)


def attest(call: str, bid: str, root: str, output: bytes, who: str = "verifier") -> str:
    message = attestation_input(MANIFEST, call, bid, "zk-trace.v3", root, output)
    return b64url(nacl.signing.SigningKey(seed(who)).sign(message).signature)


def call(awarder: str, task_class: str, requires_check: bool, deadline: str = DEADLINE) -> str:
    return (
        f'{{"awarder":"{agent(awarder)}","task_class":"{task_class}","task":"normalise the rows",'
        f'"requires_check":{json.dumps(requires_check)},"award_deadline":"{deadline}"}}'
    )


def bid(call_id: str, cost: int, canonicalizer: str, commits: str = "output", manifest: str | None = None, deadline: str = DEADLINE) -> str:
    m = f',"verifier_manifest":"{manifest}"' if manifest else ""
    return f'{{"call":"{call_id}","cost":{cost},"deadline":"{deadline}","receipt":{{"canonicalizer_id":"{canonicalizer}","commits":"{commits}"{m}}}}}'


def notice(call_id: str, winner: str, reason: str, detail: str, awardable: list[tuple[str, str, int, str, str, str | None]]) -> str:
    items = ",".join(
        f'{{"bid":"{b}","bidder":"{agent(who)}","cost":{cost},"mode":"{mode}","canonicalizer_id":"{cid}","verifier_manifest":{json.dumps(vm)}}}'
        for b, who, cost, mode, cid, vm in awardable
    )
    return (
        f'{{"type":"rebid","call":"{call_id}","awarder":"{agent("awarder")}","winner":"{winner}",'
        f'"reason":"{reason}","detail":{json.dumps(detail)},"awardable":[{items}]}}'
    )


def step(
    sender: str, kind: str, task_id: str, payload: str, outcome: str, reason: str, at: str | None = None, **expect: Any
) -> dict[str, Any]:
    when = {} if at is None else {"at": at}
    return {
        "sender": sender,
        "kind": kind,
        "task_id": task_id,
        "payload": payload,
        **when,
        "expect": {"outcome": outcome, "reason": reason, **expect},
    }


def call_long_awarder() -> str:
    """A call naming a 300-character awarder (section 5.1 allows 512): parsed, then refused as not its signer."""
    return f'{{"awarder":"{"a" * 300}","task_class":"t","task":"x","requires_check":true,"award_deadline":"{DEADLINE}"}}'


UNRECOMPUTABLE = (
    f"winning bid 'c1/bid-c' from '{agent('bidder-c')}' commits its state root under canonicalizer 'c-private-norm.v1', which this "
    "deployment cannot recompute, and the award does not record a delegation or a best-effort downgrade: bid-valid but award-invalid; reject and rebid"
)


def scenarios() -> list[dict[str, Any]]:
    seed_incident = [
        step("awarder", "cnet.call", "c1", call("awarder", "transform.table", True), "forward", "admitted"),
        step(
            "bidder-b",
            "cnet.bid",
            "c1/bid-b",
            bid("c1", 120, "jcs-sha256"),
            "forward",
            "admitted",
            annotations={"call": "c1", "bid": "c1/bid-b", "canonicalizer_id": "jcs-sha256", "awardable": "verified"},
        ),
        step(
            "bidder-c",
            "cnet.bid",
            "c1/bid-c",
            bid("c1", 80, "c-private-norm.v1"),
            "forward",
            "admitted",
            annotations={"call": "c1", "bid": "c1/bid-c", "canonicalizer_id": "c-private-norm.v1", "awardable": "no"},
        ),
        step(
            "awarder",
            "cnet.award",
            "c1",
            '{"winner":"c1/bid-c","ranked":["c1/bid-c","c1/bid-b"],"mode":"verified"}',
            "reject",
            "award_unrecomputable",
            notice=notice(
                "c1", "c1/bid-c", "award_unrecomputable", UNRECOMPUTABLE, [("c1/bid-b", "bidder-b", 120, "verified", "jcs-sha256", None)]
            ),
        ),
        step(
            "awarder", "cnet.award", "c1", '{"winner":"c1/bid-b","ranked":["c1/bid-c","c1/bid-b"],"mode":"verified"}', "forward", "admitted"
        ),
        step(
            "bidder-b",
            "cnet.result",
            "c1",
            f'{{"state_root":"{RAW_ROOT}","output":"{b64url(OUTPUT)}"}}',
            "escalate",
            "settlement_mismatch",
            annotations={
                "call": "c1",
                "winner": "c1/bid-b",
                "mode": "verified",
                "attributed_to": agent("bidder-b"),
                "committed_root": RAW_ROOT,
                "recomputed_root": JCS_ROOT,
                "settlement": "escalated",
            },
        ),
        step(
            "bidder-b",
            "cnet.result",
            "c1",
            f'{{"state_root":"{JCS_ROOT}","output":"{b64url(OUTPUT)}"}}',
            "forward",
            "admitted",
            annotations={
                "call": "c1",
                "winner": "c1/bid-b",
                "mode": "verified",
                "attributed_to": agent("bidder-b"),
                "committed_root": JCS_ROOT,
                "recomputed_root": JCS_ROOT,
                "settlement": "settled",
                "verification": "recomputed",
            },
        ),
    ]
    best_effort = [
        step("awarder", "cnet.call", "c2", call("awarder", "advisory.summary", False), "forward", "admitted"),
        step("bidder-c", "cnet.bid", "c2/bid-c", bid("c2", 80, "c-private-norm.v1"), "forward", "admitted"),
        step(
            "awarder",
            "cnet.award",
            "c2",
            '{"winner":"c2/bid-c","ranked":["c2/bid-c"],"mode":"best_effort","risk_price":15}',
            "forward",
            "admitted",
        ),
        step("bidder-c", "cnet.result", "c2", f'{{"state_root":"{"1" * 64}","output":"{b64url(OUTPUT)}"}}', "forward", "admitted"),
        step("awarder", "cnet.call", "c3", call("awarder", "advisory.summary", True), "forward", "admitted"),
        step("bidder-c", "cnet.bid", "c3/bid-c", bid("c3", 80, "c-private-norm.v1"), "forward", "admitted"),
        step(
            "awarder",
            "cnet.award",
            "c3",
            '{"winner":"c3/bid-c","ranked":["c3/bid-c"],"mode":"best_effort","risk_price":15}',
            "reject",
            "award_check_required",
        ),
        step("awarder", "cnet.call", "c4", call("awarder", "transform.table", False), "forward", "admitted"),
        step("bidder-c", "cnet.bid", "c4/bid-c", bid("c4", 80, "c-private-norm.v1"), "forward", "admitted"),
        step(
            "awarder",
            "cnet.award",
            "c4",
            '{"winner":"c4/bid-c","ranked":["c4/bid-c"],"mode":"best_effort","risk_price":15}',
            "reject",
            "award_best_effort_not_tolerated",
        ),
        step("bidder-b", "cnet.bid", "c2/bid-b", bid("c2", 70, "jcs-sha256"), "reject", "award_closed"),
    ]
    root = "ab" * 32
    delegated = [
        step("awarder", "cnet.call", "c1", call("awarder", "transform.table", True), "forward", "admitted"),
        step("bidder-c", "cnet.bid", "c1/bid-c", bid("c1", 90, "zk-trace.v3", "trace", MANIFEST), "forward", "admitted"),
        step(
            "awarder",
            "cnet.award",
            "c1",
            f'{{"winner":"c1/bid-c","ranked":["c1/bid-c"],"mode":"delegated","verifier":"{MANIFEST}"}}',
            "forward",
            "admitted",
        ),
        step(
            "bidder-c",
            "cnet.result",
            "c1",
            f'{{"state_root":"{root}","trace":"{b64url(OUTPUT)}","attestation":"{attest("c1", "c1/bid-c", root, OUTPUT, "bidder-c")}"}}',
            "escalate",
            "settlement_bad_attestation",
        ),
        step(
            "bidder-c",
            "cnet.result",
            "c1",
            f'{{"state_root":"{root}","trace":"{b64url(OUTPUT)}","attestation":"{attest("c1", "c1/bid-c", root, OUTPUT)}"}}',
            "forward",
            "admitted",
        ),
    ]
    refusals = [
        step("awarder", "cnet.call", "c1", call("awarder", "transform.table", True), "forward", "admitted"),
        step("bidder-b", "cnet.bid", "c1/bid-b", bid("c1", 120, "jcs-sha256"), "forward", "admitted"),
        step("bidder-b", "cnet.bid", "c9/bid-b", bid("c9", 120, "jcs-sha256"), "reject", "award_unknown_call"),
        step("awarder", "cnet.award", "c1", '{"winner":"c1/bid-x","ranked":["c1/bid-x"],"mode":"verified"}', "reject", "award_unknown_bid"),
        step("awarder", "cnet.award", "c1", '{"winner":"c1/bid-b","ranked":[],"mode":"verified"}', "reject", "award_unranked_bid"),
        step(
            "bidder-b", "cnet.award", "c1", '{"winner":"c1/bid-b","ranked":["c1/bid-b"],"mode":"verified"}', "reject", "award_wrong_party"
        ),
        step(
            "bidder-b", "cnet.result", "c1", f'{{"state_root":"{JCS_ROOT}","output":"{b64url(OUTPUT)}"}}', "reject", "settlement_no_award"
        ),
        step(
            "bidder-b",
            "cnet.bid",
            "c1/bid-2",
            '{"call":"c1","call":"c1","cost":1,"deadline":"'
            + DEADLINE
            + '","receipt":{"canonicalizer_id":"jcs-sha256","commits":"output"}}',
            "reject",
            "duplicate_key",
        ),
        step(
            "bidder-b",
            "cnet.bid",
            "c1/bid-3",
            '{"call":"c1","cost":1,"deadline":"'
            + DEADLINE
            + '","receipt":{"canonicalizer_id":"jcs-sha256","commits":"output"},"note":"x"}',
            "reject",
            "unknown_field",
        ),
        step("awarder", "cnet.award", "c1", '{"winner":"c1/bid-b","ranked":["c1/bid-b"],"mode":"delegated"}', "reject", "missing_field"),
        step(
            "awarder",
            "cnet.award",
            "c1",
            '{"winner":"c1/bid-b","ranked":["c1/bid-b"],"mode":"verified","risk_price":3}',
            "reject",
            "malformed_field",
        ),
        step("bidder-b", "cnet.call", "c1-long", call_long_awarder(), "reject", "award_wrong_party"),
        step("bidder-c", "cnet.bid", "c1/bid-c", bid("c1", 60, "zk-trace.v3", "trace", "shady-verifier/v1"), "forward", "admitted"),
        step(
            "awarder",
            "cnet.award",
            "c1",
            '{"winner":"c1/bid-c","ranked":["c1/bid-c"],"mode":"delegated","verifier":"shady-verifier/v1"}',
            "reject",
            "award_untrusted_verifier",
        ),
        step("awarder", "cnet.award", "c1", '{"winner":"c1/bid-b","ranked":["c1/bid-b"],"mode":"verified"}', "forward", "admitted"),
        step(
            "bidder-b",
            "cnet.result",
            "c1",
            f'{{"state_root":"{JCS_ROOT}","output":"{b64url(b"not json")}"}}',
            "escalate",
            "settlement_unrecomputable",
            annotations={
                "call": "c1",
                "winner": "c1/bid-b",
                "mode": "verified",
                "attributed_to": agent("bidder-b"),
                "committed_root": JCS_ROOT,
                "settlement": "escalated",
                "problem": "not-json",
            },
        ),
    ]
    full = [step("awarder", "cnet.call", "c5", call("awarder", "transform.table", True), "forward", "admitted")]
    full += [step("bidder-b", "cnet.bid", f"c5/bid-{i}", bid("c5", i, "jcs-sha256"), "forward", "admitted") for i in range(8)]
    full += [step("bidder-b", "cnet.bid", "c5/bid-8", bid("c5", 8, "jcs-sha256"), "reject", "award_bidder_limit")]
    full += [
        step(who, "cnet.bid", f"c5/bid-{who}-{i}", bid("c5", i, "jcs-sha256"), "forward", "admitted") for who in BIDDERS for i in range(8)
    ]
    full += [step("bidder-c", "cnet.bid", "c5/bid-64", bid("c5", 1, "jcs-sha256"), "reject", "award_too_many_bids")]
    lifetimes = [
        step("awarder", "cnet.call", "c8", call("awarder", "transform.table", True, FAR), "reject", "award_deadline_too_far"),
        step("awarder", "cnet.call", "c6", call("awarder", "transform.table", True, LATE_DEADLINE), "forward", "admitted"),
        step("bidder-b", "cnet.bid", "c6/bid-far", bid("c6", 1, "jcs-sha256", deadline=FAR), "reject", "award_deadline_too_far"),
        step("bidder-b", "cnet.bid", "c6/bid-b", bid("c6", 120, "jcs-sha256"), "forward", "admitted"),
        step("bidder-c", "cnet.bid", "c6/bid-c", bid("c6", 90, "jcs-sha256"), "forward", "admitted"),
        step(
            "awarder", "cnet.award", "c6", '{"winner":"c6/bid-b","ranked":["c6/bid-b","c6/bid-c"],"mode":"verified"}', "forward", "admitted"
        ),
        step(
            "bidder-c", "cnet.call", "c6", call("bidder-c", "transform.table", True, LATE_DEADLINE), "reject", "award_call_exists", at=LATER
        ),
        step(
            "awarder",
            "cnet.award",
            "c6",
            '{"winner":"c6/bid-c","ranked":["c6/bid-c","c6/bid-b"],"mode":"verified"}',
            "reject",
            "award_already_awarded",
            at=LATER,
        ),
        step("awarder", "cnet.call", "c7", call("awarder", "transform.table", True, LATE_DEADLINE), "forward", "admitted"),
        step("bidder-b", "cnet.bid", "c7/bid-b", bid("c7", 120, "jcs-sha256"), "forward", "admitted"),
        step("bidder-b", "cnet.bid", "c7/bid-b", bid("c7", 100, "jcs-sha256"), "reject", "award_bid_exists", at=LATER),
    ]
    return [
        {"name": "seed-002-incident", "steps": seed_incident},
        {"name": "best-effort", "steps": best_effort},
        {"name": "delegated", "steps": delegated},
        {"name": "refusals", "steps": refusals},
        {"name": "full-call", "steps": full},
        {"name": "lifetimes", "steps": lifetimes},
    ]


def document() -> dict[str, Any]:
    message = attestation_input(MANIFEST, "c1", "c1/bid-c", "zk-trace.v3", "ab" * 32, OUTPUT)
    return {
        "format": FORMAT,
        "now": NOW,
        "agents": {
            name: {"seed": seed(name).hex(), "agent_id": agent(name)} for name in ("awarder", "bidder-b", "bidder-c", "verifier", *BIDDERS)
        },
        "registry": {
            "canonicalizers": ["jcs-sha256", "merkle-sha256"],
            "best_effort_task_classes": ["advisory.summary"],
            "verifiers": [{"manifest": MANIFEST, "agent_id": agent("verifier"), "canonicalizers": ["zk-trace.v3"]}],
        },
        "attestation": {
            "fields": {
                "verifier_manifest": MANIFEST,
                "call": "c1",
                "bid": "c1/bid-c",
                "canonicalizer_id": "zk-trace.v3",
                "state_root": "ab" * 32,
                "output_sha256": hashlib.sha256(OUTPUT).hexdigest(),
            },
            "signing_input_hex": message.hex(),
            "signature": attest("c1", "c1/bid-c", "ab" * 32, OUTPUT),
        },
        "scenarios": scenarios(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args()
    (args.out / "cnet.json").write_text(json.dumps(document(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
