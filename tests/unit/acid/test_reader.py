"""The snapshot reader: visible rows of base, deltas and originals, minus visible deletes."""

from __future__ import annotations

import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_support import examples

from acidclean.shared.acid import (
    ValidCompactorWriteIdList,
    ValidTxnList,
    ValidWriteIdList,
    acid_state,
    encode_bucket_property,
)
from acidclean.shared.acid.events import UPDATE_OPERATION
from acidclean.shared.errors import AcidLayoutError, UnreadableFileError
from acidclean.shared.orc.packed_keys import deleted_by_packed_key
from acidclean.shared.orc.reader import (
    _deleted_by_join,
    _deleted_rows,
    bucket_ids,
    list_table_dir,
    read_acid_version,
    read_delete_events,
    read_snapshot,
    read_state,
    snapshot_files,
)
from acidclean.shared.orc.writer import insert_events, write_acid_file, write_original_file

from .conftest import TableWriter, rows

B0, B1 = encode_bucket_property(0), encode_bucket_property(1)


def ids(table: TableWriter, valid_ids: ValidWriteIdList | ValidCompactorWriteIdList, **options: object) -> list[int]:
    result = read_snapshot(table.fs, table.path, valid_ids, **options)  # type: ignore[arg-type]
    return sorted(result.column("id").to_pylist())


def committed(hwm: int, open_ids: tuple[int, ...] = (), aborted: tuple[int, ...] = ()) -> ValidWriteIdList:
    return ValidWriteIdList.from_ids(hwm, open_ids, aborted)


def test_delete_deltas_from_several_transactions_hide_only_their_rows(table: TableWriter) -> None:
    table.insert("delta_0000001_0000001_0000", 1, [1, 2, 3, 4, 5])
    table.insert("delta_0000002_0000002_0000", 2, [6, 7, 8])
    table.delete("delete_delta_0000003_0000003_0000", 3, [(1, 0, 1), (2, 0, 0)])
    table.delete("delete_delta_0000004_0000004_0000", 4, [(1, 0, 4)])
    assert ids(table, committed(4)) == [1, 3, 4, 7, 8]
    assert ids(table, committed(4, open_ids=(4,))) == [1, 3, 4, 5, 7, 8]
    assert ids(table, committed(4, aborted=(3,))) == [1, 2, 3, 4, 6, 7, 8]
    assert ids(table, committed(2)) == [1, 2, 3, 4, 5, 6, 7, 8]


def test_same_delete_delta_with_and_without_statement_suffix_is_applied_once(table: TableWriter) -> None:
    table.insert("delta_0000001_0000001_0000", 1, [1, 2, 3])
    table.delete("delete_delta_0000002_0000002", 2, [(1, 0, 0)])
    table.delete("delete_delta_0000002_0000002_0000", 2, [(1, 0, 0)])
    state = acid_state(list_table_dir(table.fs, table.path), committed(2))
    assert [d.name for d in state.delete_deltas] == ["delete_delta_0000002_0000002"]
    assert state.obsolete == ("delete_delta_0000002_0000002_0000",)
    assert ids(table, committed(2)) == [2, 3]


def test_same_delete_delta_read_twice_under_two_paddings_hides_each_row_once(table: TableWriter) -> None:
    table.insert("delta_0000001_0000001_0000", 1, [1, 2, 3])
    table.delete("delete_delta_2_2_0000", 2, [(1, 0, 0)])
    table.delete("delete_delta_0000002_0000002_0000", 2, [(1, 0, 0)])
    state = acid_state(list_table_dir(table.fs, table.path), committed(2))
    assert len(state.delete_deltas) == 2  # Hive pairs same-range names: both are read
    result = read_snapshot(table.fs, table.path, committed(2), with_row_id=True)
    assert result.num_rows == 2
    assert sorted(result.column("id").to_pylist()) == [2, 3]


