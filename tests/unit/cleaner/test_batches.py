"""Batches of tables in one worker: one metastore check, one announcement, one publish of outcomes,
and the at-least-once contract under every way a batch can break (rule 5)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from acidclean.consumers import publishing as publishing_module
from acidclean.schemas.events import CleanupDone, CleanupRejected, CleanupStarted, VacuumCommitted
from acidclean.shared.acid.names import delta_name
from acidclean.shared.errors import BusError

from .fakes import TOPICS, FakeConsumer, Rig, lock, loop_over, run_for, vacuum

pytestmark = [pytest.mark.rule5]

V, D = TOPICS.vacuum_committed, TOPICS.cleanup_delay
SINGLES = [delta_name(i, i, 0) for i in (1, 2, 3)]
NEW = delta_name(1, 3)


def add_table(rig: Rig, index: int) -> VacuumCommitted:
    """Table ``sales.t<index>``, three single deltas and the vacuum's delta over them, lock-free."""
    location = f"/warehouse/sales.db/t{index}"
    rig.metastore.add_table(f"sales.t{index}", "file:" + location)
    rig.fs.add_acid_dirs(location, [*SINGLES, NEW])
    event = vacuum(table=f"sales.t{index}", partition=None, location=location, lock_snapshot=[lock(1000 + index)])
    rig.fs.mark_vacuum_output(event)
    return event


@pytest.fixture
def rig() -> Rig:
    return Rig()


class CountingBus:
    """Counts the publish calls of the rig's in-memory bus (one per acknowledgement waited for)."""

    def __init__(self, rig: Rig) -> None:
        self.calls: list[list[str]] = []
        inner = rig.bus.publish_many

        def publish_many(items: Any) -> Any:
            self.calls.append([event.event_type for _, event in items])
            return inner(items)

        rig.bus.publish_many = publish_many  # type: ignore[method-assign]


def dones(rig: Rig) -> list[CleanupDone]:
    return [event for event in rig.published(TOPICS.cleanup_done) if isinstance(event, CleanupDone)]


def test_a_batch_of_tables_asks_the_metastore_once_and_waits_for_two_acknowledgements(rig: Rig) -> None:
    consumer = FakeConsumer(rig.clock, partitions=2)
    bus = CountingBus(rig)
    events = [add_table(rig, i) for i in range(10)]
    for index, event in enumerate(events):
        consumer.append(V, index % 2, event)
    loop = loop_over(rig, consumer)
    run_for(loop, rig, 1)
    assert sorted(done.correlation_id for done in dones(rig)) == sorted(event.event_id for event in events)
    assert all(sorted(item.name for item in done.directories_removed) == SINGLES for done in dones(rig))
    assert rig.metastore.calls["show_locks"] == 1  # one unfiltered call answers all ten tables
    assert rig.metastore.calls["valid_txn_list"] <= 1
    # Every CleanupStarted in one publish, acknowledged before the first delete; every CleanupDone in
    # another, each after its ledger (one chunk per cleanup here: what it removed and where it went).
    assert [set(call) for call in bus.calls] == [
        {"acidclean.cleanup.started"},
        {"acidclean.cleanup.ledger", "acidclean.cleanup.done"},
    ]
    assert len(bus.calls[0]) == 10 and len(bus.calls[1]) == 20
    assert bus.calls[1].count("acidclean.cleanup.ledger") == bus.calls[1].count("acidclean.cleanup.done") == 10
    assert consumer.committed[(V, 0)] == 5 and consumer.committed[(V, 1)] == 5


def test_the_batch_announcement_is_acknowledged_before_any_delete(rig: Rig) -> None:
    consumer = FakeConsumer(rig.clock)
    events = [add_table(rig, i) for i in range(4)]
    for event in events:
        consumer.append(V, 0, event)
    seen_deleted_at_announcement: list[int] = []
    inner = rig.bus.publish_many

    def publish_many(items: Any) -> Any:
        if any(isinstance(event, CleanupStarted) for _, event in items):
            seen_deleted_at_announcement.append(len(rig.fs.deleted))
        return inner(items)

    rig.bus.publish_many = publish_many  # type: ignore[method-assign]
    run_for(loop_over(rig, consumer), rig, 1)
    assert seen_deleted_at_announcement == [0]
    assert len(rig.fs.deleted) == 12


