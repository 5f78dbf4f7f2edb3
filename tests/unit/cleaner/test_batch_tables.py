"""A batch asks for the tables it is about to clean together (one call per database, one for the
write ids, none on Hive 2), and every way that can go wrong ends as the table asked alone would."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from acidclean.schemas.events import CleanupDone, CleanupRejected, VacuumCommitted
from acidclean.shared.acid.id_lists import MetastoreKind
from acidclean.shared.acid.names import delta_name
from acidclean.shared.bus.records import RawRecord
from acidclean.shared.errors import MetastoreError
from acidclean.shared.metastore import TableInfo

from .fakes import TOPICS, FakeConsumer, FakeMetastore, Rig, lock, loop_over, run_for, vacuum

V = TOPICS.vacuum_committed
SINGLES = [delta_name(i, i, 0) for i in (1, 2, 3)]
NEW = delta_name(1, 3)


def add_table(rig: Rig, index: int, partition: str | None = None) -> VacuumCommitted:
    """Table ``sales.t<index>`` (or one partition of it), three single deltas and the vacuum's delta over them."""
    location = f"/warehouse/sales.db/t{index}" + (f"/{partition}" if partition else "")
    rig.metastore.add_table(f"sales.t{index}", "file:" + location, partition)
    rig.fs.add_acid_dirs(location, [*SINGLES, NEW])
    event = vacuum(table=f"sales.t{index}", partition=partition, location=location, lock_snapshot=[lock(1000 + index)])
    rig.fs.mark_vacuum_output(event)
    return event


class Asked:
    """Records the tables of every batch lookup and the transaction lists the write ids were asked in."""

    def __init__(self, rig: Rig) -> None:
        self.tables: list[list[str]] = []
        self.txn_lists: list[str] = []
        self.rig = rig
        get_tables, write_ids_of = rig.metastore.get_tables, rig.metastore.valid_write_ids_of

        def recording_get_tables(db: str, tables: Sequence[str]) -> dict[str, TableInfo]:
            self.tables.append(list(tables))
            return get_tables(db, tables)

        def recording_write_ids_of(tables: Sequence[tuple[str, str]], txn_list: str) -> list[str]:
            self.txn_lists.append(txn_list)
            return write_ids_of(tables, txn_list)

        rig.metastore.get_tables = recording_get_tables  # type: ignore[method-assign]
        rig.metastore.valid_write_ids_of = recording_write_ids_of  # type: ignore[method-assign]


def dones(rig: Rig) -> list[CleanupDone]:
    return [event for event in rig.published(TOPICS.cleanup_done) if isinstance(event, CleanupDone)]


def run(rig: Rig, events: Sequence[VacuumCommitted]) -> FakeConsumer:
    consumer = FakeConsumer(rig.clock)
    for event in events:
        consumer.append(V, 0, event)
    run_for(loop_over(rig, consumer), rig, 5)
    return consumer


@pytest.mark.parametrize("kind", [MetastoreKind.HIVE2, MetastoreKind.HIVE3])
def test_ten_ready_tables_are_asked_for_in_one_call_and_their_write_ids_in_at_most_one(kind: MetastoreKind) -> None:
    rig = Rig(metastore=FakeMetastore(kind))
    asked = Asked(rig)
    events = [add_table(rig, i) for i in range(10)]
    consumer = run(rig, events)
    assert {done.correlation_id for done in dones(rig)} == {event.event_id for event in events}
    assert all(sorted(item.name for item in done.directories_removed) == SINGLES for done in dones(rig))
    # One lookup for the check, and one more just before the deletes (rule 9: still the same tables?).
    assert [sorted(names) for names in asked.tables] == [sorted(f"t{i}" for i in range(10))] * 2
    assert rig.metastore.calls["get_table"] == 0
    # Hive 2's id lists are the transaction list itself; Hive 3 asks for every table's in one call.
    assert rig.metastore.calls["valid_write_ids"] == (0 if kind is MetastoreKind.HIVE2 else 1)
    assert rig.metastore.calls["valid_txn_list"] == 1
    assert consumer.committed[(V, 0)] == 10


