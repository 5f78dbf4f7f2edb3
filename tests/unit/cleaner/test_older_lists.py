"""Fresh vacuums answered from lock lists asked before they were read (rule 1).

A batch of fresh vacuums that the newest lock list keeps waiting does not wait for a list of its own:
an older list can only answer them "wait". These tests are the adversary of that shortcut: whatever
leaves a fresh vacuum out of its batch's ``read_by``, a "ready" from lists asked before it was read is
never acted on; it is asked again from newer lists."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from acidclean.schemas.events import CleanupDone, VacuumCommitted
from acidclean.shared.acid.names import delta_name
from acidclean.shared.metastore import MetastoreKind

from .fakes import TOPICS, FakeConsumer, Rig, lock, loop_over, run_for, serve_list_asked_now, vacuum

pytestmark = [pytest.mark.rule1]

V, D = TOPICS.vacuum_committed, TOPICS.cleanup_delay
SINGLES = [delta_name(i, i, 0) for i in (1, 2, 3)]
NEW = delta_name(1, 3)


def add_table(rig: Rig, index: int, **fields: Any) -> VacuumCommitted:
    """Table ``sales.t<index>``: three single deltas and the vacuum's delta over them."""
    location = f"/warehouse/sales.db/t{index}"
    rig.metastore.add_table(f"sales.t{index}", "file:" + location)
    rig.fs.add_acid_dirs(location, [*SINGLES, NEW])
    event = vacuum(table=f"sales.t{index}", partition=None, location=location, **fields)
    rig.fs.mark_vacuum_output(event)
    return event


def dones(rig: Rig) -> list[CleanupDone]:
    return [event for event in rig.published(TOPICS.cleanup_done) if isinstance(event, CleanupDone)]


def asked_again(rig: Rig) -> float:
    return rig.metrics.events.labels("ready_asked_again")._value.get()  # type: ignore[no-any-return]


def every_fresh_vacuum_left_out(rig: Rig) -> None:
    """The worst pre-check: every fresh vacuum is taken for one an older list keeps waiting, so no batch
    waits for a list asked after its fresh vacuums were read."""
    rig.handler.kept_waiting_by_last_list = lambda work: True  # type: ignore[method-assign]


def test_a_fresh_vacuum_whose_reader_locked_after_the_batchs_list_is_not_cleaned_on_it() -> None:
    """The adversary: a reader locks after the newest list was asked, the vacuum's snapshot holds only
    that lock, and the vacuum is left out of its batch's ``read_by``. The batch's list does not show the
    lock: its "ready" is asked again, the newer list shows the reader, and the vacuum waits for it."""
    rig = Rig()
    consumer = FakeConsumer(rig.clock)
    loop = loop_over(rig, consumer)
    serve_list_asked_now(rig)
    rig.clock.advance(0.01)
    rig.metastore.take_lock(901, "sales.t1")
    event = add_table(rig, 1, lock_snapshot=[lock(901)])
    consumer.append(V, 0, event)
    every_fresh_vacuum_left_out(rig)
    run_for(loop, rig, 1)
    assert rig.fs.deleted == [] and dones(rig) == []
    [envelope] = rig.published(D)
    assert envelope.correlation_id == event.event_id and [e.lock_id for e in envelope.locks_held] == [901]
    assert asked_again(rig) == 1
    rig.metastore.release(901)
    consumer.append(D, 0, envelope)
    run_for(loop, rig, 3)
    assert [done.correlation_id for done in dones(rig)] == [event.event_id]


