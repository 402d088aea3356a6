"""One live process per static member name (busguard.runtime.membership),
on both shared backends: a second claim of one name in one group is refused
with the holder named; a claim let go (or whose process died) can be taken."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from busguard.config import Config, load_config
from busguard.errors import ConfigError
from busguard.runtime.membership import claim_instance
from tests.pgkit import EmbeddedPostgres

REPO = Path(__file__).resolve().parents[2]
ROUTE = '[[routes]]\nname = "handoffs"\ninputs = ["agents.handoffs"]\ndownstream = "agents.handoffs.admitted"\n'


def _cfg(tmp_path: Path, state: str, instance: str | None = "guard-1") -> Config:
    path = tmp_path / "busguard.toml"
    kafka = "" if instance is None else f'[kafka]\ngroup_instance_id = "{instance}"\n'
    path.write_text(kafka + state + ROUTE, encoding="utf-8")
    return load_config(path, env={})


def test_dynamic_members_and_the_memory_backend_claim_nothing(tmp_path: Path) -> None:
    assert claim_instance(_cfg(tmp_path, "", instance=None), group_id="g", role="guard") is None
    assert claim_instance(_cfg(tmp_path, '[state]\nbackend = "memory"\n'), group_id="g", role="guard") is None


def test_sqlite_second_claim_is_refused_until_the_first_is_let_go(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, f'[state]\npath = "{tmp_path / "state.db"}"\n')
    first = claim_instance(cfg, group_id="g", role="guard")
    assert first is not None
    with pytest.raises(ConfigError) as info:
        claim_instance(cfg, group_id="g", role="guard")
    err = info.value
    assert (err.field, err.value) == ("kafka.group_instance_id", "guard-1")
    assert f"pid {os.getpid()}" in err.allowed and "'g'" in err.allowed
    other = claim_instance(cfg, group_id="other-group", role="reconciler")  # a name is per group
    assert other is not None
    other.close()
    first.close()
    again = claim_instance(cfg, group_id="g", role="guard")
    assert again is not None
    again.close()


def test_sqlite_claim_of_a_killed_process_is_free(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, f'[state]\npath = "{tmp_path / "state.db"}"\n')
    holder = _holder(cfg)
    try:
        with pytest.raises(ConfigError):
            claim_instance(cfg, group_id="g", role="guard")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    claim = claim_instance(cfg, group_id="g", role="guard")
    assert claim is not None
    claim.close()


def _holder(cfg: Config) -> subprocess.Popen[str]:
    """A process that claims guard-1 in group g and sleeps."""
    code = textwrap.dedent(
        f"""
        import sys, time
        from busguard.config import load_config
        from busguard.runtime.membership import claim_instance
        claim = claim_instance(load_config({cfg.source!r}, env={{}}), group_id="g", role="guard")
        print("claimed", flush=True)
        time.sleep(600)
        """
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.stdout is not None and p.stdout.readline().strip() == "claimed"
    return p


def test_postgres_second_claim_is_refused_with_the_holding_session_named(
    postgres: EmbeddedPostgres, pg_schema: str, tmp_path: Path
) -> None:
    cfg = _cfg(tmp_path, f'[state]\nbackend = "postgres"\ndsn = "{postgres.dsn}"\nschema = "{pg_schema}"\n')
    first = claim_instance(cfg, group_id="g", role="guard")
    assert first is not None
    try:
        with pytest.raises(ConfigError) as info:
            claim_instance(cfg, group_id="g", role="guard", wait_s=0.3)
        assert info.value.value == "guard-1" and "server session" in info.value.allowed, info.value.allowed
        # the same name in another group, or another deployment's schema, is another name
        for group, schema in (("other", pg_schema), ("g", pg_schema + "x")):
            c = _cfg(tmp_path, f'[state]\nbackend = "postgres"\ndsn = "{postgres.dsn}"\nschema = "{schema}"\n')
            other = claim_instance(c, group_id=group, role="guard", wait_s=0.3)
            assert other is not None
            other.close()
    finally:
        first.close()
    again = claim_instance(cfg, group_id="g", role="guard", wait_s=0.3)
    assert again is not None
    again.close()


def test_postgres_claim_of_a_killed_process_is_taken_after_a_wait(postgres: EmbeddedPostgres, pg_schema: str, tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, f'[state]\nbackend = "postgres"\ndsn = "{postgres.dsn}"\nschema = "{pg_schema}"\n')
    holder = _holder(cfg)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    started = time.monotonic()
    claim = claim_instance(cfg, group_id="g", role="guard", wait_s=30)
    assert claim is not None, time.monotonic() - started
    claim.close()
