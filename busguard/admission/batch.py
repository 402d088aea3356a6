"""A batch of records through admission, with one state transaction.

The view a record sees includes everything decided earlier in the same batch
(two copies of one receipt in one poll must not both be admitted), so the
batch keeps an overlay of pending writes over a snapshot the store loaded for
exactly the keys this batch touches. The store runs `decide_all` inside its
write transaction, which makes check-and-record atomic even when several
guard processes share one store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

import msgspec

from busguard.admission.decide import Candidate, decide, precheck, undecodable, verify
from busguard.admission.policystep import Prepared, policy_kinds, prepare
from busguard.admission.types import NO_EFFECTS, AdmissionPolicy, Effects
from busguard.policies import KINDS, run_policies
from busguard.policies.seam import PolicyContext, PolicyInput
from busguard.protocol.envelope import DEFAULT_MAX_PAYLOAD_BYTES
from busguard.protocol.reasons import Outcome, Reason
from busguard.protocol.records import Coordinates, Decision, TaskEntry, carried_by_hash, record_sha256
from busguard.protocol.registry import KeyRegistry, KeyWindow
from busguard.state.keys import KeySet, NonceKey, PolicyKey, SourceKey, TaskKey, WindowKey, source_key
from busguard.state.snapshot import Snapshot, WindowState
from busguard.state.store import BatchStore
from busguard.state.writes import BatchWrites


class BatchState:
    """Snapshot plus this batch's own writes; implements admission's StateView.

    The writes are kept in the `BatchWrites` value the store will persist, so
    handing them over costs nothing and the store never sees this class."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._snap = snapshot
        self.trusted_from = snapshot.trusted_from
        self.decisions: list[Decision] = []
        #: (earlier, new) for each decided position found holding another record
        self.replaced: list[tuple[Decision, Decision]] = []
        self.writes = BatchWrites()
        self.new_decisions = self.writes.decisions
        self.nonces = self.writes.nonces
        self.windows = self.writes.windows
        self.tasks = self.writes.tasks

    def earlier(self, key: SourceKey) -> Decision | None:
        """A decision already made for this input position, in this batch or before."""
        return self.new_decisions.get(key) or self._snap.decisions.get(key)

    def nonce_seen(self, key: NonceKey) -> bool:
        return key in self.nonces or key in self._snap.nonces

    def window(self, key: WindowKey) -> WindowState | None:
        pending = self.windows.get(key)
        if pending is not None:
            return pending.state
        return self._snap.windows.get(key)

    def task(self, key: TaskKey) -> TaskEntry | None:
        return self.tasks.get(key) or self._snap.tasks.get(key)

    def policy_value(self, key: PolicyKey) -> bytes | None:
        pending = self.writes.policy.get(key)
        return pending.value if pending is not None else self._snap.policy.get(key)

    def apply(self, key: SourceKey, decision: Decision, effects: Effects) -> None:
        self.decisions.append(decision)
        self.new_decisions[key] = decision
        if effects.nonce is not None:
            self.nonces[effects.nonce.key] = effects.nonce
        if effects.window is not None:
            self.windows[effects.window.key] = effects.window
        if effects.task is not None:
            self.tasks[(effects.task.kind, effects.task.task_id)] = effects.task
        if effects.policy:
            self.writes.policy.update((row.key, row) for row in effects.policy)


class Input(NamedTuple):
    source: Coordinates
    value: bytes | None
    headers: Sequence[tuple[str, bytes]]
    key: bytes | None = None
    #: (reason, detail) when the client could not decode the record
    #: (busguard.runtime.tolerant_fetch): rejected as such, never prechecked.
    undecodable: tuple[Reason, str] | None = None
    #: the last offset an undecodable span covers (None: `source` alone)
    last_offset: int | None = None


def same_record(earlier: Decision, digest: str, receipt_id: str | None) -> bool:
    """Whether the record at a decided position is the one it was decided for.

    By the digest of its key, value and headers; a decision persisted before
    digests were recorded has none and is matched on its receipt id, as then."""
    if earlier.record_sha256 is not None:
        return earlier.record_sha256 == digest
    return earlier.receipt_id == receipt_id


#: Judges a would-be forward against the outputs' size limit: a detail when
#: the forwarded record could not be produced, None when it fits.
Oversize = Callable[[Decision, Input], str | None]


VerifyMany = Callable[[Sequence[Candidate]], Iterable[KeyWindow | None]]


def verify_serially(candidates: Sequence[Candidate]) -> list[KeyWindow | None]:
    return [verify(c) for c in candidates]