def test_write_ids_are_asked_in_the_snapshot_of_the_transaction_list_the_batch_plans_with() -> None:
    rig = Rig(metastore=FakeMetastore(MetastoreKind.HIVE3))
    asked = Asked(rig)
    rig.metastore.open_txns, rig.metastore.txn_high_watermark = [7], 120
    answered: list[str] = []
    valid_txn_list = rig.metastore.valid_txn_list

    def moving_on() -> str:  # every later answer is a newer snapshot
        answered.append(valid_txn_list())
        rig.metastore.txn_high_watermark += 1
        return answered[-1]

    rig.metastore.valid_txn_list = moving_on  # type: ignore[method-assign]
    run(rig, [add_table(rig, i) for i in range(3)])
    assert answered[0] == "120:7:7:" and asked.txn_lists == [answered[0]]
    assert len(dones(rig)) == 3


def test_tables_whose_readers_still_hold_a_snapshot_lock_are_not_asked_for() -> None:
    rig = Rig()
    asked = Asked(rig)
    events = [add_table(rig, i) for i in range(4)]
    rig.metastore.take_lock(1001, "sales.t1")
    rig.metastore.take_lock(1003, "sales.t3")
    run(rig, events)
    assert sorted(asked.tables[0]) == ["t0", "t2"]
    assert {done.correlation_id for done in dones(rig)} == {events[0].event_id, events[2].event_id}
    assert not any(path.startswith(("/warehouse/sales.db/t1/", "/warehouse/sales.db/t3/")) for path in rig.fs.deleted)


def test_a_metastore_refusing_both_batch_calls_is_asked_per_table_and_without_write_ids_deletes_nothing() -> None:
    rig = Rig(metastore=FakeMetastore(MetastoreKind.HIVE3))

    def refused(*args: Any) -> Any:
        raise MetastoreError("metastore refused get_table_objects_by_name: simulated")

    rig.metastore.get_tables = refused  # type: ignore[method-assign]
    rig.metastore.valid_write_ids_of = refused  # type: ignore[method-assign]
    events = [add_table(rig, i) for i in range(3)]
    run(rig, events)
    assert rig.metastore.calls["get_table"] == 3  # each table asked alone
    # No write id list could be had, so every cleanup waits (fail closed, rule 1).
    assert dones(rig) == [] and rig.fs.deleted == []
    assert len(rig.published(TOPICS.cleanup_delay)) >= 1


def test_a_failed_batch_table_lookup_alone_still_cleans_every_table() -> None:
    rig = Rig()

    def refused(db: str, tables: Sequence[str]) -> dict[str, TableInfo]:
        raise MetastoreError("metastore refused get_table_objects_by_name: simulated")

    rig.metastore.get_tables = refused  # type: ignore[method-assign]
    events = [add_table(rig, i) for i in range(3)]
    run(rig, events)
    assert rig.metastore.calls["get_table"] == 6  # for the checks, and again before the deletes (rule 9)
    assert {done.correlation_id for done in dones(rig)} == {event.event_id for event in events}


def test_a_table_the_batch_lookup_does_not_return_is_reported_dropped_when_its_location_is_gone() -> None:
    rig = Rig()
    events = [add_table(rig, i) for i in range(3)]
    del rig.metastore.tables[("sales", "t1", None)]
    gone = "/warehouse/sales.db/t1"  # DROP TABLE: Hive removed the managed table's data
    rig.fs.dirs = {path for path in rig.fs.dirs if not path.startswith(gone)}
    rig.fs.files = {path: size for path, size in rig.fs.files.items() if not path.startswith(gone)}
    run(rig, events)
    assert rig.metastore.calls["get_table"] == 0  # the batch's answer says t1 is not there
    [dropped] = [done for done in dones(rig) if done.correlation_id == events[1].event_id]
    assert dropped.directories_removed == [] and dropped.note is not None and "dropped" in dropped.note
    assert len(dones(rig)) == 3


