"""What the event log proves about a Hive queue entry acidclean serves, and the state it moves to:
never ahead of the log (ready for cleaning only after the commit, succeeded only after the cleanup),
whatever order the topics are read in, and nothing for an entry acidclean did not request."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest
from events.factories import done, vacuum

from acidclean.producers.hive_queue.progress import QueueLog, Step, next_steps, request_id_of
from acidclean.schemas.events import (
    CleanupDone,
    RequestedBy,
    VacuumFailed,
    VacuumFigures,
    VacuumRequested,
    VacuumThresholds,
)
from acidclean.shared.hive4_queue.queue import stringable_map

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def request(compaction_id: int | None = 42) -> VacuumRequested:
    return VacuumRequested(
        event_id=request_id_of("default", compaction_id or 0),
        tenant="default",
        table="db.t",
        occurred_at=NOW,
        location="file:///w/db.db/t",
        compaction_type="MAJOR",
        reason="ALTER TABLE ... COMPACT 'major'",
        figures=VacuumFigures(delta_count=0, delete_delta_count=0, delta_bytes=0, base_bytes=0, aborted_txns=0),
        thresholds=VacuumThresholds(delta_num=10, delta_pct=0.1, aborted_txns=1000),
        requested_by=RequestedBy(initiator_id="acidclean-h", trigger="hive_queue"),
        requested_at=NOW,
        hive_compaction_id=compaction_id,
    )


def failed(of: VacuumRequested, code: str = "error", message: str = "boom") -> VacuumFailed:
    return VacuumFailed(
        tenant="default",
        table="db.t",
        occurred_at=NOW,
        correlation_id=of.event_id,
        reason_code=code,  # type: ignore[arg-type]
        message=message,
        failed_at=NOW,
    )


def test_the_request_id_is_the_same_for_the_same_entry_and_differs_between_entries_and_tenants() -> None:
    assert request_id_of("default", 42) == request_id_of("default", 42)
    assert request_id_of("default", 42) != request_id_of("default", 43)
    assert request_id_of("default", 42) != request_id_of("acme", 42)


def test_a_requested_entry_stays_working_until_its_vacuum_commits() -> None:
    asked = request()
    folded = QueueLog().fold([asked])
    assert next_steps(folded.by_compaction[42], "working") == []


def test_a_committed_vacuum_moves_the_entry_to_ready_for_cleaning_and_its_cleanup_to_succeeded() -> None:
    asked = request()
    committed = vacuum(request_id=asked.event_id, highest_write_id=9)
    assert next_steps(QueueLog().fold([asked, committed]).by_compaction[42], "working") == [Step("mark_compacted")]
    cleaned = done(committed)
    progress = QueueLog().fold([asked, committed, cleaned]).by_compaction[42]
    assert next_steps(progress, "ready for cleaning") == [Step("mark_cleaned", highest_write_id=9)]
    # Both at once when the queue missed the commit (its metastore was down).
    assert next_steps(progress, "working") == [Step("mark_compacted"), Step("mark_cleaned", highest_write_id=9)]


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (1, 2, 0), (2, 0, 1)])
def test_the_topics_read_in_any_order_fold_to_the_same_progress(order: tuple[int, int, int]) -> None:
    asked = request()
    committed = vacuum(request_id=asked.event_id, highest_write_id=9)
    events = [asked, committed, done(committed)]
    progress = QueueLog().fold([events[i] for i in order]).by_compaction[42]
    assert progress.vacuum_id == committed.event_id
    assert progress.cleaned


def test_a_dry_run_cleanup_does_not_make_the_entry_succeed() -> None:
    asked = request()
    committed = vacuum(request_id=asked.event_id)
    dry = done(committed, dry_run=True)
    assert next_steps(QueueLog().fold([asked, committed, dry]).by_compaction[42], "ready for cleaning") == []


def test_a_failed_vacuum_fails_the_entry_with_its_message_and_nothing_to_vacuum_refuses_it() -> None:
    asked = request()
    progress = QueueLog().fold([failed(asked, "error", "RuntimeError: disk full")]).fold([asked]).by_compaction[42]
    assert next_steps(progress, "working") == [Step("mark_failed", message="acidclean error: RuntimeError: disk full")]
    nothing = QueueLog().fold([asked, failed(asked, "nothing_to_vacuum", "already compacted")]).by_compaction[42]
    assert next_steps(nothing, "working") == [Step("mark_refused", message="acidclean: already compacted")]


def test_entries_acidclean_did_not_request_or_that_are_history_are_left_alone() -> None:
    unrelated = request(compaction_id=None)
    committed = vacuum(request_id=unrelated.event_id)
    folded = QueueLog().fold([unrelated, committed, done(committed)])
    assert folded.by_compaction == {}
    assert next_steps(None, "working") == []
    asked = request()
    committed = vacuum(request_id=asked.event_id)
    progress = QueueLog().fold([asked, committed, done(committed)]).by_compaction[42]
    for state in ("succeeded", "failed", "initiated", "refused"):
        assert next_steps(progress, state) == []


def test_a_cleanup_of_another_vacuum_does_not_move_the_entry() -> None:
    asked = request()
    other = vacuum(request_id=uuid.uuid4())
    progress = QueueLog().fold([asked, other, done(other)]).by_compaction[42]
    assert (progress.vacuum_id, progress.cleaned) == (None, False)
    assert isinstance(done(other), CleanupDone)


def test_hives_stringable_map_is_read_as_hive_writes_it() -> None:
    """``CompactionInfoStruct.properties`` as Hive 4.0.1 sent it for a compact2 with two properties."""
    text = "2:16:acidclean.reason20:12 deltas >= 10: x=y17:acidclean.trigger5:sweep"
    assert stringable_map(text) == {"acidclean.reason": "12 deltas >= 10: x=y", "acidclean.trigger": "sweep"}
    assert stringable_map("") == {}
    assert stringable_map("1:1:k-1") == {}  # a null value
    value = '{"a": "1:2:3"}'
    assert stringable_map(f"1:3:key{len(value)}:{value}") == {"key": value}
