"""The cleaner loop's intake: from a consumed record to its table's lane, at its due time.

A record is decoded (:mod:`acidclean.consumers.record_decoding`), tracked for the gauges, and either
joins its key's next delay record (:mod:`acidclean.consumers.joiners`), is held until due (the
read-ahead, :mod:`acidclean.consumers.partition_state`), or is handed over to its lane. A partition is
paused when its read-ahead is full (the records after it are left unread and fetched again later) or
when the lanes hold ``max_queued`` records (resumed once half of them are finished). On the loop's
thread only.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import TopicPartition

from acidclean.consumers.bundles import WaitingBundle
from acidclean.consumers.joiners import Joiners
from acidclean.consumers.lanes import Lanes
from acidclean.consumers.loop_config import ConsumerLike, LoopConfig
from acidclean.consumers.loop_gauges import LoopGauges
from acidclean.consumers.metrics import CleanerMetrics
from acidclean.consumers.partition_state import (
    PartitionState,
    TrackedRecord,
    committed_at,
    keep_held,
    next_release_ms,
    take_due,
)
from acidclean.consumers.record_decoding import RecordDecoder
from acidclean.consumers.waiting import WaitingGroup
from acidclean.consumers.work import Work
from acidclean.schemas.events import CleanupRejected
from acidclean.shared.bus.consumer import ConsumerErrors
from acidclean.shared.bus.partitions import OwnedPartitions
from acidclean.shared.bus.records import raw_record

Partition = tuple[str, int]


class Intake:
    """Routes consumed records to the lanes, holding each until it is due."""

    def __init__(
        self,
        consumer: ConsumerLike,
        config: LoopConfig,
        partitions: OwnedPartitions[PartitionState],
        lanes: Lanes,
        joiners: Joiners,
        gauges: LoopGauges,
        metrics: CleanerMetrics,
        consumer_errors: ConsumerErrors,
    ) -> None:
        self._consumer = consumer
        self._config = config
        self._partitions = partitions
        self._states = partitions.states
        self._lanes = lanes
        self._joiners = joiners
        self._gauges = gauges
        self._metrics = metrics
        self._consumer_errors = consumer_errors
        self._decoder = RecordDecoder(config, metrics)
        self._tenant_prefix = f"{config.tenant}/".encode()

    def route(self, message: Any, now: int) -> None:
        owned = self._partitions.owned_record(message, self._consumer_errors)
        if owned is None:
            return  # an error, or fetched before a revoke: its next owner reads it from the committed offset
        partition, state, offset = owned
        if state.seen_until is not None and offset < state.seen_until:
            return  # a re-fetched copy of a record already handed over or held
        held_full = len(state.held) >= self._config.held_per_partition or state.held_bytes >= self._config.held_bytes
        if state.dropping or (state.paused_until_ms is not None and held_full):
            # Not read at all: fetched again from the first record not read once the partition reads on,
            # so the memory held stays bounded however many vacuums wait, and the offset never moves
            # past it.
            if state.reading_ahead:
                self._consumer.pause([TopicPartition(*partition)])
                state.reading_ahead = False
            state.dropping = True
            return
        new_work = partition[0] != self._config.delay_topic
        if state.paused_until_ms is None and self.outstanding(new_work) >= self._config.max_queued:
            # Overloaded: stop reading this partition at this record until the lanes drain, so the
            # memory of a cleaner that cannot keep up does not grow with its backlog.
            topic, number = partition
            self._consumer.pause([TopicPartition(topic, number)])
            self._consumer.seek(TopicPartition(topic, number, offset))
            state.backlogged = state.dropping = True
            return
        state.seen_until = offset + 1
        key = message.key()
        if key is not None and not bytes(key if isinstance(key, bytes) else key.encode()).startswith(
            self._tenant_prefix
        ):
            self._metrics.events.labels("skipped_other_tenant").inc()
            return  # another tenant's record: that tenant's own consumer group handles it
        work = self._decoder.work(raw_record(message), state.generation, now)
        self._track(state, work)
        if self._joiners.join_chain(partition, state, work, now):
            return
        if state.held or state.paused_until_ms is not None:
            keep_held(state, work)
            if state.reading_ahead and state.paused_until_ms is not None and work.due_ms < state.paused_until_ms:
                # due before those ahead of it (see _take_due): wake then, and _release_due decides (a
                # table's order or a gather may keep it), instead of working out every release per read
                state.paused_until_ms = work.due_ms
            return
        if work.due_ms > now:
            self._hold(partition, state, work)
            return
        if isinstance(work.event, WaitingGroup) and self._joiners.waits_for_next_record(partition, state, work, now):
            return
        self._hand_over(partition, state, work, now)

    def _track(self, state: PartitionState, work: Work) -> None:
        if work.offset in state.tracked:
            return  # read again after a rewind: it has been due since the first time
        committed = None
        if not isinstance(work.event, CleanupRejected):
            committed = committed_at(work.event)
        state.tracked[work.offset] = TrackedRecord(
            work.due_ms or work.received_ms, None if committed is None else committed.timestamp()
        )

    def _hold(self, partition: Partition, state: PartitionState, work: Work) -> None:
        """The partition's next record is not yet due: keep it, and go on fetching the records after it
        (held too, up to the read-ahead), so the records written while this one waits are in hand when
        they come due. Pausing here stopped the fetch: the records written meanwhile were fetched only
        after the resume, up to a fetch long-poll after their due time."""
        keep_held(state, work)
        state.paused_until_ms = work.due_ms
        state.reading_ahead = True
        self._gauges.note_pending(work)

    def _hand_over(self, partition: Partition, state: PartitionState, work: Work, now: int) -> None:
        state.in_flight.add(work.offset)
        self._gauges.note_pending(work)
        lane = self._lanes.queue_of(work)
        lane.append(work)
        if isinstance(work.event, WaitingBundle):
            if self._joiners:
                self._joiners.spill_joined(work.event, lane, now)
            return
        if partition[0] == self._config.delay_topic and self._joiners:
            lane.extend(self._joiners.take_for(work))

    def outstanding(self, new_work: bool = True) -> int:
        """Records handed over and not finished (queued in the lanes or running in a batch), and for
        ``new_work`` (a fresh vacuum) the fresh vacuums waiting to join their key's delay record too."""
        handed, fresh_joiners = 0, 0
        for partition, state in self._states.items():
            handed += len(state.in_flight) - state.joiners
            if partition[0] != self._config.delay_topic:
                fresh_joiners += state.joiners
        return handed + fresh_joiners if new_work else handed

    def resume_backlogged(self) -> None:
        backlogged = [(partition, state) for partition, state in self._states.items() if state.backlogged]
        if not backlogged:
            return
        limit = self._config.max_queued // 2
        room = {False: self.outstanding(False) <= limit}
        room[True] = room[False] and self.outstanding(True) <= limit
        for partition, state in backlogged:
            if state.accepting and room[partition[0] != self._config.delay_topic]:
                state.backlogged = state.dropping = False
                self._consumer.resume([TopicPartition(*partition)])

    def release_due(self, now: int) -> None:
        if self._joiners:
            self._joiners.release_late(now)
        for partition, state in self._states.items():
            if state.paused_until_ms is None or state.paused_until_ms > now or not state.accepting:
                continue
            for released in take_due(state, now, self._config.gather_ms):
                if isinstance(released.event, WaitingGroup) and self._joiners.waits_for_next_record(
                    partition, state, released, now
                ):
                    continue
                self._hand_over(partition, state, released, now)
            if state.held:
                state.paused_until_ms = next_release_ms(state.held, self._config.gather_ms)
                if state.dropping and state.seen_until is not None and self._half_held(state):
                    # Records after the held ones wait unread: read on now, not once the last held one
                    # is due, so they are in hand at their due time (a partition's bundles due within
                    # one interval can be more than the read-ahead).
                    state.dropping, state.reading_ahead = False, True
                    self._consumer.seek(TopicPartition(*partition, state.seen_until))
                    self._consumer.resume([TopicPartition(*partition)])
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
                    self._consumer.seek(TopicPartition(*partition, state.seen_until))
                self._consumer.resume([TopicPartition(*partition)])

    def _half_held(self, state: PartitionState) -> bool:
        """Whether at most half the read-ahead of a partition is taken."""
        config = self._config
        return 2 * len(state.held) <= config.held_per_partition and 2 * state.held_bytes <= config.held_bytes

    def next_due_ms(self) -> int | None:
        dues = [state.paused_until_ms for state in self._states.values() if state.paused_until_ms is not None]
        return min(dues) if dues else None
