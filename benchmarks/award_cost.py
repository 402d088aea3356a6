"""The award policy's cost per record (seed 002), pure: parse + keys + decide.

Builds one call with `--bids` admitted bids, then times the policy alone on
signed envelopes of each kind against a dict-backed view (no store, no
signature check): a bid (reads the call's row, writes its own rows), a
refused award (with its rebid notice over the bids it names), an admitted award, and a
result settled by recomputing the jcs-sha256 root of a ~1 KiB output. CPU
time of this thread (`time.thread_time_ns`), median of `--repeats` runs of
`--n` records each.

    .venv/bin/python benchmarks/award_cost.py [--n 5000] [--bids 8] [--repeats 5]

With `--state`, instead, what the policy keeps and where its time goes:

- bytes written per bid: the sum of the `PolicyWrite` values each admitted
  bid asks to persist, for the 1st, 8th and 64th bid of one call whose ids
  are at their longest (call and bid ids 256 characters, canonicalizer ids
  64, manifests 256; agent ids are self-certifying `tulpa:` ids, 54
  characters), one bid per bidder, and the total to fill a call;
- time inside the state transaction for a 1 MiB result: `decide` runs
  inside the batch's state transaction (the SQLite write lock, or
  PostgreSQL's advisory lock on the call's row), `parse` before it. Timed
  per step for a wrong-root result of a jcs-sha256 output of about 1 MiB
  (median of `--repeats`, CPU time of this thread); and the same resends
  through admission on a real SQLite store, wall time of `check_batch`
  (no lock) and of `admit_checked` (the `BEGIN IMMEDIATE` transaction).

Only the policy seam (parse, keys, decide) and admission's entry points are
used, so the same script measures any version of the policy.

    .venv/bin/python benchmarks/award_cost.py --state [--repeats 5]
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import msgspec  # noqa: E402

from busguard.policies.award.canonicalizers import JcsSha256  # noqa: E402
from busguard.policies.award.policy import AwardPolicy  # noqa: E402
from busguard.policies.award.wire import AwardPayload, BidPayload, CallPayload, ReceiptTemplate, ResultPayload  # noqa: E402
from busguard.policies.seam import Objection, PolicyKey, PolicyOutcome, bare_context, policy_input  # noqa: E402
from busguard.protocol.envelope import Envelope, open_envelope  # noqa: E402
from busguard.protocol.timestamps import format_timestamp  # noqa: E402
from busguard.sdk.sender import Sender  # noqa: E402

NOW = 1_795_953_600_000
DEADLINE = format_timestamp(NOW + 3_600_000)


class View(dict[PolicyKey, bytes]):
    def get(self, key: PolicyKey, default: bytes | None = None) -> bytes | None:  # type: ignore[override]
        return super().get(key, default)


def envelope(who: Sender, kind: str, task: str, payload: msgspec.Struct | dict[str, object]) -> Envelope:
    r = who.sign(kind=kind, task_id=task, receiver="guard", payload=msgspec.json.encode(payload))
    return open_envelope(r.value, r.headers, 4 << 20)


def run(policy: AwardPolicy, view: View, envs: list[Envelope], apply: bool) -> float:
    start = time.thread_time_ns()
    for env in envs:
        parsed = policy.parse(policy_input(env), bare_context(NOW))
        assert not isinstance(parsed, Objection)
        list(policy.keys(parsed))
        out: PolicyOutcome = policy.decide(parsed, view, NOW)
        if apply:
            for w in out.writes:
                view[w.key] = w.value
    return (time.thread_time_ns() - start) / len(envs) / 1000


def apply(policy: AwardPolicy, view: View, env: Envelope) -> int:
    """Decide `env` against `view`, apply its writes; the bytes written (-1: refused)."""
    parsed = policy.parse(policy_input(env), bare_context(NOW))
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
    apply(
        policy,
        view,
        envelope(
            awarder,
            "cnet.call",
            call,
            {"awarder": awarder.agent_id, "task_class": "t", "task": "x" * 4096, "requires_check": True, "award_deadline": DEADLINE},
        ),
    )
    written: list[int] = []
    template = {"canonicalizer_id": "z" * 64, "commits": "output", "verifier_manifest": "m" * 256}
    for i in range(64):
        bidder = Sender(bytes([i + 1]) * 32, clock_ms=lambda: NOW)  # one bid per bidder: no per-bidder limit applies
        n = apply(
            policy,
            view,
            envelope(bidder, "cnet.bid", f"{i:03d}".ljust(256, "b"), {"call": call, "cost": i, "deadline": DEADLINE, "receipt": template}),
        )
        assert n >= 0, i
        written.append(n)
    return {
        "bid_1_bytes": written[0],
        "bid_8_bytes": written[7],
        "bid_64_bytes": written[63],
        "total_bytes_64_bids": sum(written),
        "largest_row_bytes": max(map(len, view.values())),
    }


def settlement(policy: AwardPolicy, repeats: int) -> dict[str, object]:
    a, b = Sender(b"a" * 32, clock_ms=lambda: NOW), Sender(b"b" * 32, clock_ms=lambda: NOW)
    view = View()
    apply(
        policy,
        view,
        envelope(
            a, "cnet.call", "c", {"awarder": a.agent_id, "task_class": "t", "task": "x", "requires_check": True, "award_deadline": DEADLINE}
        ),
    )
    apply(
        policy,
        view,
        envelope(
            b,
            "cnet.bid",
            "bid0",
            {"call": "c", "cost": 1, "deadline": DEADLINE, "receipt": {"canonicalizer_id": "jcs-sha256", "commits": "output"}},
        ),
    )
    apply(policy, view, envelope(a, "cnet.award", "c", {"winner": "bid0", "ranked": ["bid0"], "mode": "verified"}))
    output = json.dumps([{"id": i, "v": "x" * 40, "n": i * 7} for i in range(15_000)]).encode()
    env = envelope(b, "cnet.result", "c", {"state_root": "0" * 64, "output": base64.urlsafe_b64encode(output).rstrip(b"=").decode()})
    parse_us, decide_us = [], []
    for _ in range(repeats):
        t0 = time.thread_time_ns()
        parsed = policy.parse(policy_input(env), bare_context(NOW))
        t1 = time.thread_time_ns()
        assert not isinstance(parsed, Objection)
        out = policy.decide(parsed, view, NOW)
        t2 = time.thread_time_ns()
        assert out.objection is not None and out.objection.reason.value == "settlement_mismatch", out
        parse_us.append((t1 - t0) / 1000)
        decide_us.append((t2 - t1) / 1000)
    return {
        "output_bytes": len(output),
        "parse_us_outside_lock": round(statistics.median(parse_us)),
        "decide_us_inside_lock": round(statistics.median(decide_us), 1),
    }


def in_store(repeats: int) -> dict[str, object]:
    """The same 1 MiB wrong-root result through admission on a SQLite store:
    `check_batch` (signature, parse: no lock) and `admit_checked` (one
    `BEGIN IMMEDIATE` ... `COMMIT`: the write lock, held throughout), wall
    time per batch of one record, median of `repeats` resends."""
    from busguard.admission.batch import Input, admit_checked, check_batch
    from busguard.admission.types import AdmissionPolicy
    from busguard.protocol.records import Coordinates
    from busguard.state.sqlite.store import SqliteStore
    from tests.unit.harness import registry, sender

    names = ("awarder", "bidder-b")
    a, b = (sender(n, now=NOW) for n in names)
    keys, policy = registry(*names), AdmissionPolicy()
    output = json.dumps([{"id": i, "v": "x" * 40, "n": i * 7} for i in range(15_000)]).encode()
    template = {"canonicalizer_id": "jcs-sha256", "commits": "output"}
    setup = [
        a.sign(
            kind="cnet.call",
            task_id="c",
            receiver="guard",
            payload=msgspec.json.encode(
                {"awarder": a.agent_id, "task_class": "t", "task": "x", "requires_check": True, "award_deadline": DEADLINE}
            ),
        ),
        b.sign(
            kind="cnet.bid",
            task_id="bid0",
            receiver="guard",
            payload=msgspec.json.encode({"call": "c", "cost": 1, "deadline": DEADLINE, "receipt": template}),
        ),
        a.sign(
            kind="cnet.award",
            task_id="c",
            receiver="guard",
            payload=msgspec.json.encode({"winner": "bid0", "ranked": ["bid0"], "mode": "verified"}),
        ),
    ]
    wrong = [
        b.sign(
            kind="cnet.result",
            task_id="c",
            receiver="guard",
            payload=msgspec.json.encode({"state_root": f"{i:064x}", "output": base64.urlsafe_b64encode(output).rstrip(b"=").decode()}),
        )
        for i in range(repeats)
    ]
    outside, inside = [], []
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(Path(tmp) / "state.db", now_ms=NOW - 3_600_000, genesis=True, synchronous="NORMAL")
        for offset, record in enumerate([*setup, *wrong]):
            batch = [Input(Coordinates(topic="in", partition=0, offset=offset), record.value, record.headers)]
            t0 = time.perf_counter_ns()
            checked = check_batch(batch, registry=keys, now_ms=NOW, policy=policy, max_payload_bytes=4 << 20)
            t1 = time.perf_counter_ns()
            (d,) = admit_checked(checked, store=store, now_ms=NOW, policy=policy)
            t2 = time.perf_counter_ns()
            if offset >= len(setup):
                assert d.reason == "settlement_mismatch", d.detail
                outside.append((t1 - t0) / 1000)
                inside.append((t2 - t1) / 1000)
            else:
                assert d.reason == "admitted", d.detail
        store.close()
    return {
        "check_batch_us_no_lock": round(statistics.median(outside)),
        "admit_checked_us_write_lock_held": round(statistics.median(inside)),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--bids", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--state", action="store_true", help="bytes written per bid and time inside the transaction for a 1 MiB result")
    args = ap.parse_args()
    if args.state:
        awarder = Sender(b"a" * 32, clock_ms=lambda: NOW)
        report = {
            "bids": bids(AwardPolicy(), View(), awarder),
            "settlement_1mib": settlement(AwardPolicy(), args.repeats),
            "sqlite_1mib_result": in_store(args.repeats),
        }
        print(json.dumps(report))
        return
    a, b = Sender(b"a" * 32, clock_ms=lambda: NOW), Sender(b"b" * 32, clock_ms=lambda: NOW)
    policy, view = AwardPolicy(), View()
    call = CallPayload(awarder=a.agent_id, task_class="t", task="x", requires_check=True, award_deadline=DEADLINE)
    run(policy, view, [envelope(a, "cnet.call", "c", call)], apply=True)
    template = ReceiptTemplate(canonicalizer_id="jcs-sha256", commits="output")
    bidders = [
        b,
        *(Sender(bytes([i % 250 + 2]) * 32, clock_ms=lambda: NOW) for i in range(1, args.bids)),
    ]  # one bid each: under the per-bidder limit
    run(
        policy,
        view,
        [
            envelope(bidders[i], "cnet.bid", f"bid{i}", BidPayload(call="c", cost=i, deadline=DEADLINE, receipt=template))
            for i in range(args.bids)
        ],
        apply=True,
    )
    extra = Sender(b"x" * 32, clock_ms=lambda: NOW)
    open_row = dict(view)
    output = json.dumps([{"id": i, "v": "x" * 20} for i in range(30)]).encode()
    cases = {
        "bid (own rows)": (
            [
                envelope(extra, "cnet.bid", f"extra{i}", BidPayload(call="c", cost=1, deadline=DEADLINE, receipt=template))
                for i in range(args.n)
            ],
            open_row,
        ),
        "refused award + rebid notice": (
            [envelope(a, "cnet.award", "c", AwardPayload(winner="nope", ranked=["nope"], mode="verified")) for _ in range(args.n)],
            open_row,
        ),
        "admitted award": (
            [envelope(a, "cnet.award", "c", AwardPayload(winner="bid0", ranked=["bid0"], mode="verified")) for _ in range(args.n)],
            open_row,
        ),
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
