"""The calls of :class:`~acidclean.shared.hive_metastore.HiveMetastore` on Hive's own compaction queue:
what Hive's compactor has queued, run and finished (``show_compact``), and queueing a compaction
(``compact2``) as ``ALTER TABLE ... COMPACT`` does.
"""

from __future__ import annotations

from typing import Any

from hmsclient.genthrift.hive_metastore import ttypes

from acidclean.shared.acid.partition_names import lock_covers_partition
from acidclean.shared.hms.connection import MetastoreConnection
from acidclean.shared.hms.wire import ShowCompactRequest
from acidclean.shared.metastore import CompactionInfo


class CompactionCalls(MetastoreConnection):
    """Hive's compaction queue and history."""

    def compactions(self, db: str, table: str, partition: str | None = None) -> list[CompactionInfo]:
        """Hive's compactions of ``db.table`` (with ``partition``: of that partition, in any spelling,
        or of the whole table), from ``show_compact``: the queue and the history the metastore keeps.
        Hive 4 filters by table itself; Hive 2 and 3 list all and the rest is left out here."""
        request = ShowCompactRequest(db.lower(), table.lower())
        response = self._call("show_compact", lambda c: c.show_compact(request))
        found = []
        for element in response.compacts or []:
            info = _compaction_info(element)
            if info.db.lower() != db.lower() or info.table.lower() != table.lower():
                continue
            if partition is not None and not lock_covers_partition(info.partition, partition):
                continue
            found.append(info)
        return found

    def request_compaction(self, db: str, table: str, partition: str | None, compaction_type: str) -> int | None:
        """Queue a compaction in Hive's compaction queue (``compact2``), as ``ALTER TABLE ... COMPACT``
        does; returns its id. For tests and operators: acidclean itself never asks Hive to compact."""
        request = ttypes.CompactionRequest(
            dbname=db,
            tablename=table,
            partitionname=partition,
            type=getattr(ttypes.CompactionType, compaction_type.upper()),
            runas=self.user,
        )
        response = self._call(f"compact2({db}.{table})", lambda c: c.compact2(request))
        return int(response.id) if response.id is not None else None


# Thrift's CompactionType: Hive 2 and 3 know the first two.
_COMPACTION_TYPES = {1: "MINOR", 2: "MAJOR", 3: "REBALANCE", 4: "ABORT_TXN_CLEANUP"}


def _compaction_info(element: Any) -> CompactionInfo:
    return CompactionInfo(
        compaction_id=int(element.id) if element.id is not None else None,
        db=element.dbname,
        table=element.tablename,
        partition=element.partitionname or None,
        compaction_type=_COMPACTION_TYPES.get(element.type, str(element.type)),
        state=element.state or "",
        worker_id=element.workerid or None,
        run_as=element.runAs or None,
        started_at_ms=int(element.start) if element.start else None,
    )
