"""The Kafka implementation of :class:`EventBus`: an idempotent producer that never fires and forgets.

``publish`` returns only after the delivery report says the broker stored the event
(``enable.idempotence=true``, ``acks=all``). Retriable failures (broker down, timeouts, not enough
replicas) are retried with tenacity until ``total_timeout_s`` has passed; anything else, or running
out of time, raises ``BusError`` with what to check, and the caller must not commit its input offset.
Kafka client settings are passed through as given; acidclean only adds the two delivery guarantees
(and refuses settings that would weaken them), a default ``message.timeout.ms`` and, unless one is
given, ``compression.type=lz4``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException, Producer
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_exponential

from acidclean.schemas.common import EventBase
from acidclean.shared.bus.bundle import PrebuiltRecord
from acidclean.shared.bus.client_logs import with_client_logger
from acidclean.shared.bus.codec import DEFAULT_SOURCE, encode
from acidclean.shared.bus.kafka_errors import AUTHORIZATION_CODES, KafkaAccessDeniedError, configuration_error, refused
from acidclean.shared.bus.protocol import Delivery
from acidclean.shared.bus.records import OutgoingRecord
from acidclean.shared.errors import BusError, ConfigurationError

# How long one poll for delivery reports blocks at most while a send waits for its own reports.
REPORT_POLL_S = 0.002
# How long one flush by a thread sending alone lasts at most before it looks again.
ALONE_FLUSH_S = 0.01
DEFAULT_COMPRESSION = "lz4"
COMPRESSION_SETTINGS = ("compression.type", "compression.codec")
REQUIRED_PRODUCER_SETTINGS = {"enable.idempotence": ("true",), "acks": ("all", "-1")}
# Local errors librdkafka reports as not retriable although a later attempt may well succeed.
TRANSIENT_CODES = frozenset(
    {
        KafkaError._MSG_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._QUEUE_FULL,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.REQUEST_TIMED_OUT,
    }
)


class ProducerLike(Protocol):
    """The part of ``confluent_kafka.Producer`` this module uses."""

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        *,
        on_delivery: Callable[[KafkaError | None, Any], None] | None = None,
        headers: list[tuple[str, str | bytes | None]] | None = None,
        partition: int = -1,
    ) -> None: ...
    def poll(self, timeout: float) -> int: ...
    def flush(self, timeout: float) -> int: ...
    def __len__(self) -> int: ...


def producer_config(kafka: Mapping[str, str], *, delivery_timeout_s: float) -> dict[str, str]:
    """The pass-through Kafka settings plus the delivery guarantees; conflicting settings are refused."""
    config = {str(key): str(value) for key, value in kafka.items()}
    for name, allowed in REQUIRED_PRODUCER_SETTINGS.items():
        given = config.get(name)
        if given is not None and given.lower() not in allowed:
            raise ConfigurationError(
                f"Kafka setting {name}={given} would let events be lost or duplicated; acidclean needs "
                f"{name}={allowed[0]}: remove it from the kafka settings"
            )
        config[name] = allowed[0]
    config.setdefault("message.timeout.ms", str(int(delivery_timeout_s * 1000)))
    if not any(name in config for name in COMPRESSION_SETTINGS):
        # Bundles of waiting vacuums are up to 512 KB of JSON, written again every interval; lz4 takes
        # them to about a tenth for little CPU (in librdkafka's threads, not the interpreter's).
        config["compression.type"] = DEFAULT_COMPRESSION
    return config


# librdkafka already waited topic.metadata.propagation.max.ms before reporting these: the topic is missing.
MISSING_TOPIC_CODES = frozenset({KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART})


def outgoing(event: EventBase | PrebuiltRecord, source: str) -> OutgoingRecord:
    """The record to produce for ``event``: encoded from the model, or built already (a bundle)."""
    return event.outgoing(source) if isinstance(event, PrebuiltRecord) else encode(event, source=source)


def is_retriable(error: KafkaError) -> bool:
    """Whether sending again may succeed (and the idempotent producer makes the retry safe)."""
    if error.fatal() or error.code() in MISSING_TOPIC_CODES:
        return False
    return error.retriable() or error.code() in TRANSIENT_CODES


def _kafka_producer(config: dict[str, str]) -> ProducerLike:
    try:
        producer: ProducerLike = Producer(with_client_logger(config))
    except KafkaException as error:
        raise configuration_error(error, "producer") from error
    return producer


class _Reports:
    """Counts the delivery reports of one send; ``done`` is set once every event got one."""

    def __init__(self, expected: int) -> None:
        self._left = expected
        self._guard = threading.Lock()
        self.done = threading.Event()
        if expected <= 0:
            self.done.set()

    def served(self) -> None:
        with self._guard:
            self._left -= 1
            if self._left <= 0:
                self.done.set()


class _NotYetDelivered(Exception):
    """Some events got a retriable error or no report yet; tenacity retries those."""


@dataclass
class _Pending:
    topic: str
    event: EventBase | PrebuiltRecord
    record: OutgoingRecord
    delivery: Delivery | None = None
    error: KafkaError | None = None


class KafkaEventBus:
    """Publishes events to Kafka and returns once the broker acknowledged them."""

    def __init__(
        self,
        kafka: Mapping[str, str],
        *,
        source: str = DEFAULT_SOURCE,
        delivery_timeout_s: float = 30.0,
        total_timeout_s: float = 60.0,
        producer_factory: Callable[[dict[str, str]], ProducerLike] | None = None,
    ) -> None:
        self._config = producer_config(kafka, delivery_timeout_s=delivery_timeout_s)
        self._producer: ProducerLike = (producer_factory or _kafka_producer)(self._config)
        self._source = source
        self._flush_timeout_s = int(self._config["message.timeout.ms"]) / 1000 + 5.0
        self._total_timeout_s = total_timeout_s
        self._senders = 0  # threads inside _send now
        self._senders_guard = threading.Lock()

    def publish(self, topic: str, event: EventBase) -> Delivery:
        return self.publish_many([(topic, event)])[0]

    def publish_many(self, items: Sequence[tuple[str, EventBase | PrebuiltRecord]]) -> list[Delivery]:
        pending = [_Pending(topic, event, outgoing(event, self._source)) for topic, event in items]
        retrying = Retrying(
            stop=stop_after_delay(self._total_timeout_s),
            wait=wait_exponential(multiplier=0.1, max=2.0),
            retry=retry_if_exception_type(_NotYetDelivered),
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    self._send([item for item in pending if item.delivery is None])
        except _NotYetDelivered:
            raise self._timeout_error([item for item in pending if item.delivery is None]) from None
        return [item.delivery for item in pending if item.delivery is not None]

    def _send(self, batch: list[_Pending]) -> None:
        reports = _Reports(len(batch))
        with self._senders_guard:
            self._senders += 1
        try:
            for item in batch:
                item.error = None
                self._produce(item, reports)
            self._wait_for(reports)
        finally:
            with self._senders_guard:
                self._senders -= 1
        for item in batch:
            if item.delivery is None and item.error is not None and not is_retriable(item.error):
                raise self._refused_error(item, item.error)
        if any(item.delivery is None for item in batch):
            raise _NotYetDelivered()

    def _wait_for(self, reports: _Reports) -> None:
        """Until every event of one send got its delivery report, or the flush timeout passed.

        A thread sending alone flushes: ``flush`` sends at once, without waiting out ``linger.ms``.
        While other threads send too, ``flush`` would also wait for every event they produce
        meanwhile, and under a steady stream of publishes the queue is seldom empty (a cleaner's four
        workers each waited 10-100 ms for the others' events): then the thread polls until its own
        reports are in (one served by another thread's poll is noticed within ``REPORT_POLL_S``)."""
        deadline = time.monotonic() + self._flush_timeout_s
        while not reports.done.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if self._senders == 1:
                # In short slices: a thread that starts sending meanwhile must not keep this one waiting.
                self._producer.flush(min(left, ALONE_FLUSH_S))
            else:
                self._producer.poll(min(left, REPORT_POLL_S))
            if not reports.done.is_set() and len(self._producer) == 0:
                return  # nothing left in flight anywhere: a report still missing will never come

    def _produce(self, item: _Pending, reports: _Reports) -> None:
        def on_delivery(error: KafkaError | None, message: Any) -> None:
            try:
                if error is None:
                    item.delivery = Delivery(
                        topic=message.topic() or item.topic,
                        partition=message.partition() or 0,
                        offset=message.offset() or 0,
                        event_id=item.event.event_id,
                    )
                else:
                    item.error = error
            finally:  # after the fields: the waiting thread reads them as soon as the batch is done
                reports.served()

        record = item.record
        placed = {} if record.partition is None else {"partition": record.partition}
        while True:
            try:
                self._producer.produce(
                    item.topic,
                    value=record.value,
                    key=record.key,
                    headers=[(name, value) for name, value in record.headers],
                    on_delivery=on_delivery,
                    **placed,
                )
                return
            except BufferError:
                # The local queue is full: serve delivery reports to make room, then try again.
                self._producer.poll(0.5)
            except KafkaException as error:
                raise self._refused_error(item, error.args[0]) from error

    def _refused_error(self, item: _Pending, error: KafkaError) -> BusError:
        if error.code() in AUTHORIZATION_CODES:
            denied = refused(self._config, error, topic=item.topic, doing="write to", operations="Write")
            return KafkaAccessDeniedError(
                f"{denied}; event {item.event.event_id} ({item.event.event_type}) was not published (do not "
                "commit the input offset)"
            )
        fatal = " The producer is in a fatal state: restart the process." if error.fatal() else ""
        return BusError(
            f"Kafka refused event {item.event.event_id} ({item.event.event_type}) for topic {item.topic!r}: "
            f"{error.str()} [{error.name()}]. It was not published; do not commit the input offset. "
            f"Check that the topic exists (acidclean creates it with ensure_topics) and that this "
            f"client may write to it.{fatal}"
        )

    def _timeout_error(self, items: list[_Pending]) -> BusError:
        topics = sorted({item.topic for item in items})
        errors = sorted({item.error.str() for item in items if item.error is not None}) or ["no delivery report"]
        return BusError(
            f"Kafka did not acknowledge {len(items)} event(s) for {', '.join(topics)} within "
            f"{self._total_timeout_s:g} s (last error: {'; '.join(errors)}). They may or may not have been "
            f"stored; do not commit the input offset (publishing again is safe: readers drop duplicate "
            f"event ids). Check that bootstrap.servers={self._config.get('bootstrap.servers', '')!r} "
            f"is reachable and the brokers are healthy."
        )

    def flush(self, timeout_s: float = 10.0) -> int:
        """Wait for outstanding delivery reports; returns how many are still outstanding."""
        return self._producer.flush(timeout_s)

    def close(self) -> None:
        self.flush()

    def __enter__(self) -> KafkaEventBus:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
