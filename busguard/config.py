"""The one TOML file operators tune, typed and validated at load.

Every error names the file, the key, the value and what is allowed. Relative
paths in the file are resolved against the file's own directory, so a config
means the same thing whatever directory the guard is started from.

Environment overrides (for containers): `BUSGUARD_<SECTION>__<KEY>=value`
sets `[section] key`, e.g. `BUSGUARD_KAFKA__BOOTSTRAP_SERVERS=kafka:9092`;
each `__` is a dot, so a kind's dotted section is
`BUSGUARD_CONFIG__UPDATE__SENDERS` for `[config.update] senders`.
The value is read as a TOML value when it parses as one (numbers, booleans,
quoted strings, arrays) and as a plain string otherwise. Routes are not
overridable from the environment; change the file.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import msgspec

from busguard.admission.types import AdmissionPolicy
from busguard.config_checks import validate
from busguard.errors import ConfigError, read_toml
from busguard.policies import KINDS
from busguard.policies.award.limits import AwardConfig
from busguard.policies.award.policy import AwardPolicy
from busguard.policies.award.registry import VerificationConfig, VerificationRegistry, build_registry
from busguard.protocol.identity import canonical_principal
from busguard.protocol.timestamps import parse_timestamp

ENV_PREFIX = "BUSGUARD_"

Positive = Annotated[int, msgspec.Meta(ge=1)]
NonNegative = Annotated[int, msgspec.Meta(ge=0)]
Port = Annotated[int, msgspec.Meta(ge=0, le=65535)]


Compression = Literal["none", "gzip", "snappy", "lz4", "zstd"]
#: The smallest kafka.max_message_bytes accepted: room for the bounded
#: dead-letter record (busguard.runtime.outputs) with every field at its
#: longest, many times over.
MIN_MAX_MESSAGE_BYTES: Final = 65_536
#: batch.max_inflated_bytes by default: the most bytes one compressed record
#: batch's records may inflate to before the batch is refused unread
#: (busguard.runtime.inflate). 16 MiB: librdkafka's batches are at most 1 MB
#: uncompressed, the Java client's 16 KiB default batch.size at ten times
#: compression is 160 KiB; a raised batch.size at that ratio still fits.
DEFAULT_MAX_INFLATED_BYTES: Final = 16 * 1024 * 1024
#: The most verify threads "auto" picks (`BatchConfig.threads`).
AUTO_VERIFY_THREADS_MAX: Final = 8


class KafkaConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    bootstrap_servers: str = "127.0.0.1:9092"
    group_id: str = "busguard"
    #: Static membership (KIP-345): this process's fixed member name in the
    #: group, so a restart within session_timeout_ms takes its partitions back
    #: without a rebalance. One per live process; "{hostname}" is replaced by
    #: the host name. "" (default): dynamic membership. docs/config.md.
    group_instance_id: str = ""
    client_id: str = "busguard"
    #: Exactly-once outputs (Kafka transactions): each batch's outputs and its
    #: input offsets commit in one transaction. This process's transactional
    #: id prefix ("{hostname}" replaced; the role is appended, so a guard and
    #: a reconciler never fence each other); a second process started with the
    #: same id fences the first. "" (default): off. docs/config.md.
    transactional_id: str = ""
    idempotence: bool = True
    acks: Literal["all", "1"] = "all"
    session_timeout_ms: Positive = 10_000
    heartbeat_interval_ms: Positive = 3_000
    max_poll_interval_ms: Positive = 300_000
    rebalance_timeout_ms: Positive = 60_000
    request_timeout_ms: Positive = 40_000
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    create_topics: bool = False
    topic_partitions: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 4
    #: retention.ms of the audit topic busguard creates (`create_topics`);
    #: -1: kept forever. The audit topic is the proof (docs/operations.md 2).
    audit_retention_ms: Annotated[int, msgspec.Meta(ge=-1)] = -1
    #: The least retention.ms an existing audit topic may have at start
    #: (-1: it must be kept forever). Default: Apache Kafka's default
    #: retention.ms, 7 days (busguard.runtime.topic_checks).
    audit_min_retention_ms: Annotated[int, msgspec.Meta(ge=-1)] = 604_800_000
    #: The brokers' limit on one record batch (Apache Kafka's message.max.bytes,
    #: or the output topics' max.message.bytes if lower). Default: Kafka's.
    max_message_bytes: Annotated[int, msgspec.Meta(ge=MIN_MAX_MESSAGE_BYTES, le=1 << 30)] = 1_048_588
    #: zstd: the CPU of no compression (gzip, aiokafka's level 9, cost ~50 µs
    #: per input record) and smaller batches; docs/config.md says who can read it.
    compression: Compression = "zstd"
    #: How long the broker may hold a fetch that has no records yet. Apache
    #: Kafka answers a waiting fetch as soon as records arrive, so this only
    #: sets how often an idle consumer asks (Kafka's default). tansu answers
    #: only when it expires: 20 there (docs/config.md).
    fetch_max_wait_ms: Annotated[int, msgspec.Meta(ge=1, le=60_000)] = 500


class Route(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    name: str
    inputs: list[str]
    downstream: str
    #: Agent ids this route delivers to; a receipt addressed to anyone else is
    #: rejected (`wrong_receiver`). None: any receiver.
    receivers: list[str] | None = None


class TopicsConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    reconciliation: str = "busguard.reconciliation"
    dead_letter: str = "busguard.dead-letter"
    audit: str = "busguard.audit"
    replies: str = "busguard.replies"
    #: A kind's extra routes (KindSpec.routes: a rebid notice, a quarantine
    #: copy) -> their topics; a route not named here goes to "busguard.<route>".
    routes: dict[str, str] = msgspec.field(default_factory=dict)

    def route_topic(self, route: str) -> str:
        return self.routes.get(route) or f"busguard.{route}"


class AdmissionConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    namespace: str = ""
    max_age_ms: Positive = 300_000
    max_future_ms: NonNegative = 30_000
    nonce_retention_ms: Positive = 600_000
    nonce_scope: Literal["global", "principal"] = "global"
    window_size: Annotated[int, msgspec.Meta(ge=1, le=65536)] = 1024
    session_retention_ms: Positive = 7 * 86_400_000
    task_retention_ms: Positive = 7 * 86_400_000
    decision_retention_ms: Positive = 7 * 86_400_000


class StateConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    #: a name in busguard.state.backends.BACKENDS (config_checks refuses any other)
    backend: str = "sqlite"
    path: str = "../var/busguard-state.db"
    synchronous: Literal["full", "normal"] = "full"
    expire_interval_s: Positive = 60
    #: libpq connection string or URI for backend "postgres"; may hold a
    #: password (then prefer BUSGUARD_STATE__DSN); never logged unredacted.
    dsn: str = ""
    #: The PostgreSQL schema holding this deployment's tables (created on first use).
    schema: str = "busguard"
    #: How long a batch waits for an unreachable database before the guard stops.
    retry_s: Annotated[float, msgspec.Meta(gt=0, le=86_400)] = 120.0
    #: PostgreSQL: the most advisory locks a batch holds on policy rows (state/postgres/locks.py).
    max_policy_locks: Annotated[int, msgspec.Meta(ge=2, le=4096)] = 64


class KeysConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    registry: str = "keys.toml"
    guard_key: str = "../var/guard.key"
    create_guard_key: bool = False
    operators: str | None = None
    guard_key_resolves: bool = True
    watch: bool = True
    reconciler_key: str | None = None
    create_reconciler_key: bool = False
    guard_public_key: str | None = None
    single_key_audit: bool = False
    single_key_until: str | None = None

    @property
    def guard_public_key_bytes(self) -> bytes | None:
        """`guard_public_key` decoded (validated at load)."""
        if self.guard_public_key is None:
            return None
        from busguard.protocol.identity import multikey_decode

        text = self.guard_public_key
        return multikey_decode(text.split(":", 1)[1] if text.startswith(("tulpa:", "ink:")) else text)

    @property
    def single_key_until_ms(self) -> int | None:
        """`single_key_until` in epoch ms (validated at load)."""
        return None if self.single_key_until is None else parse_timestamp(self.single_key_until)


class BatchConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    max_records: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 500
    linger_ms: NonNegative = 20
    max_payload_bytes: Annotated[int, msgspec.Meta(ge=0, le=64 * 1024 * 1024)] = 1_048_576
    #: The most bytes a compressed batch's records may inflate to; past it the
    #: batch is undecodable_batch, unread (docs/config.md, operations 2.1).
    max_inflated_bytes: Annotated[int, msgspec.Meta(ge=MIN_MAX_MESSAGE_BYTES, le=1 << 30)] = DEFAULT_MAX_INFLATED_BYTES
    #: "auto": one fewer than the CPUs this process may run on (the event
    #: loop keeps one), at least 1, at most 8; `threads()` resolves it
    verify_threads: Annotated[int, msgspec.Meta(ge=1, le=64)] | Literal["auto"] = "auto"
    revoke_budget_ms: Positive = 10_000
    #: "batch": one signature per batch over a chained Merkle tree head
    #: (docs/protocol.md 12.6); "record": one per decision, as before it existed
    seal: Literal["batch", "record"] = "batch"
    #: "batch": the batch-sealed decisions of a batch share batch audit
    #: records (docs/protocol.md 12.7; needs seal = "batch"); "record": one
    #: audit record per decision
    audit: Literal["batch", "record"] = "record"

    def threads(self, cpus: int) -> int:
        """The verify and seal threads for a process that may run on `cpus`
        CPUs. Why "auto" is cores minus one: on 2 cores a second verify
        thread only adds GIL hand-offs (docs/performance.md,
        "Signatures and verify threads": 1–11 % more CPU per record than one,
        and no more throughput)."""
        if self.verify_threads != "auto":
            return self.verify_threads
        return max(1, min(AUTO_VERIFY_THREADS_MAX, cpus - 1))


class LogConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    format: Literal["console", "json"] = "console"
    level: Literal["debug", "info", "warning", "error"] = "info"


class OpsConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    host: str = "127.0.0.1"
    port: Port = 9464


class ReconcileConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    group_id: str = "busguard-reconcile"
    state_path: str = "../var/busguard-reconcile.db"
    auto_resolve_retransmissions: bool = True


class AuditConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """What else `busguard audit` accepts as this deployment's own
    (busguard.audit.deployment): a log outlives routes and namespaces."""

    #: decision-id namespaces the deployment used before its current one
    former_namespaces: list[str] = []
    #: input topics of routes it no longer has
    former_inputs: list[str] = []


class Config(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    kafka: KafkaConfig = KafkaConfig()
    routes: list[Route] = []
    topics: TopicsConfig = TopicsConfig()
    admission: AdmissionConfig = AdmissionConfig()
    state: StateConfig = StateConfig()
    keys: KeysConfig = KeysConfig()
    batch: BatchConfig = BatchConfig()
    log: LogConfig = LogConfig()
    ops: OpsConfig = OpsConfig()
    reconcile: ReconcileConfig = ReconcileConfig()
    audit: AuditConfig = AuditConfig()
    verification: VerificationConfig = VerificationConfig()
    award: AwardConfig = AwardConfig()
    source: str = ""  # the file this was loaded from; set by load_config
    #: The settings of every registered kind that declares them
    #: (`KindSpec.settings`), by section, decoded from `[<section>]`; set by
    #: load_config, handed to the kinds' policies by `policy()`.
    kind_settings: dict[str, Any] = {}

    @property
    def base_dir(self) -> Path:
        return Path(self.source).resolve().parent if self.source else Path.cwd()

    def path(self, value: str) -> Path:
        p = Path(value).expanduser()
        return p if p.is_absolute() else (self.base_dir / p).resolve()

    @property
    def input_topics(self) -> list[str]:
        return sorted({t for r in self.routes for t in r.inputs})

    @property
    def output_topics(self) -> list[str]:
        t = self.topics
        routes = {t.route_topic(r) for spec in KINDS.values() for r in spec.routes}
        return sorted({r.downstream for r in self.routes} | {t.reconciliation, t.dead_letter, t.audit, t.replies} | routes)

    @property
    def downstreams(self) -> dict[str, str]:
        """Input topic -> the downstream topic its admitted records go to."""
        return {t: r.downstream for r in self.routes for t in r.inputs}

    @property
    def receivers(self) -> dict[str, frozenset[str]]:
        """Input topic -> the canonical principals its route serves, for the
        routes that declare `receivers` (validated at load)."""
        return {t: frozenset(map(canonical_principal, r.receivers)) for r in self.routes if r.receivers is not None for t in r.inputs}

    def downstream_for(self, topic: str) -> str:
        return self.downstreams[topic]

    def verification_registry(self) -> VerificationRegistry:
        """The `[verification]` section resolved (canonicalizer plugins loaded); validated at load."""
        return build_registry(self.verification, self.source)

    def policy(self) -> AdmissionPolicy:
        a = self.admission
        return AdmissionPolicy(
            namespace=a.namespace or self.kafka.group_id,
            max_age_ms=a.max_age_ms,
            max_future_ms=a.max_future_ms,
            nonce_retention_ms=a.nonce_retention_ms,
            nonce_scope=a.nonce_scope,
            window_size=a.window_size,
            session_retention_ms=a.session_retention_ms,
            task_retention_ms=a.task_retention_ms,
            decision_retention_ms=a.decision_retention_ms,
            policy_settings={
                **self.kind_settings,
                "award": AwardPolicy(self.verification_registry(), self.award),
            },
        )


def _env_overrides(raw: dict[str, Any], env: Mapping[str, str]) -> dict[str, str]:
    """Apply BUSGUARD_<SECTION>__<KEY> to `raw`; returns {"section.key": variable name}.

    Each `__` is a dot of the TOML key, so a kind's dotted section spells
    itself the same way: `BUSGUARD_CONFIG__UPDATE__SENDERS` sets
    `[config.update] senders`. A key whose default is a string takes the
    text as it is (so `BUSGUARD_KAFKA__GROUP_ID=42` is the group "42");
    others read the text as a TOML value (numbers, booleans, arrays),
    falling back to the text.
    """
    applied: dict[str, str] = {}
    defaults: dict[str, object] = {**{s: getattr(Config(), s) for s in Config.__struct_fields__}, **_kind_defaults()}
    for name, text in env.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        *tables, key = name[len(ENV_PREFIX) :].lower().split("__")
        section = ".".join(tables)
        value: Any = text
        if not isinstance(getattr(defaults.get(section), key, None), str):
            try:
                value = tomllib.loads(f"v = {text}")["v"]
            except tomllib.TOMLDecodeError:
                pass
        target: Any = raw
        for table in tables:
            target = target.setdefault(table, {})
            if not isinstance(target, dict):
                raise ConfigError(f"${name}", section, text, f"[{section}] is not a table and cannot be overridden by key")
        target[key] = value
        applied[f"{section}.{key}"] = name
    return applied


def _kind_defaults() -> dict[str, object]:
    """Each kind settings section's defaults (its Struct built empty)."""
    return {spec.section: spec.settings() for spec in KINDS.values() if spec.settings is not None}


