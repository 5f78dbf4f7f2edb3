"""Two cleaners' consumers in one group on a real broker, with Kafka's consumer group protocol
(``group.protocol=consumer``, the broker's range assignor) or the classic protocol's eager ``range``
assignor: each gets the same partition numbers of the vacuum and delay topics, so a table's fresh
vacuums and its waiting records (whose keys hash to the same partition number) stay in one process,
also when the second joins a group the first runs alone. A process whose assignor differs from the
group's is refused by the broker, and told what to do."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from acidclean.consumers.cleaner_process import cleaner_consumer_config
from acidclean.shared.bus.consumer import Assignment, assignment_of, group_protocol_conflict, take_assignment
from acidclean.shared.bus.topics import ensure_topics
from acidclean.shared.settings import load_settings

pytestmark = pytest.mark.integration

TOPICS = ("vacuum_committed", "cleanup_delay")


class Member:
    """A consumer of both topics that keeps its assignment as the rebalance callbacks give it."""

    def __init__(self, config: dict[str, str], topics: list[str]) -> None:
        self.owned: set[tuple[str, int]] = set()
        self.assignment = assignment_of(config)
        self.errors: list[KafkaError] = []
        self.consumer = Consumer(config)
        self.consumer.subscribe(topics, on_assign=self._assigned, on_revoke=self._revoked)

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        take_assignment(consumer, partitions, self.assignment)
        self.owned |= {(p.topic, p.partition) for p in partitions}

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.owned -= {(p.topic, p.partition) for p in partitions}

    def poll(self) -> None:
        message = self.consumer.poll(0.1)
        if message is not None and message.error() is not None:
            self.errors.append(message.error())

    def numbers(self, topic: str) -> set[int]:
        return {number for name, number in self.owned if name == topic}


def settle(members: list[Member], done: object, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for member in members:
            member.poll()
        if done():  # type: ignore[operator]
            return
    raise AssertionError(f"no settled assignment within {timeout_s:.0f} s: {[sorted(m.owned) for m in members]}")


@contextlib.contextmanager
def closing(members: list[Member]) -> Iterator[list[Member]]:
    """``members``, to which a test adds the members it starts: each is closed at the end."""
    try:
        yield members
    finally:
        for member in members:
            member.consumer.close()


def two_topics(kafka_bootstrap: str, unique_name: str) -> tuple[dict[str, str], list[str]]:
    settings = load_settings(
        environ={},
        overrides={"kafka.bootstrap.servers": kafka_bootstrap, "topic_prefix": unique_name, "topic_partitions": 8},
    )
    ensure_topics(settings, TOPICS)
    return dict(settings.kafka), [settings.topic(name) for name in TOPICS]


@pytest.mark.parametrize(
    ("protocol", "expected"),
    [
        ({"group.protocol": "consumer"}, Assignment.BROKER),
        ({"partition.assignment.strategy": "range"}, Assignment.CLASSIC_RANGE),
    ],
)
def test_a_second_cleaner_joining_gets_the_same_partition_numbers_of_both_topics(
    kafka_bootstrap: str, unique_name: str, protocol: dict[str, str], expected: Assignment
) -> None:
    settings_kafka, topics = two_topics(kafka_bootstrap, unique_name)
    kafka = {**settings_kafka, **protocol}
    group = f"{unique_name}-cleaner"
    with closing([]) as members:
        first = Member(cleaner_consumer_config(kafka, group, "first"), topics)
        members.append(first)
        assert first.assignment is expected
        settle([first], lambda: len(first.owned) == 16)
        second = Member(cleaner_consumer_config(kafka, group, "second"), topics)
        members.append(second)
        settle(members, lambda: all(len(m.owned) == 8 for m in members) and first.owned.isdisjoint(second.owned))
        for member in members:
            vacuum, delay = member.numbers(topics[0]), member.numbers(topics[1])
            assert len(vacuum) == 4 and vacuum == delay, sorted(member.owned)


def test_a_cleaner_whose_assignor_differs_from_its_groups_is_refused_and_told_what_to_do(
    kafka_bootstrap: str, unique_name: str
) -> None:
    kafka, topics = two_topics(kafka_bootstrap, unique_name)
    group = f"{unique_name}-cleaner"
    with closing([]) as members:
        first = Member(cleaner_consumer_config(kafka, group, "first"), topics)
        members.append(first)
        settle([first], lambda: len(first.owned) == 16)
        ranged = {**kafka, "partition.assignment.strategy": "range"}
        second = Member(cleaner_consumer_config(ranged, group, "second"), topics)
        members.append(second)
        settle(members, lambda: bool(second.errors))
        advice = group_protocol_conflict(second.errors[0])
        assert advice is not None and "ACIDCLEAN_KAFKA_PARTITION_ASSIGNMENT_STRATEGY" in advice
        assert second.owned == set() and len(first.owned) == 16  # the group goes on without it