def test_converted_table_originals_get_hive_synthetic_identities_and_honour_deletes(table: TableWriter) -> None:
    write_original_file(table.fs, f"{table.path}/000000_0", rows(1, 2, 3))
    write_original_file(table.fs, f"{table.path}/000000_0_copy_1", rows(4, 5))
    write_original_file(table.fs, f"{table.path}/000001_0", rows(10, 11))
    # Row ids count on across the files of one bucket in path order: id 4 is row 3 of bucket 0.
    table.delete("delete_delta_0000001_0000001_0000", 1, [(0, 0, 3)], bucket=0)
    table.delete("delete_delta_0000001_0000001_0000", 1, [(0, 1, 0)], bucket=1)
    result = read_snapshot(table.fs, table.path, committed(1), with_row_id=True)
    by_id = {row["id"]: row for row in result.to_pylist()}
    assert sorted(by_id) == [1, 2, 3, 5, 11]
    identity = ("originalTransaction", "bucket", "rowId", "currentTransaction")
    assert tuple(by_id[3][k] for k in identity) == (0, B0, 2, 0)
    assert tuple(by_id[5][k] for k in identity) == (0, B0, 4, 0)
    assert tuple(by_id[11][k] for k in identity) == (0, B1, 1, 0)
    assert ids(table, committed(1), bucket=1) == [11]
    assert ids(table, committed(0)) == [1, 2, 3, 4, 5, 10, 11]


def test_streaming_delta_spanning_transactions_is_filtered_row_by_row(table: TableWriter) -> None:
    events = pa.concat_tables([insert_events(rows(1, 2), 1), insert_events(rows(3, 4), 2), insert_events(rows(5), 3)])
    write_acid_file(table.fs, f"{table.path}/delta_0000001_0000003/bucket_00000", events)
    assert ids(table, committed(1)) == [1, 2]
    assert ids(table, committed(3, open_ids=(2,))) == [1, 2, 5]
    assert ids(table, committed(3, aborted=(3,))) == [1, 2, 3, 4]
    assert ids(table, committed(3, open_ids=(1,))) == [3, 4, 5]
    assert ids(table, committed(3)) == [1, 2, 3, 4, 5]
    table.delete("delete_delta_0000004_0000004_0000", 4, [(2, 0, 0)])
    assert ids(table, committed(4)) == [1, 2, 4, 5]
    assert ids(table, committed(4, open_ids=(4,))) == [1, 2, 3, 4, 5]


def test_compactor_list_reads_no_row_of_an_aborted_write_inside_a_delta(table: TableWriter) -> None:
    events = pa.concat_tables([insert_events(rows(1), 1), insert_events(rows(2), 2), insert_events(rows(3), 3)])
    write_acid_file(table.fs, f"{table.path}/delta_0000001_0000003/bucket_00000", events)
    assert ids(table, ValidCompactorWriteIdList.from_ids(3, aborted_ids=[2])) == [1, 3]


@pytest.mark.parametrize(
    ("side_file", "metadata_version", "expected_version"),
    [(True, 2, 2), (False, 2, 2), (False, None, 2)],
)
def test_files_without_the_side_file_or_the_metadata_still_read(
    table: TableWriter, side_file: bool, metadata_version: int | None, expected_version: int
) -> None:
    path = table.insert("delta_0000001_0000001_0000", 1, [1, 2], side_file=side_file, acid_version=metadata_version)
    table.delete(
        "delete_delta_0000002_0000002_0000", 2, [(1, 0, 1)], side_file=side_file, acid_version=metadata_version
    )
    assert ids(table, committed(2)) == [1]
    assert read_acid_version(table.fs, path) == expected_version
    assert read_acid_version(table.fs, path, list_table_dir(table.fs, table.path)) == expected_version


def test_acid_version_comes_from_the_side_file_first(table: TableWriter) -> None:
    path = table.insert("delta_0000001_0000001_0000", 1, [1], acid_version=None)
    with table.fs.open_output_stream(f"{table.path}/delta_0000001_0000001_0000/_orc_acid_version") as out:
        out.write(b"3")
    assert read_acid_version(table.fs, path) == 3


