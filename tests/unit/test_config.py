"""Config loading: defaults, environment overrides, every validation rule,
errors that explain themselves, and a reference (docs/config.md) that
cannot drift from the code."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from busguard.config import BatchConfig, Config, Route, load_config
from busguard.errors import ConfigError
from busguard.policies import KINDS
from busguard.protocol.registry import KeyRegistry
from busguard.reconcile.operators import Operators

SMALL_ORDER = "z6MkeXATEjyXENzBXBxgC5EHk2JE5aqd7qMGGtDpLUH1e2Sj"  # the identity point: small order

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "config.md"
ROUTE = '[[routes]]\nname = "handoffs"\ninputs = ["agents.handoffs"]\ndownstream = "agents.handoffs.admitted"\n'


def write(tmp_path: Path, text: str, name: str = "busguard.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def load(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> Config:
    return load_config(write(tmp_path, text), env=env or {})


def refused(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> ConfigError:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, env=env or {})
    return info.value


# -- the reference cannot rot ---------------------------------------------------


def _sections() -> dict[str, type[msgspec.Struct]]:
    """Config's tables: section name -> Struct (routes -> Route), and the
    built-in kinds' own sections (KindSpec.settings, e.g. [compromise])."""
    out: dict[str, type[msgspec.Struct]] = {}
    for f in msgspec.structs.fields(Config):
        if f.name in ("source", "kind_settings"):  # set by the loader, not sections of the file
            continue
        t = Route if f.name == "routes" else f.type
        assert isinstance(t, type) and issubclass(t, msgspec.Struct), f.name
        out[f.name] = t
    for spec in KINDS.values():
        if spec.settings is not None:
            out[spec.section] = spec.settings
    return out


def _doc_section(doc: str, section: str) -> str:
    heading = f"[[{section}]]" if section == "routes" else f"[{section}]"
    m = re.search(rf"^### `{re.escape(heading)}`\n(.*?)(?=^### |^## )", doc, re.S | re.M)
    assert m is not None, f"docs/config.md has no '### `{heading}`' section"
    return m.group(1)


def _toml_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):  # a TOML array either way
        return "[" + ", ".join(_toml_literal(v) for v in value) + "]"
    return str(value)


def test_every_config_key_is_in_the_reference_with_its_default() -> None:
    doc = DOC.read_text(encoding="utf-8")
    missing, wrong = [], []
    for section, struct in _sections().items():
        body = _doc_section(doc, section)
        rows = {m.group(1): m.group(2).strip() for m in re.finditer(r"^\| `(\w+)` \| [^|]+ \| ([^|]+) \|", body, re.M)}
        for f in msgspec.structs.fields(struct):
            if f.name not in rows:
                missing.append(f"{section}.{f.name}")
                continue
            documented = rows[f.name]
            default = f.default_factory() if f.default is msgspec.NODEFAULT and f.default_factory is not msgspec.NODEFAULT else f.default
            if f.required:
                if documented != "required":
                    wrong.append(f"{section}.{f.name}: documented default {documented!r}, but it is required")
            elif documented != ("unset" if default is None else f"`{_toml_literal(default)}`"):
                wrong.append(f"{section}.{f.name}: documented default {documented}, code default `{_toml_literal(default)}`")
    assert not missing, f"keys missing from docs/config.md: {missing}"
    assert not wrong, "\n".join(wrong)


def test_the_reference_lists_no_keys_that_do_not_exist() -> None:
    doc = DOC.read_text(encoding="utf-8")
    for section, struct in _sections().items():
        names = {f.name for f in msgspec.structs.fields(struct)}
        documented = set(re.findall(r"^\| `(\w+)` \|", _doc_section(doc, section), re.M))
        assert documented <= names, f"[{section}] documents unknown keys {sorted(documented - names)}"


def test_the_reference_mentions_source_and_every_env_example_is_a_real_key(tmp_path: Path) -> None:
    doc = DOC.read_text(encoding="utf-8")
    assert "`source`" in doc
    env = dict(re.findall(r"^\| `(BUSGUARD_\w+)` \| `([^`]+)` \|", doc, re.M))
    assert len(env) >= 6
    for name, value in env.items():
        value = value.strip("'") if value.startswith("'") else value
        cfg = load(tmp_path, ROUTE, {name: value})
        section, key = name[len("BUSGUARD_") :].lower().split("__")
        assert hasattr(getattr(cfg, section), key), name


