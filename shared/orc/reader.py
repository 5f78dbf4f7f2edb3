"""Read the rows a snapshot of a Hive ACID table sees, with pyarrow, from any ``pyarrow.fs`` storage.

The rows of a snapshot are those of the base and the current deltas (see
:func:`~acidclean.shared.acid.state.acid_state`) whose write id the snapshot sees, minus the rows
named by a visible delete event. Write ids are checked row by row because one streaming-ingest delta
(``delta_1_2``) holds several transactions, some of which may be open or aborted. Delete events
match rows on their identity (originalTransaction, bucket, rowId). Original (pre-ACID) files get the
synthetic identity Hive gives them: originalTransaction 0, the bucket of the file name in BucketCodec
V1 form, and the row's position among all original rows of that bucket, files taken in path order.

Everything on the row path is vectorised (arrow filters, one hash semi-join for the deletes); Python
loops only run per file. The vacuum job reads one bucket at a time with ``bucket=``.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.orc as pa_orc

from acidclean.shared.acid.events import (
    ACID_COLUMNS,
    ACID_VERSION_METADATA_KEY,
    BUCKET,
    CURRENT_TRANSACTION,
    IDENTITY_COLUMNS,
    OPERATION,
    ORC_ACID_VERSION,
    ORIGINAL_TRANSACTION,
    ROW,
    ROW_ID,
    UPDATE_OPERATION,
    encode_bucket_property,
)
from acidclean.shared.acid.names import (
    FLUSH_LENGTH_SUFFIX,
    METADATA_FILE,
    ORC_ACID_VERSION_FILE,
    DirectoryKind,
    ParsedDirectory,
    is_hidden,
    parse_bucket_file,
    parse_bucket_id,
    parse_original_file,
)
from acidclean.shared.acid.state import AcidState, ListedFile, Listing, acid_state
from acidclean.shared.acid.write_ids import ValidIdList, ValidTxnList
from acidclean.shared.errors import AcidLayoutError, UnreadableFileError

ORIGINAL = "original"
IDENTITY_SCHEMA = pa.schema(
    [
        pa.field(ORIGINAL_TRANSACTION, pa.int64()),
        pa.field(BUCKET, pa.int32()),
        pa.field(ROW_ID, pa.int64()),
        pa.field(CURRENT_TRANSACTION, pa.int64()),
    ]
)
_ROW_INDEX = "__acidclean_row_index"
LISTING_THREADS = 16  # concurrent listings and file openings on remote storage


# -- listing ----------------------------------------------------------------------------------------


def _join(directory: str, name: str) -> str:
    return f"{directory.rstrip('/')}/{name}" if directory else name


def _list(fs: pafs.FileSystem, path: str, recursive: bool) -> list[pafs.FileInfo]:
    try:
        return list(fs.get_file_info(pafs.FileSelector(path, recursive=recursive)))
    except FileNotFoundError as error:
        raise AcidLayoutError(f"table directory {path} does not exist") from error
    except OSError as error:
        raise AcidLayoutError(f"cannot list table directory {path}: {error}") from error


def _read_small_file(fs: pafs.FileSystem, path: str) -> bytes:
    try:
        with fs.open_input_stream(path) as stream:
            return bytes(stream.read())
    except OSError as error:
        raise UnreadableFileError(f"cannot read {path}: {error}") from error


def _data_format(fs: pafs.FileSystem, path: str) -> str:
    """The ``dataFormat`` of a ``_metadata_acid`` file (``{"thisFileVersion":"0","dataFormat":...}``)."""
    try:
        content = json.loads(_read_small_file(fs, path))
    except ValueError as error:
        raise UnreadableFileError(f"{path} is not the JSON Hive writes: {error}") from error
    if not isinstance(content, dict) or content.get("thisFileVersion", "0") != "0":
        raise UnreadableFileError(f"{path} has an unknown _metadata_acid version: {content!r}")
    return str(content.get("dataFormat", "null")).lower()


def _list_one(fs: pafs.FileSystem, path: str) -> list[pafs.FileInfo]:
    try:
        return list(fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True)))
    except OSError as error:
        raise AcidLayoutError(f"cannot list {path}: {error}") from error


def _list_below(fs: pafs.FileSystem, paths: list[str]) -> list[list[pafs.FileInfo]]:
    """The recursive listing of each directory, in the order given. On remote storage each listing
    is a round trip, and a table with a hundred deltas would wait for a hundred of them in a row:
    there they run on a few threads at once (the calls release the GIL). A local disk answers in
    microseconds, so it is listed in line."""
    if len(paths) < 2 or isinstance(fs, pafs.LocalFileSystem):
        return [_list_one(fs, path) for path in paths]
    with ThreadPoolExecutor(min(LISTING_THREADS, len(paths)), thread_name_prefix="acidclean-list") as pool:
        return list(pool.map(lambda path: _list_one(fs, path), paths))


def list_table_dir(fs: pafs.FileSystem, table_dir: str) -> Listing:
    """The :class:`Listing` of a table or partition directory, the input of ``acid_state``.

    Hidden children (``_tmp...``, ``.hive-staging...``) are not descended into, so a staging
    directory that vanishes meanwhile cannot fail the listing. The ``_metadata_acid`` of each base
    is read, because before Hive 4 it is what marks a compactor's base.
    """
    table_dir = table_dir.rstrip("/") or "/"
    prefix = len(table_dir.rstrip("/")) + 1
    files: list[ListedFile] = []
    directories: list[str] = []
    data_formats: dict[str, str] = {}
    children = [child for child in _list(fs, table_dir, recursive=False) if not is_hidden(child.base_name)]
    subdirectories = [child.path for child in children if child.type == pafs.FileType.Directory]
    listed = iter(_list_below(fs, subdirectories))
    for child in children:
        name = child.base_name
        if child.type != pafs.FileType.Directory:
            files.append(ListedFile(name, int(child.size or 0)))
            continue
        directories.append(name)
        for info in next(listed):
            relative = info.path[prefix:]
            if info.type == pafs.FileType.Directory:
                directories.append(relative)
            else:
                files.append(ListedFile(relative, int(info.size or 0)))
                if name.startswith("base_") and relative == f"{name}/{METADATA_FILE}":
                    data_formats[name] = _data_format(fs, info.path)
    return Listing(tuple(files), tuple(directories), data_formats, table_dir)


# -- the files of a state ---------------------------------------------------------------------------


@dataclass(frozen=True)
class DataFile:
    """A file a snapshot reads: ``kind`` is ``base``, ``delta``, ``delete_delta`` or ``original``;
    ``directory`` is the base or delta it belongs to (None for original files)."""

    path: str
    relative_path: str
    kind: str
    bucket_id: int | None
    directory: ParsedDirectory | None = None
    flush_length_path: str | None = None


def _files_by_directory(listing: Listing) -> dict[str, set[str]]:
    """The listed paths below each top-level directory, in one pass: a table of a hundred deltas lists
    a thousand files, and scanning them all once per directory took 14 ms a call, twice per task."""
    grouped: dict[str, set[str]] = {}
    for listed in listing.files:
        top, slash, _ = listed.path.partition("/")
        if slash:
            grouped.setdefault(top, set()).add(listed.path)
    return grouped


def _directory_files(listing: Listing, directory: ParsedDirectory, present: set[str]) -> list[DataFile]:
    found = []
    for relative in sorted(present):
        parts = relative.split("/")
        name = parts[-1]
        if any(is_hidden(part) for part in parts[1:]) or name.endswith(FLUSH_LENGTH_SUFFIX):
            continue
        # Hive reads bucket files, and original-named files of a raw (LOAD DATA) delta; nothing else.
        if parse_bucket_file(name) is None and parse_original_file(name) is None:
            continue
        flush = relative + FLUSH_LENGTH_SUFFIX
        found.append(
            DataFile(
                _join(listing.location, relative),
                relative,
                directory.kind.value,
                parse_bucket_id(name),
                directory,
                _join(listing.location, flush) if flush in present else None,
            )
        )
    return found


def snapshot_files(listing: Listing, state: AcidState, bucket: int | None = None) -> list[DataFile]:
    """The data and delete files a state reads, in read order: originals, the base, then the current
    deltas. With ``bucket``, only that bucket's files (the unit of work of a compaction task)."""
    files = [
        DataFile(_join(listing.location, f.path), f.path, ORIGINAL, parse_original_file(f.path.rsplit("/", 1)[-1]))
        for f in state.original_files
    ]
    below = _files_by_directory(listing)
    for directory in ((state.base,) if state.base else ()) + state.deltas:
        files.extend(_directory_files(listing, directory, below.get(directory.name, set())))
    if bucket is not None:
        files = [f for f in files if f.bucket_id == bucket]
    return files


