"""`audit --partition` and its plot find a partition's history however the operator spells it: events
carry the metastore's escaped name (``city=St. John%27s%232``), operators type ``city=St. John's#2``."""

from __future__ import annotations

from acidclean.consumers.audit import fold, select
from acidclean.consumers.timeline import build_timeline

from .factories import delay, vacuum

ESCAPED = "city=St. John%27s%232"
LOCATION = "/warehouse/sales.db/orders/city=St. John%27s%232"


def test_audit_rows_and_the_timeline_of_a_partition_are_found_by_either_spelling() -> None:
    mine = vacuum(partition=ESCAPED, location=LOCATION)
    other = vacuum(partition="city=St. John%27s%233", location=LOCATION + "3")
    events = [mine, delay(mine), other]
    rows = fold(events)
    for typed in (ESCAPED, "city=St. John's#2", "CITY=St. John's#2"):
        assert [row.partition for row in select(rows, partition=typed)] == [ESCAPED], typed
        timeline = build_timeline(events, "sales.orders", typed)
        assert [mark.kind for mark in timeline.marks] == ["vacuum", "wait"], typed
    assert select(rows, partition="city=st. john's#2") == []  # values keep their case
