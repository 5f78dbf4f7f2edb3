"""Write ACID ORC files the way Hive lays them out, for tests, the demo and the vacuum job.

pyarrow's ORC writer drops user metadata, so ACID files are written with ``pyorc``, which sets
``hive.acid.version``; every base or delta also gets the ``_orc_acid_version`` side file holding
``2``, which readers such as Trino require when the metadata is missing. Original (pre-ACID) files
are plain ORC written by pyarrow. Paths are on a ``pyarrow.fs.FileSystem``, so the same calls write
locally, to HDFS or to S3.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.orc as pa_orc
import pyorc

from acidclean.shared.acid.events import (
    ACID_COLUMNS,
    ACID_VERSION_METADATA_KEY,
    BUCKET,
    CURRENT_TRANSACTION,
    DELETE_OPERATION,
    INSERT_OPERATION,
    OPERATION,
    ORC_ACID_VERSION,
    ORIGINAL_TRANSACTION,
    ROW,
    ROW_ID,
    encode_bucket_property,
)
from acidclean.shared.acid.names import bucket_file_name
from acidclean.shared.orc.version_file import write_acid_version_file as write_acid_version_file
from acidclean.shared.orc.version_file import write_compacted_marker as write_compacted_marker

ACID_EVENT_FIELDS = (
    pa.field(OPERATION, pa.int32()),
    pa.field(ORIGINAL_TRANSACTION, pa.int64()),
    pa.field(BUCKET, pa.int32()),
    pa.field(ROW_ID, pa.int64()),
    pa.field(CURRENT_TRANSACTION, pa.int64()),
)


def acid_event_schema(row_type: pa.StructType | pa.Schema) -> pa.Schema:
    """The arrow schema of ACID events whose ``row`` struct has ``row_type``'s fields."""
    fields = (
        list(row_type) if isinstance(row_type, pa.Schema) else [row_type.field(i) for i in range(row_type.num_fields)]
    )
    return pa.schema([*ACID_EVENT_FIELDS, pa.field(ROW, pa.struct(fields))])


def insert_events(
    rows: pa.Table,
    write_id: int,
    *,
    bucket_id: int = 0,
    statement_id: int = 0,
    first_row_id: int = 0,
    original_write_ids: pa.Array | None = None,
) -> pa.Table:
    """Insert events for ``rows`` written by ``write_id`` into one bucket; row ids count from
    ``first_row_id``. ``original_write_ids`` (one per row) makes rows of a compacted base or delta,
    which keep the write id that inserted them."""
    count = rows.num_rows
    current = pa.array(np.full(count, write_id, dtype=np.int64))
    original = current if original_write_ids is None else original_write_ids.cast(pa.int64())
    row_struct = pa.StructArray.from_arrays(
        [rows.column(i).combine_chunks() for i in range(rows.num_columns)], fields=list(rows.schema)
    )
    return pa.Table.from_arrays(
        [
            pa.array(np.full(count, INSERT_OPERATION, dtype=np.int32)),
            original,
            pa.array(np.full(count, encode_bucket_property(bucket_id, statement_id), dtype=np.int32)),
            pa.array(np.arange(first_row_id, first_row_id + count, dtype=np.int64)),
            current,
            row_struct,
        ],
        schema=acid_event_schema(rows.schema),
    )


def delete_events(identities: pa.Table, write_id: int | None, row_type: pa.StructType | pa.Schema) -> pa.Table:
    """Delete events for the rows whose identities (``originalTransaction``, ``bucket``, ``rowId``
    columns) are given, deleted by ``write_id``; with ``write_id=None`` each keeps the write id of its
    own ``currentTransaction`` column (a compaction rewriting deletes of several transactions). The
    ``row`` struct is null, as Hive writes it."""
    schema = acid_event_schema(row_type)
    count = identities.num_rows
    deleted_by = (
        identities.column(CURRENT_TRANSACTION).cast(pa.int64())
        if write_id is None
        else pa.array(np.full(count, write_id, dtype=np.int64))
    )
    return pa.Table.from_arrays(
        [
            pa.array(np.full(count, DELETE_OPERATION, dtype=np.int32)),
            identities.column(ORIGINAL_TRANSACTION).cast(pa.int64()),
            identities.column(BUCKET).cast(pa.int32()),
            identities.column(ROW_ID).cast(pa.int64()),
            deleted_by,
            pa.nulls(count, schema.field(ROW).type),
        ],
        schema=schema,
    )


