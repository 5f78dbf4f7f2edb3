"""Create acidclean's topics idempotently, with the configured partitions, replication and prefix.

The vacuum, request, done and dead-letter topics are the audit log ("SHOW COMPACTIONS without a retention
limit"), so they are created with ``retention.ms=-1``. The delay topic keeps the broker's default
retention: a pending vacuum is re-published on it at every check, so its latest envelope is always
recent, and a finished vacuum's history is complete from the vacuum and done events.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from acidclean.shared.bus.client_logs import with_client_logger
from acidclean.shared.bus.kafka_errors import (
    AUTHORIZATION_CODES,
    UNREACHABLE_CODES,
    KafkaTopicMissingError,
    configuration_error,
    refused,
    unreachable,
)
from acidclean.shared.errors import BusError
from acidclean.shared.settings import Settings, TopicNames

KEEP_FOREVER = {"retention.ms": "-1"}
COORDINATOR_STARTING = frozenset(
    {KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR}
)
TOPIC_CONFIGS: dict[str, dict[str, str]] = {
    "vacuum_committed": KEEP_FOREVER,
    "cleanup_done": KEEP_FOREVER,
    "dead_letter": KEEP_FOREVER,
    "cleanup_delay": {},
    "delta_committed": {},
    # What each cleanup removed (and undos): kept 30 days, longer than any trash it points into is expected to be.
    "cleanup_ledger": {"retention.ms": str(30 * 24 * 3600 * 1000)},
    "vacuum_requests": KEEP_FOREVER,
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


def _admin(settings: Settings) -> AdminClient:
    try:
        return AdminClient(with_client_logger(settings.kafka))
    except KafkaException as error:
        raise configuration_error(error, "admin client") from error


def ensure_topics(
    settings: Settings,
    names: Iterable[str] | None = None,
    *,
    timeout_s: float = 30.0,
    group: str | None = None,
) -> TopicsReport:
    """Create the topics that do not exist yet; existing topics are left exactly as they are.

    With ``settings.create_topics`` off it only checks that they exist (:func:`check_topics`). With a
    ``group``, it also checks that this client may use that consumer group. A refusal is one line
    naming the topic or group and the ACL to grant (:mod:`acidclean.shared.bus.kafka_errors`).
    """
    if not settings.create_topics:
        report = check_topics(settings, names, timeout_s=timeout_s)
    else:
        report = _create_topics(settings, names, timeout_s=timeout_s)
    if group is not None:
        check_group(settings, group, timeout_s=timeout_s)
    return report


def _create_topics(settings: Settings, names: Iterable[str] | None, *, timeout_s: float) -> TopicsReport:
    specs = topic_specs(settings, names)
    admin = _admin(settings)
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
            if kafka_error.code() in AUTHORIZATION_CODES:
                if kafka_error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    # The broker denied Create (on the topic or the cluster): same advice either way.
                    kafka_error = KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED)
                raise refused(settings.kafka, kafka_error, topic=spec.name, doing="create") from error
            if kafka_error.code() in UNREACHABLE_CODES:
                raise unreachable(settings.kafka, f"creating topic {spec.name}", kafka_error.str()) from error
            raise BusError(
                f"could not create topic {spec.name!r} ({spec.partitions} partitions, replication "
                f"{spec.replication_factor}): {kafka_error.str()}; check bootstrap.servers="
                f"{settings.bootstrap_servers!r}, the client's ACLs and the brokers' replication capacity"
            ) from error
        except Exception as error:  # a future that timed out raises concurrent.futures.TimeoutError
            raise unreachable(settings.kafka, f"creating topic {spec.name} within {timeout_s:g} s") from error
    return TopicsReport(created=created, existing=existing)


def check_topics(settings: Settings, names: Iterable[str] | None = None, *, timeout_s: float = 30.0) -> TopicsReport:
    """Check, without creating anything, that the topics exist and this client may see them."""
    admin = _admin(settings)
    existing = []
    for spec in topic_specs(settings, names):
        try:
            metadata = admin.list_topics(topic=spec.name, timeout=timeout_s)
        except KafkaException as error:
            detail = error.args[0].str()
            raise unreachable(settings.kafka, f"a metadata request for topic {spec.name}", detail) from error
        found = metadata.topics.get(spec.name)
        topic_error = found.error if found is not None else KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
        if topic_error is None:
            existing.append(spec.name)
            continue
        if topic_error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
            raise KafkaTopicMissingError(
                f"topic {spec.name} does not exist and topics are not created (--no-create-topics, "
                f"create_topics=false): create it ({spec.partitions} partition{'s' if spec.partitions != 1 else ''}"
                f"{', retention.ms=-1' if spec.config == KEEP_FOREVER else ''}) or let acidclean create it"
            )
        raise refused(settings.kafka, topic_error, topic=spec.name, doing="use", operations="Read and Write")
    return TopicsReport(created=[], existing=existing)


DESCRIBE_ATTEMPT_S = 5.0


def check_group(settings: Settings, group: str, *, timeout_s: float = 30.0) -> None:
    """Check that this client may use consumer group ``group`` (a group not created yet passes)."""
    deadline = time.monotonic() + timeout_s
    admin = _admin(settings)
    while True:
        # Short attempts, each on a fresh client after a time-out: on a broker that has just started, a
        # first FindCoordinator can stay unanswered in flight for the whole request time-out.
        attempt_s = max(0.5, min(DESCRIBE_ATTEMPT_S, deadline - time.monotonic()))
        future = admin.describe_consumer_groups([group], request_timeout=attempt_s)[group]
        try:
            future.result(attempt_s + 1.0)
            return
        except KafkaException as error:
            code = error.args[0].code()
            if code == KafkaError.GROUP_ID_NOT_FOUND:
                return  # a group that never had a member (the new consumer protocol's answer): not a refusal
            if code in (*COORDINATOR_STARTING, KafkaError._TIMED_OUT) and time.monotonic() < deadline:
                time.sleep(0.2)  # a fresh broker loads its group coordinator for a moment
                admin = _admin(settings) if code == KafkaError._TIMED_OUT else admin
                continue
            if code == KafkaError._TIMED_OUT:
                raise unreachable(settings.kafka, _describing(group, timeout_s)) from error
            raise refused(settings.kafka, error.args[0], group=group, doing="join") from error
        except Exception as error:  # concurrent.futures.TimeoutError
            if time.monotonic() < deadline:
                admin = _admin(settings)
                continue
            raise unreachable(settings.kafka, _describing(group, timeout_s)) from error


def _describing(group: str, timeout_s: float) -> str:
    return f"describing consumer group {group} within {timeout_s:g} s"
