"""Apache Kafka itself, on loopback: the broker users run, for the tests and ``busguard kafka``.

A development tool beside :class:`busguard.devtools.broker.EmbeddedBroker`
(tansu), with the same shape. The broker is the pinned Apache Kafka of
``kafka/pom.xml``, fetched by Maven into ``.cache/kafka/<version>/libs`` (not
committed) when that directory is missing, then, per node: formatted with
``kafka.tools.StorageTool format`` into a fresh data directory and started as
``java -Xmx<heap> -cp '<libs>/*' kafka.Kafka server.properties`` in its own
process group, its output in ``kafka.log``.

Each node is a KRaft *combined* node (``process.roles=broker,controller``) on
127.0.0.1 with two free ports (client listener, controller listener). With
``brokers=3`` the three nodes are the three voters of one controller quorum and
the three brokers of one cluster: replication factor 3 by default,
``min.insync.replicas=2``; one node killed leaves a quorum (2 of 3) and an ISR
that still accepts ``acks=all``. Auto topic creation is off: create every topic.

Needs Java 17+ (Kafka 4.x refuses older) and, for the first fetch, Maven; when
either is missing :class:`KafkaUnavailable` says in one line what to install.

Usage::

    with ApacheKafka() as kafka:                 # or: async with ApacheKafka()
        await create_topics(kafka.bootstrap, ["in"], partitions=4)

    async with ApacheKafka(brokers=3) as cluster:
        cluster.kill(1)                          # SIGKILL node 1's JVM
        await cluster.arestart(1)                # same ports, same data
        await cluster.arestart_all()             # all three stopped and started on their data
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import structlog
from aiokafka.admin import AIOKafkaAdminClient

from busguard.devconfig import APACHE_KAFKA_KAFKA, register_broker
from busguard.devtools.broker import HOST, BrokerError, free_port, signal_group

__all__ = [
    "DEFAULT_HEAP_MB",
    "NODE_SETTINGS",
    "POM",
    "ApacheKafka",
    "KafkaUnavailable",
    "cluster_settings",
    "ensure_libs",
    "kafka_version",
    "require_java",
]

_log = structlog.get_logger(__name__)

_REPO = Path(__file__).resolve().parents[2]
POM = _REPO / "kafka" / "pom.xml"
"""The pom that pins the broker's version and jars (kept in the repository)."""
_LOG4J = _REPO / "kafka" / "log4j2.properties"
_CACHE_ENV = "BUSGUARD_KAFKA_CACHE"
_DEFAULT_CACHE = _REPO / ".cache" / "kafka"
_STAMP = ".complete"  # written last: holds the pom's sha256, so a changed pom refetches

DEFAULT_HEAP_MB = 512
"""Each node's ``-Xmx`` (and the ceiling of its heap; the JVM's RSS is above it)."""
_MIN_JAVA = 17
_PORT_ATTEMPTS = 3  # a port picked by free_port() can be taken before the JVM binds it
# The JVM reads these behind our back; strip them so the caller's environment
# cannot change the heap, add agents or point log4j elsewhere.
_JAVA_ENV = (
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "CLASSPATH",
    "KAFKA_HEAP_OPTS",
    "KAFKA_OPTS",
    "LOG4J_CONFIGURATION_FILE",
)

JAVA_HINT = f"Java {_MIN_JAVA}+ is needed to run Apache Kafka: install a JDK {_MIN_JAVA}+ (Debian: apt-get install openjdk-17-jdk-headless)"
MAVEN_HINT = "Maven is needed to fetch Apache Kafka (kafka/pom.xml) the first time: install Maven 3.6+ (Debian: apt-get install maven)"


class KafkaUnavailable(BrokerError):
    """Java or Maven is missing, the fetch failed, or the pom is not there: one line says which."""


def kafka_version(pom: Path = POM) -> str:
    """The ``kafka.version`` property of ``kafka/pom.xml``: the one place it is pinned."""
    if not pom.is_file():
        raise KafkaUnavailable(f"{pom}: not found; Apache Kafka runs from a checkout of busguard (kafka/pom.xml pins it)")
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    node = ET.parse(pom).getroot().find("m:properties/m:kafka.version", ns)
    if node is None or not (node.text or "").strip():
        raise KafkaUnavailable(f"{pom}: field properties/kafka.version is missing; it must name the Apache Kafka version")
    return (node.text or "").strip()


