"""One process of the cleaner consumer group, assembled from settings.

:class:`CleanerProcess` wires the pieces: a consumer of the vacuum and delay topics in the tenant's group,
the loop (:mod:`acidclean.consumers.loop`), the handler (:mod:`acidclean.consumers.handler`), one
metastore client and one idempotent producer per worker thread, a pool of
``hive.compaction-cleanup-threads`` workers for tables and another as many for deletes, and the
Prometheus endpoint with the probes (``/healthz``: the loop steps; ``/readyz``: the group joined, the
broker and a metastore reachable). SIGTERM and SIGINT stop it gracefully.

Tenants. A process works for exactly one tenant (``--tenant``). It joins the group
``<group>.<tenant>`` and skips records whose key belongs to another tenant, so tenants may share
topics (or use their own ``topic_prefix``); giving every tenant its own group guarantees a skipped
record is always some other group's to handle. It deletes only under that tenant's allowed roots and
refuses to start without any.

A dry run (``--dry-run``) joins ``<group>.<tenant>.dry-run`` (it never takes events from the real
cleaners), deletes nothing, publishes ``CleanupDone`` with ``dry_run=true`` listing what it would
remove, and only logs the delays and dead letters it would publish.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

from confluent_kafka import Consumer, KafkaException

from acidclean.consumers.crash_points import CrashPoints, NoCrashes
from acidclean.consumers.handler import CleanupHandler
from acidclean.consumers.logs import log
from acidclean.consumers.loop import CleanerLoop
from acidclean.consumers.loop_config import ConsumerLike, LoopConfig
from acidclean.consumers.metrics import CleanerMetrics, Probes
from acidclean.consumers.rules.paths import TenantRoots
from acidclean.consumers.work import CleanerMetastore, CleanerTopics, HandlerConfig, StorageLocationLike
from acidclean.shared.bus.consumer import assignment_of, consumer_config
from acidclean.shared.bus.producer import KafkaEventBus
from acidclean.shared.bus.protocol import EventBus
from acidclean.shared.bus.topics import ensure_topics
from acidclean.shared.clients import PerThreadClients
from acidclean.shared.errors import ConfigurationError, UnsafePathError
from acidclean.shared.gc_tuning import tune_for_throughput
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.memory_release import MemoryReleaser, keep_large_blocks_out_of_the_heap
from acidclean.shared.probes import CONSUMER_ONLY_PREFIXES, broker_check, metastore_check_for
from acidclean.shared.settings import Settings
from acidclean.shared.storage import open_location
from acidclean.shared.storage.trash import TrashPolicy
from acidclean.shared.thread_switching import shorten_thread_switches

LOGGER = logging.getLogger("acidclean.cleaner")
CLEANER_TOPICS = ("vacuum_committed", "cleanup_delay", "cleanup_done", "dead_letter", "cleanup_ledger")


def cleaner_consumer_config(kafka: Mapping[str, str], group_id: str, cleaner_id: str) -> dict[str, Any]:
    """The cleaner's Kafka consumer settings: ``kafka`` (which wins) over the cleaner's defaults."""
    config: dict[str, Any] = consumer_config(kafka, group_id)
    config.setdefault("client.id", f"acidclean-cleaner-{cleaner_id}")
    # librdkafka prefetches up to 64 MB per consumer by default: a backlog of waiting vacuums would fill it.
    config.setdefault("queued.max.messages.kbytes", "16384")
    # Once that queue is full, librdkafka waits fetch.queue.backoff.ms (1 s by default) before it
    # fetches the partition again: with bundles of up to 512 KB it fills often, and a delay partition
    # resumed meanwhile had its records read 100-440 ms after their due time.
    config.setdefault("fetch.queue.backoff.ms", "20")
    # A new vacuum or a resumed delay partition should not wait for a 500 ms fetch long-poll.
    config.setdefault("fetch.wait.max.ms", "100")
    return config


@dataclass(frozen=True)
class CleanerOptions:
    """Process options that are not settings of the product."""

    dry_run: bool = False
    metrics_port: int | None = None
    metrics_address: str = "0.0.0.0"
    cleaner_id: str | None = None
    crash_points: CrashPoints = field(default_factory=NoCrashes)  # tests of rule 5: ACIDCLEAN_CRASH_AT
    batch_size: int = 500
    create_topics: bool = True
    batch_tables: int = 200  # tables (lanes) one worker handles together
    # The collector tuned for throughput after start-up, and freed memory given back to the system
    # every 10 s with blocks of 128 KB and more never kept in the C heaps (the command does both; a
    # process hosting cleaners among other work, such as a test session, keeps Python's defaults).
    tune_gc: bool = False
    release_memory: bool = False
    # The GIL handed to a waiting thread after 1 ms instead of 5 (acidclean.shared.thread_switching):
    # the command does it; a process hosting cleaners among other work keeps Python's default.
    short_thread_switches: bool = False


def producer_settings(kafka: dict[str, str]) -> dict[str, str]:
    """The Kafka settings without consumer-only properties, for the cleaner's producers."""
    return {key: value for key, value in kafka.items() if not key.startswith(CONSUMER_ONLY_PREFIXES)}


