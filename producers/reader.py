"""A reader that behaves as a query engine must for acidclean to be safe: lock first, list second.

It opens a transaction, takes a SHARED_READ lock (operation SELECT) on the table or partition and
waits until the lock is granted; only then does it take its snapshot, list the directory and read
(docs/design.md section 7, rule 2). So it is either in a vacuum's lock snapshot, or it listed after the
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
from acidclean.shared.acid.partition_names import parse_partition_name
from acidclean.shared.acid.state import acid_state
from acidclean.shared.acid.write_ids import ValidIdList, ValidTxnList
from acidclean.shared.errors import AcidCleanError, TableNotFoundError
from acidclean.shared.metastore import (
    LockRequestComponent,
    LockType,
    Metastore,
    Operation,
    TableInfo,
    partition_name,
)
from acidclean.shared.orc.reader import list_table_dir, read_state
from acidclean.shared.storage import open_location

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
    """Lock, then list and read; the lock is held until the ``with`` block ends.

    A partitioned table without ``partition`` is read whole, as a query over every partition: one
    lock request for the table and each of its partitions (as Hive locks a full scan), then each
    partition listed and read. ``directories`` then name each directory under its partition
    (``ds=1/delta_0000001_0000002``) and ``location`` is the table's."""
    partition = partition_name(partition)
    info = metastore.get_table(db, table, partition)
    whole = bool(info.partition_keys) and partition is None
    # A partitioned table without partitions is read as its own directory: no rows, in its columns.
    parts = (_partitions(metastore, info) if whole else []) or [info]
    by_partition = parts[0] is not info  # the table read whole, partition by partition
    txn_id = metastore.open_txn()
    committed = False
    try:
        # The metastore's own (escaped) partition names, as Hive and Trino lock them.
        components = [
            LockRequestComponent(db, table, name, lock_type=LockType.SHARED_READ, operation=Operation.SELECT)
            for name in dict.fromkeys([info.partition] + [part.partition for part in parts])
        ]
        lock = acquire_lock(metastore, components, txn_id, timeout_s=lock_timeout_s)
        # Only now: the snapshot and the listings.
        snapshot = reader_ids(metastore.valid_write_ids(db, table), metastore.kind)
        # A _vT directory (Hive's own compactor output) is read only once T committed.
        txns = ValidTxnList.from_string(metastore.valid_txn_list())
        read = [_read_directory(part, snapshot, txns, columns, with_row_id) for part in parts]
        directories = tuple(
            f"{part.partition}/{name}" if by_partition else name
            for part, (names, _) in zip(parts, read, strict=True)
            for name in names
        )
        if by_partition and columns is None:  # as SELECT *: the partition columns last
            read = [
                (names, _with_partition_columns(rows, part)) for part, (names, rows) in zip(parts, read, strict=True)
            ]
        rows = pa.concat_tables([rows for _, rows in read])
        yield LockedRead(txn_id, lock.lock_id, open_location(info.location).uri, directories, rows)
        metastore.commit_txn(txn_id)
        committed = True
    finally:
        if not committed:
            # If aborting fails too, the transaction times out on its own; the original error matters more.
            with contextlib.suppress(AcidCleanError):
                metastore.abort_txn(txn_id)


def _partitions(metastore: Metastore, table: TableInfo) -> list[TableInfo]:
    """Every partition of the table now, in name order (one dropped meanwhile is not read)."""
    parts = []
    for name in sorted(metastore.list_partitions(table.db, table.table)):
        try:
            parts.append(metastore.partition_info(table, name))
        except TableNotFoundError:
            continue  # dropped since it was listed: a query planned now would not read it either
    return parts


def _with_partition_columns(rows: pa.Table, part: TableInfo) -> pa.Table:
    for key, value in parse_partition_name(part.partition or ""):
        rows = rows.append_column(key, pa.array([value] * rows.num_rows, pa.string()))
    return rows


def _read_directory(
    info: TableInfo,
    snapshot: ValidIdList,
    txns: ValidTxnList,
    columns: Sequence[str] | None,
    with_row_id: bool,
) -> tuple[tuple[str, ...], pa.Table]:
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
    return state.current_directories, rows


def hold(metastore: Metastore, txn_id: int, seconds: float) -> None:
    """Keep the transaction (and so its locks) alive for ``seconds``."""
    deadline = time.monotonic() + seconds
    while (remaining := deadline - time.monotonic()) > 0:
        time.sleep(min(remaining, HEARTBEAT_INTERVAL_S))
        metastore.heartbeat(txn_id=txn_id)
