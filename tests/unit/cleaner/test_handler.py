"""The handler of one event against fakes: wait, clean, refuse, fail closed, report."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import pytest

from acidclean.consumers.rules.readiness import COMMIT_MARGIN, ready_to_clean
from acidclean.consumers.scheduling import delay_envelope
from acidclean.schemas.common import EventBase, derived_event_id
from acidclean.schemas.events import CleanupDone, CleanupRejected, CleanupStarted, DelayEnvelope
from acidclean.shared.acid.names import base_name, delta_name
from acidclean.shared.bus.protocol import Delivery
from acidclean.shared.errors import BusError
from acidclean.shared.vacuum_marker import VACUUM_MARKER, VacuumMarker

from .fakes import LOCATION, T0, TOPICS, FakeFileSystem, Rig, lock, vacuum

D1, D2, D3 = (delta_name(i, i, 0) for i in (1, 2, 3))
NEW = delta_name(1, 3)


@pytest.fixture
def rig() -> Rig:
    rig = Rig()
    rig.metastore.add_table("sales.orders", "file:" + LOCATION, "ds=2025-03-14")
    rig.fs.add_acid_dirs(LOCATION, [D1, D2, D3, NEW])
    return rig


@pytest.mark.rule1
def test_reader_holding_a_snapshot_lock_delays_and_nothing_is_deleted(rig: Rig) -> None:
    rig.metastore.take_lock(7, "sales.orders", "ds=2025-03-14")
    outcome = rig.handle(vacuum())
    assert outcome.kind == "delayed"
    assert rig.fs.deleted == []
    [envelope] = rig.published(TOPICS.cleanup_delay)
    assert isinstance(envelope, DelayEnvelope) and envelope.attempt == 1
    assert [entry.lock_id for entry in envelope.locks_held] == [7]
    assert envelope.due_at == rig.clock.now() + timedelta(milliseconds=2000)


def test_table_level_reader_lock_holds_back_a_partition_cleanup(rig: Rig) -> None:
    rig.metastore.take_lock(7, "sales.orders", partition=None)  # a reader of the whole table
    assert rig.handle(vacuum()).kind == "delayed"
    assert rig.fs.deleted == []


def test_released_locks_let_the_cleanup_remove_exactly_the_obsolete_directories(rig: Rig) -> None:
    outcome = rig.handle(vacuum())
    assert outcome.kind == "cleaned"
    assert rig.deleted_names() == [D1, D2, D3]
    assert rig.fs.exists(f"{LOCATION}/{NEW}")
    [done] = rig.dones()
    assert [(d.name, d.file_count, d.bytes) for d in done.directories_removed] == [
        (D1, 2, 101),
        (D2, 2, 101),
        (D3, 2, 101),
    ]
    assert done.attempts == 1 and done.cleaner_id == "cleaner-test"
    assert done.event_id == derived_event_id(done.correlation_id, "cleanup-done")


@pytest.mark.rule2
def test_reader_that_locked_after_the_vacuum_does_not_delay(rig: Rig) -> None:
    later = T0 + timedelta(seconds=30)  # the vacuum committed at T0 and wrote no marker time
    rig.metastore.take_lock(99, "sales.orders", "ds=2025-03-14", acquired_at=later)  # not in the snapshot
    assert rig.handle(vacuum()).kind == "cleaned"


@pytest.mark.rule1
def test_a_reader_that_locked_within_the_commit_margin_is_waited_for(rig: Rig) -> None:
    # The clocks of the vacuum's host and the metastore's database may differ by the margin: such a
    # reader may have listed before the rename, so it costs one reader's run of delay, nothing more.
    rig.metastore.take_lock(96, "sales.orders", "ds=2025-03-14", acquired_at=T0 + COMMIT_MARGIN / 2)
    assert rig.handle(vacuum()).kind == "delayed" and rig.fs.deleted == []


@pytest.mark.rule1
def test_a_reader_locked_before_the_commit_but_missing_from_the_snapshot_is_waited_for(rig: Rig) -> None:
    # An incomplete snapshot (a lost event, a partition name spelled another way): the lock list says
    # this reader held its lock before the vacuum committed, so the cleanup waits for it too.
    rig.metastore.take_lock(98, "sales.orders", "ds=2025-03-14")  # a minute before T0
    outcome = rig.handle(vacuum(lock_snapshot=[], locks_observed=0))
    assert outcome.kind == "delayed" and rig.fs.deleted == []
    assert [entry.lock_id for entry in outcome.event.locks_held] == [98]  # type: ignore[union-attr]
    rig.metastore.release(98)
    assert rig.handle(outcome.event).kind == "cleaned"


@pytest.mark.rule1
def test_a_marker_written_after_the_events_time_moves_the_commit_later(rig: Rig) -> None:
    # A forged event dated early cannot hide a reader: the marker the vacuum wrote gives the time.
    rig.metastore.take_lock(97, "sales.orders", "ds=2025-03-14", acquired_at=T0 + timedelta(minutes=5))
    event = vacuum(lock_snapshot=[], locks_observed=0)
    marker = VacuumMarker(
        str(event.event_id),
        "job-1",
        event.table,
        event.partition,
        3,
        written_at=(T0 + timedelta(minutes=5)).isoformat(),
    )
    rig.fs.write_file(f"{LOCATION}/{NEW}/{VACUUM_MARKER}", marker.to_bytes())
    rig.mark_vacuum_output = False
    assert rig.handle(event).kind == "delayed"


@pytest.mark.rule1
def test_metastore_down_fails_closed_delays_and_deletes_nothing(rig: Rig) -> None:
    rig.metastore.down = True
    outcome = rig.handle(vacuum())
    assert outcome.kind == "delayed" and rig.fs.deleted == []
    [envelope] = rig.published(TOPICS.cleanup_delay)
    assert isinstance(envelope, DelayEnvelope)
    assert envelope.check_error is not None and "show_locks" in envelope.check_error
    assert rig.metastore.calls["show_locks"] == 3  # bounded retries inside one check


def test_metastore_failing_between_the_lock_check_and_the_listing_still_deletes_nothing(rig: Rig) -> None:
    original = rig.metastore.get_table

    def failing(*args: object, **kwargs: object) -> object:
        rig.metastore.down = True
        return original(*args, **kwargs)  # type: ignore[arg-type]

    rig.metastore.get_table = failing  # type: ignore[method-assign]
    assert rig.handle(vacuum()).kind == "delayed"
    assert rig.fs.deleted == []


def test_recheck_from_the_delay_topic_counts_attempts_and_time_waited(rig: Rig) -> None:
    v = vacuum()
    first = delay_envelope(v, ready_to_clean(v.lock_snapshot, []), now=rig.clock.now(), interval_ms=2000, max_wait_s=60)
    rig.clock.advance(5)
    outcome = rig.handle(first)
    assert outcome.kind == "cleaned"
    done = outcome.event
    assert isinstance(done, CleanupDone)
    assert done.attempts == 2 and done.causation_id == first.event_id and done.time_waited_ms == 5000


def test_several_events_of_one_table_share_one_show_locks(rig: Rig) -> None:
    rig.metastore.add_table("sales.orders", "file:/warehouse/sales.db/orders/ds=2", "ds=2")
    rig.metastore.add_table("sales.orders", "file:/warehouse/sales.db/orders/ds=3", "ds=3")
    for partition in ("ds=2", "ds=3"):
        rig.fs.add_acid_dirs(f"/warehouse/sales.db/orders/{partition}", [D1, NEW])
    rig.metastore.take_lock(7, "sales.orders", "ds=2025-03-14")
    events = [
        vacuum(),
        *(
            vacuum(
                partition=partition,
                location=f"/warehouse/sales.db/orders/{partition}",
                obsolete_directories=[D1],
                lock_snapshot=[lock(lock_id)],
            )
            for partition, lock_id in (("ds=2", 9), ("ds=3", 8))
        ),
    ]
    for event in events:
        rig.fs.mark_vacuum_output(event)
    works = [rig.work(event, offset) for offset, event in enumerate(events)]
    check = rig.handler.lock_check(works[0])
    outcomes = [rig.handler.handle(work, check) for work in works]
    assert [o.kind for o in outcomes] == ["delayed", "cleaned", "cleaned"]
    assert rig.metastore.calls["show_locks"] == 1
    assert rig.published(TOPICS.cleanup_delay) == []  # deferred until the group flushes
    rig.handler.flush_delays(check)
    assert len(rig.published(TOPICS.cleanup_delay)) == 1


def test_envelopes_of_one_group_share_a_due_time(rig: Rig) -> None:
    rig.metastore.take_lock(7, "sales.orders", "ds=2025-03-14")
    first, second = rig.work(vacuum(), 0), rig.work(vacuum(), 1)
    check = rig.handler.lock_check(first)
    rig.handler.handle(first, check)
    rig.clock.advance(0.3)
    rig.handler.handle(second, check)
    rig.handler.flush_delays(check)
    dues = [e.due_at for e in rig.published(TOPICS.cleanup_delay) if isinstance(e, DelayEnvelope)]
    assert len(dues) == 2 and dues[0] == dues[1]


def test_dropped_table_reports_done_with_nothing_removed_and_the_reason(rig: Rig) -> None:
    rig.metastore.tables.clear()
    for name in rig.fs.children(LOCATION):
        rig.fs.delete_dir(f"{LOCATION}/{name}")
    rig.fs.dirs.discard(LOCATION)
    rig.fs.deleted.clear()
    outcome = rig.handle(vacuum())
    assert outcome.kind == "table_dropped"
    assert isinstance(outcome.event, CleanupDone)
    assert outcome.event.directories_removed == [] and "dropped" in (outcome.event.note or "")
    assert rig.fs.deleted == []


def test_unknown_table_whose_location_exists_goes_to_the_dead_letter_topic(rig: Rig) -> None:
    rig.metastore.tables.clear()
    v = vacuum()
    outcome = rig.handle(v)
    assert outcome.kind == "dead_lettered" and rig.fs.deleted == []
    [rejected] = rig.published(TOPICS.dead_letter)
    assert isinstance(rejected, CleanupRejected) and rejected.reason_code == "unknown_table"
    assert rejected.correlation_id == v.event_id and rejected.causation_id == v.event_id


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"obsolete_directories": ["delta_0000001_0000001_0000/../../../etc"]}, "unsafe_path"),
        ({"location": "/warehouse/globex/sales.db/orders"}, "unsafe_path"),  # not the metastore's location
        ({"obsolete_directories": [delta_name(5, 5, 0)]}, "not_obsolete"),
    ],
)
def test_unsafe_events_are_dead_lettered_before_anything_is_deleted(
    rig: Rig, change: dict[str, object], code: str
) -> None:
    outcome = rig.handle(vacuum(**change))
    assert outcome.kind == "dead_lettered" and rig.fs.deleted == []
    [rejected] = rig.published(TOPICS.dead_letter)
    assert isinstance(rejected, CleanupRejected) and rejected.reason_code == code


def test_another_tenants_table_is_refused(rig: Rig) -> None:
    where = "/warehouse/globex/sales.db/orders"
    rig.metastore.add_table("sales.orders", where, "ds=2025-03-14")
    rig.fs.add_acid_dirs(where, [D1, D2, D3, NEW])
    outcome = rig.handle(vacuum(location=where))
    assert outcome.kind == "dead_lettered" and rig.fs.deleted == []
    assert outcome.event.reason_code == "other_tenant"  # type: ignore[union-attr]


def test_symlinked_table_location_leading_out_of_the_roots_is_refused(rig: Rig) -> None:
    rig.fs.links[LOCATION] = "/globex/victim"
    rig.fs.add_acid_dirs("/globex/victim", [D1, D2, D3, NEW])
    outcome = rig.handle(vacuum())
    assert outcome.kind == "dead_lettered" and rig.fs.deleted == []


def test_symlinked_obsolete_directory_is_refused_and_its_target_survives(rig: Rig) -> None:
    rig.fs.delete_dir(f"{LOCATION}/{D2}")
    rig.fs.deleted.clear()
    rig.fs.add_acid_dirs("/globex/victim", ["data"])
    rig.fs.links[f"{LOCATION}/{D2}"] = "/globex/victim"
    outcome = rig.handle(vacuum())
    assert outcome.kind == "dead_lettered" and rig.fs.deleted == []
    assert rig.fs.exists("/globex/victim/data")


def test_cleaning_an_already_clean_table_removes_nothing_and_still_reports(rig: Rig) -> None:
    v = vacuum()
    assert rig.handle(v).kind == "cleaned"
    again = rig.handle(v)
    assert again.kind == "cleaned" and again.removed == ()
    dones = rig.dones()
    assert len(dones) == 2 and dones[0].event_id == dones[1].event_id  # same id: readers drop the duplicate
    assert len(rig.starts()) == 1  # nothing left to delete: nothing announced


def test_unacknowledged_outcome_raises_so_the_offset_is_not_committed(rig: Rig) -> None:
    rig.metastore.take_lock(7, "sales.orders", "ds=2025-03-14")
    rig.bus.fail_next()
    with pytest.raises(BusError):
        rig.handle(vacuum())  # a delay envelope: raised by the group's flush


def test_unacknowledged_cleanup_done_raises_after_deleting(rig: Rig) -> None:
    fail_publishing(rig, CleanupDone)
    with pytest.raises(BusError):
        rig.handle(vacuum())
    assert rig.deleted_names() == [D1, D2, D3]  # a retry lists again and reports nothing left
    [started] = rig.starts()  # ... but the announcement says what went
    assert [d.name for d in started.directories_to_remove] == [D1, D2, D3]


def fail_publishing(rig: Rig, event_class: type[EventBase]) -> None:
    """Make the rig's bus refuse (BusError, nothing stored) every publish of ``event_class``."""
    publish_many = rig.bus.publish_many

    def refusing(items: Sequence[tuple[str, EventBase]]) -> list[Delivery]:
        if any(isinstance(event, event_class) for _, event in items):
            raise BusError(f"simulated: Kafka did not acknowledge the {event_class.__name__}")
        return publish_many(items)

    rig.bus.publish_many = refusing  # type: ignore[method-assign]


