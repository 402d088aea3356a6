"""What the award policy writes per bid and how long a settlement holds the state lock.

Uses only the policy seam (parse, keys, decide) against a dict-backed view,
so the same script measures any version of the policy:

- bytes written per bid: the sum of the `PolicyWrite` values each admitted
  bid asks to persist, for the 1st, 8th and 64th bid of one call whose ids
  are at their longest (call and bid ids 256 characters, canonicalizer ids
  64, manifests 256; agent ids are self-certifying `tulpa:` ids, 54
  characters), one bid per bidder, and the total to fill a call;
- lock hold for a 1 MiB result: `decide` runs inside the batch's state
  transaction (the SQLite write lock, or PostgreSQL's advisory lock on the
  call's row), `parse` before it. Timed per step, for a wrong-root result
  of a jcs-sha256 output of about 1 MiB (median of `--repeats`, CPU time of
  this thread).

    .venv/bin/python benchmarks/award_state.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import msgspec  # noqa: E402

from busguard.policies.award.policy import AwardPolicy  # noqa: E402
from busguard.policies.seam import Objection, PolicyKey  # noqa: E402
from busguard.protocol.envelope import Envelope, open_envelope  # noqa: E402
from busguard.protocol.timestamps import format_timestamp  # noqa: E402
from busguard.sdk.sender import Sender  # noqa: E402

NOW = 1_795_953_600_000
DEADLINE = format_timestamp(NOW + 3_600_000)


class View(dict[PolicyKey, bytes]):
    def get(self, key: PolicyKey, default: bytes | None = None) -> bytes | None:  # type: ignore[override]
        return super().get(key, default)


def envelope(who: Sender, kind: str, task: str, payload: dict[str, object]) -> Envelope:
    r = who.sign(kind=kind, task_id=task, receiver="guard", payload=msgspec.json.encode(payload))
    return open_envelope(r.value, r.headers, 4 << 20)


def apply(policy: AwardPolicy, view: View, env: Envelope) -> int:
    """Decide `env` against `view`, apply its writes; the bytes written (-1: refused)."""
    parsed = policy.parse(env)
    assert not isinstance(parsed, Objection), parsed
    list(policy.keys(parsed))
    out = policy.decide(parsed, view, NOW)
    if out.objection is not None:
        return -1
    for w in out.writes:
        view[w.key] = w.value
    return sum(len(w.value) for w in out.writes)


def bids(policy: AwardPolicy, view: View, awarder: Sender) -> dict[str, object]:
    call = "c" * 256
    apply(policy, view, envelope(awarder, "cnet.call", call, {"awarder": awarder.agent_id, "task_class": "t", "task": "x" * 4096, "requires_check": True, "award_deadline": DEADLINE}))
    written: list[int] = []
    template = {"canonicalizer_id": "z" * 64, "commits": "output", "verifier_manifest": "m" * 256}
    for i in range(64):
        bidder = Sender(bytes([i + 1]) * 32, clock_ms=lambda: NOW)  # one bid per bidder: no per-bidder limit applies
        n = apply(policy, view, envelope(bidder, "cnet.bid", f"{i:03d}".ljust(256, "b"), {"call": call, "cost": i, "deadline": DEADLINE, "receipt": template}))
        assert n >= 0, i
        written.append(n)
    return {"bid_1_bytes": written[0], "bid_8_bytes": written[7], "bid_64_bytes": written[63], "total_bytes_64_bids": sum(written), "largest_row_bytes": max(map(len, view.values()))}


def settlement(policy: AwardPolicy, repeats: int) -> dict[str, object]:
    a, b = Sender(b"a" * 32, clock_ms=lambda: NOW), Sender(b"b" * 32, clock_ms=lambda: NOW)
    view = View()
    apply(policy, view, envelope(a, "cnet.call", "c", {"awarder": a.agent_id, "task_class": "t", "task": "x", "requires_check": True, "award_deadline": DEADLINE}))
    apply(policy, view, envelope(b, "cnet.bid", "bid0", {"call": "c", "cost": 1, "deadline": DEADLINE, "receipt": {"canonicalizer_id": "jcs-sha256", "commits": "output"}}))
    apply(policy, view, envelope(a, "cnet.award", "c", {"winner": "bid0", "ranked": ["bid0"], "mode": "verified"}))
    output = json.dumps([{"id": i, "v": "x" * 40, "n": i * 7} for i in range(15_000)]).encode()
    env = envelope(b, "cnet.result", "c", {"state_root": "0" * 64, "output": base64.urlsafe_b64encode(output).rstrip(b"=").decode()})
    parse_us, decide_us = [], []
    for _ in range(repeats):
        t0 = time.thread_time_ns()
        parsed = policy.parse(env)
        t1 = time.thread_time_ns()
        assert not isinstance(parsed, Objection)
        out = policy.decide(parsed, view, NOW)
        t2 = time.thread_time_ns()
        assert out.objection is not None and out.objection.reason.value == "settlement_mismatch", out
        parse_us.append((t1 - t0) / 1000)
        decide_us.append((t2 - t1) / 1000)
    return {"output_bytes": len(output), "parse_us_outside_lock": round(statistics.median(parse_us)), "decide_us_inside_lock": round(statistics.median(decide_us), 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    awarder = Sender(b"a" * 32, clock_ms=lambda: NOW)
    print(json.dumps({"bids": bids(AwardPolicy(), View(), awarder), "settlement_1mib": settlement(AwardPolicy(), args.repeats)}))


if __name__ == "__main__":
    main()
