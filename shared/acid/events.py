"""The ACID event schema of Hive's ORC files and the encoding of its ``bucket`` column.

Every row of a full-ACID ORC file is an event ``struct<operation:int, originalTransaction:bigint,
bucket:int, rowId:bigint, currentTransaction:bigint, row:struct<...>>``. A row's identity (Hive's
ROW__ID) is (originalTransaction, bucket, rowId); a delete event carries the identity of the row it
deletes and its own write id in currentTransaction. Since Hive 3 (ACID version 2) ``bucket`` is a
"bucket property" in BucketCodec V1 form rather than a plain bucket id. Pure constants and
arithmetic; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

OPERATION = "operation"
ORIGINAL_TRANSACTION = "originalTransaction"
BUCKET = "bucket"
ROW_ID = "rowId"
CURRENT_TRANSACTION = "currentTransaction"
ROW = "row"

ACID_COLUMNS = (OPERATION, ORIGINAL_TRANSACTION, BUCKET, ROW_ID, CURRENT_TRANSACTION, ROW)
IDENTITY_COLUMNS = (ORIGINAL_TRANSACTION, BUCKET, ROW_ID)

INSERT_OPERATION = 0
UPDATE_OPERATION = 1  # only in ACID version 1 files (Hive 2 before split update)
DELETE_OPERATION = 2

ORC_ACID_VERSION = 2
ACID_VERSION_METADATA_KEY = "hive.acid.version"

_V1_VERSION_BITS = 1 << 29
_VERSION_MASK = 0xE0000000
_BUCKET_ID_SHIFT = 16
_BUCKET_ID_MASK = 0x0FFF0000
_STATEMENT_ID_MASK = 0x00000FFF
MAX_BUCKET_ID = 0xFFF
MAX_STATEMENT_ID = 0xFFF


@dataclass(frozen=True)
class BucketProperty:
    """A decoded ``bucket`` value: codec version (0 = a plain bucket id, 1 = V1), bucket, statement."""

    codec_version: int
    bucket_id: int
    statement_id: int


def encode_bucket_property(bucket_id: int, statement_id: int = 0) -> int:
    """BucketCodec V1: 3 version bits (001), 1 reserved, 12 bits of bucket id, 4 reserved, 12 bits of
    statement id. ``encode_bucket_property(0) == 536870912``."""
    if not 0 <= bucket_id <= MAX_BUCKET_ID:
        raise ValueError(f"bucket id {bucket_id} is outside BucketCodec V1's range 0..{MAX_BUCKET_ID}")
    if not 0 <= statement_id <= MAX_STATEMENT_ID:
        raise ValueError(f"statement id {statement_id} is outside BucketCodec V1's range 0..{MAX_STATEMENT_ID}")
    return _V1_VERSION_BITS | (bucket_id << _BUCKET_ID_SHIFT) | statement_id


def decode_bucket_property(value: int) -> BucketProperty:
    """Decode a ``bucket`` column value; a value without version bits is a plain (V0) bucket id."""
    unsigned = value & 0xFFFFFFFF
    version = (unsigned & _VERSION_MASK) >> 29
    if version == 0:
        return BucketProperty(0, unsigned, 0)
    if version != 1:
        raise ValueError(f"bucket property {value} has unknown BucketCodec version {version}")
    return BucketProperty(1, (unsigned & _BUCKET_ID_MASK) >> _BUCKET_ID_SHIFT, unsigned & _STATEMENT_ID_MASK)
