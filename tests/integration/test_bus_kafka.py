"""Events survive a real Kafka broker: keys, headers and bodies; offsets trail acknowledged outcomes."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from acidclean.schemas.common import LockSnapshotEntry
from acidclean.schemas.events import (
    TOPIC_FIELD,
    CleanupDone,
    CleanupRejected,
    DelayEnvelope,
    DeltaCommitted,
    RemovedDirectory,
    VacuumCommitted,
)
from acidclean.shared.bus.codec import decode, encode
from acidclean.shared.bus.consumer import OffsetLedger, commit_stored, make_consumer, store_offsets
from acidclean.shared.bus.producer import KafkaEventBus
from acidclean.shared.bus.reader import LogReader
from acidclean.shared.bus.records import RawRecord, raw_record
from acidclean.shared.bus.topics import ensure_topics
from acidclean.shared.errors import BusError
from acidclean.shared.settings import Settings, load_settings

pytestmark = pytest.mark.integration
T0 = datetime(2025, 3, 14, 9, 0, tzinfo=timezone.utc)


def make_settings(kafka_bootstrap: str, prefix: str, **overrides: Any) -> Settings:
    return load_settings(
        environ={}, overrides={"kafka.bootstrap.servers": kafka_bootstrap, "topic_prefix": prefix, **overrides}
    )


def every_event_type() -> list[Any]:
    lock = LockSnapshotEntry(
        lock_id=3,
        txn_id=8,
        lock_type="SHARED_READ",
        state="ACQUIRED",
        user="alice",
        host="reader-1",
        acquired_at=T0 - timedelta(seconds=30),
    )
    vacuum = VacuumCommitted(
        tenant="acme",
        table="sales.orders",
        partition="ds=2025-03-14/region=eu",
        occurred_at=T0,
        location="/warehouse/sales.db/orders/ds=2025-03-14/region=eu",
        compaction_type="MINOR",
        new_directories=["delta_0000001_0000003"],
        highest_write_id=3,
        lock_snapshot=[lock],
        vacuum_job_id="job-9",
    )
    envelope = DelayEnvelope(
        tenant="acme",
        table="sales.orders",
        partition=vacuum.partition,
        occurred_at=T0 + timedelta(seconds=1),
        causation_id=vacuum.event_id,
        correlation_id=vacuum.event_id,
        vacuum=vacuum,
        attempt=1,
        due_at=T0 + timedelta(seconds=3, microseconds=250),
        locks_held=[lock],
    )
    done = CleanupDone(
        tenant="acme",
        table="sales.orders",
        partition=vacuum.partition,
        occurred_at=T0 + timedelta(seconds=4),
        causation_id=envelope.event_id,
        correlation_id=vacuum.event_id,
        directories_removed=[RemovedDirectory(name="delta_0000001_0000001_0000", file_count=1, bytes=10)],
        time_waited_ms=4000,
        attempts=2,
        cleaner_id="cleaner-it",
    )
    delta = DeltaCommitted(
        tenant="acme",
        table="sales.orders",
        occurred_at=T0,
        location="/warehouse/sales.db/orders",
        delta_directory="delta_0000004_0000004_0000",
        write_id=4,
        bytes=99,
    )
    garbage = encode(vacuum)
    rejection = decode(
        raw_record_of("x", garbage.key, b"{oops", garbage.headers),
        rejected_by="it",
        tenant="acme",
        now=lambda: T0,
    )
    assert isinstance(rejection, CleanupRejected)
    return [vacuum, envelope, done, rejection, delta]


def raw_record_of(topic: str, key: bytes, value: bytes, headers: Any) -> RawRecord:
    return RawRecord(topic, 0, 0, key, value, tuple(headers))


def read_all(settings: Settings, topics: list[str]) -> list[Any]:
    return list(LogReader(settings.kafka, topics))


def test_topics_are_created_once_with_the_configured_partitions(kafka_bootstrap: str, unique_name: str) -> None:
    settings = make_settings(kafka_bootstrap, f"{unique_name}.", topic_partitions=3)
    first = ensure_topics(settings)
    second = ensure_topics(settings)
    names = {
        settings.topic(field)
        for field in (
            "vacuum_committed",
            "cleanup_delay",
            "cleanup_done",
            "dead_letter",
            "delta_committed",
            "vacuum_requests",
            "cleanup_ledger",
        )
    }
    assert set(first.created) == names and first.existing == []
    assert second.created == [] and set(second.existing) == names
    metadata = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10)
    assert {len(metadata.topics[name].partitions) for name in names} == {3}


def test_every_event_type_round_trips_through_the_broker(kafka_bootstrap: str, unique_name: str) -> None:
    settings = make_settings(kafka_bootstrap, f"{unique_name}.")
    ensure_topics(settings)
    events = every_event_type()
    with KafkaEventBus(settings.kafka, source="/acidclean/it") as bus:
        deliveries = bus.publish_many([(settings.topic(TOPIC_FIELD[type(e)]), e) for e in events])
    assert [d.event_id for d in deliveries] == [e.event_id for e in events]
    messages = read_all(settings, [settings.topic(TOPIC_FIELD[type(e)]) for e in events])
    by_id = {}
    for message in messages:
        record = raw_record(message)
        event = decode(record, rejected_by="it", tenant="acme")
        by_id[event.event_id] = (record, event)
    assert len(messages) == len(events)
    for event, delivery in zip(events, deliveries, strict=True):
        record, read_back = by_id[event.event_id]
        assert read_back == event and type(read_back) is type(event)
        sent = encode(event, source="/acidclean/it")
        assert record.key == sent.key
        assert record.value == sent.value
        assert list(record.headers) == list(sent.headers)
        assert (record.topic, record.partition, record.offset) == (delivery.topic, delivery.partition, delivery.offset)


def test_one_tables_events_share_a_partition(kafka_bootstrap: str, unique_name: str) -> None:
    settings = make_settings(kafka_bootstrap, f"{unique_name}.")
    ensure_topics(settings, ["cleanup_done"])
    done = every_event_type()[2]
    events = [done.model_copy(update={"event_id": uuid.uuid4()}) for _ in range(20)]
    with KafkaEventBus(settings.kafka) as bus:
        deliveries = bus.publish_many([(settings.topic("cleanup_done"), e) for e in events])
    assert len({d.partition for d in deliveries}) == 1
    offsets = [d.offset for d in deliveries]
    assert offsets == sorted(offsets)


def test_garbage_on_a_topic_becomes_a_dead_letter_that_survives_the_broker(
    kafka_bootstrap: str, unique_name: str
) -> None:
    settings = make_settings(kafka_bootstrap, f"{unique_name}.")
    ensure_topics(settings, ["vacuum_committed", "dead_letter"])
    topic = settings.topic("vacuum_committed")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for value in (b"\x00\xff", b"{}", b'{"schema_version": 9}', None):
        producer.produce(topic, key=b"acme/x.y", value=value, headers=[("ce_type", b"acidclean.vacuum.committed")])
    producer.flush(10)
    rejections = [
        decode(raw_record(m), rejected_by="it", tenant="acme", expected=(VacuumCommitted,))
        for m in read_all(settings, [topic])
    ]
    assert all(isinstance(r, CleanupRejected) for r in rejections) and len(rejections) == 4
    with KafkaEventBus(settings.kafka) as bus:
        bus.publish_many([(settings.topic("dead_letter"), r) for r in rejections])
    dead = [
        decode(raw_record(m), rejected_by="it", tenant="acme")
        for m in read_all(settings, [settings.topic("dead_letter")])
    ]
    assert sorted(dead, key=lambda e: e.source.offset) == sorted(rejections, key=lambda e: e.source.offset)


def _consume(consumer: Consumer, count: int, timeout_s: float = 30.0) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        got.extend(m for m in consumer.consume(count - len(got), timeout=0.5) if m.error() is None)
    return got


def test_offsets_are_committed_only_after_the_outcome_is_acknowledged(kafka_bootstrap: str, unique_name: str) -> None:
    settings = make_settings(kafka_bootstrap, f"{unique_name}.", topic_partitions=1)
    ensure_topics(settings, ["vacuum_committed", "cleanup_done"])
    source, outcome_topic = settings.topic("vacuum_committed"), settings.topic("cleanup_done")
    vacuums = [every_event_type()[0].model_copy(update={"event_id": uuid.uuid4()}) for _ in range(6)]
    vacuums = [v.model_copy(update={"correlation_id": v.event_id}) for v in vacuums]
    with KafkaEventBus(settings.kafka) as bus:
        bus.publish_many([(source, v) for v in vacuums])
        group = f"{unique_name}-cleaner"

        # First consumer: acknowledges outcomes for the first three records only, then "crashes".
        consumer = make_consumer(settings.kafka, group)
        consumer.subscribe([source])
        ledger = OffsetLedger()
        messages = _consume(consumer, 6)
        assert len(messages) == 6
        for message in messages:
            ledger.start(message.topic(), message.partition(), message.offset())
        for message in messages[:3]:
            vacuum = decode(raw_record(message), rejected_by="it", tenant="acme")
            bus.publish(
                outcome_topic,
                CleanupDone(
                    tenant=vacuum.tenant,
                    table=vacuum.table,
                    partition=vacuum.partition,
                    occurred_at=T0,
                    causation_id=vacuum.event_id,
                    correlation_id=vacuum.event_id,
                    directories_removed=[],
                    time_waited_ms=0,
                    attempts=1,
                    cleaner_id="it",
                ),
            )
            ledger.finish(message.topic(), message.partition(), message.offset())
        assert store_offsets(consumer, ledger.committable()) == [(source, 0)]
        commit_stored(consumer)
        consumer.close()

    # Second consumer of the same group resumes after the acknowledged records, not after all six.
    consumer = make_consumer(settings.kafka, group)
    consumer.subscribe([source])
    try:
        again = _consume(consumer, 3)
        assert [m.offset() for m in again] == [messages[3].offset(), messages[4].offset(), messages[5].offset()]
        assert _consume(consumer, 1, timeout_s=3) == []
    finally:
        consumer.close()


def test_publishing_to_a_missing_topic_fails_with_an_actionable_error(kafka_bootstrap: str, unique_name: str) -> None:
    settings = make_settings(kafka_bootstrap, f"{unique_name}.", **{"kafka.topic.metadata.propagation.max.ms": "1000"})
    started = time.monotonic()
    with pytest.raises(BusError, match=r"Unknown topic.*Check that the topic exists"):
        KafkaEventBus(settings.kafka, delivery_timeout_s=3, total_timeout_s=8).publish(
            settings.topic("vacuum_committed"), every_event_type()[0]
        )
    assert time.monotonic() - started < 30


def test_an_unreachable_broker_fails_within_the_total_timeout() -> None:
    bus = KafkaEventBus({"bootstrap.servers": "127.0.0.1:9"}, delivery_timeout_s=1, total_timeout_s=3)
    started = time.monotonic()
    with pytest.raises(BusError, match=r"did not acknowledge 1 event\(s\).*bootstrap.servers='127.0.0.1:9'"):
        bus.publish("t", every_event_type()[0])
    assert time.monotonic() - started < 15


def test_the_reader_reads_each_partition_from_its_first_stored_record_to_the_end_it_had_when_it_started(
    kafka_bootstrap: str, unique_name: str
) -> None:
    """Every partition's bounds are asked in one request for all of them (ListOffsets' earliest and
    latest): a partition whose first records were deleted starts after them, an empty one is skipped,
    and records written after the reader started are left for the next run."""
    topic = f"{unique_name}.many"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 12, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for partition in range(11):  # partition 11 stays empty
        for index in range(partition + 3):
            producer.produce(topic, value=f"{partition}:{index}".encode(), partition=partition)
    assert producer.flush(30) == 0
    # The first two records of partitions 0-4 deleted: their low watermark is 2.
    deleted = admin.delete_records([TopicPartition(topic, partition, 2) for partition in range(5)])
    for future in deleted.values():
        future.result(30)
    reader = LogReader({"bootstrap.servers": kafka_bootstrap}, [topic])
    batches = reader.batches()
    first = next(batches)
    for partition in range(11):  # written after the reader started: not read
        producer.produce(topic, value=b"late", partition=partition)
    assert producer.flush(30) == 0
    values = sorted(message.value().decode() for batch in [first, *batches] for message in batch)
    expected = sorted(
        f"{partition}:{index}" for partition in range(11) for index in range(2 if partition < 5 else 0, partition + 3)
    )
    assert values == expected
    assert reader.end_offsets == {
        (topic, partition): (partition + 3 if partition < 11 else 0) for partition in range(12)
    }
