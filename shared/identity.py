"""Which table, and which files: the identities the cleaner checks just before it deletes (rule 9).

A name says nothing about which table or which file it names now: a table dropped and created again
under the same name gets the same location, and its writers, whose write ids restart at 1, the same
directory names. The cleaner therefore records, at its check, the table's identity (Hive 4's table
id; on Hive 2 and 3, which have none, its create time and location) and, for each obsolete directory,
every file with its storage identity and size, and compares both again just before it deletes. Pure
values and comparisons: nothing here touches storage or the metastore.
"""

from __future__ import annotations

from dataclasses import dataclass

from acidclean.shared.metastore import TableInfo


@dataclass(frozen=True)
class ListedFile:
    """One file under a directory, as a listing saw it.

    ``identity`` is what tells this file from another of the same name and size on its storage:
    ``ino=..,dev=..,mtime_ns=..`` on a local file system; ``etag=..,modified=..`` (and ``version=..``
    when the bucket is versioned) on S3; ``mtime_ns=..`` on HDFS, whose client does not expose the
    file id (a file written again with the same size in the same millisecond is not told apart).
    """

    path: str  # relative to the directory listed, "/"-separated
    size: int
    identity: str


@dataclass(frozen=True)
class TableIdentity:
    """The table (or partition) a cleanup was checked against."""

    table_id: int | None  # Hive 4's TBL_ID; None on Hive 2 and 3
    create_time: int | None  # seconds, as the metastore keeps it
    location: str
    partition_create_time: int | None = None  # a partition dropped and added again has a new one

    @classmethod
    def of(cls, table: TableInfo) -> TableIdentity:
        return cls(table.table_id, table.create_time, table.location, table.partition_create_time)

    def describe(self) -> str:
        if self.table_id is not None:
            return f"table id {self.table_id} at {self.location}"
        return f"created at {self.create_time} at {self.location}"


def table_difference(checked: TableIdentity, now: TableIdentity) -> str | None:
    """Why ``now`` is not the table ``checked`` was, or None when it is the same table.

    The id decides when both have one (Hive 4); else the create time; the location always counts,
    since the directories listed at the check are children of it."""
    if checked.location.rstrip("/") != now.location.rstrip("/"):
        return f"its location changed from {checked.location} to {now.location}"
    if checked.table_id is not None and now.table_id is not None:
        if checked.table_id != now.table_id:
            return f"it is another table now (table id {now.table_id}, checked {checked.table_id})"
    elif _differ(checked.create_time, now.create_time):
        return f"it was created again (create time {now.create_time}, checked {checked.create_time})"
    if _differ(checked.partition_create_time, now.partition_create_time):
        return (
            f"its partition was added again (create time {now.partition_create_time}, "
            f"checked {checked.partition_create_time})"
        )
    return None


def _differ(checked: int | None, now: int | None) -> bool:
    return checked is not None and now is not None and checked != now


def file_difference(checked: ListedFile | None, now: ListedFile) -> str | None:
    """Why the file listed ``now`` is not the one listed at the check, or None when it is."""
    if checked is None:
        return "not listed at the check"
    if checked.size != now.size:
        return f"size changed from {checked.size} to {now.size}"
    if checked.identity != now.identity:
        return f"another file now ({now.identity}, checked {checked.identity})"
    return None
