"""Adversarial tests of the batched cleaner (issue 14): rules 1 and 5 and the at-least-once contract
when a worker handles many tables with one shared metastore answer, one announcement, one publish of
outcomes and one offset commit per batch, under back-pressure, held deques, failures and rebalances."""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
import uuid
import zlib
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from hypothesis_support import examples

from acidclean.consumers.lock_views import LockView
from acidclean.consumers.loop import CleanerLoop, LoopConfig
from acidclean.consumers.rules.readiness import Readiness
from acidclean.consumers.scheduling import delay_envelope
from acidclean.consumers.work import Work
from acidclean.schemas.common import LockSnapshotEntry
from acidclean.schemas.events import CleanupDone, CleanupRejected, DelayedVacuums, DelayEnvelope, VacuumCommitted
from acidclean.shared.acid.id_lists import MetastoreKind
from acidclean.shared.acid.names import base_name, delta_name
from acidclean.shared.bus.bundle import KEYS_HEADER, MAX_BUNDLE_RECORDS, BundleKeys, is_bundle, unpack
from acidclean.shared.bus.codec import decode
from acidclean.shared.bus.consumer import Assignment
from acidclean.shared.bus.records import RawRecord
from acidclean.shared.errors import BusError, MetastoreError
from acidclean.shared.metastore import LockInfo

from .fakes import (
    LOCATION,
    T0,
    TOPICS,
    FakeConsumer,
    InlineExecutor,
    Rig,
    lock,
    loop_over,
    refuse_batch_lookups,
    run_for,
    vacuum,
    waiting_vacuum_ids,
)

pytestmark = [pytest.mark.rule1, pytest.mark.rule5]

V, D = TOPICS.vacuum_committed, TOPICS.cleanup_delay
SINGLES = [delta_name(i, i, 0) for i in (1, 2, 3)]
NEW = delta_name(1, 3)
D4 = delta_name(4, 4, 0)
BASE4 = base_name(4)


# -- helpers ----------------------------------------------------------------------------------------


def add_table(rig: Rig, index: int, **changes: Any) -> VacuumCommitted:
    """Table ``sales.t<index>``: three single deltas and the minor vacuum's delta over them, lock-free."""
    location = f"/warehouse/sales.db/t{index}"
    rig.metastore.add_table(f"sales.t{index}", "file:" + location)
    rig.fs.add_acid_dirs(location, [*SINGLES, NEW])
    fields: dict[str, Any] = dict(
        table=f"sales.t{index}", partition=None, location=location, lock_snapshot=[lock(1000 + index)]
    )
    event = vacuum(**{**fields, **changes})
    rig.fs.mark_vacuum_output(event)
    return event


def dones(rig: Rig) -> list[CleanupDone]:
    return [event for event in rig.published(TOPICS.cleanup_done) if isinstance(event, CleanupDone)]


def answered(rig: Rig) -> set[uuid.UUID]:
    """Ids of the events whose outcome the broker has: a CleanupDone, a delay envelope or a dead letter
    caused by them."""
    ids: set[uuid.UUID] = set()
    for topic in (TOPICS.cleanup_done, TOPICS.cleanup_delay, TOPICS.dead_letter):
        for event in rig.published(topic):
            if isinstance(event, CleanupDone | DelayEnvelope | CleanupRejected):
                ids.add(event.causation_id)
            elif isinstance(event, DelayedVacuums):  # one record carrying on several: each is answered
                ids.update(event.merged_from)
    return ids


def members_carried_whole(rig: Rig, bundle_id: bytes) -> set[bytes]:
    """The member ids of the bundles the broker has that carry bundle ``bundle_id`` on whole (caused by
    it): the same records, unread, in a later bundle."""
    ids: set[bytes] = set()
    for record in rig.bus.records.get(D, []):
        if is_bundle(record.headers) and dict(record.headers).get("causation_id") == bundle_id:
            successor = unpack(record)
            assert successor is not None
            ids.update(dict(member.headers).get("ce_id", b"") for member in successor.members)
    return ids


def unanswered_below_commit(rig: Rig, consumer: FakeConsumer) -> list[tuple[str, int, int]]:
    """Records below their partition's committed offset whose outcome the broker does not have: each one
    is a record a restart would never read again (lost). A bundle's outcome is each member's: carried
    on in a later record (``merged_from``), or published again on its own."""
    have = answered(rig)
    alone = {dict(r.headers).get("ce_id") for r in rig.bus.records.get(D, []) if not is_bundle(r.headers)}
    lost = []
    for (topic, number), log in consumer.logs.items():
        for record in log[: consumer.committed.get((topic, number), 0)]:
            bundle = unpack(record) if is_bundle(record.headers) else None
            if bundle is not None:
                carried_whole = members_carried_whole(rig, str(bundle.event_id).encode())
                for member in bundle.members:
                    event = decode(member, rejected_by="test", tenant="acme")
                    ce_id = str(event.event_id).encode()
                    if event.event_id not in have and ce_id not in alone and ce_id not in carried_whole:
                        lost.append((topic, number, record.offset))
                continue
            event = decode(record, rejected_by="test", tenant="acme")
            if isinstance(event, CleanupRejected):
                continue
            if event.event_id not in have:
                lost.append((topic, number, record.offset))
    return lost


class Handled:
    """Wraps the handler's ``handle``: every call with the clock value and the work's due time."""

    def __init__(self, rig: Rig) -> None:
        self.calls: list[tuple[str, int, int, int, int]] = []  # topic, partition, offset, at ms, due ms
        inner = rig.handler.handle

        def handle(work: Work, locks: Any) -> Any:
            self.calls.append((work.record.topic, work.record.partition, work.offset, rig.clock.now_ms(), work.due_ms))
            return inner(work, locks)

        rig.handler.handle = handle  # type: ignore[method-assign]

    def offsets(self, topic: str, number: int) -> list[int]:
        return [offset for t, p, offset, _, _ in self.calls if (t, p) == (topic, number)]


