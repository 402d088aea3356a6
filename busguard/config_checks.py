"""The cross-field rules of the config, checked once it has parsed
(busguard.config.load_config): what one field allows can depend on another,
and on the registered kinds. Every error names the file, the key, the value
and what is allowed; docs/config.md lists the rules.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from busguard.errors import ConfigError
from busguard.policies import KINDS
from busguard.policies.compromise.policy import SETTINGS_KEY, CompromiseSettings
from busguard.protocol.identity import canonical_principal
from busguard.protocol.timestamps import parse_timestamp

if TYPE_CHECKING:
    from busguard.config import Config

_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
#: What kafka.group_instance_id may hold once its placeholders are replaced:
#: Kafka's rule for topic names and instance ids (249 of [A-Za-z0-9._-]).
INSTANCE_ID_ALLOWED = '1-249 characters of [A-Za-z0-9._-] once {hostname} is replaced, or "" for dynamic membership'


def group_instance_id(cfg: Config, hostname: str | None = None) -> str | None:
    """kafka.group_instance_id with `{hostname}` replaced; None for dynamic membership.

    Resolved where the consumer is built (busguard.runtime.clients), not
    stored resolved, so one config file serves every host; `validate` runs
    the same function at load so a bad id is refused before anything starts."""
    template = cfg.kafka.group_instance_id
    if template == "":
        return None
    unknown = [m for m in _PLACEHOLDER.findall(template) if m != "hostname"]
    if unknown:
        raise ConfigError(
            cfg.source,
            "kafka.group_instance_id",
            template,
            f"only the placeholder {{hostname}} (not {{{unknown[0]}}}); {INSTANCE_ID_ALLOWED}",
        )
    if hostname is None:
        import socket

        hostname = socket.gethostname()
    resolved = template.replace("{hostname}", hostname)
    if _TOPIC.fullmatch(resolved) is None:
        shown = template if resolved == template else f"{template} (= {resolved})"
        raise ConfigError(cfg.source, "kafka.group_instance_id", shown, INSTANCE_ID_ALLOWED)
    return resolved


TRANSACTIONAL_ID_ALLOWED = (
    '1-240 characters of [A-Za-z0-9._-] once {hostname} is replaced, or "" for no transactions; '
    'with it, kafka.idempotence = true and kafka.acks = "all"'
)


def transactional_id(cfg: Config, role: str, hostname: str | None = None) -> str | None:
    """kafka.transactional_id for one role's producer ("<id>-<role>"), None when off."""
    template = cfg.kafka.transactional_id
    if template == "":
        return None
    if any(m != "hostname" for m in _PLACEHOLDER.findall(template)) or not (cfg.kafka.idempotence and cfg.kafka.acks == "all"):
        raise ConfigError(cfg.source, "kafka.transactional_id", template, TRANSACTIONAL_ID_ALLOWED)
    if hostname is None:
        import socket

        hostname = socket.gethostname()
    resolved = template.replace("{hostname}", hostname)
    if len(resolved) > 240 or _TOPIC.fullmatch(resolved) is None:
        shown = template if resolved == template else f"{template} (= {resolved})"
        raise ConfigError(cfg.source, "kafka.transactional_id", shown, TRANSACTIONAL_ID_ALLOWED)
    return f"{resolved}-{role}"


def _validate_audit_retention(cfg: Config) -> None:
    """busguard must never create an audit topic it would then refuse at start
    (busguard.runtime.topic_checks); 0 would delete the proof at once."""
    k = cfg.kafka
    if k.audit_retention_ms == 0 or (
        k.audit_retention_ms != -1 and (k.audit_min_retention_ms == -1 or k.audit_retention_ms < k.audit_min_retention_ms)
    ):
        least = "" if k.audit_min_retention_ms == -1 else f" or at least kafka.audit_min_retention_ms ({k.audit_min_retention_ms})"
        raise ConfigError(cfg.source, "kafka.audit_retention_ms", k.audit_retention_ms, f"-1 (kept forever){least}")
    if k.audit_min_retention_ms == 0:
        raise ConfigError(
            cfg.source, "kafka.audit_min_retention_ms", 0, "-1 (the audit topic must be kept forever) or a positive number of ms"
        )


