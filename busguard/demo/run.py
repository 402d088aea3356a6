"""`busguard demo`: the broker, the deployment, the services, the scenario, the verdict."""

from __future__ import annotations

import asyncio
import logging
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from busguard.config import Config, load_config
from busguard.demo.deployment import DEMO_FILES, config_text, write_deployment
from busguard.demo.judge import judge, operator_resolve
from busguard.demo.render import render_audit, run_auditor, summary
from busguard.demo.scenario import build_scenario
from busguard.demo.tap import Tap, produce
from busguard.protocol.keyfile import Identity

if TYPE_CHECKING:
    from busguard.reconcile.store import ReconcileState
    from busguard.reconcile.worker import Reconciler
    from busguard.runtime.guard import Guard
    from busguard.state.store import StateStore

STARTUP_TIMEOUT_S: Final = 60.0
COLLECT_TIMEOUT_S: Final = 60.0


@dataclass
class Services:
    cfg: Config
    guard: Guard
    reconciler: Reconciler
    guard_store: StateStore
    reconcile_store: ReconcileState
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def failure(self) -> str | None:
        """Why a service has stopped on its own, if one has."""
        for t in self.tasks:
            if t.done():
                exc = None if t.cancelled() else t.exception()
                return f"{t.get_name()} stopped: {exc!r}"
        return None

    async def start(self) -> float:
        started = time.monotonic()
        self.tasks = [
            asyncio.create_task(self.guard.run(), name="busguard-guard"),
            asyncio.create_task(self.reconciler.run(), name="busguard-reconciler"),
        ]
        deadline = started + STARTUP_TIMEOUT_S
        while not (self.guard.loop.liveness.started and self.reconciler.loop.liveness.started):
            failed = self.failure()
            if failed is not None:
                raise RuntimeError(f"{failed} (while starting)")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the guard and the reconciler did not get their partitions within {STARTUP_TIMEOUT_S:.0f}s")
            await asyncio.sleep(0.05)
        return time.monotonic() - started

    async def stop(self) -> None:
        self.guard.request_stop()
        self.reconciler.request_stop()
        if self.tasks:
            results = await asyncio.gather(*self.tasks, return_exceptions=True)
            for t, r in zip(self.tasks, results, strict=True):
                if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError):
                    print(f"warning: {t.get_name()} ended with {r!r}", file=sys.stderr)
        self.guard_store.close()
        self.reconcile_store.close()


@asynccontextmanager
async def demo_deployment(work: Path, config_text: Callable[[str], str]) -> AsyncIterator[tuple[Config, str]]:
    """Every demo's deployment: an embedded broker (memory storage, stopped on
    exit), the demo's config written for it in `work` and loaded, and the
    topics it names created. Yields the config and the broker's address."""
    from busguard.devtools.broker import EmbeddedBroker
    from busguard.wiring import ensure_topics, guard_topics

    broker = EmbeddedBroker(log_dir=work)
    await broker.astart()
    try:
        cfg_path = work / "busguard.toml"
        cfg_path.write_text(config_text(broker.bootstrap), encoding="utf-8")
        cfg = load_config(cfg_path, env={})  # the demo's own file; BUSGUARD_* variables must not redirect it
        await ensure_topics(cfg, guard_topics(cfg))  # the demo's config asks for them (kafka.create_topics)
        yield cfg, broker.bootstrap
    finally:
        await broker.astop()


def start_services(cfg: Config) -> Services:
    """The guard and the reconciler, wired as `busguard run` and `busguard reconcile` wire them."""
    from busguard import wiring
    from busguard.reconcile.worker import operators_file

    path = cfg.path(cfg.state.path)
    guard_keys = wiring.guard_keys(cfg)
    # What `busguard state init` does: the demo's broker is new at every
    # run (memory storage) and its files were cleared, so there is no
    # history a store could have forgotten and no reason to warm.
    store = wiring.open_guard_store(cfg, wiring.now_ms(), genesis=not path.exists())
    rstore = wiring.open_reconcile_store(cfg)
    guard = wiring.build_guard(cfg, store, guard_keys)
    reconciler = wiring.build_reconciler(cfg, rstore, wiring.reconciler_keys(cfg), operators_file(cfg))
    return Services(cfg, guard, reconciler, store, rstore)


def _configure_logging(verbose: bool) -> None:
    from busguard.runtime.logs import configure

    if verbose:
        configure("console", "info")
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    else:
        configure("console", "warning")
        # aiokafka logs through the standard library; its routine chatter
        # (group joins, a broker without idempotence) is not for the demo.
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


def _prepare_dir(keep_dir: str | None, stale: Iterable[str] = DEMO_FILES) -> tuple[Path, bool]:
    if keep_dir is None:
        return Path(tempfile.mkdtemp(prefix="busguard-demo-")), True
    work = Path(keep_dir).expanduser().resolve()
    work.mkdir(parents=True, exist_ok=True)
    for name in stale:  # a kept directory is reused: a previous run's state would change the story
        (work / name).unlink(missing_ok=True)
    return work, False


