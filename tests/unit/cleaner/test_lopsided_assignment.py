"""A cleaner that owns partitions of one of its topics and none of the other (Kafka's classic
protocol balances partition counts, not topics) says so: a gauge per topic, and one warning with
what to change once the assignment has stayed that way past a rebalance."""

from __future__ import annotations

import logging

import pytest

from acidclean.consumers.assignment import Lopsided, lopsided, lopsided_advice, partitions_by_topic
from acidclean.consumers.loop import LOPSIDED_WARN_AFTER_MS

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


def test_the_advice_names_the_fix_for_the_protocol_in_use() -> None:
    found = Lopsided(DELAY, 8, VACUUM)
    classic = lopsided_advice(found, "cleaner.acme", "classic", 61)
    assert "ACIDCLEAN_KAFKA_GROUP_PROTOCOL=consumer" in classic and "cooperative-sticky" in classic
    assert "restarting the group's processes together may even it out, not reliably" in classic
    assert f"8 partitions of {DELAY} and none of {VACUUM}" in classic and "cleaner.acme" in classic
    consumer = lopsided_advice(found, "cleaner.acme", "CONSUMER", 61)
    assert "same number of partitions" in consumer and "ACIDCLEAN_KAFKA_GROUP_PROTOCOL" not in consumer


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
