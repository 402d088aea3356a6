"""Outputs never outgrow what the broker accepts (kafka.max_message_bytes).

The sizes are checked against aiokafka's own record batch builder, the one
the producer uses; the bounded dead-letter's bound is proved over its worst
case. No Kafka: the integration test (tests/integration/test_output_size.py)
runs the same inputs through a real guard.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import tempfile
from collections.abc import Sequence
from pathlib import Path

import msgspec
import pytest
from aiokafka.codec import has_lz4, has_snappy, has_zstd
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec import UNSET

from busguard.admission.batch import Input, admit_batch
from busguard.audit.checks import check_audit_record
from busguard.config import MIN_MAX_MESSAGE_BYTES, Compression, TopicsConfig, load_config
from busguard.errors import ConfigError
from busguard.policies import KINDS
from busguard.policies.taint import replay
from busguard.protocol.attestation import attest, attest_record, decision_bytes, open_attestation, seal, verify_admitted
from busguard.protocol.auditbatch import Entry, audit_records_of
from busguard.protocol.identity import agent_id_for_key
from busguard.protocol.keyfile import Identity, new_identity
from busguard.protocol.reasons import Outcome, Reason
from busguard.protocol.records import Coordinates, Decision, Reply, TaskEntry, headers_encoding
from busguard.protocol.registry import KeyRegistry
from busguard.protocol.signing import Signer, public_key_from_seed
from busguard.runtime.auditgroups import Member, audit_records
from busguard.runtime.batch_size import (
    batch_size,
    codec_expansion,
    compressed_batch_size,
    producer_batch_size,
    record_size,
    record_size_bound,
)
from busguard.runtime.guard import Guard
from busguard.runtime.outputs import (
    ANY_LIMIT_BATCH_SIZE,
    MAX_DETAIL_BYTES,
    Output,
    OutputBudget,
    Sealed,
    bounded_dead_letter,
    dead_letter,
    fits_any_limit,
    outputs_for,
    proof_headers,
    worst_proof,
)
from busguard.runtime.watched import WatchedFile
from busguard.sdk import taint as taint_sdk
from busguard.sdk.consumer import AdmittingConsumer, Fetched
from busguard.state.memory.store import MemoryStore

from .harness import NOW, Harness, Rec, agent, sender
from .probe_policy import PROBE

TOPICS = TopicsConfig()
GUARD = new_identity()
LIMIT = 1_048_588
CODECS: list[Compression] = ["none", "gzip"] + [c for c, ok in (("snappy", has_snappy()), ("lz4", has_lz4()), ("zstd", has_zstd())) if ok]
ALL_CODECS: list[Compression] = ["none", "gzip", "snappy", "lz4", "zstd"]


def _sealer(identity: Identity = GUARD):  # type: ignore[no-untyped-def]
    signer = Signer(identity.seed)

    def sealed(d: Decision) -> Sealed:
        body = decision_bytes(d)
        att = attest(d, body, identity.agent_id)
        return Sealed(d, body, att, seal(signer, att))

    return sealed


def _built(outputs: Sequence[Output], codec: Compression, max_batch: int) -> list[int]:
    """Pack outputs as runtime/publish.py's Publisher.publish does, one builder per batch; the built sizes."""
    codec_id = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[codec]
    sizes, builder = [], DefaultRecordBatchBuilder(2, codec_id, 0, -1, -1, 0, max_batch)
    offset = 0
    for o in outputs:
        if builder.append(offset, o.timestamp_ms or 0, key=o.key, value=o.value, headers=list(o.headers)) is None:
            sizes.append(len(builder.build()))
            builder, offset = DefaultRecordBatchBuilder(2, codec_id, 0, -1, -1, 0, max_batch), 0
            assert builder.append(0, o.timestamp_ms or 0, key=o.key, value=o.value, headers=list(o.headers)) is not None
        offset += 1
    sizes.append(len(builder.build()))
    return sizes


# -- measuring as Kafka counts ------------------------------------------------------------

_bytes = st.one_of(st.none(), st.binary(max_size=300))
_headers = st.lists(st.tuples(st.text(max_size=40), st.one_of(st.none(), st.binary(max_size=200))), max_size=20)


@settings(max_examples=300, deadline=None)
@given(key=_bytes, value=_bytes, headers=_headers, ts=st.integers(min_value=0, max_value=2**62))
def test_record_size_is_what_the_batch_builder_writes(
    key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]], ts: int
) -> None:
    if key is None and value is None:
        value = b""
    o = Output("t", key, value, headers, ts)  # type: ignore[arg-type]
    assert batch_size(o) == compressed_batch_size(o, "none")
    b = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, 0, 0)
    b.append(0, ts, key=key, value=value, headers=headers)
    assert batch_size(o) == len(b.build()) and record_size(key, value, headers) + 61 == batch_size(o)


_long = st.one_of(st.none(), st.binary(min_size=100, max_size=20_000))


