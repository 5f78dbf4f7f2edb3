"""The initiator's share of the delta topic: the partitions its group gave it, each ``DeltaCommitted``
read into :class:`~acidclean.producers.initiator.core.InitiatorCore` and remembered per key (its
partition, location, oldest unanswered commit and records), and the offsets.

A delta record's offset is committed only once its key was decided (requested, or found below the
thresholds or in flight): killed in between, the process reads the record again and decides again
from a fresh listing, so no request is lost, and the in-flight fold stops a duplicate.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from acidclean.producers.initiator.core import InitiatorCore
from acidclean.schemas.events import DeltaCommitted
from acidclean.shared.bus.codec import decode
from acidclean.shared.bus.consumer import ConsumerErrors, OffsetLedger
from acidclean.shared.bus.records import raw_record

log = logging.getLogger("acidclean.initiator")


class DeltaIntake:
    """The delta topic's records of this process's partitions, and their offsets."""

    def __init__(self, tenant: str, core: InitiatorCore, initiator_id: str, consumer_errors: ConsumerErrors) -> None:
        self._tenant = tenant
        self._core = core
        self._initiator_id = initiator_id
        self._consumer_errors = consumer_errors
        self.consumer: Consumer | None = None
        self.owned: set[int] = set()  # this process's partitions of the delta topic
        self.partitions = 0  # how many the delta topic has
        self.key_partition: dict[str, int] = {}
        self.locations: dict[str, str] = {}
        self.first_seen: dict[str, datetime] = {}  # occurred_at of the oldest unanswered commit of a key
        self.pending: dict[str, list[tuple[str, int, int]]] = {}  # a key's records not yet decided
        self._ledger = OffsetLedger()
        self._committed: dict[tuple[str, int], int] = {}

    def assigned(self, partitions: Iterable[TopicPartition]) -> None:
        self.owned.update(tp.partition for tp in partitions)

    def revoked(self, partitions: list[TopicPartition]) -> None:
        """Commit what was decided, then forget the keys of the partitions another process owns now."""
        self.commit()
        revoked = {tp.partition for tp in partitions}
        self.owned -= revoked
        self._ledger.forget((tp.topic, tp.partition) for tp in partitions)
        for tp in partitions:
            self._committed.pop((tp.topic, tp.partition), None)
        gone = [key for key, partition in self.key_partition.items() if partition in revoked]
        self._core.forget(gone)
        for key in gone:
            self.pending.pop(key, None)
            self.first_seen.pop(key, None)

    def read(self, message: Message) -> None:
        """One record of the delta topic: its key is marked for a decision, its offset held until then."""
        error = message.error()
        if error is not None:
            self._consumer_errors.report(error)
            return
        record = raw_record(message)
        self._ledger.start(record.topic, record.partition, record.offset)
        event = decode(record, rejected_by=self._initiator_id, tenant=self._tenant, expected=(DeltaCommitted,))
        if not isinstance(event, DeltaCommitted) or event.tenant != self._tenant:
            self._ledger.finish(record.topic, record.partition, record.offset)
            return
        key = event.key
        self.key_partition[key] = record.partition
        self.locations[key] = event.location
        self.first_seen.setdefault(key, event.occurred_at)
        self.pending.setdefault(key, []).append((record.topic, record.partition, record.offset))
        self._core.observe_delta(key, event.delta_directory, event.bytes)

    def decided(self, key: str) -> None:
        """``key`` was decided: its records' offsets may be committed."""
        for topic, partition, offset in self.pending.pop(key, []):
            self._ledger.finish(topic, partition, offset)
        self.first_seen.pop(key, None)

    def commit(self) -> None:
        """Commit the offsets that moved; a failed commit (a rebalance, say) only means deltas are decided again."""
        if self.consumer is None:
            return
        offsets = [
            TopicPartition(topic, partition, offset)
            for (topic, partition), offset in self._ledger.committable().items()
            if partition in self.owned and self._committed.get((topic, partition)) != offset
        ]
        if not offsets:
            return
        try:
            self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as error:
            log.warning("offset commit failed (the deltas since will be decided again): %s", error)
            return
        for tp in offsets:
            self._committed[(tp.topic, tp.partition)] = tp.offset
