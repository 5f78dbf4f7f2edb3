"""One settings object for every acidclean process (docs/design.md section 8).

Values are read, lowest precedence first, from the defaults below, then a config file (Java
``.properties`` as used by Hive and openLooKeng catalogs, read as Java reads them, or ``.json``), then
``ACIDCLEAN_*`` environment variables, then command-line flags. The seeds' key names are accepted as
they are (``hive.compaction-cleanup-interval``, ``hive.compaction-cleanup-threads``,
``hive.metastore.uris``) and openLooKeng's names are aliases. Durations take a unit as openLooKeng's
(Airlift's) do (``500ms``, ``2.5s``, ``5m``, ``1h``, ``1d``); a bare number is in the setting's own unit.
Kafka client settings are passed to confluent-kafka untouched: in a file either bare
(``bootstrap.servers``, ``security.protocol``, ``sasl.*``, ``ssl.*``) or with a ``kafka.`` prefix; in
the environment as ``ACIDCLEAN_KAFKA_<KEY>`` with dots written as underscores.

Every error names the key as the user wrote it and where it came from (file and line, environment
variable, flag), because its reader is an operator who has never seen the field names. An
``ACIDCLEAN_*`` variable that is neither a setting nor one of :data:`NON_SETTING_VARIABLES` is an
error: a misspelt variable would otherwise be silently ignored.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Annotated, Any, Literal, get_origin

import javaproperties
from pydantic import AliasChoices, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails, PydanticCustomError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from acidclean.shared.errors import ConfigurationError

ENV_PREFIX = "ACIDCLEAN_"
KAFKA_ENV_PREFIX = "ACIDCLEAN_KAFKA_"
# librdkafka property names that a config file may give without the ``kafka.`` prefix.
BARE_KAFKA_KEYS = ("bootstrap.servers", "security.protocol", "client.id")
BARE_KAFKA_PREFIXES = ("sasl.", "ssl.")
KAFKA_BOOTSTRAP_VARIABLES = ("ACIDCLEAN_KAFKA_BOOTSTRAP", "ACIDCLEAN_KAFKA_BOOTSTRAP_SERVERS")

# ACIDCLEAN_* environment variables that are not settings, and who reads them. Any other ACIDCLEAN_*
# name that is not a setting is refused (read_environment), so a new variable read elsewhere must be
# listed here; tests/unit/test_settings.py checks every name the repository's code uses.
NON_SETTING_VARIABLES: Mapping[str, str] = {
    "ACIDCLEAN_CONFIG": "the settings file of `acidclean audit` (acidclean/cli/audit.py)",
    "ACIDCLEAN_CACHE_DIR": "the local stack's jar cache (deploy/local/jars.py)",
    "ACIDCLEAN_MAVEN_SETTINGS": "a Maven settings.xml for fetching the local stack's jars (deploy/local/jars.py)",
    "ACIDCLEAN_TEST_METASTORE": "hive2, hive3 or hive4, the metastore of `stack up` and the test fixtures",
    "ACIDCLEAN_CRASH_AT": "test-only crash point of the cleaner (consumers/crash_points.py)",
    "ACIDCLEAN_VENV_ARCHIVE": "the virtualenv shipped to Spark (deploy/production/vacuum-spark-submit.sh)",
    "ACIDCLEAN_KEYTAB": "the keytab spark-submit logs in with (deploy/production/vacuum-spark-submit.sh)",
    "ACIDCLEAN_PRINCIPAL": "the principal of ACIDCLEAN_KEYTAB (deploy/production/vacuum-spark-submit.sh)",
}
NON_SETTING_PREFIXES: Mapping[str, str] = {
    "ACIDCLEAN_S3_": "the S3 client (shared/storage/s3.py)",
    "ACIDCLEAN_HDFS_": "the HDFS client (shared/storage/hdfs.py)",
    "ACIDCLEAN_BENCH_": "sizes of the benchmarks (tests/bench/)",
    "ACIDCLEAN_SCALE_": "sizes of the scale benchmark (tests/bench/bench_scale.py)",
}

# The cleaner's flags for the settings they override, so that an error names the flag that was typed.
COMMAND_LINE_FLAGS: Mapping[str, str] = {
    "group_id": "--group",
    "cleanup_threads": "--threads",
    "cleanup_interval_ms": "--interval-ms",
    "tenant": "--tenant",
    "max_wait_s": "--max-wait",
}

# Airlift's Duration units (what openLooKeng's *-interval properties take), in milliseconds.
DURATION_UNITS_MS: Mapping[str, int] = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*")


def _duration_in(unit: Literal["ms", "s"]) -> BeforeValidator:
    """A validator that turns ``2000`` (in ``unit``), ``500ms``, ``2.5s``, ``5m``, ``1h`` or ``1d`` into a
    number of ``unit``; a value that is not a string is taken as already in ``unit``."""
    unit_name = {"ms": "milliseconds", "s": "seconds"}[unit]

    def convert(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        match = _DURATION.fullmatch(value)
        if match is None or (match[2] and match[2] not in DURATION_UNITS_MS):
            raise PydanticCustomError(
                "duration",
                f"not a duration (use a number of {unit_name} or a value with a unit: 500ms, 2s, 5m, 1h, 1d)",
            )
        milliseconds = Decimal(match[1]) * DURATION_UNITS_MS[match[2] or unit]
        if unit == "ms":  # a whole number of milliseconds, rounded as Airlift's Duration.toMillis does
            return int(milliseconds.to_integral_value(ROUND_HALF_UP))
        return float(milliseconds / 1000)

    return BeforeValidator(convert)


Milliseconds = Annotated[int, _duration_in("ms")]
Seconds = Annotated[float, _duration_in("s")]


class TopicNames(BaseModel):
    """Topic names before the optional per-tenant prefix."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vacuum_committed: str = "acid.vacuum.committed"
    cleanup_delay: str = "acid.cleanup.delay"
    cleanup_done: str = "acid.cleanup.done"
    dead_letter: str = "acid.cleanup.dead-letter"
    delta_committed: str = "acid.delta.committed"
    vacuum_requests: str = "acid.vacuum.requests"
    cleanup_ledger: str = "acid.cleanup.ledger"