def test_original_file_has_acid_version_zero(table: TableWriter) -> None:
    write_original_file(table.fs, f"{table.path}/000000_0", rows(1))
    assert read_acid_version(table.fs, f"{table.path}/000000_0") == 0


def test_lower_case_acid_column_names_still_read(table: TableWriter) -> None:
    table.insert("delta_0000001_0000001_0000", 1, [1, 2, 3], lower_case_names=True)
    table.delete("delete_delta_0000002_0000002_0000", 2, [(1, 0, 2)], lower_case_names=True)
    result = read_snapshot(table.fs, table.path, committed(2), with_row_id=True)
    assert result.column("id").to_pylist() == [1, 2]
    assert result.column("rowId").to_pylist() == [0, 1]


def test_one_bucket_is_read_with_only_its_delete_events(table: TableWriter) -> None:
    table.insert("delta_0000001_0000001_0000", 1, [1, 2], bucket=0)
    table.insert("delta_0000001_0000001_0000", 1, [3, 4], bucket=1)
    table.delete("delete_delta_0000002_0000002_0000", 2, [(1, 1, 0)], bucket=1)
    listing = list_table_dir(table.fs, table.path)
    state = acid_state(listing, committed(2))
    assert bucket_ids(listing, state) == [0, 1]
    assert ids(table, committed(2), bucket=1) == [4]
    assert ids(table, committed(2), bucket=0) == [1, 2]
    assert ids(table, committed(2)) == [1, 2, 4]
    deletes = read_delete_events(table.fs, listing, state, committed(2), bucket=1)
    assert deletes.to_pylist() == [{"originalTransaction": 1, "bucket": B1, "rowId": 0, "currentTransaction": 2}]
    assert read_delete_events(table.fs, listing, state, committed(2), bucket=0).num_rows == 0


def test_base_rows_keep_their_identity_and_later_deletes_apply(table: TableWriter) -> None:
    base = pa.concat_tables([insert_events(rows(1, 2), 1), insert_events(rows(3), 2)])
    write_acid_file(table.fs, f"{table.path}/base_0000002/bucket_00000", base)
    table.insert("delta_0000001_0000001_0000", 1, [1, 2])  # obsolete: covered by the base
    table.insert("delta_0000003_0000003_0000", 3, [4])
    table.delete("delete_delta_0000004_0000004_0000", 4, [(1, 0, 1), (3, 0, 0)])
    assert ids(table, committed(4)) == [1, 3]
    assert ids(table, committed(3)) == [1, 2, 3, 4]