def _codec_available(codec: str) -> bool:
    from aiokafka import codec as codecs

    return bool({"gzip": codecs.has_gzip, "snappy": codecs.has_snappy, "lz4": codecs.has_lz4, "zstd": codecs.has_zstd}[codec]())


def _validate_compromise(cfg: Config) -> None:
    c = cfg.kind_settings.get(SETTINGS_KEY)
    if not isinstance(c, CompromiseSettings):
        return
    for name in ("trusted_attesters", "trusted_notice_issuers"):
        for agent in getattr(c, name):
            try:
                canonical_principal(agent)
            except ValueError as exc:
                raise ConfigError(cfg.source, f"compromise.{name}", agent, f"agent ids as senders use them ({exc})") from None
    # A session-scoped notice must outlive the session it names: the session
    # window is kept session_retention_ms, so that session may hand off that long.
    if c.notice_retention_ms < cfg.admission.session_retention_ms:
        raise ConfigError(
            cfg.source,
            "compromise.notice_retention_ms",
            c.notice_retention_ms,
            f"at least admission.session_retention_ms ({cfg.admission.session_retention_ms}): a notice must outlive the sessions it can name",
        )
    # An expiring notice still counts for receipts up to max_age_ms older than
    # its expires_at (lifecycle.standing), so it must be kept that long.
    if c.notice_expiry_horizon_ms + cfg.admission.max_age_ms > c.notice_retention_ms:
        raise ConfigError(
            cfg.source,
            "compromise.notice_expiry_horizon_ms",
            c.notice_expiry_horizon_ms,
            f"at most compromise.notice_retention_ms - admission.max_age_ms ({c.notice_retention_ms - cfg.admission.max_age_ms}):"
            " an expiring notice must be kept until no fresh receipt can predate its expiry",
        )


#: Room beside the largest payload in one record batch: the receipt (4096),
#: other headers and the record framing (the fetch headroom of
#: busguard.runtime.clients is the same).
INFLATED_HEADROOM: Final = 262_144


def _validate_inflated(cfg: Config) -> None:
    # A batch holding one record at the payload limit must inflate within the
    # bound, and so must the batches busguard itself writes (at most
    # kafka.max_message_bytes uncompressed), which the auditor and the
    # reconciler read back through the same bound.
    b = cfg.batch
    least = max(b.max_payload_bytes + INFLATED_HEADROOM, cfg.kafka.max_message_bytes)
    if b.max_inflated_bytes < least:
        raise ConfigError(
            cfg.source,
            "batch.max_inflated_bytes",
            b.max_inflated_bytes,
            f"at least {least}: batch.max_payload_bytes ({b.max_payload_bytes}) + {INFLATED_HEADROOM} for a record's receipt, "
            f"headers and framing, and at least kafka.max_message_bytes ({cfg.kafka.max_message_bytes}), the largest batch busguard writes",
        )