def hive3(rig: Rig) -> Rig:
    rig.metastore._kind = MetastoreKind.HIVE3
    return rig


def turn_off_open_txn_rule(rig: Rig) -> None:
    rig.handler.config = dataclasses.replace(rig.handler.config, wait_for_open_txns=False)


# -- rule 1: the shared lock list ---------------------------------------------------------------------


def test_a_later_vacuum_of_the_same_table_in_one_batch_waits_for_the_reader_between_the_two_vacuums() -> None:
    """V1 (minor, delta_1_3) commits; reader R locks and lists (delta_1_3, delta_4); V2 (major, base_4)
    commits with R in its snapshot. Both events land in one batch, one lane: V1 cleans its singles from
    the shared list, V2 must wait for R although the list was read for V1 and V2 is decided a round later."""
    rig = Rig()
    consumer = FakeConsumer(rig.clock)
    location = "/warehouse/sales.db/t0"
    rig.metastore.add_table("sales.t0", "file:" + location)
    rig.fs.add_acid_dirs(location, [*SINGLES, NEW, D4, BASE4])
    v1 = vacuum(table="sales.t0", partition=None, location=location, lock_snapshot=[], occurred_at=T0)
    reader_at = T0 + timedelta(seconds=10)
    rig.metastore.take_lock(500, "sales.t0", acquired_at=reader_at)
    r = LockSnapshotEntry(
        lock_id=500, txn_id=3, lock_type="SHARED_READ", state="ACQUIRED", user="bob", host="r", acquired_at=reader_at
    )
    v2 = vacuum(
        table="sales.t0",
        partition=None,
        location=location,
        compaction_type="MAJOR",
        new_directories=[BASE4],
        highest_write_id=4,
        obsolete_directories=[*SINGLES, NEW, D4],  # planned while V1's singles were still there
        lock_snapshot=[r],
        occurred_at=T0 + timedelta(seconds=20),
        vacuum_job_id="job-2",
    )
    rig.fs.mark_vacuum_output(v1)
    rig.fs.mark_vacuum_output(v2)
    others = [add_table(rig, i) for i in (1, 2)]
    for event in (v1, others[0], v2, others[1]):
        consumer.append(V, 0, event)
    rig.clock.current = T0 + timedelta(seconds=30)
    loop = loop_over(rig, consumer)
    loop.step()
    loop.step()
    gone = {path.rsplit("/", 1)[1] for path in rig.fs.deleted if path.startswith(location + "/")}
    assert gone == set(SINGLES)  # R's delta_1_3 and delta_4 are still there
    assert rig.metastore.calls["show_locks"] == 1
    [envelope] = rig.published(D)
    assert envelope.correlation_id == v2.event_id and [e.lock_id for e in envelope.locks_held] == [500]
    assert not rig.published(TOPICS.dead_letter)
    assert consumer.committed[(V, 0)] == 4
    rig.metastore.release(500)
    consumer.append(D, 0, envelope)  # the delay topic delivers it back
    run_for(loop, rig, 5)
    gone = {path.rsplit("/", 1)[1] for path in rig.fs.deleted if path.startswith(location + "/")}
    assert gone == {*SINGLES, NEW, D4}
    assert v2.event_id in {done.correlation_id for done in dones(rig)}


@pytest.mark.parametrize("spelling", [("SALES", "T1"), ("Sales", "t1"), ("sales", "T1")])
def test_the_shared_index_finds_a_lock_whatever_case_the_metastore_answers_in(spelling: tuple[str, str]) -> None:
    """The unfiltered list indexed by table must find t1's reader however it spells db and table, and lend
    it to neither t10 (a name with t1 as a prefix) nor t2."""
    rig = Rig()
    consumer = FakeConsumer(rig.clock)
    events = [add_table(rig, i) for i in (1, 10, 2)]
    db, name = spelling
    rig.metastore.locks.append(
        LockInfo(
            1001,
            3,
            db,
            name,
            None,
            "SHARED_READ",
            "ACQUIRED",
            "alice",
            "h",
            int((T0 - timedelta(minutes=1)).timestamp() * 1000),
            1,
        )
    )
    for event in events:
        consumer.append(V, 0, event)
    loop = loop_over(rig, consumer)
    loop.step()
    loop.step()
    assert rig.metastore.calls["show_locks"] == 1
    assert not any(path.startswith("/warehouse/sales.db/t1/") for path in rig.fs.deleted)
    assert {done.correlation_id for done in dones(rig)} == {events[1].event_id, events[2].event_id}


def test_a_partition_lock_spelled_differently_still_holds_its_tables_cleanup_in_a_batch() -> None:
    """Readiness matches snapshot locks by id: a partition spelled DS=... in the lock list must not
    make the shared index (or the missing-lock check) miss it."""
    rig = Rig()
    consumer = FakeConsumer(rig.clock)
    rig.metastore.add_table("sales.orders", "file:" + LOCATION, "ds=2025-03-14")
    rig.fs.add_acid_dirs(LOCATION, [*SINGLES, NEW])
    held = rig.metastore.take_lock(7, "sales.orders", "DS=2025-03-14")
    assert held.lock_id == 7
    event = vacuum()  # its snapshot holds lock 7
    rig.fs.mark_vacuum_output(event)
    unlisted = vacuum(lock_snapshot=[], event_id=uuid.uuid4())  # a second event that lost lock 7
    rig.fs.mark_vacuum_output(unlisted)
    others = [add_table(rig, i) for i in (1, 2)]
    for item in (event, others[0], unlisted, others[1]):
        consumer.append(V, 0, item)
    loop = loop_over(rig, consumer)
    loop.step()
    loop.step()
    assert not any(path.startswith(LOCATION + "/") for path in rig.fs.deleted)
    assert set(waiting_vacuum_ids(rig.published(D))) >= {event.event_id}
    assert {done.correlation_id for done in dones(rig)} == {others[0].event_id, others[1].event_id}