def _pop_section(raw: dict[str, Any], section: str) -> tuple[bool, Any]:
    """Take a kind's table out of the file's contents: `[quota]`, or for a
    dotted section both TOML spellings, `[config.update]` (nested tables)
    and `["config.update"]` (one quoted key). An outer table left empty by
    it goes too, so it is not mistaken for a section of its own."""
    if section in raw:
        return True, raw.pop(section)
    *outer, last = section.split(".")
    path: list[dict[str, Any]] = [raw]
    for table in outer:
        inner = path[-1].get(table)
        if not isinstance(inner, dict):
            return False, None
        path.append(inner)
    if not outer or last not in path[-1]:
        return False, None
    value = path[-1].pop(last)
    for table, holder in zip(reversed(outer), reversed(path[:-1]), strict=True):
        if holder[table]:
            break
        del holder[table]
    return True, value


def _kind_sections() -> type[msgspec.Struct]:
    """One table per settings section the registered kinds declare
    (`KindSpec.settings`), as a Struct so errors name `section.key`."""
    fields: dict[str, type] = {}
    for spec in KINDS.values():
        if spec.settings is not None:
            if spec.section.split(".")[0] in Config.__struct_fields__:
                raise ConfigError(
                    "busguard.policies", f"{spec.kind}.settings_section", spec.section, "a name that is not a section busguard itself has"
                )
            fields[spec.section] = spec.settings
    return msgspec.defstruct(
        "KindSections",
        # attribute names are identifiers; the section (dotted, for `config.update`) is the encoded name errors show
        [(f"s{i}", t, msgspec.field(default_factory=t, name=name)) for i, (name, t) in enumerate(sorted(fields.items()))],
        kw_only=True,
        forbid_unknown_fields=True,
        frozen=True,
    )


