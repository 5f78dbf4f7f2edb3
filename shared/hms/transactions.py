"""The transaction calls of :class:`~acidclean.shared.hive_metastore.HiveMetastore`: open, commit,
abort and heartbeat a transaction, allocate its write id, and the valid id lists of Hive's snapshots.
On Hive 2 the "write id" of a transaction is its transaction id and a table's valid id list is built
from the open and aborted transactions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hmsclient.genthrift.hive_metastore import ttypes

from acidclean.shared.acid.id_lists import MetastoreKind
from acidclean.shared.errors import MetastoreError
from acidclean.shared.hms.connection import MetastoreConnection
from acidclean.shared.metastore import NO_MIN_OPEN


class TransactionCalls(MetastoreConnection):
    """Transactions, write ids and valid id lists."""

    def open_txn(self) -> int:
        request = ttypes.OpenTxnRequest(num_txns=1, user=self.user, hostname=self.hostname, agentInfo="acidclean")
        response = self._call("open_txns", lambda c: c.open_txns(request))
        return int(response.txn_ids[0])

    def commit_txn(self, txn_id: int) -> None:
        self._call(f"commit_txn({txn_id})", lambda c: c.commit_txn(ttypes.CommitTxnRequest(txnid=txn_id)))

    def abort_txn(self, txn_id: int) -> None:
        self._call(f"abort_txn({txn_id})", lambda c: c.abort_txn(ttypes.AbortTxnRequest(txnid=txn_id)))

    def heartbeat(self, txn_id: int | None = None, lock_id: int | None = None) -> None:
        request = ttypes.HeartbeatRequest(lockid=lock_id, txnid=txn_id)
        self._call("heartbeat", lambda c: c.heartbeat(request))

    def allocate_write_id(self, txn_id: int, db: str, table: str) -> int:
        """The write id of ``txn_id`` on the table: allocated on Hive 3+, the transaction id on Hive 2."""
        if self.kind is MetastoreKind.HIVE2:
            return txn_id
        request = ttypes.AllocateTableWriteIdsRequest(dbName=db, tableName=table, txnIds=[txn_id])
        response = self._call(f"allocate_table_write_ids({db}.{table})", lambda c: c.allocate_table_write_ids(request))
        return int(response.txnToWriteIds[0].writeId)

    def valid_txn_list(self) -> str:
        """Hive's ValidReadTxnList string ``hwm:minOpen:open,ids:aborted,ids`` of all transactions."""
        info = self._call("get_open_txns_info", lambda c: c.get_open_txns_info())
        open_ids = sorted(int(t.id) for t in info.open_txns or [] if t.state == ttypes.TxnState.OPEN)
        aborted_ids = sorted(int(t.id) for t in info.open_txns or [] if t.state == ttypes.TxnState.ABORTED)
        min_open = open_ids[0] if open_ids else NO_MIN_OPEN
        hwm = int(info.txn_high_water_mark)
        return f"{hwm}:{min_open}:{_ids(open_ids)}:{_ids(aborted_ids)}"

    def valid_write_ids(self, db: str, table: str) -> str:
        """The table's valid id list in Hive's string form ``db.table:hwm:minOpen:open:aborted``.

        On Hive 2 the ids are transaction ids (that is what Hive 2's delta names carry).
        """
        return self.valid_write_ids_of([(db, table)], self.valid_txn_list())[0]

    def valid_write_ids_of(self, tables: Sequence[tuple[str, str]], txn_list: str) -> list[str]:
        """The valid id lists of several tables (``(db, table)``, in that order) in the snapshot of the
        transaction list ``txn_list`` (:meth:`valid_txn_list`'s form): one call on Hive 3+, none on
        Hive 2, whose id lists are the transaction list itself."""
        full_names = [f"{db}.{table}" for db, table in tables]
        if self.kind is MetastoreKind.HIVE2 or not full_names:
            return [f"{full_name}:{txn_list}" for full_name in full_names]
        request = ttypes.GetValidWriteIdsRequest(fullTableNames=full_names, validTxnList=txn_list)
        what = f"get_valid_write_ids({', '.join(full_names[:3])}{', ...' if len(full_names) > 3 else ''})"
        response = self._call(what, lambda c: c.get_valid_write_ids(request))
        by_name = {str(ids.fullTableName).lower(): ids for ids in response.tblValidWriteIds or []}
        texts = []
        for full_name in full_names:
            ids = by_name.get(full_name.lower())
            if ids is None:
                raise MetastoreError(f"metastore answered {what} without {full_name}'s write ids")
            texts.append(_write_ids_text(full_name, ids))
        return texts


def _write_ids_text(full_name: str, ids: Any) -> str:
    """A thrift ``TableValidWriteIds`` in Hive's string form ``db.table:hwm:minOpen:open:aborted``."""
    invalid = [int(i) for i in ids.invalidWriteIds or []]
    aborted_flags = _bits(ids.abortedBits or b"", len(invalid))
    open_write_ids = [i for i, aborted in zip(invalid, aborted_flags, strict=True) if not aborted]
    aborted_write_ids = [i for i, aborted in zip(invalid, aborted_flags, strict=True) if aborted]
    min_open_write_id = int(ids.minOpenWriteId) if ids.minOpenWriteId is not None else NO_MIN_OPEN
    return (
        f"{full_name}:{int(ids.writeIdHighWaterMark)}:{min_open_write_id}:"
        f"{_ids(open_write_ids)}:{_ids(aborted_write_ids)}"
    )


def _ids(ids: Sequence[int]) -> str:
    return ",".join(str(i) for i in ids)


def _bits(bitset: bytes, count: int) -> list[bool]:
    """Java BitSet.toByteArray (little-endian bit order) as booleans."""
    return [bool(bitset[i // 8] >> (i % 8) & 1) if i // 8 < len(bitset) else False for i in range(count)]
