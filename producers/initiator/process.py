"""``acidclean initiator``: one process of the initiator group, the I/O around :class:`InitiatorCore`.

It consumes ``DeltaCommitted`` in the group ``<initiator_group_id>.<tenant>`` (so two processes split
the delta topic's partitions and each key is decided by one of them), and tails,
without a group, every partition of the request, vacuum, done and dead-letter topics to know which
keys have a vacuum in flight. After each assignment it requests nothing until that tail has read
what those topics held at that moment, so a request made by the partition's previous owner (or by
this process before a restart) is never made twice.

A delta record's offset is committed only once its key was decided (requested, or found below the
thresholds or in flight): killed in between, the process reads the record again and decides again
from a fresh listing, so no request is lost, and the in-flight fold stops a duplicate.

The sweep (``initiator_sweep_interval_s``) walks the metastore's transactional tables, at most
``initiator_sweep_tables_per_minute`` a minute, and applies the same gate and thresholds to the keys
this process owns (the key's partition of the delta topic, as the producer's partitioner picks it).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
import zlib
from collections import Counter as Tally
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from http.server import ThreadingHTTPServer
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, TopicPartition
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from acidclean.producers.hive_queue.own_requests import enter_in_hive_queue
from acidclean.producers.initiator.core import InitiatorCore
from acidclean.producers.initiator.rules import (
    Decision,
    InvalidTableProperty,
    Thresholds,
    figures_of,
    is_auto_compaction_off,
    is_insert_only,
    table_thresholds,
)
from acidclean.schemas.common import event_key, utc_now
from acidclean.schemas.events import (
    CleanupDone,
    CleanupRejected,
    DeltaCommitted,
    RequestedBy,
    VacuumCommitted,
    VacuumFailed,
    VacuumFigures,
    VacuumRequested,
    VacuumStarted,
    VacuumThresholds,
)
from acidclean.shared.acid.state import Listing, acid_state
from acidclean.shared.acid.write_ids import ValidWriteIdList
from acidclean.shared.bus.codec import decode
from acidclean.shared.bus.consumer import ConsumerErrors, OffsetLedger, make_consumer
from acidclean.shared.bus.producer import KafkaEventBus
from acidclean.shared.bus.reader import reader_config
from acidclean.shared.bus.records import raw_record
from acidclean.shared.bus.topics import ensure_topics
from acidclean.shared.errors import (
    AcidCleanError,
    AcidLayoutError,
    ConfigurationError,
    MetastoreError,
    TableNotFoundError,
)
from acidclean.shared.hive4_queue.queue import HiveCompactionQueue
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.logs import log as log_fields
from acidclean.shared.metastore import TableInfo, split_table_name
from acidclean.shared.orc.reader import list_table_dir
from acidclean.shared.probes import Probes, broker_check, metastore_check_for, serve_http
from acidclean.shared.settings import Settings
from acidclean.shared.storage import StorageError, open_location

log = logging.getLogger("acidclean.initiator")

INITIATOR_TOPICS = ("delta_committed", "vacuum_requests", "vacuum_committed", "cleanup_done", "dead_letter")
LIFECYCLE_TOPICS = ("vacuum_requests", "vacuum_committed", "cleanup_done", "dead_letter")
LIFECYCLE_EVENTS = (VacuumRequested, VacuumStarted, VacuumFailed, VacuumCommitted, CleanupDone, CleanupRejected)
LAG_REFRESH_S = 5.0
RETRY_S = 5.0


def initiator_group_id(settings: Settings) -> str:
    """The consumer group of a tenant's initiators."""
    return f"{settings.initiator_group_id}.{settings.tenant}"


def key_partition(key: str, partitions: int, partitioner: str = "consistent_random") -> int:
    """The partition librdkafka's default partitioner (CRC32 of the key) gives a keyed record."""
    if partitioner not in ("consistent_random", "consistent"):
        raise ConfigurationError(
            f"the initiator's sweep knows librdkafka's consistent partitioner only (kafka.partitioner={partitioner}): "
            "remove that setting, or turn the sweep off with --sweep-interval 0"
        )
    return zlib.crc32(key.encode("utf-8")) % partitions


