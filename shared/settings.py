"""One settings object for every acidclean process (DESIGN.md section 8).

Values are read, lowest precedence first, from the defaults below, then a config file (Java
``.properties`` as used by Hive and openLooKeng catalogs, or ``.json``), then ``ACIDCLEAN_*``
environment variables, then command-line flags. The seeds' key names are accepted as they are
(``hive.compaction-cleanup-interval``, ``hive.compaction-cleanup-threads``, ``hive.metastore.uris``)
and openLooKeng's names are aliases. Kafka client settings are passed to confluent-kafka untouched:
in a file either bare (``bootstrap.servers``, ``security.protocol``, ``sasl.*``, ``ssl.*``) or with a
``kafka.`` prefix; in the environment as ``ACIDCLEAN_KAFKA_<KEY>`` with dots written as underscores.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from acidclean.shared.errors import ConfigurationError

ENV_PREFIX = "ACIDCLEAN_"
KAFKA_ENV_PREFIX = "ACIDCLEAN_KAFKA_"
# librdkafka property names that a config file may give without the ``kafka.`` prefix.
BARE_KAFKA_KEYS = ("bootstrap.servers", "security.protocol", "client.id")
BARE_KAFKA_PREFIXES = ("sasl.", "ssl.")


class TopicNames(BaseModel):
    """Topic names before the optional per-tenant prefix."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vacuum_committed: str = "acid.vacuum.committed"
    cleanup_delay: str = "acid.cleanup.delay"
    cleanup_done: str = "acid.cleanup.done"
    dead_letter: str = "acid.cleanup.dead-letter"
    delta_committed: str = "acid.delta.committed"


def _alias(*names: str) -> AliasChoices:
    return AliasChoices(*names)


class Settings(BaseSettings):
    """Every setting of acidclean. Build it with :func:`load_settings`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="forbid", frozen=True, populate_by_name=True
    )

    cleanup_interval_ms: int = Field(
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
        validation_alias=_alias(
            "cleanup_threads", "hive.compaction-cleanup-threads", "hive.vacuum-service-threads"
        ),
        description="Parallel deletes per cleaner process.",
    )
    metastore_uris: str = Field(
        "thrift://127.0.0.1:9083",
        validation_alias=_alias("metastore_uris", "hive.metastore.uris"),
        description="Comma-separated thrift:// URIs of the Hive Metastore; the first that answers is used.",
    )
    metastore_timeout_s: float = Field(10.0, gt=0, description="Per-call metastore timeout.")
    kafka: dict[str, str] = Field(
        default_factory=lambda: {"bootstrap.servers": "127.0.0.1:9092"},
        description="confluent-kafka client settings, passed through untouched.",
    )
    topic_prefix: str = Field("", description="Prefix for every topic name, e.g. a tenant's name and a dot.")
    topics: TopicNames = Field(default_factory=TopicNames)
    topic_partitions: int = Field(6, gt=0, description="Partitions of each topic acidclean creates.")
    topic_replication_factor: int = Field(
        -1, description="Replication of each topic acidclean creates; -1 takes the broker's default."
    )
    tenant: str = Field("default", min_length=1, description="The tenant this process works for.")
    allowed_roots: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Per tenant, the storage roots under which the cleaner may delete anything.",
    )
    group_id: str = Field("acidclean-cleaner", description="The cleaner consumer group.")
    max_wait_s: float = Field(86400.0, gt=0, description="After this long a waiting cleanup is reported as stuck.")
    state_dir: Path = Field(Path(".stack"), description="Local stack state, logs and the vacuum outbox.")
    abandoned_staging_s: float = Field(
        3600.0, gt=0, description="A vacuum's staging directory unchanged this long is removed by the next vacuum."
    )
    vacuum_lock_wait_s: float = Field(
        10.0, ge=0, description="How long a vacuum waits for another vacuum of the same table or partition."
    )
    vacuum_lock_stale_s: float = Field(
        300.0, gt=0, description="A vacuum lock whose holder sent no heartbeat this long is released (a dead vacuum)."
    )
    vacuum_commit: Literal["auto", "rename", "visibility-txn"] = Field(
        "auto",
        description="How a vacuum makes its output visible: rename (a staged directory renamed into place; atomic "
        "on HDFS and local disks), visibility-txn (write base_N_vT / delta_X_Y_vT and commit metastore "
        "transaction T, as Hive 4's compactor does; needs Hive 3+), or auto: visibility-txn on object stores "
        "(S3), rename elsewhere.",
    )
    cleanup_waits_for_open_txns: bool = Field(
        True,
        description="Besides the lock snapshot, wait until every transaction open when the vacuum committed "
        "has ended (readers that take no locks, e.g. Hive 4 with hive.txn.read.locks=false). Turn off only "
        "where every reader takes SHARED_READ locks.",
    )
    cleanup_error_tries: int = Field(
        3,
        ge=1,
        description="How many times the cleaner tries an event whose handling fails with an error other than an "
        "unacknowledged publish, before it sends the event to the dead-letter topic with the error (its offset "
        "then advances, so one bad event never stops its partition).",
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


def normalise(raw: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Map a flat or nested dictionary of settings to field names; unknown keys are an error."""
    keys = _field_keys()
    result: dict[str, Any] = {}
    kafka: dict[str, str] = {}
    for key, value in raw.items():
        if key == "kafka" and isinstance(value, Mapping):
            kafka.update({str(k): str(v) for k, v in value.items()})
        elif key.startswith("kafka."):
            kafka[key.removeprefix("kafka.")] = str(value)
        elif key in keys:
            result[keys[key]] = value
        elif _is_kafka_key(key):
            kafka[key] = str(value)
        elif key.startswith("topics."):
            result.setdefault("topics", {})[key.removeprefix("topics.")] = value
        else:
            known = ", ".join(sorted(k for k in keys if not k.startswith("_")))
            raise ConfigurationError(
                f"unknown setting {key!r} in {source}; known settings are: {known}, "
                "and Kafka client settings as 'kafka.<name>'"
            )
    if kafka:
        result["kafka"] = kafka
    return result


