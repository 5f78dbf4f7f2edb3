"""Two cleaners' consumers in one group on a real broker, with Kafka's consumer group protocol
(``group.protocol=consumer``): the broker's range assignor gives each the same partition numbers of the
vacuum and delay topics, so a table's fresh vacuums and its waiting records (whose keys hash to the
same partition number) stay in one process, also when the second joins a group the first runs alone."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from acidclean.consumers.cleaner_process import cleaner_consumer_config
from acidclean.shared.bus.topics import ensure_topics
from acidclean.shared.settings import load_settings

pytestmark = pytest.mark.integration

TOPICS = ("vacuum_committed", "cleanup_delay")


class Member:
    """A consumer of both topics that keeps its assignment as the rebalance callbacks give it."""

    def __init__(self, config: dict[str, str], topics: list[str]) -> None:
        self.owned: set[tuple[str, int]] = set()
        self.consumer = Consumer(config)
        self.consumer.subscribe(topics, on_assign=self._assigned, on_revoke=self._revoked)

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.owned |= {(p.topic, p.partition) for p in partitions}

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.owned -= {(p.topic, p.partition) for p in partitions}

    def poll(self) -> None:
        self.consumer.poll(0.1)

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


def test_a_second_cleaner_joining_gets_the_same_partition_numbers_of_both_topics(
    kafka_bootstrap: str, unique_name: str
) -> None:
    settings = load_settings(
        environ={},
        overrides={"kafka.bootstrap.servers": kafka_bootstrap, "topic_prefix": unique_name, "topic_partitions": 8},
    )
    ensure_topics(settings, TOPICS)
    topics = [settings.topic(name) for name in TOPICS]
    kafka = {**settings.kafka, "group.protocol": "consumer"}
    group = f"{unique_name}-cleaner"
    first = Member(cleaner_consumer_config(kafka, group, "first"), topics)
    second: Member | None = None
    try:
        settle([first], lambda: len(first.owned) == 16)
        second = Member(cleaner_consumer_config(kafka, group, "second"), topics)
        members = [first, second]
        settle(members, lambda: all(len(m.owned) == 8 for m in members) and first.owned.isdisjoint(second.owned))
        for member in members:
            vacuum, delay = member.numbers(topics[0]), member.numbers(topics[1])
            assert len(vacuum) == 4 and vacuum == delay, sorted(member.owned)
    finally:
        first.consumer.close()
        if second is not None:
            second.consumer.close()
