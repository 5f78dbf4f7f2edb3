"""The grammar of Hive ACID directory and file names.

A table or partition directory holds ``base_W[_vT]``, ``delta_MIN_MAX[_STMT][_vT]`` and
``delete_delta_MIN_MAX[_STMT][_vT]`` directories, bucket files ``bucket_NNNNN[_ATTEMPT]`` inside them,
and, for tables converted from non-ACID, "original" files such as ``000000_0`` or
``000000_0_copy_1``. Names are parsed the way Hive's ``AcidUtils`` parses them (``ParsedBaseLight``,
``ParsedDeltaLight``): numbers are plain integers, so zero padding does not matter, and ``_v`` is
found by a substring search. Pure functions over names; no I/O.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import NamedTuple

from acidclean.shared.errors import AcidLayoutError

BASE_PREFIX = "base_"
DELTA_PREFIX = "delta_"
DELETE_DELTA_PREFIX = "delete_delta_"
VISIBILITY_PREFIX = "_v"
BUCKET_PREFIX = "bucket_"
ORC_ACID_VERSION_FILE = "_orc_acid_version"
METADATA_FILE = "_metadata_acid"
# The _metadata_acid of a compacted base, byte for byte as Hive 3.1's compactor
# (MetaDataFile.createCompactorMarker) and Hive 4's AcidMetaDataFile.writeToFile(COMPACTED) write it.
COMPACTED_METADATA = b'{"thisFileVersion":"0","dataFormat":"compacted"}'
FLUSH_LENGTH_SUFFIX = "_flush_length"

# Side files that are part of a base or delta although their names start with "_".
SIDE_FILES = frozenset({ORC_ACID_VERSION_FILE, METADATA_FILE})

LONG_MIN = -(2**63)
LONG_MAX = 2**63 - 1
_INT_MIN = -(2**31)
_INT_MAX = 2**31 - 1

# Java's Long.parseLong accepts an optional sign and digits; Python's int() would also accept
# spaces and "1_000", which Hive rejects.
_NUMBER = re.compile(r"[+-]?[0-9]+", re.ASCII)
# The names Hive writes, parsed in one match; anything else takes the general path below, which
# follows Hive's parser step by step (and explains what is wrong).
_COMMON_DELTA = re.compile(r"(delete_delta_|delta_)([0-9]{1,18})_([0-9]{1,18})(?:_([0-9]{1,9}))?(?:_v([0-9]{1,18}))?")
_COMMON_BASE = re.compile(r"base_([0-9]{1,18})(?:_v([0-9]{1,18}))?")
_BUCKET_FILE = re.compile(r"bucket_([0-9]+)(?:_([0-9]+))?", re.ASCII)
_ORIGINAL_FILE = re.compile(r"([0-9]+)_[0-9]+(?:_copy_[0-9]+)?", re.ASCII)


class DirectoryKind(Enum):
    """What an ACID directory holds."""

    BASE = "base"
    DELTA = "delta"
    DELETE_DELTA = "delete_delta"


class ParsedDirectory(NamedTuple):
    """A parsed ``base_``, ``delta_`` or ``delete_delta_`` directory name (immutable).

    ``min_write_id`` of a base is 0 (a base holds every write id up to ``max_write_id``), as in Hive's
    ``parseBaseOrDeltaBucketFilename``. ``statement_id`` is None when the name has none (a delta
    written by minor compaction or before Hive 1.3); ``visibility_txn_id`` is 0 without ``_vT``,
    which Hive treats as always visible. A named tuple rather than a dataclass because listings of
    100,000 directories are parsed on every cleanup.
    """

    name: str
    kind: DirectoryKind
    min_write_id: int
    max_write_id: int
    statement_id: int | None = None
    visibility_txn_id: int = 0

    @property
    def is_base(self) -> bool:
        return self.kind is DirectoryKind.BASE

    @property
    def is_delete_delta(self) -> bool:
        return self.kind is DirectoryKind.DELETE_DELTA

    @property
    def write_id(self) -> int:
        """A base's write id (the highest write id it holds); for a delta, its max write id."""
        return self.max_write_id

    @property
    def statement_order(self) -> int:
        """The statement id as Hive orders it: -1 when the name has none."""
        return -1 if self.statement_id is None else self.statement_id

    def sort_key(self) -> tuple[int, int, int, int, int, str]:
        """Hive's delta order (``ParsedDeltaLight.compareTo``): min ascending, max descending,
        statement id ascending (none first), ``delete_delta_x_y`` before ``delta_x_y``, and of two
        compactions of the same range the higher visibility transaction first (HIVE-29210)."""
        return (
            self.min_write_id,
            -self.max_write_id,
            self.statement_order,
            0 if self.is_delete_delta else 1,
            -self.visibility_txn_id,
            self.name,
        )


def is_hidden(name: str) -> bool:
    """Hive's hidden-file filter: names starting with ``_`` or ``.`` are not data
    (``_tmp...``, ``.hive-staging...``, ``_done``)."""
    return name.startswith(("_", "."))


def is_acid_directory_name(name: str) -> bool:
    """Whether a directory with this name is a base, delta or delete delta to Hive (by prefix only)."""
    return name.startswith((BASE_PREFIX, DELTA_PREFIX, DELETE_DELTA_PREFIX))


def _parse_long(text: str, name: str) -> int:
    value = int(text) if _NUMBER.fullmatch(text) else None
    if value is None or not LONG_MIN <= value <= LONG_MAX:
        raise AcidLayoutError(f"{name!r} is not a valid ACID directory name: {text!r} is not a 64-bit integer")
    return value


