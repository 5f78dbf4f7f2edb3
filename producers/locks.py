"""Metastore locks as the producers use them: wait for a requested lock, snapshot the held ones.

The vacuum snapshots the locks on the table or partition right after its rename (docs/design.md section
7, rule 2): every reader that may still use the old directories holds one of them, because readers
lock before they list. For a partition, table-level locks count too: a reader of the whole table
may be reading this partition. Partition names are compared as Hive names partitions, not as
strings: Hive and Trino lock ``city=St. John%27s%232`` (Hive 3 stores it lower-cased) for the
partition an operator types as ``city=St. John's#2``, and a lock whose name cannot be read is kept.
Locks are about directories, not names (rule 8): the locks on every other table or partition whose
location shares the directory (``sharers``, :mod:`acidclean.shared.location_sharing`) count too.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from acidclean.schemas.common import LockSnapshotEntry, SharedLocation
from acidclean.shared.acid.partition_names import lock_covers_partition
from acidclean.shared.errors import MetastoreError
from acidclean.shared.location_sharing import on_shared_location, sharer_tables
from acidclean.shared.lock_entries import snapshot_entry
from acidclean.shared.metastore import LockRequestComponent, LockResult, Metastore


def lock_snapshot(
    metastore: Metastore, db: str, table: str, partition: str | None, sharers: Sequence[SharedLocation] = ()
) -> list[LockSnapshotEntry]:
    """The locks held or requested on the table (for a partition: on it, in any spelling, or on the
    whole table) and on every one of ``sharers``, one entry per lock id. One ``show_locks`` per table."""
    entries: dict[int, LockSnapshotEntry] = {}
    own = (db.lower(), table.lower())
    for scope in [own, *(pair for pair in sharer_tables(sharers) if pair != own)]:
        for lock in metastore.show_locks(*scope):
            if (lock.table or "").lower() != scope[1] or lock.db.lower() != scope[0]:
                continue  # matched case-insensitively (HIVE-23044 missed readers by case)
            if (scope == own and lock_covers_partition(lock.partition, partition)) or on_shared_location(lock, sharers):
                entries.setdefault(lock.lock_id, snapshot_entry(lock))
    return [entries[lock_id] for lock_id in sorted(entries)]


def acquire_lock(
    metastore: Metastore,
    components: list[LockRequestComponent],
    txn_id: int,
    *,
    timeout_s: float = 300.0,
    poll_s: float = 0.2,
) -> LockResult:
    """Request locks inside ``txn_id`` and wait until they are acquired, heartbeating the
    transaction meanwhile; raises :class:`MetastoreError` if they are not granted in time."""
    result = metastore.lock(components, txn_id)
    deadline = time.monotonic() + timeout_s
    while not result.acquired:
        if result.state not in ("WAITING",):
            raise MetastoreError(f"lock {result.lock_id} was not granted: state {result.state}")
        if time.monotonic() > deadline:
            raise MetastoreError(
                f"lock {result.lock_id} still waiting after {timeout_s:g} s: another transaction holds a "
                "conflicting lock (see `show_locks`)"
            )
        time.sleep(poll_s)
        metastore.heartbeat(txn_id=txn_id)
        result = metastore.check_lock(result.lock_id)
    return result