def run_scenario(
    name: str,
    keep_dir: str | None,
    demo: Callable[[Path, bool], Coroutine[Any, Any, int]],
    *,
    verbose: bool = False,
    stale: Iterable[str] = DEMO_FILES,
) -> int:
    """Every `busguard demo` scenario's frame: quiet logs, a work directory
    (kept with --dir, else a temporary one removed afterwards), and one
    readable failure line (the traceback only with --verbose)."""
    _configure_logging(verbose)
    work, owned = _prepare_dir(keep_dir, stale)
    try:
        return asyncio.run(demo(work, owned))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if verbose:
            raise
        print(f"{name} FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        if owned:
            shutil.rmtree(work, ignore_errors=True)


def run_demo(keep_dir: str | None, *, verbose: bool = False) -> int:
    """`busguard demo [--dir DIR]`. Returns the process exit code."""
    return run_scenario("demo", keep_dir, _demo, verbose=verbose)


async def _demo(work: Path, owned: bool) -> int:
    ids = write_deployment(work)
    guard_id, planner, executor, reconciler_id = ids.guard, ids.planner, ids.executor, ids.reconciler

    print("busguard demo: the guard and the reconciler on an embedded broker, one scripted scenario")
    async with demo_deployment(work, config_text) as (cfg, bootstrap):
        print(f"  broker     tansu at {bootstrap} (memory storage)")
        print(f"  work dir   {work}" + ("  (removed at exit; keep it with --dir DIR)" if owned else ""))
        print(f"  guard key  {guard_id.agent_id}")
        print(f"  reconciler {reconciler_id.agent_id}  (its own key: it seals resolutions, never decisions)")
        services = start_services(cfg)
        stopped = False
        try:
            took = await services.start()
            print(
                f"  running    guard ({', '.join(cfg.input_topics)}) and reconciler ({cfg.topics.reconciliation}); partitions assigned in {took:.1f}s"
            )
            code, report = await _scenario(cfg, work, guard_id, planner, executor, services)
            await services.stop()
            stopped = True
            print()
            print("audit: `busguard audit` reads the audit log and the downstream topics and checks every invariant")
            audit = await asyncio.to_thread(run_auditor, cfg, guard_id.public_key, reconciler_id.public_key)
            print(render_audit(audit))
            print()
            if not owned:
                print(f"kept in {work}: busguard.toml, keys.toml, the keys and the state (the broker's topics are gone with it)")
            if code == 0 and audit.ok:
                print(f"demo OK: all {report} records went where they should, and the audit proves one admitted witness per task.")
                return 0
            why = [] if code == 0 else ["some records did not go where expected (see PROBLEM lines)"]
            why += [] if audit.ok else ["the audit found violations"]
            print("demo FAILED: " + "; ".join(why))
            return 1
        finally:
            if not stopped:
                await services.stop()


async def _scenario(
    cfg: Config, work: Path, guard_id: Identity, planner: Identity, executor: Identity, services: Services
) -> tuple[int, int]:
    sc = build_scenario(planner, executor, work / "executor.session.json")
    tap = Tap(cfg)
    await tap.start()
    try:
        await produce(cfg, sc.steps)
        print(f"  produced   {len(sc.steps)} records from the planner and the executor (keyed by sender)")

        def decided() -> bool:
            steps_done = all(tap.decision(s) is not None for s in sc.steps)
            if not steps_done:
                return False
            if any(tap.placed.get(d.decision_id) is None for s in sc.steps if (d := tap.decision(s)) is not None):
                return False
            retry = tap.decision(sc.legacy_retry)
            conflict = tap.decision(sc.conflict)
            assert retry is not None and conflict is not None
            return (
                (retry.decision_id, "final") in tap.resolutions
                and retry.decision_id in tap.replies
                and (conflict.decision_id, "held") in tap.resolutions
            )

        complete = await tap.until(decided, COLLECT_TIMEOUT_S, services.failure)
        operator: tuple[int, str] | None = None
        conflict = tap.decision(sc.conflict)
        if complete and conflict is not None:
            # what an operator does with a held escalation, through the real command path
            operator = await asyncio.to_thread(operator_resolve, cfg, conflict.decision_id)
            await tap.until(lambda: (conflict.decision_id, "final") in tap.resolutions, COLLECT_TIMEOUT_S, services.failure)
        judge(sc, tap, cfg, guard_id.public_key, operator)
    finally:
        await tap.stop()

    print()
    print("where each record went, and why:")
    for line in summary(sc, cfg):
        print("  " + line)
    failed = [s for s in sc.steps if s.problems]
    if not complete:
        print(f"  (timed out after {COLLECT_TIMEOUT_S:.0f}s waiting for every output)")
    return (1 if failed or not complete else 0), len(sc.steps)
