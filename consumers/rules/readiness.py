"""readyToClean: has every reader that held a lock when the vacuum committed finished?

A vacuum's event carries the locks the metastore listed right after the new directory was committed
(the lock snapshot). Readers lock before they list (docs/design.md section 7, rule 2), so a reader that is
not in the snapshot listed after the rename. It reads the new directory if its snapshot can: a new
delta always (an old snapshot reads it row by row), a new base or ``_vT`` directory only if its
transaction snapshot is newer than what the vacuum compacted. Hive's Driver takes that snapshot when
it compiles and locks afterwards, and a query that only reads never takes it again (docs/safety.md,
"Readers whose snapshot is older than their lock"), so for a base or ``_vT`` output the transactions
open at the commit are waited for too (:func:`older_snapshots_skip_output`). Otherwise a reader that
locked after the vacuum (and after the clock margin) never delays the cleanup. A
snapshot lock counts as held as long as ``show_locks`` lists its id, in any state (ACQUIRED,
WAITING...). Lock ids are global in a metastore and never reused, so matching on the id alone is
exact.

The lock list is asked for at table level, never filtered by partition: the metastore's partition
filter leaves out table-level locks (``hl_partition = ?`` excludes NULL), so a reader holding a
table-level SHARED_READ lock would look released to a partition-filtered check. One table-level call
also serves every pending event of that table and its partitions.

Readers that take no locks at all (Hive 4 with ``hive.txn.read.locks=false`` or lockless reads,
HIVE-26165) leave the snapshot empty. For them the second condition is Hive 4's own Cleaner rule: every
transaction open when the vacuum committed has ended (no open transaction id below the vacuum's
``next_txn_id``). It is on by default (``cleanup_waits_for_open_txns``). Hive's rule makes one long
transaction anywhere delay every cleanup (HIVE-26704); this one is scoped: a transaction that holds a
SHARED_READ lock on any table runs with read locks on, so it locks every table it reads before listing
it, and its locks (in the snapshot, or taken after the commit) already decide. Only transactions
without a read lock (lockless readers, writers that may read lockless) are waited for.

Pure: the caller does the metastore calls; a failed call is :func:`not_checked` (fail closed).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from acidclean.schemas.common import LockSnapshotEntry, SharedLocation
from acidclean.shared.acid.names import parse_directory_name
from acidclean.shared.acid.partition_names import lock_covers_partition
from acidclean.shared.errors import AcidLayoutError
from acidclean.shared.location_sharing import on_shared_location
from acidclean.shared.metastore import LockInfo, split_table_name


@dataclass(frozen=True)
class Readiness:
    """The answer of one readyToClean check."""

    ready: bool
    locks_held: tuple[LockSnapshotEntry, ...]
    check_error: str | None = None
    open_txns: tuple[int, ...] = ()

    def describe_held(self) -> str:
        """``lock 12 (SHARED_READ, txn 7) by alice@host-1; ...`` for logs."""
        held = [entry.describe() for entry in self.locks_held]
        if self.open_txns:
            shown = ", ".join(str(txn) for txn in self.open_txns[:10])
            held.append(f"open transaction(s) {shown} older than the vacuum")
        return "; ".join(held)


def ready_to_clean(
    snapshot: Sequence[LockSnapshotEntry],
    current_locks: Iterable[LockInfo],
    open_before_commit: Sequence[int] = (),
) -> Readiness:
    """Ready when no lock of ``snapshot`` is among ``current_locks`` (the table's show_locks) and no
    transaction that was open when the vacuum committed is still open (``open_before_commit``, see
    :func:`open_transactions_before`)."""
    listed = {lock.lock_id for lock in current_locks}
    held = tuple(entry for entry in snapshot if entry.lock_id in listed)
    waiting = tuple(sorted(open_before_commit))
    return Readiness(ready=not held and not waiting, locks_held=held, open_txns=waiting)


def open_transactions_before(
    next_txn_id: int | None,
    open_txn_ids: Iterable[int],
    all_locks: Iterable[LockInfo] = (),
    *,
    visibility_commit: bool = False,
) -> tuple[int, ...]:
    """The open transactions that began before the vacuum committed (ids below its ``next_txn_id``)
    and hold no SHARED_READ lock anywhere (``all_locks``: an unfiltered show_locks). An event without
    ``next_txn_id`` (from an older vacuum) has only its lock snapshot to go by.

    ``visibility_commit`` waits for every one of them, read locks or not, as Hive 4's Cleaner does; pass
    :func:`older_snapshots_skip_output` of the vacuum's new directories. A reader that took its
    transaction snapshot before the vacuum's output became usable to it (T committed for ``_vT``; every
    write id up to N committed for a renamed ``base_N``) skips that output and reads the old
    directories, even when it locks this table only after the lock snapshot: Hive's Driver does exactly
    that for every query that only reads. Only a renamed delta is read by whoever lists after the
    rename, whatever its snapshot; there the locks alone decide."""
    if next_txn_id is None:
        return ()
    locking_readers = (
        set()
        if visibility_commit
        else {lock.txn_id for lock in all_locks if lock.lock_type == "SHARED_READ" and lock.txn_id}
    )
    return tuple(sorted(txn for txn in open_txn_ids if txn < next_txn_id and txn not in locking_readers))


def older_snapshots_skip_output(new_directories: Iterable[str]) -> bool:
    """True when a reader whose transaction snapshot predates the vacuum can list after the commit and
    still not read its output, so the cleanup must wait for every transaction open at the commit
    (:func:`open_transactions_before` with ``visibility_commit``), read locks or not.

    That is a ``_vT`` directory (T is not committed in such a snapshot) and a base: ``base_N`` is valid
    only for a snapshot in which every write id up to N is resolved (Hive's ``isValidBase``), and a
    snapshot taken before the last of them committed skips it and reads the deltas the base replaced.
    A delta is read by any snapshot that lists it, row by row (a range is valid for SOME ids), so a
    renamed minor vacuum needs no such wait. A name that does not parse counts, so in doubt it waits."""
    for name in new_directories:
        try:
            parsed = parse_directory_name(name)
        except AcidLayoutError:
            return True
        if parsed is None or parsed.is_base or parsed.visibility_txn_id:
            return True
    return False


def committed_through_transaction(new_directories: Iterable[str]) -> bool:
    """True when a vacuum's new directories carry a ``_vT`` suffix: it committed transaction T instead of
    renaming (see :mod:`acidclean.producers.commit_mode`)."""
    for name in new_directories:
        try:
            parsed = parse_directory_name(name)
        except AcidLayoutError:
            continue
        if parsed is not None and parsed.visibility_txn_id:
            return True
    return False


# Clock skew between the vacuum's host (the event's time, the marker's) and the metastore's database
# (a lock's acquired time), plus the rename itself: NTP keeps hosts within milliseconds, a rename takes
# less than a second. A reader that locks within this margin after the commit is waited for too, which
# costs at most that one reader's run of delay.
COMMIT_MARGIN = timedelta(seconds=2)


def locks_missing_from_snapshot(
    snapshot: Sequence[LockSnapshotEntry],
    current_locks: Iterable[LockInfo],
    partition: str | None,
    committed_by: datetime,
    *,
    shared_locks: Iterable[LockInfo] = (),
    sharers: Sequence[SharedLocation] = (),
) -> tuple[LockInfo, ...]:
    """Locks on the table (or on ``partition``) acquired by ``committed_by`` and still held, that the
    snapshot does not list. Any such reader may have listed before the commit: a snapshot that misses
    it is incomplete (a lost or forged event, a partition name spelled another way), and the cleanup
    waits for it too. Waiting locks have not listed yet; they do not count.

    Locks are about directories, not names (rule 8): ``sharers`` are the other tables and partitions
    whose location overlaps the vacuum's directory, ``shared_locks`` the locks of their tables. A lock on
    one of them counts the same way, and so does a snapshot lock on one of them still listed: the
    readiness check lists only the vacuum's own table, so it would find such a lock released."""
    listed = {entry.lock_id for entry in snapshot}
    limit_ms = committed_by.timestamp() * 1000

    def acquired_before_commit(lock: LockInfo) -> bool:
        return lock.lock_id not in listed and lock.acquired_at_ms is not None and lock.acquired_at_ms <= limit_ms

    found = {
        lock.lock_id: lock
        for lock in current_locks
        if acquired_before_commit(lock) and lock_covers_partition(lock.partition, partition)
    }
    for lock in shared_locks:
        held = lock.lock_id in listed or acquired_before_commit(lock)
        if held and lock.lock_id not in found and on_shared_location(lock, sharers):
            found[lock.lock_id] = lock
    return tuple(found.values())


def lock_names_to_locate(
    snapshot: Sequence[LockSnapshotEntry],
    current_locks: Iterable[LockInfo],
    partition: str | None,
    committed_by: datetime,
    sharers: Sequence[SharedLocation] = (),
) -> tuple[str, ...]:
    """The other partitions of the vacuum's table (in ``current_locks``, its lock list) whose location
    rule 8 needs at clean time: each holds a lock acquired by ``committed_by`` that the snapshot does not
    list, and is neither the vacuum's partition (in any spelling) nor one of the ``sharers`` already
    known. Only such a lock could be a reader of the directory that the snapshot missed, so the cleaner
    asks the metastore where these partitions are, and nothing when there are none. Sorted, once each."""
    listed = {entry.lock_id for entry in snapshot}
    limit_ms = committed_by.timestamp() * 1000
    return tuple(
        sorted(
            {
                lock.partition
                for lock in current_locks
                if lock.partition is not None
                and partition is not None
                and lock.lock_id not in listed
                and lock.acquired_at_ms is not None
                and lock.acquired_at_ms <= limit_ms
                and not lock_covers_partition(lock.partition, partition)
                and not on_shared_location(lock, sharers)
            }
        )
    )


def table_locks(all_locks: Iterable[LockInfo], table: str) -> list[LockInfo]:
    """The locks of one table (and its partitions) in an unfiltered show_locks, matched without case."""
    db, name = lock_scope(table)
    return [lock for lock in all_locks if lock.db.lower() == db and (lock.table or "").lower() == name]


def not_checked(
    snapshot: Sequence[LockSnapshotEntry], last_known_held: Sequence[LockSnapshotEntry] | None, error: str
) -> Readiness:
    """The metastore could not be asked: not ready (fail closed), locks as last known."""
    held = tuple(last_known_held) if last_known_held is not None else tuple(snapshot)
    return Readiness(ready=False, locks_held=held, check_error=error)  # cut to fit where an event carries it


def lock_scope(table: str) -> tuple[str, str]:
    """The (database, table) whose locks a check lists, lower case as the metastore stores them."""
    return split_table_name(table)