def _alias(*names: str) -> AliasChoices:
    return AliasChoices(*names)


class Settings(BaseSettings):
    """Every setting of acidclean. Build it with :func:`load_settings`."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True, populate_by_name=True)

    cleanup_interval_ms: Milliseconds = Field(
        2000,
        gt=0,
        validation_alias=_alias(
            "cleanup_interval_ms",
            "hive.compaction-cleanup-interval",
            "hive.vacuum-cleanup-recheck-interval",
        ),
        description="How long an event waits on the delay topic before readyToClean is asked again.",
    )
    cleanup_threads: int = Field(
        2,
        gt=0,
        validation_alias=_alias("cleanup_threads", "hive.compaction-cleanup-threads", "hive.vacuum-service-threads"),
        description="Parallel deletes per cleaner process.",
    )
    metastore_uris: str = Field(
        "thrift://127.0.0.1:9083",
        validation_alias=_alias("metastore_uris", "hive.metastore.uris"),
        description="Comma-separated thrift:// URIs of the Hive Metastore; the first that answers is used.",
    )
    metastore_timeout_s: Seconds = Field(10.0, gt=0, description="Per-call metastore timeout.")
    metastore_sasl_enabled: bool = Field(
        False,
        validation_alias=_alias("metastore_sasl_enabled", "hive.metastore.sasl.enabled"),
        description="Authenticate to the metastore with Kerberos (SASL/GSSAPI), as a metastore with "
        "hive.metastore.sasl.enabled=true requires; needs the kerberos extra.",
    )
    metastore_kerberos_principal: str = Field(
        "",
        validation_alias=_alias("metastore_kerberos_principal", "hive.metastore.kerberos.principal"),
        description="The metastore's service principal, e.g. hive/_HOST@EXAMPLE.COM (_HOST: the host of the "
        "metastore URI, lower-cased).",
    )
    metastore_client_principal: str = Field(
        "", description="Who acidclean is to the metastore (with a keytab), e.g. acidclean/cleaner@EXAMPLE.COM."
    )
    metastore_client_keytab: str = Field(
        "", description="Keytab holding the key of metastore_client_principal; without it a ticket cache is used."
    )
    metastore_client_ticket_cache: str = Field(
        "", description="Ticket cache to use without a keytab (e.g. FILE:/tmp/krb5cc_1000); default: KRB5CCNAME."
    )
    kafka: dict[str, str] = Field(
        default_factory=lambda: {"bootstrap.servers": "127.0.0.1:9092"},
        description="confluent-kafka client settings, passed through untouched.",
    )
    topic_prefix: str = Field("", description="Prefix for every topic name, e.g. a tenant's name and a dot.")
    topics: TopicNames = Field(default_factory=TopicNames)
    topic_partitions: int = Field(6, gt=0, description="Partitions of each topic acidclean creates.")
    create_topics: bool = Field(
        True,
        description="Create missing topics at start (CreateTopics). Off where topics are provisioned and the "
        "client may not create them: acidclean then only checks that they exist and that it may use them.",
    )
    topic_replication_factor: int = Field(
        -1, description="Replication of each topic acidclean creates; -1 takes the broker's default."
    )
    tenant: str = Field("default", min_length=1, description="The tenant this process works for.")
    allowed_roots: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Per tenant, the storage roots under which the cleaner may delete anything.",
    )
    group_id: str = Field("acidclean-cleaner", description="The cleaner consumer group.")
    max_wait_s: Seconds = Field(86400.0, gt=0, description="After this long a waiting cleanup is reported as stuck.")
    state_dir: Path = Field(Path(".stack"), description="Local stack state, logs and the vacuum outbox.")
    abandoned_staging_s: Seconds = Field(
        3600.0, gt=0, description="A vacuum's staging directory unchanged this long is removed by the next vacuum."
    )
    vacuum_lock_wait_s: Seconds = Field(
        10.0, ge=0, description="How long a vacuum waits for another vacuum of the same table or partition."
    )
    vacuum_lock_stale_s: Seconds = Field(
        300.0, gt=0, description="A vacuum lock whose holder sent no heartbeat this long is released (a dead vacuum)."
    )
    vacuum_commit: Literal["auto", "rename", "visibility-txn"] = Field(
        "auto",
        description="How a vacuum makes its output visible: rename (a staged directory renamed into place; atomic "
        "on HDFS and local disks), visibility-txn (write base_N_vT / delta_X_Y_vT and commit metastore "
        "transaction T, as Hive 4's compactor does; behind Hive 3 only with vacuum_visibility_txn_on_hive3), or "
        "auto: visibility-txn on object stores (S3) behind Hive 4, rename elsewhere (refused on an object store "
        "behind Hive 2 or 3).",
    )
    vacuum_visibility_txn_on_hive3: bool = Field(
        False,
        description="Acknowledge that every reader of the vacuumed tables parses base_N_vT / delta_X_Y_vT although "
        "the metastore is Hive 3 (Hive 3.1's own readers fail on them): needed for vacuum_commit=visibility-txn "
        "behind a Hive 3 metastore.",
    )
    cleanup_bundle_min: int = Field(
        8,
        ge=1,
        description="Waiting tables' delay records of one delay partition, carried on unread in one batch, "
        "that go on together in one bundle record (fewer go on alone).",
    )
    cleanup_bundle_spread_ms: int = Field(
        10,
        ge=0,
        description="A due delay record of one table alone waits up to this many ms for its delay partition's "
        "others due within it, so they are checked in one batch and go on in one bundle (records checked in "
        "separate batches otherwise stay in separate bundles for good). Larger: fewer, bigger bundles, and the "
        "first of them checked up to this much after its own due time.",
    )
    cleanup_bundle_compression: Literal["zlib", "none"] = Field(
        "zlib",
        description="How bundle records carry their members: zlib (compressed, about a twelfth of the bytes to "
        "produce, store, fetch and hold while vacuums wait) or none (plain JSON). Cleaners of every version read "
        "plain bundles; only this version and later read compressed ones, so while a group is upgraded one "
        "process at a time from an older version, set none until every process runs this one.",
    )
    cleanup_bundle_parts_off: str = Field(
        "",
        description="For measurement only (issue 50): parts of the bundle machinery switched off, comma-separated "
        "(whole_carries, summaries, unread, gather, riders). Leave empty.",
    )
    cleanup_waits_for_open_txns: bool = Field(
        True,
        description="Besides the lock snapshot, wait until every transaction open when the vacuum committed "
        "has ended (readers that take no locks, e.g. Hive 4 with hive.txn.read.locks=false). Turn off only "
        "where every reader takes SHARED_READ locks. A vacuum committed through a transaction (base_N_vT) is "
        "always waited for this way, whatever this says.",
    )
    cleanup_error_tries: int = Field(
        3,
        ge=1,
        description="How many times the cleaner tries an event whose handling fails with an error other than an "
        "unacknowledged publish, before it sends the event to the dead-letter topic with the error (its offset "
        "then advances, so one bad event never stops its partition).",
    )

    cleanup_trash: bool = Field(
        True,
        description="Move what a cleanup removes to the trash, as Hive's cleaner does (FileUtils.moveToTrash): on "
        "HDFS the owner's .Trash/Current with the NameNode's fs.trash.interval, on local storage and unversioned S3 "
        "under cleanup_trash_root; a table with auto.purge=true, a NameNode without trash, or no trash root delete "
        "outright (a versioned S3 bucket keeps versions). Off: always delete outright.",
    )
    cleanup_trash_root: str = Field(
        "",
        description="acidclean's own trash for local storage and unversioned S3, a path on the table's storage "
        "(e.g. /warehouse/.acidclean-trash, or bucket/.acidclean-trash on S3); empty: delete outright there.",
    )
    cleanup_trash_interval_min: int = Field(
        1440,
        ge=1,
        validation_alias=_alias("cleanup_trash_interval_min", "fs.trash.interval"),
        description="Minutes acidclean's own trash (cleanup_trash_root) keeps what a cleanup removed before the "
        "cleaner expires it, as Hadoop's fs.trash.interval (HDFS's trash keeps its NameNode's own interval).",
    )
    vacuum_service_group_id: str = Field(
        "acidclean-vacuum-service",
        description="The consumer group of the vacuum services (each joins <group>.<tenant>), on the vacuum "
        "requests topic.",
    )
    vacuum_service_threads: int = Field(
        1,
        gt=0,
        validation_alias=_alias("vacuum_service_threads", "hive.compactor.worker.threads"),
        description="Vacuums one vacuum service runs at once, in its one SparkSession (tables or partitions in "
        "parallel; one key's requests always one after the other).",
    )
    vacuum_service_master: str | None = Field(
        None,
        description="The Spark master of the vacuum service's SparkSession (yarn, k8s://..., spark://...); "
        "default: spark-submit's, else local[*].",
    )
    vacuum_service_shutdown_s: Seconds = Field(
        60.0,
        gt=0,
        description="On SIGTERM, how long the vacuum service lets running vacuums finish before it leaves "
        "without them (their requests are then run again by the group, safely).",
    )

    compactor_delta_num_threshold: int = Field(
        10,
        ge=0,
        validation_alias=_alias("compactor_delta_num_threshold", "hive.compactor.delta.num.threshold"),
        description="The initiator requests a vacuum when a table or partition has more deltas than this.",
    )
    compactor_delta_pct_threshold: float = Field(
        0.1,
        ge=0,
        validation_alias=_alias("compactor_delta_pct_threshold", "hive.compactor.delta.pct.threshold"),
        description="The initiator requests a MAJOR vacuum when the deltas' bytes exceed this fraction of the base's.",
    )
    compactor_abortedtxn_threshold: int = Field(
        1000,
        ge=0,
        validation_alias=_alias("compactor_abortedtxn_threshold", "hive.compactor.abortedtxn.threshold"),
        description="The initiator requests a MAJOR vacuum when more aborted transactions than this wrote to a table.",
    )
    initiator_group_id: str = Field(
        "acidclean-initiator",
        description="The consumer group of the initiators (each joins <group>.<tenant>), on the delta topic.",
    )
    initiator_sweep_interval_s: Seconds = Field(
        300.0,
        ge=0,
        validation_alias=_alias("initiator_sweep_interval_s", "hive.compactor.check.interval"),
        description="How often the initiator sweeps the metastore's transactional tables (writers that publish "
        "no DeltaCommitted); 0 turns the sweep off.",
    )
    initiator_sweep_tables_per_minute: int = Field(
        60, gt=0, description="At most this many tables a minute are checked by the sweep."
    )
    initiator_table_cache_s: Seconds = Field(
        300.0, ge=0, description="How long the initiator reuses a table's metastore parameters (TBLPROPERTIES)."
    )
    hive_queue_pool: str | None = Field(
        None,
        description="The pool of Hive's compaction queue acidclean hive-queue serves (ALTER TABLE ... COMPACT "
        "'major' POOL 'name'); unset: the default pool, which Hive's own Worker serves too.",
    )
    hive_queue_initiator_requests: bool = Field(
        False,
        description="The initiator enters its requests in Hive's compaction queue (compact2, in hive_queue_pool) "
        "for acidclean hive-queue to publish, so SHOW COMPACTIONS lists them; needs acidclean hive-queue running.",
    )
    hive_queue_poll_interval_s: Seconds = Field(
        5.0, gt=0, description="How often acidclean hive-queue reads Hive's compaction queue and the event log."
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Precedence is applied by load_settings, which merges file, environment and flags itself so
        # that the Kafka pass-through dictionary merges key by key instead of being replaced whole.
        return (init_settings,)

    def topic(self, name: str) -> str:
        """The full topic name of one of :class:`TopicNames`'s fields, prefix included."""
        return self.topic_prefix + str(getattr(self.topics, name))

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka.get("bootstrap.servers", "")