def _cache_root() -> Path:
    return Path(os.environ[_CACHE_ENV]) if os.environ.get(_CACHE_ENV) else _DEFAULT_CACHE


def _pom_digest(pom: Path) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()


def libs_dir(pom: Path = POM) -> Path:
    """Where the broker's jars are (or will be) for the pinned version."""
    return _cache_root() / kafka_version(pom) / "libs"


def libs_current(pom: Path = POM) -> bool:
    """Whether the cache holds a complete fetch made from this very pom."""
    stamp = libs_dir(pom) / _STAMP
    return stamp.is_file() and stamp.read_text(encoding="utf-8").strip() == _pom_digest(pom)


def ensure_libs(pom: Path = POM) -> Path:
    """The broker's jars, fetched by Maven into the cache first if they are not there.

    A fetch goes into a temporary sibling directory that is renamed into place
    only when Maven succeeded, so an interrupted fetch never leaves a partial
    ``libs`` that looks complete.
    """
    libs = libs_dir(pom)
    if libs_current(pom):
        return libs
    digest = _pom_digest(pom)
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaUnavailable(MAVEN_HINT)
    libs.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="libs-", dir=libs.parent))
    cmd = [mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(pom), "dependency:copy-dependencies", f"-Dkafka.libs={staging}"]
    started = time.monotonic()
    _log.info("kafka.fetch", version=kafka_version(pom), into=str(libs))
    done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise KafkaUnavailable(f"mvn could not fetch Apache Kafka {kafka_version(pom)} (exit {done.returncode}): {' '.join(cmd)}\n{tail}")
    (staging / _STAMP).write_text(digest + "\n", encoding="utf-8")
    if libs.exists():
        shutil.rmtree(libs)
    staging.rename(libs)
    _log.info("kafka.fetched", version=kafka_version(pom), libs=str(libs), seconds=round(time.monotonic() - started, 1))
    return libs


NODE_SETTINGS = frozenset(
    {
        "node.id",
        "controller.quorum.voters",
        "listeners",
        "advertised.listeners",
        "listener.security.protocol.map",
        "log.dirs",
    }
)
"""The settings each node (or each deployment's network) has its own value for:
its id, the quorum's addresses, its listeners and ports, its data directory.
Every other setting a node gets is :func:`cluster_settings`."""


def cluster_settings(brokers: int) -> dict[str, str]:
    """The settings every node of a ``brokers``-node cluster shares: what differs from Apache Kafka's defaults, and why.

    The one source of the broker's behaviour for the test clusters,
    ``busguard kafka`` and ``compose/docker-compose.yml`` (whose ``KAFKA_*``
    variables must say the same: ``tests/unit/test_compose.py`` compares them).
    """
    if brokers < 1:
        raise ValueError(f"brokers must be 1 or more, not {brokers}")
    n = brokers
    return {
        "process.roles": "broker,controller",  # combined KRaft node
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        # topics are created explicitly, by the tests and by busguard (issue 36)
        "auto.create.topics.enable": "false",
        "num.partitions": "1",
        "default.replication.factor": str(n),
        "min.insync.replicas": str(min(2, n)),
        "offsets.topic.replication.factor": str(n),
        "transaction.state.log.replication.factor": str(n),
        "transaction.state.log.min.isr": str(min(2, n)),
        "share.coordinator.state.topic.replication.factor": str(n),
        "share.coordinator.state.topic.min.isr": str(min(2, n)),
        # the internal topics are created on first use; 50 partitions each
        # (the default) costs seconds on a 2-core machine for nothing here
        "offsets.topic.num.partitions": "8",
        "transaction.state.log.num.partitions": "8",
        # a group's first join is not held back 3 s waiting for more members
        "group.initial.rebalance.delay.ms": "0",
        # two cores: fewer idle threads
        "num.network.threads": "2",
        "num.io.threads": "4",
        "num.recovery.threads.per.data.dir": "1",
    }


_java_checked: dict[str, str] = {}  # java path -> the first line of its `java -version`