def test_cleanup_is_announced_and_acknowledged_before_the_first_delete(rig: Rig) -> None:
    announced_at_delete: list[list[str]] = []
    delete_files = rig.fs.delete_files  # each directory's first delete: its files listed at the check (rule 9)

    def deleting(path: str, names: list[str]) -> None:
        announced_at_delete.append([d.name for s in rig.starts() for d in s.directories_to_remove])
        delete_files(path, names)

    rig.fs.delete_files = deleting  # type: ignore[method-assign]
    v = vacuum()
    outcome = rig.handle(v)
    assert outcome.kind == "cleaned"
    assert announced_at_delete == [[D1, D2, D3]] * 3  # already stored by the bus at every delete
    [started, done] = rig.published(TOPICS.cleanup_done)
    assert isinstance(started, CleanupStarted) and isinstance(done, CleanupDone)
    assert [(d.name, d.file_count, d.bytes) for d in started.directories_to_remove] == [
        (D1, 2, 101),
        (D2, 2, 101),
        (D3, 2, 101),
    ]
    assert started.directories_to_remove == done.directories_removed
    assert (started.correlation_id, started.causation_id) == (v.event_id, v.event_id)
    assert (started.attempt, started.cleaner_id, started.key) == (1, "cleaner-test", v.key)
    assert started.occurred_at <= done.occurred_at


