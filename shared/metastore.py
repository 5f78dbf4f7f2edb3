"""What acidclean needs of a Hive Metastore: the :class:`Metastore` protocol and its plain values.

Nothing here talks to a metastore or imports Thrift: the safety rules and the fakes of the unit tests
use these types alone. :mod:`acidclean.shared.hive_metastore` is the implementation over Thrift
(hmsclient), for Hive 2.3 and Hive 3+ metastores alike.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol
from urllib.parse import urlparse

from acidclean.shared.acid.id_lists import MetastoreKind
from acidclean.shared.acid.partition_names import make_partition_name
from acidclean.shared.errors import MetastoreError

NO_MIN_OPEN = 9223372036854775807  # Long.MAX_VALUE: Hive's "no open id" marker in id list strings


class LockType(enum.Enum):
    """Hive's lock types, by the names the metastore uses."""

    SHARED_READ = "SHARED_READ"
    SHARED_WRITE = "SHARED_WRITE"
    EXCLUSIVE = "EXCLUSIVE"


class Operation(enum.Enum):
    """What a lock is taken for (``DataOperationType``): the metastore requires it inside a transaction."""

    SELECT = "SELECT"
    INSERT = "INSERT"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    NO_TXN = "NO_TXN"


class LockInfo(NamedTuple):
    """One row of ``show_locks``. A named tuple, not a frozen dataclass: a metastore holding 10,000
    locks lists them all in every unfiltered call, and building them took 74 ms of held GIL a call
    (several a cleanup interval); as a tuple it takes 24 ms, about a third."""

    lock_id: int
    txn_id: int
    db: str
    table: str | None
    partition: str | None
    lock_type: str
    state: str
    user: str
    host: str
    acquired_at_ms: int | None
    last_heartbeat_ms: int | None


@dataclass(frozen=True)
class LockResult:
    lock_id: int
    state: str

    @property
    def acquired(self) -> bool:
        return self.state == "ACQUIRED"


@dataclass(frozen=True)
class TableInfo:
    """What acidclean needs of a table (or of one partition, when ``partition`` is set)."""

    db: str
    table: str
    location: str
    parameters: dict[str, str]
    partition_keys: tuple[str, ...]
    bucket_columns: tuple[str, ...]
    bucket_count: int
    columns: tuple[tuple[str, str], ...]
    partition: str | None = None  # the metastore's own (escaped) name of the partition
    # Which table this is, beyond its name (rule 9): Hive 4's table id; the create time (seconds) on every version.
    table_id: int | None = None
    create_time: int | None = None
    partition_create_time: int | None = None  # of the partition, when ``partition`` is set

    @property
    def transactional(self) -> bool:
        return self.parameters.get("transactional", "").lower() == "true"

    @property
    def orc_compress(self) -> str:
        return self.parameters.get("orc.compress", "ZLIB").upper()


# The states of Hive's compaction queue in which a compaction still writes or is still to be cleaned
# (``SHOW COMPACTIONS`` prints them so; Hive 2 and 3 have the same three).
ACTIVE_COMPACTION_STATES = ("initiated", "working", "ready for cleaning")
# The worker ids acidclean takes Hive queue entries under start with it; Hive's are "host-thread".
ACIDCLEAN_WORKER_PREFIX = "acidclean"


@dataclass(frozen=True)
class CompactionInfo:
    """One row of Hive's compaction queue and history (``show_compact``, ``SHOW COMPACTIONS``)."""

    compaction_id: int | None
    db: str
    table: str
    partition: str | None
    compaction_type: str  # MAJOR, MINOR, or Hive 4's REBALANCE and ABORT_TXN_CLEANUP
    state: str  # as Hive prints it: initiated, working, ready for cleaning, succeeded, failed, ...
    worker_id: str | None = None
    run_as: str | None = None
    started_at_ms: int | None = None  # enqueued or started, as the metastore reports ``start``

    @property
    def active(self) -> bool:
        """Hive's compactor is writing this compaction or has still to clean up after it."""
        return self.state in ACTIVE_COMPACTION_STATES

    @property
    def taken_by_acidclean(self) -> bool:
        """acidclean took this entry of Hive's queue (``acidclean hive-queue``): its vacuum, not Hive's."""
        return (self.worker_id or "").startswith(ACIDCLEAN_WORKER_PREFIX)


@dataclass(frozen=True)
class LockRequestComponent:
    db: str
    table: str | None = None
    partition: str | None = None
    lock_type: LockType = LockType.SHARED_READ
    operation: Operation = Operation.SELECT
    transactional: bool = True