def require_java() -> str:
    """The ``java`` on PATH, checked to be version 17 or newer."""
    java = shutil.which("java")
    if java is None:
        raise KafkaUnavailable(JAVA_HINT)
    if java in _java_checked:
        return java
    done = subprocess.run([java, "-version"], stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    banner = (done.stderr or done.stdout).strip()
    found = re.search(r'version "(\d+)(?:\.(\d+))?', banner)
    major = 0 if found is None else int(found.group(1)) if found.group(1) != "1" else int(found.group(2) or 0)
    if done.returncode != 0 or major < _MIN_JAVA:
        first = banner.splitlines()[0] if banner else f"exit {done.returncode}"
        raise KafkaUnavailable(f"{java} is {first!r}; {JAVA_HINT}")
    _java_checked[java] = banner.splitlines()[0]
    return java


def _cluster_id() -> str:
    """A KRaft cluster id: a random UUID in URL-safe base64 without padding
    (what ``random-uuid`` prints), never one starting with "-": the format
    tool would read it as an option (1 start in 64 failed so)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


@dataclass
class _Node:
    index: int
    dir: Path
    port: int = 0
    controller_port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def node_id(self) -> int:
        return self.index + 1

    @property
    def log_path(self) -> Path:
        return self.dir / "kafka.log"

    @property
    def properties(self) -> Path:
        return self.dir / "server.properties"

    @property
    def data(self) -> Path:
        return self.dir / "data"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class ApacheKafka:
    """One Apache Kafka node, or a cluster of ``brokers`` combined KRaft nodes, on 127.0.0.1.

    ``start()``/``stop()`` block; ``astart()``/``astop()`` are the same for async
    code; both context-manager forms work. Everything (data, ``server.properties``,
    ``kafka.log``) lives under ``log_dir/node-<i>`` (or a temporary directory
    that is removed on stop). Data survives :meth:`kill`/:meth:`restart` of a
    node, not :meth:`stop`.
    """

    def __init__(
        self,
        *,
        brokers: int = 1,
        log_dir: str | os.PathLike[str] | None = None,
        heap_mb: int = DEFAULT_HEAP_MB,
        startup_timeout: float = 120.0,
        stop_grace: float = 30.0,
        overrides: dict[str, str] | None = None,
    ) -> None:
        if brokers < 1:
            raise ValueError(f"brokers must be 1 or more, not {brokers}")
        self.brokers = brokers
        self.heap_mb = heap_mb
        self.overrides = dict(overrides or {})
        self._log_dir = Path(log_dir) if log_dir is not None else None
        self._owned_dir: Path | None = None
        self._startup_timeout = startup_timeout
        self._stop_grace = stop_grace
        self._nodes: list[_Node] = []
        self._cluster_id = _cluster_id()
        self._libs: Path | None = None
        self._java: str | None = None
        self._spawned_at = 0.0
        self.version = kafka_version()
        self.ready_seconds: float | None = None
        """Seconds from the last (re)start's spawn (format excluded) to a metadata answer listing every live broker."""
        self.format_seconds: float | None = None
        """Seconds the ``kafka-storage format`` step took (all nodes, run side by side)."""

    # -- properties -------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """``"127.0.0.1:P1,127.0.0.1:P2,..."``, for ``bootstrap_servers``."""
        return ",".join(f"{HOST}:{n.port}" for n in self._live_nodes())

    def bootstrap_of(self, index: int) -> str:
        """One node's client address (it may be down: see :meth:`kill`)."""
        return f"{HOST}:{self._node(index).port}"

    @property
    def port(self) -> int:
        """The first node's client port."""
        return self._live_nodes()[0].port

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def log_dir(self) -> Path | None:
        """The directory holding each ``node-<i>`` (None before start)."""
        return self._log_dir if self._log_dir is not None else self._owned_dir

    @property
    def running(self) -> bool:
        return bool(self._nodes) and all(n.running() for n in self._nodes)

    @property
    def pid(self) -> int | None:
        return self.pid_of(0) if self._nodes else None

    def pid_of(self, index: int) -> int | None:
        node = self._node(index)
        return node.proc.pid if node.running() and node.proc is not None else None

    @property
    def log_path(self) -> Path | None:
        return self._nodes[0].log_path if self._nodes else None

    def log_tail(self, lines: int = 30, index: int = 0) -> str:
        """The last ``lines`` lines of one node's ``kafka.log`` ('' if none yet)."""
        if not self._nodes or not self._node(index).log_path.exists():
            return ""
        text = self._node(index).log_path.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def rss_bytes(self, index: int = 0) -> int:
        """A node's resident set size now, from ``/proc/<pid>/status`` (Linux)."""
        pid = self.pid_of(index)
        if pid is None:
            raise BrokerError(f"Apache Kafka node {index} is not running")
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise BrokerError(f"/proc/{pid}/status has no VmRSS line")

    # -- lifecycle --------------------------------------------------------

    def start(self, port: int | None = None) -> Self:
        """Fetch (if needed), format and start every node; block until all brokers answer."""
        from busguard.devtools.broker import _run_in_fresh_loop

        return _run_in_fresh_loop(lambda: self.astart(port))

    async def astart(self, port: int | None = None) -> Self:
        """Fetch (if needed), format and start every node; wait until a metadata request lists all brokers.

        With ``port=None`` free loopback ports are picked (and re-picked, up to
        three times, if a node exits before it is ready: another process may have
        taken a port). With ``port=P``, node ``i`` listens on ``P+i``.
        """
        if self._nodes:
            raise BrokerError(f"Apache Kafka already started (pids {[n.proc.pid for n in self._nodes if n.proc]})")
        self._java = require_java()
        self._libs = await asyncio.to_thread(ensure_libs)
        if port is not None:
            for i in range(self.brokers):
                if _tcp_open(HOST, port + i):
                    raise BrokerError(f"port {HOST}:{port + i} is already in use")
        attempts = 1 if port is not None else _PORT_ATTEMPTS
        for attempt in range(1, attempts + 1):
            try:
                await self._launch(port)
                await self._wait_ready(list(range(self.brokers)))
            except _ExitedEarly as exc:
                self._kill_all()
                if attempt == attempts:
                    self._discard()
                    raise BrokerError(str(exc)) from None
                _log.warning("kafka.retry_ports", reason=str(exc).splitlines()[0])
                self._discard()
                continue
            except BaseException:
                self.stop()
                raise
            return self
        raise AssertionError("unreachable")  # pragma: no cover

    def stop(self) -> None:
        """SIGTERM every node's process group (a controlled shutdown); SIGKILL after the grace period."""
        if not self._nodes:
            return
        for node in self._nodes:
            if node.running():
                _signal_group(node, signal.SIGTERM)
        deadline = time.monotonic() + self._stop_grace
        for node in self._nodes:
            self._stop_node(node, deadline)
        self._discard()

    async def astop(self) -> None:
        await asyncio.to_thread(self.stop)

    def kill(self, index: int) -> None:
        """SIGKILL one node's JVM (``kill -9``): no controlled shutdown, its data stays for :meth:`restart`."""
        node = self._node(index)
        if not node.running():
            raise BrokerError(f"Apache Kafka node {index} is not running")
        assert node.proc is not None
        _signal_group(node, signal.SIGKILL)
        node.proc.wait()
        _log.info("kafka.killed", node=index, pid=node.proc.pid, returncode=node.proc.returncode)

    def restart(self, index: int) -> None:
        """Start a killed or stopped node again on its own ports and data; block until it answers."""
        from busguard.devtools.broker import _run_in_fresh_loop

        _run_in_fresh_loop(lambda: self.arestart(index))

    async def arestart(self, index: int) -> None:
        node = self._node(index)
        if node.running():
            raise BrokerError(f"Apache Kafka node {index} is still running (pid {node.proc.pid if node.proc else '?'})")
        self._spawned_at = time.monotonic()
        self._spawn(node)
        try:
            await self._wait_ready([index])
        except _ExitedEarly as exc:
            raise BrokerError(str(exc)) from None

    async def arestart_all(self) -> None:
        """Stop every node (SIGTERM together) and start them all again on their own ports and data.

        A whole-cluster restart: :meth:`stop` removes the data, and one node at a
        time cannot come back alone (a lone voter has no controller quorum), so
        every node is spawned before any is waited for.
        """
        for node in self._nodes:
            if node.running():
                _signal_group(node, signal.SIGTERM)
        deadline = time.monotonic() + self._stop_grace
        for node in self._nodes:
            await asyncio.to_thread(self._stop_node, node, deadline)
        self._spawned_at = time.monotonic()
        for node in self._nodes:
            self._spawn(node)
        try:
            await self._wait_ready(list(range(len(self._nodes))))
        except _ExitedEarly as exc:
            raise BrokerError(str(exc)) from None

    def terminate(self, index: int) -> None:
        """SIGTERM one node (a controlled shutdown) and wait for it; :meth:`restart` brings it back."""
        node = self._node(index)
        if node.running():
            _signal_group(node, signal.SIGTERM)
        self._stop_node(node, time.monotonic() + self._stop_grace)

    def __enter__(self) -> Self:
        if not self._nodes:
            self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        if not self._nodes:
            await self.astart()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.astop()

    # -- internals --------------------------------------------------------

    def _node(self, index: int) -> _Node:
        if not 0 <= index < len(self._nodes):
            raise BrokerError(f"no Apache Kafka node {index}: this cluster has nodes 0..{len(self._nodes) - 1}")
        return self._nodes[index]

    def _live_nodes(self) -> list[_Node]:
        live = [n for n in self._nodes if n.running()]
        if not live:
            dead = self._nodes[0] if self._nodes else None
            detail = f"; log {dead.log_path}:\n{self.log_tail()}" if dead is not None else ""
            raise BrokerError(f"Apache Kafka is not running{detail}")
        return live

    def _base_dir(self) -> Path:
        if self._log_dir is not None:
            self._log_dir.mkdir(parents=True, exist_ok=True)
            return self._log_dir
        if self._owned_dir is None:
            self._owned_dir = Path(tempfile.mkdtemp(prefix="busguard-kafka-"))
        return self._owned_dir

    async def _launch(self, port: int | None) -> None:
        base = self._base_dir()
        self._cluster_id = _cluster_id()
        self._nodes = []
        for i in range(self.brokers):
            node = _Node(index=i, dir=base / f"node-{i}")
            if node.data.exists() and any(node.data.iterdir()):
                raise BrokerError(f"{node.data} already holds a Kafka log directory; remove it or choose another directory")
            node.dir.mkdir(parents=True, exist_ok=True)
            node.port = port + i if port is not None else free_port()
            node.controller_port = free_port()
            self._nodes.append(node)
        for node in self._nodes:
            node.properties.write_text(self._server_properties(node), encoding="utf-8")
        started = time.monotonic()
        await asyncio.gather(*(asyncio.to_thread(self._format, node) for node in self._nodes))
        self.format_seconds = time.monotonic() - started
        self._spawned_at = time.monotonic()
        for node in self._nodes:
            self._spawn(node)

    def _server_properties(self, node: _Node) -> str:
        """The node's configuration: its own listeners, ports and data, then :func:`cluster_settings`."""
        voters = ",".join(f"{m.node_id}@{HOST}:{m.controller_port}" for m in self._nodes)
        props: dict[str, str] = {
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{HOST}:{node.port},CONTROLLER://{HOST}:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{node.port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(node.data),
        }
        props.update(cluster_settings(self.brokers))
        props.update(self.overrides)
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def _java_cmd(self, main: str, *args: str, heap_mb: int) -> list[str]:
        assert self._java is not None and self._libs is not None
        return [
            self._java,
            f"-Xmx{heap_mb}m",
            f"-Xms{min(heap_mb, 64)}m",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={_LOG4J}",
            "-cp",
            f"{self._libs}/*",
            main,
            *args,
        ]

    def _env(self) -> dict[str, str]:
        return {k: v for k, v in os.environ.items() if k not in _JAVA_ENV}

    def _format(self, node: _Node) -> None:
        cmd = self._java_cmd(
            "kafka.tools.StorageTool", "format", f"--cluster-id={self._cluster_id}", "--config", str(node.properties), heap_mb=256
        )
        with open(node.log_path, "ab") as log:
            log.write(f"$ {' '.join(cmd)}\n".encode())
            log.flush()
            done = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=self._env(), check=False)
        if done.returncode != 0:
            raise BrokerError(
                f"kafka-storage format of node {node.index} failed (exit {done.returncode}); log {node.log_path}:\n"
                f"{self.log_tail(index=node.index)}"
            )

    def _spawn(self, node: _Node) -> None:
        cmd = self._java_cmd("kafka.Kafka", str(node.properties), heap_mb=self.heap_mb)
        with open(node.log_path, "ab") as log:
            log.write(f"$ {' '.join(cmd)}\n".encode())
            log.flush()
            node.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._env(),
                cwd=node.dir,
                start_new_session=True,  # own process group: stop() and kill() signal all of it
            )
        _running.add(self)
        _log.info("kafka.spawned", node=node.index, pid=node.proc.pid, port=node.port, log=str(node.log_path))

    async def _wait_ready(self, indexes: Sequence[int]) -> None:
        """Poll each node in ``indexes`` until its metadata answer has our cluster id and every broker."""
        started = time.monotonic()
        deadline = started + self._startup_timeout
        pending = [self._nodes[i] for i in indexes]
        last_error: BaseException | None = None
        while pending:
            node = pending[0]
            assert node.proc is not None
            if node.proc.poll() is not None:
                raise _ExitedEarly(
                    f"Apache Kafka node {node.index} exited with code {node.proc.returncode} before it was ready on "
                    f"{HOST}:{node.port}; log {node.log_path}:\n{self.log_tail(index=node.index)}"
                )
            if _tcp_open(HOST, node.port):
                try:
                    cluster = await _describe_cluster(f"{HOST}:{node.port}", timeout_s=5.0)
                except Exception as exc:  # not ready yet: keep polling
                    last_error = exc
                else:
                    advertised = {(b["host"], b["port"]) for b in cluster["brokers"]}
                    if cluster.get("cluster_id") != self._cluster_id:
                        raise _ExitedEarly(
                            f"{HOST}:{node.port} is served by another cluster (id {cluster.get('cluster_id')!r}, "
                            f"expected {self._cluster_id!r})"
                        )
                    if advertised >= {(HOST, n.port) for n in self._nodes if n.running()}:
                        pending.pop(0)
                        continue
                    last_error = BrokerError(f"brokers registered so far: {sorted(advertised)}")
            if time.monotonic() > deadline:
                raise BrokerError(
                    f"Apache Kafka node {node.index} (pid {node.proc.pid}) not ready on {HOST}:{node.port} after "
                    f"{self._startup_timeout:.0f}s (last error: {last_error!r}); log {node.log_path}:\n"
                    f"{self.log_tail(index=node.index)}"
                )
            await asyncio.sleep(0.1)
        self.ready_seconds = time.monotonic() - self._spawned_at
        for address in [self.bootstrap, *(self.bootstrap_of(i) for i in range(self.brokers))]:
            register_broker(address, APACHE_KAFKA_KAFKA)
        _log.info(
            "kafka.ready",
            version=self.version,
            bootstrap=self.bootstrap,
            nodes=list(indexes),
            ready_ms=round((time.monotonic() - started) * 1000),
        )

    def _stop_node(self, node: _Node, deadline: float) -> None:
        proc = node.proc
        if proc is None:
            return
        how = "exited"
        if proc.poll() is None:
            how = "terminated"
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                how = "killed"
                _signal_group(node, signal.SIGKILL)
                proc.wait()
        _log.info("kafka.stopped", node=node.index, pid=proc.pid, how=how, returncode=proc.returncode)

    def _kill_all(self) -> None:
        for node in self._nodes:
            if node.running():
                assert node.proc is not None
                _signal_group(node, signal.SIGKILL)
                node.proc.wait()

    def _discard(self) -> None:
        """Forget the nodes (all stopped by now) and remove a directory we made."""
        self._nodes = []
        _running.discard(self)
        if self._owned_dir is not None:
            shutil.rmtree(self._owned_dir, ignore_errors=True)
            self._owned_dir = None
        elif self._log_dir is not None:
            for sub in self._log_dir.glob("node-*/data"):
                shutil.rmtree(sub, ignore_errors=True)