def test_an_unacknowledged_announcement_deletes_nothing_and_raises(rig: Rig) -> None:
    fail_publishing(rig, CleanupStarted)
    with pytest.raises(BusError):
        rig.handle(vacuum())
    assert rig.fs.deleted == [] and rig.bus.records == {}


def test_a_replayed_announcement_of_the_same_directories_has_the_same_id(rig: Rig) -> None:
    v = vacuum()
    rig.fs.fail_delete.add(f"{LOCATION}/{D2}")  # first run: D1 and D3 go, D2 stays
    assert rig.handle(v).kind == "delayed"
    rig.fs.fail_delete.clear()
    again = Rig(fs=rig.fs, metastore=rig.metastore)
    again.handle(v)  # the same event redelivered: only D2 is left to announce
    [first], [second] = rig.starts(), again.starts()
    assert [d.name for d in second.directories_to_remove] == [D2]
    assert first.event_id != second.event_id  # a different announcement, a different id
    replay = Rig(fs=FakeFileSystem(), metastore=rig.metastore)
    replay.fs.add_acid_dirs(LOCATION, [D1, D2, D3, NEW])
    replay.handle(v)
    assert replay.starts()[0].event_id == first.event_id  # same event, same directories: same id


def test_a_plan_with_nothing_to_delete_announces_nothing(rig: Rig) -> None:
    for name in (D1, D2, D3):
        rig.fs.delete_dir(f"{LOCATION}/{name}")
    assert rig.handle(vacuum()).kind == "cleaned"
    assert rig.starts() == [] and len(rig.dones()) == 1


