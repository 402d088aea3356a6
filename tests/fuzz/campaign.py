"""Record-level fuzzing of the guard: the parts the script and the unit test share.

A *fetch* is what a broker returns for one partition: record batches, back
to back. `Campaign.decide_fetch` runs one through exactly what a running
guard does with it — aiokafka's fetcher `PartitionRecords` over
`MemoryRecords` (with busguard's tolerant hook, as `consumer_options()`
installs it), then `Guard.process` (precheck, verify, `admit_batch` on a
MemoryStore, seal, outputs) — and checks the guarantees:

* nothing raises;
* offsets come out strictly increasing, each with exactly one decision and
  exactly two outputs (primary and audit), the audit record naming it;
* the position always moves past the fetched offset;
* every offset of a batch the generator did not mutate is decided, and every
  validly signed record in one is admitted;
* every offset from the fetch offset to the position is covered by exactly
  one item (an undecodable span by one, however many offsets it claims), and
  what one input's outputs weigh is bounded (`MAX_OUTPUT_PER_INPUT`), so a
  batch header claiming 2^31 offsets costs what one claiming one does.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from aiokafka.consumer import fetcher
from aiokafka.structs import TopicPartition

from busguard.config import DEFAULT_MAX_INFLATED_BYTES, load_config
from busguard.devconfig import Topics, embedded_config
from busguard.protocol.identity import agent_id_for_key
from busguard.protocol.keyfile import Identity, write_key
from busguard.protocol.records import Decision
from busguard.protocol.registry import KeyRegistry
from busguard.protocol.signing import public_key_from_seed
from busguard.runtime.guard import Guard
from busguard.runtime.tolerant_fetch import RAW_KEYS, consumer_options
from busguard.runtime.undecodable import Undecodable, next_offset
from busguard.runtime.watched import WatchedFile
from busguard.sdk.sender import Sender
from busguard.state.memory.store import MemoryStore

from .batches import batch, record
from .generator import NOW, Batch, Rec, seed

TOPIC = "fuzz.handoffs"
_decision = msgspec.json.Decoder(Decision)


#: The peak RSS growth one fetch holding a bomb may cause: the inflated
#: records, the uncompressed batch and its parsed records (each at most the
#: default batch.max_inflated_bytes), plus the decisions and outputs of the fetch.
BOMB_GROWTH_BOUND = 3 * DEFAULT_MAX_INFLATED_BYTES + (16 << 20)


def _proc_status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak_rss() -> int:
    """Resets VmHWM to the current RSS (Linux: clear_refs 5) and returns it."""
    Path("/proc/self/clear_refs").write_text("5")
    return _proc_status("VmRSS")


class InvariantBroken(AssertionError):
    pass


@dataclass
class Stats:
    fetches: int = 0
    records: int = 0  # generated records (before batch mutation)
    decided: int = 0  # decisions made (one per offset the decoder yielded)
    crashes: int = 0
    missing: int = 0  # offsets that should have a decision and have none
    duplicates: int = 0  # offsets with more than one decision
    valid_not_admitted: int = 0
    truncated: int = 0
    bombs: int = 0  # fetches holding a compression bomb (`Generator.bomb`)
    bombs_over_bound: int = 0  # of those, decoded and decided with a peak RSS growth over BOMB_GROWTH_BOUND
    bomb_peak_growth: int = 0  # the largest such growth, in bytes
    spans: int = 0  # undecodable items covering more than one offset
    span_offsets: int = 0  # offsets those items covered
    passed_over: int = 0  # offsets before the position after the last item: transaction markers, no item due
    max_output_bytes: int = 0  # the heaviest input's outputs (primary + audit), key, value and headers
    oversized_outputs: int = 0  # inputs whose outputs weighed more than MAX_OUTPUT_PER_INPUT
    reasons: collections.Counter[str] = field(default_factory=collections.Counter)
    crash_samples: list[str] = field(default_factory=list)


class Campaign:
    """A guard with a real config, keys and a MemoryStore, decoupled from Kafka."""

    MAX_ITEMS_PER_FETCH = 20_000
    #: One input's outputs weigh at most its own bytes, bounded by the
    #: payload limit, plus a constant: the campaign's records are far below
    #: 1 MiB, so 2 MiB is a bound no span or record may pass.
    MAX_OUTPUT_PER_INPUT = 2 * 1_048_576

    def __init__(self, workdir: Path | None = None, *, batch: dict[str, object] | None = None) -> None:
        """`batch`: settings of the config's `[batch]` table beside the
        campaign's own (the readers' campaign makes batch audit records with
        `{"audit": "batch"}`)."""
        consumer_options()  # installs the hook, as every busguard consumer does
        self._tmp = tempfile.TemporaryDirectory(prefix="busguard-fuzz-") if workdir is None else None
        d = Path(self._tmp.name) if self._tmp is not None else workdir
        assert d is not None
        self.planner = Sender(seed("planner"), clock_ms=lambda: NOW)
        self.receiver = agent_id_for_key(public_key_from_seed(seed("executor")))
        (d / "keys.toml").write_text(f'[[agent]]\nid = "{self.planner.agent_id}"\n\n[[agent]]\nid = "{self.receiver}"\n')
        guard_seed = seed("guard")
        pk = public_key_from_seed(guard_seed)
        write_key(d / "guard.key", Identity(seed=guard_seed, public_key=pk, agent_id=agent_id_for_key(pk)), overwrite=True)
        t = Topics.under("fuzz")
        t = msgspec.structs.replace(t, handoffs=TOPIC)
        (d / "busguard.toml").write_text(
            embedded_config(
                "127.0.0.1:1",
                group_id="fuzz",
                topics=t,
                comment="fuzz",
                state={"path": str(d / "unused.db")},
                batch={"verify_threads": 2, **(batch or {})},
            )
        )
        self.cfg = load_config(d / "busguard.toml")
        keys = WatchedFile(self.cfg.path(self.cfg.keys.registry), KeyRegistry.load, what="key registry", watch=False)
        ident = Identity(seed=guard_seed, public_key=pk, agent_id=agent_id_for_key(pk))
        self.guard = Guard(self.cfg, keys=keys, identity=ident, store=self._store(), clock_ms=lambda: NOW)
        self.since_reset = 0
        self.stats = Stats()
        self.next_base = 0
        self.tasks = 0

    @staticmethod
    def _store() -> MemoryStore:
        return MemoryStore(created_at=NOW - 3_600_000)

    def close(self) -> None:
        self.guard._pool.shutdown(wait=True)
        if self._tmp is not None:
            self._tmp.cleanup()

    # -- one fetch -------------------------------------------------------------

    def decide_fetch(self, batches: Sequence[Batch], fetch_offset: int) -> int:
        """Decode and decide one fetch, check it, add to the stats; never raises
        for a crash or broken invariant (they are counted), so a campaign runs on.
        Returns the first offset the decoder did not cover: a mutated header
        may claim offsets beyond what the generator meant, and the next fetch
        must start after them (a store remembers decisions by position)."""
        s = self.stats
        s.fetches += 1
        raw = b"".join(b.raw for b in batches)
        self.end = fetch_offset
        bomb = any(b.bomb for b in batches)
        before = _reset_peak_rss() if bomb else 0
        try:
            self._check(batches, raw, fetch_offset)
        except InvariantBroken as exc:
            s.crash_samples.append(f"invariant: {exc}")
        except Exception as exc:  # noqa: BLE001 - a crash is what the campaign counts
            s.crashes += 1
            if len(s.crash_samples) < 20:
                s.crash_samples.append(f"{type(exc).__name__}: {exc} (fetch {raw[:64].hex()}…)")
        if bomb:
            self._bomb_memory(before)
        return self.end

    def decide_records(self, recs: Sequence[Rec]) -> list[Any]:
        """The guard's outputs for `recs`, read as one batch at `next_base`:
        the genuine forwards, escalations and audit records the readers'
        campaign (readers.py) puts among hostile ones."""
        raw = batch([record(i, k, v, h) for i, (k, v, h) in enumerate(recs)], base_offset=self.next_base)
        items = list(
            fetcher.PartitionRecords(TopicPartition(TOPIC, 0), fetcher.MemoryRecords(raw), None, self.next_base, RAW_KEYS, None, True, 0)
        )
        self.next_base += len(recs)
        self.since_reset += len(recs)
        if self.since_reset > 50_000:
            self.guard.store = self._store()
            self.since_reset = 0
        return asyncio.run(self.guard.process(items))

    def _bomb_memory(self, before: int) -> None:
        s = self.stats
        s.bombs += 1
        growth = _proc_status("VmHWM") - before
        s.bomb_peak_growth = max(s.bomb_peak_growth, growth)
        if growth > BOMB_GROWTH_BOUND:
            s.bombs_over_bound += 1
            if len(s.crash_samples) < 20:
                s.crash_samples.append(f"bomb fetch grew the peak RSS by {growth} bytes (bound {BOMB_GROWTH_BOUND})")

    def _check(self, batches: Sequence[Batch], raw: bytes, fetch_offset: int) -> None:
        s = self.stats
        records = fetcher.PartitionRecords(
            TopicPartition(TOPIC, 0), fetcher.MemoryRecords(raw), None, fetch_offset, RAW_KEYS, None, True, 0
        )
        items: list[Any] = []
        for item in records:
            items.append(item)
            if len(items) >= self.MAX_ITEMS_PER_FETCH:
                s.truncated += 1
                break
        end = self.end = max(records.next_fetch_offset, max((next_offset(i) for i in items), default=0))
        offsets = [i.offset for i in items]
        if any(b <= a for a, b in zip(offsets, offsets[1:], strict=False)):
            raise InvariantBroken(f"offsets not strictly increasing: {offsets[:20]}")
        if offsets and offsets[0] < fetch_offset:
            raise InvariantBroken(f"offset {offsets[0]} before the fetch offset {fetch_offset}")
        if end <= fetch_offset and raw:
            raise InvariantBroken(f"position did not move past {fetch_offset}")
        self._check_cover(items, fetch_offset, end, truncated=len(items) >= self.MAX_ITEMS_PER_FETCH)
        outputs = asyncio.run(self.guard.process(items)) if items else []
        if len(outputs) != 2 * len(items):
            raise InvariantBroken(f"{len(outputs)} outputs for {len(items)} records")
        self._weigh(outputs)
        decided: dict[int, Decision] = {}
        for item, audit in zip(items, outputs[1::2], strict=True):
            d = _decision.decode(audit.value)
            if d.source.offset != item.offset or d.source.topic != TOPIC:
                raise InvariantBroken(f"audit record for {d.source} in place of offset {item.offset}")
            if d.source.offset in decided:
                s.duplicates += 1
            decided[d.source.offset] = d
            s.reasons[d.reason] += 1
            if type(item) is Undecodable and d.reason != item.reason:
                raise InvariantBroken(f"placeholder {item.reason} decided as {d.reason}")
            if d.covers_to != next_offset(item) - 1:
                raise InvariantBroken(f"decision at {d.source.offset} covers to {d.covers_to}, its item to {next_offset(item) - 1}")
        s.decided += len(items)
        starts = sorted(decided)
        for b in batches:
            if not b.pristine:
                continue
            for o in range(max(b.base, fetch_offset), b.base + b.span):
                if o >= end:
                    break  # stopped early (the cap): the next poll would read it
                d = decided.get(o)
                if d is None:  # inside a span (a bomb past the bound is one span decision for its records)
                    i = bisect.bisect_right(starts, o) - 1
                    d = decided[starts[i]] if i >= 0 and decided[starts[i]].covers_to >= o else None
                if d is None:
                    s.missing += 1
                elif o in b.valid and d.reason != "admitted":
                    s.valid_not_admitted += 1
                    if len(s.crash_samples) < 20:
                        s.crash_samples.append(f"valid record at {o} decided {d.reason}: {d.detail}")
        self.since_reset += len(items)
        if self.since_reset > 50_000 or end - fetch_offset > 2**20:  # keep memory flat over a million records
            self.guard.store = self._store()
            self.since_reset = 0

    def _check_cover(self, items: Sequence[Any], fetch_offset: int, end: int, *, truncated: bool) -> None:
        """No offset is covered by two items (a span overlapping anything is a
        duplicate); offsets the decoder passed over without an item (a
        transaction marker: no record, no decision) are counted."""
        s = self.stats
        reach = fetch_offset
        for item in items:
            if item.offset < reach:
                s.duplicates += 1
            stop = next_offset(item)
            if stop - item.offset > 1:
                s.spans += 1
                s.span_offsets += stop - item.offset
            reach = max(reach, stop)
        if reach < end and not truncated:
            s.passed_over += end - reach

    def _weigh(self, outputs: Sequence[Any]) -> None:
        """The heaviest input's outputs (primary and audit record, in order)."""
        s = self.stats
        sizes = [len(o.key or b"") + len(o.value or b"") + sum(len(k) + len(v or b"") for k, v in o.headers) for o in outputs]
        for primary, audit in zip(sizes[0::2], sizes[1::2], strict=True):
            weight = primary + audit
            s.max_output_bytes = max(s.max_output_bytes, weight)
            if weight > self.MAX_OUTPUT_PER_INPUT:
                s.oversized_outputs += 1
