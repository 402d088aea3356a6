"""The auditor of seed 000: can the log prove each task ran exactly once?

* Behind busguard it runs `busguard audit --config busguard.toml --json`
  (exit 0: every invariant holds; 1: a violation), waiting up to `--settle`
  seconds for the reconciler to resolve pending escalations, and explains
  the lineage of every task that needed more than one record.
* Without busguard there is no decision log, only the raw topics, so it
  applies seed 000's rule itself: exactly one valid acknowledgment (its
  signature verifies) per task_id. Acks with the same nonce are one
  acknowledgment sent twice; two different nonces are two witnesses, and the
  task is AMBIGUOUS: the log cannot say whether it ran once or twice.

The report is also written to `audit.json` in the pipeline directory.

    python examples/seed000/auditor.py --pipeline DIR [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections import defaultdict
from typing import Any

from common import Pipeline, Refused, check_direct, die, headers_of, load_pipeline, read_all, short, write_json

NAME = "auditor"
RULE = "exactly one valid acknowledgment (signature verifies) per task_id"


# -- behind busguard -------------------------------------------------------------


def busguard_audit(pipeline: Pipeline) -> tuple[int, dict[str, Any]]:
    cmd = [sys.executable, "-m", "busguard.cli", "audit", "--config", str(pipeline.busguard_config), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if proc.returncode not in (0, 1) or not proc.stdout.strip():
        die(f"{NAME}: `{' '.join(cmd[1:])}` failed (exit {proc.returncode}):\n{proc.stderr.strip()}")
    return proc.returncode, json.loads(proc.stdout)


def audit_guarded(pipeline: Pipeline, settle_s: float) -> tuple[int, dict[str, Any]]:
    deadline = time.monotonic() + settle_s
    while True:
        rc, report = busguard_audit(pipeline)
        if report["summary"]["pending"] == 0 or time.monotonic() >= deadline:
            return rc, report
        time.sleep(1)  # an escalation is waiting for the reconciler


def explain_guarded(rc: int, report: dict[str, Any]) -> list[str]:
    s = report["summary"]
    lines = [
        f"busguard audit --json: {'ok' if report['ok'] else 'NOT ok'} (exit {rc})",
        "  " + ", ".join(f"{k} {v}" for k, v in s.items()),
    ]
    for t in report["tasks"]:
        if t["duplicates"] or t["escalations"] or t["supersedes"] or t["forwards"] != 1:
            lines.append(f"  {t['kind']} {t['task_id']}: admitted once (witness decision {short(t['witness'])}, receipt {short(t['witness_receipt_id'])})"
                         if t["forwards"] == 1 else f"  {t['kind']} {t['task_id']}: ADMITTED {t['forwards']} TIMES")  # fmt: skip
            lines.append(f"    duplicates (not forwarded): {t['duplicates']}")
            for e in t["escalations"]:
                state = f"resolved as {e['resolved_as']} by {e['by']}" if e["status"] == "resolved" else e["status"].upper()
                lines.append(f"    escalation {short(e['escalation_id'])}: {e['reason']}, {state}")
            for link in t["supersedes"]:
                lines.append(f"    {link['reason']}: receipt {short(link['receipt_id'])} supersedes {short(link['supersedes'])}")
    once = sum(1 for t in report["tasks"] if t["forwards"] == 1)
    lines.append(f"  {once} of {len(report['tasks'])} (kind, task) pairs have exactly one admitted witness")
    for v in report["violations"]:
        lines.append(f"  VIOLATION [{v['invariant']}] {v['detail']}")
    for p in report["pending"]:
        lines.append(f"  PENDING escalation {short(p['escalation_id'])}: {p['kind']} {p['task_id']} {p['reason']}")
    return lines


# -- without busguard ------------------------------------------------------------


async def audit_raw(pipeline: Pipeline) -> dict[str, Any]:
    records = await read_all(pipeline.bootstrap, [pipeline.handoffs, pipeline.acks])
    tasks: list[str] = []
    acks: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))  # task -> nonce -> receipt ids
    invalid = 0
    for msg in records:
        try:
            rec = check_direct(msg.value, headers_of(msg))
        except Refused:
            invalid += 1
            continue
        r = rec.receipt
        if r.kind == "handoff" and r.task_id not in tasks:
            tasks.append(r.task_id)
        elif r.kind == "ack":
            acks[r.task_id][f"{r.sender} {r.nonce}"].append(rec.receipt_id)
    rows, violations = [], []
    for task in tasks:
        witnesses = acks.get(task, {})
        verdict = "OK" if len(witnesses) == 1 else "AMBIGUOUS" if witnesses else "UNACKNOWLEDGED"
        row = {
            "task_id": task,
            "verdict": verdict,
            "acknowledgments": [{"nonce": k.split(" ", 1)[1], "records": len(ids), "receipt_ids": ids} for k, ids in witnesses.items()],
        }
        rows.append(row)
        if verdict != "OK":
            violations.append({"task_id": task, "verdict": verdict, "detail": f"{len(witnesses)} valid acknowledgments"})
    return {
        "ok": not violations,
        "rule": RULE,
        "summary": {
            "tasks": len(tasks),
            "ack_records": sum(len(ids) for w in acks.values() for ids in w.values()),
            "acknowledgments": sum(len(w) for w in acks.values()),
            "invalid_records": invalid,
            "ambiguous": sum(1 for r in rows if r["verdict"] == "AMBIGUOUS"),
            "unacknowledged": sum(1 for r in rows if r["verdict"] == "UNACKNOWLEDGED"),
        },
        "tasks": rows,
        "violations": violations,
    }


def explain_raw(report: dict[str, Any]) -> list[str]:
    s = report["summary"]
    lines = [f"rule: {RULE}", "  " + ", ".join(f"{k} {v}" for k, v in s.items())]
    for row in report["tasks"]:
        nonces = ", ".join(f"{a['nonce']}" + (f" (x{a['records']})" if a["records"] > 1 else "") for a in row["acknowledgments"])
        lines.append(f"  {row['task_id']}: {row['verdict']}  valid acks: {nonces or '-'}")
    for v in report["violations"]:
        lines.append(f"  {v['verdict']}: {v['task_id']} has {v['detail']}; the log cannot prove it ran exactly once")
    lines.append(f"verdict: {'ok' if report['ok'] else 'NOT ok'}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pipeline", required=True, help="pipeline.json (or its directory), from run.py")
    ap.add_argument("--json", action="store_true", help="print the report as JSON instead of prose")
    ap.add_argument("--settle", type=float, default=30, help="busguard: wait this long for pending escalations to be resolved")
    args = ap.parse_args()
    pipeline = load_pipeline(args.pipeline)
    if pipeline.guarded:
        rc, report = audit_guarded(pipeline, args.settle)
        lines = explain_guarded(rc, report)
    else:
        report = asyncio.run(audit_raw(pipeline))
        rc, lines = (0 if report["ok"] else 1), explain_raw(report)
    write_json(pipeline.path / "audit.json", report)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print("\n".join(f"{NAME}: {line}" for line in lines), flush=True)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