def read_config_file(path: Path) -> dict[str, Any]:
    """Read a ``.properties`` or ``.json`` config file into a flat dictionary."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigurationError(f"cannot read config file {path}: {error.strerror}") from error
    if path.suffix == ".json":
        try:
            loaded = json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigurationError(f"config file {path} is not valid JSON: {error}") from error
        if not isinstance(loaded, dict):
            raise ConfigurationError(f"config file {path} must hold a JSON object")
        return loaded
    values: dict[str, Any] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "!")):
            continue
        separator = min((i for i in (stripped.find("="), stripped.find(":")) if i > 0), default=-1)
        if separator < 0:
            raise ConfigurationError(f"{path}:{number}: expected 'key=value', found {stripped!r}")
        values[stripped[:separator].strip()] = stripped[separator + 1 :].strip()
    return values


def read_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    """Collect ``ACIDCLEAN_*`` variables; ``ACIDCLEAN_KAFKA_<KEY>`` become Kafka client settings."""
    values: dict[str, Any] = {}
    kafka: dict[str, str] = {}
    for name, value in environ.items():
        if name in ("ACIDCLEAN_KAFKA_BOOTSTRAP", "ACIDCLEAN_KAFKA_BOOTSTRAP_SERVERS"):
            kafka["bootstrap.servers"] = value
        elif name.startswith(KAFKA_ENV_PREFIX):
            kafka[name.removeprefix(KAFKA_ENV_PREFIX).lower().replace("_", ".")] = value
        elif name.startswith(ENV_PREFIX):
            field = name.removeprefix(ENV_PREFIX).lower()
            if field in Settings.model_fields:
                annotation = Settings.model_fields[field].annotation
                values[field] = _parse_env_value(name, value, annotation)
            # Other ACIDCLEAN_* variables (test switches such as ACIDCLEAN_TEST_METASTORE) are not settings.
    if kafka:
        values["kafka"] = kafka
    return values


def _parse_env_value(name: str, value: str, annotation: Any) -> Any:
    if annotation in (int, float, str, Path):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as error:
        raise ConfigurationError(f"environment variable {name} must hold JSON: {error}") from error


def _merge(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in update.items():
        if key in ("kafka", "topics") and isinstance(value, Mapping):
            merged[key] = {**merged.get(key, {}), **value}
        else:
            merged[key] = value
    return merged


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
    import os

    values: dict[str, Any] = {}
    if defaults:
        values = _merge(values, normalise(defaults, defaults_source))
    if config_file is not None:
        values = _merge(values, normalise(read_config_file(config_file), str(config_file)))
    env_values = read_environment(os.environ if environ is None else environ)
    values = _merge(values, normalise(env_values, "the environment"))
    if overrides:
        flags = {key: value for key, value in overrides.items() if value is not None}
        values = _merge(values, normalise(flags, "the command line"))
    if "kafka" in values:
        values["kafka"] = {**Settings.model_fields["kafka"].get_default(call_default_factory=True), **values["kafka"]}
    try:
        return Settings(**values)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in item['loc'])}: {item['msg']}" for item in error.errors()
        )
        raise ConfigurationError(f"invalid settings: {problems}") from error
