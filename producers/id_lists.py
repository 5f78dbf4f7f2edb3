"""The valid id lists a reader and the compactor use, built from the metastore's answer.

:meth:`HiveMetastore.valid_write_ids` answers in Hive's string form ``db.table:hwm:minOpen:open:aborted``
on both metastore generations. On Hive 3+ the ids are the table's write ids; on Hive 2 they are
transaction ids (what Hive 2's delta names carry), which Hive's rules treat with its transaction-id
lists. Pure functions.
"""

from __future__ import annotations

from acidclean.shared.acid.write_ids import (
    ValidCompactorTxnList,
    ValidCompactorWriteIdList,
    ValidIdList,
    ValidTxnList,
    ValidWriteIdList,
)
from acidclean.shared.metastore import MetastoreKind


def _without_table(text: str) -> str:
    return text.split(":", 1)[1] if text.count(":") >= 4 else text


def reader_ids(text: str, kind: MetastoreKind) -> ValidIdList:
    """A reader's snapshot: every committed id up to the high watermark, minus open and aborted ones."""
    if kind is MetastoreKind.HIVE2:
        return ValidTxnList.from_string(_without_table(text))
    return ValidWriteIdList.from_string(text)


def compactor_ids(text: str, kind: MetastoreKind, *, ignore_open: bool = False) -> ValidIdList:
    """The compactor's list (Hive's ``createValidCompactWriteIdList``): its high watermark is just
    below the lowest open id, so nothing an open transaction may still write into is compacted, and
    its exceptions are the aborted ids below that. ``ignore_open`` builds the list as if nothing were
    open, to tell an operator what an open transaction is holding back."""
    snapshot = ValidWriteIdList.from_string(text if kind is MetastoreKind.HIVE3 else "t:" + _without_table(text))
    high_watermark = snapshot.high_watermark
    if snapshot.min_open_write_id is not None and not ignore_open:
        high_watermark = min(high_watermark, snapshot.min_open_write_id - 1)
    aborted = [i for i in snapshot.aborted_ids if i <= high_watermark]
    if kind is MetastoreKind.HIVE2:
        return ValidCompactorTxnList.from_ids(high_watermark, (), aborted)
    return ValidCompactorWriteIdList.from_ids(high_watermark, (), aborted, table_name=snapshot.table_name)


def lowest_open_id(text: str, kind: MetastoreKind) -> int | None:
    """The lowest open id of the metastore's list, or None when nothing is open."""
    return reader_ids(text, kind).min_open_write_id


def id_name(kind: MetastoreKind) -> str:
    """How an id is called on this metastore, for messages."""
    return "transaction" if kind is MetastoreKind.HIVE2 else "write id"