@pytest.mark.parametrize(
    ("unfiltered_s", "filtered_s"),
    [(None, None), (1.0, 0.01)],  # one shared unfiltered call; one call per table
    ids=["shared", "per-table"],
)
def test_a_transaction_commit_in_a_batch_waits_for_an_older_transaction_locked_elsewhere(
    unfiltered_s: float | None, filtered_s: float | None
) -> None:
    """With the open-transaction rule off, a renamed vacuum does not wait, but a vacuum committed through T
    (``_vT``) always waits for every transaction older than T, read locks or not, whichever way its batch
    asked for the locks and even when another table of the batch asked first."""
    rig = hive3(Rig())
    turn_off_open_txn_rule(rig)
    rig.handler.lock_call_costs.unfiltered_s = unfiltered_s
    rig.handler.lock_call_costs.filtered_s = filtered_s
    consumer = FakeConsumer(rig.clock)
    d45 = delta_name(4, 5)
    through_59 = d45 + "_v0000059"
    rig.metastore.add_table("sales.orders", "file:" + LOCATION, "ds=2025-03-14")
    rig.fs.add_acid_dirs(LOCATION, [delta_name(4, 4, 0), delta_name(5, 5, 0), through_59])
    rig.metastore.open_txns = [48]
    reader = rig.metastore.take_lock(31, "other.table", acquired_at=T0 + timedelta(seconds=30))
    rig.metastore.locks = [reader._replace(txn_id=48)]
    first = add_table(rig, 1, next_txn_id=60)  # renamed: no wait with the rule off
    visible = vacuum(
        new_directories=[through_59],
        obsolete_directories=[delta_name(4, 4, 0), delta_name(5, 5, 0)],
        highest_write_id=5,
        lock_snapshot=[],
        next_txn_id=60,
    )
    rig.fs.mark_vacuum_output(visible)
    last = add_table(rig, 2, next_txn_id=60)
    for item in (first, visible, last):
        consumer.append(V, 0, item)
    loop = loop_over(rig, consumer)
    loop.step()
    loop.step()
    assert not any(path.startswith(LOCATION + "/") for path in rig.fs.deleted)
    [envelope] = rig.published(D)
    assert envelope.correlation_id == visible.event_id and envelope.open_txns == [48]
    assert {done.correlation_id for done in dones(rig)} == {first.event_id, last.event_id}
    rig.metastore.open_txns, rig.metastore.locks = [], []
    consumer.append(D, 0, envelope)
    run_for(loop, rig, 5)
    assert any(path.startswith(LOCATION + "/") for path in rig.fs.deleted)


def test_a_lockless_transaction_is_waited_for_even_when_the_batch_read_the_locks_for_another_table_first() -> None:
    """The rule on (default): a renamed vacuum waits for an older transaction without a read lock. The
    batch's shared list was first read for a table without ``next_txn_id``; the rule must still see it."""
    rig = hive3(Rig())
    consumer = FakeConsumer(rig.clock)
    plain = add_table(rig, 1)  # no next_txn_id: the locks alone decide
    waiting = add_table(rig, 2, next_txn_id=60)
    rig.metastore.open_txns = [49]
    for item in (plain, waiting):
        consumer.append(V, 0, item)
    loop = loop_over(rig, consumer)
    loop.step()
    loop.step()
    assert not any(path.startswith("/warehouse/sales.db/t2/") for path in rig.fs.deleted)
    [envelope] = rig.published(D)
    assert envelope.correlation_id == waiting.event_id and envelope.open_txns == [49]
    assert [done.correlation_id for done in dones(rig)] == [plain.event_id]


# -- rule 5: offsets of a batch -------------------------------------------------------------------------


def test_one_items_unacknowledged_dead_letter_commits_no_offset_past_it_in_the_same_batch() -> None:
    """t1 fails (a handler error) and its dead letter is not acknowledged while t0 and t2 of the same
    partition clean: the committed offset must stay at or below t1's record until t1 has an outcome."""
    rig = Rig()
    consumer = FakeConsumer(rig.clock)
    events = [add_table(rig, i) for i in range(3)]
    for event in events:
        consumer.append(V, 0, event)
    get_table = rig.metastore.get_table
    failures = iter([True])

    def exploding(db: str, table: str, partition: str | None = None) -> Any:
        if table == "t1" and next(failures, False):
            rig.bus.fail_next(1)  # the dead letter that follows
            raise RuntimeError("boom")
        return get_table(db, table, partition)

    rig.metastore.get_table = exploding  # type: ignore[method-assign]
    rig.metastore.get_tables = refuse_batch_lookups  # type: ignore[method-assign]  # each table asks on its own
    loop = loop_over(rig, consumer, error_tries=1)
    for _ in range(3):
        loop.step()
        assert unanswered_below_commit(rig, consumer) == []
        assert consumer.committed.get((V, 0), 0) <= 1
    run_for(loop, rig, 10)
    assert unanswered_below_commit(rig, consumer) == [] and consumer.committed[(V, 0)] == 3
    assert {done.correlation_id for done in dones(rig)} == {event.event_id for event in events}


class Crash(BaseException):
    """The process dies here."""


@dataclasses.dataclass
class CrashAt:
    point: str
    armed: bool = True

    def reached(self, point: str) -> None:
        if self.armed and point == self.point:
            self.armed = False
            raise Crash(point)