# -- defaults ---------------------------------------------------------------------


def test_a_file_with_only_a_route_gets_every_default(tmp_path: Path) -> None:
    cfg = load(tmp_path, ROUTE)
    assert msgspec.structs.replace(cfg, routes=[], source="", kind_settings={}) == Config()
    assert cfg.kind_settings == {s.section: s.settings() for s in KINDS.values() if s.settings is not None}  # each kind's defaults
    assert cfg.routes == [Route(name="handoffs", inputs=["agents.handoffs"], downstream="agents.handoffs.admitted")]
    # production-safe defaults (the dev file flips these)
    assert cfg.kafka.idempotence is True and cfg.kafka.create_topics is False and cfg.keys.create_guard_key is False
    assert cfg.kafka.auto_offset_reset == "earliest" and cfg.state.backend == "sqlite" and cfg.state.synchronous == "full"
    assert cfg.policy().namespace == "busguard"  # "" falls back to the group id
    kind_routes = [f"busguard.{r}" for spec in KINDS.values() for r in spec.routes]  # e.g. busguard.quarantine
    assert cfg.output_topics == sorted(
        {"agents.handoffs.admitted", "busguard.reconciliation", "busguard.dead-letter", "busguard.audit", "busguard.replies", *kind_routes}
    )


def test_namespace_defaults_to_the_group_id_and_can_be_set(tmp_path: Path) -> None:
    assert load(tmp_path, ROUTE + '[kafka]\ngroup_id = "g1"\n').policy().namespace == "g1"
    assert load(tmp_path, ROUTE + '[kafka]\ngroup_id = "g1"\n[admission]\nnamespace = "ns"\n').policy().namespace == "ns"


def test_relative_paths_resolve_against_the_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "etc").mkdir()
    path = write(
        tmp_path / "etc", ROUTE + '[state]\npath = "../var/state.db"\n[keys]\nregistry = "keys.toml"\nguard_key = "/abs/guard.key"\n'
    )
    monkeypatch.chdir(tmp_path / "etc")  # wherever the command runs from
    cfg = load_config(path, env={})
    monkeypatch.chdir("/")
    assert cfg.path(cfg.state.path) == (tmp_path / "var" / "state.db").resolve()
    assert cfg.path(cfg.keys.registry) == (tmp_path / "etc" / "keys.toml").resolve()
    assert cfg.path(cfg.keys.guard_key) == Path("/abs/guard.key")
    assert cfg.path(cfg.reconcile.state_path) == (tmp_path / "var" / "busguard-reconcile.db").resolve()


# -- environment overrides --------------------------------------------------------------


def test_env_overrides_are_typed(tmp_path: Path) -> None:
    cfg = load(
        tmp_path,
        ROUTE,
        {
            "BUSGUARD_KAFKA__BOOTSTRAP_SERVERS": "kafka:9092",
            "BUSGUARD_KAFKA__IDEMPOTENCE": "true",
            "BUSGUARD_KAFKA__SESSION_TIMEOUT_MS": "3000",
            "BUSGUARD_KAFKA__HEARTBEAT_INTERVAL_MS": "300",
            "BUSGUARD_OPS__HOST": "0.0.0.0",
            "BUSGUARD_OPS__PORT": "9500",
            "BUSGUARD_STATE__PATH": "/var/lib/busguard/state.db",
            "BUSGUARD_RECONCILE__AUTO_RESOLVE_RETRANSMISSIONS": "false",
            "BUSGUARD_BATCH__MAX_RECORDS": "1_000",
            "BUSGUARD_LOG__FORMAT": "json",
        },
    )
    assert cfg.kafka.bootstrap_servers == "kafka:9092"
    assert cfg.kafka.idempotence is True
    assert cfg.kafka.session_timeout_ms == 3000 and cfg.kafka.heartbeat_interval_ms == 300
    assert cfg.ops.host == "0.0.0.0" and cfg.ops.port == 9500
    assert cfg.state.path == "/var/lib/busguard/state.db"
    assert cfg.reconcile.auto_resolve_retransmissions is False
    assert cfg.batch.max_records == 1000
    assert cfg.log.format == "json"


