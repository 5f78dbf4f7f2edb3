"""Create acidclean's topics idempotently, with the configured partitions, replication and prefix.

The vacuum, done and dead-letter topics are the audit log ("SHOW COMPACTIONS without a retention
limit"), so they are created with ``retention.ms=-1``. The delay topic keeps the broker's default
retention: a pending vacuum is re-published on it at every check, so its latest envelope is always
recent, and a finished vacuum's history is complete from the vacuum and done events.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from acidclean.shared.bus.client_logs import with_client_logger
from acidclean.shared.errors import BusError
from acidclean.shared.settings import Settings, TopicNames

KEEP_FOREVER = {"retention.ms": "-1"}
TOPIC_CONFIGS: dict[str, dict[str, str]] = {
    "vacuum_committed": KEEP_FOREVER,
    "cleanup_done": KEEP_FOREVER,
    "dead_letter": KEEP_FOREVER,
    "cleanup_delay": {},
    "delta_committed": {},
}


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int
    config: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TopicsReport:
    """What :func:`ensure_topics` found: topics it created, and ones that already existed."""

    created: list[str]
    existing: list[str]


def topic_specs(settings: Settings, names: Iterable[str] | None = None) -> list[TopicSpec]:
    """The topics acidclean needs (``names`` are fields of ``TopicNames``; default all), prefix applied."""
    fields = list(names) if names is not None else list(TopicNames.model_fields)
    return [
        TopicSpec(
            name=settings.topic(name),
            partitions=settings.topic_partitions,
            replication_factor=settings.topic_replication_factor,
            config=dict(TOPIC_CONFIGS.get(name, {})),
        )
        for name in fields
    ]


def ensure_topics(settings: Settings, names: Iterable[str] | None = None, *, timeout_s: float = 30.0) -> TopicsReport:
    """Create the topics that do not exist yet; existing topics are left exactly as they are."""
    specs = topic_specs(settings, names)
    admin = AdminClient(with_client_logger(settings.kafka))
    futures = admin.create_topics(
        [NewTopic(spec.name, spec.partitions, spec.replication_factor, config=spec.config) for spec in specs],
        operation_timeout=timeout_s,
        request_timeout=timeout_s,
    )
    created, existing = [], []
    for spec in specs:
        try:
            futures[spec.name].result(timeout_s)
            created.append(spec.name)
        except KafkaException as error:
            kafka_error: KafkaError = error.args[0]
            if kafka_error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                existing.append(spec.name)
                continue
            raise BusError(
                f"could not create topic {spec.name!r} ({spec.partitions} partitions, replication "
                f"{spec.replication_factor}): {kafka_error.str()}; check bootstrap.servers="
                f"{settings.bootstrap_servers!r}, the client's ACLs and the brokers' replication capacity"
            ) from error
        except Exception as error:  # a future that timed out raises concurrent.futures.TimeoutError
            raise BusError(
                f"creating topic {spec.name!r} got no answer within {timeout_s:g} s; check that "
                f"bootstrap.servers={settings.bootstrap_servers!r} is reachable"
            ) from error
    return TopicsReport(created=created, existing=existing)