@dataclass
class InitiatorOptions:
    initiator_id: str | None = None
    metrics_port: int | None = None


@dataclass
class _Table:
    info: TableInfo
    read_at: float


@dataclass
class InitiatorMetrics:
    registry: CollectorRegistry = field(default_factory=lambda: CollectorRegistry(auto_describe=True))

    def __post_init__(self) -> None:
        r = self.registry
        self.requests = Counter(
            "acidclean_initiator_requests",
            "VacuumRequested published, by trigger and type.",
            ["trigger", "type"],
            registry=r,
        )
        self.listings = Counter("acidclean_initiator_listings", "Storage listings of a table or partition.", registry=r)
        self.metastore_calls = Counter(
            "acidclean_initiator_metastore_calls", "Metastore calls made, by call.", ["call"], registry=r
        )
        self.lag = Gauge(
            "acidclean_initiator_lag", "Delta records not yet read by this process, over its partitions.", registry=r
        )
        self.keys = Gauge("acidclean_initiator_keys", "Tables and partitions whose figures are kept.", registry=r)
        self.in_flight = Gauge(
            "acidclean_initiator_in_flight", "Tables and partitions with a vacuum in flight.", registry=r
        )
        self.latency = Histogram(
            "acidclean_initiator_request_latency_seconds",
            "From the commit that crossed a threshold to its VacuumRequested.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300),
            registry=r,
        )


