"""Kafka records as plain values, so the codec and its tests need no broker.

``OutgoingRecord`` is what the producer sends; ``RawRecord`` is what a consumer read, bytes exactly
as they arrived, with where they came from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True)
class OutgoingRecord:
    """One record to produce: key, value and headers of a binary-mode CloudEvent."""

    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    partition: int | None = None  # None: the producer's partitioner picks it from the key


@dataclass(frozen=True)
class RawRecord:
    """One consumed record, untouched."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    timestamp_ms: int | None = None


class MessageLike(Protocol):
    """The part of ``confluent_kafka.Message`` the codec reads."""

    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def key(self) -> str | bytes | None: ...
    def value(self) -> str | bytes | None: ...
    def headers(self) -> Sequence[tuple[str, str | bytes | None]] | Mapping[str, str | bytes | None] | None: ...
    def timestamp(self) -> tuple[int, int]: ...


TIMESTAMP_NOT_AVAILABLE = 0


def _as_bytes(data: str | bytes | None) -> bytes | None:
    return data.encode("utf-8") if isinstance(data, str) else data


def raw_record(message: MessageLike) -> RawRecord:
    """A consumed ``confluent_kafka.Message`` as a :class:`RawRecord`."""
    timestamp_type, timestamp = message.timestamp()
    headers = message.headers() or ()
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return RawRecord(
        topic=message.topic() or "",
        partition=message.partition() or 0,
        offset=message.offset() or 0,
        key=_as_bytes(message.key()),
        value=_as_bytes(message.value()),
        headers=tuple([(name, value.encode() if isinstance(value, str) else value) for name, value in pairs]),
        timestamp_ms=None if timestamp_type == TIMESTAMP_NOT_AVAILABLE else timestamp,
    )