@settings(max_examples=200, deadline=None)
@given(key=_long, value=_long, headers=st.lists(st.tuples(st.text(max_size=200), _long), max_size=12))
def test_the_cheap_size_bound_is_never_below_the_record_size(
    key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]]
) -> None:
    """`forward_refusal` passes a forward on `record_size_bound` alone: were
    the bound ever short, a record too large to produce would be persisted
    as a forward. Long values and non-ASCII names, so every varint is long."""
    assert record_size_bound(key, value, headers) >= record_size(key, value, headers)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("n", [0, 1, 100, 4095, 65_536, 300_000, LIMIT])
def test_codec_expansion_bounds_incompressible_data(codec: Compression, n: int) -> None:
    data = random.Random(n).randbytes(n)
    o = Output("t", None, data, [])
    assert compressed_batch_size(o, codec) - batch_size(o) <= codec_expansion(codec, batch_size(o))


@pytest.mark.parametrize("codec", CODECS)
def test_full_producer_batches_of_incompressible_records_fit_the_limit(codec: Compression) -> None:
    """Batches are filled to producer_batch_size uncompressed; compressed they stay within the limit."""
    limit = MIN_MAX_MESSAGE_BYTES
    rnd = random.Random(1)
    outputs = [
        Output("t", rnd.randbytes(16), rnd.randbytes(rnd.randrange(1, 9000)), [("h", rnd.randbytes(50))], 1_700_000_000_000 + i)
        for i in range(120)
    ]
    budget = OutputBudget(limit, codec, GUARD.agent_id)
    assert all(budget.fits(o) for o in outputs)
    sizes = _built(outputs, codec, producer_batch_size(limit, codec))
    assert len(sizes) > 5 and max(sizes) <= limit


def test_a_record_over_the_batch_size_travels_alone_at_its_measured_size() -> None:
    rnd = random.Random(2)
    small = Output("t", None, rnd.randbytes(100), [], 1)
    big = Output("t", None, b"{}" * 600_000, [("h", b"a" * 500_000)], 2)  # 1.7 MB, compresses to a few KB
    budget = OutputBudget(LIMIT, "gzip", GUARD.agent_id)
    assert batch_size(big) > LIMIT and budget.fits(big)
    sizes = _built([small, big, small], "gzip", budget.batch_size)
    assert sizes[1] == budget.sent_size(big) and len(sizes) == 3 and max(sizes) <= LIMIT


# -- the bounded dead-letter ----------------------------------------------------------------


def _worst_bounded(guard_id: str, headers: list[tuple[str, bytes]], value: bytes | None, key: bytes | None) -> Output:
    att_headers = worst_proof(guard_id)[1:]
    return bounded_dead_letter(
        "d" * 249,
        key,
        value,
        headers,
        "f" * 32,
        max(map(str, Reason), key=len),
        "\U0010ffff" * 5000,  # cut to MAX_DETAIL_BYTES
        Coordinates(topic="x" * 249, partition=2**31 - 1, offset=-(2**63)),
        max(map(str, Outcome), key=len),
        "f" * 32,
        att_headers,
        -(2**63),
    )


#: The worst case of what a bounded dead-letter can hold: the longest guard
#: id (512 UTF-16 units, each escaped to 6 bytes in the attestation JSON).
WORST_GUARD_ID = "\x01" * 512


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_the_bounded_dead_letter_fits_the_smallest_limit_whatever_the_input(codec: Compression) -> None:
    worst = _worst_bounded(WORST_GUARD_ID, [], b"", b"")
    headers = dict(worst.headers)
    assert len(headers["busguard-detail"]) == MAX_DETAIL_BYTES
    # Only three decimal lengths depend on the input (value, headers encoding,
    # key): here 1 digit each, at most 11 for anything a Kafka record holds.
    bound = batch_size(worst) + 3 * 10
    # so megabytes of value, key and 10 000 headers add only digits
    huge = _worst_bounded(
        WORST_GUARD_ID, [(f"h{i:05d}", os.urandom(300)) for i in range(10_000)], os.urandom(2_000_000), os.urandom(100_000)
    )
    assert batch_size(worst) < batch_size(huge) <= bound
    # and it fits any batch at the smallest accepted limit, under every codec's worst expansion
    assert bound <= producer_batch_size(MIN_MAX_MESSAGE_BYTES, codec)
    assert bound < 16_384