BUNDLE_PARTS = frozenset({"whole_carries", "summaries", "unread", "gather", "riders"})


def bundle_parts_off(text: str) -> frozenset[str]:
    """The parts of the bundle machinery ``cleanup_bundle_parts_off`` switches off (for measurement)."""
    parts = frozenset(part.strip() for part in text.split(",") if part.strip())
    unknown = parts - BUNDLE_PARTS
    if unknown:
        raise ConfigurationError(
            f"cleanup_bundle_parts_off names unknown parts {sorted(unknown)}: use some of {sorted(BUNDLE_PARTS)}"
        )
    return parts


def cleaner_group_id(settings: Settings, dry_run: bool = False) -> str:
    """The consumer group of a tenant's cleaners."""
    return f"{settings.group_id}.{settings.tenant}" + (".dry-run" if dry_run else "")


def default_cleaner_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class CleanerProcess:
    """A cleaner process: build it, then :meth:`run` until SIGTERM or :meth:`stop`."""

    def __init__(
        self,
        settings: Settings,
        options: CleanerOptions | None = None,
        *,
        metastore_factory: Callable[[], CleanerMetastore] | None = None,
        bus_factory: Callable[[], EventBus] | None = None,
        open_storage: Callable[[str], StorageLocationLike] = open_location,
        consumer: ConsumerLike | None = None,
        metrics: CleanerMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.options = options or CleanerOptions()
        self.cleaner_id = self.options.cleaner_id or default_cleaner_id()
        self.group_id = cleaner_group_id(settings, self.options.dry_run)
        self.metrics = metrics or CleanerMetrics()
        if not settings.allowed_roots.get(settings.tenant):
            raise ConfigurationError(
                f"tenant {settings.tenant!r} has no allowed roots, so the cleaner could delete nothing safely; set "
                f'allowed_roots (e.g. ACIDCLEAN_ALLOWED_ROOTS=\'{{"{settings.tenant}": ["hdfs://nn/warehouse"]}}\')'
            )
        try:
            roots = TenantRoots.build(settings.tenant, settings.allowed_roots, os.path.realpath)
        except UnsafePathError as error:
            raise ConfigurationError(f"invalid allowed root: {error}") from error
        self.topics = CleanerTopics(*(settings.topic(name) for name in CLEANER_TOPICS))
        if self.options.create_topics:
            ensure_topics(settings, CLEANER_TOPICS, group=self.group_id)

        self._clients = PerThreadClients()
        self._metastore_factory = metastore_factory or (lambda: HiveMetastore.from_settings(settings))
        self._bus_factory = bus_factory or (
            lambda: KafkaEventBus(
                producer_settings(settings.kafka),
                source=f"/acidclean/cleaner/{self.cleaner_id}",
                delivery_timeout_s=15.0,
                total_timeout_s=30.0,
            )
        )
        threads = settings.cleanup_threads
        self._lane_pool = ThreadPoolExecutor(threads, thread_name_prefix="cleaner-table")
        self._delete_pool = ThreadPoolExecutor(threads, thread_name_prefix="cleaner-delete")
        self._ack_pool = ThreadPoolExecutor(threads, thread_name_prefix="cleaner-ack")
        parts_off = bundle_parts_off(settings.cleanup_bundle_parts_off)
        self.handler = CleanupHandler(
            HandlerConfig(
                tenant=settings.tenant,
                cleaner_id=self.cleaner_id,
                interval_ms=settings.cleanup_interval_ms,
                max_wait_s=settings.max_wait_s,
                topics=self.topics,
                dry_run=self.options.dry_run,
                wait_for_open_txns=settings.cleanup_waits_for_open_txns,
                bundle_min=settings.cleanup_bundle_min,
                bundle_compressed=settings.cleanup_bundle_compression == "zlib",
                parts_off=parts_off,
                trash=TrashPolicy(
                    settings.cleanup_trash, settings.cleanup_trash_root or None, settings.cleanup_trash_interval_min
                ),
            ),
            metastore=self._clients.factory("metastore", self._metastore_factory),
            bus=self._clients.factory("bus", self._bus_factory),
            open_storage=open_storage,
            roots=roots,
            metrics=self.metrics,
            delete_pool=self._delete_pool,
            delete_threads=threads,
            crash_points=self.options.crash_points,
        )
        loop_config = LoopConfig(
            vacuum_topic=self.topics.vacuum_committed,
            delay_topic=self.topics.cleanup_delay,
            tenant=settings.tenant,
            cleaner_id=self.cleaner_id,
            interval_ms=settings.cleanup_interval_ms,
            batch_size=self.options.batch_size,
            error_tries=settings.cleanup_error_tries,
            workers=threads,
            batch_tables=self.options.batch_tables,
            gather_ms=0 if "gather" in parts_off else settings.cleanup_bundle_spread_ms,
            bundle_riders="riders" not in parts_off,
            group_id=self.group_id,
            assignment=assignment_of(settings.kafka),
        )
        # A step blocks at most half a second polling, longer only while a rebalance waits for the
        # in-flight work of revoked partitions: twice that wait without a step is a wedged loop.
        self.probes = Probes(stale_after_s=max(60.0, 2 * loop_config.revoke_timeout_s))
        self.loop = CleanerLoop(
            consumer or self._consumer(),
            self.handler,
            loop_config,
            executor=self._lane_pool,
            metrics=self.metrics,
            on_step=self.probes.stepped,
            ack_executor=self._ack_pool,
        )
        self._stopping = False
        self._http: Any = None
        self._releaser: MemoryReleaser | None = None
        self._consumer_given = consumer is not None
        self._broker_check = broker_check(settings.kafka, self.topics.vacuum_committed)
        metastore = metastore_check_for(settings)
        for check in (self._check_running, self._check_group, self._check_broker, metastore):
            self.probes.add_check(check)

    def _check_running(self) -> str | None:
        return "stopping" if self._stopping else None

    def _check_group(self) -> str | None:
        if self.loop.joined.is_set():
            return None
        return f"not in consumer group {self.group_id} yet: no partition assignment received"

    def _check_broker(self) -> str | None:
        if self._consumer_given:  # a test's fake consumer: no broker
            return None
        return self._broker_check()

    def _consumer(self) -> ConsumerLike:
        config = cleaner_consumer_config(self.settings.kafka, self.group_id, self.cleaner_id)
        config["on_commit"] = lambda error, partitions: self.loop.on_commit(error, partitions)
        config["logger"] = logging.getLogger("acidclean.kafka")  # librdkafka's own logs, as JSON lines
        try:
            return cast(ConsumerLike, Consumer(config))
        except KafkaException as error:
            raise ConfigurationError(f"invalid Kafka consumer settings: {error.args[0].str()}") from error

    def run(self) -> None:
        """Consume until stopped; on SIGTERM/SIGINT (when run on the main thread) stop gracefully."""
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, lambda *_: self.stop())
        if self.options.metrics_port is not None:
            self._http = self.metrics.serve(self.options.metrics_port, self.options.metrics_address, self.probes)
        log(
            LOGGER,
            logging.INFO,
            "cleaner started",
            cleaner_id=self.cleaner_id,
            group=self.group_id,
            tenant=self.settings.tenant,
            topics=[self.topics.vacuum_committed, self.topics.cleanup_delay],
            threads=self.settings.cleanup_threads,
            interval_ms=self.settings.cleanup_interval_ms,
            dry_run=self.options.dry_run or None,
            metrics_port=self.options.metrics_port,
        )
        self._warm_up()
        if self.options.tune_gc:
            tune_for_throughput()  # after start-up: what is alive now lives as long as the process
        if self.options.release_memory:
            keep_large_blocks_out_of_the_heap()
            self._releaser = MemoryReleaser().start()
        if self.options.short_thread_switches:
            shorten_thread_switches()
        self.probes.stepped()  # liveness counts from the loop's start: warm-up takes up to 10 s a thread
        try:
            self.loop.run()
        finally:
            self.close()

    def _warm_up(self, timeout_s: float = 10.0) -> None:
        """Start every table worker and open its metastore connection and producer now, and every ack
        thread and its producer, so the first vacuums do not pay for connection set-up and the
        idempotent producer's id request."""
        threads = self.settings.cleanup_threads
        futures = []
        for pool, metastore in ((self._lane_pool, True), (self._ack_pool, False)):
            barrier = threading.Barrier(threads, timeout=timeout_s)

            def warm(barrier: threading.Barrier = barrier, metastore: bool = metastore) -> None:
                try:
                    barrier.wait()  # holds each thread so the pool has to start all of them
                except threading.BrokenBarrierError:
                    return
                self.handler.warm_up(metastore=metastore)

            futures += [pool.submit(warm) for _ in range(threads)]
        for future in futures:
            try:
                future.result(timeout_s)
            except Exception as error:  # a metastore down at start-up is not fatal: checks fail closed
                log(LOGGER, logging.WARNING, f"warm-up: {type(error).__name__}: {error}")

    def stop(self) -> None:
        self._stopping = True
        self.loop.stop()

    def close(self) -> None:
        if self._releaser is not None:
            self._releaser.stop()
            self._releaser = None
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        self._lane_pool.shutdown(wait=True, cancel_futures=True)
        self._ack_pool.shutdown(wait=True, cancel_futures=True)
        self._delete_pool.shutdown(wait=True, cancel_futures=True)
        self._clients.close_all(
            lambda client, error: log(LOGGER, logging.WARNING, f"closing {type(client).__name__} failed: {error}")
        )
