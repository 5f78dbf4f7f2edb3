"""The vacuum's lock snapshot (and the cleaner's check for locks missing from it) compare partition
names as Hive names partitions: a reader that locked the escaped name, lower-cased by Hive 3, is in
the snapshot of the partition the operator typed unescaped; a lock whose name cannot be read is too."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from acidclean.consumers.rules.readiness import locks_missing_from_snapshot
from acidclean.producers.locks import lock_snapshot
from acidclean.shared.metastore import LockInfo

ACQUIRED_MS = 1_700_000_000_000


def lock(lock_id: int, partition: str | None, table: str = "t") -> LockInfo:
    return LockInfo(lock_id, lock_id, "db", table, partition, "SHARED_READ", "ACQUIRED", "u", "h", ACQUIRED_MS, None)


class Locks:
    """``show_locks`` of a metastore holding ``locks``."""

    def __init__(self, *locks: LockInfo) -> None:
        self.locks = list(locks)

    def show_locks(
        self, db: str | None = None, table: str | None = None, partition: str | None = None
    ) -> list[LockInfo]:
        return [held for held in self.locks if held.table == table]


HIVE2_LOCK = lock(1, "city=St. John%27s%232/at=10%3A30")  # Hive's own name
HIVE3_LOCK = lock(2, "city=st. john%27s%232/at=10%3a30")  # Hive 3 stores it lower-cased
TABLE_LOCK = lock(3, None)
UNREADABLE = lock(4, "garbled")
OTHER_PARTITION = lock(5, "city=st. john%27s%233/at=10%3a30")
OTHER_TABLE = lock(6, "city=St. John%27s%232/at=10%3A30", table="u")
ALL = (HIVE2_LOCK, HIVE3_LOCK, TABLE_LOCK, UNREADABLE, OTHER_PARTITION, OTHER_TABLE)


@pytest.mark.parametrize(
    "typed",
    [
        "city=St. John's#2/at=10:30",
        "city=St. John%27s%232/at=10%3A30",
        "CITY=St. John's#2/AT=10:30",
        "city=St. John%27s%232/at=10:30",
    ],
)
def test_the_snapshot_holds_every_lock_on_the_partition_however_it_is_spelled(typed: str) -> None:
    snapshot = lock_snapshot(Locks(*ALL), "db", "t", typed)  # type: ignore[arg-type]
    assert [entry.lock_id for entry in snapshot] == [1, 2, 3, 4]


def test_a_table_snapshot_holds_every_lock_of_the_table() -> None:
    assert [entry.lock_id for entry in lock_snapshot(Locks(*ALL), "db", "t", None)] == [1, 2, 3, 4, 5]  # type: ignore[arg-type]


def test_the_cleaner_waits_for_a_hive_reader_missing_from_the_snapshot_in_any_spelling() -> None:
    committed = datetime.fromtimestamp(ACQUIRED_MS / 1000 + 1, tz=timezone.utc)
    missing = locks_missing_from_snapshot([], list(ALL), "city=St. John%27s%232/at=10%3A30", committed)
    assert [held.lock_id for held in missing] == [1, 2, 3, 4, 6]  # 6: the caller passes one table's locks