def _field_keys() -> dict[str, str]:
    """Every accepted key (field names and their aliases) mapped to the field name."""
    keys: dict[str, str] = {}
    for name, info in Settings.model_fields.items():
        keys[name] = name
        for alias in _aliases_of(info):
            keys[alias] = name
    return keys


def _aliases_of(info: FieldInfo) -> list[str]:
    alias = info.validation_alias
    if isinstance(alias, AliasChoices):
        return [choice for choice in alias.choices if isinstance(choice, str)]
    return []


def _is_kafka_key(key: str) -> bool:
    return key in BARE_KAFKA_KEYS or key.startswith(BARE_KAFKA_PREFIXES)


def _is_structured(field: str) -> bool:
    """Whether a field holds a JSON object or list (given as JSON text in a properties file or a variable)."""
    annotation = Settings.model_fields[field].annotation
    return get_origin(annotation) in (dict, list) or (
        isinstance(annotation, type) and issubclass(annotation, BaseModel)
    )


@dataclass(frozen=True)
class _Origin:
    """One value as the user wrote it, and where: ``hive.compaction-cleanup-interval=5x in /etc/a.properties:3``."""

    key: str
    value: Any
    where: str

    def __str__(self) -> str:
        shown = (self.value or "''") if isinstance(self.value, str) else json.dumps(self.value, default=str)
        return f"{self.key}={shown} {self.where}"


