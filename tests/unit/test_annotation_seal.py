"""The surfaced annotation headers are under the forward's seal
(`annotations_sha256`, docs/protocol.md 12.1), and a decision persisted
before that field existed re-emits byte for byte as it first did. No Kafka."""

from __future__ import annotations

import hashlib
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from busguard.admission.batch import Input, admit_batch
from busguard.audit.checks import check_forwarded
from busguard.config import TopicsConfig
from busguard.demo.taint import INCIDENT_LEDGER, INCIDENT_TRACE
from busguard.policies.taint.replay import encode_request
from busguard.protocol.attestation import (
    Attestation,
    AttestationError,
    annotation_headers,
    annotations_sha256,
    attest,
    check_annotations,
    decision_bytes,
    decode_attestation,
    seal,
    verify_admitted,
)
from busguard.protocol.records import Coordinates, Decision
from busguard.protocol.signing import Signer
from busguard.runtime.outputs import Sealed, forwarded, outputs_for
from busguard.sdk.consumer import UNATTESTED, AdmittingConsumer, Fetched
from busguard.sdk.taint import READERS
from busguard.state.codecs import decision_decoder, encode, run_decoder
from busguard.state.memory.store import MemoryStore
from busguard.state.sqlite.store import SqliteStore
from busguard.state.store import StateStore
from busguard.testing import GUARD_PUBLIC_KEY, Harness, agent, seed, sender

from .harness import store_as_before

ME = agent("executor")
UNIT = "busguard-annotation-taint.unit"
AT = Coordinates(topic="agents.in", partition=0, offset=7)


def _plan_forward() -> tuple[bytes, list[tuple[str, bytes]]]:
    """A real forward of a kind that surfaces an annotation (taint-replay's `taint.unit`)."""
    rec = sender("planner").sign(
        kind="taint-replay", task_id="incident-1", receiver=ME, payload=encode_request(INCIDENT_TRACE, INCIDENT_LEDGER)
    )
    return Harness().forward(rec)


def _refusal(value: bytes, headers: list[tuple[str, bytes]]) -> tuple[str, str] | None:
    batch = AdmittingConsumer(None, guard_public_key=GUARD_PUBLIC_KEY, agent_id=ME, readers=READERS).admit(
        [Fetched("plans", 0, 0, value, headers)]
    )
    return None if batch.deliveries else (batch.refusals[0].reason, batch.refusals[0].detail)


def _attestation(headers: list[tuple[str, bytes]]) -> Attestation:
    return decode_attestation(next(v for k, v in headers if k == "busguard-attestation"))


def test_a_forward_binds_exactly_the_annotation_headers_it_carries() -> None:
    value, headers = _plan_forward()
    carried = [(k, v) for k, v in headers if k.startswith("busguard-annotation-")]
    assert carried == [(UNIT, b"token")]
    att = _attestation(headers)
    expected = hashlib.sha256(b"\x00\x00\x00\x01" + len(UNIT).to_bytes(4) + UNIT.encode() + b"\x01\x00\x00\x00\x05token").hexdigest()
    assert att.annotations_sha256 == expected
    assert _refusal(value, headers) is None
    verify_admitted(value, headers, GUARD_PUBLIC_KEY, ME)


def _tampered(headers: list[tuple[str, bytes]]) -> dict[str, list[tuple[str, bytes]]]:
    at = next(i for i, (k, _) in enumerate(headers) if k == UNIT)
    without = headers[:at] + headers[at + 1 :]
    return {
        "changed": [(k, b"span" if k == UNIT else v) for k, v in headers],
        "removed": without,
        "duplicated": headers[: at + 1] + [(UNIT, b"token")] + headers[at + 1 :],
        "added": headers[: at + 1] + [("busguard-annotation-caution", b"double_compromise")] + headers[at + 1 :],
        "added in another case": [("Busguard-Annotation-Taint.Unit", b"span"), *headers],
        "renamed": [("busguard-annotation-taint.Unit" if k == UNIT else k, v) for k, v in headers],
        "null value": [(k, None if k == UNIT else v) for k, v in headers],  # type: ignore[misc]
    }


