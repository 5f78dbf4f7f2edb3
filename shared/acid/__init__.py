"""Hive's ACID rules: directory names, valid id lists, and which directories a snapshot reads.

Everything acidclean deletes rests on :func:`acid_state`, a re-implementation of Hive's
``AcidUtils.getAcidState``. Every module here is pure (no I/O, no clock, no pyarrow); reading and
writing ACID ORC files is :mod:`acidclean.shared.orc`.

Public API (names are stable; other parts of acidclean depend on them):

Directory grammar (:mod:`.names`)
    ``parse_directory_name(name) -> ParsedDirectory | None`` (``parse_base``, ``parse_delta``);
    ``ParsedDirectory(name, kind, min_write_id, max_write_id, statement_id, visibility_txn_id)`` with
    ``kind`` a :class:`DirectoryKind` (BASE, DELTA, DELETE_DELTA); ``base_name``, ``delta_name``,
    ``bucket_file_name``, ``original_file_name`` format names as Hive writes them;
    ``parse_bucket_file``, ``parse_original_file``, ``parse_bucket_id``, ``is_hidden``.

Valid id lists (:mod:`.write_ids`)
    :class:`ValidWriteIdList` (reader), :class:`ValidCompactorWriteIdList`,
    :class:`ValidCleanerWriteIdList`, and Hive 2's :class:`ValidTxnList` /
    :class:`ValidCompactorTxnList` / :class:`ValidCleanerTxnList`; each has ``from_string`` /
    ``to_string`` in Hive's form (``table:hwm:minOpenWriteId:open:aborted``; transaction lists
    without the table), ``from_ids``,
    ``all_committed``, ``is_write_id_valid``, ``is_write_id_range_valid`` -> :class:`RangeResponse`.

State (:mod:`.state`)
    ``acid_state(listing, valid_ids, valid_txns=None) -> AcidState`` with ``base``, ``deltas`` (read
    order), ``obsolete``, ``aborted``, ``original_files``; ``obsolete_dirs(listing, valid_ids, ...)``
    for a cleaner. ``Listing`` / ``ListedFile`` are its input (``Listing.from_paths`` for tests).

ACID events (:mod:`.events`)
    column names of the event schema, operations, ``encode_bucket_property`` /
    ``decode_bucket_property`` (BucketCodec V1).

Partition names (:mod:`.partition_names`, imported explicitly)
    Hive's ``escape_path_name`` / ``unescape_path_name`` (FileUtils), ``make_partition_name`` /
    ``parse_partition_name`` (Warehouse), ``canonical_partition_name``, ``value_readings`` (what an
    operator's spelling may mean), ``lock_covers_partition`` (a lock in any spelling or case; in
    doubt, yes) and ``may_be_same_partition`` (filters).

Storage (:mod:`acidclean.shared.orc`, not part of this package):
    :mod:`acidclean.shared.orc.reader`: ``list_table_dir(fs, dir) -> Listing``,
    ``read_snapshot(fs, dir, valid_ids, columns=None, with_row_id=False, bucket=None, ...) ->
    pyarrow.Table``, ``read_state``, ``read_delete_events``, ``snapshot_files``, ``bucket_ids``,
    ``read_acid_version``.
    :mod:`acidclean.shared.orc.writer`: ``insert_events``, ``delete_events``, ``write_bucket_file``,
    ``write_acid_file``, ``write_acid_version_file``, ``write_original_file``.
"""

from acidclean.shared.acid.events import (
    ACID_COLUMNS,
    DELETE_OPERATION,
    IDENTITY_COLUMNS,
    INSERT_OPERATION,
    ORC_ACID_VERSION,
    BucketProperty,
    decode_bucket_property,
    encode_bucket_property,
)
from acidclean.shared.acid.names import (
    DirectoryKind,
    ParsedDirectory,
    base_name,
    bucket_file_name,
    delta_name,
    is_hidden,
    original_file_name,
    parse_base,
    parse_bucket_file,
    parse_bucket_id,
    parse_delta,
    parse_directory_name,
    parse_original_file,
)
from acidclean.shared.acid.state import AcidState, ListedFile, Listing, acid_state, obsolete_dirs
from acidclean.shared.acid.write_ids import (
    RangeResponse,
    ValidCleanerTxnList,
    ValidCleanerWriteIdList,
    ValidCompactorTxnList,
    ValidCompactorWriteIdList,
    ValidIdList,
    ValidTxnList,
    ValidWriteIdList,
)

__all__ = [
    "ACID_COLUMNS",
    "DELETE_OPERATION",
    "IDENTITY_COLUMNS",
    "INSERT_OPERATION",
    "ORC_ACID_VERSION",
    "AcidState",
    "BucketProperty",
    "DirectoryKind",
    "ListedFile",
    "Listing",
    "ParsedDirectory",
    "RangeResponse",
    "ValidCleanerTxnList",
    "ValidCleanerWriteIdList",
    "ValidCompactorTxnList",
    "ValidCompactorWriteIdList",
    "ValidIdList",
    "ValidTxnList",
    "ValidWriteIdList",
    "acid_state",
    "base_name",
    "bucket_file_name",
    "decode_bucket_property",
    "delta_name",
    "encode_bucket_property",
    "is_hidden",
    "obsolete_dirs",
    "original_file_name",
    "parse_base",
    "parse_bucket_file",
    "parse_bucket_id",
    "parse_delta",
    "parse_directory_name",
    "parse_original_file",
]
