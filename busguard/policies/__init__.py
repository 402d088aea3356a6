"""The kind registry: every record kind busguard accepts, and what it needs.

Each kind has one `KindSpec`: its stateless interceptors (checks on the
verified envelope alone), its stateful policy (busguard.policies.seam: parse
-> keys -> decide), the state namespaces that policy may read and write,
whether its tasks have a single witness (the auditor's `missing_witness`
rule reads this), the reason codes it may give, and the extra topic routes
it emits to beyond downstream / reconciliation / dead-letter / audit (the
dev config creates them). `cli`, the dev config, the demo and the auditor
read this registry and name no kind themselves.

Adding a kind is its policy module and one entry in `_SPECS`, or, for a
kind in a package of its own, one `busguard.kinds` entry point
(busguard.policies.plugins; docs/design.md, "Adding a kind").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

import msgspec

from busguard.policies import plugins
from busguard.policies.award import policy as award
from busguard.policies.award import wire as award_wire
from busguard.policies.compromise import clearance as compromise_clearance
from busguard.policies.compromise import policy as compromise
from busguard.policies.seam import AnyPolicy, Objection, Reconciliation
from busguard.policies.taint import replay as taint_replay
from busguard.protocol.envelope import Envelope

#: A stateless check on a verified envelope, with the kind's settings (its
#: `settings` Struct as the config gives it, its defaults when the config has
#: no table for it; None for a kind without settings). It runs before any
#: state is read (docs/protocol.md 7.1 row 11): an objection here spends no
#: nonce, sequence or task id, so an allow-list belongs here.
Interceptor = Callable[[Envelope, Any], Objection | None]
#: busguard's own resolutions of an escalation (docs/protocol.md 11); a
#: kind's `reconciliation` may offer more.
CORE_RESOLUTIONS: Final = ("retransmission", "replay", "reject")
_REASON_CODE: Final = re.compile(r"[a-z][a-z0-9_]{0,63}")


class KindSpec(msgspec.Struct, frozen=True, kw_only=True):
    kind: str
    interceptors: tuple[Interceptor, ...] = ()
    policy: AnyPolicy | None = None
    #: PolicyKey namespaces the policy may read and write; empty: its own kind name.
    namespaces: tuple[str, ...] = ()
    single_witness: bool = False
    #: The reason codes its policy may object with. busguard's own `Reason`s
    #: may be named; any other code is the kind's own (lowercase, `_`, at most
    #: 64 characters, documented by the kind), and an objection with a code
    #: neither busguard's nor listed here is a `PolicyContractError`.
    reasons: tuple[str, ...] = ()
    routes: tuple[str, ...] = ()
    #: Annotations of an admitted record that its forward also carries, as
    #: `busguard-annotation-<name>` headers (a caution flag a consumer acts on
    #: without reading the audit topic); every annotation is on the audit record.
    forward_annotations: tuple[str, ...] = ()
    #: Whether the task index judges the kind's records (docs/protocol.md 7.1
    #: rows 13 and 17-20): one admission per (kind, task_id), later records of
    #: the task duplicates or escalations. Off, the kind owns its tasks: no
    #: task entry is read or written, every authentic, fresh record that the
    #: nonce and session checks pass goes to its policy's `decide`, which may
    #: admit several records of one task (quotas, streams, multi-part
    #: payloads), and the auditor's `multiple_forwards` rule does not apply.
    task_index: bool = True
    #: The kind's own settings: a msgspec Struct type decoded from the
    #: config's `[<settings_section>]` table (absent: the Struct's defaults),
    #: handed to its policy's `parse` as `context.settings[<settings_section>]`.
    settings: type | None = None
    #: The config table and settings key; "" means the kind's name. Kinds
    #: that share a policy share a section.
    settings_section: str = ""
    #: The kind's "one witness" invariant, which `busguard audit` checks and
    #: prints (`witness_rule`): "task", at most one admitted record per
    #: (kind, task_id), which the task index enforces (so it needs it);
    #: "key", at most one per value of the `witness_key` annotations (a kind
    #: with its task index off whose policy admits one record per key of its
    #: own, such as a config key and version); "several", no limit (a quota,
    #: a stream). None: "task" with the task index on, "several" off.
    witness: Literal["task", "key", "several"] | None = None
    #: With witness "key": the annotations whose values, together, are an
    #: admitted record's key (its policy sets them on every admission).
    witness_key: tuple[str, ...] = ()
    #: How the kind's escalations are settled (seam.Reconciliation): its
    #: automatic settlement and its operator resolutions, with the state
    #: change each makes. None: busguard's own (held for an operator, who
    #: may resolve it as retransmission, replay or reject).
    reconciliation: Reconciliation | None = None

    def __post_init__(self) -> None:
        if self.settings is not None and not (isinstance(self.settings, type) and issubclass(self.settings, msgspec.Struct)):
            raise ValueError(f"kind {self.kind!r}: settings must be a msgspec.Struct type, not {self.settings!r}")
        for code in self.reasons:
            if not _REASON_CODE.fullmatch(code):
                raise ValueError(
                    f"kind {self.kind!r}: reason {code[:80]!r} is not a reason code (lowercase letters, digits and _, at most 64)"
                )
        if not self.task_index and self.policy is None:
            raise ValueError(f"kind {self.kind!r}: task_index off needs a policy to decide its records")
        if not self.task_index and self.single_witness:
            raise ValueError(f"kind {self.kind!r}: a single-witness kind needs the task index")
        if (self.witness == "task") != self.task_index and self.witness is not None:
            raise ValueError(
                f"kind {self.kind!r}: witness {self.witness!r} with the task index "
                f"{'on' if self.task_index else 'off'}: the task index is what keeps one witness per task, and only that"
            )
        if self.reconciliation is not None:
            for choice in self.reconciliation.choices:
                if not _REASON_CODE.fullmatch(choice) or choice in CORE_RESOLUTIONS:
                    raise ValueError(
                        f"kind {self.kind!r}: resolution {choice[:80]!r} is not a choice of its own "
                        f"(lowercase letters, digits and _, at most 64, none of {', '.join(CORE_RESOLUTIONS)})"
                    )
        if (self.witness == "key") != bool(self.witness_key):
            raise ValueError(f"kind {self.kind!r}: witness 'key' needs witness_key (the annotations naming the key), and only it")

    @property
    def witness_rule(self) -> str:
        """The declared witness invariant, resolved (`witness`)."""
        return self.witness or ("task" if self.task_index else "several")

    def describe_witness(self) -> str:
        """The rule as `busguard audit` and `busguard kinds` print it."""
        rule = self.witness_rule
        if rule == "task":
            return "one admitted per task" + (", and one for every task with decisions (single witness)" if self.single_witness else "")
        if rule == "key":
            return f"one admitted per key ({', '.join(self.witness_key)}); several per task allowed"
        return "several admitted per task allowed"

    @property
    def section(self) -> str:
        return self.settings_section or self.kind

    def may_use(self, namespace: str) -> bool:
        return namespace in self.namespaces if self.namespaces else namespace == self.kind


_SPECS: Final = (
    KindSpec(kind="handoff", single_witness=True),
    KindSpec(kind="ack"),
    # contract-net awards (seed 002): one policy, one row per call (docs/protocol.md, 15)
    KindSpec(kind=award_wire.KIND_CALL, policy=award.POLICY, namespaces=award.NAMESPACES, reasons=award.CALL_REASONS),
    KindSpec(kind=award_wire.KIND_BID, policy=award.POLICY, namespaces=award.NAMESPACES, reasons=award.BID_REASONS),
    KindSpec(
        kind=award_wire.KIND_AWARD,
        policy=award.POLICY,
        namespaces=award.NAMESPACES,
        reasons=award.AWARD_REASONS,
        routes=(award.REBID_ROUTE,),
    ),
    KindSpec(
        kind=award_wire.KIND_RESULT,
        policy=award.POLICY,
        namespaces=award.NAMESPACES,
        reasons=award.RESULT_REASONS,
        forward_annotations=("verification",),
    ),
    KindSpec(
        kind=taint_replay.KIND, policy=taint_replay.TaintReplayPolicy(), reasons=taint_replay.REASONS, forward_annotations=("taint.unit",)
    ),
    KindSpec(
        kind="session-handoff",
        policy=compromise.HANDOFF_POLICY,
        namespaces=("compromise",),
        reasons=compromise.HANDOFF_REASONS,
        routes=("quarantine",),
        forward_annotations=compromise.FORWARD_ANNOTATIONS,
        settings=compromise.CompromiseSettings,
        settings_section=compromise.SETTINGS_KEY,
    ),
    KindSpec(
        kind="compromise-notice",
        policy=compromise.NOTICE_POLICY,
        namespaces=("compromise",),
        reasons=compromise.NOTICE_REASONS,
        settings=compromise.CompromiseSettings,
        settings_section=compromise.SETTINGS_KEY,
    ),
    KindSpec(
        kind=compromise_clearance.KIND_COMPROMISE_CLEARANCE,
        policy=compromise_clearance.CLEARANCE_POLICY,
        namespaces=("compromise",),
        reasons=compromise_clearance.CLEARANCE_REASONS,
        settings=compromise.CompromiseSettings,
        settings_section=compromise.SETTINGS_KEY,
    ),
)

_PLUGINS, _PLUGIN_ERRORS = plugins.discover({s.kind for s in _SPECS}, KindSpec)

#: By kind name: the built-ins, then the installed `busguard.kinds` plugins.
#: A Mapping to its readers; tests add a test-only kind with
#: `monkeypatch.setitem(KINDS, spec.kind, spec)`.
KINDS: Final[Mapping[str, KindSpec]] = {s.kind: s for s in (*_SPECS, *_PLUGINS)}
#: The kinds that came from plugins (`busguard kinds` shows where each is from).
PLUGIN_KINDS: Final = frozenset(s.kind for s in _PLUGINS)


def load_errors() -> tuple[str, ...]:
    """Why each refused kind plugin was refused (busguard.policies.plugins)."""
    return tuple(_PLUGIN_ERRORS)


def kind_names() -> tuple[str, ...]:
    return tuple(KINDS)


def single_witness(kind: str | None) -> bool:
    """Whether a task of this kind must have one admitted witness (auditor)."""
    spec = KINDS.get(kind) if kind is not None else None
    return spec is not None and spec.single_witness


def resolution_choices() -> list[str]:
    """Every resolution an operator may name: busguard's, then the kinds' own (`busguard escalations resolve --as`)."""
    own = sorted({c for spec in KINDS.values() if spec.reconciliation is not None for c in spec.reconciliation.choices})
    return [*CORE_RESOLUTIONS, *own]


def witness_rule(kind: str | None) -> str:
    """The kind's witness rule (`KindSpec.witness_rule`; an unknown kind: "task", the strict rule; auditor)."""
    spec = KINDS.get(kind) if kind is not None else None
    return "task" if spec is None else spec.witness_rule


