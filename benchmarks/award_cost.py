"""The award policy's cost per record (seed 002), pure: parse + keys + decide.

Builds one call with `--bids` admitted bids, then times the policy alone on
signed envelopes of each kind against a dict-backed view (no store, no
signature check): a bid (reads the call's row, writes its own rows), a
refused award (with its rebid notice over the bids it names), an admitted award, and a
result settled by recomputing the jcs-sha256 root of a ~1 KiB output. CPU
time of this thread (`time.thread_time_ns`), median of `--repeats` runs of
`--n` records each.

    .venv/bin/python benchmarks/award_cost.py [--n 5000] [--bids 8] [--repeats 5]
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

from busguard.policies.award.canonicalizers import JcsSha256  # noqa: E402
from busguard.policies.award.policy import AwardPolicy  # noqa: E402
from busguard.policies.award.wire import AwardPayload, BidPayload, CallPayload, ReceiptTemplate, ResultPayload  # noqa: E402
from busguard.policies.seam import Objection, PolicyKey, PolicyOutcome  # noqa: E402
from busguard.protocol.envelope import open_envelope  # noqa: E402
from busguard.protocol.timestamps import format_timestamp  # noqa: E402
from busguard.sdk.sender import Sender  # noqa: E402

NOW = 1_795_953_600_000
DEADLINE = format_timestamp(NOW + 3_600_000)


class View(dict[PolicyKey, bytes]):
    def get(self, key: PolicyKey, default: bytes | None = None) -> bytes | None:  # type: ignore[override]
        return super().get(key, default)


def envelope(who: Sender, kind: str, task: str, payload: msgspec.Struct):  # type: ignore[no-untyped-def]
    r = who.sign(kind=kind, task_id=task, receiver="guard", payload=msgspec.json.encode(payload))
    return open_envelope(r.value, r.headers, 1 << 20)


def run(policy: AwardPolicy, view: View, envs: list, apply: bool) -> float:  # type: ignore[type-arg]
    start = time.thread_time_ns()
    for env in envs:
        parsed = policy.parse(env)
        assert not isinstance(parsed, Objection)
        list(policy.keys(parsed))
        out: PolicyOutcome = policy.decide(parsed, view, NOW)
        if apply:
            for w in out.writes:
                view[w.key] = w.value
    return (time.thread_time_ns() - start) / len(envs) / 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--bids", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    a, b = Sender(b"a" * 32, clock_ms=lambda: NOW), Sender(b"b" * 32, clock_ms=lambda: NOW)
    policy, view = AwardPolicy(), View()
    call = CallPayload(awarder=a.agent_id, task_class="t", task="x", requires_check=True, award_deadline=DEADLINE)
    run(policy, view, [envelope(a, "cnet.call", "c", call)], apply=True)
    template = ReceiptTemplate(canonicalizer_id="jcs-sha256", commits="output")
    bidders = [b, *(Sender(bytes([i % 250 + 2]) * 32, clock_ms=lambda: NOW) for i in range(1, args.bids))]  # one bid each: under the per-bidder limit
    run(policy, view, [envelope(bidders[i], "cnet.bid", f"bid{i}", BidPayload(call="c", cost=i, deadline=DEADLINE, receipt=template)) for i in range(args.bids)], apply=True)
    extra = Sender(b"x" * 32, clock_ms=lambda: NOW)
    open_row = dict(view)
    output = json.dumps([{"id": i, "v": "x" * 20} for i in range(30)]).encode()
    cases = {
        "bid (own rows)": ([envelope(extra, "cnet.bid", f"extra{i}", BidPayload(call="c", cost=1, deadline=DEADLINE, receipt=template)) for i in range(args.n)], open_row),
        "refused award + rebid notice": ([envelope(a, "cnet.award", "c", AwardPayload(winner="nope", ranked=["nope"], mode="verified")) for _ in range(args.n)], open_row),
        "admitted award": ([envelope(a, "cnet.award", "c", AwardPayload(winner="bid0", ranked=["bid0"], mode="verified")) for _ in range(args.n)], open_row),
    }
    run(policy, view, [envelope(a, "cnet.award", "c", AwardPayload(winner="bid0", ranked=["bid0"], mode="verified"))], apply=True)
    root = JcsSha256().root(output)
    result = ResultPayload(state_root=root, output=base64.urlsafe_b64encode(output).rstrip(b"=").decode())
    cases[f"settled result ({len(output)} B output)"] = ([envelope(b, "cnet.result", "c", result) for _ in range(args.n)], dict(view))
    report = {}
    for name, (envs, state) in cases.items():
        runs = [run(policy, View(state), envs, apply=False) for _ in range(args.repeats)]
        report[name] = {"median_us": round(statistics.median(runs), 1), "range_us": [round(min(runs), 1), round(max(runs), 1)]}
    print(json.dumps({"bids_in_call": args.bids, "records_per_run": args.n, "us_per_record": report}))


if __name__ == "__main__":
    main()