def test_env_overrides_win_over_the_file_and_leave_the_rest(tmp_path: Path) -> None:
    cfg = load(
        tmp_path,
        ROUTE + '[kafka]\nbootstrap_servers = "file:9092"\ngroup_id = "from-file"\n',
        {"BUSGUARD_KAFKA__BOOTSTRAP_SERVERS": "env:9092"},
    )
    assert cfg.kafka.bootstrap_servers == "env:9092" and cfg.kafka.group_id == "from-file"


def test_env_names_are_case_insensitive_and_other_variables_are_ignored(tmp_path: Path) -> None:
    cfg = load(
        tmp_path,
        ROUTE,
        {"busguard_kafka__group_id": "x", "BUSGUARD_FAULT": "persisted:3", "OTHER__KEY": "1", "BUSGUARD_KAFKA_GROUP_ID": "y"},
    )
    assert cfg.kafka.group_id == "busguard"  # lowercase prefix is not the prefix
    cfg = load(tmp_path, ROUTE, {"BUSGUARD_Kafka__Group_Id": "x"})
    assert cfg.kafka.group_id == "x"


def test_a_string_key_takes_numeric_looking_text_as_text(tmp_path: Path) -> None:
    assert load(tmp_path, ROUTE, {"BUSGUARD_KAFKA__GROUP_ID": "42"}).kafka.group_id == "42"
    assert load(tmp_path, ROUTE, {"BUSGUARD_KAFKA__SESSION_TIMEOUT_MS": "4000"}).kafka.session_timeout_ms == 4000


def test_env_overrides_are_validated_like_the_file(tmp_path: Path) -> None:
    err = refused(tmp_path, ROUTE, {"BUSGUARD_OPS__PORT": "abc"})
    assert (err.field, err.value) == ("ops.port", "abc")
    err = refused(tmp_path, ROUTE, {"BUSGUARD_KAFKA__HEARTBEAT_INTERVAL_MS": "20000"})
    assert err.field == "kafka.heartbeat_interval_ms"
    err = refused(tmp_path, ROUTE, {"BUSGUARD_KAFKA__BOOTSTRAP": "kafka:9092"})
    assert "bootstrap" in str(err)
    err = refused(tmp_path, ROUTE, {"BUSGUARD_NOSUCH__KEY": "1"})
    assert "nosuch" in str(err)


def test_routes_cannot_be_overridden_and_the_error_names_the_variable(tmp_path: Path) -> None:
    err = refused(tmp_path, ROUTE, {"BUSGUARD_ROUTES__INPUTS": '["x"]'})
    assert err.file == "$BUSGUARD_ROUTES__INPUTS" and "not a table" in str(err)


# -- errors name the file, the field, the value and what is allowed --------------------------


