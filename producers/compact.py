"""One bucket of a compaction: the unit of work of a vacuum's Spark task.

A task reads the bucket's files of the planned state with the shared ACID reader (pyarrow, inside
the executor: Spark's own ORC reader fails on the ACID event schema), rebuilds the events and writes
the bucket's file of each new directory under the vacuum's staging directory. MAJOR writes the rows
the compactor's snapshot sees, deletes applied, as ``base_N/bucket_B``; MINOR writes the visible
insert events as ``delta_M_N/bucket_B`` and the visible delete events as
``delete_delta_M_N/bucket_B``, without applying them (a base below may hold the deleted rows).
Identities (originalTransaction, bucket, rowId) and the writing transaction are kept as they are.
Rows of aborted transactions are dropped. Nothing here knows about Spark.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.orc as pa_orc

from acidclean.producers.acid_files import (
    insert_events_from_rows,
    sort_by_identity,
    write_acid_events,
)
from acidclean.producers.plan import CompactionPlan, CompactionType
from acidclean.shared.acid.events import ROW
from acidclean.shared.acid.names import DirectoryKind, bucket_file_name
from acidclean.shared.acid.state import AcidState, Listing
from acidclean.shared.acid.write_ids import ValidIdList
from acidclean.shared.errors import UnreadableFileError
from acidclean.shared.orc.reader import read_delete_events, read_state, snapshot_files
from acidclean.shared.orc.writer import delete_events
from acidclean.shared.storage import open_location, storage_environment


@dataclass(frozen=True)
class BucketTask:
    """Everything one task needs; pickled to the executor."""

    location_uri: str
    staging_dir: str
    bucket: int
    compaction_type: CompactionType
    listing: Listing
    state: AcidState
    valid_ids: ValidIdList
    insert_target: str
    delete_target: str | None
    row_type: pa.StructType | None  # the inputs' row struct; only a MINOR task writing delete events uses it
    codec: str
    storage_environment: tuple[tuple[str, str], ...] = ()  # the driver's storage client settings
    input_bytes: int | None = None  # the bucket's input files' bytes, known to the driver from the listing


@dataclass(frozen=True)
class WrittenFile:
    directory: str
    name: str
    events: int
    bytes: int


@dataclass(frozen=True)
class BucketResult:
    bucket: int
    files: tuple[WrittenFile, ...]
    rows_written: int
    deletes_written: int
    bytes_read: int
    seconds: float


def bucket_tasks(
    plan: CompactionPlan, *, location_uri: str, staging_dir: str, row_type: pa.StructType | None, codec: str
) -> list[BucketTask]:
    """One task per bucket of the plan, the buckets with the most input bytes first: Spark starts
    tasks in this order, so a big bucket does not start last and keep the other cores waiting."""
    sizes = {f.path: f.size for f in plan.listing.files}
    input_bytes: dict[int, int] = {}
    for data_file in snapshot_files(plan.listing, plan.state):
        if data_file.bucket_id is not None:
            input_bytes[data_file.bucket_id] = input_bytes.get(data_file.bucket_id, 0) + sizes.get(
                data_file.relative_path, 0
            )
    buckets = sorted(plan.buckets, key=lambda b: (-input_bytes.get(b, 0), b))
    return [
        BucketTask(
            location_uri=location_uri,
            staging_dir=staging_dir,
            bucket=bucket,
            compaction_type=plan.compaction_type,
            listing=plan.listing,
            state=plan.state,
            valid_ids=plan.valid_ids,
            insert_target=plan.insert_target,
            delete_target=plan.delete_target,
            row_type=row_type,
            codec=codec,
            storage_environment=tuple(sorted(storage_environment().items())),
            input_bytes=input_bytes.get(bucket, 0),
        )
        for bucket in buckets
    ]


def needs_row_type(plan: CompactionPlan) -> bool:
    """Whether the tasks need :func:`input_row_type`: only a MINOR plan carrying delete deltas writes
    delete events, whose ``row`` column has the inputs' type. Everything else is not worth a read of
    a file footer on the driver before the tasks can start."""
    return plan.compaction_type is CompactionType.MINOR and plan.delete_target is not None


def input_row_type(fs: pafs.FileSystem, plan: CompactionPlan) -> pa.StructType:
    """The ``row`` struct of the inputs, read from one file footer on the driver (delete events of a
    bucket without insert rows still carry it, as Hive writes them)."""
    files = snapshot_files(plan.listing, plan.state)
    files.sort(key=lambda f: f.kind == DirectoryKind.DELETE_DELTA.value)
    try:
        with fs.open_input_file(files[0].path) as source:
            schema = pa_orc.ORCFile(source).schema
    except (OSError, pa.ArrowException) as error:
        raise UnreadableFileError(f"cannot read ORC file {files[0].path}: {error}") from error
    row = {f.name.lower(): f for f in schema}.get(ROW.lower())
    if row is not None and pa.types.is_struct(row.type):
        return row.type
    return pa.struct(list(schema))  # original (pre-ACID) files: the file's columns are the row


def _input_bytes(listing: Listing, state: AcidState, bucket: int) -> int:
    sizes = {f.path: f.size for f in listing.files}
    return sum(sizes.get(f.relative_path, 0) for f in snapshot_files(listing, state, bucket))


def _write(fs: pafs.FileSystem, task: BucketTask, directory: str, events: pa.Table) -> WrittenFile:
    name = bucket_file_name(task.bucket)
    size = write_acid_events(fs, f"{task.staging_dir}/{directory}/{name}", events, task.codec)
    return WrittenFile(directory, name, events.num_rows, size)


def compact_bucket(task: BucketTask) -> BucketResult:
    """Compact one bucket into the staging directory; returns what was written."""
    started = time.monotonic()
    fs = open_location(task.location_uri, dict(task.storage_environment) or None).fs.arrow
    listing, state, bucket = task.listing, task.state, task.bucket
    bytes_read = task.input_bytes if task.input_bytes is not None else _input_bytes(listing, state, bucket)
    written: list[WrittenFile] = []
    deletes_written = 0
    if task.compaction_type is CompactionType.MAJOR:
        rows = read_state(fs, listing, state, task.valid_ids, with_row_id=True, bucket=bucket)
    else:
        inserts_only = replace(state, base=None, original_files=(), deltas=state.insert_deltas)
        rows = read_state(fs, listing, inserts_only, task.valid_ids, with_row_id=True, bucket=bucket)
        identities = read_delete_events(fs, listing, state, task.valid_ids, bucket=bucket)
        if identities.num_rows and task.delete_target is not None:
            if task.row_type is None:
                raise ValueError("a MINOR task that writes delete events needs the inputs' row_type")
            deletes = sort_by_identity(delete_events(identities, None, task.row_type))
            written.append(_write(fs, task, task.delete_target, deletes))
            deletes_written = deletes.num_rows
    if rows.num_rows:
        written.append(_write(fs, task, task.insert_target, sort_by_identity(insert_events_from_rows(rows))))
    return BucketResult(
        bucket=bucket,
        files=tuple(written),
        rows_written=rows.num_rows,
        deletes_written=deletes_written,
        bytes_read=bytes_read,
        seconds=time.monotonic() - started,
    )
