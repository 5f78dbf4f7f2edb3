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
from collections.abc import Callable
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from acidclean.producers.hive_queue.own_requests import enter_in_hive_queue
from acidclean.producers.initiator.core import InitiatorCore
from acidclean.producers.initiator.deciding import RETRY_S, KeyDecider
from acidclean.producers.initiator.delta_intake import DeltaIntake
from acidclean.producers.initiator.lifecycle_tail import LifecycleTail
from acidclean.producers.initiator.metrics import InitiatorMetrics
from acidclean.producers.initiator.requesting import Requester
from acidclean.producers.initiator.sweep import Sweep, key_partition
from acidclean.schemas.events import VacuumRequested
from acidclean.shared.acid.state import Listing
from acidclean.shared.bus.consumer import ConsumerErrors, make_consumer
from acidclean.shared.bus.producer import KafkaEventBus
from acidclean.shared.bus.topics import ensure_topics
from acidclean.shared.hive4_queue.queue import HiveCompactionQueue
from acidclean.shared.logs import log as log_fields
from acidclean.shared.probes import Probes, broker_check, metastore_check_for, serve_http
from acidclean.shared.settings import Settings

__all__ = [
    "INITIATOR_TOPICS",
    "InitiatorMetrics",
    "InitiatorOptions",
    "InitiatorProcess",
    "initiator_group_id",
    "key_partition",
]

log = logging.getLogger("acidclean.initiator")

INITIATOR_TOPICS = ("delta_committed", "vacuum_requests", "vacuum_committed", "cleanup_done", "dead_letter")
LAG_REFRESH_S = 5.0


def initiator_group_id(settings: Settings) -> str:
    """The consumer group of a tenant's initiators."""
    return f"{settings.initiator_group_id}.{settings.tenant}"


@dataclass
class InitiatorOptions:
    initiator_id: str | None = None
    metrics_port: int | None = None


class InitiatorProcess:
    """One initiator: ``run()`` until ``stop()`` (SIGTERM, SIGINT). Its parts: the lifecycle tail, the
    delta intake and its offsets, the decision of a key and its request, the sweep."""

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
        self.core = InitiatorCore()
        self.metrics = InitiatorMetrics()
        self._clock = clock
        self._stop = False
        self._retry_at: dict[str, float] = {}
        self._next_lag = clock()
        self._topic = {name: settings.topic(name) for name in INITIATOR_TOPICS}
        self.bus: KafkaEventBus | None = None
        self.lifecycle = LifecycleTail(settings, self.core, self._topic, self.initiator_id, clock)
        self.deltas = DeltaIntake(settings.tenant, self.core, self.initiator_id, ConsumerErrors(log, self.group_id))
        requester = Requester(
            settings.tenant, self.initiator_id, self.core, self.metrics, self._publish, self.deltas.first_seen
        )
        self.decider = KeyDecider(
            settings,
            self.core,
            self.metrics,
            requester,
            self.deltas.locations,
            lister=lister,
            metastore=metastore,
            clock=clock,
        )
        self.sweep = Sweep(settings, self.core, self.deltas, self.lifecycle, self.decider, clock)
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
        self.probes.add_check(broker_check(settings.kafka, self._topic["delta_committed"]))

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
        self.deltas.partitions = self.lifecycle.open()
        consumer = make_consumer(self.settings.kafka, self.group_id)
        self.deltas.consumer = consumer
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
            thresholds=str(self.decider.defaults),
            sweep_interval_s=self.settings.initiator_sweep_interval_s,
        )
        try:
            while not self._stop:
                self.step()
        finally:
            self.close()

    def close(self) -> None:
        if self.deltas.consumer is not None:
            try:
                self.deltas.commit()
                self.deltas.consumer.close()
            except KafkaException as error:
                log.warning("initiator could not leave its group cleanly: %s", error)
            self.deltas.consumer = None
        self.lifecycle.close()
        if self.bus is not None:
            self.bus.close()
            self.bus = None
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()

    def step(self) -> None:
        """One turn: read the lifecycle tail, a batch of deltas, decide dirty keys, sweep a table."""
        assert self.deltas.consumer is not None
        self.lifecycle.read(timeout_s=0.0)
        messages = self.deltas.consumer.consume(500, timeout=0.2)
        for message in messages:
            self.deltas.read(message)
        self._decide_dirty("event")
        if self.settings.initiator_sweep_interval_s > 0:
            self.sweep.step()
        self.deltas.commit()
        if self._clock() >= self._next_lag:
            self._refresh_lag()
        self.probes.stepped()

    def caught_up(self) -> bool:
        return self.lifecycle.caught_up()

    # the group's callbacks -------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._joined = True
        self.deltas.assigned(partitions)
        self.lifecycle.set_barrier()
        log_fields(log, logging.INFO, "partitions assigned", partitions=sorted(self.deltas.owned))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.deltas.revoked(partitions)

    # deciding --------------------------------------------------------------------------------------

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
            partition = self.deltas.key_partition.get(key)
            owned = partition is not None and partition in self.deltas.owned
            if owned and not caught_up:
                continue  # decided once the tail has caught up
            if self.core.may_request(key, owned=owned, caught_up=caught_up) and not self.decider.evaluate(key, trigger):
                self._retry_at[key] = now + RETRY_S  # the metastore or storage failed: its offsets wait
                continue
            self._retry_at.pop(key, None)
            self.core.dirty.discard(key)
            self.deltas.decided(key)

    def _publish(self, request: VacuumRequested) -> VacuumRequested | None:
        """Publish ``request`` (returns once acknowledged), or, with ``hive_queue_initiator_requests``,
        enter it in Hive's compaction queue for `acidclean hive-queue` to publish (issue 53): the request
        as entered, or None when Hive's queue already holds an entry of this key, which serves it."""
        assert self.bus is not None
        if self.settings.hive_queue_initiator_requests:
            pool = self.settings.hive_queue_pool
            return self.decider.call(  # type: ignore[no-any-return]
                "compact2", lambda m: enter_in_hive_queue(HiveCompactionQueue(m), request, pool)
            )
        self.bus.publish(self._topic["vacuum_requests"], request)
        return request

    # metrics ---------------------------------------------------------------------------------------

    def _refresh_lag(self) -> None:
        self._next_lag = self._clock() + LAG_REFRESH_S
        self.metrics.keys.set(len(self.core.figures))
        self.metrics.in_flight.set(len(self.core.in_flight.keys_in_flight()))
        consumer = self.deltas.consumer
        if consumer is None:
            return
        try:
            lag = 0
            assigned = consumer.assignment()
            for tp in consumer.position(assigned):
                low, high = consumer.get_watermark_offsets(tp, timeout=2, cached=False)
                position = tp.offset if tp.offset >= 0 else low
                lag += max(0, int(high) - int(position))
            self.metrics.lag.set(lag)
        except KafkaException as error:
            log.debug("lag not refreshed: %s", error)
