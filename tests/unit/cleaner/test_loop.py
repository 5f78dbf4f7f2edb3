"""The consumer loop against a fake consumer: delays per partition, never early, offsets, rebalances."""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from acidclean.consumers.bundles import WaitingBundle
from acidclean.consumers.loop import CleanerLoop, LoopConfig
from acidclean.consumers.metrics import CleanerMetrics
from acidclean.consumers.partition_state import PartitionState, release_times
from acidclean.consumers.rules.readiness import Readiness
from acidclean.consumers.scheduling import IDLE_POLL_CAP_S, delay_envelope
from acidclean.consumers.work import Outcome, Work
from acidclean.schemas.events import CleanupRejected, CleanupStarted, DelayEnvelope
from acidclean.shared.acid.names import delta_name
from acidclean.shared.errors import BusError

from .fakes import LOCATION, TOPICS, FakeClock, FakeConsumer, InlineExecutor, Rig, lock, vacuum

V, D = TOPICS.vacuum_committed, TOPICS.cleanup_delay


class EmptyBatch:
    """A batch that holds nothing (the loop closes every batch it ran)."""

    def close(self) -> None:
        return None


class StubHandler:
    """Records what the loop hands over and when; fails the offsets it is told to fail once."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.handled: list[tuple[str, int, int, int, int]] = []  # topic, partition, offset, handled at, due
        self.fail_once: set[tuple[str, int, int]] = set()
        self.lock_checks = 0

    def lock_check(self, work: Work, batch: object = None) -> object:
        self.lock_checks += 1
        return object()

    def batch(self, tables: int, read_by_ms: int = 0) -> EmptyBatch:
        return EmptyBatch()

    def prefetch(self, batch: object, firsts: object) -> None:
        return None

    def run_prepared(self, batch: object) -> dict[int, object]:
        return {}

    def flush_batch(self, batch: object) -> None:
        return None

    def handle(self, work: Work, locks: object) -> Outcome:
        key = (work.record.topic, work.record.partition, work.offset)
        self.handled.append((*key, self.clock.now_ms(), work.due_ms))
        if key in self.fail_once:
            self.fail_once.discard(key)
            raise BusError("simulated: not acknowledged")
        kind = "dead_lettered" if isinstance(work.event, CleanupRejected) else "cleaned"
        return Outcome(kind, work.event)  # type: ignore[arg-type]

    def stuck_count(self, within_s: float) -> int:
        return 0

    def flush_delays(self, locks: object) -> None:
        return None

    def offsets(self, topic: str, partition: int) -> list[int]:
        return [offset for t, p, offset, _, _ in self.handled if (t, p) == (topic, partition)]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def consumer(clock: FakeClock) -> FakeConsumer:
    return FakeConsumer(clock)


@pytest.fixture
def handler(clock: FakeClock) -> StubHandler:
    return StubHandler(clock)


def make_loop(consumer: FakeConsumer, handler: StubHandler, clock: FakeClock) -> CleanerLoop:
    loop = CleanerLoop(
        consumer,
        handler,  # type: ignore[arg-type]
        LoopConfig(vacuum_topic=V, delay_topic=D, tenant="acme", cleaner_id="c1", interval_ms=2000),
        executor=InlineExecutor(),
        metrics=CleanerMetrics(),
        clock=clock,
    )
    loop.subscribe()
    consumer.rebalance_assign([(V, 0), (V, 1), (D, 0), (D, 1)])
    return loop


def envelope(clock: FakeClock, due_in_s: float, table: str = "sales.orders", partition: str = "ds=1") -> DelayEnvelope:
    v = vacuum(table=table, partition=partition, location=f"/warehouse/{table}/{partition}")
    now = clock.now()
    return delay_envelope(
        v,
        Readiness(False, (lock(),)),
        now=now,
        interval_ms=2000,
        max_wait_s=3600,
        due=now + timedelta(seconds=due_in_s),
    )


def run(loop: CleanerLoop, steps: int = 10) -> None:
    for _ in range(steps):
        loop.step()


def test_not_due_record_holds_only_its_own_partition(
    consumer: FakeConsumer, handler: StubHandler, clock: FakeClock
) -> None:
    loop = make_loop(consumer, handler, clock)
    consumer.append(D, 0, envelope(clock, 60, partition="ds=1"))
    consumer.append(D, 1, envelope(clock, 0, partition="ds=2"))
    consumer.append(V, 0, vacuum())
    run(loop, 3)
    assert handler.offsets(D, 1) == [0] and handler.offsets(V, 0) == [0]
    assert handler.offsets(D, 0) == []
    assert [work.offset for work in loop.states[(D, 0)].held] == [0]
    assert loop.paused_count() == 1.0
    # Held, not paused: the partition's fetch goes on, so nothing is fetched twice.
    assert consumer.paused == set() and consumer.seeks == []


def test_the_held_bytes_gauge_counts_the_records_held_until_due_and_drops_them_once_handed_over(
    consumer: FakeConsumer, handler: StubHandler, clock: FakeClock
) -> None:
    loop = make_loop(consumer, handler, clock)
    consumer.append(D, 0, envelope(clock, 60, partition="ds=1"))
    consumer.append(D, 1, envelope(clock, 60, partition="ds=2"))
    run(loop, 3)
    held = [work for partition in ((D, 0), (D, 1)) for work in loop.states[partition].held]
    assert len(held) == 2
    assert loop.held_bytes() == sum(len(work.record.value or b"") for work in held) > 0
    metrics = loop._metrics.registry.get_sample_value("acidclean_cleaner_held_bytes")
    assert metrics == loop.held_bytes()
    clock.advance(60)
    run(loop, 3)
    assert handler.offsets(D, 0) == [0] and handler.offsets(D, 1) == [0]
    assert loop.held_bytes() == 0.0


def test_records_written_while_a_head_waits_are_in_hand_at_their_due_time_without_a_refetch(
    consumer: FakeConsumer, handler: StubHandler, clock: FakeClock
) -> None:
    """A delay partition whose head is not yet due keeps fetching: the records written after the head
    (due after it) are read before they are due, so each is handed over at its due time, not one fetch
    after the head's. Nothing is handed over early, and each record is fetched once."""
    loop = make_loop(consumer, handler, clock)
    consumer.append(D, 0, envelope(clock, 1.0, partition="ds=0"))
    run(loop, 2)
    for number in range(1, 5):  # written while the head waits, each due a little later
        clock.advance(0.1)
        consumer.append(D, 0, envelope(clock, 1.0, partition=f"ds={number}"))
        run(loop, 1)
    state = loop.states[(D, 0)]
    assert [work.offset for work in state.held] == [0, 1, 2, 3, 4] and handler.offsets(D, 0) == []
    run(loop, 400)
    handled = [(offset, at, due) for topic, _, offset, at, due in handler.handled if topic == D]
    assert [offset for offset, _, _ in handled] == [0, 1, 2, 3, 4]
    assert all(0 <= at - due < 60 for _, at, due in handled), handled  # never early, none a fetch late
    assert [consumer.deliveries[(D, 0, offset)] for offset in range(5)] == [1] * 5
    assert consumer.paused == set() and consumer.seeks == [] and not state.reading_ahead
    assert consumer.committed[(D, 0)] == 5


