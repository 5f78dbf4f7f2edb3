"""Every id-list policy in one place: what a reader, the compactor and the cleaner may see.

:meth:`HiveMetastore.valid_write_ids` answers in Hive's string form ``db.table:hwm:minOpen:open:aborted``
on both metastore generations. On Hive 3+ the ids are the table's write ids; on Hive 2 they are
transaction ids (what Hive 2's delta names carry), which Hive's rules treat with its transaction-id
lists. The cleaner's list is capped at a vacuum's highest write id, so nothing above it is ever
touched. Pure functions.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from acidclean.shared.acid.names import parse_directory_name
from acidclean.shared.acid.write_ids import (
    ValidCleanerTxnList,
    ValidCleanerWriteIdList,
    ValidCompactorTxnList,
    ValidCompactorWriteIdList,
    ValidIdList,
    ValidTxnList,
    ValidWriteIdList,
)
from acidclean.shared.errors import AcidLayoutError


class MetastoreKind(enum.Enum):
    """Which ids a metastore's delta names carry."""

    HIVE2 = "hive2"  # deltas carry transaction ids
    HIVE3 = "hive3"  # deltas carry per-table write ids


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


@dataclass(frozen=True)
class CleanerIds:
    """The metastore's current id list capped at the vacuum's highest write id.

    Open and aborted ids above the cap are dropped: nothing above it is visible to the cleaner.
    """

    kind: MetastoreKind
    cap: int
    open_ids: tuple[int, ...]
    aborted_ids: tuple[int, ...]
    table_name: str | None = None

    def relevant_open_ids(self, directory_names: Iterable[str]) -> tuple[int, ...]:
        """Open ids that matter for this directory. On Hive 3+ write ids are per table, so every open
        id at or below the cap is this table's. On Hive 2 transaction ids are global: an open
        transaction matters only if a listed delta's range holds it (Hive 2's own Cleaner ignores
        open transactions altogether); otherwise one long transaction on another table would stop
        every cleanup."""
        if self.kind is not MetastoreKind.HIVE2:
            return self.open_ids
        ranges = []
        for name in directory_names:
            try:
                parsed = parse_directory_name(name)
            except AcidLayoutError:
                continue
            if parsed is not None and not parsed.is_base:
                ranges.append((parsed.min_write_id, parsed.max_write_id))
        return tuple(i for i in self.open_ids if any(low <= i <= high for low, high in ranges))

    def valid_ids(self) -> ValidIdList:
        """The cleaner list, once no relevant id is open (a clean waits while one is)."""
        if self.kind is MetastoreKind.HIVE2:
            return ValidCleanerTxnList(self.cap, (), self.aborted_ids)
        return ValidCleanerWriteIdList(self.cap, (), self.aborted_ids, None, self.table_name)


def cleaner_ids(kind: MetastoreKind, valid_ids_text: str, highest_write_id: int) -> CleanerIds:
    """Parse the metastore's id list (``db.t:hwm:minOpen:open:aborted``) and cap it at the vacuum's
    highest write id. On a Hive 2 metastore the ids are transaction ids and Hive 2's base rules apply."""
    current = ValidWriteIdList.from_string(valid_ids_text)
    cap = min(current.high_watermark, highest_write_id)
    return CleanerIds(
        kind=kind,
        cap=cap,
        open_ids=tuple(i for i in current.open_ids if i <= cap),
        aborted_ids=tuple(i for i in current.aborted_ids if i <= cap),
        table_name=current.table_name,
    )
