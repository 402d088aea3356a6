"""A tiny admission harness for kind authors: a registry, a store and a clock, no Kafka.

Admission is pure (docs/design.md, "Principles"), so a kind's policy is
tested through the real admission path with nothing but this module:
test agents with deterministic keys, a `Harness` that feeds signed records
to `admit_batch` over an in-memory store, and `forged` for what a writer
without the key can send. busguard's own tests use it, and so does the
example kind in examples/quota_kind.

>>> h = Harness()
>>> record = sender("planner").sign(kind="handoff", task_id="t-1", receiver=agent("executor"), payload=b"{}")
>>> [str(d.reason) for d in h.feed(record, record)]
['admitted', 'exact_duplicate']

`Harness.forward` goes one step further, to what busguard would publish
downstream for an admitted record (its value and headers, sealed by the
test guard `GUARD`), for agents' tests that open forwards:

>>> value, headers = Harness().forward(record)
>>> [name for name, _ in headers]
['busguard-receipt', 'busguard-signature', 'busguard-decision-id', 'busguard-attestation', 'busguard-seal']

`Harness.restart(reopen)` continues over the same durable store after a
restart (the input's next offsets, none moved by hand), and
`Harness.settle(escalation, choice)` settles a kind's escalation as the
reconciler does. docs/design.md, "Adding a kind", documents the API.

The keys are derived from the agent's name (`seed`): test keys only.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Sequence

from busguard.admission.batch import Input, admit_batch
from busguard.admission.types import AdmissionPolicy
from busguard.config import TopicsConfig
from busguard.policies.seam import Settlement
from busguard.protocol.attestation import attest, decision_bytes, seal
from busguard.protocol.envelope import HEADER_SIGNATURE
from busguard.protocol.identity import agent_id_for_key, canonical_principal
from busguard.protocol.records import Coordinates, Decision
from busguard.protocol.registry import KeyRegistry, KeyWindow
from busguard.protocol.signing import Signer, public_key_from_seed
from busguard.protocol.timestamps import parse_timestamp
from busguard.runtime.outputs import Sealed, outputs_for
from busguard.sdk.sender import Sender, SignedRecord
from busguard.state.backends import StoreOptions, open_store
from busguard.state.store import StateStore

NOW = parse_timestamp("2026-11-29T12:00:00.000Z")


def seed(name: str) -> bytes:
    return hashlib.sha256(b"busguard-test-key:" + name.encode()).digest()


def agent(name: str) -> str:
    return agent_id_for_key(public_key_from_seed(seed(name)))


def registry(*names: str, named: dict[str, tuple[KeyWindow, ...]] | None = None) -> KeyRegistry:
    """A key registry of the named test agents (plus `named`'s, as given)."""
    agents: dict[str, tuple[KeyWindow, ...]] = {
        canonical_principal(agent(n)): (KeyWindow(key_id=agent(n)[6:], public_key=public_key_from_seed(seed(n))),) for n in names
    }
    agents.update(named or {})
    return KeyRegistry(agents)


class Harness:
    def __init__(
        self,
        *names: str,
        policy: AdmissionPolicy | None = None,
        store: StateStore | None = None,
        reg: KeyRegistry | None = None,
        now: int = NOW,
        store_created: int = NOW - 3_600_000,
    ) -> None:
        self.policy = policy or AdmissionPolicy()
        self.store: StateStore = store if store is not None else open_store("memory", None, StoreOptions(now_ms=store_created))
        self.registry = reg or registry(*(names or ("planner", "executor")))
        self.now = now
        self.offsets = itertools.count()
        self.topic = "agents.in"

    def restart(self, reopen: Callable[[], StateStore]) -> Harness:
        """This harness after a restart of its guard: its store is closed,
        then `reopen()` opens the same durable store again (a lambda
        opening the same path; after the close, so a single-writer store
        such as RocksDB can be reopened), with the same registry, policy,
        clock and input topic, and the input's next offsets, as a restarted
        guard resumes after its last committed offset.
        (A new `Harness` would feed from offset 0 again: positions already
        decided, which admission re-judges as a rewritten log, row 0 of
        docs/protocol.md 7.1, not as new records.)"""
        self.store.close()
        again = Harness(policy=self.policy, store=reopen(), reg=self.registry, now=self.now)
        again.offsets, again.topic = self.offsets, self.topic
        return again

    def feed_raw(
        self, items: Sequence[tuple[bytes | None, list[tuple[str, bytes]]]], offsets: Sequence[int] | None = None
    ) -> list[Decision]:
        offs = list(offsets) if offsets is not None else [next(self.offsets) for _ in items]
        inputs = [Input(Coordinates(topic=self.topic, partition=0, offset=o), v, h) for (v, h), o in zip(items, offs, strict=True)]
        return admit_batch(inputs, store=self.store, registry=self.registry, now_ms=self.now, policy=self.policy)

    def feed(self, *records: SignedRecord, offset: int | None = None) -> list[Decision]:
        return self.feed_raw([(r.value, r.headers) for r in records], None if offset is None else [offset])

    def one(self, record: SignedRecord, offset: int | None = None) -> Decision:
        return self.feed(record, offset=offset)[0]

    def settle(self, escalation: Decision, choice: str | None = None) -> Settlement | None:
        """The escalation's kind settles it as the reconciler would
        (`KindSpec.reconciliation`; busguard.reconcile.kinds): `choice` None
        for its automatic settlement, else an operator's choice; the state
        change is applied to this harness's store with its marker, so a
        second call for the escalation changes nothing and answers the same."""
        from busguard.reconcile.kinds import KindSettler

        return KindSettler(self.store, self.policy.decision_retention_ms).settle(escalation, choice, self.now)

    def forward(self, record: SignedRecord, offset: int | None = None) -> tuple[bytes, list[tuple[str, bytes]]]:
        """The downstream record busguard would publish for `record`, sealed
        per record by `GUARD` (whose public key is `GUARD_PUBLIC_KEY`); a
        record that is not admitted raises ValueError."""
        d = self.one(record, offset)
        if d.outcome != "forward":
            raise ValueError(f"not forwarded: {d.reason}")
        body = decision_bytes(d)
        att = attest(d, body, agent("guard"))
        sealed = Sealed(d, body, att, seal(Signer(seed("guard")), att))
        primary = outputs_for(sealed, None, record.value, record.headers, "agents.out", TopicsConfig(), 1 << 20)[0]
        return primary.value or b"", list(primary.headers)


GUARD_PUBLIC_KEY = public_key_from_seed(seed("guard"))


def forged(record: SignedRecord, donor: SignedRecord) -> tuple[bytes, list[tuple[str, bytes]]]:
    """`record` under `donor`'s signature: a valid signature by the same
    sender over another receipt, what a writer without the key can send."""
    sig = dict(donor.headers)[HEADER_SIGNATURE]
    return record.value, [(n, sig if n == HEADER_SIGNATURE else v) for n, v in record.headers]


def sender(name: str, now: int = NOW, **kwargs: object) -> Sender:
    return Sender(seed(name), clock_ms=lambda: now, **kwargs)  # type: ignore[arg-type]