def test_an_unacknowledged_announcement_deletes_nothing_and_commits_nothing(rig: Rig) -> None:
    consumer = FakeConsumer(rig.clock)
    events = [add_table(rig, i) for i in range(3)]
    for event in events:
        consumer.append(V, 0, event)
    rig.bus.fail_next(4)  # the batch's CleanupStarted publish, then each one's on its own
    loop = loop_over(rig, consumer)
    loop.step()
    loop.step()
    assert rig.fs.deleted == [] and consumer.committed.get((V, 0), 0) == 0
    run_for(loop, rig, 10)  # rewound, retried after one interval
    assert len(dones(rig)) == 3 and consumer.committed[(V, 0)] == 3


def test_deleted_but_unacknowledged_outcomes_commit_no_offset_and_the_retry_reports_them(rig: Rig) -> None:
    """A crash between the batch's deletes and the acknowledgement of its CleanupDone batch: the offsets
    stay uncommitted; handling again finds nothing left to delete and reports, a duplicate not a loss."""
    consumer = FakeConsumer(rig.clock)
    events = [add_table(rig, i) for i in range(3)]
    for event in events:
        consumer.append(V, 0, event)
    inner = rig.bus.publish_many
    # Announcements acknowledged, then no outcome: the batch, and each of its six records alone (three
    # CleanupDone, each after its ledger record).
    failures = iter([False, True, True, True, True, True, True, True])

    def publish_many(items: Any) -> Any:
        if next(failures, False):
            raise BusError("simulated: the CleanupDone batch was not acknowledged")
        return inner(items)

    rig.bus.publish_many = publish_many  # type: ignore[method-assign]
    loop = loop_over(rig, consumer)
    loop.step()
    loop.step()
    assert len(rig.fs.deleted) == 9 and dones(rig) == []
    assert consumer.committed.get((V, 0), 0) == 0
    run_for(loop, rig, 10)
    assert consumer.committed[(V, 0)] == 3
    assert sorted(done.correlation_id for done in dones(rig)) == sorted(event.event_id for event in events)
    assert all(done.directories_removed == [] for done in dones(rig))  # the announcements say what went
    assert len(rig.fs.deleted) == 9


def test_one_failing_table_is_dead_lettered_and_the_rest_of_its_batch_is_cleaned_and_committed(rig: Rig) -> None:
    consumer = FakeConsumer(rig.clock)
    events = [add_table(rig, i) for i in range(5)]
    for event in events:
        consumer.append(V, 0, event)
    get_table = rig.metastore.get_table

    def exploding(db: str, table: str, partition: str | None = None) -> Any:
        if table == "t2":
            raise RuntimeError("boom")
        return get_table(db, table, partition)

    get_tables = rig.metastore.get_tables

    def exploding_together(db: str, tables: Sequence[str]) -> dict[str, Any]:
        if "t2" in tables:
            raise RuntimeError("boom")  # not the metastore's refusal: each table then asks on its own
        return get_tables(db, tables)

    rig.metastore.get_table = exploding  # type: ignore[method-assign]
    rig.metastore.get_tables = exploding_together  # type: ignore[method-assign]
    run_for(loop_over(rig, consumer, error_tries=2), rig, 10)
    [rejected] = rig.published(TOPICS.dead_letter)
    assert isinstance(rejected, CleanupRejected) and rejected.causation_id == events[2].event_id
    cleaned = {done.correlation_id for done in dones(rig)}
    assert cleaned == {event.event_id for i, event in enumerate(events) if i != 2}
    assert consumer.committed[(V, 0)] == 5
    assert not any("/t2/" in path for path in rig.fs.deleted)


