"""Rule 8 in the cleaner: a vacuum of one name of a directory waits for readers of its other names."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acidclean.consumers.rules.readiness import COMMIT_MARGIN, locks_missing_from_snapshot
from acidclean.schemas.common import SharedLocation
from acidclean.shared.acid.names import delta_name
from acidclean.shared.errors import MetastoreError
from acidclean.shared.metastore import LockInfo

from .fakes import LOCATION, T0, Rig, vacuum

pytestmark = [pytest.mark.rule8, pytest.mark.rule1]

D1, D2, D3 = (delta_name(i, i, 0) for i in (1, 2, 3))
NEW = delta_name(1, 3)
REAL = "ds=2025-03-14"
ALIAS = "ds=latest"
BEFORE_MS = int((T0 - timedelta(minutes=1)).timestamp() * 1000)
AFTER_MS = int((T0 + timedelta(minutes=1)).timestamp() * 1000)


def reader(lock_id: int, table: str, partition: str | None, acquired_ms: int | None = BEFORE_MS) -> LockInfo:
    db, name = table.split(".")
    state = "ACQUIRED" if acquired_ms is not None else "WAITING"
    return LockInfo(lock_id, 3, db, name, partition, "SHARED_READ", state, "alice", "r", acquired_ms, 1)


# -- the pure rule ---------------------------------------------------------------------------------

alias = SharedLocation(table="sales.orders", partition=REAL, location="file:" + LOCATION)
twin_table = SharedLocation(table="sales.orders_copy", partition=None, location=LOCATION + "/")


@given(
    lock_id=st.integers(1, 10**6),
    spelled=st.sampled_from([REAL, REAL.upper(), "DS=2025-03-14", None]),
    table=st.sampled_from(["sales.orders", "SALES.Orders"]),
)
def test_a_reader_of_the_real_partition_holds_the_alias_vacuum(lock_id: int, spelled: str | None, table: str) -> None:
    lock = reader(lock_id, table, spelled)
    held = locks_missing_from_snapshot([], [lock], ALIAS, T0, shared_locks=[lock], sharers=[alias])
    assert [found.lock_id for found in held] == [lock_id]


@given(in_snapshot=st.booleans(), acquired=st.sampled_from([BEFORE_MS, AFTER_MS, None]))
def test_another_tables_lock_on_the_same_directory_counts_until_released(
    in_snapshot: bool, acquired: int | None
) -> None:
    from events.factories import lock as snapshot_lock

    lock = reader(41, "sales.orders_copy", None, acquired)
    snapshot = [snapshot_lock(41)] if in_snapshot else []
    held = locks_missing_from_snapshot(snapshot, [], ALIAS, T0, shared_locks=[lock], sharers=[twin_table])
    # a snapshot lock still listed holds; one not in the snapshot holds only if it was acquired before the commit
    assert bool(held) == (in_snapshot or acquired == BEFORE_MS)
    assert locks_missing_from_snapshot(snapshot, [], ALIAS, T0, shared_locks=[], sharers=[twin_table]) == ()


@given(partition=st.sampled_from(["ds=2025-03-15", "ds=other"]))
def test_locks_on_names_of_other_directories_do_not_hold(partition: str) -> None:
    lock = reader(5, "sales.orders", partition)
    assert locks_missing_from_snapshot([], [lock], ALIAS, T0, shared_locks=[lock], sharers=[alias]) == ()
    other_table = reader(6, "sales.customers", None)
    assert locks_missing_from_snapshot([], [], ALIAS, T0, shared_locks=[other_table], sharers=[alias]) == ()


# -- the handler, with the metastore's partitions ---------------------------------------------------


@pytest.fixture
def rig() -> Rig:
    rig = Rig()
    rig.metastore.add_table("sales.orders", "file:/warehouse/sales.db/orders")
    rig.metastore.add_table("sales.orders", "file:" + LOCATION, REAL)
    rig.metastore.add_table("sales.orders", LOCATION, ALIAS)  # the alias: the same directory, spelt without file:
    rig.fs.add_acid_dirs(LOCATION, [D1, D2, D3, NEW])
    return rig


def alias_vacuum() -> object:
    return vacuum(partition=ALIAS, lock_snapshot=[], locks_observed=0)


def test_a_reader_of_the_real_partition_keeps_its_deltas_from_a_vacuum_of_the_alias(rig: Rig) -> None:
    rig.metastore.take_lock(7, "sales.orders", REAL)  # before the commit; the alias's snapshot missed it
    outcome = rig.handle(alias_vacuum())  # type: ignore[arg-type]
    assert outcome.kind == "delayed" and rig.fs.deleted == []
    assert [entry.lock_id for entry in outcome.event.locks_held] == [7]  # type: ignore[union-attr]
    rig.metastore.release(7)
    assert rig.handle(outcome.event).kind == "cleaned"
    assert rig.deleted_names() == [D1, D2, D3]


def test_a_vacuum_event_naming_another_table_of_the_directory_waits_for_its_snapshot_lock(rig: Rig) -> None:
    from events.factories import lock as snapshot_lock

    rig.metastore.add_table("sales.orders_copy", "file:" + LOCATION)
    rig.metastore.take_lock(41, "sales.orders_copy")
    event = vacuum(partition=ALIAS, lock_snapshot=[snapshot_lock(41)], shared_locations=[twin_table])
    outcome = rig.handle(event)
    assert outcome.kind == "delayed" and rig.fs.deleted == []
    rig.metastore.release(41)
    assert rig.handle(outcome.event).kind == "cleaned"


def test_a_reader_of_an_alias_that_locked_after_the_commit_does_not_delay(rig: Rig) -> None:
    rig.metastore.take_lock(8, "sales.orders", REAL, acquired_at=T0 + timedelta(seconds=30))
    assert rig.handle(alias_vacuum()).kind == "cleaned"  # type: ignore[arg-type]


def test_a_metastore_that_cannot_locate_a_locked_partition_fails_closed(rig: Rig) -> None:
    def failing(*args: object) -> dict[str, str]:
        raise MetastoreError("cannot reach the Hive Metastore (get_partitions_by_names)")

    rig.metastore.take_lock(7, "sales.orders", REAL)
    rig.metastore.partitions_located = failing  # type: ignore[method-assign]
    outcome = rig.handle(alias_vacuum())  # type: ignore[arg-type]
    assert outcome.kind == "delayed" and rig.fs.deleted == []
    assert "other names" in (outcome.event.check_error or "")  # type: ignore[union-attr]


def test_a_lock_name_spelled_otherwise_is_located_among_all_partitions(rig: Rig) -> None:
    rig.metastore.take_lock(7, "sales.orders", "DS=2025-03-14")  # not the metastore's spelling
    outcome = rig.handle(alias_vacuum())  # type: ignore[arg-type]
    assert outcome.kind == "delayed" and rig.fs.deleted == []
    assert rig.metastore.calls["get_partitions_by_names"] == 1 and rig.metastore.calls["get_partitions"] == 1


def test_a_locked_partition_the_metastore_does_not_know_is_waited_for(rig: Rig) -> None:
    rig.metastore.take_lock(7, "sales.orders", "ds=gone")
    assert rig.handle(alias_vacuum()).kind == "delayed" and rig.fs.deleted == []  # type: ignore[arg-type]


def test_a_reader_of_a_partition_in_another_directory_costs_one_call_and_does_not_delay(rig: Rig) -> None:
    rig.metastore.add_table("sales.orders", "file:/warehouse/sales.db/orders/ds=2025-03-15", "ds=2025-03-15")
    rig.metastore.take_lock(9, "sales.orders", "ds=2025-03-15")
    assert rig.handle(alias_vacuum()).kind == "cleaned"  # type: ignore[arg-type]
    assert rig.metastore.calls["get_partitions_by_names"] == 1 and rig.metastore.calls["get_partitions"] == 0


def test_no_other_locked_partition_costs_no_metastore_call(rig: Rig) -> None:
    assert rig.handle(alias_vacuum()).kind == "cleaned"  # type: ignore[arg-type]
    assert rig.metastore.calls["get_partitions_by_names"] == 0 and rig.metastore.calls["get_partitions"] == 0
    assert rig.metastore.calls["get_all_tables"] == 0 and rig.metastore.calls["show_locks"] == 1


def test_an_alias_added_after_the_commit_is_seen_when_its_reader_locked_within_the_commit_margin(rig: Rig) -> None:
    # The vacuum of the real partition resolved no alias (there was none). A reader of the alias that
    # locked after the commit listed after the rename and reads the new directory; one within the clock
    # margin may not have, and the cleaner finds its partition's location and waits for it.
    real_vacuum = vacuum(partition=REAL, lock_snapshot=[], locks_observed=0)
    rig.metastore.take_lock(11, "sales.orders", ALIAS, acquired_at=T0 + COMMIT_MARGIN / 2)
    outcome = rig.handle(real_vacuum)
    assert outcome.kind == "delayed" and rig.fs.deleted == []
    rig.metastore.release(11)
    rig.metastore.take_lock(12, "sales.orders", ALIAS, acquired_at=T0 + timedelta(seconds=30))
    assert rig.handle(outcome.event).kind == "cleaned"