@pytest.mark.parametrize("how", ["changed", "removed", "duplicated", "added", "added in another case", "renamed", "null value"])
def test_a_tampered_annotation_header_is_refused_as_unattested(how: str) -> None:
    """Each of these was delivered before annotations were sealed (the
    consumer read the headers as they came); now none is."""
    value, headers = _plan_forward()
    altered = _tampered(headers)[how]
    refusal = _refusal(value, altered)
    assert refusal is not None and refusal[0] == UNATTESTED and "annotations_sha256" in refusal[1], (how, refusal)
    with pytest.raises(AttestationError, match="annotations_sha256"):
        verify_admitted(value, altered, GUARD_PUBLIC_KEY, ME)


def test_the_auditor_flags_a_tampered_bound_annotation() -> None:
    value, headers = _plan_forward()
    assert check_forwarded("plans", value, headers, GUARD_PUBLIC_KEY).ok
    forged = [(k, b"span" if k == UNIT else v) for k, v in headers]
    assert not check_forwarded("plans", value, forged, GUARD_PUBLIC_KEY).ok


def test_a_decision_without_any_surfaced_annotation_binds_the_empty_list() -> None:
    """A kind that surfaces annotations, a decision that has none of them:
    the forward carries none, and one added later is refused."""
    rec = sender("planner").sign(kind="taint-replay", task_id="t", receiver=ME, payload=encode_request(INCIDENT_TRACE, INCIDENT_LEDGER))
    (d,) = Harness().feed(rec)
    bare = msgspec.structs.replace(d, annotations={}, surfaced=())
    assert annotation_headers(bare) == []
    assert decode_attestation(attest(bare, decision_bytes(bare), "tulpa:g")).annotations_sha256 == hashlib.sha256(b"\0\0\0\0").hexdigest()


# -- old forwards, and re-emitting an old decision ---------------------------------------------


#: A result decision as busguard stored it before `surfaced` existed, and the
#: attestation and forward headers busguard emitted for it then (computed
#: with the code at main f7fdc24): its re-emission must be these bytes.
OLD = Decision(
    "0123456789abcdef0000000000000007",
    "forward",
    "admitted",
    AT,
    1_764_417_600_000,
    receipt_id="ab" * 32,
    kind="cnet.result",
    task_id="c-1",
    annotations={"call": "c-1", "verification": "recomputed"},
)
OLD_ROW = bytes.fromhex(
    "de000aa474797065a86465636973696f6eab6465636973696f6e5f6964d92030313233343536373839616263646566303030303030303030"
    "30303030303037a76f7574636f6d65a7666f7277617264a6726561736f6ea861646d6974746564a6736f7572636583a5746f706963a96167"
    "656e74732e696ea9706172746974696f6e00a66f666673657407aa646563696465645f6174cf0000019acf7bfa00aa726563656970745f69"
    "64d9406162616261626162616261626162616261626162616261626162616261626162616261626162616261626162616261626162616261"
    "6261626162616261626162a46b696e64ab636e65742e726573756c74a77461736b5f6964a3632d31ab616e6e6f746174696f6e7382a46361"
    "6c6ca3632d31ac766572696669636174696f6eaa7265636f6d7075746564"
)
OLD_ATTESTATION = (
    b'{"v":1,"guard":"tulpa:golden-guard","decision_id":"0123456789abcdef0000000000000007","outcome":"forward",'
    b'"reason":"admitted","receipt_id":"abababababababababababababababababababababababababababababababab",'
    b'"source":{"topic":"agents.in","partition":0,"offset":7},"decided_at":1764417600000,'
    b'"decision_sha256":"1b6d9659b770a987241f10144805d5cbc58f047761e67681c0085738aec64f27"}'
)


def test_an_old_row_decodes_with_nothing_surfaced_and_re_attests_byte_for_byte() -> None:
    for d in (
        decision_decoder.decode(OLD_ROW),
        run_decoder.decode(b"\x91" + OLD_ROW)[0],
    ):  # 0x91: a one-element msgpack array (a decision run)
        assert d == OLD and d.surfaced is None
        assert encode(d) == OLD_ROW
        assert attest(d, decision_bytes(d), "tulpa:golden-guard") == OLD_ATTESTATION
        headers = forwarded(d, b"v", [("busguard-receipt", b"r"), ("busguard-signature", b"s")])[1]
        assert list(headers) == [
            ("busguard-receipt", b"r"),
            ("busguard-signature", b"s"),
            ("busguard-annotation-verification", b"recomputed"),
        ]
    bound = msgspec.structs.replace(OLD, surfaced=("verification",))
    assert b"surfaced" in encode(bound) and b"annotations_sha256" in attest(bound, decision_bytes(bound), "tulpa:golden-guard")


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StateStore:
    if request.param == "memory":
        return MemoryStore(created_at=Harness().now - 3_600_000)
    return SqliteStore(tmp_path / "state.db", now_ms=Harness().now - 3_600_000, synchronous="NORMAL")


