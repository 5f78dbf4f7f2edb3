"""The ingest writer: what a streaming-ingest platform does to a Hive ACID table.

Each commit is one transaction: open it, get its write id (the transaction id on Hive 2), take a
SHARED_WRITE lock, write ``delta_W_W_0000/bucket_NNNNN`` for the new rows (and
``delete_delta_W_W_0000`` for rows it deletes), commit, then publish ``DeltaCommitted``. Rows go to
the bucket Hive would pick from the bucket column; deleted rows are picked at random among those
the transaction sees, and each delete event goes to the bucket file of the row it deletes. A failed
commit aborts its transaction, so readers never see its directories.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from acidclean.producers.acid_files import (
    orc_codec,
    sort_by_identity,
    write_acid_events,
)
from acidclean.producers.hive_types import arrow_type, bucket_ids, generate_rows
from acidclean.producers.locks import acquire_lock
from acidclean.schemas.common import utc_now
from acidclean.schemas.events import DeltaCommitted
from acidclean.shared.acid.events import BUCKET, decode_bucket_property
from acidclean.shared.acid.id_lists import reader_ids
from acidclean.shared.acid.names import bucket_file_name, delta_name
from acidclean.shared.acid.write_ids import ValidTxnList
from acidclean.shared.bus.protocol import EventBus
from acidclean.shared.errors import AcidCleanError, ConfigurationError, TableNotFoundError
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.metastore import LockRequestComponent, LockType, Metastore, Operation, TableInfo, partition_name
from acidclean.shared.orc.reader import read_snapshot
from acidclean.shared.orc.writer import delete_events, insert_events, write_acid_version_file
from acidclean.shared.storage import StorageLocation, open_location

STATEMENT_ID = 0


def create_table(
    metastore: HiveMetastore,
    db: str,
    table: str,
    columns: Sequence[tuple[str, str]],
    *,
    buckets: int = 1,
    partitioned_by: Sequence[tuple[str, str]] = (),
    orc_compress: str = "ZLIB",
) -> TableInfo:
    """Create a bucketed, transactional ORC table (and its database if need be)."""
    if buckets < 1:
        raise ConfigurationError(f"--buckets must be at least 1, not {buckets}")
    orc_codec(orc_compress)
    metastore.create_database(db)
    return metastore.create_transactional_table(
        db, table, list(columns), buckets=buckets, partition_keys=list(partitioned_by), orc_compress=orc_compress
    )


@dataclass(frozen=True)
class CommitResult:
    """One committed transaction: its ids, what it wrote and where."""

    txn_id: int
    write_id: int
    delta: str | None
    delete_delta: str | None
    rows: int
    deletes: int
    bytes: int
    location: str
    published: bool = False
    publish_error: str | None = None


@dataclass(frozen=True)
class IngestRequest:
    db: str
    table: str
    rows: int  # per commit
    commits: int = 1
    delete_fraction: float = 0.0
    partition: str | None = None
    seed: int = 0


def _write_bucketed(
    location: StorageLocation, directory: str, events: pa.Table, bucket_of_event: np.ndarray, codec: str
) -> int:
    fs = location.fs.arrow
    path = location.child(directory)
    fs.create_dir(path, recursive=True)
    written = 0
    for bucket in np.unique(bucket_of_event):
        chosen = events.filter(pa.array(bucket_of_event == bucket))
        written += write_acid_events(fs, f"{path}/{bucket_file_name(int(bucket))}", sort_by_identity(chosen), codec)
    write_acid_version_file(fs, path)
    return written


def _insert_delta(
    location: StorageLocation, info: TableInfo, rows: pa.Table, write_id: int, codec: str
) -> tuple[str, int]:
    key = rows.column(info.bucket_columns[0] if info.bucket_columns else 0).combine_chunks()
    buckets = bucket_ids(key, max(info.bucket_count, 1))
    parts = []
    for bucket in np.unique(buckets):
        chosen = rows.filter(pa.array(buckets == bucket))
        parts.append(insert_events(chosen, write_id, bucket_id=int(bucket), statement_id=STATEMENT_ID))
    events = pa.concat_tables(parts)
    event_buckets = np.concatenate([np.full(p.num_rows, b) for p, b in zip(parts, np.unique(buckets), strict=True)])
    name = delta_name(write_id, write_id, STATEMENT_ID)
    return name, _write_bucketed(location, name, events, event_buckets, codec)


def _delete_delta(
    location: StorageLocation, identities: pa.Table, write_id: int, row_type: pa.StructType, codec: str
) -> tuple[str, int]:
    identities = identities.set_column(
        identities.schema.get_field_index("currentTransaction"),
        "currentTransaction",
        pa.array(np.full(identities.num_rows, write_id, dtype=np.int64)),
    )
    events = delete_events(identities, None, row_type)
    buckets = np.array([decode_bucket_property(v).bucket_id for v in events.column(BUCKET).to_pylist()])
    name = delta_name(write_id, write_id, STATEMENT_ID, delete=True)
    return name, _write_bucketed(location, name, events, buckets, codec)


def _rows_to_delete(
    metastore: Metastore, info: TableInfo, location: StorageLocation, fraction: float, seed: int
) -> pa.Table:
    """Identities of a random ``fraction`` of the rows this transaction sees (it locked first)."""
    snapshot = reader_ids(metastore.valid_write_ids(info.db, info.table), metastore.kind)
    txns = ValidTxnList.from_string(metastore.valid_txn_list())
    visible = read_snapshot(location.fs.arrow, location.path, snapshot, columns=[], with_row_id=True, valid_txns=txns)
    count = round(visible.num_rows * fraction)
    if count == 0:
        return visible.slice(0, 0)
    chosen = np.random.default_rng(seed).choice(visible.num_rows, size=count, replace=False)
    return visible.take(pa.array(np.sort(chosen)))


def _row_type(info: TableInfo) -> pa.StructType:
    return pa.struct([pa.field(name, arrow_type(hive_type)) for name, hive_type in info.columns])


def commit_once(metastore: Metastore, info: TableInfo, request: IngestRequest) -> CommitResult:
    """One transaction of the ingest writer (see the module docstring)."""
    location = open_location(info.location)
    codec = orc_codec(info.orc_compress)
    txn_id = metastore.open_txn()
    try:
        write_id = metastore.allocate_write_id(txn_id, info.db, info.table)
        operation = Operation.UPDATE if request.delete_fraction > 0 else Operation.INSERT
        component = LockRequestComponent(
            info.db, info.table, info.partition, lock_type=LockType.SHARED_WRITE, operation=operation
        )
        acquire_lock(metastore, [component], txn_id)
        deleted = pa.table({})
        if request.delete_fraction > 0:
            deleted = _rows_to_delete(metastore, info, location, request.delete_fraction, request.seed + write_id)
        delta = delete_delta = None
        written = 0
        if request.rows > 0:
            rows = generate_rows(
                list(info.columns), request.rows, first_id=write_id * request.rows, seed=request.seed + write_id
            )
            delta, size = _insert_delta(location, info, rows, write_id, codec)
            written += size
        if deleted.num_rows:
            delete_delta, size = _delete_delta(location, deleted, write_id, _row_type(info), codec)
            written += size
        metastore.commit_txn(txn_id)
    except BaseException:
        # If aborting fails too, the metastore times the transaction out; the original error matters more.
        with contextlib.suppress(AcidCleanError):
            metastore.abort_txn(txn_id)
        raise
    return CommitResult(txn_id, write_id, delta, delete_delta, request.rows, deleted.num_rows, written, location.uri)


def _events(result: CommitResult, info: TableInfo, tenant: str) -> list[DeltaCommitted]:
    return [
        DeltaCommitted(
            tenant=tenant,
            table=f"{info.db}.{info.table}",
            partition=info.partition,
            occurred_at=utc_now(),
            location=result.location,
            delta_directory=directory,
            write_id=result.write_id,
            bytes=result.bytes,
        )
        for directory in (result.delta, result.delete_delta)
        if directory
    ]


def ingest(
    metastore: HiveMetastore,
    request: IngestRequest,
    *,
    bus: EventBus | None = None,
    topic: str = "acid.delta.committed",
    tenant: str = "default",
    on_commit: Callable[[CommitResult], None] | None = None,
) -> list[CommitResult]:
    """Commit ``request.commits`` transactions; publish ``DeltaCommitted`` for each when ``bus`` is
    given (a publish failure is reported in the result, the data stays committed)."""
    partition = partition_name(request.partition)
    try:
        table = metastore.get_table(request.db, request.table)
    except TableNotFoundError as error:
        raise ConfigurationError(f"table {request.db}.{request.table} does not exist: create it first") from error
    if not table.transactional:
        raise ConfigurationError(f"{request.db}.{request.table} is not transactional: the ingest writer needs ACID")
    if bool(table.partition_keys) != (partition is not None):
        raise ConfigurationError(
            f"{request.db}.{request.table} is "
            + (
                f"partitioned by {', '.join(table.partition_keys)}: give --partition"
                if table.partition_keys
                else "not partitioned: leave out --partition"
            )
        )
    if partition is not None:
        metastore.add_partition(request.db, request.table, partition)
    info = metastore.get_table(request.db, request.table, partition)
    results = []
    for _ in range(request.commits):
        result = commit_once(metastore, info, request)
        if bus is not None:
            try:
                bus.publish_many([(topic, event) for event in _events(result, info, tenant)])
                result = replace(result, published=True)
            except AcidCleanError as error:
                result = replace(result, publish_error=str(error))
        results.append(result)
        if on_commit is not None:
            on_commit(result)
    return results