@pytest.mark.parametrize("point", ["before-delete", "after-delete", "after-done"])
def test_a_crash_inside_a_batch_then_a_fresh_cleaner_loses_nothing(point: str) -> None:
    """The process dies at ``point`` of a batch spanning two partitions; a new cleaner starts from the
    committed offsets: every vacuum ends cleaned, no offset was committed past an unacknowledged outcome,
    and nothing is deleted twice."""
    rig = Rig()
    consumer = FakeConsumer(rig.clock)
    events = [add_table(rig, i) for i in range(4)]
    for index, event in enumerate(events):
        consumer.append(V, index % 2, event)
    rig.handler.context.crash = CrashAt(point)  # type: ignore[assignment]
    crashed = loop_over(rig, consumer)
    crashed.step()
    crashed.step()
    assert unanswered_below_commit(rig, consumer) == []
    # The dead process's loop is dropped without a commit or a revoke; a new one joins.
    restarted = loop_over(rig, consumer)
    run_for(restarted, rig, 10)
    assert unanswered_below_commit(rig, consumer) == []
    assert consumer.committed[(V, 0)] == 2 and consumer.committed[(V, 1)] == 2
    assert {done.correlation_id for done in dones(rig)} == {event.event_id for event in events}
    assert len(rig.fs.deleted) == len(set(rig.fs.deleted)) == 12


def test_a_revoke_between_two_rounds_of_a_batch_abandons_the_later_round_and_commits_only_the_first() -> None:
    """A lane holds two records of one table (offsets 0 and 1 of V0). The partition is revoked while the
    batch's first round is announcing: the first record finishes and is committed, the second is not
    started, and its offset is not committed; the next owner handles it."""
    rig = Rig()
    consumer = FakeConsumer(rig.clock)
    first = add_table(rig, 0)
    other = add_table(rig, 1)
    consumer.append(V, 0, first)
    consumer.append(V, 0, first)  # a duplicate record of the same event (an outbox republish)
    consumer.append(V, 1, other)
    handled = Handled(rig)
    inner = rig.bus.publish_many
    entered, release = threading.Event(), threading.Event()

    def publish_many(items: Any) -> Any:
        if not entered.is_set():
            entered.set()
            assert release.wait(10)
        return inner(items)

    rig.bus.publish_many = publish_many  # type: ignore[method-assign]
    with ThreadPoolExecutor(2) as pool:
        loop = loop_over(rig, consumer, executor=pool, revoke_timeout_s=10)
        for _ in range(50):
            loop.step()
            if entered.is_set():
                break
        assert entered.wait(5)
        threading.Timer(0.2, release.set).start()
        consumer.rebalance_revoke([(V, 0)])
        assert consumer.committed.get((V, 0)) == 1  # the first record's outcome was acknowledged
        assert handled.offsets(V, 0) == [0]  # the second was never started
        assert unanswered_below_commit(rig, consumer) == []
        consumer.rebalance_assign([(V, 0)])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            loop.step()
            time.sleep(0.005)
            if consumer.committed.get((V, 0)) == 2 and consumer.committed.get((V, 1)) == 1:
                break
    assert consumer.committed[(V, 0)] == 2 and consumer.committed[(V, 1)] == 1
    assert handled.offsets(V, 0) == [0, 1]
    assert len(rig.fs.deleted) == len(set(rig.fs.deleted)) == 6


def test_back_pressure_pauses_and_resumes_without_skipping_or_repeating_a_record() -> None:
    rig = Rig()
    consumer = FakeConsumer(rig.clock)
    events = [add_table(rig, i) for i in range(12)]
    for index, event in enumerate(events):
        consumer.append(V, index % 2, event)
    handled = Handled(rig)
    loop = loop_over(rig, consumer, max_queued=3, batch_tables=2)
    run_for(loop, rig, 5)
    assert (V, 0) in consumer.pause_calls  # back-pressure did pause
    assert sorted(handled.offsets(V, 0)) == list(range(6)) and sorted(handled.offsets(V, 1)) == list(range(6))
    assert consumer.committed[(V, 0)] == 6 and consumer.committed[(V, 1)] == 6
    assert {done.correlation_id for done in dones(rig)} == {event.event_id for event in events}


def test_held_envelopes_are_taken_from_the_front_never_early_none_skipped() -> None:
    """Envelopes on one delay partition with due times out of order, more than ``held_per_partition``
    of them, under back-pressure: each is handled once, none before its due time."""
    rig = Rig()
    consumer = FakeConsumer(rig.clock)
    now = rig.clock.now()
    dues = [3.0, 1.0, 1.0, 5.0, 0.5, 2.0, 6.0, 0.0, 4.0]
    for index, due in enumerate(dues):
        parked = add_table(rig, index)
        envelope = delay_envelope(
            parked, Readiness(False, ()), now=now, interval_ms=2000, max_wait_s=3600, due=now + timedelta(seconds=due)
        )
        consumer.append(D, 0, envelope)
    handled = Handled(rig)
    loop = loop_over(rig, consumer, held_per_partition=2, max_queued=2)
    run_for(loop, rig, 15)
    assert sorted(handled.offsets(D, 0)) == list(range(len(dues)))
    assert all(at >= due for _, _, _, at, due in handled.calls)
    assert consumer.committed[(D, 0)] == len(dues)


