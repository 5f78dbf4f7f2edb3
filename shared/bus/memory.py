"""An in-memory :class:`EventBus` for unit tests of code that publishes events.

It encodes every event with the real codec and keeps the records per topic and partition, with
offsets, as a broker would; ``fail_next`` makes the next publishes raise ``BusError`` so a test can
check that a handler does not commit an input whose outcome was not acknowledged.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Sequence

from acidclean.schemas.common import EventBase
from acidclean.schemas.events import Event
from acidclean.shared.bus.bundle import PrebuiltRecord, is_bundle, unpack
from acidclean.shared.bus.codec import DEFAULT_SOURCE, decode
from acidclean.shared.bus.producer import outgoing
from acidclean.shared.bus.protocol import Delivery
from acidclean.shared.bus.records import RawRecord
from acidclean.shared.errors import BusError


class InMemoryBus:
    """Keeps published records in memory; same contract as ``KafkaEventBus``."""

    def __init__(self, partitions: int = 6, source: str = DEFAULT_SOURCE) -> None:
        self.partitions = partitions
        self.source = source
        self.records: dict[str, list[RawRecord]] = {}
        self._failures: list[BusError] = []
        self._next_offset: Counter[tuple[str, int]] = Counter()

    def fail_next(self, count: int = 1, message: str = "simulated: Kafka did not acknowledge") -> None:
        """Make the next ``count`` publish calls raise ``BusError`` and store nothing."""
        self._failures.extend(BusError(message) for _ in range(count))

    def publish(self, topic: str, event: EventBase) -> Delivery:
        return self.publish_many([(topic, event)])[0]

    def publish_many(self, items: Sequence[tuple[str, EventBase | PrebuiltRecord]]) -> list[Delivery]:
        if self._failures:
            raise self._failures.pop(0)
        deliveries = []
        for topic, event in items:
            out = outgoing(event, self.source)
            # librdkafka's default partitioner (consistent_random): CRC32 of the key.
            partition = out.partition if out.partition is not None else zlib.crc32(out.key) % self.partitions
            stored = self.records.setdefault(topic, [])
            offset = self._next_offset[(topic, partition)]
            self._next_offset[(topic, partition)] += 1
            stored.append(RawRecord(topic, partition, offset, out.key, out.value, out.headers))
            deliveries.append(Delivery(topic, partition, offset, event.event_id))
        return deliveries

    def events(self, topic: str) -> list[Event]:
        """Every event published to ``topic``, decoded again, in publish order (a bundle's members in
        its place)."""
        return [decode(record, rejected_by="in-memory-bus", tenant="default") for record in self.unbundled(topic)]

    def unbundled(self, topic: str) -> list[RawRecord]:
        """The records of ``topic`` in publish order, each bundle replaced by its members."""
        records: list[RawRecord] = []
        for record in self.records.get(topic, []):
            bundle = unpack(record) if is_bundle(record.headers) else None
            try:
                records.extend(bundle.members if bundle is not None else (record,))
            except ValueError:  # members that do not read: the record as it is
                records.append(record)
        return records
