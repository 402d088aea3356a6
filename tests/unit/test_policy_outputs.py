"""How a kind policy's outcome shapes the outputs: a replaced forward that the
receiving SDK verifies, annotations surfaced on forwards, notices to the
kind's routes, and attestations unchanged for everything else — no Kafka."""

from __future__ import annotations

import hashlib

import msgspec
import pytest

from busguard import AttestationError, verify_admitted
from busguard.config import TopicsConfig
from busguard.policies import KINDS, KindSpec
from busguard.protocol.attestation import Attestation, attest, decision_bytes, seal
from busguard.protocol.keyfile import new_identity
from busguard.protocol.records import Decision, Notice
from busguard.protocol.signing import Signer
from busguard.runtime.outputs import Sealed, outputs_for

from .harness import Harness, agent, sender

GUARD = new_identity()
TOPICS = TopicsConfig(routes={"probe-notices": "probe.notices"})


def _admitted() -> tuple[Decision, bytes, list[tuple[str, bytes]]]:
    rec = sender("planner").sign(kind="handoff", task_id="t", receiver=agent("executor"), payload=b"work")
    (d,) = Harness().feed(rec)
    assert d.outcome == "forward"
    return d, rec.value, list(rec.headers)


def _emit(d: Decision, value: bytes, headers: list[tuple[str, bytes]]) -> tuple[object, ...]:
    body = decision_bytes(d)
    att = attest(d, body, GUARD.agent_id)
    return outputs_for(Sealed(d, body, att, seal(Signer(GUARD.seed), att)), b"planner", value, headers, "downstream", TOPICS, 1_048_576)


def _attestation(headers: list[tuple[str, bytes]]) -> Attestation:
    raw = [v for k, v in headers if k == "busguard-attestation"]
    return msgspec.json.decode(raw[0], type=Attestation)


def test_an_attestation_without_a_replacement_encodes_as_before() -> None:
    d, value, headers = _admitted()
    primary, audit = _emit(d, value, headers)
    raw = [v for k, v in primary.headers if k == "busguard-attestation"][0]  # type: ignore[attr-defined]
    assert b"forwarded_sha256" not in raw and _attestation(primary.headers).forwarded_sha256 is None  # type: ignore[attr-defined]


def test_a_replaced_forward_carries_the_replacement_and_the_sdk_verifies_it() -> None:
    d, value, headers = _admitted()
    replaced = msgspec.structs.replace(d, replacement=b"only the verified part")
    primary, _audit = _emit(replaced, value, headers)
    assert primary.value == b"only the verified part"  # type: ignore[attr-defined]
    assert ("busguard-replaced", b"1") in primary.headers  # type: ignore[attr-defined]
    att = _attestation(primary.headers)  # type: ignore[attr-defined]
    assert att.forwarded_sha256 == hashlib.sha256(b"only the verified part").hexdigest()
    verify_admitted(primary.value, primary.headers, GUARD.public_key, agent("executor"))  # type: ignore[attr-defined]
    # the sender's original payload no longer passes for the forward, and neither does a tampered replacement
    for other in (value, b"only the verified part, and more"):
        with pytest.raises(AttestationError, match="forwarded_sha256"):
            verify_admitted(other, primary.headers, GUARD.public_key, agent("executor"))  # type: ignore[attr-defined]


def test_annotations_the_kind_surfaces_ride_on_the_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(KINDS, "handoff", KindSpec(kind="handoff", single_witness=True, forward_annotations=("caution",)))  # type: ignore[index]
    d, value, headers = _admitted()
    annotated = msgspec.structs.replace(d, annotations={"caution": "double-compromise", "digest": "ab"}, surfaced=("caution",))
    primary, _audit = _emit(annotated, value, headers)
    extra = [(k, v) for k, v in primary.headers if k.startswith("busguard-annotation-")]  # type: ignore[attr-defined]
    assert extra == [("busguard-annotation-caution", b"double-compromise")]  # only the surfaced name
    verify_admitted(primary.value, primary.headers, GUARD.public_key, agent("executor"))  # type: ignore[attr-defined]
    # A decision stored before `surfaced` existed: the kind's names, as first emitted, not under the seal.
    legacy, _audit = _emit(msgspec.structs.replace(annotated, surfaced=None), value, headers)
    assert [(k, v) for k, v in legacy.headers if k.startswith("busguard-annotation-")] == extra  # type: ignore[attr-defined]
    assert _attestation(legacy.headers).annotations_sha256 is None  # type: ignore[attr-defined]
    with pytest.raises(AttestationError, match="does not bind"):
        verify_admitted(legacy.value, legacy.headers, GUARD.public_key, agent("executor"))  # type: ignore[attr-defined]


def test_notices_go_to_their_routes_topics_with_the_decisions_proof() -> None:
    d, value, headers = _admitted()
    notices = (Notice(route="probe-notices", key=b"slot", value=b"contested"), Notice(route="rebid", value=b"rebid please"))
    escalated = msgspec.structs.replace(d, outcome="escalate", reason="task_conflict", notices=notices)
    primary, audit, first, second = _emit(escalated, value, headers)
    assert primary.topic == TOPICS.reconciliation and audit.topic == TOPICS.audit  # type: ignore[attr-defined]
    assert (first.topic, first.key, first.value) == ("probe.notices", b"slot", b"contested")  # type: ignore[attr-defined]
    assert (second.topic, second.key, second.value) == ("busguard.rebid", None, b"rebid please")  # type: ignore[attr-defined]
    assert ("busguard-route", b"probe-notices") in first.headers  # type: ignore[attr-defined]
    proof = [h for h in audit.headers if h[0] in ("busguard-decision-id", "busguard-attestation", "busguard-seal")]  # type: ignore[attr-defined]
    assert all(h in first.headers and h in second.headers for h in proof)  # type: ignore[attr-defined]


def test_an_unknown_route_in_the_config_is_refused_naming_the_registered_ones(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from busguard.config import load_config
    from busguard.errors import ConfigError

    cfg = tmp_path / "c.toml"
    cfg.write_text('[[routes]]\nname = "h"\ninputs = ["in"]\ndownstream = "out"\n[topics.routes]\nnowhere = "x"\n')
    with pytest.raises(ConfigError, match="topics.routes.nowhere"):
        load_config(cfg)