def test_an_outcome_refused_for_good_does_not_stall_other_partitions_of_its_batch() -> None:
    """Kafka refuses one table's CleanupDone every time (non-retriable, e.g. too large for the topic). In a
    batch its refusal fails the batch's one publish and rewinds every record of the batch, on any
    partition; the unrelated partition must still get its outcome published and its offset committed
    (the refused record's partition retries, never committing past it)."""
    rig = Rig()
    consumer = FakeConsumer(rig.clock)
    poisoned = add_table(rig, 0)
    healthy = add_table(rig, 1)
    consumer.append(V, 0, poisoned)
    consumer.append(V, 1, healthy)
    inner = rig.bus.publish_many

    def publish_many(items: Any) -> Any:
        if any(isinstance(event, CleanupDone) and event.correlation_id == poisoned.event_id for _, event in items):
            raise BusError("Kafka refused the event: MSG_SIZE_TOO_LARGE")
        return inner(items)

    rig.bus.publish_many = publish_many  # type: ignore[method-assign]
    loop = loop_over(rig, consumer)
    run_for(loop, rig, 20)
    assert consumer.committed.get((V, 0), 0) == 0  # the refused one never commits (as before batching)
    assert consumer.committed.get((V, 1), 0) == 1  # an unrelated partition moves on
    assert unanswered_below_commit(rig, consumer) == []
    assert healthy.event_id in {done.correlation_id for done in dones(rig)}


def test_two_workers_never_handle_one_tables_events_at_once_even_across_partitions() -> None:
    """Records of one table on two partitions (a republish through another producer): with two workers
    and one table per batch, the table's lane keeps its events one at a time, in each partition's order."""
    rig = Rig()
    consumer = FakeConsumer(rig.clock)
    shared_table = add_table(rig, 0)
    for index in range(1, 7):
        consumer.append(V, index % 2, add_table(rig, index))
        consumer.append(V, index % 2, shared_table)
    active: set[str] = set()
    overlaps: list[str] = []
    guard = threading.Lock()
    inner = rig.handler.handle

    def handle(work: Work, locks: Any) -> Any:
        table = work.event.table  # type: ignore[union-attr]
        with guard:
            if table in active:
                overlaps.append(table)
            active.add(table)
        try:
            time.sleep(0.002)
            return inner(work, locks)
        finally:
            with guard:
                active.discard(table)

    rig.handler.handle = handle  # type: ignore[method-assign]
    with ThreadPoolExecutor(2) as pool:
        loop = loop_over(rig, consumer, executor=pool, workers=2, batch_tables=1)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            loop.step()
            time.sleep(0.002)
            if consumer.committed.get((V, 0)) == 6 and consumer.committed.get((V, 1)) == 6:
                break
    assert overlaps == []
    assert consumer.committed[(V, 0)] == 6 and consumer.committed[(V, 1)] == 6
    assert len(rig.fs.deleted) == len(set(rig.fs.deleted)) == 21
    assert unanswered_below_commit(rig, consumer) == []


# -- a randomised history of the loop -----------------------------------------------------------------