def validate(cfg: Config) -> None:
    """Cross-field rules msgspec cannot express."""
    f = cfg.source
    a = cfg.admission
    # A receipt admitted at t with issued_at = t + max_future_ms (the future
    # bound is inclusive) is still fresh at t + max_future_ms + max_age_ms (so
    # is the age bound). Its nonce, recorded at t, expires at t + retention,
    # and a row whose expiry is at or before now reads as absent (state/store.py).
    # So the nonce is present at that last fresh millisecond only if
    # retention > max_future_ms + max_age_ms: strictly.
    fresh_for = a.max_age_ms + a.max_future_ms
    if a.nonce_retention_ms <= fresh_for:
        raise ConfigError(
            f,
            "admission.nonce_retention_ms",
            a.nonce_retention_ms,
            f"more than max_age_ms + max_future_ms ({fresh_for}), i.e. at least {fresh_for + 1}: a receipt stamped at the "
            f"future bound stays fresh for {fresh_for} ms after its admission, both bounds inclusive, and a nonce that "
            "expires while its receipt is still fresh can be replayed",
        )
    # The task index is what recognises an exact resend as a duplicate once
    # its nonce has gone; a task forgotten before its nonce would turn a resend
    # inside the nonce retention into a nonce_replay instead of the idempotent
    # exact_duplicate, and leave the nonce as the only guard of the task.
    if a.task_retention_ms < a.nonce_retention_ms:
        raise ConfigError(
            f,
            "admission.task_retention_ms",
            a.task_retention_ms,
            f"at least admission.nonce_retention_ms ({a.nonce_retention_ms}): the task index must outlive the nonces "
            "so an exact resend is always recognised as a duplicate",
        )
    if cfg.batch.audit == "batch" and cfg.batch.seal != "batch":
        raise ConfigError(
            f,
            "batch.audit",
            cfg.batch.audit,
            '"record" while batch.seal is "record": a batch audit record holds batch-sealed decisions '
            '(their tree head, its seal and each inclusion proof), so "batch" needs batch.seal = "batch"',
        )
    _validate_audit_retention(cfg)
    _validate_compromise(cfg)
    _validate_inflated(cfg)
    if not cfg.routes:
        raise ConfigError(f, "routes", [], "at least one [[routes]] table with name, inputs and downstream")
    seen_inputs: dict[str, str] = {}
    for i, route in enumerate(cfg.routes):
        if not route.inputs:
            raise ConfigError(f, f"routes[{i}].inputs", [], "at least one input topic")
        for t in [*route.inputs, route.downstream]:
            if _TOPIC.fullmatch(t) is None:
                raise ConfigError(f, f"routes[{i}]", t, "Kafka topic names: 1-249 characters of [A-Za-z0-9._-]")
        if route.receivers is not None:
            if not route.receivers:
                raise ConfigError(f, f"routes[{i}].receivers", [], "at least one agent id, or leave receivers out to serve any receiver")
            for agent in route.receivers:
                try:
                    canonical_principal(agent)
                except ValueError as exc:
                    raise ConfigError(f, f"routes[{i}].receivers", agent, f"agent ids as senders use them ({exc})") from None
        for t in route.inputs:
            if t in seen_inputs:
                raise ConfigError(f, f"routes[{i}].inputs", t, f"each input topic belongs to one route (already in {seen_inputs[t]!r})")
            seen_inputs[t] = route.name
    for name in ("reconciliation", "dead_letter", "audit", "replies"):
        t = getattr(cfg.topics, name)
        if _TOPIC.fullmatch(t) is None:
            raise ConfigError(f, f"topics.{name}", t, "Kafka topic names: 1-249 characters of [A-Za-z0-9._-]")
    known_routes = sorted({r for spec in KINDS.values() for r in spec.routes})
    for name, t in cfg.topics.routes.items():
        if name not in known_routes:
            raise ConfigError(
                f, f"topics.routes.{name}", t, f"a route of a registered kind: {', '.join(known_routes) or 'none is registered'}"
            )
        if _TOPIC.fullmatch(t) is None:
            raise ConfigError(f, f"topics.routes.{name}", t, "Kafka topic names: 1-249 characters of [A-Za-z0-9._-]")
    loops = set(cfg.input_topics) & set(cfg.output_topics)
    if loops:
        raise ConfigError(
            f, "routes", sorted(loops), "an input topic cannot also be an output topic (busguard would consume its own output)"
        )
    if cfg.kafka.rebalance_timeout_ms <= cfg.batch.revoke_budget_ms:
        raise ConfigError(
            f,
            "kafka.rebalance_timeout_ms",
            cfg.kafka.rebalance_timeout_ms,
            f"more than batch.revoke_budget_ms ({cfg.batch.revoke_budget_ms})",
        )
    if cfg.kafka.heartbeat_interval_ms >= cfg.kafka.session_timeout_ms:
        raise ConfigError(f, "kafka.heartbeat_interval_ms", cfg.kafka.heartbeat_interval_ms, "less than kafka.session_timeout_ms")
    group_instance_id(cfg)
    transactional_id(cfg, "guard")
    if cfg.kafka.compression != "none" and not _codec_available(cfg.kafka.compression):
        raise ConfigError(
            f,
            "kafka.compression",
            cfg.kafka.compression,
            "a codec whose Python package is installed (none and gzip need none; see docs/config.md)",
        )
    if not cfg.keys.guard_key_resolves and cfg.keys.operators is None:
        raise ConfigError(f, "keys.guard_key_resolves", False, "true unless keys.operators names who else may resolve (nobody could)")
    _validate_state(cfg, f)
    _validate_keys(cfg, f)
    cfg.verification_registry()