def test_a_record_due_before_the_records_held_ahead_of_it_is_handed_over_at_its_own_due_time(
    consumer: FakeConsumer, handler: StubHandler, clock: FakeClock
) -> None:
    """Threads and processes publishing at once write a delay partition's due times a little out of
    order: a record due before the one ahead of it (another table's) is handed over at its own due
    time, not when the one ahead is due. The committed offset still stays below the record held."""
    loop = make_loop(consumer, handler, clock)
    consumer.append(D, 0, envelope(clock, 1.0, table="sales.first"))
    consumer.append(D, 0, envelope(clock, 0.3, table="sales.second"))
    consumer.append(D, 0, envelope(clock, 0.6, table="sales.third"))
    start = clock.now_ms()
    while not handler.handled:
        loop.step()
    early = [(offset, at, due) for topic, _, offset, at, due in handler.handled if topic == D]
    assert [offset for offset, _, _ in early] == [1] and 0 <= early[0][1] - early[0][2] < 60, early
    assert early[0][2] == start + 300
    assert consumer.committed.get((D, 0), 0) == 0  # offset 0 is still held
    run(loop, 400)
    handled = [(offset, at, due) for topic, _, offset, at, due in handler.handled if topic == D]
    assert [offset for offset, _, _ in handled] == [1, 2, 0]
    assert all(0 <= at - due < 60 for _, at, due in handled), handled
    assert consumer.committed[(D, 0)] == 3