def bucket_ids(listing: Listing, state: AcidState) -> list[int]:
    """The buckets that hold data or delete events in a state, for splitting work by bucket."""
    return sorted({f.bucket_id for f in snapshot_files(listing, state) if f.bucket_id is not None})


# -- one file ---------------------------------------------------------------------------------------


@dataclass
class _OpenFile:
    data_file: DataFile
    orc: pa_orc.ORCFile
    acid_names: dict[str, str] | None  # canonical ACID column -> name in the file; None for raw files
    row_fields: list[pa.Field]

    @property
    def is_acid(self) -> bool:
        return self.acid_names is not None


def _flush_length(fs: pafs.FileSystem, path: str) -> int | None:
    """The last length recorded in a streaming writer's ``_flush_length`` side file (big-endian longs)."""
    content = _read_small_file(fs, path)
    if len(content) < 8:
        return None
    return int(struct.unpack(">q", content[(len(content) // 8 - 1) * 8 :][:8])[0])


def _open(fs: pafs.FileSystem, data_file: DataFile) -> _OpenFile:
    try:
        source = fs.open_input_file(data_file.path)
        if data_file.flush_length_path is not None:
            # A streaming transaction is still writing this file: read only up to its last flush.
            length = _flush_length(fs, data_file.flush_length_path)
            if length is not None and length < source.size():
                source = pa.BufferReader(source.read_at(length, 0))
        orc = pa_orc.ORCFile(source)
        schema = orc.schema
    except (OSError, pa.ArrowException) as error:
        raise UnreadableFileError(f"cannot read ORC file {data_file.path}: {error}") from error
    by_lower = {field.name.lower(): field.name for field in schema}
    if all(column.lower() in by_lower for column in ACID_COLUMNS):
        names = {column: by_lower[column.lower()] for column in ACID_COLUMNS}
        row_type = schema.field(names[ROW]).type
        if not pa.types.is_struct(row_type):
            raise UnreadableFileError(f"{data_file.path}: the ACID column {names[ROW]!r} is not a struct")
        return _OpenFile(data_file, orc, names, [row_type.field(i) for i in range(row_type.num_fields)])
    if data_file.kind == DirectoryKind.DELETE_DELTA.value:
        raise UnreadableFileError(f"{data_file.path} is in a delete delta but lacks the ACID event columns")
    return _OpenFile(data_file, orc, None, list(schema))


def _open_all(fs: pafs.FileSystem, files: Sequence[DataFile]) -> list[_OpenFile]:
    """Every file opened (its tail read and parsed), in the order given. On remote storage each
    opening is a round trip, so a bucket of a hundred deltas opens its files on a few threads at
    once, as :func:`list_table_dir` lists; a local disk opens them in line."""
    if len(files) < 2 or isinstance(fs, pafs.LocalFileSystem):
        return [_open(fs, f) for f in files]
    with ThreadPoolExecutor(min(LISTING_THREADS, len(files)), thread_name_prefix="acidclean-open") as pool:
        return list(pool.map(lambda f: _open(fs, f), files))


def _side_file_version(fs: pafs.FileSystem, path: str) -> int:
    text = _read_small_file(fs, path).decode(errors="replace").strip()
    if not text.isdigit():
        raise UnreadableFileError(f"{path} holds {text!r}, not an ACID version number")
    return int(text)


def _metadata_version(orc: pa_orc.ORCFile) -> int | None:
    value = dict(orc.metadata or {}).get(ACID_VERSION_METADATA_KEY.encode())
    return int(value) if value is not None and value.strip().isdigit() else None


def read_acid_version(fs: pafs.FileSystem, data_file: str, listing: Listing | None = None) -> int:
    """The ACID version of a data file: the ``_orc_acid_version`` side file of its directory, else the
    ORC user metadata ``hive.acid.version``, else the schema (ACID columns: 2, otherwise 0 = raw).
    Real files often lack the side file; some writers also leave out the metadata."""
    directory = data_file.rsplit("/", 1)[0]
    side_file = f"{directory}/{ORC_ACID_VERSION_FILE}"
    if listing is not None:
        relative = side_file[len(listing.location.rstrip("/")) + 1 :]
        has_side_file = any(f.path == relative for f in listing.files)
    else:
        has_side_file = fs.get_file_info(side_file).type == pafs.FileType.File
    if has_side_file:
        return _side_file_version(fs, side_file)
    opened = _open(fs, DataFile(data_file, data_file, ORIGINAL, None))
    version = _metadata_version(opened.orc)
    if version is not None:
        return version
    return ORC_ACID_VERSION if opened.is_acid else 0


def _write_id_mask(write_ids: pa.Array | pa.ChunkedArray, valid_ids: ValidIdList) -> pa.Array:
    """Row by row: is the write id committed in the snapshot (``isWriteIdValid``)."""
    mask = pc.less_equal(write_ids, valid_ids.high_watermark)
    if valid_ids.exceptions:
        excluded = pc.is_in(write_ids, value_set=pa.array(valid_ids.exceptions, pa.int64()))
        mask = pc.and_(mask, pc.invert(excluded))
    return mask


def _needs_write_id_filter(valid_ids: ValidIdList, directory: ParsedDirectory | None) -> bool:
    if directory is None:
        return True
    low = directory.min_write_id if not directory.is_base else -(2**63)
    high = directory.max_write_id
    return not valid_ids.all_write_ids_valid(low, high)


def _read(opened: _OpenFile, columns: list[str]) -> pa.Table:
    try:
        return opened.orc.read(columns=columns)
    except (OSError, pa.ArrowException) as error:
        raise UnreadableFileError(f"cannot read ORC file {opened.data_file.path}: {error}") from error


def _read_delete_events(opened: _OpenFile, valid_ids: ValidIdList) -> pa.Table:
    names = opened.acid_names
    assert names is not None
    table = _read(opened, [names[c] for c in (ORIGINAL_TRANSACTION, BUCKET, ROW_ID, CURRENT_TRANSACTION)])
    table = table.rename_columns(list(IDENTITY_SCHEMA.names)).cast(IDENTITY_SCHEMA)
    if _needs_write_id_filter(valid_ids, opened.data_file.directory):
        # A delete of an open or aborted transaction must not hide anything.
        table = table.filter(_write_id_mask(table.column(CURRENT_TRANSACTION), valid_ids))
    return table


# -- the snapshot -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _RowLayout:
    """The snapshot's row columns: ``fields`` of the widest file, renamed by ``row_names``; files
    are matched by position, as Hive matches ACID files, so older files with fewer columns (before
    an ALTER TABLE ADD COLUMNS) get nulls."""

    fields: list[pa.Field]
    selected: list[int]


def _row_layout(
    opened: Sequence[_OpenFile], columns: Sequence[str] | None, row_names: Sequence[str] | None
) -> _RowLayout:
    fields: list[pa.Field] = []
    for candidate in opened:
        if len(candidate.row_fields) >= len(fields):
            fields = candidate.row_fields
    if row_names is not None:
        if len(row_names) < len(fields):
            raise AcidLayoutError(f"{len(row_names)} column names given for rows of {len(fields)} columns")
        fields = [pa.field(name, f.type) for name, f in zip(row_names, fields, strict=False)]
    names = [f.name for f in fields]
    if columns is None:
        return _RowLayout(fields, list(range(len(fields))))
    missing = [c for c in columns if c not in names]
    if missing and fields:
        raise AcidLayoutError(f"no column {', '.join(missing)} in the table's rows (columns: {', '.join(names)})")
    return _RowLayout(fields, [names.index(c) for c in columns if c in names])


def _row_columns(table: pa.Table, opened: _OpenFile, layout: _RowLayout, struct_column: str | None) -> list[pa.Array]:
    """The selected row columns of one file's table, aligned to the layout by position."""
    arrays = []
    count = table.num_rows
    for position in layout.selected:
        target = layout.fields[position]
        if position >= len(opened.row_fields):
            arrays.append(pa.nulls(count, target.type))
            continue
        name = opened.row_fields[position].name
        array = table.column(name) if struct_column is None else pc.struct_field(table.column(struct_column), name)
        if array.type != target.type:
            array = array.cast(target.type)
        arrays.append(array)
    return arrays


def _constant(value: int, count: int, type_: pa.DataType) -> pa.Array:
    return pa.repeat(pa.scalar(value, type_), count)


def _numbers(first: int, count: int) -> pa.Array:
    """``first``, ``first + 1``, ... (``count`` int64 values), without numpy (the base install has none)."""
    return pc.add(pc.cumulative_sum(_constant(1, count, pa.int64())), pa.scalar(first - 1, pa.int64()))


class _SnapshotReader:
    def __init__(
        self,
        fs: pafs.FileSystem,
        listing: Listing,
        valid_ids: ValidIdList,
        layout: _RowLayout,
        need_identity: bool,
        with_row_id: bool,
    ) -> None:
        self.fs = fs
        self.location = listing.location
        self.listed_paths = {f.path for f in listing.files}
        self.side_file_versions: dict[str, int] = {}
        self.valid_ids = valid_ids
        self.layout = layout
        self.need_identity = need_identity
        self.with_row_id = with_row_id
        self.next_row_id: dict[tuple[str, int], int] = {}

    def read_acid(self, opened: _OpenFile) -> pa.Table:
        names = opened.acid_names
        assert names is not None
        filter_rows = _needs_write_id_filter(self.valid_ids, opened.data_file.directory)
        wanted = []
        if self.need_identity:
            wanted += [names[ORIGINAL_TRANSACTION], names[BUCKET], names[ROW_ID]]
        read_current = self.with_row_id or filter_rows
        if read_current:
            wanted.append(names[CURRENT_TRANSACTION])
        row_paths = [
            f"{names[ROW]}.{opened.row_fields[p].name}" for p in self.layout.selected if p < len(opened.row_fields)
        ]
        check_updates = self._may_hold_update_events(opened)
        if check_updates:
            wanted.append(names[OPERATION])
        table = _read(opened, wanted + row_paths if row_paths else wanted or [names[ROW_ID]])
        if check_updates and pc.any(pc.equal(table.column(names[OPERATION]), UPDATE_OPERATION)).as_py():
            raise AcidLayoutError(
                f"{opened.data_file.path} holds update events of ACID version 1 (Hive 2 before split "
                "update), which this reader does not merge; run a major compaction in Hive first"
            )
        if filter_rows:
            table = table.filter(_write_id_mask(table.column(names[CURRENT_TRANSACTION]), self.valid_ids))
        arrays: list[pa.Array | pa.ChunkedArray] = []
        if self.need_identity:
            # Without --with-row-id the identity only serves to match deletes: currentTransaction,
            # if not read for the row filter, is a placeholder that is dropped again.
            current = table.column(names[CURRENT_TRANSACTION]) if read_current else pa.nulls(table.num_rows, pa.int64())
            arrays += [
                table.column(names[ORIGINAL_TRANSACTION]).cast(pa.int64()),
                table.column(names[BUCKET]).cast(pa.int32()),
                table.column(names[ROW_ID]).cast(pa.int64()),
                current.cast(pa.int64()),
            ]
        arrays += _row_columns(table, opened, self.layout, names[ROW] if row_paths else None)
        return self._assemble(arrays, table.num_rows)

    def _may_hold_update_events(self, opened: _OpenFile) -> bool:
        """Update events exist only before ACID version 2 (split update). Unless the side file or the
        metadata says version 2 or later, the operation column is checked as well."""
        directory = opened.data_file.directory
        version = None
        if directory is not None:
            side_file = f"{directory.name}/{ORC_ACID_VERSION_FILE}"
            if side_file not in self.side_file_versions and side_file in self.listed_paths:
                self.side_file_versions[side_file] = _side_file_version(self.fs, _join(self.location, side_file))
            version = self.side_file_versions.get(side_file)
        if version is None:
            version = _metadata_version(opened.orc)
        return version is None or version < ORC_ACID_VERSION

    def read_raw(self, opened: _OpenFile) -> pa.Table:
        """A file without ACID columns: an original file, or a base/delta written by LOAD DATA."""
        data_file = opened.data_file
        if data_file.bucket_id is None:
            raise AcidLayoutError(
                f"cannot give the rows of {data_file.path} a Hive row identity: its name does not carry a "
                "bucket id (Hive names such files NNNNNN_N or NNNNNN_N_copy_N)"
            )
        directory = data_file.directory
        write_id = 0 if directory is None else (directory.write_id if directory.is_base else directory.min_write_id)
        statement = 0 if directory is None or directory.statement_id is None else directory.statement_id
        columns = [opened.row_fields[p].name for p in self.layout.selected if p < len(opened.row_fields)]
        table = _read(opened, columns) if columns else pa.table({"_": pa.nulls(opened.orc.nrows)})
        count = table.num_rows
        arrays: list[pa.Array | pa.ChunkedArray] = []
        if self.need_identity:
            # Row ids run on across the files of one bucket in one directory (all originals: one group).
            key = (directory.name if directory else "", data_file.bucket_id)
            first = self.next_row_id.get(key, 0)
            self.next_row_id[key] = first + count
            arrays += [
                _constant(write_id, count, pa.int64()),
                _constant(encode_bucket_property(data_file.bucket_id, statement), count, pa.int32()),
                _numbers(first, count),
                _constant(write_id, count, pa.int64()),
            ]
        arrays += _row_columns(table, opened, self.layout, None)
        return self._assemble(arrays, count)

    def _assemble(self, arrays: list[pa.Array | pa.ChunkedArray], count: int) -> pa.Table:
        names = list(IDENTITY_SCHEMA.names) if self.need_identity else []
        names += [self.layout.fields[p].name for p in self.layout.selected]
        if not names:
            return pa.table({_ROW_INDEX: pa.nulls(count, pa.int64())})
        return pa.Table.from_arrays(arrays, names=names)


def _deleted_by_join(rows: pa.Table, deletes: pa.Table) -> pa.BooleanArray:
    """Which rows have a delete event, matching (originalTransaction, bucket, rowId) exactly: a hash
    semi-join (any key values, no numpy)."""
    keys = rows.select(list(IDENTITY_COLUMNS)).append_column(_ROW_INDEX, _numbers(0, rows.num_rows))
    matched = keys.join(
        deletes.select(list(IDENTITY_COLUMNS)), keys=list(IDENTITY_COLUMNS), join_type="left semi"
    ).column(_ROW_INDEX)
    deleted: pa.BooleanArray = pc.is_in(keys.column(_ROW_INDEX), value_set=matched.combine_chunks()).combine_chunks()
    return deleted


def _deleted_rows(rows: pa.Table, deletes: pa.Table) -> pa.BooleanArray:
    """A boolean mask of the rows a visible delete event removes (rows keep their order)."""
    try:
        # numpy's packed keys are several times faster; numpy comes with the vacuum extra,
        # the base install (acid-state, read) has none and joins.
        from acidclean.shared.orc.packed_keys import deleted_by_packed_key
    except ImportError:
        return _deleted_by_join(rows, deletes)
    deleted = deleted_by_packed_key(rows, deletes)
    return _deleted_by_join(rows, deletes) if deleted is None else deleted


def read_delete_events(
    fs: pafs.FileSystem, listing: Listing, state: AcidState, valid_ids: ValidIdList, *, bucket: int | None = None
) -> pa.Table:
    """The visible delete events of a state (identity and currentTransaction), e.g. for a minor
    compaction that must carry them into its delete delta."""
    files = [f for f in snapshot_files(listing, state, bucket) if f.kind == DirectoryKind.DELETE_DELTA.value]
    tables = [_read_delete_events(opened, valid_ids) for opened in _open_all(fs, files)]
    return pa.concat_tables(tables) if tables else IDENTITY_SCHEMA.empty_table()


def read_state(
    fs: pafs.FileSystem,
    listing: Listing,
    state: AcidState,
    valid_ids: ValidIdList,
    *,
    columns: Sequence[str] | None = None,
    with_row_id: bool = False,
    bucket: int | None = None,
    row_names: Sequence[str] | None = None,
) -> pa.Table:
    """The visible rows of a computed state (see :func:`read_snapshot` for the arguments)."""
    files = snapshot_files(listing, state, bucket)
    opened = _open_all(fs, files)
    data = [o for o in opened if o.data_file.kind != DirectoryKind.DELETE_DELTA.value]
    delete_files = [o for o in opened if o.data_file.kind == DirectoryKind.DELETE_DELTA.value]
    layout = _row_layout(data, columns, row_names)

    delete_tables = [_read_delete_events(o, valid_ids) for o in delete_files]
    deletes = pa.concat_tables(delete_tables) if delete_tables else IDENTITY_SCHEMA.empty_table()
    need_identity = with_row_id or deletes.num_rows > 0
    reader = _SnapshotReader(fs, listing, valid_ids, layout, need_identity, with_row_id)
    parts = [reader.read_acid(o) if o.is_acid else reader.read_raw(o) for o in data]
    if not parts:
        empty_fields = [layout.fields[p] for p in layout.selected]
        schema = pa.schema((list(IDENTITY_SCHEMA) if with_row_id else []) + empty_fields)
        return schema.empty_table()
    rows = pa.concat_tables(parts)
    deleted = _deleted_rows(rows, deletes) if deletes.num_rows else None
    if not with_row_id and need_identity:
        rows = rows.drop_columns(list(IDENTITY_SCHEMA.names))  # before filtering: less to copy
    if _ROW_INDEX in rows.column_names:
        rows = rows.drop_columns([_ROW_INDEX])
    if deleted is not None and pc.any(deleted).as_py():
        rows = rows.filter(pc.invert(deleted))
    return rows


def read_snapshot(
    fs: pafs.FileSystem,
    table_dir: str,
    valid_ids: ValidIdList,
    *,
    columns: Sequence[str] | None = None,
    with_row_id: bool = False,
    bucket: int | None = None,
    valid_txns: ValidTxnList | None = None,
    row_names: Sequence[str] | None = None,
) -> pa.Table:
    """The rows of ``table_dir`` visible to the snapshot ``valid_ids``, as one arrow table.

    The columns are the fields of the ACID ``row`` struct (Hive writes them as ``_col0``...;
    ``row_names`` renames them by position, e.g. to the metastore's column names), restricted to
    ``columns``. ``with_row_id`` prepends the identity ``originalTransaction``, ``bucket`` (BucketCodec
    V1), ``rowId`` and the ``currentTransaction`` that wrote the row. ``bucket`` reads one bucket only.
    Raises :class:`UnreadableFileError` naming the file that cannot be read.
    """
    listing = list_table_dir(fs, table_dir)
    state = acid_state(listing, valid_ids, valid_txns)
    return read_state(
        fs, listing, state, valid_ids, columns=columns, with_row_id=with_row_id, bucket=bucket, row_names=row_names
    )


__all__ = [
    "IDENTITY_SCHEMA",
    "DataFile",
    "bucket_ids",
    "list_table_dir",
    "read_acid_version",
    "read_delete_events",
    "read_snapshot",
    "read_state",
    "snapshot_files",
]
