"""The Kafka adapter keeps its delivery promises: acked means stored, and offsets trail outcomes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from acidclean.shared.bus.consumer import (
    Assignment,
    OffsetLedger,
    assignment_of,
    commit_stored,
    consumer_config,
    group_protocol_conflict,
    store_offsets,
    take_assignment,
)
from acidclean.shared.bus.memory import InMemoryBus
from acidclean.shared.bus.producer import KafkaEventBus, producer_config
from acidclean.shared.bus.reader import reader_config
from acidclean.shared.bus.topics import topic_specs
from acidclean.shared.errors import BusError, ConfigurationError
from acidclean.shared.settings import load_settings

from .factories import delay, done, vacuum

KAFKA = {"bootstrap.servers": "broker:9092", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}


class _Message:
    def __init__(self, topic: str, partition: int, offset: int) -> None:
        self._where = (topic, partition, offset)

    def topic(self) -> str:
        return self._where[0]

    def partition(self) -> int:
        return self._where[1]

    def offset(self) -> int:
        return self._where[2]


class FakeProducer:
    """Answers each produce with the next scripted outcome (None = acknowledged) at flush time."""

    def __init__(self, outcomes: list[KafkaError | str | None]) -> None:
        self.outcomes = outcomes
        self.produced: list[tuple[str, bytes | None, bytes | None, Any]] = []
        self._reports: list[Callable[[], None]] = []

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        *,
        on_delivery: Any = None,
        headers: Any = None,
    ) -> None:
        self.produced.append((topic, key, value, headers))
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if isinstance(outcome, str) and outcome == "buffer-full":
            raise BufferError("queue full")
        if isinstance(outcome, str):  # "no-report": the broker never answers this one
            return
        offset = len(self.produced)
        self._reports.append(lambda: on_delivery(outcome, _Message(topic, 3, offset)))

    def poll(self, timeout: float) -> int:
        return self.flush(timeout)

    def __len__(self) -> int:  # events waiting for a report (a "no-report" one is never counted)
        return len(self._reports)

    def flush(self, timeout: float) -> int:
        reports, self._reports = self._reports, []
        for report in reports:
            report()
        return 0


def _bus(producer: FakeProducer, total_timeout_s: float = 5.0) -> KafkaEventBus:
    return KafkaEventBus(KAFKA, producer_factory=lambda config: producer, total_timeout_s=total_timeout_s)


def test_producer_settings_pass_through_with_idempotence_and_acks_all() -> None:
    config = producer_config(KAFKA, delivery_timeout_s=30)
    assert {key: config[key] for key in KAFKA} == KAFKA
    assert config["enable.idempotence"] == "true" and config["acks"] == "all"
    assert config["message.timeout.ms"] == "30000"
    given = producer_config({**KAFKA, "message.timeout.ms": "5000"}, delivery_timeout_s=30)
    assert given["message.timeout.ms"] == "5000"


@pytest.mark.parametrize(
    ("given", "expected"),
    [({}, {"compression.type": "lz4"}), ({"compression.type": "zstd"}, {"compression.type": "zstd"})],
)
def test_producer_compresses_with_lz4_unless_told_otherwise(given: dict[str, str], expected: dict[str, str]) -> None:
    config = producer_config({**KAFKA, **given}, delivery_timeout_s=30)
    assert {key: config.get(key) for key in expected} == expected
    codec = producer_config({**KAFKA, "compression.codec": "none"}, delivery_timeout_s=30)
    assert codec["compression.codec"] == "none" and "compression.type" not in codec  # its alias, kept as given


@pytest.mark.parametrize("setting", [{"acks": "1"}, {"enable.idempotence": "false"}])
def test_producer_settings_that_weaken_delivery_are_refused(setting: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError, match="remove it from the kafka settings"):
        producer_config({**KAFKA, **setting}, delivery_timeout_s=30)


def test_publish_returns_where_the_broker_stored_the_event() -> None:
    producer = FakeProducer([None])
    event = vacuum()
    delivery = _bus(producer).publish("acid.vacuum.committed", event)
    assert (delivery.topic, delivery.partition, delivery.offset, delivery.event_id) == (
        "acid.vacuum.committed",
        3,
        1,
        event.event_id,
    )
    _, key, _, headers = producer.produced[0]
    assert key == event.key.encode() and ("ce_id", str(event.event_id).encode()) in headers


def test_retriable_errors_are_retried_until_acknowledged() -> None:
    producer = FakeProducer(
        [KafkaError(KafkaError._MSG_TIMED_OUT), "no-report", KafkaError(KafkaError.NOT_ENOUGH_REPLICAS), None]
    )
    deliveries = _bus(producer).publish_many([("t", vacuum())])
    assert len(producer.produced) == 4 and len(deliveries) == 1


def test_a_send_returns_once_its_own_events_are_acknowledged_while_another_is_still_in_flight() -> None:
    """Another thread's event is still waiting for its report (``flush`` would report it outstanding):
    this send waits only for its own events, so it returns acknowledged instead of retrying until the
    other one is in."""

    class BusyProducer(FakeProducer):
        def __len__(self) -> int:
            return super().__len__() + 1  # the other thread's event, not reported yet

        def flush(self, timeout: float) -> int:
            super().flush(timeout)
            return len(self)

    producer = BusyProducer([None, None])
    events = [vacuum(), vacuum()]
    deliveries = _bus(producer, total_timeout_s=1.0).publish_many([("t", event) for event in events])
    assert [d.event_id for d in deliveries] == [e.event_id for e in events] and len(producer.produced) == 2


def test_only_the_unacknowledged_events_are_sent_again() -> None:
    producer = FakeProducer([None, KafkaError(KafkaError._TRANSPORT), None, None])
    events = [vacuum(), vacuum(), vacuum()]
    deliveries = _bus(producer).publish_many([("t", event) for event in events])
    assert [d.event_id for d in deliveries] == [e.event_id for e in events]
    sent_ids = [dict(headers)["ce_id"] for _, _, _, headers in producer.produced]
    assert sent_ids.count(str(events[1].event_id).encode()) == 2 and len(sent_ids) == 4


def test_full_local_queue_waits_for_room_instead_of_failing() -> None:
    producer = FakeProducer(["buffer-full", None])
    assert _bus(producer).publish("t", vacuum()).offset == 2


def test_non_retriable_error_raises_an_actionable_bus_error_at_once() -> None:
    producer = FakeProducer([KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), None])
    with pytest.raises(BusError, match=r"do not commit the input offset.*topic exists"):
        _bus(producer).publish("acid.vacuum.committed", vacuum())
    assert len(producer.produced) == 1


def test_fatal_error_says_to_restart() -> None:
    fatal = KafkaError(KafkaError._FENCED, "fenced", fatal=True)
    with pytest.raises(BusError, match="fatal state: restart"):
        _bus(FakeProducer([fatal])).publish("t", vacuum())


def test_retries_stop_after_the_total_timeout_with_a_bus_error() -> None:
    producer = FakeProducer([KafkaError(KafkaError._MSG_TIMED_OUT)] * 1000)
    with pytest.raises(BusError, match=r"did not acknowledge 1 event\(s\) for t within 0.3 s.*Message timed out"):
        _bus(producer, total_timeout_s=0.3).publish("t", vacuum())
    assert 2 <= len(producer.produced) < 1000


def test_consumer_settings_store_offsets_by_hand_and_assign_cooperatively() -> None:
    config = consumer_config(KAFKA, "cleaner")
    assert {key: config[key] for key in KAFKA} == KAFKA
    assert config["enable.auto.commit"] == "false" and config["enable.auto.offset.store"] == "false"
    assert config["partition.assignment.strategy"] == "cooperative-sticky" and config["group.id"] == "cleaner"
    assert config["auto.offset.reset"] == "earliest"
    assert consumer_config({**KAFKA, "auto.offset.reset": "latest"}, "g")["auto.offset.reset"] == "latest"


@pytest.mark.parametrize("setting", [{"enable.auto.commit": "true"}, {"enable.auto.offset.store": "true"}])
def test_consumer_settings_that_break_at_least_once_are_refused(setting: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError, match="only after its outcome is acknowledged"):
        consumer_config({**KAFKA, **setting}, "g")
    with pytest.raises(ConfigurationError, match="only after its outcome is acknowledged"):
        consumer_config({**KAFKA, **setting, "group.protocol": "consumer"}, "g")


@pytest.mark.parametrize("strategy", ["roundrobin", "sticky", "range,cooperative-sticky", ""])
def test_a_classic_assignment_strategy_other_than_the_two_is_refused_with_what_to_use_instead(strategy: str) -> None:
    with pytest.raises(ConfigurationError, match=r"use cooperative-sticky .* range .* or group\.protocol=consumer"):
        consumer_config({**KAFKA, "partition.assignment.strategy": strategy}, "g")


def test_the_classic_range_assignor_is_taken_and_rebalances_eagerly() -> None:
    config = consumer_config({**KAFKA, "partition.assignment.strategy": " Range "}, "g")
    assert config["partition.assignment.strategy"] == "range"
    assert assignment_of(config) is Assignment.CLASSIC_RANGE and not Assignment.CLASSIC_RANGE.incremental
    assert assignment_of(consumer_config(KAFKA, "g")) is Assignment.COOPERATIVE_STICKY
    assert assignment_of(consumer_config({**KAFKA, "group.protocol": "consumer"}, "g")) is Assignment.BROKER
    assert Assignment.COOPERATIVE_STICKY.incremental and Assignment.BROKER.incremental
    local = {"bootstrap.servers": "127.0.0.1:1", "partition.assignment.strategy": "range"}
    Consumer(consumer_config(local, "g")).close()  # the linked librdkafka takes it


class RecordingConsumer:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[TopicPartition]]] = []

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.calls.append(("assign", partitions))

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self.calls.append(("incremental_assign", partitions))


@pytest.mark.parametrize(
    ("assignment", "call"),
    [
        (Assignment.COOPERATIVE_STICKY, "incremental_assign"),
        (Assignment.BROKER, "incremental_assign"),
        (Assignment.CLASSIC_RANGE, "assign"),
    ],
)
def test_an_assignment_is_taken_the_way_its_protocol_requires(assignment: Assignment, call: str) -> None:
    consumer, partitions = RecordingConsumer(), [TopicPartition("t", 3)]
    take_assignment(consumer, partitions, assignment)
    assert consumer.calls == [(call, partitions)]


def test_a_join_refused_for_another_assignor_in_the_group_says_what_to_do() -> None:
    advice = group_protocol_conflict(KafkaError(KafkaError.INCONSISTENT_GROUP_PROTOCOL, "JoinGroup failed"))
    assert advice is not None and "ACIDCLEAN_KAFKA_PARTITION_ASSIGNMENT_STRATEGY" in advice
    assert "JoinGroup failed" in advice
    assert group_protocol_conflict(KafkaError(KafkaError._TRANSPORT, "down")) is None


def test_with_kafkas_consumer_group_protocol_the_broker_assigns_co_partitioned_ranges_by_default() -> None:
    config = consumer_config({**KAFKA, "group.protocol": "CONSUMER"}, "cleaner")
    assert "partition.assignment.strategy" not in config
    assert config["group.remote.assignor"] == "range"
    assert config["enable.auto.commit"] == "false" and config["enable.auto.offset.store"] == "false"
    mine = consumer_config({**KAFKA, "group.protocol": "consumer", "group.remote.assignor": "uniform"}, "g")
    assert mine["group.remote.assignor"] == "uniform"
    local = consumer_config({"bootstrap.servers": "127.0.0.1:1", "group.protocol": "consumer"}, "g")
    Consumer(local).close()  # the linked librdkafka takes the protocol and the assignor


def test_a_classic_assignment_strategy_under_the_consumer_protocol_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="the broker assigns partitions: remove it"):
        consumer_config(
            {**KAFKA, "group.protocol": "consumer", "partition.assignment.strategy": "cooperative-sticky"}, "g"
        )


def test_reader_settings_never_commit_and_report_the_end_of_partitions() -> None:
    config = reader_config(KAFKA)
    assert config["enable.auto.commit"] == "false" and config["enable.partition.eof"] == "true"
    assert config["group.id"] != reader_config(KAFKA)["group.id"]


def test_ledger_commits_only_past_records_whose_outcome_is_acknowledged() -> None:
    ledger = OffsetLedger()
    for offset in (10, 11, 12):
        ledger.start("t", 0, offset)
    assert ledger.finish("t", 0, 11) is None  # 10 is still in flight
    assert ledger.committable() == {}
    assert ledger.finish("t", 0, 10) == 12  # 10 and 11 done: next to read is 12
    assert ledger.finish("t", 0, 12) == 13
    assert ledger.committable() == {("t", 0): 13} and ledger.pending("t", 0) == 0


def test_ledger_forgets_revoked_partitions_so_their_offsets_are_never_stored() -> None:
    ledger = OffsetLedger()
    ledger.start("t", 1, 5)
    ledger.start("t", 2, 7)
    ledger.forget([("t", 1)])
    assert ledger.finish("t", 1, 5) is None
    assert ledger.finish("t", 2, 7) == 8
    assert ledger.committable() == {("t", 2): 8}


class FakeConsumer:
    def __init__(self, store_error: int | None = None, commit_error: int | None = None) -> None:
        self.stored: list[Any] = []
        self.commits = 0
        self.store_error, self.commit_error = store_error, commit_error

    def store_offsets(self, message: Any = None, offsets: Any = None) -> None:
        if self.store_error is not None and offsets[0].partition == 1:
            raise KafkaException(KafkaError(self.store_error))
        self.stored.extend((tp.topic, tp.partition, tp.offset) for tp in offsets)

    def commit(self, message: Any = None, offsets: Any = None, asynchronous: bool = True) -> None:
        assert asynchronous is False
        self.commits += 1
        if self.commit_error is not None:
            raise KafkaException(KafkaError(self.commit_error))


def test_storing_an_offset_of_a_revoked_partition_is_skipped() -> None:
    consumer = FakeConsumer(store_error=KafkaError._STATE)
    assert store_offsets(consumer, {("t", 0): 4, ("t", 1): 9}) == [("t", 0)]
    assert consumer.stored == [("t", 0, 4)]


def test_other_store_errors_raise() -> None:
    with pytest.raises(BusError, match="could not store offset 9 of t\\[1\\]"):
        store_offsets(FakeConsumer(store_error=KafkaError._INVALID_ARG), {("t", 1): 9})


def test_commit_with_nothing_stored_is_fine_and_other_commit_errors_raise() -> None:
    commit_stored(FakeConsumer(commit_error=KafkaError._NO_OFFSET))
    with pytest.raises(BusError, match="processed again"):
        commit_stored(FakeConsumer(commit_error=KafkaError.REBALANCE_IN_PROGRESS))


def test_topics_take_the_prefix_partitions_and_replication_and_audit_topics_keep_forever() -> None:
    settings = load_settings(
        environ={}, overrides={"topic_prefix": "acme.", "topic_partitions": 3, "topic_replication_factor": 2}
    )
    specs = {spec.name: spec for spec in topic_specs(settings)}
    assert set(specs) == {
        "acme.acid.vacuum.committed",
        "acme.acid.cleanup.delay",
        "acme.acid.cleanup.done",
        "acme.acid.cleanup.dead-letter",
        "acme.acid.delta.committed",
        "acme.acid.vacuum.requests",
        "acme.acid.cleanup.ledger",
    }
    assert {(s.partitions, s.replication_factor) for s in specs.values()} == {(3, 2)}
    assert specs["acme.acid.cleanup.done"].config == {"retention.ms": "-1"}
    assert specs["acme.acid.cleanup.delay"].config == {}
    assert specs["acme.acid.vacuum.requests"].config == {"retention.ms": "-1"}
    assert specs["acme.acid.cleanup.ledger"].config == {"retention.ms": str(30 * 24 * 3600 * 1000)}
    assert [s.name for s in topic_specs(settings, ["dead_letter"])] == ["acme.acid.cleanup.dead-letter"]


def test_in_memory_bus_keeps_per_key_order_on_one_partition_and_can_fail() -> None:
    bus = InMemoryBus()
    v = vacuum()
    first, second = bus.publish("d", delay(v)), bus.publish("d", done(v))
    assert first.partition == second.partition and second.offset == first.offset + 1
    assert [type(e).__name__ for e in bus.events("d")] == ["DelayEnvelope", "CleanupDone"]
    bus.fail_next()
    with pytest.raises(BusError):
        bus.publish("d", v)
    assert len(bus.records["d"]) == 2


def test_a_missing_topic_is_reported_at_once_not_retried() -> None:
    producer = FakeProducer([KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART), None])
    with pytest.raises(BusError, match="Check that the topic exists"):
        _bus(producer).publish("nope", vacuum())
    assert len(producer.produced) == 1
