"""Every example agent builds its consumer with `AdmittingConsumer.open`
(docs/sdk.md): group id, commits only after the effect, `earliest`, and the
tolerant reader. An example is what agents are copied from, so none shows
the hand-built form, whose aiokafka defaults commit before the effect and
skip what is already on the topic, and which raises on a record it cannot
decode."""

from __future__ import annotations

import re
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_no_example_builds_an_admitting_consumer_by_hand() -> None:
    built = [
        f"{path.relative_to(EXAMPLES)}:{n}"
        for path in sorted(EXAMPLES.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\bAdmittingConsumer\(", line)
    ]
    assert not built, f"AdmittingConsumer(...) built by hand (use `await AdmittingConsumer.open(...)`): {built}"
    opened = [p for p in EXAMPLES.rglob("*.py") if "AdmittingConsumer.open(" in p.read_text(encoding="utf-8")]
    assert len(opened) >= 5, opened  # seed000's planner and executor, award, containment, compromise