def orc_type(arrow_type: pa.DataType) -> str:
    """The ORC type string (as pyorc and Hive spell it) of an arrow type."""
    simple: Mapping[pa.DataType, str] = {
        pa.bool_(): "boolean",
        pa.int8(): "tinyint",
        pa.int16(): "smallint",
        pa.int32(): "int",
        pa.int64(): "bigint",
        pa.float32(): "float",
        pa.float64(): "double",
        pa.string(): "string",
        pa.large_string(): "string",
        pa.binary(): "binary",
        pa.large_binary(): "binary",
        pa.date32(): "date",
    }
    if arrow_type in simple:
        return simple[arrow_type]
    if pa.types.is_timestamp(arrow_type):
        return "timestamp"
    if pa.types.is_decimal(arrow_type):
        return f"decimal({arrow_type.precision},{arrow_type.scale})"
    if pa.types.is_struct(arrow_type):
        inner = ",".join(f"{f.name}:{orc_type(f.type)}" for f in arrow_type)
        return f"struct<{inner}>"
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return f"array<{orc_type(arrow_type.value_type)}>"
    if pa.types.is_map(arrow_type):
        return f"map<{orc_type(arrow_type.key_type)},{orc_type(arrow_type.item_type)}>"
    raise TypeError(f"no ORC type for arrow type {arrow_type}")


def _tuples(table: pa.Table) -> list[tuple[Any, ...]]:
    # pyorc takes Python tuples; this is test and demo tooling, not a read path.
    columns = [column.to_pylist() for column in table.columns]
    structs = [isinstance(field.type, pa.StructType) for field in table.schema]
    for index, is_struct in enumerate(structs):
        if is_struct:
            columns[index] = [None if value is None else tuple(value.values()) for value in columns[index]]
    return list(zip(*columns, strict=True))


def write_orc_with_metadata(
    fs: pafs.FileSystem,
    path: str,
    table: pa.Table,
    *,
    user_metadata: Mapping[str, bytes] | None = None,
    column_names: list[str] | None = None,
    compression: pyorc.CompressionKind = pyorc.CompressionKind.ZLIB,
) -> None:
    """Write ``table`` as one ORC file with pyorc, setting ORC user metadata; ``column_names``
    renames the top-level columns in the file."""
    names = column_names or table.column_names
    schema = "struct<" + ",".join(f"{n}:{orc_type(f.type)}" for n, f in zip(names, table.schema, strict=True)) + ">"
    parent = path.rsplit("/", 1)[0]
    fs.create_dir(parent, recursive=True)
    with fs.open_output_stream(path) as out:
        writer = pyorc.Writer(out, schema, compression=compression)
        if user_metadata:
            writer.set_user_metadata(**user_metadata)
        writer.writerows(_tuples(table))
        writer.close()


def write_acid_file(
    fs: pafs.FileSystem,
    path: str,
    events: pa.Table,
    *,
    acid_version: int | None = ORC_ACID_VERSION,
    side_file: bool = True,
    lower_case_names: bool = False,
    compression: pyorc.CompressionKind = pyorc.CompressionKind.ZLIB,
) -> None:
    """Write ACID events (see :func:`insert_events`, :func:`delete_events`) to ``path``.

    ``acid_version`` sets the ``hive.acid.version`` user metadata (None: leave it out, as some
    writers do); ``side_file`` writes ``_orc_acid_version`` beside the file; ``lower_case_names``
    spells the ACID columns in lower case, as some non-Hive writers do.
    """
    if tuple(events.column_names) != ACID_COLUMNS:
        raise ValueError(f"ACID events need the columns {ACID_COLUMNS}, got {tuple(events.column_names)}")
    names = [name.lower() for name in ACID_COLUMNS] if lower_case_names else list(ACID_COLUMNS)
    metadata = None if acid_version is None else {ACID_VERSION_METADATA_KEY: str(acid_version).encode()}
    write_orc_with_metadata(fs, path, events, user_metadata=metadata, column_names=names, compression=compression)
    if side_file:
        write_acid_version_file(fs, path.rsplit("/", 1)[0], ORC_ACID_VERSION if acid_version is None else acid_version)


def write_bucket_file(
    fs: pafs.FileSystem,
    directory: str,
    bucket_id: int,
    events: pa.Table,
    *,
    attempt: int | None = None,
    acid_version: int | None = ORC_ACID_VERSION,
    side_file: bool = True,
    lower_case_names: bool = False,
) -> str:
    """Write one bucket file ``bucket_NNNNN[_attempt]`` of a base or delta directory; returns its path."""
    path = f"{directory.rstrip('/')}/{bucket_file_name(bucket_id, attempt)}"
    write_acid_file(fs, path, events, acid_version=acid_version, side_file=side_file, lower_case_names=lower_case_names)
    return path


def write_original_file(fs: pafs.FileSystem, path: str, rows: pa.Table) -> None:
    """A plain (non-ACID) ORC file, as a table had before it was converted to ACID."""
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(path) as out:
        pa_orc.write_table(rows, out)