def parse_base(name: str) -> ParsedDirectory:
    """Parse ``base_W`` or ``base_W_vT``."""
    common = _COMMON_BASE.fullmatch(name)
    if common is not None:
        txn = common.group(2)
        return ParsedDirectory(name, DirectoryKind.BASE, 0, int(common.group(1)), None, int(txn) if txn else 0)
    if not name.startswith(BASE_PREFIX):
        raise AcidLayoutError(f"{name!r} is not a base directory name: it does not start with {BASE_PREFIX!r}")
    visibility = name.find(VISIBILITY_PREFIX)
    if visibility < 0:
        write_id = _parse_long(name[len(BASE_PREFIX) :], name)
        return ParsedDirectory(name, DirectoryKind.BASE, 0, write_id)
    write_id = _parse_long(name[len(BASE_PREFIX) : visibility], name)
    txn_id = _parse_long(name[visibility + len(VISIBILITY_PREFIX) :], name)
    return ParsedDirectory(name, DirectoryKind.BASE, 0, write_id, None, txn_id)


def parse_delta(name: str) -> ParsedDirectory:
    """Parse ``delta_MIN_MAX[_STMT][_vT]`` or ``delete_delta_MIN_MAX[_STMT][_vT]``."""
    common = _COMMON_DELTA.fullmatch(name)
    if common is not None:
        prefix, low, high, statement, txn = common.groups()
        return ParsedDirectory(
            name,
            DirectoryKind.DELTA if prefix == DELTA_PREFIX else DirectoryKind.DELETE_DELTA,
            int(low),
            int(high),
            None if statement is None else int(statement),
            int(txn) if txn else 0,
        )
    rest = name
    txn_id = 0
    visibility = rest.find(VISIBILITY_PREFIX)
    if visibility >= 0:
        txn_id = _parse_long(rest[visibility + len(VISIBILITY_PREFIX) :], name)
        rest = rest[:visibility]
    if rest.startswith(DELETE_DELTA_PREFIX):
        kind, rest = DirectoryKind.DELETE_DELTA, rest[len(DELETE_DELTA_PREFIX) :]
    elif rest.startswith(DELTA_PREFIX):
        kind, rest = DirectoryKind.DELTA, rest[len(DELTA_PREFIX) :]
    else:
        raise AcidLayoutError(f"{name!r} is not a delta directory name")
    parts = rest.split("_", 2)
    if len(parts) < 2:
        raise AcidLayoutError(f"{name!r} is not a valid delta directory name: it needs a min and a max write id")
    min_write_id = _parse_long(parts[0], name)
    max_write_id = _parse_long(parts[1], name)
    statement_id = None
    if len(parts) == 3:
        statement_id = _parse_long(parts[2], name)
        if not _INT_MIN <= statement_id <= _INT_MAX:
            raise AcidLayoutError(f"{name!r} is not a valid delta directory name: statement id out of range")
    return ParsedDirectory(name, kind, min_write_id, max_write_id, statement_id, txn_id)


def parse_directory_name(name: str) -> ParsedDirectory | None:
    """Parse a base or (delete) delta directory name; None for a name without those prefixes.

    A name with an ACID prefix that does not parse (``base_x``, ``delta_1``) raises
    :class:`AcidLayoutError`: Hive would fail on it too, and guessing could delete data.
    """
    if name.startswith(BASE_PREFIX):
        return parse_base(name)
    if name.startswith((DELTA_PREFIX, DELETE_DELTA_PREFIX)):
        return parse_delta(name)
    return None


def base_name(write_id: int, visibility_txn_id: int | None = None) -> str:
    """``base_0000059`` or ``base_0000059_v0000070``, zero padded as Hive writes them."""
    name = f"{BASE_PREFIX}{write_id:07d}"
    return name if visibility_txn_id is None else f"{name}{VISIBILITY_PREFIX}{visibility_txn_id:07d}"


def delta_name(
    min_write_id: int,
    max_write_id: int,
    statement_id: int | None = None,
    *,
    visibility_txn_id: int | None = None,
    delete: bool = False,
) -> str:
    """``delta_0000001_0000003``, ``delete_delta_0000004_0000004_0000``, ``..._v0000012``."""
    prefix = DELETE_DELTA_PREFIX if delete else DELTA_PREFIX
    name = f"{prefix}{min_write_id:07d}_{max_write_id:07d}"
    if statement_id is not None:
        name = f"{name}_{statement_id:04d}"
    return name if visibility_txn_id is None else f"{name}{VISIBILITY_PREFIX}{visibility_txn_id:07d}"


def bucket_file_name(bucket_id: int, attempt: int | None = None) -> str:
    """``bucket_00000`` or ``bucket_00000_1`` (a task attempt's copy)."""
    name = f"{BUCKET_PREFIX}{bucket_id:05d}"
    return name if attempt is None else f"{name}_{attempt}"


def original_file_name(bucket_id: int, copy: int | None = None) -> str:
    """``000000_0`` or ``000000_0_copy_1``, the names Hive gives non-ACID files."""
    name = f"{bucket_id:06d}_0"
    return name if copy is None else f"{name}_copy_{copy}"


def parse_bucket_file(name: str) -> int | None:
    """The bucket id of ``bucket_NNNNN[_ATTEMPT]``; None for any other name (``..._flush_length``)."""
    match = _BUCKET_FILE.fullmatch(name)
    return int(match.group(1)) if match else None


def parse_original_file(name: str) -> int | None:
    """The bucket id of an original file ``NNNNNN_N`` or ``NNNNNN_N_copy_N``; None for other names."""
    match = _ORIGINAL_FILE.fullmatch(name)
    return int(match.group(1)) if match else None


def parse_bucket_id(name: str) -> int | None:
    """Hive's ``AcidUtils.parseBucketId``: the bucket of an original or a bucket file name."""
    bucket = parse_original_file(name)
    return bucket if bucket is not None else parse_bucket_file(name)