def test_a_dead_letter_with_megabytes_of_headers_is_written_bounded() -> None:
    rec = sender("planner").sign(kind="handoff", task_id="t", receiver=agent("executor"), payload=b"work")
    junk = [(f"x-{i}", os.urandom(1000)) for i in range(3000)]  # 3 MB, as a compressed input can carry
    headers = [*rec.headers, *junk]
    d = Decision(
        "f" * 32, Outcome.REJECT, Reason.BAD_SIGNATURE, Coordinates(topic="in", partition=0, offset=0), 1, "x", receipt_id=rec.receipt_id
    )
    budget = OutputBudget(LIMIT, "gzip", GUARD.agent_id)
    full, _ = outputs_for(_sealer()(d), b"key", rec.value, headers, "down", TOPICS, 1 << 20)
    assert not budget.fits(full)
    primary, audit = outputs_for(_sealer()(d), b"key", rec.value, headers, "down", TOPICS, 1 << 20, budget)
    got = dict(primary.headers)
    assert primary.topic == TOPICS.dead_letter and primary.value is None and primary.key == d.decision_id.encode()
    assert got["busguard-reason"] == b"bad_signature" and got["busguard-original-length"] == str(len(rec.value)).encode()
    assert got["busguard-original-sha256"] == hashlib.sha256(rec.value).hexdigest().encode()
    assert got["busguard-original-headers-sha256"] == hashlib.sha256(headers_encoding(headers)).hexdigest().encode()
    assert got["busguard-original-headers-length"] == str(len(headers_encoding(headers))).encode()
    assert got["busguard-original-key-sha256"] == hashlib.sha256(b"key").hexdigest().encode()
    assert not any(k.startswith("x-") for k, _ in primary.headers)
    assert open_attestation(primary.headers, GUARD.public_key).decision_id == d.decision_id
    assert budget.fits(primary) and budget.fits(audit)


def test_a_dead_letter_that_fits_keeps_the_input() -> None:
    rec = sender("planner").sign(kind="handoff", task_id="t", receiver=agent("executor"), payload=b"work")
    d = Decision("f" * 32, Outcome.REJECT, Reason.BAD_SIGNATURE, Coordinates(topic="in", partition=0, offset=0), 1, "x")
    budget = OutputBudget(LIMIT, "gzip", GUARD.agent_id)
    assert outputs_for(_sealer()(d), b"k", rec.value, rec.headers, "down", TOPICS, 1 << 20, budget) == outputs_for(
        _sealer()(d), b"k", rec.value, rec.headers, "down", TOPICS, 1 << 20
    )


# -- forwards: refused before the decision is persisted ------------------------------------------


def _admit(
    h: Harness, value: bytes, headers: list[tuple[str, bytes]], offset: int, budget: OutputBudget, key: bytes | None = b"k"
) -> Decision:
    sealed = _sealer()
    (d,) = admit_batch(
        [Input(Coordinates(topic=h.topic, partition=0, offset=offset), value, headers, key)],
        store=h.store,
        registry=h.registry,
        now_ms=h.now,
        policy=h.policy,
        oversize=lambda d, item: budget.refusal(d, item.key, item.value, item.headers, sealed),
    )
    return d


def test_an_incompressible_value_at_the_payload_limit_is_output_too_large_and_records_nothing() -> None:
    h = Harness()
    budget = OutputBudget(LIMIT, "gzip", GUARD.agent_id)
    big = random.Random(3).randbytes(1_048_576)
    s = sender("planner")
    rec = s.sign(kind="handoff", task_id="t", receiver=agent("executor"), payload=big)
    d = _admit(h, rec.value, rec.headers, 0, budget)
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.OUTPUT_TOO_LARGE)
    assert "kafka.max_message_bytes 1048588" in d.detail and d.record_sha256 is not None and d.receipt_id == rec.receipt_id
    assert h.store.decision_at(d.source) == d  # persisted as emitted: the audit record says output_too_large
    primary, audit = outputs_for(_sealer()(d), b"k", rec.value, rec.headers, "down", TOPICS, 1 << 20, budget)
    assert primary.topic == TOPICS.dead_letter and primary.value is None and budget.fits(primary) and budget.fits(audit)
    # nothing recorded: the same nonce and task id still go through with a payload that fits
    smaller = s.sign(kind="handoff", task_id="t", receiver=agent("executor"), payload=b"work", nonce=rec.receipt.nonce)
    assert _admit(h, smaller.value, smaller.headers, 1, budget).reason == Reason.ADMITTED


def test_a_large_compressible_forward_is_admitted_and_fits_once_compressed() -> None:
    h = Harness()
    budget = OutputBudget(LIMIT, "gzip", GUARD.agent_id)
    payload = b'{"rows":[' + b'{"a":1,"b":"xyz"},' * 50_000 + b"{}]}"  # 900 KB of JSON
    rec = sender("planner").sign(kind="handoff", task_id="t", receiver=agent("executor"), payload=payload)
    headers = [*rec.headers, ("trace", b"t" * 400_000)]
    d = _admit(h, rec.value, headers, 0, budget)
    assert d.reason == Reason.ADMITTED
    primary, _ = outputs_for(_sealer()(d), b"k", rec.value, headers, "down", TOPICS, 1 << 20, budget)
    assert batch_size(primary) > LIMIT and budget.sent_size(primary) <= LIMIT
    # without compression the same record does not fit
    assert _admit(Harness(), rec.value, headers, 0, OutputBudget(LIMIT, "none", GUARD.agent_id)).reason == Reason.OUTPUT_TOO_LARGE


