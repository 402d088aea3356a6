"""A kind from its own package, installed for real, through `busguard run`.

examples/quota_kind is installed (pip, into a directory of its own) and the
guard process finds it through its `busguard.kinds` entry point alone: no
file of busguard/ names it, and nothing registers it by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, all_decided, collect, header, identity, make_setup, produce, sender
from busguard.protocol.records import Decision

from .example_kinds import busguard, install_example
from .paths import REPO

EXAMPLE = REPO / "examples" / "quota_kind"


async def test_an_installed_kind_plugin_is_guarded_by_busguard_run(broker: EmbeddedBroker, tmp_path: Path) -> None:
    site = install_example(EXAMPLE, tmp_path)
    listed = {k["kind"]: k for k in json.loads(busguard(site, "kinds", "--json").stdout)}
    assert (
        listed["quota"]["origin"] == "plugin" and listed["quota"]["task_index"] is False and listed["quota"]["settings_section"] == "quota"
    )
    assert "quota" not in {k["kind"] for k in json.loads(busguard(tmp_path, "kinds", "--json").stdout)}  # not installed there

    s = await make_setup(tmp_path / "run", broker.bootstrap)
    with s.config.open("a") as f:
        f.write("\n[quota]\nmax_per_task = 2\n")
    bad = tmp_path / "bad.toml"
    bad.write_text(s.config.read_text().replace("max_per_task = 2", "max_per_task = 0"))
    refused = busguard(site, "check-config", "--config", str(bad))
    assert refused.returncode == 2 and "quota.max_per_task" in refused.stderr and str(bad) in refused.stderr, refused.stderr

    guard = GuardProcess(s, env={"PYTHONPATH": f"{site}:{REPO}"})
    guard.wait_ready()
    planner = sender("planner")
    to = identity("executor").agent_id
    parts = [planner.sign(kind="quota", task_id="stream-1", receiver=to, payload=b'{"part":%d}' % i) for i in range(3)]
    await produce(s.bootstrap, s.handoffs, [*parts, parts[0]])
    try:
        got = await collect(s.bootstrap, s.outputs, lambda c: all_decided(s, c, 4))
    finally:
        assert guard.terminate() == 0, guard.tail()
    assert [r.value for r in got[s.downstream_handoffs]] == [p.value for p in parts[:2]]
    assert sorted(header(r, "busguard-reason") for r in got[s.dead_letter]) == [b"nonce_replay", b"quota_exceeded"]
    audit = [msgspec.json.decode(r.value, type=Decision) for r in got[s.audit]]
    assert sorted((d.kind, d.reason) for d in audit) == [
        ("quota", "admitted"),
        ("quota", "admitted"),
        ("quota", "nonce_replay"),
        ("quota", "quota_exceeded"),
    ]
    # the auditor, where the kind is installed, proves the log: two forwards of one task are this kind's rule, not a violation
    report = busguard(site, "audit", "--config", str(s.config), "--idle-ms", "1000", "--json")
    assert report.returncode == 0, report.stdout + report.stderr
    data = json.loads(report.stdout)
    assert data["violations"] == []
    assert {"kind": "quota", "witness": "several", "rule": "several admitted per task allowed"} in data["kinds"]
    table = busguard(site, "audit", "--config", str(s.config), "--idle-ms", "1000")
    assert "busguard audit: OK" in table.stdout and "several admitted per task allowed" in table.stdout, table.stdout
    assert "(+1 more)" in table.stdout and "more!" not in table.stdout  # no warning mark for what the kind allows