def test_failed_delete_waits_and_a_later_check_finishes(rig: Rig) -> None:
    rig.fs.fail_delete.add(f"{LOCATION}/{D2}")
    assert rig.handle(vacuum()).kind == "delayed"
    rig.fs.fail_delete.clear()
    outcome = rig.handle(vacuum())
    assert outcome.kind == "cleaned" and [d.name for d in outcome.removed] == [D2]


def test_dry_run_deletes_nothing_and_reports_what_would_go(rig: Rig) -> None:
    dry = Rig(fs=rig.fs, metastore=rig.metastore, dry_run=True)
    outcome = dry.handle(vacuum())
    assert outcome.kind == "dry_run" and dry.fs.deleted == []
    [done] = dry.published(TOPICS.cleanup_done)  # and no CleanupStarted
    assert isinstance(done, CleanupDone) and done.dry_run
    assert [d.name for d in done.directories_removed] == [D1, D2, D3]


def test_dry_run_publishes_no_delay_and_no_dead_letter(rig: Rig) -> None:
    dry = Rig(fs=rig.fs, metastore=rig.metastore, dry_run=True)
    rig.metastore.take_lock(7, "sales.orders", "ds=2025-03-14")
    assert dry.handle(vacuum()).kind == "delayed"
    assert dry.handle(vacuum(obsolete_directories=["../x"])).kind == "dead_lettered"
    assert dry.bus.records == {}


