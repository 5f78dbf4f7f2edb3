"""Hive's compaction queue as a worker sees it: take the next request, move it through Hive's states.

The calls are Hive 4's remote-worker calls (``find_next_compact2``, ``mark_compacted``,
``mark_cleaned``, ``mark_failed``, ``mark_refused``), over the bindings generated from Hive 4's IDL
(:mod:`.generated`), on the connection of a :class:`HiveMetastore`. Taking an entry is Hive's own
compare-and-set (``initiated`` to ``working`` with the worker id, in one metastore transaction), so
Hive's Worker and acidclean never both hold one. Hive 2 and 3 answer the worker calls "Invalid method
name" (:class:`QueueCallsMissingError`); ``compact2`` and ``show_compact`` exist on all three.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from thrift.Thrift import TApplicationException

from acidclean.shared.errors import MetastoreError
from acidclean.shared.hive4_queue.generated import ThriftHiveMetastore as _service
from acidclean.shared.hive4_queue.generated import ttypes as _ttypes
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.metastore import ACIDCLEAN_WORKER_PREFIX

T = TypeVar("T")
# The generated bindings are untyped (thrift-compiler writes no annotations).
ttypes: Any = _ttypes
ThriftHiveMetastore: Any = _service

# Hive's worker ids are "host-thread"; a metastore restarting on a host hands that host's entries back
# (revokeFromLocalWorkers: CQ_WORKER_ID LIKE 'host%'). acidclean's never start with a host name.
WORKER_PREFIX = ACIDCLEAN_WORKER_PREFIX
COMPACTION_TYPES = {1: "MINOR", 2: "MAJOR", 3: "REBALANCE", 4: "ABORT_TXN_CLEANUP"}


class QueueCallsMissingError(MetastoreError):
    """The metastore lacks Hive 4's remote-worker calls (Hive 2 and 3)."""


@dataclass(frozen=True)
class QueueEntry:
    """One entry of Hive's compaction queue, as ``find_next_compact2`` or ``show_compact`` gives it."""

    compaction_id: int
    db: str
    table: str
    partition: str | None
    compaction_type: str  # MAJOR, MINOR, REBALANCE, ABORT_TXN_CLEANUP
    state: str  # as Hive prints it: initiated, working, ready for cleaning, succeeded, failed, refused, ...
    worker_id: str | None = None
    run_as: str | None = None
    started_at_ms: int | None = None  # when a worker took it
    enqueued_at_ms: int | None = None  # when it was requested
    error_message: str | None = None
    pool: str | None = None
    properties: tuple[tuple[str, str], ...] = ()  # what compact2 carried (find_next_compact2 gives it)
    initiator_id: str | None = None  # who entered it (Hive 4's show_compact says)


@dataclass(frozen=True)
class QueueRequest:
    """What ``compact2`` answered: the entry's id, its state, and whether this call entered it (False:
    an entry of the same table or partition was already queued, and ``compaction_id`` names it)."""

    compaction_id: int
    state: str
    accepted: bool
    message: str | None = None


class HiveCompactionQueue:
    """Hive's compaction queue of one metastore. Thread-safe as its :class:`HiveMetastore` is."""

    def __init__(self, metastore: HiveMetastore) -> None:
        self.metastore = metastore

    def _client(self, what: str, operation: Callable[[Any], T]) -> T:
        def on_connection(connection: Any) -> T:
            return operation(ThriftHiveMetastore.Client(connection._iprot, connection._oprot))

        try:
            return self.metastore.call(what, on_connection)
        except MetastoreError as error:
            cause = error.__cause__
            if isinstance(cause, TApplicationException) and cause.type == TApplicationException.UNKNOWN_METHOD:
                raise QueueCallsMissingError(
                    f"the metastore has no {what} call (Hive 2 and 3 lack the compaction queue's worker calls); "
                    "serve Hive's queue from a Hive 4 metastore or turn hive_queue off"
                ) from error
            raise

    # the worker's calls ---------------------------------------------------------------------------

    def take_next(self, worker_id: str, worker_version: str, pool: str | None = None) -> QueueEntry | None:
        """Take the next ``initiated`` entry (of ``pool``; None: the default pool) for ``worker_id``: it
        is ``working`` and this worker's when this returns, or None when nothing waits."""
        request = ttypes.FindNextCompactRequest(workerId=worker_id, workerVersion=worker_version, poolName=pool)
        found = self._client("find_next_compact2", lambda client: client.find_next_compact2(request))
        if found is None or found.ci is None:
            return None
        return _entry_of_struct(found.ci, worker_id)

    def mark_compacted(self, entry: QueueEntry) -> None:
        """``working`` -> ``ready for cleaning``: the vacuum committed."""
        self._client(f"mark_compacted({entry.compaction_id})", lambda c: c.mark_compacted(_struct(entry)))

    def mark_cleaned(self, entry: QueueEntry, highest_write_id: int | None = None) -> None:
        """``ready for cleaning`` -> ``succeeded`` (moved to Hive's history): the cleanup is done."""
        struct = _struct(entry, highest_write_id=highest_write_id)
        self._client(f"mark_cleaned({entry.compaction_id})", lambda c: c.mark_cleaned(struct))

    def mark_failed(self, entry: QueueEntry, message: str) -> None:
        """-> ``failed`` with ``message`` (moved to Hive's history)."""
        struct = _struct(entry, error_message=message)
        self._client(f"mark_failed({entry.compaction_id})", lambda c: c.mark_failed(struct))

    def mark_refused(self, entry: QueueEntry, message: str) -> None:
        """-> ``refused`` with ``message``: nothing to compact, as Hive's Worker reports it."""
        struct = _struct(entry, error_message=message)
        self._client(f"mark_refused({entry.compaction_id})", lambda c: c.mark_refused(struct))

    # requests and listing (every metastore) ------------------------------------------------------

    def request(
        self,
        db: str,
        table: str,
        partition: str | None,
        compaction_type: str,
        *,
        run_as: str,
        initiator_id: str | None = None,
        initiator_version: str | None = None,
        pool: str | None = None,
        properties: dict[str, str] | None = None,
    ) -> QueueRequest:
        """Enter a request as ``ALTER TABLE ... COMPACT`` does (``compact2``)."""
        request = ttypes.CompactionRequest(
            dbname=db,
            tablename=table,
            partitionname=partition,
            type=getattr(ttypes.CompactionType, compaction_type.upper()),
            runas=run_as,
            initiatorId=initiator_id,
            initiatorVersion=initiator_version,
            poolName=pool,
            properties=properties,
        )
        answer = self._client(f"compact2({db}.{table})", lambda c: c.compact2(request))
        return QueueRequest(int(answer.id), str(answer.state), bool(answer.accepted), answer.errormessage)

    def entries(self, db: str | None = None, table: str | None = None) -> list[QueueEntry]:
        """The queue and the history the metastore keeps (``show_compact``), of one table when asked.
        Hive 4 filters itself; Hive 2 and 3 list everything and the rest is left out here."""
        request = ttypes.ShowCompactRequest(dbName=db, tbName=table)
        answer = self._client("show_compact", lambda c: c.show_compact(request))
        found = [_entry_of_element(element) for element in answer.compacts or []]
        if db is not None:
            found = [entry for entry in found if entry.db.lower() == db.lower()]
        if table is not None:
            found = [entry for entry in found if entry.table.lower() == table.lower()]
        return found

    def entry(self, compaction_id: int, db: str | None = None, table: str | None = None) -> QueueEntry | None:
        """The entry ``compaction_id`` (in the queue or the history), or None."""
        return next((e for e in self.entries(db, table) if e.compaction_id == compaction_id), None)


