"""Receiver binding: a route that declares its receivers rejects a handoff for
anyone else (`wrong_receiver`), and the receiving SDK refuses a receipt
addressed to another agent than the one opening it. No Kafka."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from busguard import AttestationError, open_admitted, verify_admitted
from busguard.admission.batch import Input, admit_batch
from busguard.config import Config, TopicsConfig, load_config
from busguard.errors import ConfigError
from busguard.protocol.attestation import attest, decision_bytes, seal
from busguard.protocol.identity import canonical_principal
from busguard.protocol.keyfile import new_identity
from busguard.protocol.reasons import Outcome, Reason
from busguard.protocol.records import Coordinates, Decision
from busguard.protocol.signing import Signer
from busguard.runtime.outputs import Sealed, outputs_for
from busguard.sdk.sender import SignedRecord

from .harness import Harness, agent, sender

GUARD = new_identity()
EXECUTOR = agent("executor")
AUDITOR = agent("auditor")
SERVED = {"to-executor": frozenset({canonical_principal(EXECUTOR)}), "to-auditor": frozenset({canonical_principal(AUDITOR)})}


def _admit(h: Harness, topic: str, rec: SignedRecord, offset: int) -> Decision:
    (d,) = admit_batch(
        [Input(Coordinates(topic=topic, partition=0, offset=offset), rec.value, rec.headers)],
        store=h.store,
        registry=h.registry,
        now_ms=h.now,
        policy=h.policy,
        receivers=SERVED,
    )
    return d


def test_a_handoff_for_another_receiver_is_rejected_and_uses_up_nothing() -> None:
    h = Harness()
    rec = sender("planner").sign(kind="handoff", task_id="t", receiver=EXECUTOR, payload=b"work")
    wrong = _admit(h, "to-auditor", rec, 0)
    assert (wrong.outcome, wrong.reason) == (Outcome.REJECT, Reason.WRONG_RECEIVER)
    assert EXECUTOR[:20] in wrong.detail and wrong.receiver == EXECUTOR
    # The misrouted copy recorded no nonce, sequence or task: the real delivery is admitted.
    right = _admit(h, "to-executor", rec, 0)
    assert (right.outcome, right.reason) == (Outcome.FORWARD, Reason.ADMITTED)


def test_a_route_serves_a_receiver_under_either_spelling_of_its_key() -> None:
    h = Harness()
    ink = "ink:" + EXECUTOR.removeprefix("tulpa:")
    rec = sender("planner").sign(kind="handoff", task_id="t", receiver=ink, payload=b"work")
    assert _admit(h, "to-executor", rec, 0).reason == Reason.ADMITTED


def test_a_route_without_receivers_keeps_todays_behaviour() -> None:
    h = Harness()
    rec = sender("planner").sign(kind="handoff", task_id="t", receiver="anyone-at-all", payload=b"work")
    assert _admit(h, "undeclared-route", rec, 0).reason == Reason.ADMITTED


def test_wrong_receiver_is_judged_before_the_signature() -> None:
    """A forger gets wrong_receiver, not a verified-signature path: nothing is recorded either way."""
    h = Harness()
    rec = sender("planner").sign(kind="handoff", task_id="t", receiver=EXECUTOR, payload=b"work")
    forged = msgspec.structs.replace(rec, headers=[rec.headers[0], ("busguard-signature", b"A" * 86)])
    assert _admit(h, "to-auditor", forged, 0).reason == Reason.WRONG_RECEIVER
    assert _admit(h, "to-executor", forged, 1).reason == Reason.BAD_SIGNATURE


# -- the receiving SDK --------------------------------------------------------------


def _forwarded(receiver: str) -> tuple[bytes | None, list[tuple[str, bytes]]]:
    rec = sender("planner").sign(kind="handoff", task_id="t", receiver=receiver, payload=b"work")
    (d,) = Harness().feed(rec)
    assert d.outcome == Outcome.FORWARD
    body = decision_bytes(d)
    att = attest(d, body, GUARD.agent_id)
    primary, _ = outputs_for(
        Sealed(d, body, att, seal(Signer(GUARD.seed), att)), None, rec.value, rec.headers, "down", TopicsConfig(), 1 << 20
    )
    return primary.value, primary.headers


def test_open_admitted_refuses_a_record_addressed_to_someone_else() -> None:
    value, headers = _forwarded(EXECUTOR)
    assert open_admitted(value, headers, GUARD.public_key, EXECUTOR).receipt.receiver == EXECUTOR
    with pytest.raises(AttestationError, match="addressed to"):
        open_admitted(value, headers, GUARD.public_key, AUDITOR)
    with pytest.raises(AttestationError, match="addressed to"):
        verify_admitted(value or b"", headers, GUARD.public_key, "executor")  # a named agent is another principal


def test_open_admitted_accepts_the_other_spelling_of_the_openers_key() -> None:
    value, headers = _forwarded(EXECUTOR)
    assert open_admitted(value, headers, GUARD.public_key, "ink:" + EXECUTOR.removeprefix("tulpa:")).decision_id


def test_the_receiver_check_is_skipped_only_when_asked_for_explicitly() -> None:
    value, headers = _forwarded(EXECUTOR)
    assert open_admitted(value, headers, GUARD.public_key, None, any_receiver=True).receipt.receiver == EXECUTOR
    with pytest.raises(TypeError):
        open_admitted(value, headers, GUARD.public_key, None)
    with pytest.raises(TypeError):
        open_admitted(value, headers, GUARD.public_key, AUDITOR, any_receiver=True)


# -- config ------------------------------------------------------------------------


def _config(tmp_path: Path, receivers: str) -> Path:
    p = tmp_path / "busguard.toml"
    p.write_text(f'[[routes]]\nname = "h"\ninputs = ["in"]\ndownstream = "out"\n{receivers}\n')
    return p


def test_config_receivers_reach_the_core_canonicalised(tmp_path: Path) -> None:
    ink = "ink:" + EXECUTOR.removeprefix("tulpa:")
    cfg = load_config(_config(tmp_path, f'receivers = ["{ink}", "auditor"]'))
    assert cfg.receivers == {"in": frozenset({canonical_principal(EXECUTOR), "auditor"})}
    assert Config().receivers == {}


@pytest.mark.parametrize(("line", "value"), [("receivers = []", []), ('receivers = [""]', "")])
def test_config_refuses_unusable_receivers(tmp_path: Path, line: str, value: object) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(_config(tmp_path, line))
    assert err.value.field == "routes[0].receivers" and err.value.value == value