@dataclass(frozen=True)
class _Entry:
    """One setting of one layer: its key (a field name, an alias, ``kafka.*``, ``topics.*``) and origin."""

    key: str
    value: Any
    origin: _Origin


def _json_value(value: str, origin: _Origin) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError as error:
        raise ConfigurationError(f"{origin}: not JSON ({error.msg} at column {error.colno})") from error


def _unknown_key(key: str, where: str, keys: Iterable[str]) -> ConfigurationError:
    known = sorted(k for k in keys if not k.startswith("_"))
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"did you mean {close[0]!r}? The " if close else "the "
    return ConfigurationError(
        f"unknown setting {key!r} {where}; {hint}known settings are: {', '.join(known)}, "
        "and Kafka client settings as 'kafka.<name>'"
    )


def _normalise(entries: Iterable[_Entry]) -> tuple[dict[str, Any], dict[str, _Origin]]:
    """Map one layer's keys to field names, and each field (or ``topics.<name>``) to its origin."""
    keys = _field_keys()
    result: dict[str, Any] = {}
    origins: dict[str, _Origin] = {}
    kafka: dict[str, str] = {}
    for entry in entries:
        key, value = entry.key, entry.value
        if key == "kafka":
            value = _json_value(value, entry.origin) if isinstance(value, str) else value
            if not isinstance(value, Mapping):
                raise ConfigurationError(f"{entry.origin}: Kafka client settings must be a JSON object")
            kafka.update({str(k): str(v) for k, v in value.items()})
        elif key.startswith("kafka."):
            kafka[key.removeprefix("kafka.")] = str(value)
        elif key in keys:
            field = keys[key]
            if isinstance(value, str) and _is_structured(field):
                value = _json_value(value, entry.origin)
            if field == "topics" and isinstance(value, Mapping):
                value = {**result.get("topics", {}), **value}
            result[field] = value
            origins[field] = entry.origin
        elif _is_kafka_key(key):
            kafka[key] = str(value)
        elif key.startswith("topics."):
            name = key.removeprefix("topics.")
            result.setdefault("topics", {})[name] = value
            origins[f"topics.{name}"] = entry.origin
        else:
            raise _unknown_key(key, entry.origin.where, keys)
    if kafka:
        result["kafka"] = kafka
    return result, origins


