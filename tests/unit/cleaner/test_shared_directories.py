"""Rule 8 in the cleaner: a vacuum of one name of a directory waits for readers of its other names."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acidclean.consumers.rules.readiness import locks_missing_from_snapshot
from acidclean.schemas.common import SharedLocation
from acidclean.shared.acid.names import delta_name
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


def test_a_metastore_that_cannot_list_the_directorys_names_fails_closed(rig: Rig) -> None:
    def failing(db: str) -> list[str]:
        from acidclean.shared.errors import MetastoreError

        raise MetastoreError("cannot reach the Hive Metastore (get_all_tables)")

    rig.metastore.get_all_tables = failing  # type: ignore[method-assign]
    outcome = rig.handle(alias_vacuum())  # type: ignore[arg-type]
    assert outcome.kind == "delayed" and rig.fs.deleted == []
    assert "other names" in (outcome.event.check_error or "")  # type: ignore[union-attr]


def test_cleanup_costs_three_more_metastore_calls_for_a_partition(rig: Rig) -> None:
    before = dict(rig.metastore.calls)
    assert rig.handle(alias_vacuum()).kind == "cleaned"  # type: ignore[arg-type]
    extra = {
        name: rig.metastore.calls[name] - before.get(name, 0)
        for name in ("get_all_tables", "get_tables", "get_partitions")
    }
    assert extra == {"get_all_tables": 1, "get_tables": 1, "get_partitions": 1}