def task_indexed(kind: str | None) -> bool:
    """Whether the task index judges this kind (an unknown kind: yes, the strict rule; auditor)."""
    spec = KINDS.get(kind) if kind is not None else None
    return spec is None or spec.task_index


def kind_settings(spec: KindSpec, settings: Mapping[str, object]) -> object:
    """The kind's settings object from the deployment's (`AdmissionPolicy.
    policy_settings`, by section): its Struct's defaults when absent, None
    for a kind that declares none."""
    found = settings.get(spec.section)
    if spec.settings is None or isinstance(found, spec.settings):
        return found if spec.settings is not None else None
    return spec.settings()


def run_policies(envelope: Envelope, settings: Mapping[str, object]) -> Objection | None:
    """The kind's stateless interceptors, in order, with its settings; the first objection wins."""
    spec = KINDS[envelope.receipt.kind]
    mine = kind_settings(spec, settings)
    for interceptor in spec.interceptors:
        objection = interceptor(envelope, mine)
        if objection is not None:
            return objection
    return None


__all__ = [
    "CORE_RESOLUTIONS",
    "KINDS",
    "PLUGIN_KINDS",
    "Interceptor",
    "KindSpec",
    "Objection",
    "kind_names",
    "kind_settings",
    "load_errors",
    "resolution_choices",
    "run_policies",
    "single_witness",
    "task_indexed",
    "witness_rule",
]