class BatchedLoopMachine(RuleBasedStateMachine):
    """Vacuums (some behind a reader's lock) and envelopes arrive on two partitions each; the loop steps
    with small batches, a small ``max_queued`` and ``held_per_partition``; the delay topic delivers the
    cleaner's own envelopes back; readers release, the metastore goes down, publishes fail, partitions
    are revoked and reassigned. Always: nothing of a table is deleted while its vacuum's snapshot reader
    holds its lock, nothing is handed over before its due time, no offset is committed past a record
    whose outcome the broker does not have; at the end, every vacuum is cleaned, nothing twice."""

    bundle_min = 8  # HandlerConfig.bundle_min: the default (a history of few tables makes no bundle)
    bundle_max = MAX_BUNDLE_RECORDS  # HandlerConfig.bundle_max: members a bundle at most
    revoke_timeout_s = 60.0  # LoopConfig.revoke_timeout_s: how long a revoke waits for running work
    held_per_partition = 2  # LoopConfig.held_per_partition: records read ahead and kept
    gather_ms = 0  # LoopConfig.gather_ms: how long a due single-table record waits for others due with it
    assignment = Assignment.COOPERATIVE_STICKY  # LoopConfig.assignment: how rebalances hand partitions over

    def __init__(self) -> None:
        super().__init__()
        self.rig = Rig(bundle_min=self.bundle_min, bundle_max=self.bundle_max)
        self.consumer = FakeConsumer(self.rig.clock, eager=not self.assignment.incremental)
        self.tables = itertools.count()
        self.handled = Handled(self.rig)
        self.expected: set[uuid.UUID] = set()
        self.held: dict[int, str] = {}  # lock id -> location of the table it protects
        self.rounds: dict[int, int] = {}  # table index -> vacuums made of it so far (from the second)
        self.delivered = 0  # envelopes of the bus's delay topic already on the consumer's delay log
        self.loop = CleanerLoop(
            self.consumer,
            self.rig.handler,
            LoopConfig(
                vacuum_topic=V,
                delay_topic=D,
                tenant="acme",
                cleaner_id="c1",
                interval_ms=2000,
                batch_tables=2,
                max_queued=3,
                held_per_partition=self.held_per_partition,
                error_tries=1,
                revoke_timeout_s=self.revoke_timeout_s,
                gather_ms=self.gather_ms,
                assignment=self.assignment,
            ),
            executor=InlineExecutor(),
            metrics=self.rig.metrics,
            clock=self.rig.clock,
            ack_executor=self.ack_executor(),
        )
        self.loop.subscribe()
        self.partitions = [(V, 0), (V, 1), (D, 0), (D, 1)]
        self.consumer.rebalance_assign(self.partitions)

    def ack_executor(self) -> Executor | None:
        """Where the loop publishes a batch's outcomes and waits for them (None: the worker itself)."""
        return None

    def _table(self, locked: bool) -> VacuumCommitted:
        index = next(self.tables)
        if not locked:
            return add_table(self.rig, index, lock_snapshot=[])
        lock_id = 5000 + index
        self.rig.metastore.take_lock(lock_id, f"sales.t{index}")
        self.held[lock_id] = f"/warehouse/sales.db/t{index}/"
        return add_table(self.rig, index, lock_snapshot=[lock(lock_id)])

    @rule(number=st.integers(0, 1), count=st.integers(1, 4), locked=st.booleans())
    def vacuums(self, number: int, count: int, locked: bool) -> None:
        for _ in range(count):
            event = self._table(locked)
            self.consumer.append(V, number, event)
            self.expected.add(event.event_id)

    @rule(data=st.data(), number=st.integers(0, 1), count=st.integers(1, 3))
    def later_vacuums_of_a_waiting_table(self, data: st.DataObject, number: int, count: int) -> None:
        """Later vacuums of a table whose reader still holds its lock: the table's vacuums wait in
        separate records (checked at different times) that the loop may merge as it reads them."""
        if not self.held:
            return
        lock_id = data.draw(st.sampled_from(sorted(self.held)))
        for _ in range(count):
            self._later_vacuum(lock_id, number)

    def _later_vacuum(self, lock_id: int, number: int) -> None:
        index = lock_id - 5000
        round_ = self.rounds[index] = self.rounds.get(index, 1) + 1
        singles = [delta_name(w, w, 0) for w in range(3 * round_ - 2, 3 * round_ + 1)]
        compacted = delta_name(3 * round_ - 2, 3 * round_)
        location = f"/warehouse/sales.db/t{index}"
        self.rig.fs.add_acid_dirs(location, [*singles, compacted])
        event = vacuum(
            event_id=uuid.uuid4(),
            table=f"sales.t{index}",
            partition=None,
            location=location,
            vacuum_job_id=f"t{index}-{round_}",
            new_directories=[compacted],
            obsolete_directories=singles,
            highest_write_id=3 * round_,
            lock_snapshot=[lock(lock_id)],
        )
        self.rig.fs.mark_vacuum_output(event)
        self.consumer.append(V, number, event)
        self.expected.add(event.event_id)

    @rule(number=st.integers(0, 1), count=st.integers(2, 4), checks=st.integers(1, 4))
    def a_waiting_tables_record_checked_again_and_again(self, number: int, count: int, checks: int) -> None:
        """Several vacuums of a locked table wait in one DelayedVacuums, read back and checked ``checks``
        times while (as far as this rule goes) the reader keeps its lock: the checks carry the record on
        unread, among whatever else the other rules do to the loop meanwhile."""
        first = self._table(locked=True)
        self.consumer.append(V, number, first)
        self.expected.add(first.event_id)
        lock_id = first.lock_snapshot[0].lock_id
        for _ in range(count - 1):
            self._later_vacuum(lock_id, number)
        for _ in range(checks):
            self.loop.step()
            self.delay_topic_delivers()
            self.rig.clock.advance(2.1)
            self.loop.step()

    @rule(number=st.integers(0, 1), due_s=st.sampled_from([-1.0, 0.0, 0.3, 1.0, 2.0, 3.5]), locked=st.booleans())
    def envelope(self, number: int, due_s: float, locked: bool) -> None:
        parked = self._table(locked)
        now = self.rig.clock.now()
        envelope = delay_envelope(
            parked, Readiness(False, ()), now=now, interval_ms=2000, max_wait_s=3600, due=now + timedelta(seconds=due_s)
        )
        self.consumer.append(D, number, envelope)
        self.expected.add(parked.event_id)

    @rule()
    def delay_topic_delivers(self) -> None:
        self.delay_topic_delivers_some(len(self.rig.bus.records.get(D, [])))

    @rule(count=st.integers(1, 3))
    def delay_topic_delivers_some(self, count: int) -> None:
        """The first ``count`` records not delivered yet, in order: a cleaner behind its delay partitions
        reads its records late, a table's several records far apart. A record goes to its table's
        partition; a bundle to the one it was published to (its members' tables')."""
        published = self.rig.bus.records.get(D, [])
        for record in published[self.delivered : self.delivered + count]:
            if is_bundle(record.headers):
                log = self.consumer.logs.setdefault((D, record.partition), [])
                log.append(RawRecord(D, record.partition, len(log), record.key, record.value, record.headers))
                continue
            event = decode(record, rejected_by="test", tenant="acme")
            assert not isinstance(event, CleanupRejected)
            self.consumer.append(D, zlib.crc32(event.table.encode()) % 2, event)
        self.delivered = min(len(published), self.delivered + count)

    @rule(data=st.data())
    def reader_releases(self, data: st.DataObject) -> None:
        if self.held:
            lock_id = data.draw(st.sampled_from(sorted(self.held)))
            self.rig.metastore.release(lock_id)
            del self.held[lock_id]

    @rule(down=st.booleans())
    def metastore(self, down: bool) -> None:
        self.rig.metastore.down = down

    @rule(steps=st.integers(1, 5))
    def step(self, steps: int) -> None:
        for _ in range(steps):
            self.loop.step()

    @rule(seconds=st.sampled_from([0.1, 0.5, 1.0, 2.5, 5.0]))
    def time_passes(self, seconds: float) -> None:
        self.rig.clock.advance(seconds)

    @rule(count=st.integers(1, 2))
    def kafka_refuses(self, count: int) -> None:
        self.rig.bus.fail_next(count)

    @rule(index=st.integers(0, 3))
    def rebalance(self, index: int) -> None:
        partition = self.partitions[index]
        self.consumer.rebalance_revoke([partition])
        self.consumer.rebalance_assign([partition])

    @rule(index=st.integers(0, 3))
    def partition_lost(self, index: int) -> None:
        partition = self.partitions[index]
        self.consumer.rebalance_lost([partition])
        self.consumer.rebalance_assign([partition])

    @invariant()
    def nothing_deleted_under_a_held_snapshot_lock(self) -> None:
        for location in self.held.values():
            assert not any(path.startswith(location) for path in self.rig.fs.deleted)

    @invariant()
    def never_early(self) -> None:
        assert all(at >= due for _, _, _, at, due in self.handled.calls)

    @invariant()
    def no_offset_past_an_unacknowledged_outcome(self) -> None:
        assert unanswered_below_commit(self.rig, self.consumer) == []

    def teardown(self) -> None:
        self.rig.bus._failures.clear()  # type: ignore[attr-defined]
        self.rig.metastore.down = False
        for lock_id in list(self.held):
            self.rig.metastore.release(lock_id)
        self.held.clear()
        cleaned: set[uuid.UUID] = set()
        for _ in range(3000):
            self.loop.step()
            self.delay_topic_delivers()
            cleaned = {done.correlation_id for done in dones(self.rig)}
            if cleaned >= self.expected and all(
                self.consumer.committed.get(p, 0) == len(self.consumer.logs.get(p, [])) for p in self.partitions
            ):
                break
        assert cleaned == self.expected
        for partition in self.partitions:
            assert self.consumer.committed.get(partition, 0) == len(self.consumer.logs.get(partition, []))
        assert not self.rig.published(TOPICS.dead_letter)
        assert len(self.rig.fs.deleted) == len(set(self.rig.fs.deleted))
        assert unanswered_below_commit(self.rig, self.consumer) == []