def test_a_batch_whose_acknowledged_records_fail_to_be_noted_dead_letters_nothing(rig: Rig) -> None:
    """After the broker took a batch's records, the cleaner notes them (metrics, logs, each key's due
    time for joiners). A failure there once made the loop take the batch for never publishable and
    dead-letter its sources although their outcomes and successors were out (a race in the notes did,
    under load). The records are out: the sources are finished and committed, the failure counted."""
    consumer = FakeConsumer(rig.clock)
    events = [add_table(rig, i) for i in range(4)]
    rig.metastore.take_lock(1001, "sales.t1")
    for event in events:
        consumer.append(V, 0, event)

    def failing(dues: Any) -> None:
        raise RuntimeError("dictionary changed size during iteration")

    rig.handler.own_checks.note_chain_due = failing  # type: ignore[method-assign]
    run_for(loop_over(rig, consumer, error_tries=2), rig, 1)
    assert rig.published(TOPICS.dead_letter) == []
    assert {done.correlation_id for done in dones(rig)} == {e.event_id for i, e in enumerate(events) if i != 1}
    [envelope] = rig.published(D)
    assert envelope.correlation_id == events[1].event_id
    assert consumer.committed[(V, 0)] == 4
    assert rig.metrics.events.labels("notes_failed")._value.get() == 1


def test_a_failed_delete_in_a_batch_delays_only_its_table(rig: Rig) -> None:
    consumer = FakeConsumer(rig.clock)
    events = [add_table(rig, i) for i in range(3)]
    for event in events:
        consumer.append(V, 0, event)
    rig.fs.fail_delete.add(f"/warehouse/sales.db/t1/{SINGLES[0]}")
    loop = loop_over(rig, consumer)
    loop.step()
    loop.step()
    assert {done.correlation_id for done in dones(rig)} == {events[0].event_id, events[2].event_id}
    [envelope] = rig.published(D)
    assert envelope.correlation_id == events[1].event_id and "delete failed" in (envelope.check_error or "")
    assert consumer.committed[(V, 0)] == 3


def test_one_tables_events_run_in_order_within_a_batch(rig: Rig) -> None:
    """Two vacuums of one table and a third table in one batch: the second vacuum of t0 is handled
    after the first one's deletes, so it finds them gone and removes nothing twice."""
    consumer = FakeConsumer(rig.clock)
    first = add_table(rig, 0)
    duplicate = first.model_copy(update={"vacuum_job_id": "again"})
    other = add_table(rig, 1)
    for event in (first, other, first, duplicate):
        consumer.append(V, 0, event)
    run_for(loop_over(rig, consumer), rig, 1)
    assert len(rig.fs.deleted) == 6 and len(set(rig.fs.deleted)) == 6
    assert consumer.committed[(V, 0)] == 4
    assert sum(1 for done in dones(rig) if done.directories_removed) == 2


def test_a_metastore_down_for_the_batchs_one_check_deletes_nothing(rig: Rig) -> None:
    consumer = FakeConsumer(rig.clock)
    events = [add_table(rig, i) for i in range(4)]
    for event in events:
        consumer.append(V, 0, event)
    rig.metastore.down = True
    loop = loop_over(rig, consumer)
    loop.step()
    loop.step()
    assert rig.fs.deleted == [] and dones(rig) == []
    assert len(rig.published(D)) == 4 and consumer.committed[(V, 0)] == 4


def test_a_rebalance_mid_batch_commits_no_offset_of_the_unfinished_batch(rig: Rig) -> None:
    """The batch's outcomes are still being published when the partition is revoked: the revoke
    commits only what was acknowledged, and the late acknowledgement commits nothing afterwards."""
    consumer = FakeConsumer(rig.clock)
    events = [add_table(rig, i) for i in range(3)]
    for event in events:
        consumer.append(V, 0, event)
    inner = rig.bus.publish_many
    entered, release = threading.Event(), threading.Event()

    def publish_many(items: Any) -> Any:
        if any(isinstance(event, CleanupDone) for _, event in items):
            entered.set()
            assert release.wait(10)
        return inner(items)

    rig.bus.publish_many = publish_many  # type: ignore[method-assign]
    with ThreadPoolExecutor(2) as pool:
        loop = loop_over(rig, consumer, executor=pool, revoke_timeout_s=0.2)
        for _ in range(50):
            loop.step()
            if entered.is_set():
                break
        assert entered.wait(5)
        consumer.rebalance_revoke([(V, 0)])
        assert consumer.committed.get((V, 0), 0) == 0
        release.set()
        for _ in range(5):
            loop.step()
    assert consumer.committed.get((V, 0), 0) == 0  # the late outcomes belong to an ownership that ended
    offsets = [offset for call in consumer.commit_calls for topic, number, offset in call if (topic, number) == (V, 0)]
    assert set(offsets) <= {0}


