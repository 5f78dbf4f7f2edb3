"""Which write ids (or, on Hive 2, transaction ids) a snapshot may see: Hive's valid id lists.

A list is a high watermark plus exceptions (open and aborted ids at or below it). Everything at or
below the watermark that is not an exception is committed; everything above is unknown, so not
visible. The classes mirror Hive's storage-api, name for name, including its edge cases:

* :class:`ValidWriteIdList` is ``ValidReaderWriteIdList``: a reader's snapshot. A range of ids is
  valid for ALL, SOME or NONE of its ids, so a streaming delta with one open id is still read.
* :class:`ValidCompactorWriteIdList` is the compactor's list: only ranges wholly at or below the
  watermark are valid, and its exceptions are aborted ids only.
* :class:`ValidCleanerWriteIdList` (Hive 4, HIVE-27526) is the reader list except that a range
  reaching above the watermark is NONE, so nothing above a cleaner's watermark is ever touched.
* :class:`ValidTxnList` and :class:`ValidCompactorTxnList` are Hive 2's transaction-id lists
  (``ValidReadTxnList``, ``ValidCompactorTxnList``); directory names then carry transaction ids.
  ``ValidTxnList`` is also the list used to decide whether a ``_vT`` directory is visible.

String forms are Hive's: ``table:hwm:minOpenWriteId:open1,open2:aborted1,aborted2`` for write-id
lists and ``hwm:minOpenTxn:open:aborted`` for transaction lists, with ``9223372036854775807``
(Long.MAX_VALUE) as the "nothing open" minimum.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import ClassVar, TypeVar

from acidclean.shared.acid.names import LONG_MAX
from acidclean.shared.errors import AcidLayoutError

_ListT = TypeVar("_ListT", bound="ValidIdList")


class RangeResponse(Enum):
    """How many ids of a range a list accepts."""

    NONE = "NONE"
    SOME = "SOME"
    ALL = "ALL"


def _sorted_ids(ids: Iterable[int]) -> tuple[int, ...]:
    return tuple(sorted(set(ids)))


@dataclass(frozen=True)
class ValidIdList:
    """The shared semantics of Hive's reader lists; use one of the concrete classes.

    ``min_open_write_id`` is None when nothing is open (Hive stores Long.MAX_VALUE and returns null).
    """

    high_watermark: int
    open_ids: tuple[int, ...] = ()
    aborted_ids: tuple[int, ...] = ()
    min_open_write_id: int | None = None
    table_name: str | None = None
    exceptions: tuple[int, ...] = field(init=False, repr=False, compare=False)

    # Hive 2 (transaction ids) treats every base as written by the compactor and has no
    # "base at or below the min open id" shortcut; set by the transaction-id lists.
    hive2_base_rules: ClassVar[bool] = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "open_ids", _sorted_ids(self.open_ids))
        object.__setattr__(self, "aborted_ids", _sorted_ids(self.aborted_ids))
        if self.min_open_write_id == LONG_MAX:
            object.__setattr__(self, "min_open_write_id", None)
        object.__setattr__(self, "exceptions", _sorted_ids((*self.open_ids, *self.aborted_ids)))

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def from_ids(
        cls: type[_ListT],
        high_watermark: int,
        open_ids: Iterable[int] = (),
        aborted_ids: Iterable[int] = (),
        *,
        min_open_write_id: int | None = None,
        table_name: str | None = None,
    ) -> _ListT:
        """A list from its parts; the min open id defaults to the smallest open id, as the
        metastore computes it."""
        open_tuple = _sorted_ids(open_ids)
        if min_open_write_id is None and open_tuple:
            min_open_write_id = open_tuple[0]
        return cls(high_watermark, open_tuple, tuple(aborted_ids), min_open_write_id, table_name)

    @classmethod
    def all_committed(cls: type[_ListT], high_watermark: int = LONG_MAX, table_name: str | None = None) -> _ListT:
        """Every id up to ``high_watermark`` committed (Hive's no-argument constructor)."""
        return cls(high_watermark, table_name=table_name)

    @classmethod
    def from_string(cls: type[_ListT], text: str) -> _ListT:
        """Parse Hive's string form (``readFromString``); an empty string means all committed."""
        if not text:
            return cls.all_committed()
        values = text.split(":")
        table_name: str | None = None
        if cls._has_table_name():
            table_name = None if values[0].lower() == "null" else values[0]
            values = values[1:]
        if len(values) < 2:
            raise AcidLayoutError(f"{text!r} is not a valid id list: it needs a high watermark and a min open id")
        try:
            high_watermark = int(values[0])
            min_open = int(values[1])
            open_ids = [int(v) for v in values[2].split(",")] if len(values) > 2 and values[2] else []
            aborted = [int(v) for v in values[3].split(",")] if len(values) > 3 and values[3] else []
        except ValueError as error:
            raise AcidLayoutError(f"{text!r} is not a valid id list: {error}") from error
        return cls(high_watermark, tuple(open_ids), tuple(aborted), min_open, table_name)

    def to_string(self) -> str:
        """Hive's string form (``writeToString``)."""
        parts = [
            str(self.high_watermark),
            str(LONG_MAX if self.min_open_write_id is None else self.min_open_write_id),
            ",".join(map(str, self.open_ids)),
            ",".join(map(str, self.aborted_ids)),
        ]
        if self._has_table_name():
            parts.insert(0, "null" if self.table_name is None else self.table_name)
        return ":".join(parts)

    @classmethod
    def _has_table_name(cls) -> bool:
        return True

    def __str__(self) -> str:
        return self.to_string()

    # -- single ids -----------------------------------------------------------------------------

    def is_write_id_valid(self, write_id: int) -> bool:
        """Committed in this snapshot: at or below the watermark and not an exception."""
        return write_id <= self.high_watermark and not self._contains(self.exceptions, write_id)

    def is_write_id_aborted(self, write_id: int) -> bool:
        return self._contains(self.aborted_ids, write_id)

    def is_valid_base(self, write_id: int) -> bool:
        """Hive's ``isValidBase``: a compactor's base is usable only if nothing in it was open."""
        return write_id < (LONG_MAX if self.min_open_write_id is None else self.min_open_write_id) and (
            write_id <= self.high_watermark
        )

    # -- ranges ---------------------------------------------------------------------------------

    def all_write_ids_valid(self, min_write_id: int, max_write_id: int) -> bool:
        """Whether every id of ``min..max`` is committed, so rows written in that range need no
        row-by-row check (unlike ``is_write_id_range_valid``, the same answer for every list kind)."""
        return max_write_id <= self.high_watermark and self._count(self.exceptions, min_write_id, max_write_id) == 0

    def is_write_id_range_valid(self, min_write_id: int, max_write_id: int) -> RangeResponse:
        """ALL, SOME or NONE of ``min..max`` committed, counted exactly as Hive counts: the
        exceptions inside the range plus every id above the watermark."""
        if min_write_id > self.high_watermark:
            return RangeResponse.NONE
        if self.exceptions and self.exceptions[0] > max_write_id:
            return RangeResponse.ALL
        count = max(0, max_write_id - self.high_watermark) + self._count(self.exceptions, min_write_id, max_write_id)
        if count == 0:
            return RangeResponse.ALL
        if count == max_write_id - min_write_id + 1:
            return RangeResponse.NONE
        return RangeResponse.SOME

    def is_write_id_range_aborted(self, min_write_id: int, max_write_id: int) -> RangeResponse:
        """ALL, SOME or NONE of ``min..max`` aborted."""
        if self.high_watermark < min_write_id:
            return RangeResponse.NONE
        count = self._count(self.aborted_ids, min_write_id, max_write_id)
        if count == 0:
            return RangeResponse.NONE
        if count == max_write_id - min_write_id + 1:
            return RangeResponse.ALL
        return RangeResponse.SOME

    @staticmethod
    def _contains(ids: tuple[int, ...], value: int) -> bool:
        index = bisect.bisect_left(ids, value)
        return index < len(ids) and ids[index] == value

    @staticmethod
    def _count(ids: tuple[int, ...], low: int, high: int) -> int:
        if not ids or high < low:
            return 0
        return bisect.bisect_right(ids, high) - bisect.bisect_left(ids, low)


def _truncate_at_watermark(id_list: ValidIdList) -> None:
    """The compactor lists drop exceptions above the watermark: everything there is unresolved."""
    for name in ("open_ids", "aborted_ids"):
        ids = getattr(id_list, name)
        object.__setattr__(id_list, name, tuple(i for i in ids if i <= id_list.high_watermark))


class ValidWriteIdList(ValidIdList):
    """A reader's snapshot of one table's write ids (Hive's ``ValidReaderWriteIdList``)."""


class ValidCompactorWriteIdList(ValidWriteIdList):
    """The compactor's list: the watermark is the highest id below which everything is resolved,
    exceptions are aborted ids only (truncated at the watermark), and a range is ALL if it ends at or
    below the watermark, NONE otherwise; a partly resolved range is never compacted."""

    def __post_init__(self) -> None:
        _truncate_at_watermark(self)
        super().__post_init__()

    def is_write_id_range_valid(self, min_write_id: int, max_write_id: int) -> RangeResponse:
        return RangeResponse.ALL if self.high_watermark >= max_write_id else RangeResponse.NONE

    def is_write_id_aborted(self, write_id: int) -> bool:
        return self._contains(self.exceptions, write_id)


class _CleanerRangeRule(ValidIdList):
    """HIVE-27526's rule, shared by the write-id and the transaction-id cleaner lists: a range
    reaching above the watermark is NONE and no id above the watermark counts as aborted."""

    def is_write_id_range_valid(self, min_write_id: int, max_write_id: int) -> RangeResponse:
        if max_write_id > self.high_watermark:
            return RangeResponse.NONE
        return super().is_write_id_range_valid(min_write_id, max_write_id)

    def is_write_id_aborted(self, write_id: int) -> bool:
        return write_id <= self.high_watermark and super().is_write_id_aborted(write_id)


class ValidCleanerWriteIdList(_CleanerRangeRule, ValidWriteIdList):
    """The cleaner's list (Hive 4's ``ValidCleanerWriteIdList``): the reader list, except that a
    range reaching above the watermark is NONE and no id above the watermark counts as aborted."""


class ValidTxnList(ValidIdList):
    """Hive 2's reader transaction list (``ValidReadTxnList``), string ``hwm:minOpenTxn:open:aborted``.

    Used as the id list of a Hive 2 table, whose directory names carry transaction ids, and on
    Hive 4 to decide whether the transaction T of a ``_vT`` directory committed.
    """

    hive2_base_rules: ClassVar[bool] = True

    @classmethod
    def _has_table_name(cls) -> bool:
        return False

    def is_txn_valid(self, txn_id: int) -> bool:
        return self.is_write_id_valid(txn_id)

    def is_txn_aborted(self, txn_id: int) -> bool:
        return self.is_write_id_aborted(txn_id)

    def as_committed(self, txn_id: int) -> ValidTxnList:
        """This list as it will read once ``txn_id`` (open now) commits: the vacuum decides what its
        ``_vT`` output supersedes before T commits. Ids between the watermark and T stay unknown (open)."""
        if self.is_txn_aborted(txn_id):
            raise ValueError(f"transaction {txn_id} is aborted: it cannot commit")
        watermark = max(self.high_watermark, txn_id)
        gap = range(self.high_watermark + 1, txn_id)
        open_ids = sorted({*self.open_ids, *gap} - {txn_id})
        return ValidTxnList.from_ids(watermark, open_ids, self.aborted_ids)


class ValidCleanerTxnList(_CleanerRangeRule, ValidTxnList):
    """The cleaner's rule over a Hive 2 transaction list (Hive 2 had no such class; this is what its
    capped reader list would need to leave everything above the vacuum alone)."""


class ValidCompactorTxnList(ValidTxnList):
    """Hive 2's compactor transaction list: ALL for ranges at or below the watermark, else NONE."""

    def __post_init__(self) -> None:
        _truncate_at_watermark(self)
        super().__post_init__()

    def is_write_id_range_valid(self, min_write_id: int, max_write_id: int) -> RangeResponse:
        return RangeResponse.ALL if self.high_watermark >= max_write_id else RangeResponse.NONE
