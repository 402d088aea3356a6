"""`busguard state show` on a PostgreSQL store only looks: where there is no
store it says so and leaves none behind (opening one would create it, fenced,
and the next guard would take it for a lost store's replacement)."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from busguard.cli import main
from busguard.state.postgres.store import PostgresStore, store_exists
from tests.pgkit import EmbeddedPostgres

ROUTE = '[[routes]]\nname = "handoffs"\ninputs = ["agents.handoffs"]\ndownstream = "agents.handoffs.admitted"\n'


def _schema_exists(dsn: str, schema: str) -> bool:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is not None


def test_show_without_a_store_says_so_and_creates_nothing(
    postgres: EmbeddedPostgres, pg_schema: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "busguard.toml"
    config.write_text(f'[state]\nbackend = "postgres"\ndsn = "{postgres.dsn}"\nschema = "{pg_schema}"\n' + ROUTE, encoding="utf-8")

    assert main(["state", "show", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"{config}: state.schema = " in err and f"schema {pg_schema}" in err and "there is none" in err, err
    assert not _schema_exists(postgres.dsn, pg_schema) and not store_exists(postgres.dsn, schema=pg_schema)

    # an empty schema of that name (an operator's, or a dropped store's) is not a store either
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {pg_schema}")
        conn.execute(f"CREATE TABLE {pg_schema}.meta(k text PRIMARY KEY, v text NOT NULL)")
    assert main(["state", "show", "--config", str(config)]) == 2
    assert "there is none" in capsys.readouterr().err

    PostgresStore(postgres.dsn, now_ms=1_700_000_000_000, schema=pg_schema).close()
    assert store_exists(postgres.dsn, schema=pg_schema)
    assert main(["state", "show", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "origin created, created_at_ms 1700000000000" in out and "trusted_from_ms: 1700000000000" in out, out