_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def _validate_state(cfg: Config, f: str) -> None:
    from busguard.state.backends import BACKENDS

    st = cfg.state
    if st.backend not in BACKENDS:
        raise ConfigError(
            f,
            "state.backend",
            st.backend,
            f"one of {', '.join(repr(b) for b in sorted(BACKENDS))} (the backends busguard/state/backends.py registers)",
        )
    if st.backend != "postgres":
        return
    from busguard.state.redact import redact

    if not st.dsn.strip():
        raise ConfigError(
            f, "state.dsn", "", 'a PostgreSQL connection string for state.backend = "postgres", e.g. postgresql://busguard@db:5432/busguard'
        )
    if "://" in st.dsn and not st.dsn.startswith(("postgresql://", "postgres://")):
        raise ConfigError(f, "state.dsn", redact(st.dsn), "a postgresql:// URI or a libpq key=value string")
    if _SCHEMA_NAME.fullmatch(st.schema) is None:
        raise ConfigError(
            f, "state.schema", st.schema, "a lower-case SQL identifier: 1-63 characters of [a-z0-9_], not starting with a digit"
        )
    if st.retry_s * 1000 >= cfg.kafka.max_poll_interval_ms:
        raise ConfigError(
            f,
            "state.retry_s",
            st.retry_s,
            f"less than kafka.max_poll_interval_ms ({cfg.kafka.max_poll_interval_ms} ms): a batch waiting longer loses its partitions",
        )


def _validate_keys(cfg: Config, f: str) -> None:
    k = cfg.keys
    if k.reconciler_key is not None and cfg.path(k.reconciler_key) == cfg.path(k.guard_key):
        raise ConfigError(
            f, "keys.reconciler_key", k.reconciler_key, "a key file other than keys.guard_key (leave it unset for a one-key deployment)"
        )
    if k.create_reconciler_key and k.reconciler_key is None:
        raise ConfigError(f, "keys.create_reconciler_key", True, "false unless keys.reconciler_key names the file to create")
    if k.guard_public_key is not None:
        from busguard.protocol.signing import is_acceptable_public_key

        try:
            pk = k.guard_public_key_bytes
        except ValueError as exc:
            raise ConfigError(f, "keys.guard_public_key", k.guard_public_key, f"an Ed25519 multikey z6Mk… or tulpa:z6Mk… ({exc})") from None
        if pk is None or not is_acceptable_public_key(pk):
            raise ConfigError(f, "keys.guard_public_key", k.guard_public_key, "a canonical Ed25519 public key of large prime order")
    if k.single_key_until is not None:
        if not k.single_key_audit:
            raise ConfigError(
                f, "keys.single_key_until", k.single_key_until, "only with keys.single_key_audit = true (it limits what that accepts)"
            )
        try:
            parse_timestamp(k.single_key_until)
        except ValueError as exc:
            raise ConfigError(
                f, "keys.single_key_until", k.single_key_until, f"an RFC 3339 UTC timestamp such as 2026-12-01T00:00:00Z ({exc})"
            ) from None