@pytest.mark.rule1
def test_a_lock_held_on_one_table_of_a_batch_keeps_only_that_table_waiting_whatever_the_case(rig: Rig) -> None:
    """The batch's one unfiltered show_locks is indexed by table: the index must find a reader's lock
    however the event spells the table, and must not lend it to the other tables."""
    consumer = FakeConsumer(rig.clock)
    events = [add_table(rig, i) for i in range(3)]
    rig.metastore.take_lock(1001, "sales.t1")
    shouty = events[1].model_copy(update={"table": "SALES.T1"})
    for event in (events[0], shouty, events[2]):
        consumer.append(V, 0, event)
    loop = loop_over(rig, consumer)
    loop.step()
    loop.step()
    assert {done.correlation_id for done in dones(rig)} == {events[0].event_id, events[2].event_id}
    assert not any("/t1/" in path for path in rig.fs.deleted)
    [envelope] = rig.published(D)
    assert envelope.correlation_id == events[1].event_id and [e.lock_id for e in envelope.locks_held] == [1001]


@pytest.mark.parametrize(
    ("unfiltered_s", "filtered_s", "next_txn_id", "calls"),
    [
        (None, None, None, 1),  # nothing measured yet: one unfiltered call for the batch
        (0.03, 0.01, None, 1),  # 4 tables x 10 ms cost more than one 30 ms call
        (1.0, 0.01, None, 4),  # a metastore with many locks: one filtered call per table is cheaper
        (1.0, 0.01, 5, 1),  # the open-transaction rule needs every lock anyway: one call for all
    ],
)
def test_a_batch_picks_one_unfiltered_show_locks_or_one_per_table_by_the_measured_costs(
    rig: Rig, unfiltered_s: float | None, filtered_s: float | None, next_txn_id: int | None, calls: int
) -> None:
    consumer = FakeConsumer(rig.clock)
    events = [add_table(rig, i).model_copy(update={"next_txn_id": next_txn_id}) for i in range(4)]
    for event in events:
        consumer.append(V, 0, event)
    rig.handler.lock_call_costs.unfiltered_s = unfiltered_s
    rig.handler.lock_call_costs.filtered_s = filtered_s
    loop = loop_over(rig, consumer)
    loop.step()
    loop.step()
    assert rig.metastore.calls["show_locks"] == calls
    assert len(dones(rig)) == 4 and consumer.committed[(V, 0)] == 4


def test_an_announcement_refused_for_good_holds_back_only_its_own_table(rig: Rig) -> None:
    """Kafka refuses one table's CleanupStarted every time: that table deletes nothing and its partition
    is retried; the other tables of the batch, on another partition, are announced, cleaned and committed."""
    consumer = FakeConsumer(rig.clock)
    refused, healthy = add_table(rig, 0), add_table(rig, 1)
    consumer.append(V, 0, refused)
    consumer.append(V, 1, healthy)
    inner = rig.bus.publish_many

    def publish_many(items: Any) -> Any:
        if any(isinstance(event, CleanupStarted) and event.correlation_id == refused.event_id for _, event in items):
            raise BusError("Kafka refused the event: MSG_SIZE_TOO_LARGE")
        return inner(items)

    rig.bus.publish_many = publish_many  # type: ignore[method-assign]
    run_for(loop_over(rig, consumer), rig, 10)
    assert not any("/t0/" in path for path in rig.fs.deleted)
    assert consumer.committed.get((V, 0), 0) == 0
    assert consumer.committed[(V, 1)] == 1 and [done.correlation_id for done in dones(rig)] == [healthy.event_id]


