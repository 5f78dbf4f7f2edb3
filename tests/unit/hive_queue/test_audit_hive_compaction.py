"""``acidclean audit`` (and its plot) show the Hive compaction a vacuum served (issue 53, item 5): the row of a
request entered in Hive's queue carries its id, through the commit and the cleanup, whichever
decoder reads the records; a request of acidclean's own initiator carries none."""

from __future__ import annotations

from datetime import timedelta

from events.factories import T0, done, requested, vacuum

from acidclean.consumers.audit import fold
from acidclean.consumers.timeline import build_timeline
from acidclean.schemas.events import RequestedBy


def test_the_row_of_a_request_from_hives_queue_carries_its_compaction_id_through_commit_and_cleanup() -> None:
    asked = requested(hive_compaction_id=42, requested_by=RequestedBy(initiator_id="acidclean-h", trigger="hive_queue"))
    committed = vacuum(request_id=asked.event_id)
    own = requested(table="sales.returns")
    rows = fold([asked, committed, done(committed), own], now=T0 + timedelta(hours=1), overdue_after=timedelta(hours=1))
    by_table = {row.table: row for row in rows}
    served = by_table[asked.table]
    assert (served.state, served.hive_compaction_id) == ("cleaned", 42)
    assert served.to_json()["hive_compaction_id"] == 42
    assert by_table["sales.returns"].hive_compaction_id is None


def test_the_timeline_of_audit_plot_names_the_hive_compaction_of_a_request() -> None:
    asked = requested(hive_compaction_id=42)
    own = requested()
    [served] = build_timeline([asked], asked.table, asked.partition).marks
    [plain] = build_timeline([own], own.table, own.partition).marks
    assert served.label == "minor vacuum requested (Hive compaction 42)"
    assert plain.label == "minor vacuum requested"