def test_the_cheap_bound_never_admits_what_the_exact_size_refuses() -> None:
    """Right at the edge: values that put the real forward a few bytes either side of the batch size."""
    budget = OutputBudget(MIN_MAX_MESSAGE_BYTES, "none", GUARD.agent_id)
    s = sender("planner")
    seen = set()
    for n in range(budget.batch_size - 2 * 1024, budget.batch_size - 256, 7):
        rec = s.sign(kind="handoff", task_id=f"t{n}", receiver=agent("executor"), payload=b"\0" * n)
        d = _admit(Harness(), rec.value, rec.headers, 0, budget)
        primary, _ = outputs_for(_sealer()(d), b"k", rec.value, rec.headers, "down", TOPICS, 1 << 20)
        if d.reason == Reason.ADMITTED:
            assert batch_size(primary) <= budget.limit
        seen.add(d.reason)
    assert seen == {Reason.ADMITTED, Reason.OUTPUT_TOO_LARGE}


def test_a_decision_never_carries_the_inputs_unbounded_bytes() -> None:
    """Audit and escalation records carry the decision: nothing in it may grow with the input
    (a reserved header's name is the sender's, of any length)."""
    rec = sender("planner").sign(kind="handoff", task_id="t", receiver=agent("executor"), payload=b"work")
    (d,) = Harness().feed_raw([(rec.value, [*rec.headers, ("busguard-" + "x" * 2_000_000, b"")])])
    assert d.reason == Reason.RESERVED_HEADER and len(d.detail) < 300
    _, audit = outputs_for(_sealer()(d), b"k", rec.value, rec.headers, "down", TOPICS, 1 << 20)
    assert batch_size(audit) < 16_384


# -- config -----------------------------------------------------------------------------------


def _cfg(tmp_path: Path, kafka: str) -> Path:
    p = tmp_path / "busguard.toml"
    p.write_text(f'[kafka]\n{kafka}\n[[routes]]\nname = "h"\ninputs = ["in"]\ndownstream = "out"\n')
    return p


def test_the_default_limit_is_apache_kafkas_and_outputs_are_zstd(tmp_path: Path) -> None:
    k = load_config(_cfg(tmp_path, "")).kafka
    assert (k.max_message_bytes, k.compression) == (1_048_588, "zstd")


def test_a_limit_below_the_bounded_dead_letters_room_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(_cfg(tmp_path, "max_message_bytes = 65535"))
    assert err.value.field == "kafka.max_message_bytes" and err.value.value == 65535


def test_a_codec_without_its_package_is_refused_at_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import aiokafka.codec

    monkeypatch.setattr(aiokafka.codec, "has_zstd", lambda: False)
    with pytest.raises(ConfigError) as err:
        load_config(_cfg(tmp_path, 'compression = "zstd"'))
    assert err.value.field == "kafka.compression" and err.value.value == "zstd"
    monkeypatch.setattr(aiokafka.codec, "has_zstd", lambda: True)
    assert load_config(_cfg(tmp_path, 'compression = "zstd"')).kafka.compression == "zstd"


# -- every output kind at the smallest limit, through the guard (issue 35, finding 3) ---------------
#
# Each test runs the guard's own pipeline (Guard.process: admission with the
# budget's refusal, sealing, outputs_for, batch audit records) with
# `kafka.max_message_bytes` at its smallest (65536), then measures every
# output exactly as the producer sends it: alone (aiokafka's builder,
# compressed with the configured codec) and packed into producer batches.

SMALL = MIN_MAX_MESSAGE_BYTES
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "taint"
INCIDENT = replay.encode_request((EXAMPLES / "incident.trace.json").read_bytes(), (EXAMPLES / "incident.ledger.json").read_bytes())
REFUSED = replay.encode_request((EXAMPLES / "incident.trace.json").read_bytes())
GUARD_SEED = bytes(range(32))
GUARD_KEY = public_key_from_seed(GUARD_SEED)
GUARD_ID = Identity(seed=GUARD_SEED, public_key=GUARD_KEY, agent_id=agent_id_for_key(GUARD_KEY))


def padded(request: bytes, total: int) -> bytes:
    """The request with JSON whitespace after its first brace, `total` bytes long:
    still exactly the request the policy judges, and spliced whole into its forward."""
    return b"{" + b" " * (total - len(request)) + request[1:]


