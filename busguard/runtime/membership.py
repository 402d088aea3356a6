"""One live process per static member name (kafka.group_instance_id).

Two live consumers under one instance id are a misconfiguration the brokers
do not reliably stop: Apache Kafka fences the older one, but aiokafka's
heartbeats carry no instance id, so the fenced member sees only "unknown
member", rejoins, and fences the other in turn; tansu hands both processes
the same partitions (docs/notes-broker.md, "Static membership"). So before
a guard or reconciler joins its group as a static member it claims the name
where every process of the deployment can see it, in its shared state:

* PostgreSQL: a session advisory lock on a connection held for the process's
  life (two-int key space, apart from the batches' one-bigint policy locks),
  with server-side TCP keepalives so the session of a holder whose host died
  ends within about 15 s; the server drops it at once when the process dies
  on a live host (kill -9 closes the socket).
* SQLite (one host): an exclusive `flock` on a file beside the state file,
  dropped by the kernel when the process dies.

A claim held by another live process is refused with the holder named, so
the second process exits at start with a clear error instead of joining.
The memory backend has no shared state and claims nothing.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from pathlib import Path
from typing import IO, Any, Final, Protocol

import structlog

from busguard.config import Config
from busguard.config_checks import group_instance_id
from busguard.errors import ConfigError, StoreUnreachable

__all__ = ["Claim", "claim_instance"]

log = structlog.get_logger("busguard.runtime.membership")

_PG_CLASS: Final = 0x62_67_69_64  # "bgid": the first int of the two-int advisory key
#: How long a start waits for a PostgreSQL claim to be let go: enough for the
#: server's keepalives (below) to end the session of a holder whose host died.
PG_WAIT_S: Final = 20.0
_KEEPALIVE: Final = "-c tcp_keepalives_idle=5 -c tcp_keepalives_interval=2 -c tcp_keepalives_count=3"


class Claim(Protocol):
    def close(self) -> None: ...


def _holder() -> str:
    return f"pid {os.getpid()} on {socket.gethostname()}"


def _refused(cfg: Config, instance: str, group_id: str, holder: str) -> ConfigError:
    log.error("static member name in use by another live process", group_instance_id=instance, group=group_id, held_by=holder)
    return ConfigError(
        cfg.source,
        "kafka.group_instance_id",
        instance,
        f"a name no other live process of group {group_id!r} uses; {holder} holds it (give each process its own, e.g. BUSGUARD_KAFKA__GROUP_INSTANCE_ID)",
    )


class _FileClaim:
    def __init__(self, fh: IO[str]) -> None:
        self._fh = fh

    def close(self) -> None:
        self._fh.close()


def _file_claim(cfg: Config, instance: str, group_id: str, role: str) -> Claim:
    import fcntl

    digest = hashlib.sha256(f"{group_id}\0{instance}".encode()).hexdigest()[:16]
    path = Path(f"{cfg.path(cfg.state.path)}.member-{digest}.lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(path, "a+", encoding="utf-8")
    except OSError as exc:
        problem = " ".join(f"cannot create the static member lock file beside it ({type(exc).__name__}: {exc})".split())
        raise StoreUnreachable.unwritable(cfg.source, "state.path", str(cfg.path(cfg.state.path)), problem) from None
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        holder = fh.read().strip() or "another process"
        fh.close()
        raise _refused(cfg, instance, group_id, holder) from None
    fh.seek(0)
    fh.truncate()
    fh.write(f"{_holder()} ({role}, group {group_id}, instance {instance})\n")
    fh.flush()
    return _FileClaim(fh)


class _PgClaim:
    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def close(self) -> None:
        try:
            self._conn.close()  # ends the session, and with it the lock
        except Exception:
            pass


def _pg_claim(cfg: Config, instance: str, group_id: str, role: str, wait_s: float) -> Claim:
    import psycopg
    from psycopg.conninfo import make_conninfo

    from busguard.state.redact import redact, scrub

    st = cfg.state
    objid = int.from_bytes(hashlib.blake2b(f"{st.schema}\0{group_id}\0{instance}".encode(), digest_size=4).digest(), "big", signed=True)
    name = f"busguard {role} {instance}"[:63]
    # As a state store opening waits (state/postgres/db.py): up to state.retry_s, then one line.
    given_up = time.monotonic() + st.retry_s
    delay = 0.05
    while True:
        try:
            conn = psycopg.connect(make_conninfo(st.dsn, options=_KEEPALIVE), autocommit=True, application_name=name, connect_timeout=10)
            break
        except psycopg.OperationalError as exc:
            error = scrub((str(exc).strip() or type(exc).__name__).splitlines()[0], st.dsn)
            if time.monotonic() >= given_up:
                raise StoreUnreachable.postgres(
                    cfg.source, redact(st.dsn), f"no answer to 'claim the static member name': {error}", st.retry_s
                ) from None
            log.warning(
                "state database unavailable; retrying",
                target=redact(st.dsn),
                operation="claim the static member name",
                error=error,
                retry_in_s=round(delay, 3),
            )
            time.sleep(min(delay, max(0.0, given_up - time.monotonic())))
            delay = min(delay * 2, 2.0)
        except psycopg.Error as exc:
            raise ConfigError(
                cfg.source,
                "state.dsn",
                redact(st.dsn),
                f"a PostgreSQL to claim the static member name on ({scrub(' '.join(str(exc).split()), st.dsn)})",
            ) from None
    deadline = time.monotonic() + wait_s
    waited = False
    while True:
        row = conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (_PG_CLASS, objid)).fetchone()
        if row is not None and row[0]:
            if waited:
                log.info("static member name free again; claimed", group_instance_id=instance, group=group_id)
            return _PgClaim(conn)
        held = conn.execute(
            "SELECT a.pid, a.client_addr::text, a.backend_start FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.classid = %s::oid AND l.objid = %s::bigint::oid AND l.objsubid = 2 AND l.granted",
            (_PG_CLASS, objid & 0xFFFFFFFF),
        ).fetchone()
        holder = (
            "a live session"
            if held is None
            else f"server session {held[0]} from {held[1] or 'a local socket'} since {held[2]:%Y-%m-%dT%H:%M:%SZ}"
        )
        if time.monotonic() >= deadline:
            conn.close()
            raise _refused(cfg, instance, group_id, holder)
        if not waited:
            log.warning(
                "static member name held; waiting in case its holder has just died",
                group_instance_id=instance,
                group=group_id,
                held_by=holder,
                wait_s=wait_s,
            )
            waited = True
        time.sleep(0.5)


def claim_instance(cfg: Config, *, group_id: str, role: str, wait_s: float = PG_WAIT_S) -> Claim | None:
    """Claim kafka.group_instance_id in `group_id` for this process, or raise
    ConfigError naming the live holder. None with dynamic membership or the
    memory backend. Close the claim when the process is done with the group."""
    instance = group_instance_id(cfg)
    if instance is None:
        return None
    if cfg.state.backend == "postgres":
        return _pg_claim(cfg, instance, group_id, role, wait_s)
    from busguard.state.backends import backend

    if backend(cfg.state.backend).where == "state.path":  # a store on this host's disk: a lock file beside it
        return _file_claim(cfg, instance, group_id, role)
    return None