def test_streaming_file_still_being_written_is_read_up_to_its_last_flush(table: TableWriter) -> None:
    path = table.insert("delta_0000001_0000002", 1, [1, 2])
    length = table.fs.get_file_info(path).size
    with open(path, "ab") as tail:
        tail.write(b"\x00partial stripe of an open transaction")
    with table.fs.open_output_stream(path + "_flush_length") as out:
        out.write(struct.pack(">q", length // 2) + struct.pack(">q", length))
    assert ids(table, committed(2, open_ids=(2,))) == [1, 2]
    table.fs.delete_file(path + "_flush_length")
    with pytest.raises(UnreadableFileError, match="bucket_00000"):
        ids(table, committed(2, open_ids=(2,)))


def test_unreadable_data_file_fails_with_its_path(table: TableWriter) -> None:
    table.insert("delta_0000001_0000001_0000", 1, [1])
    table.fs.create_dir(f"{table.path}/delta_0000002_0000002_0000")
    with table.fs.open_output_stream(f"{table.path}/delta_0000002_0000002_0000/bucket_00000") as out:
        out.write(b"not an orc file")
    with pytest.raises(UnreadableFileError, match="delta_0000002_0000002_0000/bucket_00000"):
        ids(table, committed(2))


def test_columns_are_selected_renamed_and_aligned_by_position_across_schema_changes(table: TableWriter) -> None:
    table.insert("delta_0000001_0000001_0000", 1, [1])
    wider = pa.table({"id": pa.array([2], pa.int64()), "name": ["two"], "score": [0.5]})
    write_acid_file(table.fs, f"{table.path}/delta_0000002_0000002_0000/bucket_00000", insert_events(wider, 2))
    result = read_snapshot(table.fs, table.path, committed(2))
    assert result.column_names == ["id", "name", "score"]
    assert result.to_pylist() == [{"id": 1, "name": "n1", "score": None}, {"id": 2, "name": "two", "score": 0.5}]
    renamed = read_snapshot(table.fs, table.path, committed(2), row_names=["a", "b", "c"], columns=["c", "a"])
    assert renamed.to_pylist() == [{"c": None, "a": 1}, {"c": 0.5, "a": 2}]
    with pytest.raises(AcidLayoutError, match="no column nope"):
        read_snapshot(table.fs, table.path, committed(2), columns=["nope"])


def test_hive_internal_row_names_are_read_as_written(table: TableWriter) -> None:
    hive_rows = pa.table({"_col0": pa.array([7], pa.int64()), "_col1": ["x"]})
    write_acid_file(table.fs, f"{table.path}/delta_0000001_0000001_0000/bucket_00000", insert_events(hive_rows, 1))
    assert read_snapshot(table.fs, table.path, committed(1)).column_names == ["_col0", "_col1"]


@pytest.mark.parametrize(("version", "side_file"), [(1, True), (1, False), (None, False)])
def test_update_events_of_files_not_known_to_be_version_2_are_refused(
    table: TableWriter, version: int | None, side_file: bool
) -> None:
    events = insert_events(rows(1), 1)
    events = events.set_column(0, "operation", pa.array([UPDATE_OPERATION], pa.int32()))
    path = f"{table.path}/delta_0000001_0000001/bucket_00000"
    write_acid_file(table.fs, path, events, acid_version=version, side_file=side_file)
    with pytest.raises(AcidLayoutError, match="ACID version 1"):
        ids(table, committed(1))


def test_load_data_delta_of_raw_files_gets_the_deltas_write_id(table: TableWriter) -> None:
    table.insert("delta_0000001_0000001_0000", 1, [1])
    write_original_file(table.fs, f"{table.path}/delta_0000002_0000002_0001/000000_0", rows(20, 21))
    table.delete("delete_delta_0000003_0000003_0000", 3, [])
    result = read_snapshot(table.fs, table.path, committed(3), with_row_id=True)
    raw = [r for r in result.to_pylist() if r["id"] >= 20]
    assert [(r["originalTransaction"], r["bucket"], r["rowId"]) for r in raw] == [
        (2, encode_bucket_property(0, 1), 0),
        (2, encode_bucket_property(0, 1), 1),
    ]


def test_original_file_without_a_bucket_in_its_name_cannot_be_given_an_identity(table: TableWriter) -> None:
    write_original_file(table.fs, f"{table.path}/random", rows(1))
    with pytest.raises(AcidLayoutError, match="random"):
        ids(table, committed(1))


def test_compaction_output_of_an_open_transaction_is_not_read(table: TableWriter) -> None:
    table.insert("delta_0000001_0000001_0000", 1, [1])
    table.insert("delta_0000002_0000002_0000", 2, [2])
    table.insert("delta_0000001_0000002_v0000010", 1, [99])  # what an unfinished compaction wrote
    open_txn = ValidTxnList.from_string("10:10:10:")
    result = read_snapshot(table.fs, table.path, committed(2), valid_txns=open_txn)
    assert sorted(result.column("id").to_pylist()) == [1, 2]
    assert ids(table, committed(2)) == [99]  # once committed, it replaces both


def test_empty_table_reads_no_rows(table: TableWriter) -> None:
    table.fs.create_dir(table.path)
    result = read_snapshot(table.fs, table.path, committed(0), with_row_id=True)
    assert result.num_rows == 0
    assert result.column_names[:3] == ["originalTransaction", "bucket", "rowId"]


def test_listing_skips_hidden_children_and_reads_metadata_acid(table: TableWriter) -> None:
    table.insert("base_0000005", 5, [1])
    with table.fs.open_output_stream(f"{table.path}/base_0000005/_metadata_acid") as out:
        out.write(b'{"thisFileVersion":"0","dataFormat":"compacted"}')
    table.insert("_tmp_compaction/base_0000009", 9, [2])
    table.fs.create_dir(f"{table.path}/.hive-staging_1/-ext-10000")
    listing = list_table_dir(table.fs, table.path)
    assert listing.data_formats == {"base_0000005": "compacted"}
    assert {f.path for f in listing.files} == {
        "base_0000005/bucket_00000",
        "base_0000005/_orc_acid_version",
        "base_0000005/_metadata_acid",
    }
    assert listing.location == table.path
    state = acid_state(listing, committed(9))
    assert state.base_is_compacted and state.base is not None
    assert [f.relative_path for f in snapshot_files(listing, state)] == ["base_0000005/bucket_00000"]


def test_listing_a_missing_directory_names_it(tmp_path: Path) -> None:
    with pytest.raises(AcidLayoutError, match="does not exist"):
        list_table_dir(pafs.LocalFileSystem(), str(tmp_path / "missing"))


def test_unreadable_metadata_acid_names_the_file(table: TableWriter) -> None:
    table.insert("base_0000005", 5, [1])
    with table.fs.open_output_stream(f"{table.path}/base_0000005/_metadata_acid") as out:
        out.write(b"{not json")
    with pytest.raises(UnreadableFileError, match="_metadata_acid"):
        list_table_dir(table.fs, table.path)


def test_read_state_reuses_a_computed_state(table: TableWriter) -> None:
    table.insert("delta_0000001_0000001_0000", 1, [1, 2])
    listing = list_table_dir(table.fs, table.path)
    state = acid_state(listing, committed(1))
    assert read_state(table.fs, listing, state, committed(1), columns=["name"]).to_pylist() == [
        {"name": "n1"},
        {"name": "n2"},
    ]


identities = st.lists(
    st.tuples(st.integers(0, 4), st.sampled_from([B0, B1, 7]), st.integers(0, 6)), min_size=0, max_size=30
)


@settings(max_examples=examples(100), deadline=None)
@given(row_keys=identities, delete_keys=identities)
def test_packed_key_delete_matching_agrees_with_a_join(
    row_keys: list[tuple[int, int, int]], delete_keys: list[tuple[int, int, int]]
) -> None:
    def table_of(keys: list[tuple[int, int, int]]) -> pa.Table:
        return pa.table(
            {
                "originalTransaction": pa.array([k[0] for k in keys], pa.int64()),
                "bucket": pa.array([k[1] for k in keys], pa.int32()),
                "rowId": pa.array([k[2] for k in keys], pa.int64()),
            }
        )

    rows_table, deletes = table_of(row_keys), table_of(delete_keys)
    expected = [key in set(delete_keys) for key in row_keys]
    packed = deleted_by_packed_key(rows_table, deletes) if delete_keys else None
    if packed is not None:
        assert packed.to_pylist() == expected
    assert _deleted_by_join(rows_table, deletes).to_pylist() == expected


def test_huge_row_ids_fall_back_to_the_join_and_still_match_exactly() -> None:
    keys = pa.table(
        {
            "originalTransaction": pa.array([1, 1], pa.int64()),
            "bucket": pa.array([B0, B0], pa.int32()),
            "rowId": pa.array([2**62, 5], pa.int64()),
        }
    )
    deletes = keys.slice(0, 1)
    assert deleted_by_packed_key(keys, deletes) is None
    assert _deleted_rows(keys, deletes).to_pylist() == [True, False]


def test_wide_row_id_spans_match_exactly_without_a_lookup_table() -> None:
    keys = pa.table(
        {
            "originalTransaction": pa.array([1, 1, 2], pa.int64()),
            "bucket": pa.array([B0, B0, B1], pa.int32()),
            "rowId": pa.array([2**40, 5, 2**40], pa.int64()),
        }
    )
    deletes = keys.slice(0, 1)
    packed = deleted_by_packed_key(keys, deletes)
    assert packed is not None and packed.to_pylist() == [True, False, False]