def _small_guard(tmp_path: Path, codec: Compression, seal: str = "record", audit: str = "record") -> Guard:
    (tmp_path / "keys.toml").write_text(f'[[agent]]\nid = "{agent("planner")}"\n')
    (tmp_path / "busguard.toml").write_text(
        f'[kafka]\nmax_message_bytes = {SMALL}\ncompression = "{codec}"\n'
        f'[[routes]]\nname = "r"\ninputs = ["in"]\ndownstream = "out"\n[ops]\nport = 0\n[batch]\nseal = "{seal}"\naudit = "{audit}"\n'
    )
    cfg = load_config(tmp_path / "busguard.toml", env={})
    keys = WatchedFile(tmp_path / "keys.toml", KeyRegistry.load, what="key registry")
    store = MemoryStore(created_at=NOW - 3_600_000, genesis=True)
    return Guard(cfg, keys=keys, identity=GUARD_ID, store=store, clock_ms=lambda: NOW)


def _rec(offset: int, kind: str, task: str, payload: bytes) -> Rec:
    r = sender("planner").sign(kind=kind, task_id=task, receiver=agent("executor"), payload=payload)
    return Rec("in", 0, offset, b"k", r.value, r.headers)


def _all_fit(outputs: Sequence[Output], codec: Compression, limit: int = SMALL) -> dict[str, int]:
    """Every output as the producer sends it, alone and packed; the largest sent size per topic."""
    largest: dict[str, int] = {}
    for o in outputs:
        sent = compressed_batch_size(o, codec)
        assert sent <= limit, f"a {sent}-byte record batch on {o.topic} (uncompressed {batch_size(o)}), limit {limit}"
        largest[o.topic] = max(largest.get(o.topic, 0), sent)
    for topic in largest:
        assert max(_built([o for o in outputs if o.topic == topic], codec, producer_batch_size(limit, codec))) <= limit
    return largest


def _decisions(outputs: Sequence[Output]) -> dict[int, Decision]:
    """The decision records among `outputs` (per-record or batch audit records), by input offset."""
    found = {}
    for o in outputs:
        if o.topic == TOPICS.audit:
            for value, headers in audit_records_of(o.value, o.headers):
                checked = check_audit_record(value, headers, GUARD_KEY)
                assert checked.verified, checked.why
                assert isinstance(checked.record, Decision)
                found[checked.record.source.offset] = checked.record
    return found


@pytest.mark.parametrize(("seal", "audit"), [("record", "record"), ("batch", "record"), ("batch", "batch")])
def test_a_taint_replay_plan_near_the_limit_has_a_forward_and_an_audit_record_that_fit(tmp_path: Path, seal: str, audit: str) -> None:
    """The issue's reproduction: a valid request whose forward is about 59 KB.
    Its decision record used to carry the forward again, base64-encoded in
    `replacement` (a 79 KB audit record at a 64 KiB limit); it carries its
    length and SHA-256, which the attestation's `forwarded_sha256` names too."""
    guard = _small_guard(tmp_path, "none", seal, audit)
    payload = padded(INCIDENT, 57_000)
    outputs = asyncio.run(guard.process([_rec(0, replay.KIND, "plan", payload)]))
    sizes = _all_fit(outputs, "none")
    (fwd,) = [o for o in outputs if o.topic == "out"]
    assert sizes["out"] > 57_000 and sizes[TOPICS.audit] < 8_000
    d = _decisions(outputs)[0]
    assert (d.outcome, d.replacement) == (Outcome.FORWARD, None)
    assert d.replacement_sha256 == hashlib.sha256(fwd.value or b"").hexdigest() and d.replacement_length == len(fwd.value or b"")
    att = verify_admitted(fwd.value or b"", fwd.headers, GUARD_KEY, agent("executor"))
    assert att.forwarded_sha256 == d.replacement_sha256
    # the containment agent's reader still reads (and checks) the plan from the forward
    inbox = AdmittingConsumer(None, guard_public_key=GUARD_KEY, agent_id=agent("executor"), readers=taint_sdk.READERS)
    (delivery,) = inbox.admit([Fetched("out", 0, 0, fwd.value, fwd.headers)]).deliveries
    assert isinstance(delivery.view, taint_sdk.PlanView) and delivery.view.request == payload


def test_with_the_defaults_a_1_mb_plan_is_one_forward_and_a_small_audit_record(tmp_path: Path) -> None:
    """The issue's second measurement: a 1 003 064-byte request used to cost a
    1 342 588-byte audit record, 2 349 191 bytes of output for one input."""
    (tmp_path / "keys.toml").write_text(f'[[agent]]\nid = "{agent("planner")}"\n')
    (tmp_path / "busguard.toml").write_text('[[routes]]\nname = "r"\ninputs = ["in"]\ndownstream = "out"\n[ops]\nport = 0\n')
    cfg = load_config(tmp_path / "busguard.toml", env={})
    keys = WatchedFile(tmp_path / "keys.toml", KeyRegistry.load, what="key registry")
    guard = Guard(cfg, keys=keys, identity=GUARD_ID, store=MemoryStore(created_at=NOW - 3_600_000, genesis=True), clock_ms=lambda: NOW)
    outputs = asyncio.run(guard.process([_rec(0, replay.KIND, "plan", padded(INCIDENT, 1_003_064))]))
    sizes = _all_fit(outputs, cfg.kafka.compression, cfg.kafka.max_message_bytes)
    assert [o.topic for o in outputs] == ["out", TOPICS.audit]
    assert sum(batch_size(o) for o in outputs) < 1_020_000 and sizes[TOPICS.audit] < 8_000