class _ExitedEarly(Exception):
    pass


async def _describe_cluster(bootstrap: str, timeout_s: float) -> dict[str, Any]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="busguard-kafka-probe", request_timeout_ms=int(timeout_s * 1000))
    try:
        await admin.start()
        cluster: dict[str, Any] = await admin.describe_cluster()
    finally:
        await admin.close()
    return cluster


def _tcp_open(host: str, port: int) -> bool:
    from busguard.devtools.broker import _tcp_open as tcp_open

    return tcp_open(host, port)


def _signal_group(node: _Node, sig: signal.Signals) -> None:
    if node.proc is not None:
        signal_group(node.proc, sig)


# Nodes still running when the interpreter exits are stopped, so an aborted test
# run does not leave JVMs behind.
_running: set[ApacheKafka] = set()


@atexit.register
def _stop_all() -> None:
    for kafka in list(_running):
        kafka.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m busguard.devtools.kafka fetch``: the Makefile's ``kafka`` target."""
    args = sys.argv[1:] if argv is None else argv
    if args != ["fetch"]:
        print("usage: python -m busguard.devtools.kafka fetch", file=sys.stderr)
        return 2
    try:
        java = require_java()
        started = time.monotonic()
        cached = libs_current()
        libs = ensure_libs()
    except KafkaUnavailable as exc:
        print(f"busguard: {exc}", file=sys.stderr)
        return 2
    how = "cached" if cached else f"fetched in {time.monotonic() - started:.1f}s"
    print(f"== kafka {kafka_version()} ({how}: {libs}; {_java_checked[java]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