@pytest.mark.parametrize(
    ("text", "field", "value", "allowed"),
    [
        (ROUTE + "[kafka]\nsession_timeout_ms = 0\n", "kafka.session_timeout_ms", 0, ">= 1"),
        (ROUTE + '[kafka]\nsession_timeout_ms = "3000"\n', "kafka.session_timeout_ms", "3000", "Expected `int`, got `str`"),
        (ROUTE + '[kafka]\nacks = "0"\n', "kafka.acks", "0", "one of '1', 'all'"),
        (ROUTE + '[kafka]\nidempotence = "yes"\n', "kafka.idempotence", "yes", "Expected `bool`"),
        (ROUTE + "[kafka]\ntopic_partitions = 10001\n", "kafka.topic_partitions", 10001, "<= 10000"),
        (ROUTE + '[admission]\nnonce_scope = "sender"\n', "admission.nonce_scope", "sender", "one of "),
        (ROUTE + "[admission]\nwindow_size = 65537\n", "admission.window_size", 65537, "<= 65536"),
        (ROUTE + "[admission]\nmax_future_ms = -1\n", "admission.max_future_ms", -1, ">= 0"),
        (ROUTE + '[state]\nbackend = "leveldb"\n', "state.backend", "leveldb", "one of 'memory', 'postgres', 'rocksdb', 'sqlite'"),
        (ROUTE + '[state]\nsynchronous = "off"\n', "state.synchronous", "off", "one of 'full', 'normal'"),
        (ROUTE + "[batch]\nverify_threads = 0\n", "batch.verify_threads", 0, ">= 1; allowed: 'auto', or an integer 1–64"),
        (ROUTE + '[batch]\nverify_threads = "many"\n', "batch.verify_threads", "many", "one of 'auto', or an integer 1–64"),
        (ROUTE + "[batch]\nmax_payload_bytes = 67108865\n", "batch.max_payload_bytes", 67108865, "<= 67108864"),
        (ROUTE + '[log]\nlevel = "trace"\n', "log.level", "trace", "one of 'debug', 'error', 'info', 'warning'"),
        (ROUTE + "[ops]\nport = 70000\n", "ops.port", 70000, "<= 65535"),
        (ROUTE + '[reconcile]\nauto_resolve_retransmissions = "no"\n', "reconcile.auto_resolve_retransmissions", "no", "Expected `bool`"),
        (
            '[[routes]]\nname = "r"\ninputs = "agents.in"\ndownstream = "out"\n',
            "routes[0].inputs",
            "agents.in",
            "Expected `array`, got `str`",
        ),
    ],
)
def test_type_errors_name_file_field_value_and_what_is_allowed(tmp_path: Path, text: str, field: str, value: object, allowed: str) -> None:
    err = refused(tmp_path, text)
    path = str(tmp_path / "busguard.toml")
    assert (err.file, err.field, err.value) == (path, field, value)
    assert allowed in err.allowed
    assert str(err).startswith(f"{path}: {field} = {value!r}: ")


def test_an_unknown_key_is_named(tmp_path: Path) -> None:
    err = refused(tmp_path, ROUTE + '[kafka]\nbootstrap = "kafka:9092"\n')
    assert (err.field, err.value) == ("kafka.bootstrap", "kafka:9092") and "not a known key" in str(err)
    err = refused(tmp_path, ROUTE.replace('downstream = "', 'extra = 1\ndownstream = "'))
    assert (err.field, err.value) == ("routes[0].extra", 1)
    err = refused(tmp_path, "[kafkaa]\ngroup_id = 'x'\n" + ROUTE)
    assert err.field == "kafkaa"


def test_a_missing_route_field_is_named(tmp_path: Path) -> None:
    err = refused(tmp_path, '[[routes]]\nname = "r"\ndownstream = "out"\n')
    assert err.field == "routes[0]" and "missing required field `inputs`" in str(err)