def test_stuck_vacuum_keeps_waiting_and_is_counted(rig: Rig) -> None:
    rig.metastore.take_lock(7, "sales.orders", "ds=2025-03-14")
    rig.clock.advance(3601)
    outcome = rig.handle(vacuum())
    assert outcome.kind == "delayed" and rig.fs.deleted == []
    assert isinstance(outcome.event, DelayEnvelope) and outcome.event.stuck
    assert rig.handler.stuck_count(within_s=60) == 1


def test_major_vacuum_on_a_hive3_metastore_uses_write_ids(rig: Rig) -> None:
    from acidclean.shared.acid.id_lists import MetastoreKind

    hive3 = Rig(fs=rig.fs, metastore=rig.metastore)
    hive3.metastore._kind = MetastoreKind.HIVE3
    hive3.fs.add_acid_dirs(LOCATION, [base_name(3)])
    major = vacuum(new_directories=[base_name(3)], compaction_type="MAJOR", obsolete_directories=[D1, D2, D3, NEW])
    outcome = hive3.handle(major)
    assert outcome.kind == "cleaned"
    assert hive3.deleted_names() == sorted([D1, D2, D3, NEW])


def test_a_group_due_time_already_past_is_not_reused(rig: Rig) -> None:
    rig.metastore.take_lock(7, "sales.orders", "ds=2025-03-14")
    first, second = rig.work(vacuum(), 0), rig.work(vacuum(), 1)
    check = rig.handler.lock_check(first)
    rig.handler.handle(first, check)
    rig.clock.advance(5)  # e.g. a long cleanup of another event of the group
    rig.handler.handle(second, check)
    rig.handler.flush_delays(check)
    dues = [e.due_at for e in rig.published(TOPICS.cleanup_delay) if isinstance(e, DelayEnvelope)]
    assert dues[1] == rig.clock.now() + timedelta(milliseconds=2000)


@pytest.mark.rule5
def test_crash_points_are_told_each_step_and_change_nothing_on_the_delete_path(rig: Rig) -> None:
    reached: list[str] = []

    class Recorder:
        def reached(self, point: str) -> None:
            reached.append(point)

    plain = Rig()
    plain.metastore.add_table("sales.orders", "file:" + LOCATION, "ds=2025-03-14")
    plain.fs.add_acid_dirs(LOCATION, [D1, D2, D3, NEW])
    rig.handler.context.crash = Recorder()  # type: ignore[assignment]
    rig.metastore.release(7)
    plain.metastore.release(7)
    assert rig.handle(vacuum()).kind == plain.handle(vacuum()).kind == "cleaned"
    assert rig.fs.deleted == plain.fs.deleted  # same deletes, same order
    assert reached == ["before-delete", "mid-delete", "mid-delete", "mid-delete", "after-delete", "after-done"]
