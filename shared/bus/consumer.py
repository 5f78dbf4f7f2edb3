"""Consumer-side helpers: at-least-once settings and offsets stored only after the outcome is acked.

A cleaner consumes with ``enable.auto.commit=false`` and ``enable.auto.offset.store=false`` and
incremental rebalances: ``cooperative-sticky`` assignment in Kafka's classic group protocol, or, with
``group.protocol=consumer`` (Kafka 4.0 and later, KIP-848), the broker's ``range`` assignor unless
``group.remote.assignor`` says otherwise. The classic assignor balances the count of partitions, not
each topic's: a process that joins a running one may get every delay partition while the other keeps
every vacuum partition. The broker's range assignor gives each process the same partition numbers of
every topic (co-partitioning), so a table's fresh vacuums and its waiting records, whose keys hash to
the same partition number, stay in one process. For each record it publishes an outcome (``CleanupDone``, a delay
envelope or a dead letter); only when the broker acknowledged that outcome may the record's offset
be stored and committed. Records may finish out of order (several threads), so
:class:`OffsetLedger` tracks, per partition, the offset below which every record is done: that is
the only offset that may be committed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from acidclean.shared.bus.client_logs import with_client_logger
from acidclean.shared.bus.kafka_errors import configuration_error
from acidclean.shared.errors import BusError, ConfigurationError

REQUIRED_CONSUMER_SETTINGS = {
    "enable.auto.commit": "false",
    "enable.auto.offset.store": "false",
}
CLASSIC_ASSIGNMENT = ("partition.assignment.strategy", "cooperative-sticky")
# Kafka's consumer group protocol (KIP-848): the broker assigns, always incrementally.
CONSUMER_PROTOCOL = "consumer"
BROKER_ASSIGNOR_DEFAULT = ("group.remote.assignor", "range")

Partition = tuple[str, int]


def consumer_config(kafka: Mapping[str, str], group_id: str) -> dict[str, str]:
    """Pass-through Kafka settings plus acidclean's at-least-once settings; conflicts are refused.

    ``auto.offset.reset`` defaults to ``earliest``: a new consumer group must not skip vacuums that
    were published before it first joined.
    """
    config = {str(key): str(value) for key, value in kafka.items()}
    for name, required in REQUIRED_CONSUMER_SETTINGS.items():
        _require(config, name, required, "which stores and commits an offset only after its outcome is acknowledged")
    if config.get("group.protocol", "classic").lower() == CONSUMER_PROTOCOL:
        if "partition.assignment.strategy" in config:
            raise ConfigurationError(
                "Kafka setting partition.assignment.strategy belongs to the classic group protocol; with "
                "group.protocol=consumer the broker assigns partitions: remove it (group.remote.assignor "
                "names the broker's assignor, range by default here)"
            )
        config.setdefault(*BROKER_ASSIGNOR_DEFAULT)
    else:
        name, required = CLASSIC_ASSIGNMENT
        _require(
            config, name, required, "whose consumers rebalance incrementally", "group.protocol=consumer on Kafka 4.0+"
        )
    config["group.id"] = group_id
    config.setdefault("auto.offset.reset", "earliest")
    return config


def _require(config: dict[str, str], name: str, required: str, why: str, instead: str | None = None) -> None:
    """Set ``name`` to ``required`` in ``config``; refuse another value the user gave, saying ``why``."""
    given = config.get(name)
    if given is not None and given.lower() != required:
        alternative = "" if instead is None else f", or {instead}"
        raise ConfigurationError(
            f"Kafka setting {name}={given} conflicts with acidclean, {why} (needs {name}={required}{alternative}): "
            "remove it"
        )
    config[name] = required


def make_consumer(kafka: Mapping[str, str], group_id: str) -> Consumer:
    """A ``confluent_kafka.Consumer`` with :func:`consumer_config`."""
    try:
        return Consumer(with_client_logger(consumer_config(kafka, group_id)))
    except KafkaException as error:
        raise configuration_error(error, "consumer") from error


class OffsetLedger:
    """Per partition, which offsets are in flight and the highest offset that may be committed.

    ``start`` a record when it is taken up, ``finish`` it once its outcome is acknowledged. The
    committable offset (Kafka's convention: the next offset to read) only moves past a record when it
    and every earlier started record of its partition are finished.
    """

    def __init__(self) -> None:
        self._in_flight: dict[Partition, set[int]] = {}
        self._highest_started: dict[Partition, int] = {}
        self._committable: dict[Partition, int] = {}
        self._first: dict[Partition, int] = {}

    def start(self, topic: str, partition: int, offset: int) -> None:
        key = (topic, partition)
        # Committing the first offset taken up would change nothing: it only moves past finished work.
        self._committable.setdefault(key, offset)
        self._first.setdefault(key, offset)
        self._in_flight.setdefault(key, set()).add(offset)
        self._highest_started[key] = max(offset, self._highest_started.get(key, -1))

    def finish(self, topic: str, partition: int, offset: int) -> int | None:
        """Mark a record done; returns the new committable offset if it moved, else None."""
        key = (topic, partition)
        in_flight = self._in_flight.get(key)
        if in_flight is None or offset not in in_flight:
            return None  # not started here, or its partition was revoked meanwhile
        in_flight.discard(offset)
        candidate = min(in_flight) if in_flight else self._highest_started[key] + 1
        if candidate > self._committable.get(key, -1):
            self._committable[key] = candidate
            return candidate
        return None

    def committable(self) -> dict[Partition, int]:
        """Every partition's committable offset (next offset to read), once it moved past finished work."""
        return {key: offset for key, offset in self._committable.items() if offset > self._first.get(key, -1)}

    def pending(self, topic: str, partition: int) -> int:
        """How many records of a partition are still in flight."""
        return len(self._in_flight.get((topic, partition), ()))

    def forget(self, partitions: Iterable[Partition]) -> None:
        """Drop revoked or lost partitions: their offsets must never be stored by this process."""
        for key in partitions:
            self._in_flight.pop(key, None)
            self._highest_started.pop(key, None)
            self._committable.pop(key, None)
            self._first.pop(key, None)


class OffsetStore(Protocol):
    """The part of ``confluent_kafka.Consumer`` used to store and commit offsets."""

    def store_offsets(self, message: Any = None, offsets: Any = None) -> None: ...
    def commit(self, message: Any = None, offsets: Any = None, asynchronous: bool = True) -> Any: ...


def store_offsets(consumer: OffsetStore, offsets: Mapping[Partition, int]) -> list[Partition]:
    """Store committable offsets for the next commit; returns the partitions that were stored.

    A partition revoked meanwhile is skipped, not an error: librdkafka refuses it (``_STATE``) and
    its next owner resumes from the last committed offset, which is the at-least-once promise.
    """
    stored = []
    for (topic, partition), offset in offsets.items():
        try:
            consumer.store_offsets(offsets=[TopicPartition(topic, partition, offset)])
        except KafkaException as error:
            if error.args[0].code() == KafkaError._STATE:
                continue
            raise BusError(f"could not store offset {offset} of {topic}[{partition}]: {error.args[0].str()}") from error
        stored.append((topic, partition))
    return stored


def commit_stored(consumer: OffsetStore) -> None:
    """Commit the stored offsets synchronously (nothing stored is not an error)."""
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as error:
        if error.args[0].code() == KafkaError._NO_OFFSET:
            return
        raise BusError(
            f"could not commit offsets: {error.args[0].str()}; the records will be processed again after a "
            "restart or rebalance (outcomes are idempotent)"
        ) from error
