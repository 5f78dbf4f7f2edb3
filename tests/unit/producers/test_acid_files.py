"""ACID ORC files written by the vacuum: Hive's metadata, the event schema, identities, order."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.orc as pa_orc
import pyorc
import pytest

from acidclean.producers.acid_files import (
    acid_stats,
    encode_acid_file,
    insert_events_from_rows,
    is_sorted_by_identity,
    key_index,
    orc_codec,
    sort_by_identity,
)
from acidclean.producers.orc_tail import OrcTailError, add_user_metadata
from acidclean.shared.acid.events import ACID_COLUMNS, encode_bucket_property
from acidclean.shared.errors import VacuumError
from acidclean.shared.orc.writer import delete_events

BUCKET0 = encode_bucket_property(0)


def rows_with_identity(count: int, *, first_txn: int = 1, bucket: int = BUCKET0) -> pa.Table:
    return pa.table(
        {
            "originalTransaction": pa.array(np.full(count, first_txn), pa.int64()),
            "bucket": pa.array(np.full(count, bucket), pa.int32()),
            "rowId": pa.array(np.arange(count), pa.int64()),
            "currentTransaction": pa.array(np.full(count, first_txn), pa.int64()),
            "id": pa.array(np.arange(count), pa.int32()),
            "v": pa.array([f"v{i}" for i in range(count)]),
        }
    )


@pytest.mark.parametrize("codec", ["zlib", "snappy", "lz4", "zstd", "uncompressed"])
def test_added_metadata_is_read_back_by_both_orc_readers_and_the_data_is_untouched(codec: str) -> None:
    table = pa.table({"a": pa.array(np.arange(50_000)), "b": pa.array([str(i) for i in range(50_000)])})
    sink = pa.BufferOutputStream()
    pa_orc.write_table(table, sink, compression=codec)
    patched = add_user_metadata(sink.getvalue().to_pybytes(), {"hive.acid.version": b"2", "k": b"\x00\xff"})

    arrow_file = pa_orc.ORCFile(pa.BufferReader(patched))
    assert dict(arrow_file.metadata) == {b"hive.acid.version": b"2", b"k": b"\x00\xff"}
    assert arrow_file.read().equals(table)
    orc_reader = pyorc.Reader(io.BytesIO(patched))
    assert orc_reader.user_metadata == {"hive.acid.version": b"2", "k": b"\x00\xff"}
    assert len(orc_reader) == 50_000


def test_metadata_longer_than_a_compression_block_is_split_into_chunks() -> None:
    sink = pa.BufferOutputStream()
    pa_orc.write_table(pa.table({"a": [1, 2, 3]}), sink, compression="zlib")  # 64 KB blocks
    value = bytes(range(256)) * 800  # 200 KB: several blocks
    patched = add_user_metadata(sink.getvalue().to_pybytes(), {"big": value})
    assert pyorc.Reader(io.BytesIO(patched)).user_metadata == {"big": value}


def test_a_file_that_is_not_orc_is_refused() -> None:
    with pytest.raises(OrcTailError, match="not an ORC file"):
        add_user_metadata(b"PAR1 not orc at all", {"k": b"v"})


def test_insert_events_keep_each_rows_identity_and_writing_transaction() -> None:
    rows = rows_with_identity(3, first_txn=7)
    events = insert_events_from_rows(rows)
    assert tuple(events.column_names) == ACID_COLUMNS
    assert events.column("operation").to_pylist() == [0, 0, 0]
    assert events.column("originalTransaction").to_pylist() == [7, 7, 7]
    assert events.column("rowId").to_pylist() == [0, 1, 2]
    assert events.column("row").to_pylist()[1] == {"id": 1, "v": "v1"}


def test_a_row_column_named_like_an_acid_column_is_not_taken_for_it() -> None:
    rows = rows_with_identity(2).rename_columns(
        ["originalTransaction", "bucket", "rowId", "currentTransaction", "bucket", "rowId"]
    )
    events = insert_events_from_rows(rows)
    assert events.column("bucket").to_pylist() == [BUCKET0, BUCKET0]
    assert events.column("row").to_pylist()[1] == {"bucket": 1, "rowId": "v1"}


def test_delete_events_carry_the_identity_the_deleting_transaction_and_a_null_row() -> None:
    identities = rows_with_identity(2).select(["originalTransaction", "bucket", "rowId", "currentTransaction"])
    identities = identities.set_column(3, "currentTransaction", pa.array([9, 9], pa.int64()))
    events = delete_events(identities, None, pa.struct([("id", pa.int32())]))
    assert events.column("operation").to_pylist() == [2, 2]
    assert events.column("currentTransaction").to_pylist() == [9, 9]
    assert events.column("row").to_pylist() == [None, None]
    assert events.schema.field("row").type == pa.struct([("id", pa.int32())])


def test_events_are_put_in_identity_order_only_when_they_are_not() -> None:
    ordered = insert_events_from_rows(rows_with_identity(4))
    assert is_sorted_by_identity(ordered)
    assert sort_by_identity(ordered) is ordered
    shuffled = ordered.take(pa.array([2, 0, 3, 1]))
    assert not is_sorted_by_identity(shuffled)
    assert sort_by_identity(shuffled).column("rowId").to_pylist() == [0, 1, 2, 3]
    by_transaction = pa.concat_tables([insert_events_from_rows(rows_with_identity(2, first_txn=t)) for t in (5, 3)])
    assert sort_by_identity(by_transaction).column("originalTransaction").to_pylist() == [3, 3, 5, 5]


def test_hive_metadata_names_the_version_the_counts_and_the_last_key_of_every_stripe() -> None:
    events = insert_events_from_rows(rows_with_identity(200_000))
    data = encode_acid_file(events, "zlib", stripe_size=256 * 1024)
    orc = pa_orc.ORCFile(pa.BufferReader(data))
    assert orc.nstripes > 1
    metadata = pyorc.Reader(io.BytesIO(data)).user_metadata
    assert metadata["hive.acid.version"] == b"2"
    assert metadata["hive.acid.stats"] == b"200000,0,0"
    keys = metadata["hive.acid.key.index"].decode().rstrip(";").split(";")
    assert len(keys) == orc.nstripes
    assert keys[-1] == f"1,{BUCKET0},199999"
    assert orc.read().equals(events)


def test_key_index_and_stats_of_a_small_delete_file() -> None:
    identities = rows_with_identity(3).select(["originalTransaction", "bucket", "rowId", "currentTransaction"])
    events = delete_events(identities, None, pa.struct([("id", pa.int32())]))
    assert acid_stats(events) == b"0,0,3"
    assert key_index(events, [3]) == f"1,{BUCKET0},2;".encode()


def test_table_compression_maps_to_the_writer_and_unknown_codecs_are_refused() -> None:
    assert orc_codec("ZLIB") == "zlib"
    assert orc_codec("") == "zlib"
    assert orc_codec("snappy") == "snappy"
    assert orc_codec("NONE") == "uncompressed"
    with pytest.raises(VacuumError, match=r"orc\.compress=LZO"):
        orc_codec("LZO")