def test_dead_letters_escalations_and_refusals_of_large_taint_requests_fit(tmp_path: Path) -> None:
    """A refused request near the limit (dead-lettered with its value), a
    second request for the same task (escalated), and a plan whose forward
    would not fit (`output_too_large`, dead-lettered bounded): every output
    of each fits, and each input has one decision."""
    guard = _small_guard(tmp_path, "none", "batch", "batch")
    recs = [
        _rec(0, replay.KIND, "refused", padded(REFUSED, 60_000)),
        _rec(1, replay.KIND, "plan", padded(INCIDENT, 50_000)),
        _rec(2, replay.KIND, "plan", padded(INCIDENT, 50_001)),
        _rec(3, replay.KIND, "too-large", padded(INCIDENT, 66_000)),
    ]
    outputs = asyncio.run(guard.process(recs))
    _all_fit(outputs, "none")
    decisions = _decisions(outputs)
    assert [(decisions[i].outcome, decisions[i].reason) for i in range(4)] == [
        (Outcome.REJECT, Reason.TAINT_REPLAY_REFUSED),
        (Outcome.FORWARD, Reason.ADMITTED),
        (Outcome.ESCALATE, Reason.TASK_CONFLICT),
        (Outcome.REJECT, Reason.OUTPUT_TOO_LARGE),
    ]
    too_large = decisions[3]
    assert "the forwarded record would be" in too_large.detail and "kafka.max_message_bytes 65536" in too_large.detail
    # none of the policy's outcome is left on it: nothing of it is produced
    assert (too_large.annotations, too_large.replacement_sha256, too_large.notices) == (None, None, None)
    by_topic = {t: [o for o in outputs if o.topic == t] for t in {o.topic for o in outputs}}
    assert len(by_topic[TOPICS.dead_letter]) == 2 and len(by_topic[TOPICS.reconciliation]) == 1 and len(by_topic["out"]) == 1
    (refused, bounded) = by_topic[TOPICS.dead_letter]
    assert refused.value == recs[0].value and bounded.value is None
    assert dict(bounded.headers)["busguard-original-sha256"] == hashlib.sha256(recs[3].value or b"").hexdigest().encode()


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_a_policys_notices_and_replacements_are_sized_and_carried_by_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, codec: Compression
) -> None:
    """The probe kind forwards its claim re-encoded (a replacement) and sends a
    notice quoting a rival claim. A notice near the limit is produced and its
    escalation carries its value by hash; one over the limit (or a forward
    over it) makes the input `output_too_large`, its notice never produced."""
    monkeypatch.setitem(KINDS, PROBE.kind, PROBE)
    guard = _small_guard(tmp_path, codec)
    rnd = random.Random(5)

    def claim(slot: str, n: int) -> bytes:
        return msgspec.json.encode({"slot": slot, "claim": rnd.randbytes(n // 2).hex()})

    over = 70_000 if codec == "none" else 200_000  # hex halves under zstd

    recs = [
        _rec(0, PROBE.kind, "a", claim("s1", 60_000)),
        _rec(1, PROBE.kind, "b", claim("s1", 58_000)),  # rival: escalates, a 58 KB notice
        _rec(2, PROBE.kind, "c", claim("s1", over)),  # rival: its notice would not fit
        _rec(3, PROBE.kind, "d", claim("s2", over)),  # its forward would not fit
    ]
    outputs = asyncio.run(guard.process(recs))
    _all_fit(outputs, codec)
    decisions = _decisions(outputs)
    assert [(decisions[i].outcome, decisions[i].reason) for i in range(4)] == [
        (Outcome.FORWARD, Reason.ADMITTED),
        (Outcome.ESCALATE, Reason.TASK_CONFLICT),
        (Outcome.REJECT, Reason.OUTPUT_TOO_LARGE),
        (Outcome.REJECT, Reason.OUTPUT_TOO_LARGE),
    ]
    assert "its notice to route 'probe-notices' would be" in decisions[2].detail
    assert "the forwarded record would be" in decisions[3].detail
    (notice,) = [o for o in outputs if o.topic == "busguard.probe-notices"]
    (carried,) = decisions[1].notices or ()
    assert (carried.value, carried.value_length) == (UNSET, len(notice.value or b""))
    assert carried.value_sha256 == hashlib.sha256(notice.value or b"").hexdigest()
    (escalation,) = [o for o in outputs if o.topic == TOPICS.reconciliation]
    # (the probe's detail quotes the held claim: 60 KB, sized with the rest, and it fits)
    assert escalation.value == decision_bytes(decisions[1]) and (notice.value or b"")[-1000:] not in (escalation.value or b"")


def test_a_re_delivered_decision_re_emits_the_same_bytes_and_the_store_keeps_the_value(tmp_path: Path) -> None:
    """The decision record carries the replacement by hash; the store keeps the
    bytes, so a re-delivery re-emits the forward and every other output byte
    for byte."""
    guard = _small_guard(tmp_path, "none", "batch", "batch")
    rec = _rec(0, replay.KIND, "plan", padded(INCIDENT, 40_000))
    first = asyncio.run(guard.process([rec]))
    again = asyncio.run(guard.process([rec]))
    assert first == again
    stored = guard.store.decision_at(Coordinates(topic="in", partition=0, offset=0))
    assert (
        stored is not None
        and stored.replacement is not None
        and hashlib.sha256(stored.replacement).hexdigest() == stored.replacement_sha256
    )


def test_a_decision_stored_with_its_replacement_by_value_re_emits_as_first_emitted() -> None:
    """A decision persisted before the hash form existed has no `replacement_sha256`:
    its record still carries the replacement by value, so its attestation (and
    any tree head that holds it) is what was first sealed."""
    rec = sender("planner").sign(kind=replay.KIND, task_id="t", receiver=agent("executor"), payload=INCIDENT)
    d = Harness().one(rec)
    assert d.replacement is not None and d.replacement_sha256 is not None
    legacy = msgspec.structs.replace(d, replacement_sha256=None, replacement_length=None)
    assert msgspec.json.decode(decision_bytes(legacy), type=Decision) == legacy
    assert msgspec.json.encode(legacy) == decision_bytes(legacy)
    # and the auditor verifies both forms
    for form in (d, legacy):
        sealed = _sealer()(form)
        _, audit = outputs_for(sealed, b"k", rec.value, rec.headers, "down", TOPICS, 1 << 20)
        assert check_audit_record(audit.value, audit.headers, GUARD.public_key).verified


def test_the_auditor_refuses_a_decision_whose_carried_replacement_is_not_the_attested_one() -> None:
    rec = sender("planner").sign(kind=replay.KIND, task_id="t", receiver=agent("executor"), payload=INCIDENT)
    d = Harness().one(rec)
    for lie in (
        msgspec.structs.replace(d, replacement_sha256="0" * 64),
        msgspec.structs.replace(d, replacement_length=None),
        msgspec.structs.replace(d, replacement=None, replacement_sha256=None, replacement_length=None),
    ):
        # sealed by the guard's key over what it carries, but the attestation names another forward
        body = decision_bytes(lie)
        att = attest(msgspec.structs.replace(lie, replacement=d.replacement, replacement_sha256=d.replacement_sha256), body, GUARD.agent_id)
        sealed = Sealed(lie, body, att, seal(Signer(GUARD.seed), att))
        _, audit = outputs_for(sealed, b"k", rec.value, rec.headers, "down", TOPICS, 1 << 20)
        checked = check_audit_record(audit.value, audit.headers, GUARD.public_key)
        assert not checked.verified and "replacement" in checked.why


# -- outputs bounded by construction: decisions without a policy outcome, replies, the reconciler's dead letters --


def _worst_decision() -> Decision:
    """A decision at the longest it can be without a policy outcome. Every
    string in it but the detail is a field of its receipt or of its prior's,
    and a receipt is at most 4096 bytes of JSON, so its fields together are
    at most 4096 bytes as the decision's JSON writes them (the principal
    aside: the sender's canonical form, at most 512 characters). The longest
    core detail quotes two such fields with repr (`task ... already admitted
    under nonce ...`), which writes a 2-byte character as 4 characters, one
    of them a backslash JSON doubles: 2.5 times the field. So: a task id of
    2000 such characters (4000 bytes) in each receipt, both quoted."""
    wide = "\x80" * 2000
    quoted = f"task {wide!r} already admitted under nonce {wide!r}; " + "x" * 200
    agent_id = "tulpa:" + "z" * 506

    def entry() -> TaskEntry:
        src = Coordinates(topic="x" * 249, partition=2**31 - 1, offset=2**63 - 1)
        return TaskEntry("k", wide, "f" * 64, "f" * 32, agent_id, "n", "f" * 64, "s", 2**63 - 1, src, b"r" * 4096, b"s" * 64, -(2**63))

    return Decision(
        "f" * 32,
        max(map(str, Outcome), key=len),
        max(map(str, Reason), key=len),
        Coordinates(topic="x" * 249, partition=2**31 - 1, offset=2**63 - 1),
        -(2**63),
        quoted,
        receipt_id="f" * 64,
        kind="k",
        task_id=wide,
        sender="s",
        principal=agent_id,
        receiver="r",
        nonce="n",
        session_id="s",
        sequence=2**63 - 1,
        payload_hash="f" * 64,
        issued_at="i",
        key_id="k",
        public_key=b"k" * 32,
        receipt=b"r" * 4096,
        signature=b"s" * 64,
        supersedes="f" * 64,
        prior=entry(),
        record_sha256="f" * 64,
        last_offset=2**63 - 1,
    )


def test_a_decision_without_a_policy_outcome_fits_any_limit_as_an_audit_record_or_escalation() -> None:
    """Its audit record (and escalation: the same value, key and headers) with
    the longest proof of the longest guard id fits the smallest limit under
    every codec, and its batch audit entry alone is no larger."""
    d = _worst_decision()
    body = decision_bytes(d)
    assert body.count(b"\\\\x80") == 4000 and len(body) > 42_000
    worst = worst_proof(WORST_GUARD_ID)
    verdict = [("busguard-outcome", d.outcome.encode()), ("busguard-reason", d.reason.encode())]
    audit = Output(TOPICS.audit, (d.task_id or "").encode(), body, [*worst, *verdict])
    assert fits_any_limit(audit), batch_size(audit)
    proof = dict(worst)
    head, inclusion = proof["busguard-tree-head"], proof["busguard-inclusion"]
    members = {0: Member(0, Entry(body, proof["busguard-attestation"], inclusion), 0)}
    (entry,) = audit_records(TOPICS.audit, {(head, "x", 0): members}, {head: proof["busguard-head-seal"]}, ANY_LIMIT_BATCH_SIZE)
    assert batch_size(entry) <= batch_size(audit)


def test_a_reply_fits_any_limit() -> None:
    """The reconciler's reply carries the task's first admission: bounded by its receipt."""
    text = "a" * 4096
    entry = TaskEntry(
        text,
        text,
        text,
        "f" * 32,
        text,
        text,
        "f" * 64,
        text,
        2**63 - 1,
        Coordinates(topic="x" * 249, partition=0, offset=0),
        b"r" * 4096,
        b"s" * 64,
        0,
    )
    body = msgspec.json.encode(Reply(resolution_id="f" * 32, escalation_id="f" * 32, to=text, task_id=text, admission=entry))
    att = attest_record(WORST_GUARD_ID, "f" * 32, "reply", "retransmission", "f" * 64, entry.source, 0, body)
    reply = Output(
        TOPICS.replies,
        text.encode(),
        body,
        [*proof_headers("f" * 32, att, b"A" * 86), ("busguard-outcome", b"reply"), ("busguard-reason", b"retransmission")],
    )
    assert fits_any_limit(reply), batch_size(reply)


def test_a_reconcilers_dead_letter_is_bounded_whatever_its_input() -> None:
    """The reconciler dead-letters what it cannot take with `dead_letter` and no
    budget of its own: a record that would not fit the smallest limit is
    written in the bounded form."""
    junk = [(f"x-{i}", os.urandom(1000)) for i in range(3000)]
    src = Coordinates(topic="busguard.reconciliation", partition=0, offset=7)
    big = dead_letter(TOPICS.dead_letter, b"key", os.urandom(200_000), junk, "f" * 32, "bad_seal", "unsealed", src)
    assert big.value is None and fits_any_limit(big) and "busguard-original-headers-sha256" in dict(big.headers)
    small = dead_letter(TOPICS.dead_letter, b"key", b"{}", [("h", b"v")], "f" * 32, "bad_seal", "unsealed", src)
    assert small.value == b"{}" and dict(small.headers)["h"] == b"v"


@settings(max_examples=25, deadline=None)
@given(
    claims=st.lists(st.tuples(st.sampled_from(["s1", "s2"]), st.integers(min_value=0, max_value=140_000)), min_size=1, max_size=5),
    codec=st.sampled_from(CODECS),
    modes=st.sampled_from([("record", "record"), ("batch", "record"), ("batch", "batch")]),
)
def test_whatever_a_policy_makes_of_its_inputs_every_output_fits(
    claims: list[tuple[str, int]], codec: Compression, modes: tuple[str, str]
) -> None:
    """Claims of any size, admitted, repeated or contested (replacements,
    annotations, notices, escalations, rejects): one decision per input and
    every output within the smallest limit, as the producer sends it."""
    rnd = random.Random(len(claims))
    saved = KINDS.get(PROBE.kind)
    KINDS[PROBE.kind] = PROBE
    try:
        with tempfile.TemporaryDirectory() as tmp:
            guard = _small_guard(Path(tmp), codec, *modes)
            recs = [
                _rec(i, PROBE.kind, f"t{i}", msgspec.json.encode({"slot": slot, "claim": rnd.randbytes(n // 2).hex()}))
                for i, (slot, n) in enumerate(claims)
            ]
            outputs = asyncio.run(guard.process(recs))
    finally:
        if saved is None:
            del KINDS[PROBE.kind]
        else:
            KINDS[PROBE.kind] = saved
    _all_fit(outputs, codec)
    assert sorted(_decisions(outputs)) == list(range(len(claims)))
