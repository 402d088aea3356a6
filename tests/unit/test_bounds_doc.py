"""docs/operations.md "Bounds" names a test for every bound it states; this
keeps those names true as tests are renamed or removed."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OPERATIONS = REPO / "docs" / "operations.md"
_REF = re.compile(r"`(tests/[\w/]+\.py)::(\w+)")


def _section() -> str:
    text = OPERATIONS.read_text(encoding="utf-8")
    start = text.index("\n## 17. Bounds\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _rows(section: str) -> list[str]:
    return [
        line
        for line in section.splitlines()
        if line.startswith("| ") and not line.startswith("| ---") and not line.startswith("| resource ") and not line.startswith("| row ")
    ]


def test_every_bound_names_at_least_one_test() -> None:
    rows = _rows(_section())
    assert len(rows) >= 30
    untested = [row.split(" | ")[0] for row in rows if not _REF.search(row.rsplit(" | ", 1)[-1])]
    assert untested == [], f"bounds without a test in their last column: {untested}"


def test_every_named_test_exists() -> None:
    refs = _REF.findall(_section())
    assert refs
    missing = []
    for path, name in refs:
        file = REPO / path
        if not file.is_file() or not re.search(rf"^(async )?def {name}\(", file.read_text(encoding="utf-8"), re.M):
            missing.append(f"{path}::{name}")
    assert missing == [], f"docs/operations.md 'Bounds' names tests that do not exist: {missing}"
