"""How a vacuum spreads its work: the order of its bucket tasks, what the driver reads before they
start, and listing and opening files on several threads where storage is remote.

Remote storage is stood in for by a ``SubTreeFileSystem`` over the local disk: not a
``LocalFileSystem``, so the threaded paths run, over real files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from acidclean.producers.acid_files import write_acid_events
from acidclean.producers.compact import bucket_tasks, compact_bucket, needs_row_type
from acidclean.producers.plan import CompactionType, plan_compaction
from acidclean.shared.acid.id_lists import MetastoreKind
from acidclean.shared.acid.names import delta_name
from acidclean.shared.acid.state import acid_state
from acidclean.shared.acid.write_ids import ValidWriteIdList
from acidclean.shared.orc.reader import list_table_dir, read_delete_events, read_state
from acidclean.shared.orc.writer import delete_events, insert_events, write_acid_version_file

LOCAL = pafs.LocalFileSystem()
ROW_TYPE = pa.struct([("id", pa.int64()), ("v", pa.string())])
ALL_COMMITTED = "db.t:{hwm}:9223372036854775807::"


def _write_table(root: Path, rows_per_bucket: dict[int, int], deltas: int) -> None:
    """``deltas`` single-transaction deltas; bucket b gets ``rows_per_bucket[b]`` rows in each."""
    value = 0
    for write_id in range(1, deltas + 1):
        directory = f"{root}/{delta_name(write_id, write_id, 0)}"
        for bucket, count in rows_per_bucket.items():
            ids = np.arange(value, value + count, dtype=np.int64)
            value += count
            rows = pa.table({"id": ids, "v": [f"v{i}" for i in ids]})
            write_acid_events(
                LOCAL, f"{directory}/bucket_{bucket:05d}", insert_events(rows, write_id, bucket_id=bucket)
            )
        write_acid_version_file(LOCAL, directory)


def _delete_first_row(root: Path, write_id: int, bucket: int) -> None:
    directory = f"{root}/{delta_name(write_id, write_id, 0, delete=True)}"
    snapshot = ValidWriteIdList.from_string(ALL_COMMITTED.format(hwm=write_id - 1))
    listing = list_table_dir(LOCAL, str(root))
    visible = read_state(LOCAL, listing, acid_state(listing, snapshot), snapshot, with_row_id=True, bucket=bucket)
    chosen = visible.slice(0, 1).select(["originalTransaction", "bucket", "rowId", "currentTransaction"])
    chosen = chosen.set_column(3, "currentTransaction", pa.array([write_id], pa.int64()))
    write_acid_events(LOCAL, f"{directory}/bucket_{bucket:05d}", delete_events(chosen, None, ROW_TYPE))
    write_acid_version_file(LOCAL, directory)


def test_bucket_tasks_start_with_the_bucket_that_has_the_most_input(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _write_table(root, {0: 5, 1: 400, 2: 60, 3: 400}, deltas=3)
    plan = plan_compaction(
        list_table_dir(LOCAL, str(root)),
        ALL_COMMITTED.format(hwm=3),
        MetastoreKind.HIVE3,
        CompactionType.MAJOR,
        table="db.t",
    )
    tasks = bucket_tasks(plan, location_uri=str(root), staging_dir=str(tmp_path / "s"), row_type=None, codec="zlib")
    # Ties keep bucket order, so the order is the same on every run.
    assert [t.bucket for t in tasks] == [1, 3, 2, 0]


def test_only_a_minor_vacuum_with_delete_deltas_reads_the_row_type_on_the_driver(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _write_table(root, {0: 10, 1: 10}, deltas=2)
    ids = ALL_COMMITTED.format(hwm=2)
    listing = list_table_dir(LOCAL, str(root))
    assert not needs_row_type(plan_compaction(listing, ids, MetastoreKind.HIVE3, CompactionType.MAJOR, table="db.t"))
    assert not needs_row_type(plan_compaction(listing, ids, MetastoreKind.HIVE3, CompactionType.MINOR, table="db.t"))

    _delete_first_row(root, 3, bucket=1)
    listing = list_table_dir(LOCAL, str(root))
    ids = ALL_COMMITTED.format(hwm=3)
    assert not needs_row_type(plan_compaction(listing, ids, MetastoreKind.HIVE3, CompactionType.MAJOR, table="db.t"))
    minor = plan_compaction(listing, ids, MetastoreKind.HIVE3, CompactionType.MINOR, table="db.t")
    assert needs_row_type(minor)

    # A MAJOR task without a row type compacts as before: the deleted row is gone.
    major = plan_compaction(listing, ids, MetastoreKind.HIVE3, CompactionType.MAJOR, table="db.t")
    results = [
        compact_bucket(task)
        for task in bucket_tasks(
            major, location_uri=str(root), staging_dir=str(root / "_tmp_s"), row_type=None, codec="zlib"
        )
    ]
    assert sum(r.rows_written for r in results) == 2 * 20 - 1


def test_listing_and_reading_on_threads_give_what_the_local_disk_gives(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _write_table(root, {0: 7, 1: 3, 2: 11}, deltas=40)
    _delete_first_row(root, 41, bucket=2)
    (root / "_tmp_staging").mkdir()  # hidden: never descended into
    snapshot = ValidWriteIdList.from_string(ALL_COMMITTED.format(hwm=41))
    remote = pafs.SubTreeFileSystem(str(tmp_path), LOCAL)

    local_listing = list_table_dir(LOCAL, str(root))
    remote_listing = list_table_dir(remote, "t")
    assert remote_listing.files == local_listing.files and len(local_listing.files) == 40 * 4 + 2
    assert remote_listing.directories == local_listing.directories
    assert not any(d.startswith("_tmp") for d in remote_listing.directories)

    state = acid_state(local_listing, snapshot)
    for bucket in (0, 1, 2):
        local_rows = read_state(LOCAL, local_listing, state, snapshot, with_row_id=True, bucket=bucket)
        remote_rows = read_state(
            remote, remote_listing, acid_state(remote_listing, snapshot), snapshot, with_row_id=True, bucket=bucket
        )
        assert remote_rows.equals(local_rows)
        assert local_rows.num_rows == {0: 7 * 40, 1: 3 * 40, 2: 11 * 40 - 1}[bucket]
    deletes = read_delete_events(remote, remote_listing, acid_state(remote_listing, snapshot), snapshot, bucket=2)
    assert deletes.num_rows == 1