def _feed(h: Harness, value: bytes, headers: list[tuple[str, bytes]]) -> Decision:
    (d,) = admit_batch([Input(AT, value, headers, b"k")], store=h.store, registry=h.registry, now_ms=h.now, policy=h.policy)
    return d


def _emit(d: Decision, value: bytes, headers: list[tuple[str, bytes]]) -> tuple[bytes | None, list[tuple[str, bytes]]]:
    body = decision_bytes(d)
    att = attest(d, body, agent("guard"))
    primary = outputs_for(Sealed(d, body, att, seal(Signer(seed("guard")), att)), b"k", value, headers, "plans", TopicsConfig(), 1 << 20)[0]
    return primary.value, list(primary.headers)


def test_a_decision_persisted_before_surfaced_existed_re_emits_as_it_first_did(store: StateStore) -> None:
    """The guard re-derives a re-emitted decision's attestation (and its
    batch-seal leaf) from the stored decision: an old row, with no
    `surfaced`, must give the old, unbound forward, not a new one."""
    h = Harness(store=store)
    rec = sender("planner").sign(kind="taint-replay", task_id="t", receiver=ME, payload=encode_request(INCIDENT_TRACE, INCIDENT_LEDGER))
    first = _feed(h, rec.value, list(rec.headers))
    assert first.surfaced == ("taint.unit",)
    legacy = msgspec.structs.replace(first, surfaced=None)
    store_as_before(store, AT, legacy, h.now + 10**9)
    assert b"surfaced" not in encode(legacy)
    h.now += 1000
    again = _feed(h, rec.value, list(rec.headers))
    assert again == legacy
    value, headers = _emit(again, rec.value, list(rec.headers))
    att = _attestation(headers)
    assert att.annotations_sha256 is None and (UNIT, b"token") in headers  # as first emitted: unbound
    assert attest(again, decision_bytes(again), agent("guard")) == attest(legacy, decision_bytes(legacy), agent("guard"))
    # ...which an upgraded reader refuses (it cannot tell it from a copy with headers added),
    refusal = _refusal(value or b"", headers)
    assert refusal is not None and refusal[0] == UNATTESTED and "does not bind" in refusal[1]
    # and the auditor, reading a log across the upgrade, accepts as the forward of its decision.
    assert check_forwarded("plans", value, headers, GUARD_PUBLIC_KEY).ok
    # The new decision re-emits bound, byte for byte, every time.
    assert _emit(first, rec.value, list(rec.headers)) == _emit(first, rec.value, list(rec.headers))


# -- the encoding, as a property ---------------------------------------------------------------

_names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12).map(lambda s: "busguard-annotation-" + s)
_annotations = st.lists(st.tuples(_names, st.binary(max_size=16)), max_size=5)


@settings(max_examples=200, deadline=None)
@given(carried=_annotations, other=_annotations)
def test_annotation_headers_are_accepted_exactly_when_they_are_the_bound_ones(
    carried: list[tuple[str, bytes]], other: list[tuple[str, bytes]]
) -> None:
    att = Attestation(
        v=1,
        guard="g",
        decision_id="d",
        outcome="forward",
        reason="admitted",
        receipt_id=None,
        source=AT,
        decided_at=0,
        decision_sha256="0" * 64,
        annotations_sha256=annotations_sha256(carried),
    )
    noise = [("busguard-receipt", b"r"), ("trace", b"x")]
    check_annotations(att, [noise[0], *carried, noise[1]])  # other headers are not bound, and interleave freely
    if other != carried:
        with pytest.raises(AttestationError):
            check_annotations(att, [*noise, *other])
