"""The initiator's tail of the lifecycle topics: every partition of the request, vacuum, done and
dead-letter topics, read from the beginning without a group and folded into
:class:`~acidclean.producers.initiator.core.InitiatorCore`, so that a key with a vacuum in flight is
never requested again. After each assignment the barrier holds requests back until the tail has read
what those topics held at that moment: a request made by the partition's previous owner (or by this
process before a restart) is never made twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from acidclean.producers.initiator.core import InitiatorCore
from acidclean.schemas.events import (
    CleanupDone,
    CleanupRejected,
    VacuumCommitted,
    VacuumFailed,
    VacuumRequested,
    VacuumStarted,
)
from acidclean.shared.bus.codec import decode
from acidclean.shared.bus.reader import reader_config
from acidclean.shared.bus.records import raw_record
from acidclean.shared.logs import log as log_fields
from acidclean.shared.settings import Settings

log = logging.getLogger("acidclean.initiator")

LIFECYCLE_TOPICS = ("vacuum_requests", "vacuum_committed", "cleanup_done", "dead_letter")
LIFECYCLE_EVENTS = (VacuumRequested, VacuumStarted, VacuumFailed, VacuumCommitted, CleanupDone, CleanupRejected)


class LifecycleTail:
    """The lifecycle topics, read to the end of what they held at the last assignment."""

    def __init__(
        self,
        settings: Settings,
        core: InitiatorCore,
        topics: dict[str, str],
        initiator_id: str,
        clock: Callable[[], float],
    ) -> None:
        self._settings = settings
        self._core = core
        self._topic = topics
        self._initiator_id = initiator_id
        self._clock = clock
        self.consumer: Consumer | None = None
        self.positions: dict[tuple[str, int], int] = {}  # the next offset to read, by topic and partition
        self.barrier: dict[tuple[str, int], int] = {}  # the end of each partition at the last assignment

    def open(self) -> int:
        """Assign every partition of the lifecycle topics from the beginning and set the barrier; returns
        the delta topic's partition count (the sweep finds a key's owner by it)."""
        self.consumer = Consumer(reader_config(self._settings.kafka))
        assignment = []
        metadata = self.consumer.list_topics(timeout=30)
        for name in LIFECYCLE_TOPICS:
            topic = self._topic[name]
            found = metadata.topics.get(topic)
            for partition in sorted(found.partitions if found is not None else ()):
                assignment.append(TopicPartition(topic, partition, OFFSET_BEGINNING))
        delta = metadata.topics.get(self._topic["delta_committed"])
        delta_partitions = len(delta.partitions) if delta is not None else self._settings.topic_partitions
        self.consumer.assign(assignment)
        self.set_barrier()
        return delta_partitions

    def set_barrier(self) -> None:
        """Requests wait until the tail read what the lifecycle topics hold now."""
        assert self.consumer is not None
        barrier = {}
        for tp in self.consumer.assignment():
            low, high = self.consumer.get_watermark_offsets(
                TopicPartition(tp.topic, tp.partition), timeout=30, cached=False
            )
            self.positions.setdefault((tp.topic, tp.partition), int(low))
            barrier[(tp.topic, tp.partition)] = int(high)
        self.barrier = barrier

    def caught_up(self) -> bool:
        return all(self.positions.get(tp, 0) >= high for tp, high in self.barrier.items())

    def read(self, timeout_s: float) -> None:
        """Fold what the topics hold, until caught up or ``timeout_s`` passed (0: what has arrived)."""
        assert self.consumer is not None
        deadline = self._clock() + timeout_s
        tenant = self._settings.tenant
        while True:
            messages = self.consumer.consume(1000, timeout=max(0.0, deadline - self._clock()))
            for message in messages:
                if message.error() is not None:
                    continue
                record = raw_record(message)
                self.positions[(record.topic, record.partition)] = record.offset + 1
                event = decode(record, rejected_by=self._initiator_id, tenant=tenant, expected=LIFECYCLE_EVENTS)
                if getattr(event, "tenant", None) != tenant:
                    continue
                if isinstance(event, CleanupRejected) and record.topic != self._topic["dead_letter"]:
                    continue  # undecodable on a lifecycle topic: nothing to fold
                freed = self._core.observe_lifecycle(event)
                if freed is not None:
                    log_fields(log, logging.INFO, "vacuum ended; checking the key again", key=freed)
            if len(messages) < 1000 and (self.caught_up() or self._clock() >= deadline):
                return

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None
