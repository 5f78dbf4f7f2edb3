"""The vacuum service: a long-running consumer group that runs each ``VacuumRequested`` in one warm Spark.

``acidclean vacuum-service`` joins ``<vacuum_service_group_id>.<tenant>`` on the vacuum requests
topic and answers every request (:mod:`.vacuum_requests`): ``VacuumStarted``, then the vacuum on its
SparkSession (started once, before it joins the group; ``local[*]`` by default, a cluster master by
the ``vacuum_service_master`` setting), then ``VacuumCommitted`` with the request's id or
``VacuumFailed``. ``vacuum_service_threads`` vacuums run at once, each of a different table or
partition: one key's requests run one after the other (a lane per key), so one busy table never
holds up the others beyond its own lane. Other events on the topic (the service's own answers)
are skipped; a record that is not a valid event is sent to the dead-letter topic.

Offsets are committed only once a request's answer is acknowledged by the broker (at least once):
below a partition's committed offset every request is answered. A request that arrives again (a
crash, a rebalance) is recognised as answered, or waits for the vacuum still holding its key.

Like the cleaner it serves ``/metrics``, ``/healthz`` (the loop steps) and ``/readyz`` (Spark is up,
the group joined, broker and metastore reachable) on ``--metrics-port``, and stops on SIGTERM: it
stops taking requests, lets running vacuums finish for ``vacuum_service_shutdown_s``, commits and
leaves the group; vacuums still running then are abandoned and run again by the group.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from acidclean.producers.vacuum import VacuumResult, outbox_for, spark_session
from acidclean.producers.vacuum_requests import Handled, RequestHandler, ServiceOutbox
from acidclean.schemas.events import CleanupRejected, VacuumRequested
from acidclean.shared.bus.client_logs import with_client_logger
from acidclean.shared.bus.codec import decode
from acidclean.shared.bus.consumer import ConsumerErrors, assignment_of, consumer_config, take_assignment
from acidclean.shared.bus.kafka_errors import configuration_error
from acidclean.shared.bus.partitions import OwnedPartitions, Partition
from acidclean.shared.bus.producer import KafkaEventBus
from acidclean.shared.bus.protocol import EventBus
from acidclean.shared.bus.records import raw_record
from acidclean.shared.bus.topics import ensure_topics
from acidclean.shared.clients import PerThreadClients
from acidclean.shared.errors import BusError
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.logs import log
from acidclean.shared.metastore import Metastore
from acidclean.shared.probes import Probes, broker_check, metastore_check_for, serve_http
from acidclean.shared.settings import Settings

if TYPE_CHECKING:
    from http.server import ThreadingHTTPServer

    from pyspark.sql import SparkSession

LOGGER = logging.getLogger("acidclean.vacuum_service")
SERVICE_TOPICS = ("vacuum_requests", "vacuum_committed", "dead_letter")
VACUUM_BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600)


def service_group_id(settings: Settings) -> str:
    return f"{settings.vacuum_service_group_id}.{settings.tenant}"


class VacuumServiceMetrics:
    """The vacuum service's Prometheus metrics, in a registry of its own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "acidclean_vacuum_service_requests",
            "Requests handled, by outcome (committed, failed, answered: an earlier run had, abandoned: left "
            "at shutdown for the group to run again).",
            ["outcome"],
            registry=r,
        )
        self.failures = Counter(
            "acidclean_vacuum_service_failures", "VacuumFailed published, by reason code.", ["reason"], registry=r
        )
        self.skipped = Counter(
            "acidclean_vacuum_service_skipped",
            "Records skipped: other events on the topic, other tenants' records, or dead-lettered.",
            ["kind"],
            registry=r,
        )
        self.running = Gauge("acidclean_vacuum_service_running", "Requests being handled now.", registry=r)
        self.queued = Gauge("acidclean_vacuum_service_queued", "Requests read and waiting for their lane.", registry=r)
        self.vacuum_seconds = Histogram(
            "acidclean_vacuum_service_vacuum_seconds",
            "Duration of each vacuum run.",
            buckets=VACUUM_BUCKETS,
            registry=r,
        )


@dataclass(frozen=True)
class ServiceOptions:
    """Process options that are not settings of the product."""

    service_id: str | None = None
    metrics_port: int | None = None
    metrics_address: str = "0.0.0.0"
    create_topics: bool = True
    revoke_timeout_s: float = 30.0
    close_timeout_s: float = 15.0


@dataclass(frozen=True)
class _Work:
    partition: Partition
    offset: int
    generation: int
    event: VacuumRequested | CleanupRejected