def test_an_outcome_refused_for_good_holds_back_only_its_own_partition(rig: Rig) -> None:
    consumer = FakeConsumer(rig.clock)
    refused, healthy = add_table(rig, 0), add_table(rig, 1)
    consumer.append(V, 0, refused)
    consumer.append(V, 1, healthy)
    inner = rig.bus.publish_many

    def publish_many(items: Any) -> Any:
        if any(isinstance(event, CleanupDone) and event.correlation_id == refused.event_id for _, event in items):
            raise BusError("Kafka refused the event: MSG_SIZE_TOO_LARGE")
        return inner(items)

    rig.bus.publish_many = publish_many  # type: ignore[method-assign]
    run_for(loop_over(rig, consumer), rig, 10)
    assert consumer.committed.get((V, 0), 0) == 0  # never past an outcome the broker does not have
    assert consumer.committed[(V, 1)] == 1


def test_a_broker_that_does_not_answer_is_not_waited_for_once_per_event_of_the_batch(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch's publish times out and so does the first event retried alone: the others are not
    retried one by one (each would wait out the timeout), nothing is deleted and nothing committed."""
    monkeypatch.setattr(publishing_module, "ISOLATION_GIVE_UP_S", 0.05)  # the same story, in a tenth of a second
    consumer = FakeConsumer(rig.clock)
    for index in range(4):
        consumer.append(V, 0, add_table(rig, index))
    alone: list[int] = []

    def publish_many(items: Any) -> Any:
        if len(items) == 1:
            alone.append(1)
            time.sleep(0.1)  # what a broker that does not answer costs each call: over ISOLATION_GIVE_UP_S
        raise BusError("simulated: Kafka did not acknowledge within the timeout")

    rig.bus.publish_many = publish_many  # type: ignore[method-assign]
    loop = loop_over(rig, consumer)
    loop.step()
    assert alone == [1]
    assert rig.fs.deleted == [] and consumer.committed.get((V, 0), 0) == 0


class HeldExecutor:
    """Keeps what is submitted without running it: which lanes each batch got."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def submit(self, fn: Any, lanes: Any) -> None:
        self.batches.append([name for name, _ in lanes])


@pytest.mark.parametrize(("workers", "sizes"), [(1, [10]), (2, [5, 5]), (4, [3, 3, 3, 1]), (16, [1] * 10)])
def test_tables_ready_together_are_spread_over_every_worker(rig: Rig, workers: int, sizes: list[int]) -> None:
    consumer = FakeConsumer(rig.clock, partitions=2)
    for index in range(10):
        consumer.append(V, index % 2, add_table(rig, index))
    executor = HeldExecutor()
    loop = loop_over(rig, consumer, executor=executor, workers=workers, batch_tables=200)
    loop.step()
    assert [len(batch) for batch in executor.batches] == sizes
    assert sorted(name for batch in executor.batches for name in batch) == sorted(f"acme/sales.t{i}" for i in range(10))
    registry = rig.metrics.registry  # the batches and their tables, as an operator reads them
    assert registry.get_sample_value("acidclean_cleaner_batch_tables_count") == len(sizes)
    assert registry.get_sample_value("acidclean_cleaner_batch_tables_sum") == 10
    assert registry.get_sample_value("acidclean_cleaner_batch_tables_bucket", {"le": "1.0"}) == sizes.count(1)


def test_a_worker_freed_while_the_others_run_takes_only_its_share_of_the_waiting_tables(rig: Rig) -> None:
    consumer = FakeConsumer(rig.clock, partitions=2)
    executor = HeldExecutor()
    loop = loop_over(rig, consumer, executor=executor, workers=4, batch_tables=200)
    consumer.append(V, 0, add_table(rig, 0))
    loop.step()
    assert [len(batch) for batch in executor.batches] == [1]
    for index in range(1, 13):
        consumer.append(V, index % 2, add_table(rig, index))
    loop.step()  # three idle workers: the twelve waiting tables go three to a batch, one share stays
    assert [len(batch) for batch in executor.batches] == [1, 3, 3, 3]


def test_batch_tables_caps_a_workers_share(rig: Rig) -> None:
    consumer = FakeConsumer(rig.clock, partitions=2)
    for index in range(10):
        consumer.append(V, index % 2, add_table(rig, index))
    executor = HeldExecutor()
    loop = loop_over(rig, consumer, executor=executor, workers=2, batch_tables=2)
    loop.step()
    assert [len(batch) for batch in executor.batches] == [2, 2]