def test_a_tables_later_record_due_first_still_waits_for_its_earlier_one(
    consumer: FakeConsumer, handler: StubHandler, clock: FakeClock
) -> None:
    """One table's records go in offset order, whatever their due times: the later one is handed over
    only with or after the earlier one (never before its own due time either)."""
    loop = make_loop(consumer, handler, clock)
    consumer.append(D, 0, envelope(clock, 1.0))
    consumer.append(D, 0, envelope(clock, 0.3))  # the same table and partition: the same key
    consumer.append(D, 0, envelope(clock, 0.5, table="sales.other"))
    run(loop, 500)
    handled = [(offset, at, due) for topic, _, offset, at, due in handler.handled if topic == D]
    assert [offset for offset, _, _ in handled] == [2, 0, 1]
    (_, other_at, other_due), (_, first_at, first_due), (_, second_at, _) = handled
    assert 0 <= other_at - other_due < 60 and 0 <= first_at - first_due < 60
    assert second_at >= first_at
    assert consumer.committed[(D, 0)] == 3
    # While the later record waits for the earlier one, the loop does not spin: no poll without a wait.
    assert 0.0 not in consumer.consume_timeouts


class BatchRecordingHandler(StubHandler):
    """A StubHandler that also records each batch: when it ran, and the tables it took."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.batches: list[tuple[int, int]] = []  # handled at, tables

    def batch(self, tables: int, read_by_ms: int = 0) -> EmptyBatch:
        self.batches.append((self.clock.now_ms(), tables))
        return EmptyBatch()


def test_single_table_records_due_within_the_gather_are_handed_over_together_in_one_batch(
    consumer: FakeConsumer, clock: FakeClock
) -> None:
    """Records of one table each, written a little apart (a slow first fetch, two threads), are checked
    in one batch when due within ``gather_ms`` of the first: the handler can then bundle them. None is
    handed over before its own due time, none later than the run's first plus ``gather_ms``; one due
    after the gather goes at its own time."""
    handler = BatchRecordingHandler(clock)
    loop = CleanerLoop(
        consumer,
        handler,  # type: ignore[arg-type]
        LoopConfig(vacuum_topic=V, delay_topic=D, tenant="acme", cleaner_id="c1", interval_ms=2000, gather_ms=100),
        executor=InlineExecutor(),
        metrics=CleanerMetrics(),
        clock=clock,
    )
    loop.subscribe()
    consumer.rebalance_assign([(V, 0), (V, 1), (D, 0), (D, 1)])
    start = clock.now_ms()
    for table, due_in_s in (("sales.a", 0.38), ("sales.b", 0.3), ("sales.c", 0.35), ("sales.d", 0.6)):
        consumer.append(D, 0, envelope(clock, due_in_s, table=table))
    run(loop, 400)
    handled = {offset: (at, due) for topic, _, offset, at, due in handler.handled if topic == D}
    assert sorted(handled) == [0, 1, 2, 3]
    assert all(at >= due for at, due in handled.values()), handled
    together = {handled[offset][0] for offset in (0, 1, 2)}
    assert len(together) == 1 and start + 380 <= together.pop() < start + 400 + 60, handled
    assert 0 <= handled[3][0] - handled[3][1] < 60, handled
    assert [tables for _, tables in handler.batches] == [3, 1]
    assert consumer.committed[(D, 0)] == 4


def test_without_a_gather_each_record_goes_at_its_own_due_time(consumer: FakeConsumer, clock: FakeClock) -> None:
    """The same records with ``gather_ms`` 0 (the loop's default): three batches, each on time."""
    handler = BatchRecordingHandler(clock)
    loop = make_loop(consumer, handler, clock)
    for table, due_in_s in (("sales.a", 0.38), ("sales.b", 0.3), ("sales.c", 0.6)):
        consumer.append(D, 0, envelope(clock, due_in_s, table=table))
    run(loop, 400)
    assert all(0 <= at - due < 60 for topic, _, _, at, due in handler.handled if topic == D), handler.handled
    assert len(handler.batches) == 3


def held_work(due_ms: int, key: bytes | None, bundle: bool = False) -> Any:
    event = object.__new__(WaitingBundle) if bundle else object()
    return SimpleNamespace(due_ms=due_ms, record=SimpleNamespace(key=key), event=event)


def test_a_bundle_waits_for_the_single_records_due_with_it_but_never_makes_them_wait() -> None:
    """The release times of held records under a gather of 100 ms: a bundle due first goes with the
    single-table record due 40 ms after it; a single due before a bundle goes at its own time; a
    table's later record never goes before its earlier one; nothing goes before its due time."""
    held = deque(
        [
            held_work(1000, None, bundle=True),
            held_work(1040, b"acme/sales.a"),
            held_work(2000, b"acme/sales.b"),
            held_work(2050, None, bundle=True),
            held_work(3000, b"acme/sales.c"),
            held_work(2900, b"acme/sales.c"),  # the table's later record, due first
        ]
    )
    assert release_times(held, 100) == [1040, 1040, 2000, 2050, 3000, 3000]
    assert release_times(held, 0) == [1000, 1040, 2000, 2050, 3000, 3000]


class SlowAcknowledgements(StubHandler):
    """Every outcome waits for its batch's publish, whose acknowledgement comes when ``acked`` is set."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.acked = threading.Event()
        self.flushing = 0
        self.flushed = 0

    def handle(self, work: Work, locks: object) -> Outcome:
        outcome = super().handle(work, locks)
        return dataclasses.replace(outcome, kind="delayed", deferred=True)

    def flush_batch(self, batch: object) -> None:
        self.flushing += 1
        assert self.acked.wait(10)
        self.flushed += 1


def step_until(loop: CleanerLoop, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        loop.step()
        time.sleep(0.001)


def test_a_worker_checks_the_next_batch_while_the_broker_acknowledges_the_last_whose_records_wait_for_it(
    consumer: FakeConsumer, clock: FakeClock
) -> None:
    """With an ack executor a batch's publish and wait run there: the one worker checks another table's
    record meanwhile. A table's next record waits until its last one's outcome is acknowledged, and no
    offset is committed past an unacknowledged outcome."""
    handler = SlowAcknowledgements(clock)
    with ThreadPoolExecutor(1) as workers, ThreadPoolExecutor(2) as acks:
        loop = CleanerLoop(
            consumer,
            handler,  # type: ignore[arg-type]
            LoopConfig(vacuum_topic=V, delay_topic=D, tenant="acme", cleaner_id="c1", interval_ms=2000, workers=1),
            executor=workers,
            ack_executor=acks,
            metrics=CleanerMetrics(),
            clock=clock,
        )
        loop.subscribe()
        consumer.rebalance_assign([(V, 0), (D, 0)])
        consumer.append(V, 0, vacuum(table="sales.first"))
        step_until(loop, lambda: handler.flushing == 1)
        consumer.append(V, 0, vacuum(table="sales.second"))
        consumer.append(V, 0, vacuum(table="sales.first"))  # the first table's next record
        step_until(loop, lambda: handler.flushing == 2)
        assert handler.offsets(V, 0) == [0, 1]  # the second table checked while the first's publish waits
        assert handler.flushed == 0 and consumer.committed.get((V, 0), 0) == 0
        handler.acked.set()
        step_until(loop, lambda: consumer.committed.get((V, 0)) == 3)
        assert handler.offsets(V, 0) == [0, 1, 2]  # the first table's next record only once its last was acked
        loop.shutdown()


def test_nothing_is_handed_over_before_its_due_time_and_everything_is_eventually(
    consumer: FakeConsumer, handler: StubHandler, clock: FakeClock
) -> None:
    loop = make_loop(consumer, handler, clock)
    for index, due in enumerate([0.5, 0.5, 1.2, 3.0, 2.0]):  # the last one is out of order on purpose
        consumer.append(D, index % 2, envelope(clock, due, partition=f"ds={index}"))
    run(loop, 400)
    assert len(handler.handled) == 5
    for _, _, _, handled_at, due in handler.handled:
        assert handled_at >= due
    assert consumer.paused == set()


def test_records_held_in_memory_are_checked_at_their_due_time_without_waiting_for_a_refetch(
    consumer: FakeConsumer, handler: StubHandler, clock: FakeClock
) -> None:
    loop = make_loop(consumer, handler, clock)
    for index in range(3):
        consumer.append(D, 0, envelope(clock, 1.0, partition=f"ds={index}"))
    run(loop, 200)
    handled_at = [at for _, _, _, at, _ in handler.handled]
    due = handler.handled[0][4]
    assert len(handled_at) == 3 and all(due <= at <= due + 25 for at in handled_at)
    assert handler.offsets(D, 0) == [0, 1, 2]  # the re-fetched copies after the resume are skipped


def test_poll_timeout_follows_the_next_due_time_and_stays_far_below_max_poll_interval(
    consumer: FakeConsumer, handler: StubHandler, clock: FakeClock
) -> None:
    loop = make_loop(consumer, handler, clock)
    consumer.append(D, 0, envelope(clock, 0.037))
    run(loop, 30)
    assert max(consumer.consume_timeouts) <= IDLE_POLL_CAP_S
    assert any(0.03 <= timeout <= 0.037 for timeout in consumer.consume_timeouts)


def test_one_tables_events_in_a_batch_share_one_lock_check(
    consumer: FakeConsumer, handler: StubHandler, clock: FakeClock
) -> None:
    loop = make_loop(consumer, handler, clock)
    for partition in ("ds=1", "ds=2", "ds=3"):
        consumer.append(V, 0, vacuum(partition=partition))
    consumer.append(V, 1, vacuum(table="sales.returns"))
    run(loop, 3)
    assert len(handler.handled) == 4
    assert handler.lock_checks == 2  # sales.orders once, sales.returns once


def test_offsets_are_committed_only_after_the_outcome_is_acknowledged(
    consumer: FakeConsumer, handler: StubHandler, clock: FakeClock
) -> None:
    loop = make_loop(consumer, handler, clock)
    for partition in ("ds=1", "ds=2", "ds=3"):
        consumer.append(V, 0, vacuum(partition=partition))
    handler.fail_once.add((V, 0, 1))
    run(loop, 3)
    assert consumer.committed.get((V, 0), 0) <= 1  # offset 1 failed: nothing at or past it is committed
    run(loop, 300)  # after one interval the partition is re-read from offset 1
    assert handler.offsets(V, 0).count(1) == 2
    assert consumer.committed[(V, 0)] == 3


def test_commits_never_move_past_a_record_still_in_flight() -> None:
    state = PartitionState(generation=1, seen_until=10, in_flight={4, 7})
    assert state.committable() == 4
    state.in_flight.discard(4)
    assert state.committable() == 7
    state.in_flight.clear()
    assert state.committable() == 10


def test_other_tenants_records_are_skipped_and_committed_past(
    consumer: FakeConsumer, handler: StubHandler, clock: FakeClock
) -> None:
    loop = make_loop(consumer, handler, clock)
    consumer.append(V, 0, vacuum(tenant="globex"))
    consumer.append(V, 0, vacuum())
    run(loop, 3)
    assert handler.offsets(V, 0) == [1]
    assert consumer.committed[(V, 0)] == 2


def test_undecodable_record_is_handed_over_as_a_dead_letter(
    consumer: FakeConsumer, handler: StubHandler, clock: FakeClock
) -> None:
    loop = make_loop(consumer, handler, clock)
    consumer.append_raw(V, 0, b"acme/sales.orders", b"{not json")
    run(loop, 3)
    assert handler.offsets(V, 0) == [0]
    assert consumer.committed[(V, 0)] == 1


def test_envelope_due_too_far_ahead_is_clamped_to_one_interval_not_parked(
    consumer: FakeConsumer, handler: StubHandler, clock: FakeClock
) -> None:
    loop = make_loop(consumer, handler, clock)
    read_at = clock.now_ms()
    consumer.append(D, 0, envelope(clock, 30 * 24 * 3600))
    run(loop, 100)
    [(_, _, offset, handled_at, due)] = handler.handled
    assert offset == 0 and read_at + 2000 <= due <= read_at + 2010 and due <= handled_at < due + 600
    assert consumer.paused == set() and consumer.committed[(D, 0)] == 1


def test_revoke_while_paused_drops_the_pause_and_commits_nothing_afterwards(
    consumer: FakeConsumer, handler: StubHandler, clock: FakeClock
) -> None:
    loop = make_loop(consumer, handler, clock)
    consumer.append(D, 0, envelope(clock, 5))
    run(loop, 2)
    assert loop.paused_count() == 1.0
    consumer.rebalance_revoke([(D, 0)])
    assert (D, 0) not in loop.states and loop.paused_count() == 0
    run(loop, 50)  # the fake consumer refuses any commit for a partition it does not own
    assert handler.offsets(D, 0) == []


def test_reassigned_partition_is_resumed_and_its_head_processed_when_due(
    consumer: FakeConsumer, handler: StubHandler, clock: FakeClock
) -> None:
    loop = make_loop(consumer, handler, clock)
    record = consumer.append(D, 0, envelope(clock, 3))
    run(loop, 2)
    consumer.rebalance_revoke([(D, 0)])
    consumer.rebalance_assign([(D, 0)])  # librdkafka may hand it back still paused
    assert (D, 0) not in consumer.paused
    run(loop, 200)
    [(_, _, offset, handled_at, due)] = handler.handled
    assert offset == record.offset and handled_at >= due
    assert handled_at - due < 600  # not stuck past its due time
    assert consumer.committed[(D, 0)] == 1


def test_lost_partitions_are_forgotten_without_a_commit(
    consumer: FakeConsumer, handler: StubHandler, clock: FakeClock
) -> None:
    loop = make_loop(consumer, handler, clock)
    consumer.append(V, 0, vacuum())
    commits_before = len(consumer.commit_calls)
    consumer.rebalance_lost([(V, 0)])
    run(loop, 3)
    assert (V, 0) not in loop.states
    assert len(consumer.commit_calls) == commits_before


def test_work_of_a_revoked_partition_that_has_not_started_is_abandoned(
    consumer: FakeConsumer, handler: StubHandler, clock: FakeClock
) -> None:
    loop = make_loop(consumer, handler, clock)
    consumer.append(V, 0, vacuum())
    loop.intake.route(_message(consumer, V, 0, 0), clock.now_ms())  # handed over, queued in its lane
    consumer.rebalance_revoke([(V, 0)])
    run(loop, 3)
    assert handler.handled == []


def test_shutdown_commits_finished_work_and_closes(
    consumer: FakeConsumer, handler: StubHandler, clock: FakeClock
) -> None:
    loop = make_loop(consumer, handler, clock)
    consumer.append(V, 0, vacuum())
    run(loop, 2)
    loop.shutdown(timeout_s=1)
    assert consumer.closed and consumer.committed[(V, 0)] == 1


def _message(consumer: FakeConsumer, topic: str, partition: int, offset: int) -> Any:
    from .fakes import FakeMessage

    return FakeMessage(consumer.logs[(topic, partition)][offset])


# -- the loop with the real handler over fakes ---------------------------------------------------------


def real_handler_loop(clock: FakeClock, consumer: FakeConsumer) -> tuple[Rig, CleanerLoop]:
    """The loop over the real handler, whose table has a reader holding lock 7."""
    rig = Rig(clock=clock)
    rig.metastore.add_table("sales.orders", "file:" + LOCATION, "ds=2025-03-14")
    rig.metastore.take_lock(7, "sales.orders", "ds=2025-03-14")
    loop = CleanerLoop(
        consumer,
        rig.handler,
        LoopConfig(vacuum_topic=V, delay_topic=D, tenant="acme", cleaner_id="c1", interval_ms=2000),
        executor=InlineExecutor(),
        metrics=rig.metrics,
        clock=clock,
    )
    loop.subscribe()
    consumer.rebalance_assign([(V, 0), (D, 0)])
    return rig, loop


def test_full_cycle_waits_through_the_delay_topic_then_cleans(clock: FakeClock, consumer: FakeConsumer) -> None:
    rig, loop = real_handler_loop(clock, consumer)
    rig.fs.add_acid_dirs(LOCATION, [delta_name(i, i, 0) for i in (1, 2, 3)] + [delta_name(1, 3)])
    v = vacuum()
    rig.fs.mark_vacuum_output(v)
    consumer.append(V, 0, v)
    moved = 0

    def pump(steps: int) -> None:
        nonlocal moved
        for _ in range(steps):
            loop.step()
            for record in rig.bus.records.get(TOPICS.cleanup_delay, [])[moved:]:
                consumer.logs.setdefault((D, 0), []).append(
                    record.__class__(D, 0, len(consumer.logs.get((D, 0), [])), record.key, record.value, record.headers)
                )
                moved += 1

    pump(5)
    assert consumer.committed[(V, 0)] == 1 and rig.fs.deleted == []
    pump(300)  # about 3 intervals of waiting
    envelopes = [e for e in rig.published(TOPICS.cleanup_delay) if isinstance(e, DelayEnvelope)]
    assert len(envelopes) >= 2 and [e.attempt for e in envelopes] == list(range(1, len(envelopes) + 1))
    for previous, following in itertools.pairwise(envelopes):
        assert following.occurred_at >= previous.due_at  # never early
    rig.metastore.release(7)
    pump(300)
    [started, done] = rig.published(TOPICS.cleanup_done)
    assert isinstance(started, CleanupStarted) and started.attempt == len(envelopes) + 1
    assert done.attempts == len(envelopes) + 1  # type: ignore[union-attr]
    assert sorted(p.rsplit("/", 1)[1] for p in rig.fs.deleted) == [delta_name(i, i, 0) for i in (1, 2, 3)]
    assert consumer.committed[(D, 0)] == len(envelopes)


def test_an_unacknowledged_delay_batch_is_retried_and_not_committed(clock: FakeClock, consumer: FakeConsumer) -> None:
    rig, loop = real_handler_loop(clock, consumer)
    consumer.append(V, 0, vacuum())
    consumer.append(V, 0, vacuum(partition="ds=2"))
    rig.bus.fail_next(3)  # the batch, then each envelope on its own (a refused batch is retried item by item)
    run(loop, 3)
    assert consumer.committed.get((V, 0), 0) == 0 and rig.bus.records == {}
    run(loop, 300)  # re-read after one interval: both envelopes published, offsets committed
    assert len(rig.published(TOPICS.cleanup_delay)) == 2
    assert consumer.committed[(V, 0)] == 2


def test_a_paused_partition_keeps_at_most_held_per_partition_records_and_reads_the_rest_again(
    consumer: FakeConsumer, handler: StubHandler, clock: FakeClock
) -> None:
    loop = CleanerLoop(
        consumer,
        handler,  # type: ignore[arg-type]
        LoopConfig(
            vacuum_topic=V, delay_topic=D, tenant="acme", cleaner_id="c1", interval_ms=2000, held_per_partition=3
        ),
        executor=InlineExecutor(),
        metrics=CleanerMetrics(),
        clock=clock,
    )
    loop.subscribe()
    consumer.rebalance_assign([(V, 0), (D, 0)])
    for index in range(10):
        consumer.append(D, 0, envelope(clock, 5 + index * 0.1, table=f"sales.t{index}", partition="ds=1"))
    run(loop, 3)
    state = loop.states[(D, 0)]
    assert len(state.held) == 3 and state.seen_until == 3 and state.dropping
    assert handler.offsets(D, 0) == []
    assert state.committable() == 0

    def handled_delays() -> list[int]:
        return [offset for topic, _, offset, _, _ in handler.handled if topic == D]

    for _ in range(100):
        if len(handled_delays()) >= 2:
            break
        loop.step()
    loop.step()  # the fetch after the resume
    # Two of the three handed over, the third not yet due: at most half the read-ahead is taken, so the
    # partition reads on now (the records after the held ones are in hand before they are due), not once
    # the last held one is due.
    assert handled_delays() == [0, 1] and state.seen_until == 5 and [w.offset for w in state.held] == [2, 3, 4]
    run(loop, 200)
    handled = [(offset, at, due) for topic, _, offset, at, due in handler.handled if topic == D]
    assert [offset for offset, _, _ in handled] == list(range(10))  # each once, in order
    assert all(at >= due for _, at, due in handled)  # never early
    assert consumer.committed[(D, 0)] == 10 and not state.dropping and not state.reading_ahead
    # Reading resumes at the first record not read whenever at most one of the three is held: a record
    # is fetched again only for each pass that left it unread (two new ones held per pass after the
    # first), never once it was held.
    assert [consumer.deliveries[(D, 0, offset)] for offset in range(10)] == [1, 1, 1, 2, 2, 3, 3, 4, 4, 5]


def test_a_cleaner_that_cannot_keep_up_stops_reading_until_its_lanes_drain_and_loses_nothing(
    consumer: FakeConsumer, handler: StubHandler, clock: FakeClock
) -> None:
    class CountingExecutor(InlineExecutor):
        """Runs batches inline and records how many records the lanes held when each was taken."""

        def __init__(self) -> None:
            self.queued: list[int] = []

        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            self.queued.append(loop.intake.outstanding())
            return super().submit(fn, *args, **kwargs)

    executor = CountingExecutor()
    loop = CleanerLoop(
        consumer,
        handler,  # type: ignore[arg-type]
        LoopConfig(vacuum_topic=V, delay_topic=D, tenant="acme", cleaner_id="c1", interval_ms=2000, max_queued=4),
        executor=executor,
        metrics=CleanerMetrics(),
        clock=clock,
    )
    loop.subscribe()
    consumer.rebalance_assign([(V, 0), (D, 0)])
    events = [vacuum(table=f"sales.t{index}", partition=None, location=f"/warehouse/t{index}") for index in range(20)]
    for event in events:
        consumer.append(V, 0, event)
    run(loop, 40)
    assert handler.offsets(V, 0) == list(range(20))  # each once, in order
    assert max(executor.queued) <= 4  # never more than max_queued waiting in the lanes
    assert (V, 0) in consumer.pause_calls and consumer.seeks and consumer.committed[(V, 0)] == 20
    assert not loop.states[(V, 0)].backlogged and (V, 0) not in consumer.paused
