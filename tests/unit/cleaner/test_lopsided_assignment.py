"""A cleaner that owns partitions of one of its topics and none of the other (Kafka's classic
protocol balances partition counts, not topics) says so: a gauge per topic, and one warning with
what to change once the assignment has stayed that way past a rebalance."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError

from acidclean.consumers.assignment import (
    LOPSIDED_WARN_AFTER_MS,
    Lopsided,
    lopsided,
    lopsided_advice,
    partitions_by_topic,
)
from acidclean.shared.bus.consumer import Assignment

from .fakes import TOPICS, FakeConsumer, Rig, loop_over, run_for

VACUUM, DELAY = TOPICS.vacuum_committed, TOPICS.cleanup_delay


@pytest.fixture
def rig() -> Rig:
    return Rig()


def test_partitions_are_counted_per_topic_with_the_topics_owned_none_of() -> None:
    owned = [(DELAY, 0), (DELAY, 3), ("someone.else", 1)]
    assert partitions_by_topic(owned, [VACUUM, DELAY]) == {VACUUM: 0, DELAY: 2}


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        ({"v": 0, "d": 8}, Lopsided("d", 8, "v")),
        ({"v": 3, "d": 0}, Lopsided("v", 3, "d")),
        ({"v": 4, "d": 4}, None),
        ({"v": 1, "d": 7}, None),
        ({"v": 0, "d": 1}, None),  # as many members as partitions: any assignor gives one of one topic
        ({"v": 0, "d": 0}, None),  # nothing owned (more members than partitions, or between rounds)
    ],
)
def test_an_assignment_is_lopsided_only_when_it_holds_two_or_more_of_one_topic_and_none_of_another(
    counts: dict[str, int], expected: Lopsided | None
) -> None:
    assert lopsided(counts) == expected


def test_the_advice_names_the_fix_for_the_assignment_in_use() -> None:
    found = Lopsided(DELAY, 8, VACUUM)
    classic = lopsided_advice(found, "cleaner.acme", Assignment.COOPERATIVE_STICKY, 61)
    assert "ACIDCLEAN_KAFKA_GROUP_PROTOCOL=consumer" in classic and "cooperative-sticky" in classic
    assert "ACIDCLEAN_KAFKA_PARTITION_ASSIGNMENT_STRATEGY=range on every process" in classic
    assert "cannot share a group" in classic
    assert f"8 partitions of {DELAY} and none of {VACUUM}" in classic and "cleaner.acme" in classic
    for co_partitioned in (Assignment.BROKER, Assignment.CLASSIC_RANGE):
        advice = lopsided_advice(found, "cleaner.acme", co_partitioned, 61)
        assert "same number of partitions" in advice and "ACIDCLEAN_KAFKA_" not in advice


def lopsided_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if "none of" in record.getMessage()]


def test_a_loop_left_with_every_delay_partition_and_no_vacuum_partition_warns_once_after_a_minute(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    consumer = FakeConsumer(rig.clock)
    loop = loop_over(rig, consumer, group_id="cleaner.acme")  # owns vacuum 0 and 1, delay 0
    consumer.rebalance_revoke([(VACUUM, 0), (VACUUM, 1)])
    consumer.rebalance_assign([(DELAY, 1), (DELAY, 2)])  # another process joined and took the vacuum topic
    gauge = rig.metrics.assigned_partitions
    assert gauge.labels(DELAY)._value.get() == 3 and gauge.labels(VACUUM)._value.get() == 0
    with caplog.at_level(logging.WARNING, logger="acidclean.cleaner"):
        run_for(loop, rig, LOPSIDED_WARN_AFTER_MS / 1000 - 5)
        assert lopsided_warnings(caplog) == []  # a rebalance's two rounds are lopsided for a moment
        run_for(loop, rig, 10)
        run_for(loop, rig, 60)
    [warning] = lopsided_warnings(caplog)
    assert warning.levelno == logging.WARNING
    assert f"3 partitions of {DELAY} and none of {VACUUM}" in warning.getMessage()
    assert "ACIDCLEAN_KAFKA_GROUP_PROTOCOL=consumer" in warning.getMessage()


def test_a_loop_whose_assignment_evens_out_before_the_minute_does_not_warn_and_warns_again_if_it_tips_again(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    consumer = FakeConsumer(rig.clock)
    loop = loop_over(rig, consumer)
    consumer.rebalance_revoke([(VACUUM, 0), (VACUUM, 1)])
    consumer.rebalance_assign([(DELAY, 1)])
    with caplog.at_level(logging.WARNING, logger="acidclean.cleaner"):
        run_for(loop, rig, 30)
        consumer.rebalance_assign([(VACUUM, 0)])  # the second round: both topics again
        run_for(loop, rig, LOPSIDED_WARN_AFTER_MS / 1000 + 10)
        assert lopsided_warnings(caplog) == []
        assert rig.metrics.assigned_partitions.labels(VACUUM)._value.get() == 1
        consumer.rebalance_lost([(VACUUM, 0)])
        consumer.rebalance_assign([])
        run_for(loop, rig, LOPSIDED_WARN_AFTER_MS / 1000 + 10)
    assert len(lopsided_warnings(caplog)) == 1


def test_a_join_refused_for_another_assignor_in_the_group_is_warned_with_what_to_do_once_a_minute(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    consumer = FakeConsumer(rig.clock)
    loop = loop_over(rig, consumer, group_id="cleaner.acme")
    refused = KafkaError(
        KafkaError.INCONSISTENT_GROUP_PROTOCOL, "JoinGroup failed: Broker: Inconsistent group protocol"
    )
    with caplog.at_level(logging.WARNING, logger="acidclean.cleaner"):
        for _ in range(40):  # librdkafka retries the join every few seconds
            consumer.errors.append(refused)
            loop.step()
            rig.clock.advance(3)
        consumer.errors.append(KafkaError(KafkaError._TRANSPORT, "broker down"))
        loop.step()
    warnings = [record.getMessage() for record in caplog.records]
    advice = [
        record for record in caplog.records if "ACIDCLEAN_KAFKA_PARTITION_ASSIGNMENT_STRATEGY" in record.getMessage()
    ]
    assert len(advice) == 2  # 40 refusals over 120 s
    groups = {record.acidclean_fields["group"] for record in advice}  # type: ignore[attr-defined]
    assert groups == {"cleaner.acme"}
    assert any("consumer error: broker down" in message for message in warnings)
