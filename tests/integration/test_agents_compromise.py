"""Seed 004's compromised session and its successor as processes through a real `busguard run`:
the successor acts once on each handoff, on only the components verified against the signed
scope; the out-of-scope `memory` is never used (stripped by busguard from the declared-compromise
handoff, received but refused by the successor's own check in the clean one); a second reading
(a re-delivery) is skipped; `busguard audit` is clean.

Runs examples/compromise/run.py as a user would, against the session broker, then checks the facts
again independently of the example: the successor's database and the raw downstream topic."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from busguard.config import load_config
from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import collect_all, header, identity
from busguard.policies.compromise.message import decode_handoff
from busguard.protocol.attestation import verify_admitted
from busguard.protocol.keyfile import read_key
from busguard.protocol.receipt import decode_receipt

from .example_runs import run_example
from .paths import REPO

RUN = REPO / "examples" / "compromise" / "run.py"
HANDOFF = "handoff-2026-12-02"


async def test_the_successor_acts_once_on_only_the_verified_components(broker: EmbeddedBroker, tmp_path: Path) -> None:
    returncode, output, result = await run_example(RUN, broker.bootstrap, tmp_path)
    assert returncode == 0, output
    assert result["audit_exit"] == 0 and result["audit"]["ok"] is True and result["audit"]["violations"] == [], output
    assert (result["first"]["acted"], result["again"]["acted"], result["again"]["skipped"]) == (2, 0, 2), output

    db = sqlite3.connect(tmp_path / "successor.db")
    used = sorted(db.execute("SELECT handoff_id, name FROM used_components").fetchall())
    assert used == sorted((h, n) for h in (HANDOFF, HANDOFF + "-unlisted") for n in ("plan", "log"))
    handoffs = dict(db.execute("SELECT handoff_id, verdict FROM handoffs").fetchall())
    assert handoffs == {HANDOFF: "scoped", HANDOFF + "-unlisted": "clean"}
    assert db.execute("SELECT count(*) FROM busguard_done").fetchone() == (2,)
    assert db.execute("SELECT content FROM used_components WHERE handoff_id = ? AND name = 'plan'", (HANDOFF,)).fetchone() == (
        b'{"next":"deploy v2"}',
    )

    # The downstream topic as busguard wrote it: the declared-compromise handoff without `memory`
    # (replaced value, attested), the clean one as sent with `memory`, which the successor did not use.
    cfg = load_config(result["config"], env={})
    guard = read_key(Path(cfg.keys.guard_key))
    got = await collect_all(broker.bootstrap, [result["downstream"]])
    forwards = {decode_receipt(header(r, "busguard-receipt") or b"").task_id: r for r in got[result["downstream"]]}
    assert set(forwards) == {HANDOFF, HANDOFF + "-unlisted"}
    me = identity("successor").agent_id
    scoped, clean = forwards[HANDOFF], forwards[HANDOFF + "-unlisted"]
    assert verify_admitted(scoped.value, list(scoped.headers), guard.public_key, me).forwarded_sha256 is not None
    assert verify_admitted(clean.value, list(clean.headers), guard.public_key, me).forwarded_sha256 is None
    assert [c.name for c in decode_handoff(scoped.value).components] == ["plan", "log"]
    assert [c.name for c in decode_handoff(clean.value).components] == ["plan", "log", "memory"]