def test_a_table_the_batch_finds_elsewhere_than_its_vacuum_wrote_is_refused_and_nothing_there_is_deleted() -> None:
    rig = Rig()
    events = [add_table(rig, i) for i in range(3)]
    rig.metastore.add_table("sales.t1", "file:/warehouse/sales.db/t1_moved")  # ALTER TABLE ... SET LOCATION
    run(rig, events)
    [refused] = [event for event in rig.published(TOPICS.dead_letter) if isinstance(event, CleanupRejected)]
    assert refused.causation_id == events[1].event_id
    assert not any(path.startswith("/warehouse/sales.db/t1") for path in rig.fs.deleted)
    assert len(dones(rig)) == 2


def test_partitioned_vacuums_ask_for_their_tables_together_and_each_partition_with_one_call() -> None:
    rig = Rig()
    asked = Asked(rig)
    events = [add_table(rig, i, partition="ds=2025-03-14") for i in range(3)]
    run(rig, events)
    assert sorted(asked.tables[0]) == ["t0", "t1", "t2"]
    # Each partition once for the check, once more just before its deletes (rule 9: the same partition?).
    assert rig.metastore.calls["get_table"] == 0 and rig.metastore.calls["get_partition"] == 6
    assert len(dones(rig)) == 3
    assert sorted({path.rsplit("/", 1)[0] for path in rig.fs.deleted}) == [
        f"/warehouse/sales.db/t{i}/ds=2025-03-14" for i in range(3)
    ]


def test_a_partition_dropped_before_its_cleanup_is_reported_dropped_and_its_table_is_untouched() -> None:
    rig = Rig()
    events = [add_table(rig, i, partition="ds=2025-03-14") for i in range(3)]
    del rig.metastore.tables[("sales", "t1", "ds=2025-03-14")]
    gone = "/warehouse/sales.db/t1/ds=2025-03-14"  # ALTER TABLE ... DROP PARTITION removed its data
    rig.fs.dirs = {path for path in rig.fs.dirs if not path.startswith(gone)}
    rig.fs.files = {path: size for path, size in rig.fs.files.items() if not path.startswith(gone)}
    run(rig, events)
    [dropped] = [done for done in dones(rig) if done.correlation_id == events[1].event_id]
    assert dropped.directories_removed == [] and dropped.note is not None and "dropped" in dropped.note
    assert not any(path.startswith("/warehouse/sales.db/t1") for path in rig.fs.deleted)
    assert len(dones(rig)) == 3


def test_lone_waiting_vacuums_whose_readers_left_are_asked_for_together_when_checked_again() -> None:
    rig = Rig()
    events = [add_table(rig, i) for i in range(4)]
    for index in range(4):
        rig.metastore.take_lock(1000 + index, f"sales.t{index}")
    consumer = FakeConsumer(rig.clock)
    for event in events:
        consumer.append(V, 0, event)
    loop = loop_over(rig, consumer)
    run_for(loop, rig, 1)
    assert dones(rig) == [] and len(rig.published(TOPICS.cleanup_delay)) == 4  # each waits alone
    log = consumer.logs.setdefault((TOPICS.cleanup_delay, 0), [])
    for record in rig.bus.records[TOPICS.cleanup_delay]:
        log.append(RawRecord(TOPICS.cleanup_delay, 0, len(log), record.key, record.value, record.headers))
    for index in (0, 1, 2):
        rig.metastore.release(1000 + index)
    asked = Asked(rig)
    run_for(loop, rig, 3)
    assert {done.correlation_id for done in dones(rig)} == {event.event_id for event in events[:3]}
    assert sorted(asked.tables[0]) == ["t0", "t1", "t2"]  # t3's reader still holds its lock
    assert rig.metastore.calls["get_table"] == 0
    assert not any(path.startswith("/warehouse/sales.db/t3/") for path in rig.fs.deleted)


def test_a_table_the_batch_lookup_does_not_return_whose_location_exists_is_refused_and_nothing_deleted() -> None:
    rig = Rig()
    events = [add_table(rig, i) for i in range(3)]
    del rig.metastore.tables[("sales", "t1", None)]  # no such table, but its directory is there
    run(rig, events)
    [refused] = [event for event in rig.published(TOPICS.dead_letter) if isinstance(event, CleanupRejected)]
    assert refused.causation_id == events[1].event_id and refused.reason_code == "unknown_table"
    assert not any(path.startswith("/warehouse/sales.db/t1/") for path in rig.fs.deleted)
    assert len(dones(rig)) == 2
