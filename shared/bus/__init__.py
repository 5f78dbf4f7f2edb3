"""The Kafka adapter: the CloudEvents codec, the event bus (producer), consumer helpers, topics.

Everything other modules need is importable from here; each submodule has one job:
``codec`` (pure encode/decode), ``records`` (record values), ``protocol`` (``EventBus``),
``producer`` (``KafkaEventBus``), ``consumer`` (settings and offsets), ``topics`` (creation),
``reader`` (read to the end without a group) and ``memory`` (a fake bus for unit tests).
"""

from acidclean.shared.bus.codec import decode, due_at_ms, encode, header_due_at_ms, reject
from acidclean.shared.bus.consumer import (
    OffsetLedger,
    commit_stored,
    consumer_config,
    make_consumer,
    store_offsets,
)
from acidclean.shared.bus.memory import InMemoryBus
from acidclean.shared.bus.producer import KafkaEventBus, producer_config
from acidclean.shared.bus.protocol import Delivery, EventBus
from acidclean.shared.bus.reader import LogReader
from acidclean.shared.bus.records import OutgoingRecord, RawRecord, raw_record
from acidclean.shared.bus.topics import TopicsReport, ensure_topics, topic_specs

__all__ = [
    "Delivery",
    "EventBus",
    "InMemoryBus",
    "KafkaEventBus",
    "LogReader",
    "OffsetLedger",
    "OutgoingRecord",
    "RawRecord",
    "TopicsReport",
    "commit_stored",
    "consumer_config",
    "decode",
    "due_at_ms",
    "encode",
    "ensure_topics",
    "header_due_at_ms",
    "make_consumer",
    "producer_config",
    "raw_record",
    "reject",
    "store_offsets",
    "topic_specs",
]
