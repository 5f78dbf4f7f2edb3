"""Read topics from the beginning to their current end, without a consumer group, then stop.

Used by ``acidclean audit``: partitions are assigned directly (nothing joins a group and no offset is
ever committed, so reading disturbs no cleaner), the end of each partition is its high watermark
when reading starts, and records written after that are left for the next run. librdkafka needs a
``group.id`` even for assigned partitions, so a throwaway one is set; no offset is committed under it,
but the client still looks up its coordinator, which a broker with ACLs allows only with Read on the
group: the throwaway id starts with the ``group.id`` of the Kafka settings (default
``acidclean-reader``), so one prefixed ACL covers every run.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping, Sequence

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from acidclean.shared.bus.client_logs import with_client_logger
from acidclean.shared.bus.kafka_errors import (
    AUTHORIZATION_CODES,
    UNREACHABLE_CODES,
    KafkaAccessDeniedError,
    configuration_error,
    principal,
    refused,
    unreachable,
)
from acidclean.shared.errors import BusError

Partition = tuple[str, int]

TRANSIENT_LEADER_ERRORS = frozenset(
    {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.UNKNOWN_TOPIC_OR_PART}
)


READER_GROUP_PREFIX = "acidclean-reader"
# ListOffsets' special timestamps: the first offset still stored, and the offset after the last record.
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1


def reader_config(kafka: Mapping[str, str]) -> dict[str, str]:
    """Pass-through settings plus what a read-only, group-less scan needs."""
    prefix = kafka.get("group.id") or READER_GROUP_PREFIX
    return {
        **{str(key): str(value) for key, value in kafka.items()},
        "group.id": f"{prefix}-{uuid.uuid4().hex}",
        "enable.auto.commit": "false",
        "enable.auto.offset.store": "false",
        "enable.partition.eof": "true",
        "auto.offset.reset": "earliest",
    }


class LogReader:
    """Iterates over every record of ``topics`` that existed when iteration started.

    ``missing_topics`` lists requested topics the cluster does not have (read as empty);
    ``end_offsets`` the high watermark of each partition read. ``since_ms`` (epoch ms) starts each
    partition at its first record stored at or after that time instead of its beginning. Iterate once.
    """

    def __init__(
        self,
        kafka: Mapping[str, str],
        topics: Sequence[str],
        *,
        batch_size: int = 1000,
        stall_timeout_s: float = 30.0,
        since_ms: int | None = None,
    ) -> None:
        self._config = reader_config(kafka)
        self._since_ms = since_ms  # read only records stored at or after this time (epoch ms)
        self._topics = list(topics)
        self._batch_size = batch_size
        self._stall_timeout_s = stall_timeout_s
        self.missing_topics: list[str] = []
        self.end_offsets: dict[Partition, int] = {}
        self.records_read = 0

    def __iter__(self) -> Iterator[Message]:
        for batch in self.batches():
            yield from batch

    def batches(self) -> Iterator[list[Message]]:
        """The records in the batches ``consume`` returned them in (at most ``batch_size`` each)."""
        try:
            consumer = Consumer(with_client_logger(self._config))
        except KafkaException as error:
            raise configuration_error(error, "reader") from error
        try:
            remaining = self._assign(consumer)
            yield from self._read(consumer, remaining)
        except KafkaException as error:
            if error.args[0].code() in UNREACHABLE_CODES:
                raise unreachable(self._config, f"reading {', '.join(self._topics)}", error.args[0].str()) from error
            raise BusError(
                f"reading {', '.join(self._topics)} failed: {error.args[0].str()}; check that "
                f"bootstrap.servers={self._config.get('bootstrap.servers', '')!r} is reachable"
            ) from error
        finally:
            consumer.close()

    def _assign(self, consumer: Consumer) -> set[Partition]:
        metadata = consumer.list_topics(timeout=self._stall_timeout_s)
        partitions: list[TopicPartition] = []
        for topic in self._topics:
            found = metadata.topics.get(topic)
            if found is None:  # the full listing leaves out topics this client may not describe: ask by name
                found = consumer.list_topics(topic=topic, timeout=self._stall_timeout_s).topics.get(topic)
            if found is not None and found.error is not None and found.error.code() in AUTHORIZATION_CODES:
                raise refused(self._config, found.error, topic=topic, doing="read", operations="Read")
            if found is None or found.error is not None:
                self.missing_topics.append(topic)
                continue
            partitions.extend(TopicPartition(topic, partition) for partition in sorted(found.partitions))
        bounds = self._all_watermarks(consumer, partitions)
        assignment = []
        for partition in partitions:
            low, high = bounds[(partition.topic, partition.partition)]
            self.end_offsets[(partition.topic, partition.partition)] = high
            if self._since_ms is not None and high > low:
                low = self._offset_at(
                    consumer, TopicPartition(partition.topic, partition.partition, self._since_ms), low, high
                )
            if high > low:
                assignment.append(TopicPartition(partition.topic, partition.partition, low))
        if assignment:
            consumer.assign(assignment)
        return {(tp.topic, tp.partition) for tp in assignment}

    def _all_watermarks(self, consumer: Consumer, partitions: list[TopicPartition]) -> dict[Partition, tuple[int, int]]:
        """Every partition's low and high watermarks, asked in two requests for all of them (a request
        per partition costs a broker round trip each: seconds for hundreds of partitions). ListOffsets
        with the protocol's timestamps -2 and -1 answers the earliest and the latest offset; a partition
        that gets no answer there (a leader being elected) is asked on its own."""
        bounds: dict[Partition, tuple[int, int]] = {}
        if not partitions:
            return bounds
        try:
            lows = consumer.offsets_for_times(
                [TopicPartition(p.topic, p.partition, EARLIEST_TIMESTAMP) for p in partitions],
                timeout=self._stall_timeout_s,
            )
            highs = consumer.offsets_for_times(
                [TopicPartition(p.topic, p.partition, LATEST_TIMESTAMP) for p in partitions],
                timeout=self._stall_timeout_s,
            )
        except KafkaException:
            lows = highs = []
        for low, high in zip(lows, highs, strict=True):
            if low.error is None and high.error is None and 0 <= low.offset <= high.offset:
                bounds[(low.topic, low.partition)] = (int(low.offset), int(high.offset))
        for partition in partitions:
            if (partition.topic, partition.partition) not in bounds:
                bounds[(partition.topic, partition.partition)] = self._watermarks(consumer, partition)
        return bounds

    def _offset_at(self, consumer: Consumer, at: TopicPartition, low: int, high: int) -> int:
        """The first offset stored at or after ``at.offset`` (a time), or ``high`` when none is."""
        [found] = consumer.offsets_for_times([at], timeout=self._stall_timeout_s)
        offset = int(found.offset)
        return high if offset < 0 else max(low, offset)

    def _watermarks(self, consumer: Consumer, partition: TopicPartition) -> tuple[int, int]:
        """The partition's low and high watermarks, waiting out a leader election.

        A topic created a moment ago has no leader yet for a short while; the broker then answers
        NOT_LEADER_FOR_PARTITION or LEADER_NOT_AVAILABLE, which pass.
        """
        deadline = time.monotonic() + self._stall_timeout_s
        while True:
            try:
                low, high = consumer.get_watermark_offsets(partition, timeout=self._stall_timeout_s, cached=False)
                return int(low), int(high)
            except KafkaException as error:
                code = error.args[0].code()
                if code not in TRANSIENT_LEADER_ERRORS or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def _read(self, consumer: Consumer, remaining: set[Partition]) -> Iterator[list[Message]]:
        last_progress = time.monotonic()
        ends = self.end_offsets
        while remaining:
            messages = consumer.consume(self._batch_size, timeout=0.5)
            if messages:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > self._stall_timeout_s:
                waiting = ", ".join(f"{topic}[{partition}]" for topic, partition in sorted(remaining))
                raise BusError(
                    f"no records for {self._stall_timeout_s:g} s before the end of {waiting}; "
                    "check the brokers and this client's read permissions"
                )
            batch: list[Message] = []
            for message in messages:
                key = (message.topic() or "", message.partition() or 0)
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        self._finish(consumer, remaining, key)
                        continue
                    if error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                        raise self._group_refused() from KafkaException(error)
                    if error.code() in AUTHORIZATION_CODES:
                        raise refused(self._config, error, topic=key[0], doing="read", operations="Read")
                    raise KafkaException(error)
                offset = message.offset() or 0
                end = ends.get(key, 0)
                if key not in remaining or offset >= end:
                    self._finish(consumer, remaining, key)
                    continue
                batch.append(message)
                if offset >= end - 1:
                    self._finish(consumer, remaining, key)
            self.records_read += len(batch)
            if batch:
                yield batch

    def _group_refused(self) -> KafkaAccessDeniedError:
        prefix = self._config["group.id"].rsplit("-", 1)[0]
        who = principal(self._config)
        return KafkaAccessDeniedError(
            f"the principal {who} may not use consumer groups {prefix}-*, which reading the topics needs (nothing "
            f"is committed under them): grant Read on that prefix (kafka-acls --bootstrap-server "
            f"{self._config.get('bootstrap.servers', '')} --add --allow-principal "
            f"{who if who.startswith('User:') else 'User:NAME'} --operation Read --resource-pattern-type prefixed "
            f"--group {prefix}-), or set kafka.group.id to a group prefix it may use"
        )

    @staticmethod
    def _finish(consumer: Consumer, remaining: set[Partition], key: Partition) -> None:
        if key in remaining:
            remaining.discard(key)
            consumer.pause([TopicPartition(key[0], key[1])])