def keys_for(inputs: Sequence[Input], candidates: Sequence[Candidate], prepared: Iterable[Prepared] = ()) -> KeySet:
    nonces, windows, tasks = set(), set(), set()
    for c in candidates:
        nonces.add(c.nonce_key)
        if KINDS[c.task_key[0]].task_index:
            tasks.add(c.task_key)
        if c.window_key is not None:
            windows.add(c.window_key)
    policy: set[PolicyKey] = set().union(*(p.keys for p in prepared))
    return KeySet(sources=[source_key(i.source) for i in inputs], nonces=nonces, windows=windows, tasks=tasks, policy=policy)


class Checked(NamedTuple):
    """A batch after its stateless half (`check_batch`): what `admit_checked`
    decides inside the store's transaction. Holds no state, so it can be
    computed while the batch before it is still being produced."""

    inputs: Sequence[Input]
    digests: list[str]
    checked: list[Candidate | Decision]
    keys_by_candidate: dict[int, KeyWindow | None]
    prepared: dict[int, Prepared]
    keys: KeySet


def check_batch(
    inputs: Sequence[Input],
    *,
    registry: KeyRegistry,
    now_ms: int,
    policy: AdmissionPolicy,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    verify_many: VerifyMany = verify_serially,
    receivers: Mapping[str, frozenset[str]] | None = None,
) -> Checked:
    """Digests, prechecks, signature checks and the policies' parse and keys
    steps: everything about a batch that reads no state.

    The policy steps run last, and only for candidates whose signature
    verified and whose kind's interceptors do not object: every other record
    is refused by the core whatever its policy would say, so a forger (who
    needs only topic access and an agent's name) costs no policy work and
    adds no policy key to the snapshot load or, on PostgreSQL, to the
    batch's advisory locks."""
    served = receivers or {}
    digests = [record_sha256(i.key, i.value, i.headers) for i in inputs]
    checked = [
        precheck(i.source, i.value, i.headers, registry, now_ms, policy, max_payload_bytes, served.get(i.source.topic), digest)
        if i.undecodable is None
        else undecodable(i.source, now_ms, policy, *i.undecodable, digest, i.last_offset)
        for i, digest in zip(inputs, digests, strict=True)
    ]
    candidates = [c for c in checked if isinstance(c, Candidate)]
    keys_by_candidate = dict(zip(map(id, candidates), verify_many(candidates), strict=True))

    # The policy seam's first two steps (parse, keys) run before the
    # transaction, so the policies' rows load with the batch's snapshot; and
    # after every signature is known, so only authentic records reach them.
    # Only records of kinds with a policy pay for the test.
    stateful = policy_kinds()
    context = PolicyContext(registry, now_ms, policy.policy_settings)
    prepared: dict[int, Prepared] = {}
    # Copies of one signed record in a batch are parsed once (parse is pure,
    # and the payload is bound to the receipt by its payload_hash): a replay
    # flood costs one parse per batch, not one per copy.
    once: dict[tuple[str, bytes], Prepared] = {}
    for c in candidates:
        if c.envelope.receipt.kind in stateful and keys_by_candidate[id(c)] is not None and not _intercepted(c, policy):
            env = c.envelope
            p = once.get((env.receipt_id, env.signature))
            if p is None:
                p = once[(env.receipt_id, env.signature)] = prepare(PolicyInput(env, c.principal, c.task_key), context)
            prepared[id(c)] = p
    return Checked(inputs, digests, checked, keys_by_candidate, prepared, keys_for(inputs, candidates, prepared.values()))


def _intercepted(c: Candidate, policy: AdmissionPolicy) -> bool:
    """Whether the kind's stateless interceptors refuse the record; `decide`
    then refuses it with the same objection before its policy would run.
    (So they run twice for a kind with both; no built-in kind has both.)"""
    return bool(KINDS[c.envelope.receipt.kind].interceptors) and run_policies(c.envelope, policy.policy_settings) is not None