def _entry_of_struct(struct: Any, worker_id: str | None = None) -> QueueEntry:
    return QueueEntry(
        compaction_id=int(struct.id),
        db=struct.dbname,
        table=struct.tablename,
        partition=struct.partitionname or None,
        compaction_type=COMPACTION_TYPES.get(struct.type, str(struct.type)),
        state=_STATE_NAMES.get((struct.state or "").strip("\x00"), "working"),  # find_next sends no state
        worker_id=struct.workerId or worker_id,
        run_as=struct.runas,
        started_at_ms=struct.start or None,  # find_next sends 0
        enqueued_at_ms=struct.enqueueTime or None,
        error_message=struct.errorMessage,
        pool=struct.poolname,
        properties=tuple(stringable_map(struct.properties or "").items()),
    )


def _entry_of_element(element: Any) -> QueueEntry:
    return QueueEntry(
        compaction_id=int(element.id) if element.id is not None else 0,
        db=element.dbname,
        table=element.tablename,
        partition=element.partitionname or None,
        compaction_type=COMPACTION_TYPES.get(element.type, str(element.type)),
        state=element.state,
        worker_id=None if element.workerid in (None, "None") else element.workerid,
        run_as=element.runAs,
        started_at_ms=element.start,
        enqueued_at_ms=element.enqueueTime,
        error_message=element.errorMessage,
        pool=element.poolName,
        initiator_id=element.initiatorId,
    )


def stringable_map(text: str) -> dict[str, str]:
    """Hive's ``StringableMap`` text (``CompactionInfoStruct.properties``): the entry count, then each key
    and value as ``<length>:<characters>``, e.g. ``1:3:key5:value``; a length of -1 is a null value."""
    if not text:
        return {}
    count_text, rest = text.split(":", 1)
    found: dict[str, str] = {}
    for _ in range(int(count_text)):
        key, rest = _counted(rest)
        value, rest = _counted(rest)
        if key is not None and value is not None:
            found[key] = value
    return found


def _counted(text: str) -> tuple[str | None, str]:
    if text.startswith("-1"):  # a null
        return None, text[3:] if text.startswith("-1:") else text[2:]
    length_text, rest = text.split(":", 1)
    length = int(length_text)
    return rest[:length], rest[length:]


# CompactionInfoStruct.state carries the queue's one-letter code.
_STATE_NAMES = {
    "i": "initiated",
    "w": "working",
    "r": "ready for cleaning",
    "c": "cleaning",
    "s": "succeeded",
    "f": "failed",
    "a": "did not initiate",
    "x": "refused",
    "p": "aborted",
}


def _struct(entry: QueueEntry, *, highest_write_id: int | None = None, error_message: str | None = None) -> Any:
    return ttypes.CompactionInfoStruct(
        id=entry.compaction_id,
        dbname=entry.db,
        tablename=entry.table,
        partitionname=entry.partition,
        type=getattr(ttypes.CompactionType, entry.compaction_type),
        runas=entry.run_as,
        workerId=entry.worker_id,
        start=entry.started_at_ms,
        highestWriteId=highest_write_id,
        errorMessage=error_message,
        poolname=entry.pool,
    )
