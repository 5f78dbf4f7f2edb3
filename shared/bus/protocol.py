"""What the rest of acidclean needs from a message bus, as a Protocol.

The cleaner, the vacuum job and the tests depend on :class:`EventBus`, not on Kafka: the Kafka
implementation is :class:`acidclean.shared.bus.producer.KafkaEventBus`, and
:class:`acidclean.shared.bus.memory.InMemoryBus` is a fake with the same behaviour for unit tests.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from acidclean.schemas.common import EventBase
from acidclean.shared.bus.bundle import PrebuiltRecord


@dataclass(frozen=True)
class Delivery:
    """Where the broker stored an event: returned only once the broker acknowledged it."""

    topic: str
    partition: int
    offset: int
    event_id: uuid.UUID


class EventBus(Protocol):
    """Publishes events and returns only once every one is acknowledged, else raises ``BusError``."""

    def publish(self, topic: str, event: EventBase) -> Delivery:
        """Publish one event; block until the broker has it."""
        ...

    def publish_many(self, items: Sequence[tuple[str, EventBase | PrebuiltRecord]]) -> list[Delivery]:
        """Publish several events (in order per key; a prebuilt record such as a bundle as it was
        built, to its own partition when it names one); block until the broker has all of them."""
        ...