class Metastore(Protocol):
    """What the vacuum job, the ingest writer, the reader and the cleaner need of a metastore."""

    @property
    def kind(self) -> MetastoreKind: ...

    def get_table(self, db: str, table: str, partition: str | None = None) -> TableInfo: ...

    def list_partitions(self, db: str, table: str) -> list[str]:
        """The table's partitions, as the metastore names them (escaped, ``k=v/k2=v2``)."""
        ...

    def partition_info(self, table: TableInfo, partition: str | None) -> TableInfo:
        """``table`` narrowed to one of its partitions, as ``get_table(db, table, partition)`` answers."""
        ...

    def get_all_tables(self, db: str) -> list[str]: ...

    def get_tables(self, db: str, tables: Sequence[str]) -> dict[str, TableInfo]:
        """Several tables of one database in one call, by lower-cased name; absent ones left out."""
        ...

    def partition_locations(self, table: TableInfo) -> dict[str, str]:
        """Every partition of ``table`` by the metastore's name, with its location, in one call."""
        ...

    def partitions_located(self, table: TableInfo, names: Sequence[str]) -> dict[str, str]:
        """The partitions of ``table`` named ``names``, with their locations, in one call; unknown ones absent."""
        ...

    def open_txn(self) -> int: ...

    def commit_txn(self, txn_id: int) -> None: ...

    def abort_txn(self, txn_id: int) -> None: ...

    def heartbeat(self, txn_id: int | None = None, lock_id: int | None = None) -> None: ...

    def allocate_write_id(self, txn_id: int, db: str, table: str) -> int: ...

    def valid_write_ids(self, db: str, table: str) -> str: ...

    def valid_txn_list(self) -> str: ...

    def lock(self, components: Sequence[LockRequestComponent], txn_id: int | None = None) -> LockResult: ...

    def check_lock(self, lock_id: int) -> LockResult: ...

    def unlock(self, lock_id: int) -> None: ...

    def show_locks(
        self, db: str | None = None, table: str | None = None, partition: str | None = None
    ) -> list[LockInfo]: ...

    def compactions(self, db: str, table: str, partition: str | None = None) -> list[CompactionInfo]:
        """Hive's compactions of the table (for a partition: of it, in any spelling, or of the whole
        table), queued, running and past, as ``show_compact`` lists them."""
        ...


def parse_metastore_uris(uris: str) -> list[tuple[str, int]]:
    """``thrift://h1:9083,thrift://h2:9083`` as host and port pairs."""
    parsed: list[tuple[str, int]] = []
    for raw in uris.split(","):
        raw = raw.strip()
        if not raw:
            continue
        url = urlparse(raw if "://" in raw else f"thrift://{raw}")
        if url.scheme != "thrift" or not url.hostname:
            raise MetastoreError(f"metastore URI {raw!r} is not of the form thrift://host:port")
        parsed.append((url.hostname, url.port or 9083))
    if not parsed:
        raise MetastoreError("no metastore URI given: set hive.metastore.uris (e.g. thrift://host:9083)")
    return parsed


def partition_name(spec: str | dict[str, str] | None) -> str | None:
    """A partition spelled ``k=v/k2=v2`` (escaped or not: :meth:`HiveMetastore.get_table` resolves
    it), or Hive's escaped name of a dict of raw values."""
    if spec is None or spec == "":
        return None
    if isinstance(spec, dict):
        return make_partition_name(list(spec), list(spec.values()))
    # Only the first key is checked here: a value typed as it is may hold '/' (city=a/b).
    if "=" not in spec.split("/")[0] or spec.startswith("="):
        raise MetastoreError(f"partition {spec!r} is not of the form k=v/k2=v2")
    return spec


def split_table_name(name: str) -> tuple[str, str]:
    """``db.table`` as its two parts, with a clear error otherwise."""
    db, dot, table = name.partition(".")
    if not dot or not db or not table or "." in table:
        raise MetastoreError(f"table {name!r} must be written as DB.TABLE")
    return db.lower(), table.lower()


# --- which table: the identity the cleaner checks just before it deletes (rule 9) -----------------
# A name says nothing about which table it names now: a table dropped and created again under the same
# name gets the same location, and its writers, whose write ids restart at 1, the same directory names.
# The cleaner records at its check the table's identity (Hive 4's table id; on Hive 2 and 3, which have
# none, its create time and location) and compares it again just before it deletes.


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
