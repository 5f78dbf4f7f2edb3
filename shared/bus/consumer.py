"""Consumer-side helpers: at-least-once settings and offsets stored only after the outcome is acked.

A cleaner consumes with ``enable.auto.commit=false`` and ``enable.auto.offset.store=false``. Three ways
of assigning partitions are accepted (:class:`Assignment`):

- ``cooperative-sticky`` in Kafka's classic group protocol (the default): incremental rebalances, but it
  balances the count of partitions, not each topic's, so a process that joins a running one may get
  every delay partition while the other keeps every vacuum partition;
- ``range`` in the classic protocol: each process gets the same partition numbers of every topic
  (co-partitioning) on any broker, at the price of eager rebalances (every process gives up all its
  partitions whenever one joins or leaves, and reads them again from the committed offsets);
- ``group.protocol=consumer`` (Kafka 4.0 and later, KIP-848): the broker assigns incrementally, with
  its ``range`` assignor unless ``group.remote.assignor`` says otherwise: co-partitioned too.

Co-partitioning keeps a table's fresh vacuums and its waiting records, whose keys hash to the same
partition number, in one process. For each record it publishes an outcome (``CleanupDone``, a delay
envelope or a dead letter); only when the broker acknowledged that outcome may the record's offset
be stored and committed. Records may finish out of order (several threads), so
:class:`OffsetLedger` tracks, per partition, the offset below which every record is done: that is
the only offset that may be committed.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from acidclean.shared.bus.client_logs import with_client_logger
from acidclean.shared.bus.kafka_errors import configuration_error
from acidclean.shared.errors import BusError, ConfigurationError
from acidclean.shared.logs import log

REQUIRED_CONSUMER_SETTINGS = {
    "enable.auto.commit": "false",
    "enable.auto.offset.store": "false",
}
ASSIGNMENT_STRATEGY = "partition.assignment.strategy"
COOPERATIVE_STICKY = "cooperative-sticky"
CLASSIC_RANGE = "range"
# Kafka's consumer group protocol (KIP-848): the broker assigns, always incrementally.
CONSUMER_PROTOCOL = "consumer"
BROKER_ASSIGNOR_DEFAULT = ("group.remote.assignor", "range")

Partition = tuple[str, int]


class Assignment(enum.Enum):
    """How a consumer group assigns partitions (see the module's docstring)."""

    COOPERATIVE_STICKY = "classic protocol, cooperative-sticky"
    CLASSIC_RANGE = "classic protocol, range"
    BROKER = "consumer protocol"

    @property
    def incremental(self) -> bool:
        """Whether a rebalance moves only some partitions (else every member gives up all of them)."""
        return self is not Assignment.CLASSIC_RANGE


def _uses_consumer_protocol(kafka: Mapping[str, str]) -> bool:
    return str(kafka.get("group.protocol", "classic")).lower() == CONSUMER_PROTOCOL


def assignment_of(kafka: Mapping[str, str]) -> Assignment:
    """Which :class:`Assignment` these Kafka settings give (validated by :func:`consumer_config`)."""
    if _uses_consumer_protocol(kafka):
        return Assignment.BROKER
    if str(kafka.get(ASSIGNMENT_STRATEGY, COOPERATIVE_STICKY)).strip().lower() == CLASSIC_RANGE:
        return Assignment.CLASSIC_RANGE
    return Assignment.COOPERATIVE_STICKY


def consumer_config(kafka: Mapping[str, str], group_id: str) -> dict[str, str]:
    """Pass-through Kafka settings plus acidclean's at-least-once settings; conflicts are refused.

    ``auto.offset.reset`` defaults to ``earliest``: a new consumer group must not skip vacuums that
    were published before it first joined.
    """
    config = {str(key): str(value) for key, value in kafka.items()}
    for name, required in REQUIRED_CONSUMER_SETTINGS.items():
        _require(config, name, required, "which stores and commits an offset only after its outcome is acknowledged")
    if _uses_consumer_protocol(config):
        if ASSIGNMENT_STRATEGY in config:
            raise ConfigurationError(
                "Kafka setting partition.assignment.strategy belongs to the classic group protocol; with "
                "group.protocol=consumer the broker assigns partitions: remove it (group.remote.assignor "
                "names the broker's assignor, range by default here)"
            )
        config.setdefault(*BROKER_ASSIGNOR_DEFAULT)
    else:
        config[ASSIGNMENT_STRATEGY] = _classic_strategy(config.get(ASSIGNMENT_STRATEGY))
    config["group.id"] = group_id
    config.setdefault("auto.offset.reset", "earliest")
    return config


def _classic_strategy(given: str | None) -> str:
    """The classic protocol's assignor: ``cooperative-sticky`` unless ``range`` is given; others refused."""
    if given is None:
        return COOPERATIVE_STICKY
    strategy = given.strip().lower()
    if strategy in (COOPERATIVE_STICKY, CLASSIC_RANGE):
        return strategy
    raise ConfigurationError(
        f"Kafka setting partition.assignment.strategy={given} is not one acidclean takes: use cooperative-sticky "
        "(the default: incremental rebalances), range (eager rebalances; every process gets the same partition "
        "numbers of the vacuum and delay topics, on any broker), or group.protocol=consumer on Kafka 4.0+ "
        "(both); every process of a group needs the same choice"
    )


def take_assignment(consumer: Any, partitions: list[TopicPartition], assignment: Assignment) -> None:
    """Accept ``partitions`` in a rebalance callback the way ``assignment`` requires: added to what the
    consumer owns (incremental), or as all it owns (eager ``range``, after it gave up everything)."""
    if assignment.incremental:
        consumer.incremental_assign(partitions)
    else:
        consumer.assign(partitions)


def group_protocol_conflict(error: KafkaError) -> str | None:
    """What to do when the broker refused this process's join because the group's other processes
    assign another way, or None for any other error."""
    if error.code() != KafkaError.INCONSISTENT_GROUP_PROTOCOL:
        return None
    return (
        f"the broker refused to let this process join its consumer group ({error.str()}): the processes already "
        "in the group assign partitions another way. Every process of a group needs the same "
        "ACIDCLEAN_KAFKA_PARTITION_ASSIGNMENT_STRATEGY (cooperative-sticky and range cannot share a group): "
        "stop the others and restart them with this one's, or restart this one with theirs. It keeps trying to "
        "join meanwhile"
    )


class ConsumerErrors:
    """Logs the errors a consumer's poll returns (a partition's end is not one). A join the broker
    refuses because the group assigns another way is retried every few seconds: it is logged once a
    ``every_s``, with what to do."""

    def __init__(
        self,
        logger: logging.Logger,
        group_id: str,
        clock_s: Callable[[], float] = time.monotonic,
        every_s: float = 60.0,
    ) -> None:
        self._logger = logger
        self._group_id = group_id
        self._clock_s = clock_s
        self._every_s = every_s
        self._conflict_logged_at: float | None = None

    def report(self, error: KafkaError) -> None:
        if error.code() == KafkaError._PARTITION_EOF:
            return
        advice = group_protocol_conflict(error)
        if advice is None:
            log(self._logger, logging.WARNING, f"consumer error: {error.str()}", code=error.name())
            return
        now = self._clock_s()
        if self._conflict_logged_at is None or now - self._conflict_logged_at >= self._every_s:
            self._conflict_logged_at = now
            log(self._logger, logging.WARNING, advice, group=self._group_id, code=error.name())


def _require(config: dict[str, str], name: str, required: str, why: str) -> None:
    """Set ``name`` to ``required`` in ``config``; refuse another value the user gave, saying ``why``."""
    given = config.get(name)
    if given is not None and given.lower() != required:
        raise ConfigurationError(
            f"Kafka setting {name}={given} conflicts with acidclean, {why} (needs {name}={required}): remove it"
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