def test_a_fresh_vacuum_whose_lockless_reader_began_after_the_batchs_lists_waits_for_it() -> None:
    """The same adversary without a lock: a reader opens a transaction (no read lock) after the lists
    were asked, and the vacuum (``next_txn_id`` above it, an empty snapshot) is left out of its batch's
    ``read_by``. The older transaction list does not show the reader; the newer one does."""
    rig = Rig()
    rig.metastore._kind = MetastoreKind.HIVE3
    rig.metastore.txn_high_watermark = 200
    consumer = FakeConsumer(rig.clock)
    loop = loop_over(rig, consumer)
    serve_list_asked_now(rig)
    rig.clock.advance(0.01)
    rig.metastore.open_txns = [120]
    event = add_table(rig, 1, lock_snapshot=[], locks_observed=0, next_txn_id=150)
    consumer.append(V, 0, event)
    every_fresh_vacuum_left_out(rig)
    run_for(loop, rig, 1)
    assert rig.fs.deleted == [] and dones(rig) == []
    [envelope] = rig.published(D)
    assert envelope.correlation_id == event.event_id
    assert asked_again(rig) == 1
    rig.metastore.open_txns = []
    consumer.append(D, 0, envelope)
    run_for(loop, rig, 3)
    assert [done.correlation_id for done in dones(rig)] == [event.event_id]


def test_fresh_vacuums_the_newest_list_keeps_waiting_are_delayed_without_a_lock_list_of_their_own() -> None:
    """The shortcut itself: vacuums read after the newest list was asked, whose snapshot locks it
    lists, are checked on it (no new ``show_locks``) and wait; one whose reader it does not list is
    checked on a list asked after it was read, and cleaned."""
    rig = Rig()
    consumer = FakeConsumer(rig.clock)
    loop = loop_over(rig, consumer)
    rig.metastore.take_lock(901, "sales.t1")
    rig.metastore.take_lock(902, "sales.t2")
    serve_list_asked_now(rig)
    rig.clock.advance(0.01)
    waiting = [add_table(rig, 1, lock_snapshot=[lock(901)]), add_table(rig, 2, lock_snapshot=[lock(902)])]
    for event in waiting:
        consumer.append(V, 0, event)
    calls = rig.metastore.calls["show_locks"]
    run_for(loop, rig, 1)
    assert rig.metastore.calls["show_locks"] == calls  # the newest list answered both
    assert sorted(str(envelope.correlation_id) for envelope in rig.published(D)) == sorted(
        str(event.event_id) for event in waiting
    )
    free = add_table(rig, 3, lock_snapshot=[])
    consumer.append(V, 0, free)
    run_for(loop, rig, 1)
    assert rig.metastore.calls["show_locks"] == calls + 1  # a list asked after it was read
    assert [done.correlation_id for done in dones(rig)] == [free.event_id]
    assert asked_again(rig) == 0


def test_a_vacuum_whose_snapshot_misses_a_reader_that_locked_after_the_batchs_list_waits_for_it() -> None:
    """A bad event: its snapshot is empty, but a reader locked the table before the vacuum committed,
    after the list the batch shares was asked. That list shows no lock: the readiness answer is
    "ready", and the check of locks missing from the snapshot must run on a list asked after the
    vacuum was read (the one the re-ask brings), or it finds nothing to wait for."""
    rig = Rig()
    consumer = FakeConsumer(rig.clock)
    loop = loop_over(rig, consumer)
    serve_list_asked_now(rig)
    rig.clock.advance(0.01)
    event = add_table(rig, 1, lock_snapshot=[], locks_observed=0, next_txn_id=None)
    rig.metastore.take_lock(903, "sales.t1", acquired_at=event.occurred_at - timedelta(seconds=5))
    consumer.append(V, 0, event)
    every_fresh_vacuum_left_out(rig)
    run_for(loop, rig, 1)
    assert rig.fs.deleted == [] and dones(rig) == []
    [envelope] = rig.published(D)
    assert envelope.correlation_id == event.event_id and [e.lock_id for e in envelope.locks_held] == [903]
    assert asked_again(rig) == 1
    rig.metastore.release(903)
    consumer.append(D, 0, envelope)
    run_for(loop, rig, 3)
    assert [done.correlation_id for done in dones(rig)] == [event.event_id]
