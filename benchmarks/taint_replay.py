"""The `taint-replay` policy's cost per request on the guard's hot path (docs/taint.md, "Replay requests on the stream").

Times what admission calls for one request: `parse` (strict decode of the
request, the duplicate-key pass, the trace's structure check and the
validator, plus encoding the forward for a valid plan) and `decide`. The
signature check and the store are not included (they are the same for every
kind). The cyclic GC runs, as it does in the guard. Traces: the seed's
incident (refused; with its ledger, a token-level plan), and random DAGs of
10 000 nodes and of the most nodes that fit the default
`batch.max_payload_bytes` (1 MiB), built by benchmarks/taint_validate.py's
generator. CPU time of the measuring thread, best of --repeats.

    .venv/bin/python benchmarks/taint_replay.py [--repeats 5] [--nodes 10000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.taint_validate import make_trace  # noqa: E402
from busguard.policies.seam import bare_context, policy_input  # noqa: E402
from busguard.policies.taint.replay import Parsed, TaintReplayPolicy, encode_request  # noqa: E402
from busguard.protocol.envelope import Envelope, open_envelope  # noqa: E402
from busguard.sdk.sender import Sender  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "taint"
MIB = 1_048_576


class _NoState:
    def get(self, key: tuple[str, str]) -> bytes | None:
        raise LookupError(key)


def envelope(payload: bytes) -> Envelope:
    rec = Sender(b"\x01" * 32, clock_ms=lambda: 0).sign(kind="taint-replay", task_id="bench", receiver="tulpa:bench", payload=payload)
    return open_envelope(rec.value, rec.headers, max_payload_bytes=64 * MIB)


def once(policy: TaintReplayPolicy, env: Envelope) -> tuple[float, str, int]:
    t0 = time.thread_time()
    parsed = policy.parse(policy_input(env), bare_context(0))
    out = policy.decide(parsed, _NoState(), 0) if isinstance(parsed, Parsed) else None
    dt = time.thread_time() - t0
    if out is None:
        return dt, f"objection {parsed.reason}", 0  # type: ignore[union-attr]
    if out.objection is not None:
        return dt, str(out.objection.reason), 0
    return dt, f"forward ({(out.annotations or {}).get('taint.unit')})", len(out.replacement or b"")


def largest_under(limit: int) -> tuple[bytes, int]:
    lo, hi = 1000, 20_000
    while lo < hi:  # the most nodes whose request fits `limit`
        mid = (lo + hi + 1) // 2
        if len(encode_request(make_trace(mid, 7, False, 64)[0])) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return encode_request(make_trace(lo, 7, False, 64)[0]), lo


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--nodes", type=int, default=10_000)
    args = ap.parse_args()
    trace = (EXAMPLES / "incident.trace.json").read_bytes()
    ledger = (EXAMPLES / "incident.ledger.json").read_bytes()
    big, _ = make_trace(args.nodes, 7, False, 64)
    fit, fit_nodes = largest_under(MIB)
    cases = [
        ("incident (refused)", 3, encode_request(trace)),
        ("incident + ledger", 3, encode_request(trace, ledger)),
        (f"window {args.nodes}", args.nodes, encode_request(big)),
        ("window, 1 MiB max", fit_nodes, fit),
    ]
    policy = TaintReplayPolicy()
    print(f"{'request':22} {'nodes':>7} {'bytes':>9} {'ms/request':>11} {'forward_bytes':>14}  verdict")
    for name, n, payload in cases:
        env = envelope(payload)
        runs = [once(policy, env) for _ in range(args.repeats)]
        best = min(r[0] for r in runs)
        _, verdict, fwd = runs[0]
        print(f"{name:22} {n:>7} {len(payload):>9} {best * 1000:>11.3f} {fwd:>14}  {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