def admit_batch(
    inputs: Sequence[Input],
    *,
    store: BatchStore,
    registry: KeyRegistry,
    now_ms: int,
    policy: AdmissionPolicy,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    verify_many: VerifyMany = verify_serially,
    after_decide: Callable[[], None] | None = None,
    receivers: Mapping[str, frozenset[str]] | None = None,
    oversize: Oversize | None = None,
    on_replaced: Callable[[Decision, Decision], None] | None = None,
) -> list[Decision]:
    """One decision per input, in input order, persisted before returning.

    Signatures are verified before the store's write lock is taken (they are
    the slow part and need no state); everything that reads or writes state
    happens inside one transaction. `check_batch` then `admit_checked`, for
    a caller that wants to run the first half ahead.

    `receivers`: per input topic, the canonical receivers its route serves
    (topics absent: any receiver). `oversize`: a forward, or a decision
    with a kind policy's outcome, one of whose outputs it refuses becomes
    `reject`/`output_too_large` before it is persisted, with no state
    effects and none of the policy's outcome, so the audit record says what
    was emitted. `on_replaced(earlier, new)`
    is called, after the transaction, for each decided position that held a
    different record and was judged afresh.
    """
    checked = check_batch(
        inputs,
        registry=registry,
        now_ms=now_ms,
        policy=policy,
        max_payload_bytes=max_payload_bytes,
        verify_many=verify_many,
        receivers=receivers,
    )
    return admit_checked(
        checked, store=store, now_ms=now_ms, policy=policy, after_decide=after_decide, oversize=oversize, on_replaced=on_replaced
    )


def admit_checked(
    batch: Checked,
    *,
    store: BatchStore,
    now_ms: int,
    policy: AdmissionPolicy,
    after_decide: Callable[[], None] | None = None,
    oversize: Oversize | None = None,
    on_replaced: Callable[[Decision, Decision], None] | None = None,
    on_decided: Callable[[list[Decision]], None] | None = None,
    on_writes: Callable[[Snapshot, list[Decision], BatchWrites], None] | None = None,
    chain: str | None = None,
) -> list[Decision]:
    """The stateful half of `admit_batch`, in one store transaction; `now_ms`
    must be the one `batch` was checked with.

    `on_decided(decisions)` is called inside the transaction once every
    decision is made, before the store writes them (a caller may start work
    that needs only the decisions, such as sealing, while the store commits).
    A store that retries calls it again with a new list; the list returned
    is the one passed last.

    `on_writes(snapshot, decisions, writes)` is called after it, still inside
    the transaction, and may add to `writes` what must commit with the
    decisions (the guard's batch seal); `chain` is the seal chain whose tip
    the snapshot should hold (`Snapshot.tip`)."""
    inputs, digests, checked, keys_by_candidate, prepared, keys = batch
    sources = keys.sources
    if chain is not None:
        keys = msgspec.structs.replace(keys, chain=chain)

    done: list[BatchState] = []  # the last attempt's; a store may retry fn

    def decide_all(snapshot: Snapshot) -> BatchWrites:
        state = BatchState(snapshot)
        done[:] = [state]
        # Only a re-delivery after a crash (or a caller feeding one position
        # twice) has an earlier decision; skip the lookups otherwise.
        seen_before = bool(snapshot.decisions) or len(set(sources)) < len(sources)
        for sk, c, digest, item in zip(sources, checked, digests, inputs, strict=True):
            earlier = state.earlier(sk) if seen_before else None
            # The same record at a decided position is re-emitted as decided.
            # A different one there (the topic was recreated, or its log lost
            # while this store was kept) is judged afresh.
            if earlier is not None and same_record(earlier, digest, c.envelope.receipt_id if isinstance(c, Candidate) else c.receipt_id):
                state.decisions.append(earlier)
                continue
            if isinstance(c, Decision):  # refused by precheck; it carries the digest already
                decision, effects = c, NO_EFFECTS
            else:
                decision, effects = decide(c, keys_by_candidate[id(c)], state, now_ms, policy, prepared.get(id(c)) if prepared else None)
                if oversize is not None and (decision.outcome == Outcome.FORWARD or decision.annotations or decision.notices):
                    detail = oversize(decision, item)
                    if detail is not None:
                        # none of the policy's outcome: its outputs are not produced, and what is left is bounded by the receipt
                        decision = msgspec.structs.replace(
                            decision,
                            outcome=Outcome.REJECT,
                            reason=Reason.OUTPUT_TOO_LARGE,
                            detail=detail,
                            surfaced=None,
                            annotations=None,
                            **carried_by_hash(None, None),
                        )
                        effects = NO_EFFECTS
            if earlier is not None:
                state.replaced.append((earlier, decision))
            state.apply(sk, decision, effects)
        if after_decide is not None:
            after_decide()  # a test hook: crash here and the transaction never commits
        if on_decided is not None:
            on_decided(state.decisions)
        if on_writes is not None:
            on_writes(snapshot, state.decisions, state.writes)
        return state.writes

    store.run_batch(keys, now_ms, decide_all)
    (state,) = done
    if on_replaced is not None:
        for earlier, new in state.replaced:
            on_replaced(earlier, new)
    return state.decisions
