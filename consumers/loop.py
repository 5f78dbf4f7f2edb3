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

import itertools
import logging
import queue
import threading
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol

from confluent_kafka import KafkaError, TopicPartition

from acidclean.consumers.assignment import Lopsided, lopsided, lopsided_advice, partitions_by_topic
from acidclean.consumers.bundles import WaitingBundle, read_bundle
from acidclean.consumers.handler import CleanupHandler
from acidclean.consumers.logs import log
from acidclean.consumers.metrics import CleanerMetrics
from acidclean.consumers.scheduling import clamp_due_ms, due_time_problem, poll_timeout_s
from acidclean.consumers.waiting import WaitingGroup, group_of_model, read_envelope, read_group
from acidclean.consumers.work import Outcome, Work
from acidclean.schemas.events import CleanupRejected, DelayedVacuums, DelayEnvelope, VacuumCommitted
from acidclean.shared.bus.bundle import BUNDLE_TYPE
from acidclean.shared.bus.codec import CE_TYPE, decode, due_at_ms, header_due_at_ms, reject
from acidclean.shared.bus.consumer import Assignment, ConsumerErrors, take_assignment
from acidclean.shared.bus.records import RawRecord, raw_record
from acidclean.shared.errors import BusError

LOGGER = logging.getLogger("acidclean.cleaner")
# How long an assignment may stay lopsided (one topic's partitions and none of the other) before the
# loop warns: well past the two rounds of a cooperative rebalance.
LOPSIDED_WARN_AFTER_MS = 60_000
Partition = tuple[str, int]
_GROUP_TYPE = DelayedVacuums.event_type.encode()
_ENVELOPE_TYPE = DelayEnvelope.event_type.encode()
_BUNDLE_TYPE = BUNDLE_TYPE.encode()
LATE_MS = 100  # re-checks later than this are logged (DEBUG) with where the time went
_NEVER = 1 << 62  # a deadline no clock reaches


class ConsumerLike(Protocol):
    """The part of ``confluent_kafka.Consumer`` the loop uses (a fake implements it in unit tests)."""

    def subscribe(self, topics: list[str], **callbacks: Any) -> None: ...
    def poll(self, timeout: float = -1) -> Any: ...
    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]: ...
    def pause(self, partitions: list[TopicPartition]) -> None: ...
    def resume(self, partitions: list[TopicPartition]) -> None: ...
    def seek(self, partition: TopicPartition) -> None: ...
    def commit(self, message: Any = None, offsets: Any = None, asynchronous: bool = True) -> Any: ...
    def incremental_assign(self, partitions: list[TopicPartition]) -> None: ...
    def assign(self, partitions: list[TopicPartition]) -> None: ...
    def close(self) -> None: ...


class MillisClock(Protocol):
    def now_ms(self) -> int: ...


class SystemMillisClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class _Tracked:
    """A record read and not yet finished: since when it is due, and its vacuum (for the gauges)."""

    due_ms: int
    committed_at_s: float | None  # the vacuum's commit time (epoch seconds); None for a dead letter


def _ms_iso(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, timezone.utc).isoformat()


# How many intervals overdue a key's delay record may be for a fresh vacuum of the key to wait for it.
JOIN_LATE_INTERVALS = 3


@dataclass
class PartitionState:
    """What the loop knows about one assigned partition (changed only on the loop's thread)."""

    generation: int
    accepting: bool = True
    seen_until: int | None = None  # every offset below was handed over, held or skipped
    in_flight: set[int] = field(default_factory=set)
    # Of those, the joiners: records waiting for their key's next delay record. Neither kind stops the
    # delay partitions from being read (that is what brings their records): fresh vacuums that wait
    # count against max_queued only for reading more fresh vacuums, and delay records that wait (at
    # most one per key) not at all.
    joiners: int = 0
    held: deque[Work] = field(default_factory=deque)  # fetched, not yet due, in offset order
    held_bytes: int = 0  # the size of their values
    held_keys: Counter[str] = field(default_factory=Counter)  # the keys of the waiting groups held
    dropping: bool = False  # held is full: later records are left to be fetched again after the resume
    # Holding a head not yet due while the fetch goes on (from the first hold, or again once half the
    # read-ahead was free): the consumer is paused only once the read-ahead is full.
    reading_ahead: bool = False
    backlogged: bool = False  # paused because the lanes hold max_queued records: resumed once they drain
    # The held head's due time: nothing of the partition is handed over before it ("paused" for the
    # loop, whether or not the consumer still fetches; after a rewind, the retry time).
    paused_until_ms: int | None = None
    committed: int | None = None
    # Every record read and not finished, by offset, kept across rewinds (a re-read keeps the first
    # due time): what the overdue and oldest-pending gauges see of a stalled partition.
    tracked: dict[int, _Tracked] = field(default_factory=dict)

    def committable(self) -> int | None:
        """The next offset to read after a restart: below it, every record is done."""
        if self.seen_until is None:
            return None
        floor = min(self.in_flight) if self.in_flight else self.seen_until
        if self.held:
            floor = min(floor, self.held[0].offset)
        return floor


@dataclass(frozen=True)
class LoopConfig:
    vacuum_topic: str
    delay_topic: str
    tenant: str
    cleaner_id: str
    interval_ms: int
    batch_size: int = 500
    revoke_timeout_s: float = 60.0
    retry_backoff_ms: int | None = None
    error_tries: int = 3  # handler errors other than BusError: tries before the dead letter
    error_pause_ms: int = 100  # pause after a failed try, doubled each time (at most one interval)
    close_timeout_s: float = 15.0  # the final offset commit and group leave, once the broker is gone
    workers: int = 1  # batches running at once (the table thread pool's size)
    batch_tables: int = 200  # lanes (tables) in one batch at most
    held_per_partition: int = 250  # records read ahead of their due time and kept, per paused partition
    # and at most this many bytes of them: a bundle of waiting tables is up to 512 KB, and those due
    # within an interval are checked on time only if they are read ahead (1 MB held two of them)
    held_bytes: int = 16 << 20
    max_queued: int = 2000  # records handed over and not finished (queued or running), before fetching pauses
    # A due delay record of one table alone waits up to this for the partition's other such records due
    # within it, so they are checked in one batch and go on in one bundle (the handler's bundle spread)
    gather_ms: int = 0
    group_id: str = ""  # for the warning about a lopsided assignment
    # How the group assigns partitions: how an assignment is taken, and which advice that warning gives
    assignment: Assignment = Assignment.COOPERATIVE_STICKY


@dataclass
class _Lane:
    queue: list[Work] = field(default_factory=list)
    busy: bool = False