BatchedLoopMachine.TestCase.settings = settings(
    max_examples=examples(100), stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_batched_loop_histories_lose_nothing_and_never_run_early = BatchedLoopMachine.TestCase


class BundledLoopMachine(BatchedLoopMachine):
    """The same histories with every waiting table carried on unread going on in a bundle (even alone),
    so bundles are checked, carried, replayed, refused by the broker and spill members under every
    interleaving the rules make."""

    bundle_min = 1


BundledLoopMachine.TestCase.settings = BatchedLoopMachine.TestCase.settings
test_bundled_loop_histories_lose_nothing_and_never_run_early = BundledLoopMachine.TestCase


class SeveralBundlesAPartitionMachine(BundledLoopMachine):
    """The bundled histories with a batch's records of one partition cut into bundles of two: one
    check writes several bundles of a partition, each due when its own last member is, under every
    interleaving the rules make (cohorts split them so before they were removed)."""

    bundle_max = 2


SeveralBundlesAPartitionMachine.TestCase.settings = BatchedLoopMachine.TestCase.settings
test_histories_with_several_bundles_a_partition_lose_nothing_and_never_run_early = (
    SeveralBundlesAPartitionMachine.TestCase
)


class GatheringLoopMachine(BatchedLoopMachine):
    """The same histories with due single-table delay records gathered for most of an interval (their
    due times spread -1 to 3.5 s) before they are handed over, packed into bundles from two tables on:
    held records wait for later ones, bundles for singles, while partitions move and publishes fail."""

    bundle_min = 2
    gather_ms = 1500
    held_per_partition = 8


GatheringLoopMachine.TestCase.settings = BatchedLoopMachine.TestCase.settings
test_gathering_loop_histories_lose_nothing_and_never_run_early = GatheringLoopMachine.TestCase


class LateLockListRenewalMachine(BundledLoopMachine):
    """The same histories with a slow lock list (thousands of locks: one list lives an interval) whose
    renewal in the background is always under way and lands only when a rule says so: every list
    serves up to twice its age limit, answering checks of records read long before it was asked,
    while readers release and take locks meanwhile. A renewal asked for by a rule answers with the
    locks of that moment (its call under way) and serves batches of records read before then, as a
    renewal under way does (they wait for it), until it lands."""

    def __init__(self) -> None:
        super().__init__()
        costs = self.rig.handler.lock_call_costs
        costs.unfiltered_s = 0.2
        costs.record = lambda unfiltered, seconds: None  # type: ignore[method-assign]
        self.rig.handler.lock_views._refreshing = True  # a renewal under way: the handler starts none of its own

    @rule()
    def the_renewal_is_asked_for(self) -> None:
        handler = self.rig.handler.lock_views
        if handler._renewing is None:
            renewal = LockView(handler, handler.now_ms(), renewal=True)
            try:
                renewal.all_locks()
            except MetastoreError:
                return  # a failed renewal is not kept: the batches ask for themselves
            handler._renewing = renewal

    @rule()
    def the_late_renewal_lands(self) -> None:
        handler = self.rig.handler.lock_views
        renewal = handler._renewing or LockView(handler, handler.now_ms(), renewal=True)
        handler._refresh_lock_view(renewal)
        handler._refreshing = True


LateLockListRenewalMachine.TestCase.settings = BatchedLoopMachine.TestCase.settings
test_late_lock_list_renewal_histories_lose_nothing_and_never_run_early = LateLockListRenewalMachine.TestCase


class FreshVacuumsOnOlderListsMachine(LateLockListRenewalMachine):
    """The same histories with the worst pre-check a batch could make: every fresh vacuum is taken for
    one that the newest lock list keeps waiting, so no batch waits for a list asked after its fresh
    vacuums were read, and lists live long (their renewal lands only when a rule says). Readers lock
    just before their vacuums commit, after the list that answers the batch: any "ready" from such a
    list must be asked again before anything is deleted."""

    def __init__(self) -> None:
        super().__init__()
        self.rig.handler.kept_waiting_by_last_list = lambda work: True  # type: ignore[method-assign]


FreshVacuumsOnOlderListsMachine.TestCase.settings = BatchedLoopMachine.TestCase.settings
test_fresh_vacuums_on_older_lists_histories_lose_nothing_and_never_run_early = FreshVacuumsOnOlderListsMachine.TestCase


class MixedBundleLayoutsMachine(BundledLoopMachine):
    """The same histories while the group is upgraded one process at a time: the bundles on the delay
    topic are compressed or plain JSON as the writer's ``cleanup_bundle_compression`` says when it
    writes them, and the setting changes whenever a rule says so, so bundles of both layouts are
    checked, carried on whole (each in its own layout), replayed and spilled side by side."""

    @rule()
    def the_bundle_layout_changes(self) -> None:
        handler = self.rig.handler
        handler.config = dataclasses.replace(handler.config, bundle_compressed=not handler.config.bundle_compressed)


MixedBundleLayoutsMachine.TestCase.settings = BatchedLoopMachine.TestCase.settings
test_mixed_bundle_layout_histories_lose_nothing_and_never_run_early = MixedBundleLayoutsMachine.TestCase


class EagerRebalancesMachine(BundledLoopMachine):
    """The bundled histories under the classic ``range`` assignor, whose rebalances are eager: every
    rebalance revokes all of the process's partitions (running work finishes or is abandoned, parked and
    held records are dropped) and assigns its share again from the committed offsets. Another process
    comes and takes some partitions for a while, and gives them back; the process loses all of them
    without a revoke (a session timeout) and gets them back."""

    assignment = Assignment.CLASSIC_RANGE

    def _reassign(self, share: list[tuple[str, int]], lost: bool = False) -> None:
        owned = sorted(self.consumer.assigned)
        if lost:
            self.consumer.rebalance_lost(owned)
        else:
            self.consumer.rebalance_revoke(owned)
        self.consumer.rebalance_assign(share)

    @rule(index=st.integers(0, 3))
    def rebalance(self, index: int) -> None:
        self._reassign(self.partitions)

    @rule(index=st.integers(0, 3))
    def partition_lost(self, index: int) -> None:
        self._reassign(self.partitions, lost=True)

    @rule(number=st.integers(0, 1), steps=st.integers(0, 6))
    def another_process_shares_the_group_for_a_while(self, number: int, steps: int) -> None:
        self._reassign([(V, number), (D, number)])  # range: the same partition number of both topics
        for _ in range(steps):
            self.loop.step()
            self.delay_topic_delivers()
        self._reassign(self.partitions)


EagerRebalancesMachine.TestCase.settings = BatchedLoopMachine.TestCase.settings
test_eager_rebalance_histories_lose_nothing_and_never_run_early = EagerRebalancesMachine.TestCase


class HeldAcknowledgements(Executor):
    """An ack executor whose tasks (a batch's publish, its wait and its lanes' release) run only when
    a rule says, in any order: the broker answers batches late and out of order."""

    def __init__(self) -> None:
        self.pending: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        self.immediate = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        if self.immediate:
            return InlineExecutor().submit(fn, *args, **kwargs)
        self.pending.append((fn, args))
        return Future()

    def run(self, index: int) -> None:
        fn, args = self.pending.pop(index % len(self.pending))
        fn(*args)


class LateAcknowledgementsMachine(BundledLoopMachine):
    """The same histories with each batch's outcomes published and acknowledged on an ack executor,
    late and in any order, while the worker goes on with the next batches: the lanes of a batch stay
    busy and its offsets uncommitted until its acknowledgement, whatever the other rules do meanwhile
    (rebalances and rewinds included)."""

    # A revoke gives up at once on the batches whose acknowledgements have not arrived (this thread
    # would run them): their records are read again by the partition's next owner.
    revoke_timeout_s = 0.0

    def ack_executor(self) -> Executor:
        self.acks = HeldAcknowledgements()
        return self.acks

    @rule(data=st.data())
    def an_acknowledgement_arrives(self, data: st.DataObject) -> None:
        if self.acks.pending:
            self.acks.run(data.draw(st.integers(0, len(self.acks.pending) - 1)))

    def teardown(self) -> None:
        self.acks.immediate = True
        while self.acks.pending:
            self.acks.run(0)
        super().teardown()


LateAcknowledgementsMachine.TestCase.settings = BatchedLoopMachine.TestCase.settings
test_late_acknowledgement_histories_lose_nothing_and_never_run_early = LateAcknowledgementsMachine.TestCase


class LyingKeyListsMachine(BundledLoopMachine):
    """The same histories with bundles whose x-bundle-keys list lies (its CRC forged to match): from
    when a rule says so, every bundle delivered lists one key fewer, a key of a table it does not carry,
    or its keys the other way round. A list is only believed to carry a bundle on unread, so every
    invariant holds and every vacuum is still cleaned, once, and none dead-lettered."""

    def __init__(self) -> None:
        super().__init__()
        self.lie = "none"

    @rule(lie=st.sampled_from(["none", "omits_one", "names_another", "reversed"]))
    def key_lists_lie(self, lie: str) -> None:
        self.lie = lie

    @rule(count=st.integers(1, 3))
    def delay_topic_delivers_some(self, count: int) -> None:
        published = self.rig.bus.records.get(D, [])
        for index in range(self.delivered, min(len(published), self.delivered + count)):
            record = published[index]
            if is_bundle(record.headers) and dict(record.headers).get(KEYS_HEADER):
                published[index] = dataclasses.replace(record, headers=self._lied(record.headers))
        super().delay_topic_delivers_some(count)

    def _lied(self, headers: tuple[tuple[str, bytes], ...]) -> tuple[tuple[str, bytes], ...]:
        listed = msgspec.json.decode(dict(headers)[KEYS_HEADER], type=BundleKeys)
        keys = listed.keys
        if self.lie == "omits_one":
            keys = keys[1:]
        elif self.lie == "names_another":
            keys = [*keys, f"acme/sales.t{next(self.tables)}"]
        elif self.lie == "reversed":
            keys = keys[::-1]
        text = msgspec.json.encode(BundleKeys(listed.records_crc, keys))
        return tuple((name, text if name == KEYS_HEADER else value) for name, value in headers)


LyingKeyListsMachine.TestCase.settings = BatchedLoopMachine.TestCase.settings
test_lying_key_list_histories_lose_nothing_and_never_run_early = LyingKeyListsMachine.TestCase