def test_a_missing_file_and_bad_toml_are_explained(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist") as info:
        load_config(tmp_path / "nope.toml", env={})
    assert info.value.file == str(tmp_path / "nope.toml")
    err = refused(tmp_path, "[kafka\n")
    assert "not valid TOML" in str(err) and err.file == str(tmp_path / "busguard.toml")


# -- every cross-field rule of validate() -----------------------------------------------------


@pytest.mark.parametrize(
    ("text", "field", "value", "allowed"),
    [
        (
            ROUTE + "[admission]\nnonce_retention_ms = 329999\n",
            "admission.nonce_retention_ms",
            329999,
            "more than max_age_ms + max_future_ms (330000)",
        ),
        # exactly the sum: the nonce would read as absent at its receipt's last fresh millisecond
        (ROUTE + "[admission]\nnonce_retention_ms = 330000\n", "admission.nonce_retention_ms", 330000, "i.e. at least 330001"),
        (
            ROUTE + "[admission]\nmax_age_ms = 1000\nmax_future_ms = 0\nnonce_retention_ms = 1000\n",
            "admission.nonce_retention_ms",
            1000,
            "more than max_age_ms + max_future_ms (1000)",
        ),
        (
            ROUTE + "[admission]\ntask_retention_ms = 599999\n",
            "admission.task_retention_ms",
            599999,
            "at least admission.nonce_retention_ms (600000)",
        ),
        (
            ROUTE + "[admission]\nnonce_retention_ms = 900000\ntask_retention_ms = 899999\n",
            "admission.task_retention_ms",
            899999,
            "at least admission.nonce_retention_ms (900000)",
        ),
        ("[kafka]\ngroup_id = 'g'\n", "routes", [], "at least one [[routes]] table"),
        ('[[routes]]\nname = "r"\ninputs = []\ndownstream = "out"\n', "routes[0].inputs", [], "at least one input topic"),
        (
            '[[routes]]\nname = "r"\ninputs = ["bad topic"]\ndownstream = "out"\n',
            "routes[0]",
            "bad topic",
            "1-249 characters of [A-Za-z0-9._-]",
        ),
        ('[[routes]]\nname = "r"\ninputs = ["in"]\ndownstream = "out/x"\n', "routes[0]", "out/x", "1-249 characters"),
        ('[[routes]]\nname = "r"\ninputs = ["' + "t" * 250 + '"]\ndownstream = "out"\n', "routes[0]", "t" * 250, "1-249 characters"),
        (
            ROUTE + '[[routes]]\nname = "again"\ninputs = ["agents.handoffs"]\ndownstream = "other"\n',
            "routes[1].inputs",
            "agents.handoffs",
            "each input topic belongs to one route (already in 'handoffs')",
        ),
        (ROUTE + '[topics]\ndead_letter = "dead letter"\n', "topics.dead_letter", "dead letter", "1-249 characters"),
        (ROUTE + '[topics]\naudit = ""\n', "topics.audit", "", "1-249 characters"),
        (ROUTE + '[topics]\nreplies = "agents.handoffs"\n', "routes", ["agents.handoffs"], "an input topic cannot also be an output topic"),
        (
            ROUTE + '[[routes]]\nname = "chain"\ninputs = ["agents.handoffs.admitted"]\ndownstream = "x"\n',
            "routes",
            ["agents.handoffs.admitted"],
            "cannot also be an output topic",
        ),
        (
            ROUTE + "[kafka]\nrebalance_timeout_ms = 10000\n",
            "kafka.rebalance_timeout_ms",
            10000,
            "more than batch.revoke_budget_ms (10000)",
        ),
        (ROUTE + "[batch]\nrevoke_budget_ms = 60000\n", "kafka.rebalance_timeout_ms", 60000, "more than batch.revoke_budget_ms (60000)"),
        (ROUTE + "[kafka]\nheartbeat_interval_ms = 10000\n", "kafka.heartbeat_interval_ms", 10000, "less than kafka.session_timeout_ms"),
        (
            ROUTE + "[keys]\nguard_key_resolves = false\n",
            "keys.guard_key_resolves",
            False,
            "unless keys.operators names who else may resolve",
        ),
        (
            ROUTE + '[keys]\nguard_key = "g.key"\nreconciler_key = "./g.key"\n',
            "keys.reconciler_key",
            "./g.key",
            "a key file other than keys.guard_key",
        ),
        (ROUTE + "[keys]\ncreate_reconciler_key = true\n", "keys.create_reconciler_key", True, "unless keys.reconciler_key names the file"),
        (ROUTE + '[keys]\nguard_public_key = "z6Mkxyz"\n', "keys.guard_public_key", "z6Mkxyz", "an Ed25519 multikey"),
        (ROUTE + f'[keys]\nguard_public_key = "{SMALL_ORDER}"\n', "keys.guard_public_key", SMALL_ORDER, "large prime order"),
        (
            ROUTE + '[keys]\nsingle_key_until = "2026-12-01T00:00:00Z"\n',
            "keys.single_key_until",
            "2026-12-01T00:00:00Z",
            "only with keys.single_key_audit = true",
        ),
        (
            ROUTE + '[keys]\nsingle_key_audit = true\nsingle_key_until = "2026-12-01"\n',
            "keys.single_key_until",
            "2026-12-01",
            "an RFC 3339 UTC timestamp",
        ),
        (
            ROUTE + "[batch]\nmax_inflated_bytes = 1310719\n",
            "batch.max_inflated_bytes",
            1310719,
            "at least 1310720: batch.max_payload_bytes (1048576) + 262144",
        ),
        (
            ROUTE + "[batch]\nmax_inflated_bytes = 2000000\n[kafka]\nmax_message_bytes = 4000000\n",
            "batch.max_inflated_bytes",
            2000000,
            "at least 4000000",
        ),
    ],
)
def test_cross_field_rules(tmp_path: Path, text: str, field: str, value: object, allowed: str) -> None:
    err = refused(tmp_path, text)
    path = str(tmp_path / "busguard.toml")
    assert (err.file, err.field, err.value) == (path, field, value)
    assert allowed in err.allowed
    assert str(err) == f"{path}: {field} = {value!r}: {err.allowed}"


def test_a_declared_guard_public_key_is_read_in_either_spelling(tmp_path: Path) -> None:
    from busguard.protocol.identity import agent_id_for_key, multikey_encode
    from busguard.protocol.signing import public_key_from_seed

    pk = public_key_from_seed(bytes(range(32)))
    for spelling in (multikey_encode(pk), agent_id_for_key(pk)):
        assert load(tmp_path, ROUTE + f'[keys]\nguard_public_key = "{spelling}"\n').keys.guard_public_key_bytes == pk


def test_a_guard_whose_key_is_not_the_declared_one_does_not_start(tmp_path: Path) -> None:
    from busguard.protocol.identity import multikey_encode
    from busguard.protocol.keyfile import new_identity, write_key
    from busguard.protocol.signing import public_key_from_seed
    from busguard.wiring import open_guard

    write_key(tmp_path / "guard.key", new_identity())
    (tmp_path / "keys.toml").write_text("")
    other = multikey_encode(public_key_from_seed(bytes(range(32))))
    write(tmp_path, ROUTE + f'[state]\nbackend = "memory"\n[keys]\nguard_key = "guard.key"\nguard_public_key = "{other}"\n')
    with pytest.raises(ConfigError) as info:
        open_guard(load_config(tmp_path / "busguard.toml", env={}))  # what `busguard run` does before touching Kafka
    assert info.value.field == "keys.guard_public_key" and "the public half of keys.guard_key" in info.value.allowed


def test_the_boundaries_of_the_cross_field_rules_are_accepted(tmp_path: Path) -> None:
    load(tmp_path, ROUTE + "[admission]\nnonce_retention_ms = 330001\n")  # one more than the sum
    load(
        tmp_path, ROUTE + "[admission]\nnonce_retention_ms = 330001\ntask_retention_ms = 330001\n"
    )  # task retention equal to nonce retention
    load(tmp_path, ROUTE + "[kafka]\nrebalance_timeout_ms = 10001\n")
    load(tmp_path, ROUTE + "[kafka]\nheartbeat_interval_ms = 9999\n")
    load(tmp_path, ROUTE + "[batch]\nmax_inflated_bytes = 1310720\n")  # a payload at the limit, with its headroom
    two = ROUTE + '[[routes]]\nname = "acks"\ninputs = ["agents.acks"]\ndownstream = "agents.handoffs.admitted"\n'
    assert load(tmp_path, two).downstream_for("agents.acks") == "agents.handoffs.admitted"  # a shared downstream is fine


# -- the shipped files ------------------------------------------------------------------------


def test_the_shipped_config_and_registry_load() -> None:
    cfg = load_config(REPO / "configs" / "busguard.toml", env={})
    assert [r.name for r in cfg.routes] == ["handoffs", "acks"]
    assert cfg.kafka.idempotence is False and cfg.kafka.create_topics is True  # the dev profile
    assert cfg.path(cfg.keys.registry) == (REPO / "configs" / "keys.toml").resolve()
    registry = KeyRegistry.load(cfg.path(cfg.keys.registry))
    assert len(registry.principals) == 3 and registry.open_enrollment is False
    # separate keys for separate roles, and an operators file the auditor proves names with
    assert cfg.keys.reconciler_key is not None and cfg.path(cfg.keys.reconciler_key) != cfg.path(cfg.keys.guard_key)
    assert cfg.keys.operators is not None and len(Operators.load(cfg.path(cfg.keys.operators))) == 0
    assert cfg.keys.single_key_audit is False


def test_the_shipped_compose_overrides_are_real_keys() -> None:
    """Every BUSGUARD_<SECTION>__<KEY> in compose/docker-compose.yml loads."""
    compose = REPO / "compose" / "docker-compose.yml"
    text = compose.read_text(encoding="utf-8")
    pairs = re.findall(r'^\s+(BUSGUARD_\w+?__\w+):\s*"([^"]*)"', text, re.M)
    assert len(pairs) == len(re.findall(r"^\s+BUSGUARD_\w+:", text, re.M)), "quote every BUSGUARD_ value in the compose file"
    env = dict(pairs)
    # each guard service is a static member under its own name (one live process per name)
    ids = [v for k, v in pairs if k == "BUSGUARD_KAFKA__GROUP_INSTANCE_ID"]
    assert len(ids) == 2 and len(set(ids)) == 2, ids
    assert "BUSGUARD_KAFKA__BOOTSTRAP_SERVERS" in env and "BUSGUARD_OPS__HOST" in env
    cfg = load_config(REPO / "configs" / "busguard.toml", env=env)
    for name in env:
        section, key = name[len("BUSGUARD_") :].lower().split("__")
        assert hasattr(getattr(cfg, section), key), name
    assert cfg.kafka.bootstrap_servers == "kafka:9092" and cfg.kafka.idempotence is True and cfg.ops.host == "0.0.0.0"
    assert cfg.keys.reconciler_key is not None and Path(cfg.keys.reconciler_key).parent != Path(cfg.keys.guard_key).parent  # its own volume
    assert (
        "reconciler-key:/var/lib/busguard/reconciler-keys" not in text.split("\n  guard:")[1].split("\n  reconciler:")[0]
    )  # the guard never mounts it


def test_errors_name_the_unknown_key_and_the_environment_variable(tmp_path: Path) -> None:
    from busguard.config import load_config
    from busguard.errors import ConfigError

    cfg = tmp_path / "c.toml"
    cfg.write_text('[kafka]\nbootstrap_servers = "x:1"\nbogus_key = 1\n[[routes]]\nname = "r"\ninputs = ["a"]\ndownstream = "b"\n')
    with pytest.raises(ConfigError) as err:
        load_config(cfg, env={})
    assert err.value.field == "kafka.bogus_key" and err.value.value == 1 and str(cfg) in str(err.value)
    cfg.write_text('[[routes]]\nname = "r"\ninputs = ["a"]\ndownstream = "b"\n')
    with pytest.raises(ConfigError) as err:
        load_config(cfg, env={"BUSGUARD_BATCH__MAX_RECORDS": "lots"})
    assert err.value.file == "$BUSGUARD_BATCH__MAX_RECORDS" and err.value.field == "batch.max_records" and err.value.value == "lots"
    # a string-typed key takes the text as it is, even when it looks like a number
    assert load_config(cfg, env={"BUSGUARD_KAFKA__GROUP_ID": "42"}).kafka.group_id == "42"
    cfg.write_text('source = "elsewhere"\n[[routes]]\nname = "r"\ninputs = ["a"]\ndownstream = "b"\n')
    with pytest.raises(ConfigError) as err:
        load_config(cfg, env={})
    assert err.value.field == "source"


def test_the_embedded_broker_config_loads_with_its_overrides_and_any_path(tmp_path: Path) -> None:
    from busguard.devconfig import Topics, embedded_config

    odd = tmp_path / 'dir with "quotes" and \\ backslash' / "state.db"
    text = embedded_config(
        "127.0.0.1:9092",
        group_id="g",
        topics=Topics.under("it.x"),
        comment="two\nlines",
        kafka={"create_topics": True},
        state={"path": str(odd)},
        batch={"max_records": 7},
    )
    (tmp_path / "busguard.toml").write_text(text)
    cfg = load_config(tmp_path / "busguard.toml", env={})
    assert text.startswith("# two\n# lines\n")
    assert (cfg.kafka.group_id, cfg.kafka.idempotence, cfg.kafka.create_topics, cfg.kafka.session_timeout_ms) == ("g", False, True, 3000)
    assert [(r.name, r.inputs, r.downstream) for r in cfg.routes] == [
        ("handoffs", ["it.x.handoffs"], "it.x.handoffs-admitted"),
        ("acks", ["it.x.acks"], "it.x.acks-admitted"),
    ]
    assert cfg.topics.dead_letter == "it.x.dead-letter"
    assert Path(cfg.state.path) == odd
    assert cfg.batch.max_records == 7
    assert (cfg.keys.guard_key, cfg.keys.reconciler_key, cfg.keys.create_reconciler_key) == (
        "guard.key",
        "reconciler.key",
        True,
    )  # one key per role


# -- the PostgreSQL state backend ---------------------------------------------------


def test_postgres_backend_needs_a_dsn(tmp_path: Path) -> None:
    err = refused(tmp_path, ROUTE + '[state]\nbackend = "postgres"\n')
    assert err.field == "state.dsn" and "postgresql://" in err.allowed


def test_postgres_dsn_from_the_environment_and_its_errors_hide_the_password(tmp_path: Path) -> None:
    cfg = load(tmp_path, ROUTE + '[state]\nbackend = "postgres"\n', {"BUSGUARD_STATE__DSN": "postgresql://g:s3cret@db:5432/bus"})
    assert cfg.state.dsn == "postgresql://g:s3cret@db:5432/bus" and cfg.state.schema == "busguard"
    err = refused(tmp_path, ROUTE + '[state]\nbackend = "postgres"\n', {"BUSGUARD_STATE__DSN": "mysql://g:s3cret@db/bus"})
    assert err.field == "state.dsn" and "s3cret" not in str(err) and "g:***@db" in str(err)


def test_postgres_schema_and_retry_are_checked(tmp_path: Path) -> None:
    base = ROUTE + '[state]\nbackend = "postgres"\ndsn = "host=db"\n'
    assert refused(tmp_path, base + 'schema = "Bad-Name"\n').field == "state.schema"
    assert refused(tmp_path, base + "retry_s = 400.0\n").field == "state.retry_s"  # > the 300 s poll interval


# -- [compromise] (seed 004) ---------------------------------------------------


def test_the_compromise_section_reaches_the_handoff_policy(tmp_path: Path) -> None:
    from busguard.policies.compromise.policy import CompromiseSettings

    cfg = load(
        tmp_path,
        ROUTE
        + '[compromise]\nrequire_declaration_for_compromised = true\ntrusted_attesters = ["attester"]\ntrusted_notice_issuers = ["ops"]\n',
    )
    assert cfg.policy().policy_settings["compromise"] == CompromiseSettings(
        require_declaration_for_compromised=True, trusted_attesters=("attester",), trusted_notice_issuers=("ops",)
    )
    assert load(tmp_path, ROUTE).policy().policy_settings["compromise"] == CompromiseSettings()


def test_compromise_agent_ids_and_retention_are_validated(tmp_path: Path) -> None:
    err = refused(tmp_path, ROUTE + '[compromise]\ntrusted_notice_issuers = [""]\n')
    assert (err.field, err.value) == ("compromise.trusted_notice_issuers", "")
    err = refused(tmp_path, ROUTE + "[compromise]\nnotice_retention_ms = 1000\n")
    assert err.field == "compromise.notice_retention_ms" and "session_retention_ms" in err.allowed


@pytest.mark.parametrize(
    ("setting", "cpus", "threads"), [("auto", 1, 1), ("auto", 2, 1), ("auto", 3, 2), ("auto", 64, 8), (3, 2, 3), (1, 16, 1)]
)
def test_verify_threads_auto_leaves_the_event_loop_a_cpu(setting: int | str, cpus: int, threads: int) -> None:
    assert BatchConfig(verify_threads=setting).threads(cpus) == threads  # type: ignore[arg-type]


def test_verify_threads_rejects_other_strings() -> None:
    with pytest.raises(msgspec.ValidationError, match="verify_threads"):
        msgspec.convert({"verify_threads": "many"}, BatchConfig)