@dataclass
class _PartitionState:
    generation: int
    accepting: bool = True
    seen_until: int | None = None  # every offset below was read: answered, skipped or in flight
    in_flight: set[int] = field(default_factory=set)
    committed: int | None = None

    def committable(self) -> int | None:
        if self.seen_until is None:
            return None
        return min(self.in_flight) if self.in_flight else self.seen_until


@dataclass(frozen=True)
class _Finished:
    work: _Work
    lane: str
    handled: Handled | None  # None: not started (revoked) or not answered


class VacuumService:
    """One vacuum service process: build it, then :meth:`run` until SIGTERM or :meth:`stop`."""

    def __init__(
        self,
        settings: Settings,
        options: ServiceOptions | None = None,
        *,
        spark: Callable[[], SparkSession] | None = None,
        metastore_factory: Callable[[], Metastore] | None = None,
        bus_factory: Callable[[], EventBus] | None = None,
        metrics: VacuumServiceMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.options = options or ServiceOptions()
        self.service_id = self.options.service_id or f"{socket.gethostname()}-{os.getpid()}"
        self.group_id = service_group_id(settings)
        self._consumer_errors = ConsumerErrors(LOGGER, self.group_id)
        self._assignment = assignment_of(settings.kafka)
        self.metrics = metrics or VacuumServiceMetrics()
        self.topic = settings.topic("vacuum_requests")
        if self.options.create_topics:
            ensure_topics(settings, SERVICE_TOPICS, group=self.group_id)
        self._spark_factory = spark or (
            lambda: spark_session(settings.vacuum_service_master, "acidclean-vacuum-service")
        )
        self._spark: SparkSession | None = None
        self._clients = PerThreadClients()
        self._metastore_factory = metastore_factory or (lambda: HiveMetastore.from_settings(settings))
        self._bus_factory = bus_factory or (
            lambda: KafkaEventBus(
                settings.kafka,
                source=f"/acidclean/vacuum-service/{self.service_id}",
                delivery_timeout_s=15.0,
                total_timeout_s=30.0,
            )
        )
        self.stopping = threading.Event()
        self.handler = RequestHandler(
            settings,
            self.service_id,
            metastore=self._clients.factory("metastore", self._metastore_factory),
            bus=self._clients.factory("bus", self._bus_factory),
            spark=self.spark,
            outbox=ServiceOutbox(outbox_for(settings).directory),
            stopping=self.stopping,
            on_vacuum=self._observe,
        )
        self._threads = settings.vacuum_service_threads
        self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="vacuum-service")
        self._partitions: OwnedPartitions[_PartitionState] = OwnedPartitions()
        self._states = self._partitions.states
        self._lanes: dict[str, deque[_Work]] = {}
        self._busy: set[str] = set()
        self._finished: queue.Queue[_Finished] = queue.Queue()
        self._stop = threading.Event()
        self.joined = threading.Event()
        self.abandoned_close = False  # the broker did not take the final commit, or vacuums were left running
        self._tenant_prefix = f"{settings.tenant}/".encode()
        self._consumer: Any = None
        self._http: ThreadingHTTPServer | None = None
        self.probes = Probes(stale_after_s=max(60.0, 2 * self.options.revoke_timeout_s), loop_name="vacuum service")
        self.probes.add_check(lambda: "stopping" if self.stopping.is_set() else None)
        self.probes.add_check(lambda: None if self._spark is not None else "the SparkSession is not started yet")
        self.probes.add_check(
            lambda: None if self.joined.is_set() else f"not in consumer group {self.group_id} yet: no assignment"
        )
        self.probes.add_check(broker_check(settings.kafka, self.topic))
        self.probes.add_check(metastore_check_for(settings))

    @property
    def http_port(self) -> int | None:
        """The port of ``/metrics``, ``/healthz`` and ``/readyz`` (``metrics_port`` 0 picks a free one)."""
        return None if self._http is None else int(self._http.server_address[1])

    # -- resources ---------------------------------------------------------------------------------

    def spark(self) -> SparkSession:
        """The service's one SparkSession (started by :meth:`run` before it joins the group)."""
        if self._spark is None:
            self._spark = self._spark_factory()
        return self._spark

    def _observe(self, result: VacuumResult, seconds: float) -> None:
        if result.status == "committed":
            self.metrics.vacuum_seconds.observe(seconds)

    # -- running -----------------------------------------------------------------------------------

    def run(self) -> None:
        """Start Spark, join the group, answer requests until SIGTERM/SIGINT or :meth:`stop`."""
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, lambda *_: self.stop())
        if self.options.metrics_port is not None:
            self._http = serve_http(
                self.metrics.registry, self.options.metrics_port, self.options.metrics_address, self.probes
            )
        started = time.monotonic()
        session = self.spark()
        log(
            LOGGER,
            logging.INFO,
            "vacuum service started",
            service_id=self.service_id,
            group=self.group_id,
            tenant=self.settings.tenant,
            topic=self.topic,
            threads=self._threads,
            spark_master=session.sparkContext.master,
            spark_start_s=round(time.monotonic() - started, 1),
            metrics_port=self.options.metrics_port,
        )
        self.probes.stepped()
        self._consumer = self._new_consumer()
        try:
            self._consumer.subscribe(
                [self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
            )
            while not self._stop.is_set():
                self.step()
        finally:
            self._shutdown()

    def stop(self) -> None:
        """Ask :meth:`run` to return (safe from a signal handler or another thread)."""
        self._stop.set()

    def _new_consumer(self) -> Any:
        config: dict[str, Any] = consumer_config(self.settings.kafka, self.group_id)
        config.setdefault("client.id", f"acidclean-vacuum-service-{self.service_id}")
        # A vacuum may run for longer than the default 5 minutes between polls; the loop polls on,
        # so this only bounds a wedged loop.
        config.setdefault("max.poll.interval.ms", "600000")
        try:
            return Consumer(with_client_logger(config))
        except KafkaException as error:
            raise configuration_error(error, "consumer") from error

    def step(self) -> None:
        message = self._consumer.poll(0.2)
        if message is not None:
            self._route(message)
        self._drain_finished()
        self._dispatch()
        self._commit(asynchronous=True)
        self.probes.stepped()

    # -- records -----------------------------------------------------------------------------------

    def _route(self, message: Any) -> None:
        owned = self._partitions.owned_record(message, self._consumer_errors)
        if owned is None:
            return
        partition, state, offset = owned
        if state.seen_until is not None and offset < state.seen_until:
            return
        state.seen_until = offset + 1
        key = message.key() or b""
        if not key.startswith(self._tenant_prefix):
            self.metrics.skipped.labels("other_tenant").inc()
            return
        event = decode(raw_record(message), rejected_by=self.service_id, tenant=self.settings.tenant)
        if not isinstance(event, VacuumRequested | CleanupRejected):
            self.metrics.skipped.labels("other_event").inc()  # VacuumStarted, VacuumFailed: answers, not work
            return
        state.in_flight.add(offset)
        work = _Work(partition, offset, state.generation, event)
        self._lanes.setdefault(key.decode("utf-8", "replace"), deque()).append(work)

    def _dispatch(self) -> None:
        queued = 0
        for lane, works in list(self._lanes.items()):
            if not works:
                del self._lanes[lane]
                continue
            if lane in self._busy:
                queued += len(works)
                continue
            self._busy.add(lane)
            work = works.popleft()
            queued += len(works)
            self._pool.submit(self._run_work, lane, work)
        self.metrics.queued.set(queued)

    def _run_work(self, lane: str, work: _Work) -> None:
        handled: Handled | None = None
        if self._begin(work):
            self.metrics.running.inc()
            try:
                handled = self._handle(work)
            except BaseException as error:  # a bug: leave the request unanswered (run again later), say why
                log(
                    LOGGER,
                    logging.ERROR,
                    f"handling failed: {type(error).__name__}: {error}",
                    offset=work.offset,
                    partition_number=work.partition[1],
                )
            finally:
                self.metrics.running.dec()
                self._end(work)
        self._finished.put(_Finished(work, lane, handled))

    def _handle(self, work: _Work) -> Handled | None:
        event = work.event
        if isinstance(event, CleanupRejected):
            return self._dead_letter(event)
        handled = self.handler.handle(event)
        self.metrics.requests.labels(handled.outcome).inc()
        if handled.outcome == "failed":
            self.metrics.failures.labels(handled.reason_code or "error").inc()
        return handled

    def _dead_letter(self, rejected: CleanupRejected) -> Handled:
        log(
            LOGGER,
            logging.WARNING,
            f"dead-lettering a record of the requests topic: {rejected.reason}",
            reason_code=rejected.reason_code,
        )
        while True:
            try:
                self.handler_bus().publish(self.settings.topic("dead_letter"), rejected)
                self.metrics.skipped.labels("dead_lettered").inc()
                return Handled("answered", message="dead-lettered")
            except BusError as error:
                log(LOGGER, logging.WARNING, f"could not dead-letter, retrying: {error}")
                if self.stopping.wait(2.0):
                    return Handled("abandoned")

    def handler_bus(self) -> EventBus:
        bus: EventBus = self._clients.factory("bus", self._bus_factory)()
        return bus

    def _begin(self, work: _Work) -> bool:
        return self._partitions.begin(work.partition, work.generation)

    def _end(self, work: _Work) -> None:
        self._partitions.end(work.partition, work.generation)

    def _drain_finished(self) -> None:
        while True:
            try:
                item = self._finished.get_nowait()
            except queue.Empty:
                return
            self._busy.discard(item.lane)
            state = self._states.get(item.work.partition)
            if item.handled is None or not item.handled.answered:
                continue  # not answered: its offset stays uncommitted, the group runs it again
            if state is not None and state.generation == item.work.generation:
                state.in_flight.discard(item.work.offset)

    # -- offsets and rebalances --------------------------------------------------------------------

    def _commit(self, asynchronous: bool, only: list[Partition] | None = None, force: bool = False) -> None:
        # A failed commit only means those requests are looked at again (and found answered).
        error = self._partitions.commit(
            self._consumer, asynchronous=asynchronous, only=only, force=force, failing=(KafkaException,)
        )
        if isinstance(error, KafkaException):
            log(LOGGER, logging.WARNING, f"offset commit failed: {error.args[0].str()}")

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self.joined.set()
        take_assignment(consumer, partitions, self._assignment)
        consumer.resume([TopicPartition(p.topic, p.partition) for p in partitions])
        self._partitions.assign(partitions, _PartitionState)
        log(LOGGER, logging.INFO, "partitions assigned", partitions=[f"{p.topic}[{p.partition}]" for p in partitions])

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        revoked = [(p.topic, p.partition) for p in partitions]
        self._stop_accepting(revoked)
        self._wait_idle(revoked, self.options.revoke_timeout_s)
        self._commit(asynchronous=False, only=revoked, force=True)
        self._forget(revoked)
        log(LOGGER, logging.INFO, "partitions revoked", partitions=[f"{t}[{p}]" for t, p in revoked])

    def _on_lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self.joined.clear()
        lost = [(p.topic, p.partition) for p in partitions]
        self._stop_accepting(lost)
        self._forget(lost)
        log(LOGGER, logging.WARNING, "partitions lost", partitions=[f"{t}[{p}]" for t, p in lost])

    def _stop_accepting(self, partitions: list[Partition]) -> None:
        self._partitions.stop_accepting(partitions)
        wanted = set(partitions)
        for works in self._lanes.values():
            for work in [w for w in works if w.partition in wanted]:
                works.remove(work)

    def _forget(self, partitions: list[Partition]) -> None:
        self._partitions.forget(partitions)

    def _wait_idle(self, partitions: list[Partition], timeout_s: float) -> bool:
        """Let running requests of ``partitions`` finish; False if some still run after ``timeout_s``."""
        gave_up = "requests still running: left unanswered here, the group runs them again"
        return self._partitions.wait_idle(
            partitions, timeout_s, self._drain_finished, logger=LOGGER, gave_up=gave_up, poll_s=0.05
        )

    def _shutdown(self) -> None:
        """Stop taking requests, let running vacuums finish (bounded), commit, leave the group."""
        self.stopping.set()  # requests waiting for a busy key or a broker give up (unanswered)
        partitions = list(self._states)
        if self._consumer is not None and partitions:
            self._consumer.pause([TopicPartition(topic, number) for topic, number in partitions])
        self._stop_accepting(partitions)
        idle = self._wait_idle(partitions, self.settings.vacuum_service_shutdown_s)
        closed = threading.Event()

        def commit_and_leave() -> None:
            if self._consumer is not None:
                self._commit(asynchronous=False, force=True)
                self._consumer.close()
            closed.set()

        threading.Thread(target=commit_and_leave, name="vacuum-service-close", daemon=True).start()
        if not closed.wait(self.options.close_timeout_s) or not idle:
            self.abandoned_close = True
        self._pool.shutdown(wait=idle, cancel_futures=True)
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        if idle:
            self._close_clients()
        log(LOGGER, logging.INFO, "vacuum service stopped", service_id=self.service_id, left_running=not idle or None)

    def _close_clients(self) -> None:
        self._clients.close_all(
            lambda client, error: log(LOGGER, logging.WARNING, f"closing {type(client).__name__} failed: {error}")
        )
