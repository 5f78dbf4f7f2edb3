"""The cleaner's consumer loop: two topics, delayed records, lanes per table, offsets after acks.

One consumer reads the vacuum topic and the delay topic. A vacuum is due at once; a delay envelope is
due at its ``x-due-at``. The loop never sleeps: it polls with a timeout set by the earliest paused
head (never longer than half a second, far below ``max.poll.interval.ms``), waking on the first
record that arrives.

Delay records. When a partition's next record is not yet due, it is held in memory, and so are the
records fetched after it: the fetch goes on, so the records written while the head waits are in hand
when they come due (they are checked the moment they are due instead of one fetch later). Each held
record is handed over at its own due time, even before a record ahead of it that is due later (many
writers make a partition's due times a little out of order), except that a table's records go in
offset order. The committed offset never passes a held record. At most ``held_per_partition`` records (and
``held_bytes``) are kept: then the partition is paused, the records after them are left unread (not
decoded, not counted as seen) and fetched again once half the read-ahead is free, so memory does not
grow with the number of waiting vacuums. Likewise, once ``max_queued`` records are handed over and
not finished (a cleaner that cannot keep up, counting those queued in the lanes and those running), a
partition is paused at its next record and resumed when half of them are finished.
Nothing is handed over before its due time. A due record of one table alone waits up to ``gather_ms``
(the bundle spread) for the partition's others due within it, so records written a little apart are
checked in one batch and go on in one bundle.

Lanes and batches. Handed-over records are queued per table ("lane"); one table is never cleaned by
two threads at once, while other tables proceed in parallel. Free lanes are dealt, oldest first, to
at most ``workers`` batches at a time, one batch per worker thread, each taking one worker's share
of the lanes ready (their number over ``workers``, at most ``batch_tables``): tables that arrive
together are spread over the threads, not queued behind one of them while the others idle. A
batch asks the metastore once for all its tables (one unfiltered ``show_locks``, one transaction list),
announces the cleanups it planned in one ``publish_many`` before any of their deletes, deletes
through the shared delete pool (directories of different tables overlap), and publishes every outcome
(``CleanupDone``, delay envelopes, dead letters) in one more ``publish_many`` with one wait for the
acknowledgements (on the ack executor when there is one: the worker goes on to the next batch while
the broker answers, and the batch's lanes stay busy until it has). Only then are its records
finished, so offsets still move only past acknowledged outcomes; a crash in between gives
duplicates (every handler is idempotent), never a loss. A lane's events run in order: a lane's next
event starts only after its previous cleanup's deletes.

Offsets. Per partition, the committable offset is the lowest record not yet done (handed over, held,
or running); it is committed only after the outcomes of every record below it were acknowledged.
A record whose outcome could not be published (``BusError``) rewinds its partition to the lowest
unfinished offset (pause, seek, retry after one interval): its offset must not be committed.

Poison. Any other error of the handler is a fault of the event or of the handler, which retrying the
whole partition would only repeat: the record is tried ``error_tries`` times in place (a short pause
between tries), then sent to the dead-letter topic naming the event and the error, and its offset
advances. A delay envelope due further ahead than a few intervals (clock skew, a bad record) is
clamped to one interval from now when read, with a warning, instead of holding its whole partition;
the re-check asks the metastore, so checking early is never unsafe.

Rebalances. Per-partition state has a generation. On revoke, records not yet started are abandoned,
running ones finish, finished offsets are committed, and the state is dropped; on loss nothing is
committed; on assign every partition is explicitly resumed (librdkafka may keep a pause across a
revoke/assign) and starts a new generation, so late completions from an earlier ownership are
ignored and no offset is ever committed for a partition this process does not own.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Any, Protocol

from confluent_kafka import KafkaError, TopicPartition

from acidclean.consumers.assignment import LopsidedWatch, partitions_by_topic
from acidclean.consumers.batch_runner import BatchFree, BatchRunner, Finished, LaneFree
from acidclean.consumers.bundles import WaitingBundle
from acidclean.consumers.handler import CleanupHandler
from acidclean.consumers.intake import Intake
from acidclean.consumers.joiners import Joiners
from acidclean.consumers.lanes import Lanes
from acidclean.consumers.logs import log
from acidclean.consumers.loop_config import ConsumerLike, LoopConfig
from acidclean.consumers.loop_gauges import LoopGauges
from acidclean.consumers.metrics import CleanerMetrics
from acidclean.consumers.partition_state import (
    PartitionState,
)
from acidclean.consumers.scheduling import poll_timeout_s
from acidclean.consumers.waiting import WaitingGroup
from acidclean.schemas.events import CleanupRejected
from acidclean.shared.bus.consumer import ConsumerErrors, take_assignment
from acidclean.shared.bus.partitions import OwnedPartitions

LOGGER = logging.getLogger("acidclean.cleaner")
Partition = tuple[str, int]


class MillisClock(Protocol):
    def now_ms(self) -> int: ...


class SystemMillisClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class CleanerLoop:
    """Runs the cleaner over a consumer; :meth:`step` is one iteration, :meth:`run` loops until stopped."""

    def __init__(
        self,
        consumer: ConsumerLike,
        handler: CleanupHandler,
        config: LoopConfig,
        *,
        executor: Executor,
        metrics: CleanerMetrics,
        clock: MillisClock | None = None,
        on_step: Callable[[], None] = lambda: None,
        ack_executor: Executor | None = None,
    ) -> None:
        self.consumer = consumer
        self._on_step = on_step  # told after every step: the liveness probe
        self.joined = threading.Event()  # an assignment arrived since the last loss: the readiness probe
        self.handler = handler
        self.config = config
        self._executor = executor
        self._metrics = metrics
        self._clock = clock or SystemMillisClock()
        self._partitions: OwnedPartitions[PartitionState] = OwnedPartitions()
        self._states = self._partitions.states
        self.lanes = Lanes()
        self._gauges = LoopGauges(self._states, self._clock, config.interval_ms)
        self.joiners = Joiners(
            config,
            self._states,
            lambda: getattr(self.handler, "chain_due", {}),
            self._gauges.note_pending,
            self.lanes.enqueue,
        )
        self._finished: queue.Queue[Finished | LaneFree | BatchFree] = queue.Queue()
        self._runner = BatchRunner(
            handler,
            config,
            self._partitions,
            self._finished,
            metrics=metrics,
            clock=self._clock,
            ack_executor=ack_executor,
        )
        self._running_batches = 0
        self._stop = threading.Event()
        # Partitions of one topic owned and none of the other, since when (the loop's clock), warned yet.
        self._lopsided = LopsidedWatch(config.group_id, config.assignment)
        self._consumer_errors = ConsumerErrors(LOGGER, config.group_id, clock_s=lambda: self._clock.now_ms() / 1000)
        self.abandoned_close = False  # the broker did not answer the final commit and group leave
        self.intake = Intake(
            consumer, config, self._partitions, self.lanes, self.joiners, self._gauges, metrics, self._consumer_errors
        )
        metrics.bind(
            paused=self.paused_count,
            held=self.held_bytes,
            oldest_pending=self.oldest_pending_s,
            overdue=self.overdue_s,
            stuck=lambda: float(handler.stuck_count(max(60.0, 3 * config.interval_ms / 1000))),
        )

    # -- running -----------------------------------------------------------------------------------

    def subscribe(self) -> None:
        self.consumer.subscribe(
            [self.config.vacuum_topic, self.config.delay_topic],
            on_assign=self.on_assign,
            on_revoke=self.on_revoke,
            on_lost=self.on_lost,
        )

    def run(self) -> None:
        """Loop until :meth:`stop`; then finish or abandon in-flight work, commit, leave the group."""
        self.subscribe()
        try:
            while not self._stop.is_set():
                self.step()
        finally:
            self.shutdown()

    def stop(self) -> None:
        """Ask :meth:`run` to return (safe from a signal handler or another thread)."""
        self._stop.set()

    def step(self) -> None:
        now = self._clock.now_ms()
        self.intake.resume_backlogged()
        self.intake.release_due(now)
        self._dispatch_lanes()
        timeout = poll_timeout_s(now, self.intake.next_due_ms(), busy=self._busy())
        messages = self._fetch(timeout)
        now = self._clock.now_ms()
        for message in messages:
            self.intake.route(message, now)
        self.intake.release_due(self._clock.now_ms())
        self._drain_finished()
        self._dispatch_lanes()
        self._commit(asynchronous=True)
        self._lopsided.warn_if_lasting(now)
        self._on_step()

    def _fetch(self, timeout: float) -> list[Any]:
        """Wait at most ``timeout`` for the first record, then take what is already fetched.

        ``consume(n, timeout)`` alone would not do: librdkafka blocks for the whole timeout unless n
        records arrive, so a record fetched right after a resume would wait out the timeout.
        """
        first = self.consumer.poll(timeout)
        if first is None:
            return []
        return [first, *(self.consumer.consume(self.config.batch_size - 1, 0) or ())]

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Stop fetching, let running work finish (abandon what has not started), commit, close."""
        partitions = [TopicPartition(topic, number) for topic, number in self._states]
        if partitions:
            self.consumer.pause(partitions)
        self._partitions.stop_accepting(list(self._states))
        self._wait_idle(list(self._states), timeout_s)
        closed = threading.Event()

        def commit_and_leave() -> None:
            self._commit(asynchronous=False, force=True)
            self.consumer.close()  # leaves the group; the revoke callback finds nothing left to do
            closed.set()

        # A synchronous commit and a group leave wait for the broker without a time limit: a broker that
        # is gone must not keep a stopped cleaner alive. Uncommitted records are only handled again.
        threading.Thread(target=commit_and_leave, name="cleaner-close", daemon=True).start()
        if not closed.wait(self.config.close_timeout_s):
            self.abandoned_close = True
            log(
                LOGGER,
                logging.WARNING,
                f"the broker did not take the final offset commit and group leave within "
                f"{self.config.close_timeout_s:.0f} s; stopping anyway: the records since the last commit will "
                "be handled again (at least once, and every handler is idempotent)",
                cleaner_id=self.config.cleaner_id,
            )
            return
        log(LOGGER, logging.INFO, "cleaner stopped", cleaner_id=self.config.cleaner_id)

    def _busy(self) -> bool:
        return self.lanes.busy()

    def _dispatch_lanes(self) -> None:
        """Deal the free lanes to the idle workers (:meth:`Lanes.deal`), one batch per worker."""
        workers = max(1, self.config.workers)
        for batch in self.lanes.deal(workers, workers - self._running_batches, self.config.batch_tables):
            self._running_batches += 1
            self._metrics.batch_tables.observe(len(batch))
            self._executor.submit(self._runner.run_batch, batch)

    def _drain_finished(self) -> None:
        while True:
            try:
                item = self._finished.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, BatchFree):
                self._running_batches -= 1
                continue
            if isinstance(item, LaneFree):
                self.lanes.free(item.lane)
                continue
            self._finish(item)

    def _finish(self, item: Finished) -> None:
        work = item.work
        state = self._states.get(work.partition)
        current = state is not None and state.generation == work.generation
        self.joiners.finished(work, current)
        if item.error is not None:
            log(
                LOGGER,
                logging.ERROR,
                f"outcome not acknowledged, will retry: {type(item.error).__name__}: {item.error}",
                topic=work.record.topic,
                partition_number=work.record.partition,
                offset=work.offset,
                event_id=getattr(work.event, "event_id", None),
            )
            if current and state is not None and state.accepting:
                self._rewind(work.partition, state)
            return
        if item.outcome is None or not current or state is None:
            return
        if item.outcome.kind == "rejoined":  # rode with a bundle that did not take it in: its own lane next
            if state.accepting:
                self.lanes.enqueue(work)
            return
        state.in_flight.discard(work.offset)
        state.tracked.pop(work.offset, None)
        if item.outcome.kind in ("cleaned", "table_dropped", "dead_lettered", "dry_run", "dropped") and not isinstance(
            work.event, CleanupRejected | WaitingGroup | WaitingBundle
        ):
            self._gauges.forget_lane(work.lane)

    def _rewind(self, partition: Partition, state: PartitionState) -> None:
        """Re-read a partition from its lowest unfinished offset after one interval."""
        offset = state.committable()
        topic, number = partition
        self._partitions.renew_generation(state)
        state.in_flight.clear()
        state.joiners = 0
        state.held.clear()
        state.held_bytes = 0
        state.held_keys.clear()
        self.joiners.purge({partition})
        state.dropping = state.backlogged = state.reading_ahead = False
        state.seen_until = offset
        state.paused_until_ms = self._clock.now_ms() + (self.config.retry_backoff_ms or self.config.interval_ms)
        self.consumer.pause([TopicPartition(topic, number)])
        if offset is not None:
            self.consumer.seek(TopicPartition(topic, number, offset))

    def _commit(self, asynchronous: bool, only: Sequence[Partition] | None = None, force: bool = False) -> None:
        """Commit what moved (:meth:`OwnedPartitions.commit`)."""
        error = self._partitions.commit(self.consumer, asynchronous=asynchronous, only=only, force=force)
        if error is not None:  # a failed commit only means the records will be processed again
            self._metrics.commit_failures.inc()
            log(LOGGER, logging.WARNING, f"offset commit failed (records will be processed again): {error}")

    def on_commit(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """Kafka's commit callback: forget what failed so the next loop commits it again."""
        if error is None and not any(p.error for p in partitions):
            return
        self._metrics.commit_failures.inc()
        self._partitions.commit_failed(partitions, only_if_sent=True)
        log(LOGGER, logging.WARNING, f"asynchronous offset commit failed: {error}")

    def on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self.joined.set()  # cooperative-sticky calls it after every join, with no partitions too
        take_assignment(self.consumer, partitions, self.config.assignment)
        # A partition paused under an earlier ownership may come back still paused: clear it.
        self.consumer.resume([TopicPartition(p.topic, p.partition) for p in partitions])
        self._partitions.assign(partitions, lambda generation: PartitionState(generation=generation))
        self._metrics.rebalances.labels("assigned").inc(len(partitions))
        self._note_assignment()
        log(LOGGER, logging.INFO, "partitions assigned", partitions=[f"{p.topic}[{p.partition}]" for p in partitions])

    def on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        revoked = [(p.topic, p.partition) for p in partitions]
        self._partitions.stop_accepting(revoked)
        self._purge_lanes(set(revoked))
        self._wait_idle(revoked, self.config.revoke_timeout_s)
        self._commit(asynchronous=False, only=revoked, force=True)
        self._forget(revoked)
        self._metrics.rebalances.labels("revoked").inc(len(partitions))
        self._note_assignment()
        log(LOGGER, logging.INFO, "partitions revoked", partitions=[f"{p.topic}[{p.partition}]" for p in partitions])

    def on_lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self.joined.clear()  # out of the group until the next assignment
        lost = [(p.topic, p.partition) for p in partitions]
        self._partitions.stop_accepting(lost)
        self._purge_lanes(set(lost))
        self._forget(lost)  # other members may own them already: commit nothing
        self._metrics.rebalances.labels("lost").inc(len(partitions))
        self._note_assignment()
        log(LOGGER, logging.WARNING, "partitions lost", partitions=[f"{p.topic}[{p.partition}]" for p in partitions])

    def _purge_lanes(self, partitions: set[Partition]) -> None:
        strays = self.lanes.purge(partitions)
        self.joiners.purge(partitions)
        for work in strays:  # riders whose bundle went with its partition: checked in their own lanes
            self.joiners.stray(work)
            self.lanes.enqueue(work)

    def _note_assignment(self) -> None:
        """Count the partitions owned per topic (a gauge), and note since when they are lopsided."""
        counts = partitions_by_topic(self._states.keys(), [self.config.vacuum_topic, self.config.delay_topic])
        for topic, owned in counts.items():
            self._metrics.assigned_partitions.labels(topic).set(owned)
        self._lopsided.note(counts, self._clock.now_ms())

    def _forget(self, partitions: Sequence[Partition]) -> None:
        self._partitions.forget(partitions)

    def _wait_idle(self, partitions: Sequence[Partition], timeout_s: float) -> None:
        """Let work already running on ``partitions`` finish (its outcome then counts for the commit)."""
        gave_up = "gave up waiting for running work; it will be processed again"
        self._partitions.wait_idle(
            partitions, timeout_s, self._drain_finished, logger=LOGGER, gave_up=gave_up, poll_s=0.01
        )

    # -- gauges ------------------------------------------------------------------------------------

    def paused_count(self) -> float:
        return self._gauges.paused_count()

    def held_bytes(self) -> float:
        return self._gauges.held_bytes()

    def oldest_pending_s(self) -> float:
        return self._gauges.oldest_pending_s()

    def overdue_s(self) -> float:
        return self._gauges.overdue_s()

    @property
    def states(self) -> dict[Partition, PartitionState]:
        return self._states
