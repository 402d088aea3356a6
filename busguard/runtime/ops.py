"""Prometheus metrics and the /healthz readiness endpoint, on one small HTTP port.

A hand-rolled asyncio responder rather than prometheus_client's threaded
server: it shares the guard's event loop, so /healthz reports the loop's real
state (a wedged loop stops answering, which is what a probe should see).
"""

from __future__ import annotations

import asyncio
import errno
import time
from collections.abc import Callable

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

log = structlog.get_logger(__name__)


class Metrics:
    def __init__(self, role: str = "guard") -> None:
        self.registry = CollectorRegistry()
        self.decisions = Counter(
            "busguard_decisions_total", "Records decided, by outcome and reason", ["outcome", "reason"], registry=self.registry
        )
        self.batch_seconds = Histogram(
            "busguard_batch_seconds",
            "Wall time of one batch through decide, persist, produce and commit",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.phase_seconds = Histogram(
            "busguard_batch_phase_seconds",
            "Wall time of each step of the batch protocol",
            ["phase"],
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=self.registry,
        )
        #: each phase's child, looked up once: `labels()` takes a lock and a
        #: dict lookup on every call, several times per batch
        self.phase = {p: self.phase_seconds.labels(p) for p in ("verify", "decide_persist", "seal", "process", "produce", "commit")}
        self.housekeeping_seconds = Histogram(
            "busguard_housekeeping_seconds",
            "Wall time of one housekeeping pass (expiry, row counts, heap release); no batch runs meanwhile",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.batch_records = Histogram(
            "busguard_batch_records", "Records per batch", buckets=(1, 10, 50, 100, 250, 500, 1000, 5000), registry=self.registry
        )
        self.lag = Gauge(
            "busguard_consumer_lag", "High watermark minus position, per input partition", ["topic", "partition"], registry=self.registry
        )
        self.state_rows = Gauge("busguard_state_rows", "Rows in the state store, per table", ["table"], registry=self.registry)
        self.commit_failures = Counter(
            "busguard_commit_failures_total", "Offset commits refused because the group rebalanced", registry=self.registry
        )
        self.store_rearms = Counter(
            "busguard_store_rearms_total",
            "Times the state store found itself behind the consumer group's committed offsets (restored, rolled back or lost) and re-armed its fence",
            registry=self.registry,
        )
        self.store_fence_end = Gauge(
            "busguard_store_fence_end_ms",
            "Unix ms at which the state store's fence stops refusing records (0: no fence, a genesis store)",
            registry=self.registry,
        )
        self.reloads = Counter(
            "busguard_config_reloads_total",
            "Changes of a followed file (key registry, operators) picked up (result=reloaded) "
            "or refused, the previous contents staying in force (result=error)",
            ["file", "result"],
            registry=self.registry,
        )
        self.replaced_decisions = Counter(
            "busguard_replaced_decisions_total",
            "Decided input positions found holding a different record (a recreated or rewritten topic) and judged afresh",
            ["topic"],
            registry=self.registry,
        )
        self.role = role

    def render(self) -> bytes:
        return bytes(generate_latest(self.registry))


#: Metrics.role -> the command that runs it, for errors a person reads.
_PROCESS = {"guard": "the guard (busguard run)", "reconcile": "the reconciler (busguard reconcile)"}


class OpsPortUnavailable(Exception):
    """The ops endpoint could not listen where `[ops]` says: most often
    another process on the host holds the port (a guard and a reconciler
    started from one config). The command turns it into one config-error
    line naming `ops.port` (busguard/commands/services.py)."""

    def __init__(self, role: str, host: str, port: int, error: OSError) -> None:
        self.role = role
        self.host = host
        self.port = port
        self.error = error
        super().__init__(self.explain())

    def explain(self) -> str:
        why = self.error.strerror or str(self.error)
        held = " (another process on this host holds it)" if self.error.errno == errno.EADDRINUSE else ""
        process = _PROCESS.get(self.role, self.role)
        return (
            f"{process} cannot open its ops endpoint (/metrics, /healthz) on {self.host}:{self.port}: {why}{held}; "
            "give each busguard process on a host its own port ([ops] port in its config, or BUSGUARD_OPS__PORT=<port> "
            "in its environment; 0 turns the endpoint off)"
        )


class OpsServer:
    def __init__(self, metrics: Metrics, ready: Callable[[], tuple[bool, str]], host: str, port: int) -> None:
        self.metrics = metrics
        self.ready = ready
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        try:
            self._server = await asyncio.start_server(self._handle, self.host, self.port)
        except OSError as exc:  # EADDRINUSE, EACCES below 1024, EADDRNOTAVAIL for a host not on this machine
            raise OpsPortUnavailable(self.metrics.role, self.host, self.port, exc) from None
        bound = int(self._server.sockets[0].getsockname()[1])
        log.info("ops endpoint listening", host=self.host, port=bound, paths=["/metrics", "/healthz"])
        return bound

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            path = request.split(b" ", 2)[1].decode("latin-1") if request.count(b" ") >= 2 else "/"
            if path.startswith("/metrics"):
                status, ctype, body = "200 OK", CONTENT_TYPE_LATEST, self.metrics.render()
            elif path.startswith("/healthz"):
                ok, why = self.ready()
                status, ctype, body = ("200 OK" if ok else "503 Service Unavailable"), "text/plain", why.encode() + b"\n"
            else:
                status, ctype, body = "404 Not Found", "text/plain", b"try /metrics or /healthz\n"
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()


class Liveness:
    """Ready once started and assigned, and while the loop keeps polling."""

    def __init__(self, stall_after_s: float) -> None:
        self.started = False
        self.stopping = False
        self.last_poll = 0.0
        self.stall_after_s = stall_after_s

    def polled(self) -> None:
        self.last_poll = time.monotonic()

    def check(self) -> tuple[bool, str]:
        if self.stopping:
            return False, "draining"
        if not self.started:
            return False, "starting"
        idle = time.monotonic() - self.last_poll
        if idle > self.stall_after_s:
            return False, f"no poll for {idle:.0f}s"
        return True, "ok"