@dataclass(frozen=True)
class _Finished:
    work: Work
    outcome: Outcome | None  # None: abandoned (partition revoked or rewound before it started)
    error: BaseException | None = None


@dataclass(frozen=True)
class _LaneFree:
    lane: str


@dataclass(frozen=True)
class _BatchFree:
    """A worker finished its batch (after every lane of it was freed)."""


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
        # Where a batch's outcomes are published and their acknowledgements awaited (None: by the worker
        # that checked them). Waiting there held a worker 15-95 ms a batch at 100,000 parked vacuums.
        self._ack_executor = ack_executor
        self._metrics = metrics
        self._clock = clock or SystemMillisClock()
        self._states: dict[Partition, PartitionState] = {}
        self._lanes: dict[str, _Lane] = {}
        # Fresh vacuums waiting to be checked with their key's delay record: key -> [(work, deadline ms)].
        self._joiners: dict[str, list[tuple[Work, int]]] = {}
        self._joiners_due_ms = _NEVER  # no joiner's deadline is before this
        # Joiners riding in a bundle's lane (partition, offset, generation): still counted as joiners
        # until they finish, so they never hold back the reading of the delay partitions.
        self._riding: set[tuple[Partition, int, int]] = set()
        self._finished: queue.Queue[_Finished | _LaneFree | _BatchFree] = queue.Queue()
        self._running_batches = 0
        self._guard = threading.Lock()  # states' generation/accepting and the executing counts
        self._executing: dict[tuple[Partition, int], int] = {}
        self._generations = itertools.count(1)
        self._pending: dict[str, tuple[float, float]] = {}  # lane -> (oldest committed at, last seen), for metrics
        self._pending_lock = threading.Lock()
        self._stop = threading.Event()
        # Partitions of one topic owned and none of the other, since when (the loop's clock), warned yet.
        self._lopsided: tuple[Lopsided, int] | None = None
        self._lopsided_warned = False
        self._consumer_errors = ConsumerErrors(LOGGER, config.group_id, clock_s=lambda: self._clock.now_ms() / 1000)
        self.abandoned_close = False  # the broker did not answer the final commit and group leave
        self._tenant_prefix = f"{config.tenant}/".encode()
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
        self._resume_backlogged()
        self._release_due(now)
        self._dispatch_lanes()
        timeout = poll_timeout_s(now, self._next_due_ms(), busy=self._busy())
        messages = self._fetch(timeout)
        now = self._clock.now_ms()
        for message in messages:
            self._route(message, now)
        self._release_due(self._clock.now_ms())
        self._drain_finished()
        self._dispatch_lanes()
        self._commit(asynchronous=True)
        self._warn_if_lopsided(now)
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
        with self._guard:
            for state in self._states.values():
                state.accepting = False
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

    # -- routing -----------------------------------------------------------------------------------

    def _route(self, message: Any, now: int) -> None:
        error = message.error()
        if error is not None:
            self._consumer_errors.report(error)
            return
        partition: Partition = (message.topic(), message.partition())
        state = self._states.get(partition)
        offset = message.offset()
        if state is None or not state.accepting:
            return  # fetched before a revoke: its next owner reads it from the committed offset
        if state.seen_until is not None and offset < state.seen_until:
            return  # a re-fetched copy of a record already handed over or held
        held_full = len(state.held) >= self.config.held_per_partition or state.held_bytes >= self.config.held_bytes
        if state.dropping or (state.paused_until_ms is not None and held_full):
            # Not read at all: fetched again from the first record not read once the partition reads on,
            # so the memory held stays bounded however many vacuums wait, and the offset never moves
            # past it.
            if state.reading_ahead:
                self.consumer.pause([TopicPartition(*partition)])
                state.reading_ahead = False
            state.dropping = True
            return
        new_work = partition[0] != self.config.delay_topic
        if state.paused_until_ms is None and self._outstanding(new_work) >= self.config.max_queued:
            # Overloaded: stop reading this partition at this record until the lanes drain, so the
            # memory of a cleaner that cannot keep up does not grow with its backlog.
            topic, number = partition
            self.consumer.pause([TopicPartition(topic, number)])
            self.consumer.seek(TopicPartition(topic, number, offset))
            state.backlogged = state.dropping = True
            return
        state.seen_until = offset + 1
        key = message.key()
        if key is not None and not bytes(key if isinstance(key, bytes) else key.encode()).startswith(
            self._tenant_prefix
        ):
            self._metrics.events.labels("skipped_other_tenant").inc()
            return  # another tenant's record: that tenant's own consumer group handles it
        work = self._work(raw_record(message), state.generation, now)
        self._track(state, work)
        if self._join_chain(partition, state, work, now):
            return
        if state.held or state.paused_until_ms is not None:
            _keep_held(state, work)
            if state.reading_ahead and state.paused_until_ms is not None and work.due_ms < state.paused_until_ms:
                # due before those ahead of it (see _take_due): wake then, and _release_due decides (a
                # table's order or a gather may keep it), instead of working out every release per read
                state.paused_until_ms = work.due_ms
            return
        if work.due_ms > now:
            self._hold(partition, state, work)
            return
        if isinstance(work.event, WaitingGroup) and self._waits_for_next_record(partition, state, work, now):
            return
        self._hand_over(partition, state, work, now)

    def _work(self, record: RawRecord, generation: int, now: int) -> Work:
        on_delay_topic = record.topic == self.config.delay_topic
        event: Any = None
        if on_delay_topic:  # read without the models; None: they decide
            ce_type = _header(record, CE_TYPE)
            if ce_type == _GROUP_TYPE:
                event = read_group(record, self.config.tenant)
            elif ce_type == _ENVELOPE_TYPE:
                event = read_envelope(record, self.config.tenant)
            elif ce_type == _BUNDLE_TYPE:
                bundle_due = header_due_at_ms(record)
                if bundle_due is not None:
                    due_at = datetime.fromtimestamp(bundle_due / 1000, timezone.utc)
                    event = read_bundle(record, self.config.tenant, due_at)
        if event is None:
            expected = (DelayEnvelope, DelayedVacuums) if on_delay_topic else (VacuumCommitted,)
            event = decode(record, rejected_by=self.config.cleaner_id, tenant=self.config.tenant, expected=expected)
            if isinstance(event, DelayedVacuums):
                event = group_of_model(event)
        if not isinstance(event, DelayEnvelope | WaitingGroup | WaitingBundle):
            assert isinstance(event, VacuumCommitted | CleanupRejected)
            return Work(record, event, generation, 0, now)
        due = header_due_at_ms(record)
        due = due if due is not None else due_at_ms(event.due_at)
        problem = due_time_problem(due)
        if problem is not None:
            refused = reject(
                record,
                "invalid_due_time",
                problem,
                rejected_by=self.config.cleaner_id,
                tenant=self.config.tenant,
                event=event if isinstance(event, DelayEnvelope) else None,
            )
            return Work(record, refused, generation, 0, now)
        clamped = clamp_due_ms(due, now, self.config.interval_ms)
        if clamped is not None:
            self._metrics.clamped_due_times.inc()
            log(
                LOGGER,
                logging.WARNING,
                f"delay envelope due {(due - now) / 1000:.0f} s ahead, more than a few intervals (clock skew or "
                "a bad record): due time clamped to one interval from now; the re-check decides",
                event_id=event.event_id,
                vacuum_id=event.correlation_id,
                table=event.table,
                partition=event.partition,
                attempt=getattr(event, "attempt", None),
                due_at=event.due_at.isoformat(),
                clamped_to=_ms_iso(clamped),
                topic=record.topic,
                partition_number=record.partition,
                offset=record.offset,
            )
            due = clamped
        return Work(record, event, generation, due, now)

    def _track(self, state: PartitionState, work: Work) -> None:
        if work.offset in state.tracked:
            return  # read again after a rewind: it has been due since the first time
        committed_at = None
        if not isinstance(work.event, CleanupRejected):
            committed_at = _committed_at(work.event)
        state.tracked[work.offset] = _Tracked(
            work.due_ms or work.received_ms, None if committed_at is None else committed_at.timestamp()
        )

    def _hold(self, partition: Partition, state: PartitionState, work: Work) -> None:
        """The partition's next record is not yet due: keep it, and go on fetching the records after it
        (held too, up to the read-ahead), so the records written while this one waits are in hand when
        they come due. Pausing here stopped the fetch: the records written meanwhile were fetched only
        after the resume, up to a fetch long-poll after their due time."""
        _keep_held(state, work)
        state.paused_until_ms = work.due_ms
        state.reading_ahead = True
        self._note_pending(work)

    def _hand_over(self, partition: Partition, state: PartitionState, work: Work, now: int) -> None:
        state.in_flight.add(work.offset)
        self._note_pending(work)
        lane = self._lanes.setdefault(work.lane, _Lane()).queue
        lane.append(work)
        if isinstance(work.event, WaitingBundle):
            if self._joiners:
                self._spill_joined(work.event, lane, now)
            return
        if partition[0] == self.config.delay_topic and self._joiners and not isinstance(work.event, CleanupRejected):
            joining = self._joiners.pop(work.event.key, None)
            if joining is not None:
                for joiner, _ in joining:
                    self._unjoin(joiner)
                lane.extend(joiner for joiner, _ in joining)

    def _join_chain(self, partition: Partition, state: PartitionState, work: Work, now: int) -> bool:
        """Keep a fresh vacuum of a key whose vacuums already wait (their delay record is due within an
        interval, or overdue by at most JOIN_LATE_INTERVALS) until that record is checked, so both are
        checked together and wait on in one record.

        Its first check comes at most one interval (plus a margin) later instead of at once: it is
        waiting for a reader of its key anyway. Its offset stays uncommitted meanwhile. Only when this
        process reads the key's delay partition (same number: both topics are keyed alike); otherwise,
        or if that record does not come, it is checked alone at the deadline."""
        if partition[0] != self.config.vacuum_topic or not isinstance(work.event, VacuumCommitted):
            return False
        chains = self._chain_due()
        due = chains.get(work.event.key)
        interval = self.config.interval_ms
        # A cleaner behind its delay partitions hands a key's record over late (seconds after its due
        # time): it is still coming, and a fresh vacuum checked alone would only add a record of its own.
        if due is None or due < now - JOIN_LATE_INTERVALS * interval:
            return False
        if (self.config.delay_topic, partition[1]) not in self._states:
            return False
        # That record is due at `due`; overdue, it is about to be handed over, or is being checked now
        # and its successor comes within an interval. If none comes, the vacuum is checked alone.
        self._join(state, work, work.event.key, (due if due >= now else now + interval) + max(interval // 2, 500))
        return True

    def _waits_for_next_record(self, partition: Partition, state: PartitionState, work: Work, now: int) -> bool:
        """Keep a due delay record whose key has a later record on its partition until that one is
        handed over: both are then checked together and wait on in one record.

        A table's vacuums parked in separate records (published by different checks, or by another
        process) would otherwise stay in separate records for good, each due at its own time: one
        record per table is what lets a process re-check many vacuums an interval. The later record is
        known when it is already read and held, or when this process published it after this one
        (``chain_due``: same key, same partition, later due time, so later in the log). The earlier
        record is checked late by less than an interval of reading, once, and never early; if the
        later record is not handed over by the deadline (a rewind drops both, or another process
        owned the partition when it was written), it is checked alone then.

        When a cleaner is behind, a key's records are read after they are due and far apart: only one
        of a key's records waits at a time (the next one takes it along), so the records of a key
        halve each pass and the memory held stays within one record per key."""
        assert isinstance(work.event, WaitingGroup)
        key = work.event.key
        interval = self.config.interval_ms
        if state.held_keys.get(key):
            self._join(state, work, key, now + interval)
            return True
        later_due = self._chain_due().get(key)
        if later_due is None or later_due <= work.due_ms or partition[0] != self.config.delay_topic:
            return False
        if any(joiner.partition[0] == self.config.delay_topic for joiner, _ in self._joiners.get(key, ())):
            return False  # this one takes the waiting one along
        # The later record is read about as late after its due time as this one was.
        self._join(state, work, key, max(now, later_due + (now - work.due_ms)) + interval)
        return True

    def _chain_due(self) -> dict[str, int]:
        return getattr(self.handler, "chain_due", {})

    def _join(self, state: PartitionState, work: Work, key: str, deadline_ms: int) -> None:
        """Keep ``work`` (its offset uncommitted) until the next delay record of ``key`` is handed over,
        then run it in that record's lane; at ``deadline_ms`` it runs alone."""
        state.in_flight.add(work.offset)
        state.joiners += 1
        self._note_pending(work)
        self._joiners.setdefault(key, []).append((work, deadline_ms))
        self._joiners_due_ms = min(self._joiners_due_ms, deadline_ms)

    def _spill_joined(self, bundle: WaitingBundle, lane: list[Work], now: int) -> None:
        """Records wait to join some of the bundle's tables. Fresh vacuums ride in the bundle's lane:
        its check takes those still waiting into their table's next record, and hands the others back
        to their tables' lanes (a Kafka round trip less per table than reading the record back, which
        with fresh vacuums of many tables arriving over many intervals was most of what a cleaner did).
        For a table whose joiners include delay records, the bundle's check sends its record out on
        its own (due at once), and, read back, it takes its joiners along into its lane; they wait an
        interval more for it (then they are checked alone, as for any record that does not come).

        The keys its header lists tell cheaply whether any joiner waits for it (its members are then
        read for their keys: riders join only a member read from it). A list that leaves out a table
        only leaves that table's joiners to be checked alone at their deadline."""
        if not any(key.decode("utf-8", "replace") in self._joiners for key in bundle.listed_member_keys()):
            return
        for key in bundle.member_keys():
            name = key.decode("utf-8", "replace")
            joining = self._joiners.get(name)
            if joining is None:
                continue
            if all(
                joiner.partition[0] == self.config.vacuum_topic and isinstance(joiner.event, VacuumCommitted)
                for joiner, _ in joining
            ):
                del self._joiners[name]
                for joiner, _ in joining:
                    self._riding.add((joiner.partition, joiner.offset, joiner.generation))
                    lane.append(joiner)
                bundle.riders[key] = tuple(joiner.event for joiner, _ in joining)  # type: ignore[misc]
                continue
            bundle.spill.add(key)
            deadline = now + self.config.interval_ms
            joining[:] = [(joiner, max(due, deadline)) for joiner, due in joining]

    def _unjoin(self, joiner: Work) -> None:
        state = self._states.get(joiner.partition)
        if state is not None and state.joiners > 0:
            state.joiners -= 1

    def _release_late_joiners(self, now: int) -> None:
        """Joiners whose key's record did not come by their deadline are checked alone."""
        if now < self._joiners_due_ms:
            return  # none is due yet: the scan is over every waiting key
        first_left = _NEVER
        for key in list(self._joiners):
            joining = self._joiners[key]
            if joining[0][1] > now:
                first_left = min(first_left, joining[0][1])
                continue
            for joiner, _ in self._joiners.pop(key):
                self._unjoin(joiner)
                self._lanes.setdefault(joiner.lane, _Lane()).queue.append(joiner)
        self._joiners_due_ms = first_left

    def _outstanding(self, new_work: bool = True) -> int:
        """Records handed over and not finished (queued in the lanes or running in a batch), and for
        ``new_work`` (a fresh vacuum) the fresh vacuums waiting to join their key's delay record too."""
        handed, fresh_joiners = 0, 0
        for partition, state in self._states.items():
            handed += len(state.in_flight) - state.joiners
            if partition[0] != self.config.delay_topic:
                fresh_joiners += state.joiners
        return handed + fresh_joiners if new_work else handed

    def _resume_backlogged(self) -> None:
        backlogged = [(partition, state) for partition, state in self._states.items() if state.backlogged]
        if not backlogged:
            return
        limit = self.config.max_queued // 2
        room = {False: self._outstanding(False) <= limit}
        room[True] = room[False] and self._outstanding(True) <= limit
        for partition, state in backlogged:
            if state.accepting and room[partition[0] != self.config.delay_topic]:
                state.backlogged = state.dropping = False
                self.consumer.resume([TopicPartition(*partition)])

    def _release_due(self, now: int) -> None:
        if self._joiners:
            self._release_late_joiners(now)
        for partition, state in self._states.items():
            if state.paused_until_ms is None or state.paused_until_ms > now or not state.accepting:
                continue
            for released in _take_due(state, now, self.config.gather_ms):
                if isinstance(released.event, WaitingGroup) and self._waits_for_next_record(
                    partition, state, released, now
                ):
                    continue
                self._hand_over(partition, state, released, now)
            if state.held:
                state.paused_until_ms = _next_release_ms(state.held, self.config.gather_ms)
                if state.dropping and state.seen_until is not None and self._half_held(state):
                    # Records after the held ones wait unread: read on now, not once the last held one
                    # is due, so they are in hand at their due time (a partition's bundles due within
                    # one interval can be more than the read-ahead).
                    state.dropping, state.reading_ahead = False, True
                    self.consumer.seek(TopicPartition(*partition, state.seen_until))
                    self.consumer.resume([TopicPartition(*partition)])
            else:
                fetching = state.reading_ahead and not state.dropping
                state.paused_until_ms = None
                state.dropping = state.reading_ahead = False
                if fetching:
                    continue  # never paused, nothing skipped: the fetch goes on where it is
                if state.seen_until is not None:
                    # Every record before seen_until was handed over: fetch from the first one not read,
                    # not again from the held head (re-fetched copies were 40% of what a cleaner with
                    # thousands of parked vacuums read, each one dropped by _route).
                    self.consumer.seek(TopicPartition(*partition, state.seen_until))
                self.consumer.resume([TopicPartition(*partition)])

    def _half_held(self, state: PartitionState) -> bool:
        """Whether at most half the read-ahead of a partition is taken."""
        config = self.config
        return 2 * len(state.held) <= config.held_per_partition and 2 * state.held_bytes <= config.held_bytes

    def _next_due_ms(self) -> int | None:
        dues = [state.paused_until_ms for state in self._states.values() if state.paused_until_ms is not None]
        return min(dues) if dues else None

    def _busy(self) -> bool:
        return any(lane.busy or lane.queue for lane in self._lanes.values())

    # -- lanes and workers -------------------------------------------------------------------------

    def _dispatch_lanes(self) -> None:
        """Deal the free lanes, oldest first, to the idle workers: each batch takes one worker's share of
        them (the ready lanes over all workers, at most ``batch_tables``), so the tables that are ready
        together are spread over the threads instead of filling one batch while the other threads
        idle; a worker still busy takes its share of what is left when it is free."""
        ready: list[str] = []
        for name in list(self._lanes):
            lane = self._lanes[name]
            if lane.busy:
                continue
            if not lane.queue:
                del self._lanes[name]
                continue
            ready.append(name)
        workers = max(1, self.config.workers)
        idle = workers - self._running_batches
        if not ready or idle <= 0:
            return
        share = min(max(1, self.config.batch_tables), -(-len(ready) // workers))
        count = min(idle, -(-len(ready) // share))
        for index in range(count):
            names = ready[index * share : (index + 1) * share]
            batch = []
            for name in names:
                lane = self._lanes[name]
                batch.append((name, lane.queue))
                lane.queue, lane.busy = [], True
            self._running_batches += 1
            self._metrics.batch_tables.observe(len(batch))
            self._executor.submit(self._run_batch, batch)

    def _run_batch(self, lanes: Sequence[tuple[str, Sequence[Work]]]) -> None:
        """Worker thread: handle a batch of lanes, each lane's events in order, with one metastore check
        for all of them, one announcement per round of cleanups and one publish of all outcomes. With
        an ``ack_executor`` the publish and its wait run there: the worker is free for the next batch
        while the broker acknowledges (its lanes stay busy until then, so a table's records still go
        one after another)."""
        handed_on = False
        try:
            handed_on = self._run_lanes(lanes)
        finally:
            if not handed_on:
                self._free(lanes)
            self._finished.put(_BatchFree())

    def _free(self, lanes: Sequence[tuple[str, Sequence[Work]]]) -> None:
        for name, _ in lanes:
            self._finished.put(_LaneFree(name))

    def _run_lanes(self, lanes: Sequence[tuple[str, Sequence[Work]]]) -> bool:
        """Check the lanes' events; True when their outcomes' publish was handed to the ack executor
        (which then frees the lanes), False when it was done here."""
        deferred: list[tuple[Work, Outcome]] = []
        read_by = max(
            (_read_by_ms(work, self.handler) for _, works in lanes for work in _answered(works, self.handler)),
            default=0,
        )
        batch = self.handler.batch(len(lanes), read_by)
        try:
            queues = [(list(works), self.handler.lock_check(works[0], batch)) for _, works in lanes if works]
            try:
                self.handler.prefetch(batch, [(works[0], locks) for works, locks in queues])
            except Exception as error:  # only a saving: each table then asks for itself and meets the error there
                log(LOGGER, logging.WARNING, f"asking for the batch's tables together failed: {error!r}")
            while any(works for works, _ in queues):
                prepared: list[tuple[Work, Outcome]] = []
                for works, locks in queues:
                    if works:
                        self._run_one(works.pop(0), locks, deferred, prepared)
                if prepared:
                    self._run_prepared(batch, prepared, deferred)
        except BaseException:
            self._settle(batch, deferred)
            raise
        if deferred and self._ack_executor is not None:
            try:
                self._ack_executor.submit(self._settle_and_free, batch, deferred, lanes)
                return True
            except RuntimeError:  # the ack executor is shut down (the process is stopping): publish here
                pass
        self._settle(batch, deferred)
        return False

    def _settle(self, batch: Any, deferred: list[tuple[Work, Outcome]]) -> None:
        try:
            self._flush(batch, deferred)
        finally:
            batch.close()

    def _settle_and_free(
        self, batch: Any, deferred: list[tuple[Work, Outcome]], lanes: Sequence[tuple[str, Sequence[Work]]]
    ) -> None:
        """Ack executor: publish a batch's outcomes, wait for the broker, then free its lanes."""
        try:
            self._settle(batch, deferred)
        finally:
            self._free(lanes)

    def _run_one(
        self, work: Work, locks: Any, deferred: list[tuple[Work, Outcome]], prepared: list[tuple[Work, Outcome]]
    ) -> None:
        if not self._begin(work):
            self._finished.put(_Finished(work, None))
            return
        if work.due_ms:
            # Lateness is measured when the re-check really starts, queueing included.
            started = self._clock.now_ms()
            self._metrics.lateness_seconds.observe(max(0, started - work.due_ms) / 1000)
            if started - work.due_ms > LATE_MS:
                log(
                    LOGGER,
                    logging.DEBUG,
                    "late re-check",
                    late_ms=started - work.due_ms,
                    read_after_due_ms=work.received_ms - work.due_ms,
                    queued_ms=started - work.received_ms,
                    topic=work.record.topic,
                    partition_number=work.record.partition,
                    offset=work.offset,
                )
        try:
            outcome = self._handle(work, locks)
        except BaseException as error:  # not acknowledged: the loop rewinds the partition
            self._finished.put(_Finished(work, None, error))
            self._end(work)
            return
        if outcome.prepared is not None:
            prepared.append((work, outcome))  # still executing until its batch deleted and reported it
        elif outcome.deferred:
            deferred.append((work, outcome))  # still executing until its outcome is acknowledged
        else:
            self._finished.put(_Finished(work, outcome))
            self._end(work)

    def _run_prepared(
        self, batch: Any, prepared: list[tuple[Work, Outcome]], deferred: list[tuple[Work, Outcome]]
    ) -> None:
        """Announce and delete this round's planned cleanups; each then waits for the batch's publish."""
        try:
            results = self.handler.run_prepared(batch)
        except BaseException as error:
            results = {id(outcome.prepared): error for _, outcome in prepared}
        for work, outcome in prepared:
            result = results.get(id(outcome.prepared), AssertionError("a prepared cleanup was not run"))
            if isinstance(result, Outcome):
                if result.deferred:
                    deferred.append((work, result))
                    continue
                self._finished.put(_Finished(work, result))
            elif isinstance(result, BusError) or not isinstance(result, Exception):
                self._finished.put(_Finished(work, None, result))  # not announced: rewind, nothing deleted
            else:
                self._finished.put(self._give_up(work, result, 1))
            self._end(work)

    def _flush(self, batch: Any, deferred: list[tuple[Work, Outcome]]) -> None:
        """Publish the batch's outcomes with one wait; only then are their records finished."""
        try:
            if deferred:
                try:
                    refused = self.handler.flush_batch(batch) or {}
                except Exception as error:
                    if isinstance(error, BusError):
                        for work, _ in deferred:
                            self._finished.put(_Finished(work, None, error))
                    else:  # not Kafka's refusal: the batch itself cannot be published, and never will be
                        for work, _ in deferred:
                            self._finished.put(self._give_up(work, error, 1))
                except BaseException as error:
                    for work, _ in deferred:
                        self._finished.put(_Finished(work, None, error))
                else:
                    for work, outcome in deferred:
                        failure = refused.get(str(outcome.event.event_id))
                        # Only the refused outcomes' partitions are rewound; the rest of the batch is done.
                        finished = _Finished(work, outcome) if failure is None else _Finished(work, None, failure)
                        self._finished.put(finished)
        finally:
            for work, _ in deferred:
                self._end(work)

    def _handle(self, work: Work, locks: Any) -> Outcome:
        """The handler's outcome, tried up to ``error_tries`` times; then the dead letter's.

        Raises only a ``BusError`` (or what is not an ``Exception``): the outcome was not acknowledged,
        so the offset must not be committed. Any other error is the event's or the handler's fault:
        repeating it by rewinding the partition would never end (and would handle every later record
        of the partition again), so after the last try the event is dead-lettered and its offset advances.
        """
        tries = max(1, self.config.error_tries)
        for attempt in range(1, tries + 1):
            try:
                return self.handler.handle(work, locks)
            except BusError:
                raise
            except Exception as error:
                self._metrics.handler_errors.inc()
                if attempt == tries:
                    finished = self._give_up(work, error, tries)
                    if finished.error is not None:
                        raise finished.error from error
                    assert finished.outcome is not None
                    return finished.outcome
                log(
                    LOGGER,
                    logging.WARNING,
                    f"handling failed (try {attempt} of {tries}), trying again: {type(error).__name__}: {error}",
                    **_position(work),
                )
                pause_ms = min(self.config.error_pause_ms * 2 ** (attempt - 1), self.config.interval_ms)
                time.sleep(pause_ms / 1000)
        raise AssertionError("unreachable")

    def _give_up(self, work: Work, error: Exception, tries: int) -> _Finished:
        """Dead-letter ``work`` for ``error``: finished with the dead letter's outcome, or with the
        ``BusError`` that kept the dead letter from being acknowledged (the partition is rewound)."""
        log(
            LOGGER,
            logging.ERROR,
            f"handling failed {tries} time(s), dead-lettering the event: {type(error).__name__}: {error}",
            **_position(work),
            traceback="".join(traceback.format_exception(error)),
        )
        try:
            return _Finished(work, self.handler.dead_letter_error(work, error, tries))
        except BusError as failure:
            return _Finished(work, None, failure)
        except Exception as failure:  # not even a dead letter can be built: drop it rather than loop on it
            self._metrics.events.labels("dropped").inc()
            log(
                LOGGER,
                logging.CRITICAL,
                f"could not dead-letter the event ({type(failure).__name__}: {failure}); skipping it, "
                "only this log line records it",
                topic=work.record.topic,
                partition_number=work.record.partition,
                offset=work.offset,
                event_id=getattr(work.event, "event_id", None),
                error=f"{type(error).__name__}: {error}",
            )
            dropped = (
                work.event
                if not isinstance(work.event, WaitingGroup | WaitingBundle)
                else reject(
                    work.record,
                    "other",
                    "could not dead-letter",
                    rejected_by=self.config.cleaner_id,
                    tenant=self.config.tenant,
                )
            )
            return _Finished(work, Outcome("dropped", dropped))

    def _begin(self, work: Work) -> bool:
        with self._guard:
            state = self._states.get(work.partition)
            if state is None or not state.accepting or state.generation != work.generation:
                return False
            key = (work.partition, work.generation)
            self._executing[key] = self._executing.get(key, 0) + 1
            return True

    def _end(self, work: Work) -> None:
        with self._guard:
            key = (work.partition, work.generation)
            left = self._executing.get(key, 1) - 1
            if left:
                self._executing[key] = left
            else:
                self._executing.pop(key, None)

    def _drain_finished(self) -> None:
        while True:
            try:
                item = self._finished.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _BatchFree):
                self._running_batches -= 1
                continue
            if isinstance(item, _LaneFree):
                lane = self._lanes.get(item.lane)
                if lane is not None:
                    lane.busy = False
                continue
            self._finish(item)

    def _finish(self, item: _Finished) -> None:
        work = item.work
        state = self._states.get(work.partition)
        current = state is not None and state.generation == work.generation
        if self._riding:
            riding = (work.partition, work.offset, work.generation)
            if riding in self._riding:
                self._riding.discard(riding)
                if current:
                    self._unjoin(work)
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
                self._lanes.setdefault(work.lane, _Lane()).queue.append(work)
            return
        state.in_flight.discard(work.offset)
        state.tracked.pop(work.offset, None)
        if item.outcome.kind in ("cleaned", "table_dropped", "dead_lettered", "dry_run", "dropped") and not isinstance(
            work.event, CleanupRejected | WaitingGroup | WaitingBundle
        ):
            with self._pending_lock:
                self._pending.pop(work.lane, None)

    def _rewind(self, partition: Partition, state: PartitionState) -> None:
        """Re-read a partition from its lowest unfinished offset after one interval."""
        offset = state.committable()
        topic, number = partition
        with self._guard:
            state.generation = next(self._generations)
        state.in_flight.clear()
        state.joiners = 0
        state.held.clear()
        state.held_bytes = 0
        state.held_keys.clear()
        self._purge_joiners({partition})
        state.dropping = state.backlogged = state.reading_ahead = False
        state.seen_until = offset
        state.paused_until_ms = self._clock.now_ms() + (self.config.retry_backoff_ms or self.config.interval_ms)
        self.consumer.pause([TopicPartition(topic, number)])
        if offset is not None:
            self.consumer.seek(TopicPartition(topic, number, offset))

    # -- offsets -----------------------------------------------------------------------------------

    def _commit(self, asynchronous: bool, only: Sequence[Partition] | None = None, force: bool = False) -> None:
        """Commit what moved. ``force`` commits synchronously even offsets an asynchronous commit
        already carries, so they are stored before a partition is handed over (commits are sent in
        order, so the synchronous one returning means the earlier ones were applied too)."""
        offsets = []
        for partition in only if only is not None else list(self._states):
            state = self._states.get(partition)
            if state is None:
                continue
            committable = state.committable()
            if committable is not None and (force or state.committed is None or committable > state.committed):
                offsets.append(TopicPartition(partition[0], partition[1], committable))
                state.committed = committable
        if not offsets:
            return
        try:
            self.consumer.commit(offsets=offsets, asynchronous=asynchronous)
        except Exception as error:  # a failed commit only means the records will be processed again
            self._metrics.commit_failures.inc()
            for item in offsets:
                state = self._states.get((item.topic, item.partition))
                if state is not None:
                    state.committed = None
            log(LOGGER, logging.WARNING, f"offset commit failed (records will be processed again): {error}")

    def on_commit(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """Kafka's commit callback: forget what failed so the next loop commits it again."""
        if error is None and not any(p.error for p in partitions):
            return
        self._metrics.commit_failures.inc()
        for item in partitions:
            state = self._states.get((item.topic, item.partition))
            if state is not None and state.committed == item.offset:
                state.committed = None
        log(LOGGER, logging.WARNING, f"asynchronous offset commit failed: {error}")

    # -- rebalance callbacks (run inside consume()) -------------------------------------------------

    def on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self.joined.set()  # cooperative-sticky calls it after every join, with no partitions too
        take_assignment(self.consumer, partitions, self.config.assignment)
        # A partition paused under an earlier ownership may come back still paused: clear it.
        self.consumer.resume([TopicPartition(p.topic, p.partition) for p in partitions])
        with self._guard:
            for item in partitions:
                self._states[(item.topic, item.partition)] = PartitionState(generation=next(self._generations))
        self._metrics.rebalances.labels("assigned").inc(len(partitions))
        self._note_assignment()
        log(LOGGER, logging.INFO, "partitions assigned", partitions=[f"{p.topic}[{p.partition}]" for p in partitions])

    def on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        revoked = [(p.topic, p.partition) for p in partitions]
        with self._guard:
            for partition in revoked:
                state = self._states.get(partition)
                if state is not None:
                    state.accepting = False
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
        with self._guard:
            for partition in lost:
                state = self._states.get(partition)
                if state is not None:
                    state.accepting = False
        self._purge_lanes(set(lost))
        self._forget(lost)  # other members may own them already: commit nothing
        self._metrics.rebalances.labels("lost").inc(len(partitions))
        self._note_assignment()
        log(LOGGER, logging.WARNING, "partitions lost", partitions=[f"{p.topic}[{p.partition}]" for p in partitions])

    def _purge_lanes(self, partitions: set[Partition]) -> None:
        strays: list[Work] = []
        for name, lane in self._lanes.items():
            lane.queue = [work for work in lane.queue if work.partition not in partitions]
            if lane.queue and not isinstance(lane.queue[0].event, WaitingBundle) and lane.queue[0].lane != name:
                # Riders whose bundle went with its partition: checked in their own tables' lanes.
                strays += lane.queue
                lane.queue = []
        self._purge_joiners(partitions)
        for work in strays:
            riding = (work.partition, work.offset, work.generation)
            if riding in self._riding:
                self._riding.discard(riding)
                self._unjoin(work)
            self._lanes.setdefault(work.lane, _Lane()).queue.append(work)

    def _purge_joiners(self, partitions: set[Partition]) -> None:
        self._riding = {riding for riding in self._riding if riding[0] not in partitions}
        for key in list(self._joiners):
            kept = [(work, deadline) for work, deadline in self._joiners[key] if work.partition not in partitions]
            if kept:
                self._joiners[key] = kept
            else:
                del self._joiners[key]

    def _note_assignment(self) -> None:
        """Count the partitions owned per topic (a gauge), and note since when they are lopsided."""
        counts = partitions_by_topic(self._states.keys(), [self.config.vacuum_topic, self.config.delay_topic])
        for topic, owned in counts.items():
            self._metrics.assigned_partitions.labels(topic).set(owned)
        found = lopsided(counts)
        if found is None:
            self._lopsided, self._lopsided_warned = None, False
        elif self._lopsided is None:
            self._lopsided = (found, self._clock.now_ms())
        else:
            self._lopsided = (found, self._lopsided[1])

    def _warn_if_lopsided(self, now_ms: int) -> None:
        """Warn once when the assignment has stayed lopsided past a rebalance's usual length: the
        cooperative protocols move partitions in two rounds, lopsided for a moment in between."""
        if self._lopsided is None or self._lopsided_warned:
            return
        found, since_ms = self._lopsided
        if now_ms - since_ms < LOPSIDED_WARN_AFTER_MS:
            return
        self._lopsided_warned = True
        advice = lopsided_advice(found, self.config.group_id, self.config.assignment, (now_ms - since_ms) / 1000)
        log(LOGGER, logging.WARNING, advice, owned=found.owned, topic=found.topic, missing=found.missing)

    def _forget(self, partitions: Sequence[Partition]) -> None:
        with self._guard:
            for partition in partitions:
                self._states.pop(partition, None)

    def _wait_idle(self, partitions: Sequence[Partition], timeout_s: float) -> None:
        """Let work already running on ``partitions`` finish (its outcome then counts for the commit)."""
        wanted = set(partitions)
        deadline = time.monotonic() + timeout_s
        while True:
            self._drain_finished()
            with self._guard:
                running = [key for key in self._executing if key[0] in wanted]
            if not running:
                return
            if time.monotonic() > deadline:
                log(
                    LOGGER,
                    logging.WARNING,
                    "gave up waiting for running work; it will be processed again",
                    partitions=[f"{t}[{p}]" for (t, p), _ in running],
                )
                return
            time.sleep(0.01)

    # -- gauges ------------------------------------------------------------------------------------

    def _note_pending(self, work: Work) -> None:
        """Remember the oldest vacuum seen waiting, per lane (not per vacuum: memory stays per table)."""
        if isinstance(work.event, CleanupRejected):
            return
        committed, now = _committed_at(work.event).timestamp(), self._clock.now_ms() / 1000
        horizon = now - max(60.0, 3 * self.config.interval_ms / 1000)
        with self._pending_lock:
            known = self._pending.get(work.lane)
            if known is not None and known[1] >= horizon:
                committed = min(committed, known[0])
            self._pending[work.lane] = (committed, now)

    def paused_count(self) -> float:
        return float(sum(1 for state in list(self._states.values()) if state.paused_until_ms is not None))

    def held_bytes(self) -> float:
        """Bytes of delay records held until due, over every partition (read from the metrics thread)."""
        return float(sum(state.held_bytes for state in list(self._states.values())))

    def oldest_pending_s(self) -> float:
        """Age of the oldest vacuum seen waiting: read and not finished (however long ago, e.g. behind a
        stalled head), or seen recently (entries expire when another process owns it)."""
        now = self._clock.now_ms() / 1000
        horizon = now - max(60.0, 3 * self.config.interval_ms / 1000)
        with self._pending_lock:
            for key in [key for key, (_, seen) in self._pending.items() if seen < horizon]:
                del self._pending[key]
            committed = [committed for committed, _ in self._pending.values()]
        committed += [item.committed_at_s for item in self._tracked() if item.committed_at_s is not None]
        oldest = min(committed, default=None)
        return 0.0 if oldest is None else max(0.0, now - oldest)

    def overdue_s(self) -> float:
        """How long the most overdue record read and not finished has been due: held past its due time,
        waiting for a retry after an unacknowledged outcome, or still being handled. About zero while
        the cleaner keeps up, whatever the locks make vacuums wait; alert when it exceeds a few intervals."""
        now = self._clock.now_ms()
        dues = [item.due_ms for item in self._tracked()]
        return max(0.0, (now - min(dues, default=now)) / 1000)

    def _tracked(self) -> list[_Tracked]:
        """A copy of every partition's unfinished records (called from the metrics thread)."""
        while True:
            try:
                return [item for state in list(self._states.values()) for item in list(state.tracked.values())]
            except RuntimeError:  # changed size while copied by the loop's thread: copy again
                continue

    @property
    def states(self) -> dict[Partition, PartitionState]:
        return self._states


def _keep_held(state: PartitionState, work: Work) -> None:
    state.held.append(work)
    state.held_bytes += len(work.record.value or b"")
    if isinstance(work.event, WaitingGroup):
        state.held_keys[work.event.key] += 1


def _take_due(state: PartitionState, now: int, gather_ms: int = 0) -> list[Work]:
    """Take the held records due by ``now`` out of ``state.held``, in offset order: each at its own due
    time, not after the records ahead of it. Several threads and processes write to one delay
    partition, each record due one interval after the check that wrote it, so the log's due times are
    a little out of order (by as much as a batch takes to publish): handed over in offset order alone,
    a record waited for a later-due one ahead of it (most of the re-check lateness at 100,000 parked
    vacuums). A table's own records still go in offset order: one waits for its table's earlier record
    (a bundle carries many tables and is checked on its own). See :func:`_release_times` for
    ``gather_ms``."""
    due: list[Work] = []
    kept: deque[Work] = deque()
    for work, release_ms in zip(state.held, _release_times(state.held, gather_ms), strict=True):
        if release_ms <= now:
            due.append(work)
            state.held_bytes -= len(work.record.value or b"")
            if isinstance(work.event, WaitingGroup):
                _unheld_key(state, work.event.key)
        else:
            kept.append(work)
    state.held = kept
    return due


def _next_release_ms(held: deque[Work], gather_ms: int = 0) -> int:
    """When :func:`_take_due` next takes one of ``held`` (not empty)."""
    return min(_release_times(held, gather_ms))


def _release_times(held: deque[Work], gather_ms: int) -> list[int]:
    """When each of ``held`` may be handed over: at its due time, but no sooner than its table's earlier
    records (a table's records go in offset order).

    ``gather_ms`` > 0: the records due within ``gather_ms`` of the earliest one form a run, handed over
    together once the last single-table record of the run is due (a bundle never makes the others
    wait); the records after the run go at their own times until they are the run. Records of one
    table alone, written by different batches a little apart (a slow first fetch, two threads), are
    then checked in one batch and packed into one bundle; without it they stayed apart for good, each
    batch with too few to bundle, each due at its own time. The cost is at most ``gather_ms`` of
    lateness for the run's first records, never an early hand-over."""
    table_ready: dict[str, int] = {}
    ready: list[int] = []
    for work in held:
        at = work.due_ms
        table_key = _table_key(work)
        if table_key is not None:
            at = table_ready[table_key] = max(at, table_ready.get(table_key, at))
        ready.append(at)
    if gather_ms <= 0 or not ready:
        return ready
    # Only the first run matters (what is handed over next): one pass, no sort, for every wake-up.
    last_alone = min(ready)
    window_end = last_alone + gather_ms
    for work, at in zip(held, ready, strict=True):
        if at <= window_end and not isinstance(work.event, WaitingBundle):
            last_alone = max(last_alone, at)
    return [max(at, last_alone) if at <= window_end else at for at in ready]


def _table_key(work: Work) -> str | None:
    """The table whose records must go in offset order (None for a bundle: it holds many)."""
    if isinstance(work.event, WaitingBundle):
        return None
    key = work.record.key
    return None if key is None else key.decode("utf-8", "replace")


def _unheld_key(state: PartitionState, key: str) -> None:
    left = state.held_keys[key] - 1
    if left > 0:
        state.held_keys[key] = left
    else:
        del state.held_keys[key]


def _committed_at(event: VacuumCommitted | DelayEnvelope | WaitingGroup | WaitingBundle) -> datetime:
    """When the (oldest) vacuum of an event committed."""
    if isinstance(event, WaitingGroup | WaitingBundle):
        return event.oldest_commit
    return (event.vacuum if isinstance(event, DelayEnvelope) else event).occurred_at


def _read_by_ms(work: Work, handler: Any) -> int:
    """After when a lock list must have been asked for to answer ``work``: after its vacuum's lock
    snapshot was taken. For a delay record this process wrote, its own check that wrote it; for
    anything else (whatever its fields say: another host's clock, or a forged record), when this
    loop read it. A bundle's check only ever keeps vacuums waiting (a lock still listed in an older
    list only delays), and what it sends to its tables' lanes carries the bundle's own time
    (``CleanupHandler._handle_bundle``): any list fresh enough serves it, so a batch of bundles never
    waits for a new ``show_locks``."""
    event = work.event
    if isinstance(event, WaitingBundle):
        return 0
    if isinstance(event, DelayEnvelope | WaitingGroup):
        checked_at: int | None = getattr(handler, "take_checked_at_ms", lambda _: None)(event.event_id)
        if checked_at is not None:
            return min(work.received_ms, checked_at)
    return work.received_ms


def _answered(works: Sequence[Work], handler: Any) -> Sequence[Work]:
    """The works of a lane whose lock list the batch's must be new enough for: all of them, except

    - in a bundle's lane, the fresh vacuums riding with it (``CleanerLoop._spill_joined``): its check
      only ever keeps them waiting (a lock of their snapshot still listed: an older list only delays);
      one that looks ready goes back to its own lane, whose batch asks for a list made after it was
      read. Counted, every batch of a bundle with riders waited for a new unfiltered ``show_locks``
      (400 ms at 10,000 locks, the worker's other tables behind it), which held a burst's take-in to
      about 150 fresh vacuums a second;
    - a fresh vacuum that the newest lock list keeps waiting (a lock of its snapshot listed): an older
      list can only answer it "wait" too, and a "ready" is asked again from newer lists by its own check
      (``TableLockCheck.readiness``). A burst of vacuums behind held locks otherwise made nearly every
      batch ask for a list of its own."""
    if works and isinstance(works[0].event, WaitingBundle):
        return works[:1]
    kept_waiting = getattr(handler, "kept_waiting_by_last_list", None)
    if kept_waiting is None:
        return works
    # Only a fresh vacuum: its own check asks a "ready" again from lists asked after it was read
    # (``TableLockCheck.readiness``); a delay record's check relies on the batch's lists for that.
    return [work for work in works if not (isinstance(work.event, VacuumCommitted) and kept_waiting(work))]


def _header(record: RawRecord, name: str) -> bytes | None:
    for key, value in record.headers:
        if key == name:
            return value
    return None


def _position(work: Work) -> dict[str, Any]:
    """Where a work item came from, for its log lines."""
    return {
        "topic": work.record.topic,
        "partition_number": work.record.partition,
        "offset": work.offset,
        "event_id": getattr(work.event, "event_id", None),
    }