def normalise(raw: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Map a flat or nested dictionary of settings to field names; unknown keys are an error."""
    where = f"in {source}"
    values, _ = _normalise(_Entry(str(key), value, _Origin(str(key), value, where)) for key, value in raw.items())
    return values


def _line_count(source: str) -> int:
    return source.count("\n") + source.count("\r") - source.count("\r\n")


def _properties_entries(text: str, path: Path) -> list[_Entry]:
    """The key-value pairs of a ``.properties`` file as Java reads them (continuations, ``key value``,
    ``key:value``, ``#``/``!`` comments, ``\\uXXXX``), each with the line it starts on."""
    entries: list[_Entry] = []
    line = 1
    try:
        for element in javaproperties.parse(text):
            if isinstance(element, javaproperties.KeyValue):
                origin = _Origin(element.key, element.value, f"in {path}:{line}")
                entries.append(_Entry(element.key, element.value, origin))
            line += _line_count(element.source)
    except javaproperties.InvalidUEscapeError as error:
        raise ConfigurationError(
            f"{path}:{line}: {error.escape} is not a unicode escape (\\u and four hexadecimal digits)"
        ) from error
    return entries


def _config_file_entries(path: Path) -> list[_Entry]:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ConfigurationError(f"cannot read config file {path}: {error.strerror}") from error
    if path.suffix == ".json":
        try:
            loaded = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ConfigurationError(f"config file {path} is not valid JSON: {error}") from error
        if not isinstance(loaded, dict):
            raise ConfigurationError(f"config file {path} must hold a JSON object")
        return [_Entry(key, value, _Origin(key, value, f"in {path}")) for key, value in loaded.items()]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")  # what Java's Properties.load(InputStream) assumes
    return _properties_entries(text, path)


def read_config_file(path: Path) -> dict[str, Any]:
    """Read a ``.properties`` or ``.json`` config file into a flat dictionary."""
    return {entry.key: entry.value for entry in _config_file_entries(path)}


def _setting_of_variable(name: str) -> str | None:
    field = name.removeprefix(ENV_PREFIX).lower()
    return field if name.startswith(ENV_PREFIX) and field in Settings.model_fields else None


def _is_known_variable(name: str) -> bool:
    return (
        _setting_of_variable(name) is not None
        or name in NON_SETTING_VARIABLES
        or name.startswith((KAFKA_ENV_PREFIX, *NON_SETTING_PREFIXES))
    )


def check_environment_names(names: Iterable[str]) -> None:
    """Refuse an ``ACIDCLEAN_*`` name that is neither a setting nor a known non-setting variable."""
    for name in names:
        if not name.startswith(ENV_PREFIX) or _is_known_variable(name):
            continue
        candidates = [ENV_PREFIX + field.upper() for field in Settings.model_fields]
        candidates += [*NON_SETTING_VARIABLES, *KAFKA_BOOTSTRAP_VARIABLES]
        # Compared without the prefix every candidate shares, which would make anything look close.
        close = difflib.get_close_matches(
            name.removeprefix(ENV_PREFIX), [c.removeprefix(ENV_PREFIX) for c in candidates], n=1
        )
        if close:
            raise ConfigurationError(f"unknown environment variable {name}; did you mean {ENV_PREFIX}{close[0]}?")
        prefixes = ", ".join(f"{prefix}*" for prefix in (KAFKA_ENV_PREFIX, *NON_SETTING_PREFIXES))
        raise ConfigurationError(
            f"unknown environment variable {name}; the ACIDCLEAN_* variables are {', '.join(sorted(candidates))} "
            f"and {prefixes}"
        )


def _environment_entries(environ: Mapping[str, str]) -> list[_Entry]:
    check_environment_names(environ)
    entries: list[_Entry] = []
    for name, value in environ.items():
        origin = _Origin(name, value, "in the environment")
        field = _setting_of_variable(name)
        if name in KAFKA_BOOTSTRAP_VARIABLES:
            entries.append(_Entry("kafka.bootstrap.servers", value, origin))
        elif name.startswith(KAFKA_ENV_PREFIX):
            kafka_key = name.removeprefix(KAFKA_ENV_PREFIX).lower().replace("_", ".")
            entries.append(_Entry(f"kafka.{kafka_key}", value, origin))
        elif field is not None:
            entries.append(_Entry(field, value, origin))
        # Other known ACIDCLEAN_* variables (storage clients, test switches) are read where they are used.
    return entries


def read_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    """Collect ``ACIDCLEAN_*`` variables; ``ACIDCLEAN_KAFKA_<KEY>`` become Kafka client settings. An
    unknown ``ACIDCLEAN_*`` name is an error (see :data:`NON_SETTING_VARIABLES`)."""
    values, _ = _normalise(_environment_entries(environ))
    return values


def _merge(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in update.items():
        if key in ("kafka", "topics") and isinstance(value, Mapping):
            merged[key] = {**merged.get(key, {}), **value}
        else:
            merged[key] = value
    return merged


def _problem(error: ErrorDetails, origins: Mapping[str, _Origin]) -> str:
    """One validation error, told with the key and place the value came from."""
    loc = [str(part) for part in error["loc"]]
    message = error["msg"][:1].lower() + error["msg"][1:]
    for depth in range(len(loc), 0, -1):
        origin = origins.get(".".join(loc[:depth]))
        if origin is not None:
            inner = ".".join(loc[depth:])
            return f"{origin}: {message}" + (f" (at {inner})" if inner else "")
    return f"{'.'.join(loc)}: {message}"


def load_settings(
    config_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    defaults: Mapping[str, Any] | None = None,
    defaults_source: str = "the local stack",
) -> Settings:
    """Build the settings: the built-in defaults, then ``defaults`` (e.g. the local stack the command
    runs in, named ``defaults_source`` in errors), then the file, then the environment, then
    ``overrides`` (flags)."""
    layers: list[list[_Entry]] = []
    if defaults:
        where = f"from {defaults_source}"
        layers.append([_Entry(key, value, _Origin(key, value, where)) for key, value in defaults.items()])
    if config_file is not None:
        layers.append(_config_file_entries(config_file))
    layers.append(_environment_entries(os.environ if environ is None else environ))
    if overrides:
        layers.append(
            [
                _Entry(key, value, _Origin(COMMAND_LINE_FLAGS.get(key, key), value, "on the command line"))
                for key, value in overrides.items()
                if value is not None
            ]
        )
    values: dict[str, Any] = {}
    origins: dict[str, _Origin] = {}
    for layer in layers:
        layer_values, layer_origins = _normalise(layer)
        values = _merge(values, layer_values)
        origins.update(layer_origins)
    if "kafka" in values:
        values["kafka"] = {**Settings.model_fields["kafka"].get_default(call_default_factory=True), **values["kafka"]}
    try:
        return Settings(**values)
    except ValidationError as error:
        raise ConfigurationError("; ".join(_problem(item, origins) for item in error.errors())) from error