class InitiatorProcess:
    """One initiator: ``run()`` until ``stop()`` (SIGTERM, SIGINT)."""

    def __init__(
        self,
        settings: Settings,
        options: InitiatorOptions | None = None,
        *,
        lister: Callable[[str], Listing] | None = None,
        metastore: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.options = options or InitiatorOptions()
        self.initiator_id = self.options.initiator_id or f"initiator-{socket.gethostname()}-{os.getpid()}"
        self.group_id = initiator_group_id(settings)
        self._consumer_errors = ConsumerErrors(log, self.group_id)
        self.core = InitiatorCore()
        self.metrics = InitiatorMetrics()
        self.calls: Tally[str] = Tally()  # metastore calls and listings, for the benchmark
        self.defaults = Thresholds(
            settings.compactor_delta_num_threshold,
            settings.compactor_delta_pct_threshold,
            settings.compactor_abortedtxn_threshold,
        )
        self._lister = lister or _list_location
        self._metastore = metastore
        self._clock = clock
        self._stop = False
        self._tables: dict[str, _Table] = {}
        self._locations: dict[str, str] = {}
        self._key_partition: dict[str, int] = {}
        self._first_seen: dict[str, datetime] = {}  # occurred_at of the oldest unanswered commit of a key
        self._owned: set[int] = set()
        self._delta_partitions = 0
        self._pending: dict[str, list[tuple[str, int, int]]] = {}
        self._retry_at: dict[str, float] = {}
        self._committed: dict[tuple[str, int], int] = {}
        self._ledger = OffsetLedger()
        self._tail_positions: dict[tuple[str, int], int] = {}
        self._barrier: dict[tuple[str, int], int] = {}
        self._sweep_queue: deque[str] = deque()
        self._next_sweep = clock()
        self._next_sweep_table = clock()
        self._next_lag = clock()
        self.probes = Probes(stale_after_s=60.0, loop_name="initiator")
        self._joined = False
        self.probes.add_check(
            lambda: (
                None if self._joined else f"not in consumer group {self.group_id} yet: no partition assignment received"
            )
        )
        # The sweep and every request's figures ask the metastore: a refused Kerberos login stops both.
        self.probes.add_check(metastore_check_for(settings))
        self._http: ThreadingHTTPServer | None = None
        self._topic = {name: settings.topic(name) for name in INITIATOR_TOPICS}
        self.probes.add_check(broker_check(settings.kafka, self._topic["delta_committed"]))
        self.consumer: Consumer | None = None
        self.tail: Consumer | None = None
        self.bus: KafkaEventBus | None = None

    # lifecycle -------------------------------------------------------------------------------------

    def stop(self) -> None:
        self._stop = True

    def run(self) -> None:
        ensure_topics(self.settings, INITIATOR_TOPICS, group=self.group_id)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: self.stop())
        if self.options.metrics_port is not None:
            self._http = serve_http(self.metrics.registry, self.options.metrics_port, probes=self.probes)
        self.bus = KafkaEventBus(self.settings.kafka, source=f"/acidclean/initiator/{self.initiator_id}")
        self.tail = Consumer(reader_config(self.settings.kafka))
        self._assign_tail()
        consumer = make_consumer(self.settings.kafka, self.group_id)
        self.consumer = consumer
        consumer.subscribe(
            [self._topic["delta_committed"]],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_revoke,
        )
        log_fields(
            log,
            logging.INFO,
            "initiator started",
            initiator_id=self.initiator_id,
            group=self.group_id,
            tenant=self.settings.tenant,
            thresholds=str(self.defaults),
            sweep_interval_s=self.settings.initiator_sweep_interval_s,
        )
        try:
            while not self._stop:
                self.step()
        finally:
            self.close()

    def close(self) -> None:
        if self.consumer is not None:
            try:
                self._commit()
                self.consumer.close()
            except KafkaException as error:
                log.warning("initiator could not leave its group cleanly: %s", error)
            self.consumer = None
        if self.tail is not None:
            self.tail.close()
            self.tail = None
        if self.bus is not None:
            self.bus.close()
            self.bus = None
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()

    def step(self) -> None:
        """One turn: read the lifecycle tail, a batch of deltas, decide dirty keys, sweep a table."""
        assert self.consumer is not None
        self._read_tail(timeout_s=0.0)
        messages = self.consumer.consume(500, timeout=0.2)
        for message in messages:
            self._on_delta(message)
        self._decide_dirty("event")
        if self.settings.initiator_sweep_interval_s > 0:
            self._sweep_step()
        self._commit()
        if self._clock() >= self._next_lag:
            self._refresh_lag()
        self.probes.stepped()

    # the lifecycle tail ----------------------------------------------------------------------------

    def _assign_tail(self) -> None:
        assert self.tail is not None
        assignment = []
        metadata = self.tail.list_topics(timeout=30)
        for name in LIFECYCLE_TOPICS:
            topic = self._topic[name]
            found = metadata.topics.get(topic)
            for partition in sorted(found.partitions if found is not None else ()):
                assignment.append(TopicPartition(topic, partition, OFFSET_BEGINNING))
        delta = metadata.topics.get(self._topic["delta_committed"])
        self._delta_partitions = len(delta.partitions) if delta is not None else self.settings.topic_partitions
        self.tail.assign(assignment)
        self._set_barrier()

    def _set_barrier(self) -> None:
        """Requests wait until the tail read what the lifecycle topics hold now."""
        assert self.tail is not None
        barrier = {}
        for tp in self.tail.assignment():
            low, high = self.tail.get_watermark_offsets(
                TopicPartition(tp.topic, tp.partition), timeout=30, cached=False
            )
            self._tail_positions.setdefault((tp.topic, tp.partition), int(low))
            barrier[(tp.topic, tp.partition)] = int(high)
        self._barrier = barrier

    def caught_up(self) -> bool:
        return all(self._tail_positions.get(tp, 0) >= high for tp, high in self._barrier.items())

    def _read_tail(self, timeout_s: float) -> None:
        assert self.tail is not None
        deadline = self._clock() + timeout_s
        while True:
            messages = self.tail.consume(1000, timeout=max(0.0, deadline - self._clock()))
            for message in messages:
                if message.error() is not None:
                    continue
                record = raw_record(message)
                self._tail_positions[(record.topic, record.partition)] = record.offset + 1
                event = decode(
                    record, rejected_by=self.initiator_id, tenant=self.settings.tenant, expected=LIFECYCLE_EVENTS
                )
                if getattr(event, "tenant", None) != self.settings.tenant:
                    continue
                if isinstance(event, CleanupRejected) and record.topic != self._topic["dead_letter"]:
                    continue  # undecodable on a lifecycle topic: nothing to fold
                freed = self.core.observe_lifecycle(event)
                if freed is not None:
                    log_fields(log, logging.INFO, "vacuum ended; checking the key again", key=freed)
            if len(messages) < 1000 and (self.caught_up() or self._clock() >= deadline):
                return

    # the delta topic -------------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._joined = True
        self._owned.update(tp.partition for tp in partitions)
        self._set_barrier()
        log_fields(log, logging.INFO, "partitions assigned", partitions=sorted(self._owned))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._commit()
        revoked = {tp.partition for tp in partitions}
        self._owned -= revoked
        self._ledger.forget((tp.topic, tp.partition) for tp in partitions)
        for tp in partitions:
            self._committed.pop((tp.topic, tp.partition), None)
        gone = [key for key, partition in self._key_partition.items() if partition in revoked]
        self.core.forget(gone)
        for key in gone:
            self._pending.pop(key, None)
            self._first_seen.pop(key, None)

    def _on_delta(self, message: Message) -> None:
        error = message.error()
        if error is not None:
            self._consumer_errors.report(error)
            return
        record = raw_record(message)
        self._ledger.start(record.topic, record.partition, record.offset)
        event = decode(record, rejected_by=self.initiator_id, tenant=self.settings.tenant, expected=(DeltaCommitted,))
        if not isinstance(event, DeltaCommitted) or event.tenant != self.settings.tenant:
            self._ledger.finish(record.topic, record.partition, record.offset)
            return
        key = event.key
        self._key_partition[key] = record.partition
        self._locations[key] = event.location
        self._first_seen.setdefault(key, event.occurred_at)
        self._pending.setdefault(key, []).append((record.topic, record.partition, record.offset))
        self.core.observe_delta(key, event.delta_directory, event.bytes)

    def _decide_dirty(self, trigger: str) -> None:
        if not self.core.dirty:
            return
        caught_up = self.caught_up()
        now = self._clock()
        for key in list(self.core.dirty):
            if self._stop:
                return
            if self._retry_at.get(key, 0.0) > now:
                continue
            partition = self._key_partition.get(key)
            owned = partition is not None and partition in self._owned
            if owned and not caught_up:
                continue  # decided once the tail has caught up
            if self.core.may_request(key, owned=owned, caught_up=caught_up) and not self._evaluate(key, trigger):
                self._retry_at[key] = now + RETRY_S  # the metastore or storage failed: its offsets wait
                continue
            self._retry_at.pop(key, None)
            self.core.dirty.discard(key)
            self._finish(key)

    def _finish(self, key: str) -> None:
        for topic, partition, offset in self._pending.pop(key, []):
            self._ledger.finish(topic, partition, offset)
        self._first_seen.pop(key, None)

    def _commit(self) -> None:
        """Commit the offsets that moved; a failed commit (a rebalance, say) only means deltas are decided again."""
        if self.consumer is None:
            return
        offsets = [
            TopicPartition(topic, partition, offset)
            for (topic, partition), offset in self._ledger.committable().items()
            if partition in self._owned and self._committed.get((topic, partition)) != offset
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

    # deciding --------------------------------------------------------------------------------------

    def _table(self, table: str) -> TableInfo:
        cached = self._tables.get(table)
        if cached is not None and self._clock() - cached.read_at < self.settings.initiator_table_cache_s:
            return cached.info
        db, name = split_table_name(table)
        info: TableInfo = self._call("get_table", lambda m: m.get_table(db, name))
        self._tables[table] = _Table(info, self._clock())
        return info

    def _call(self, call: str, operation: Callable[[Any], Any]) -> Any:
        if self._metastore is None:
            self._metastore = HiveMetastore.from_settings(self.settings)
        self.calls[f"metastore:{call}"] += 1
        self.metrics.metastore_calls.labels(call).inc()
        return operation(self._metastore)

    def _list(self, key: str, table: str, location: str) -> bool:
        """List ``key``'s directory and reset its figures; False (logged) when its layout cannot be read.
        A metastore or storage failure raises: the key is tried again later."""
        db, name = split_table_name(table)
        valid = ValidWriteIdList.from_string(self._call("valid_write_ids", lambda m: m.valid_write_ids(db, name)))
        self.calls["listing"] += 1
        self.metrics.listings.inc()
        listing = self._lister(location)
        try:
            state = acid_state(listing, valid)
        except AcidLayoutError as error:
            log.warning("initiator cannot read %s (%s): %s", key, location, error)
            return False
        figures = figures_of(state, listing, aborted_txns=len(valid.aborted_ids))
        self.core.set_listing(key, figures, (d.name for d in state.deltas))
        return True

    def _evaluate(self, key: str, trigger: str, table: str | None = None, partition: str | None = None) -> bool:
        """Decide ``key`` (request it or not); False when the metastore or storage failed (try again)."""
        if table is None:
            parts = key.split("/", 2)  # tenant/db.table[/partition]
            table, partition = parts[1], parts[2] if len(parts) > 2 else None
        location = self._locations.get(key)
        try:
            info = self._table(table)
            if location is None or not info.transactional or is_auto_compaction_off(info.parameters):
                return True
            thresholds = table_thresholds(self.defaults, info.parameters)
            if self.core.needs_listing(key) and not self._list(key, table, location):
                return True
        except TableNotFoundError as error:
            log.info("initiator skips %s: %s", key, error)
            return True
        except InvalidTableProperty as error:
            log.warning("initiator skips %s: %s", key, error)
            return True
        except (MetastoreError, StorageError, AcidLayoutError) as error:
            log.warning("initiator will try %s again in %g s: %s", key, RETRY_S, error)
            return False
        decision = self.core.decision(key, thresholds, insert_only=is_insert_only(info.parameters))
        if decision is not None:
            self._request(key, table, partition, location, decision, thresholds, trigger)
        return True

    def _request(
        self,
        key: str,
        table: str,
        partition: str | None,
        location: str,
        decision: Decision,
        thresholds: Thresholds,
        trigger: str,
    ) -> None:
        assert self.bus is not None
        known = self.core.figures[key].figures
        now = utc_now()
        request = VacuumRequested(
            tenant=self.settings.tenant,
            table=table,
            partition=partition,
            occurred_at=now,
            location=location,
            compaction_type=decision.compaction_type,
            reason=decision.reason,
            figures=VacuumFigures(
                delta_count=known.delta_count,
                delete_delta_count=known.delete_delta_count,
                delta_bytes=known.delta_bytes,
                base_bytes=known.base_bytes,
                aborted_txns=known.aborted_txns,
            ),
            thresholds=VacuumThresholds(
                delta_num=thresholds.delta_num, delta_pct=thresholds.delta_pct, aborted_txns=thresholds.aborted_txns
            ),
            requested_by=RequestedBy(
                initiator_id=self.initiator_id, trigger="sweep" if trigger == "sweep" else "event"
            ),
            requested_at=now,
        )
        if self.settings.hive_queue_initiator_requests:  # acidclean hive-queue publishes it (issue 53)
            pool = self.settings.hive_queue_pool
            entered = self._call("compact2", lambda m: enter_in_hive_queue(HiveCompactionQueue(m), request, pool))
            if entered is None:
                return  # Hive's queue holds an entry of this key: it serves it
            request = entered
        else:
            self.bus.publish(self._topic["vacuum_requests"], request)  # returns once acknowledged
        self.core.observe_lifecycle(request)
        self.metrics.requests.labels(trigger, decision.compaction_type).inc()
        first = self._first_seen.get(key)
        if first is not None:
            self.metrics.latency.observe(max(0.0, (now - first).total_seconds()))
        log_fields(
            log,
            logging.INFO,
            "vacuum requested",
            event_id=str(request.event_id),
            table=table,
            partition=partition,
            compaction_type=decision.compaction_type,
            reason=decision.reason,
            trigger=trigger,
        )

    # the sweep -------------------------------------------------------------------------------------

    def _sweep_step(self) -> None:
        now = self._clock()
        if not self._sweep_queue:
            if now < self._next_sweep:
                return
            self._next_sweep = now + self.settings.initiator_sweep_interval_s
            try:
                self._sweep_queue.extend(self._all_tables())
            except AcidCleanError as error:
                log.warning("initiator sweep cannot list the metastore's tables: %s", error)
            return
        if now < self._next_sweep_table or not self.caught_up() or not self._owned:
            return
        self._next_sweep_table = now + 60.0 / self.settings.initiator_sweep_tables_per_minute
        table = self._sweep_queue.popleft()
        try:
            self._sweep_table(table)
        except (AcidCleanError, InvalidTableProperty) as error:
            log.warning("initiator sweep skips %s: %s", table, error)

    def _all_tables(self) -> Iterator[str]:
        for db in self._call("get_all_databases", lambda m: m.get_all_databases()):
            names: list[str] = self._call("get_all_tables", _all_tables_of(db))
            yield from (f"{db}.{name}" for name in names)

    def _sweep_table(self, table: str) -> None:
        info = self._table(table)
        if not info.transactional or is_auto_compaction_off(info.parameters):
            return
        db, name = split_table_name(table)
        partitions: list[str | None] = (
            list(self._call("list_partitions", lambda m: m.list_partitions(db, name)))
            if info.partition_keys
            else [None]
        )
        partitioner = self.settings.kafka.get("partitioner", "consistent_random")
        for partition in partitions:
            key = event_key(self.settings.tenant, table, partition)
            owner = key_partition(key, self._delta_partitions, partitioner)
            if not self.core.may_request(key, owned=owner in self._owned, caught_up=self.caught_up()):
                continue
            if partition is None:
                location = info.location
            else:
                location = self._call("get_partition", _partition_of(db, name, partition)).location
            self._key_partition[key] = owner
            self._locations[key] = location
            self.core.stale.add(key)  # a sweep always lists: writers outside acidclean changed it
            self._evaluate(key, "sweep", table, partition)

    # metrics ---------------------------------------------------------------------------------------

    def _refresh_lag(self) -> None:
        self._next_lag = self._clock() + LAG_REFRESH_S
        self.metrics.keys.set(len(self.core.figures))
        self.metrics.in_flight.set(len(self.core.in_flight.keys_in_flight()))
        if self.consumer is None:
            return
        try:
            lag = 0
            assigned = self.consumer.assignment()
            for tp in self.consumer.position(assigned):
                low, high = self.consumer.get_watermark_offsets(tp, timeout=2, cached=False)
                position = tp.offset if tp.offset >= 0 else low
                lag += max(0, int(high) - int(position))
            self.metrics.lag.set(lag)
        except KafkaException as error:
            log.debug("lag not refreshed: %s", error)


def _all_tables_of(db: str) -> Callable[[Any], Any]:
    return lambda metastore: metastore.get_all_tables(db)


def _partition_of(db: str, table: str, partition: str) -> Callable[[Any], Any]:
    return lambda metastore: metastore.get_table(db, table, partition)


def _list_location(location: str) -> Listing:
    opened = open_location(location)
    return list_table_dir(opened.fs.arrow, opened.path)
