"""The lock calls of :class:`~acidclean.shared.hive_metastore.HiveMetastore`: request, check, release
and list Hive's locks. Every lock component sets ``operationType`` and ``isTransactional`` (``isAcid``
on the wire), which the metastore requires of a lock taken inside a transaction; Hive 4 stores a
partition's name escaped once more, which :meth:`LockCalls.show_locks` hides both ways.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

from hmsclient.genthrift.hive_metastore import ttypes

from acidclean.shared.acid.partition_names import escape_path_name, unescape_path_name
from acidclean.shared.hms.connection import MetastoreConnection
from acidclean.shared.metastore import LockInfo, LockRequestComponent, LockResult, partition_name


class LockCalls(MetastoreConnection):
    """Hive's locks."""

    def lock(self, components: Sequence[LockRequestComponent], txn_id: int | None = None) -> LockResult:
        """Request locks (all or nothing). The state may be WAITING; poll with :meth:`check_lock`."""
        thrift_components = [
            ttypes.LockComponent(
                type=getattr(ttypes.LockType, component.lock_type.value),
                level=_level(component),
                dbname=component.db,
                tablename=component.table,
                partitionname=component.partition,
                operationType=getattr(ttypes.DataOperationType, component.operation.value),
                isTransactional=component.transactional,
            )
            for component in components
        ]
        request = ttypes.LockRequest(
            component=thrift_components, txnid=txn_id, user=self.user, hostname=self.hostname, agentInfo="acidclean"
        )
        response = self._call("lock", lambda c: c.lock(request))
        return LockResult(int(response.lockid), _state_name(response.state))

    def check_lock(self, lock_id: int) -> LockResult:
        response = self._call(f"check_lock({lock_id})", lambda c: c.check_lock(ttypes.CheckLockRequest(lockid=lock_id)))
        return LockResult(int(response.lockid), _state_name(response.state))

    def unlock(self, lock_id: int) -> None:
        self._call(f"unlock({lock_id})", lambda c: c.unlock(ttypes.UnlockRequest(lockid=lock_id)))

    def show_locks(
        self, db: str | None = None, table: str | None = None, partition: str | None = None
    ) -> list[LockInfo]:
        """Locks held or requested, optionally only those on one database, table or partition. The
        metastore matches ``partition`` as a string against the name it stored (lower-cased by Hive 3),
        and leaves out table-level locks: to find the locks on a partition, list the table's and
        keep those :func:`~acidclean.shared.acid.partition_names.lock_covers_partition` accepts."""
        requested = partition_name(partition)
        hive4 = self.major_version >= 4
        if hive4 and requested is not None:
            requested = _hive4_lock_name(requested)
        request = ttypes.ShowLocksRequest(dbname=db, tablename=table, partname=requested)
        response = self._call("show_locks", lambda c: c.show_locks(request))
        return _lock_infos(response.locks or [], hive4)


def _level(component: LockRequestComponent) -> int:
    if component.partition:
        return cast(int, ttypes.LockLevel.PARTITION)
    if component.table:
        return cast(int, ttypes.LockLevel.TABLE)
    return cast(int, ttypes.LockLevel.DB)


def _state_name(state: int) -> str:
    return str(ttypes.LockState._VALUES_TO_NAMES.get(state, str(state)))


def _hive4_lock_name(name: str) -> str:
    """The name a Hive 4 metastore stores for a lock on partition ``name`` (``TxnUtils.normalizePartitionCase``):
    split at ``/`` and ``=``, then ``FileUtils.makePartName``, which lower-cases the keys and escapes keys
    and values once more. Hive's escaped ``city=St. John%27s%232`` becomes ``city=St. John%2527s%25232``."""
    pairs = (component.partition("=") for component in name.split("/"))
    return "/".join(f"{escape_path_name(key.lower())}={escape_path_name(value)}" for key, _, value in pairs)


def _sent_lock_name(stored: str) -> str:
    """The partition name a client sent, from the name a Hive 4 metastore stored for its lock: each key
    and value unescaped once (the inverse of :func:`_hive4_lock_name`, keys lower-cased)."""
    pairs = (component.partition("=") for component in stored.split("/"))
    return "/".join(f"{unescape_path_name(key)}={unescape_path_name(value)}" for key, _, value in pairs)


def _lock_infos(elements: Iterable[Any], hive4: bool = False) -> list[LockInfo]:
    """``show_locks``'s rows as :class:`LockInfo`. Built positionally with the name tables looked up
    once: an unfiltered list of 10,000 locks is converted once or twice a cleanup interval, and a
    keyword call per row took twice as long (about 50 ms of held GIL against 25 ms)."""
    make = LockInfo._make
    types, states = ttypes.LockType._VALUES_TO_NAMES, ttypes.LockState._VALUES_TO_NAMES
    rows = []
    for element in elements:
        partition, lock_type, state = element.partname, element.type, element.state
        acquired, heartbeat = element.acquiredat, element.lastheartbeat
        rows.append(
            make(
                (
                    int(element.lockid),
                    int(element.txnid or 0),
                    element.dbname,
                    element.tablename,
                    _sent_lock_name(partition) if hive4 and partition else partition,
                    str(types[lock_type]) if lock_type in types else str(lock_type),
                    str(states[state]) if state in states else str(state),
                    element.user or "",
                    element.hostname or "",
                    int(acquired) if acquired else None,
                    int(heartbeat) if heartbeat else None,
                )
            )
        )
    return rows
