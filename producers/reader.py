"""A reader that behaves as a query engine must for acidclean to be safe: lock first, list second.

It opens a transaction, takes a SHARED_READ lock (operation SELECT) on the table or partition and
waits until the lock is granted; only then does it take its snapshot, list the directory and read
(DESIGN.md section 7, rule 2). So it is either in a vacuum's lock snapshot, or it listed after the
vacuum's rename and reads the new directory. The lock is held, with heartbeats, until the context
ends; committing the transaction releases it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import pyarrow as pa

from acidclean.producers.locks import acquire_lock
from acidclean.shared.acid.id_lists import reader_ids
from acidclean.shared.acid.state import acid_state
from acidclean.shared.acid.write_ids import ValidTxnList
from acidclean.shared.arrow_filesystem import open_location
from acidclean.shared.errors import AcidCleanError, ConfigurationError
from acidclean.shared.metastore import LockRequestComponent, LockType, Metastore, Operation, partition_name
from acidclean.shared.orc.reader import list_table_dir, read_state

HEARTBEAT_INTERVAL_S = 30.0  # well inside Hive's default transaction timeout (300 s)


@dataclass(frozen=True)
class LockedRead:
    """What a reader saw while holding its lock."""

    txn_id: int
    lock_id: int
    location: str
    directories: tuple[str, ...]  # base and deltas read, in read order
    rows: pa.Table


@contextmanager
def locked_read(
    metastore: Metastore,
    db: str,
    table: str,
    partition: str | None = None,
    *,
    columns: Sequence[str] | None = None,
    with_row_id: bool = False,
    lock_timeout_s: float = 300.0,
) -> Iterator[LockedRead]:
    """Lock, then list and read; the lock is held until the ``with`` block ends."""
    partition = partition_name(partition)
    info = metastore.get_table(db, table, partition)
    if info.partition_keys and partition is None:
        raise ConfigurationError(f"{db}.{table} is partitioned by {', '.join(info.partition_keys)}: give --partition")
    txn_id = metastore.open_txn()
    committed = False
    try:
        # The metastore's own (escaped) partition name, as Hive and Trino lock it.
        component = LockRequestComponent(
            db, table, info.partition, lock_type=LockType.SHARED_READ, operation=Operation.SELECT
        )
        lock = acquire_lock(metastore, [component], txn_id, timeout_s=lock_timeout_s)
        # Only now: the snapshot and the listing.
        snapshot = reader_ids(metastore.valid_write_ids(db, table), metastore.kind)
        # A _vT directory (Hive's own compactor output) is read only once T committed.
        txns = ValidTxnList.from_string(metastore.valid_txn_list())
        location = open_location(info.location)
        listing = list_table_dir(location.fs.arrow, location.path)
        state = acid_state(listing, snapshot, txns)
        rows = read_state(
            location.fs.arrow,
            listing,
            state,
            snapshot,
            columns=columns,
            with_row_id=with_row_id,
            row_names=[name for name, _ in info.columns] or None,
        )
        yield LockedRead(txn_id, lock.lock_id, location.uri, state.current_directories, rows)
        metastore.commit_txn(txn_id)
        committed = True
    finally:
        if not committed:
            # If aborting fails too, the transaction times out on its own; the original error matters more.
            with contextlib.suppress(AcidCleanError):
                metastore.abort_txn(txn_id)


def hold(metastore: Metastore, txn_id: int, seconds: float) -> None:
    """Keep the transaction (and so its locks) alive for ``seconds``."""
    deadline = time.monotonic() + seconds
    while (remaining := deadline - time.monotonic()) > 0:
        time.sleep(min(remaining, HEARTBEAT_INTERVAL_S))
        metastore.heartbeat(txn_id=txn_id)
