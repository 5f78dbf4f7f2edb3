"""Rule 8 and Hive's compaction queue: a vacuum refuses while Hive compacts any name of its directory
(``refuse_while_hive_compacts`` with the sharers the vacuum lock covers). A fake queue."""

from __future__ import annotations

import pytest

from acidclean.producers.vacuum import refuse_while_hive_compacts
from acidclean.schemas.common import SharedLocation
from acidclean.shared.errors import VacuumRefusedError
from acidclean.shared.metastore import CompactionInfo, TableInfo

pytestmark = [pytest.mark.rule8]

WHERE = "file:/warehouse/sales.db/t/p=real"
ALIAS = TableInfo("sales", "t", WHERE, {}, ("p",), (), 1, (), "p=latest")
REAL = SharedLocation(table="sales.t", partition="p=real", location=WHERE)


class Queue:
    def __init__(self, *queued: CompactionInfo) -> None:
        self.queued = queued
        self.asked: list[tuple[str, str, str | None]] = []

    def compactions(self, db: str, table: str, partition: str | None = None) -> list[CompactionInfo]:
        self.asked.append((db, table, partition))
        return [c for c in self.queued if (c.db, c.table) == (db, table) and c.partition in (None, partition)]


def queued(partition: str | None, state: str = "initiated") -> CompactionInfo:
    return CompactionInfo(7, "sales", "t", partition, "MAJOR", state)


def test_hive_compacting_the_other_name_of_the_directory_refuses_the_vacuum() -> None:
    queue = Queue(queued("p=real"))
    with pytest.raises(VacuumRefusedError, match="partition p=real, which shares this vacuum's directory in state"):
        refuse_while_hive_compacts(queue, ALIAS, [REAL])  # type: ignore[arg-type]
    assert queue.asked == [("sales", "t", "p=latest"), ("sales", "t", "p=real")]


def test_without_the_sharers_only_the_own_name_is_asked() -> None:
    """What f8b7487 did: ``show_compact`` for ``p=latest`` alone, which Hive's queue never names."""
    queue = Queue(queued("p=real"))
    refuse_while_hive_compacts(queue, ALIAS)  # type: ignore[arg-type]
    assert queue.asked == [("sales", "t", "p=latest")]


def test_a_finished_compaction_of_the_other_name_holds_nothing_up() -> None:
    queue = Queue(queued("p=real", state="succeeded"))
    refuse_while_hive_compacts(queue, ALIAS, [REAL])  # type: ignore[arg-type]


def test_the_own_names_compaction_is_named_without_the_sharing_note() -> None:
    queue = Queue(queued("p=latest"))
    with pytest.raises(VacuumRefusedError) as refused:
        refuse_while_hive_compacts(queue, ALIAS, [REAL])  # type: ignore[arg-type]
    assert "shares" not in str(refused.value) and "partition p=latest in state initiated" in str(refused.value)