def _nested(raw: dict[str, Any], kind_raw: dict[str, Any]) -> dict[str, Any]:
    """The file's contents with the kinds' tables put back where a dotted
    path finds them (`cfg.set.limit`), for an error to quote the value."""
    data = dict(raw)
    for section, table in kind_raw.items():
        *outer, last = section.split(".")
        holder = data
        for name in outer:
            holder = holder.setdefault(name, {})
        holder[last] = table
    return data


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> Config:
    path = Path(path)
    raw = read_toml(path, "config file")
    for internal in ("source", "kind_settings"):
        if internal in raw:
            raise ConfigError(str(path), internal, raw[internal], "not a known key here (see docs/config.md)")
    from_env = _env_overrides(raw, os.environ if env is None else env)
    sections = _kind_sections()
    kind_raw = {}
    for f in msgspec.structs.fields(sections):
        found, table = _pop_section(raw, f.encode_name)
        if found:
            kind_raw[f.encode_name] = table
    try:
        cfg = msgspec.convert(raw, Config)
        kinds = msgspec.convert(kind_raw, sections)
    except msgspec.ValidationError as exc:
        err = ConfigError.from_validation(str(path), exc, _nested(raw, kind_raw), Config, sections)
        if err.field in from_env:  # blame the variable, not the file
            err = ConfigError(f"${from_env[err.field]}", err.field, err.value, err.allowed)
        raise err from None
    settings = {f.encode_name: getattr(kinds, f.name) for f in msgspec.structs.fields(sections)}
    cfg = msgspec.structs.replace(cfg, source=str(path), kind_settings=settings)
    try:
        validate(cfg)
    except ConfigError as err:
        if err.field in from_env:  # e.g. a per-process BUSGUARD_KAFKA__GROUP_INSTANCE_ID
            raise ConfigError(f"${from_env[err.field]}", err.field, err.value, err.allowed) from None
        raise
    return cfg
