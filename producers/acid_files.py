"""Build ACID event tables and write them as the ORC bucket files Hive reads, fast.

A compaction turns rows read back with their identity (see ``shared.orc.reader.read_state``) into
ACID events again, sorted by (originalTransaction, bucket, rowId) as every ACID file is, and writes
them with pyarrow's ORC writer (C++, columnar). The user metadata Hive's readers look at is then
added to the file's tail (:mod:`acidclean.producers.orc_tail`): ``hive.acid.version`` = 2,
``hive.acid.stats`` (inserts, updates, deletes) and ``hive.acid.key.index`` (the last key of every
stripe, which Hive's merger uses to skip stripes). ``shared.orc.writer`` writes the same layout
through pyorc from Python tuples, which is fine for tests and far too slow for a compaction.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.orc as pa_orc

from acidclean.producers.orc_tail import add_user_metadata
from acidclean.shared.acid.events import (
    ACID_VERSION_METADATA_KEY,
    BUCKET,
    DELETE_OPERATION,
    INSERT_OPERATION,
    OPERATION,
    ORC_ACID_VERSION,
    ORIGINAL_TRANSACTION,
    ROW_ID,
)
from acidclean.shared.errors import VacuumError
from acidclean.shared.orc.writer import acid_event_schema

ACID_STATS_METADATA_KEY = "hive.acid.stats"
ACID_KEY_INDEX_METADATA_KEY = "hive.acid.key.index"
IDENTITY_SORT = [(ORIGINAL_TRANSACTION, "ascending"), (BUCKET, "ascending"), (ROW_ID, "ascending")]

# Table property orc.compress -> pyarrow's codec name. ZLIB is Hive's default and what every Hive
# version reads; a table asking for another codec gets it.
_CODECS = {"ZLIB": "zlib", "SNAPPY": "snappy", "NONE": "uncompressed", "LZ4": "lz4", "ZSTD": "zstd"}


def orc_codec(orc_compress: str) -> str:
    """pyarrow's codec for a table's ``orc.compress`` (default ZLIB)."""
    codec = _CODECS.get((orc_compress or "ZLIB").upper())
    if codec is None:
        raise VacuumError(
            f"orc.compress={orc_compress} cannot be written (pyarrow's ORC writer supports "
            f"{', '.join(sorted(_CODECS))}); change the table property or vacuum it with Hive"
        )
    return codec


IDENTITY_WIDTH = 4  # originalTransaction, bucket, rowId, currentTransaction lead every row read with its identity


def insert_events_from_rows(rows: pa.Table) -> pa.Table:
    """Insert events for rows read with their identity: the four identity columns of
    ``read_state(..., with_row_id=True)`` (originalTransaction, bucket, rowId, currentTransaction),
    then the row columns. Columns are taken by position, so a row column named like an ACID column
    (``bucket``) cannot be mistaken for it. The identity is kept exactly."""
    count = rows.num_rows
    row_fields = [rows.schema.field(i) for i in range(IDENTITY_WIDTH, rows.num_columns)]
    row = pa.StructArray.from_arrays(
        [rows.column(i).combine_chunks() for i in range(IDENTITY_WIDTH, rows.num_columns)], fields=row_fields
    )
    return pa.Table.from_arrays(
        [
            pa.array(np.full(count, INSERT_OPERATION, dtype=np.int32)),
            *(rows.column(i).cast(t) for i, t in enumerate((pa.int64(), pa.int32(), pa.int64(), pa.int64()))),
            row,
        ],
        schema=acid_event_schema(pa.struct(row_fields)),
    )


def _as_numpy(column: pa.ChunkedArray) -> np.ndarray:
    return np.asarray(column.to_numpy())


def is_sorted_by_identity(events: pa.Table) -> bool:
    """Whether the rows are in (originalTransaction, bucket, rowId) order; cheap, vectorised."""
    if events.num_rows < 2:
        return True
    keys = [_as_numpy(events.column(name)) for name in (ORIGINAL_TRANSACTION, BUCKET, ROW_ID)]
    greater = np.zeros(events.num_rows - 1, dtype=bool)
    equal = np.ones(events.num_rows - 1, dtype=bool)
    for key in keys:
        step = np.diff(key.astype(np.int64))
        greater |= equal & (step > 0)
        equal &= step == 0
    return bool(np.all(greater | equal))


def sort_by_identity(events: pa.Table) -> pa.Table:
    """The events in ACID file order; a no-op when they already are (the common case: deltas are
    read in write-id order and each file is sorted)."""
    return events if is_sorted_by_identity(events) else events.sort_by(IDENTITY_SORT)


def key_index(events: pa.Table, stripe_rows: list[int]) -> bytes:
    """``hive.acid.key.index``: ``originalTransaction,bucket,rowId;`` of the last row of each stripe."""
    parts = []
    end = 0
    for rows in stripe_rows:
        end += rows
        last = end - 1
        parts.append(
            f"{events.column(ORIGINAL_TRANSACTION)[last].as_py()},"
            f"{events.column(BUCKET)[last].as_py()},{events.column(ROW_ID)[last].as_py()};"
        )
    return "".join(parts).encode()


def acid_stats(events: pa.Table) -> bytes:
    """``hive.acid.stats``: ``inserts,updates,deletes``."""
    operations = events.column(OPERATION)
    deletes = int(pc.sum(pc.equal(operations, DELETE_OPERATION)).as_py() or 0)
    inserts = int(pc.sum(pc.equal(operations, INSERT_OPERATION)).as_py() or 0)
    return f"{inserts},{events.num_rows - inserts - deletes},{deletes}".encode()


def _stripe_rows(orc: pa_orc.ORCFile) -> list[int]:
    if orc.nstripes == 1:
        return [orc.nrows]
    return [orc.read_stripe(i, columns=[OPERATION]).num_rows for i in range(orc.nstripes)]


def encode_acid_file(events: pa.Table, codec: str = "zlib", *, stripe_size: int = 64 * 1024 * 1024) -> bytes:
    """One ACID ORC file holding ``events`` (already in identity order), metadata included."""
    sink = pa.BufferOutputStream()
    pa_orc.write_table(events, sink, compression=codec, stripe_size=stripe_size)
    data = sink.getvalue()
    stripes = _stripe_rows(pa_orc.ORCFile(pa.BufferReader(data)))
    metadata: Mapping[str, bytes] = {
        ACID_VERSION_METADATA_KEY: str(ORC_ACID_VERSION).encode(),
        ACID_STATS_METADATA_KEY: acid_stats(events),
        ACID_KEY_INDEX_METADATA_KEY: key_index(events, stripes),
    }
    return add_user_metadata(data.to_pybytes(), metadata)


def write_bytes(fs: pafs.FileSystem, path: str, data: bytes) -> int:
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(path) as out:
        out.write(data)
    return len(data)


def write_acid_events(fs: pafs.FileSystem, path: str, events: pa.Table, codec: str = "zlib") -> int:
    """Write one ACID bucket file; returns its size in bytes."""
    return write_bytes(fs, path, encode_acid_file(events, codec))
