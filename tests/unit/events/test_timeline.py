"""The table timeline behind `audit --plot`: delta directories counted from the events."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from acidclean.consumers.plot import draw
from acidclean.consumers.timeline import TimelineEvent, build_timeline
from acidclean.schemas.events import CleanupDone, DeltaCommitted, RemovedDirectory

from .factories import T0, delay, done, requested, started, vacuum, vacuum_failed, vacuum_started

TABLE, PARTITION = "sales.orders", "ds=2025-03-14"


def ingest(write_id: int) -> DeltaCommitted:
    return DeltaCommitted(
        tenant="acme",
        table=TABLE,
        partition=PARTITION,
        occurred_at=T0 - timedelta(minutes=10 - write_id),
        location="/warehouse/sales.db/orders/ds=2025-03-14",
        delta_directory=f"delta_{write_id:07d}_{write_id:07d}_0000",
        write_id=write_id,
        bytes=100,
    )


def story() -> list[TimelineEvent]:
    commits = [ingest(w) for w in (1, 2, 3)]
    compacted = vacuum(
        new_directories=["delta_0000001_0000003"],
        obsolete_directories=[c.delta_directory for c in commits],
    )
    removed = [RemovedDirectory(name=c.delta_directory, file_count=1, bytes=100) for c in commits]
    return [*commits, compacted, delay(compacted, 1), delay(compacted, 2), done(compacted, directories_removed=removed)]


def test_count_rises_with_commits_and_vacuum_and_falls_at_cleanup() -> None:
    timeline = build_timeline(story(), TABLE, PARTITION)
    assert [count for _, count in timeline.points] == [1, 2, 3, 4, 4, 4, 1]
    assert [mark.kind for mark in timeline.marks] == ["vacuum", "wait", "wait", "cleanup"]
    assert timeline.marks[-1].label == "cleanup: 3 removed"


def test_duplicates_and_other_tables_change_nothing() -> None:
    events = story()
    other = ingest(9).model_copy(update={"table": "sales.returns"})
    timeline = build_timeline([*events, events[-1], events[0], other], TABLE, PARTITION)
    assert [count for _, count in timeline.points] == [1, 2, 3, 4, 4, 4, 1]


def test_directories_announced_before_a_crash_fall_when_the_empty_report_arrives() -> None:
    *before, compacted, first, second, report = story()
    assert isinstance(report, CleanupDone)
    announced = started(compacted, directories_to_remove=report.directories_removed, occurred_at=report.occurred_at)
    later = report.occurred_at + timedelta(seconds=1)
    successor = report.model_copy(update={"directories_removed": [], "occurred_at": later})
    timeline = build_timeline([*before, compacted, first, second, announced, successor], TABLE, PARTITION)
    assert [count for _, count in timeline.points] == [1, 2, 3, 4, 4, 4, 1]  # the announcement adds no point
    assert timeline.marks[-1].label == "cleanup: 3 removed"
    assert build_timeline([*story(), announced], TABLE, PARTITION) == build_timeline(story(), TABLE, PARTITION)


def test_plot_is_a_png_file(tmp_path: Path) -> None:
    target = tmp_path / "timeline.png"
    draw(build_timeline(story(), TABLE, PARTITION), target)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert target.stat().st_size > 10_000


def test_a_request_and_its_run_are_marked_without_changing_the_count() -> None:
    asked = requested(table=TABLE, partition=PARTITION, occurred_at=T0 - timedelta(minutes=6))
    running = vacuum_started(asked, started_at=T0 - timedelta(minutes=5), occurred_at=T0 - timedelta(minutes=5))
    timeline = build_timeline([*story(), asked, running], TABLE, PARTITION)
    assert [count for _, count in timeline.points] == [1, 2, 3, 4, 4, 4, 1]
    assert [mark.kind for mark in timeline.marks] == ["requested", "running", "vacuum", "wait", "wait", "cleanup"]
    assert timeline.marks[1].label == "vacuum running on vacuum-service-1"


def test_a_failed_request_is_marked_and_other_tables_requests_are_not() -> None:
    asked = requested(table=TABLE, partition=PARTITION, occurred_at=T0 - timedelta(minutes=6))
    failed = vacuum_failed(asked, reason_code="nothing_to_vacuum", message="nothing to do")
    elsewhere = requested(table="sales.returns", partition=None)
    timeline = build_timeline([asked, failed, elsewhere], TABLE, PARTITION)
    assert [(mark.kind, mark.label) for mark in timeline.marks] == [
        ("requested", "minor vacuum requested"),
        ("failed", "vacuum failed: nothing_to_vacuum"),
    ]
    assert timeline.points == ()


def test_plot_with_a_request_is_a_png_file(tmp_path: Path) -> None:
    asked = requested(table=TABLE, partition=PARTITION, occurred_at=T0 - timedelta(minutes=6))
    target = tmp_path / "timeline.png"
    draw(build_timeline([*story(), asked, vacuum_started(asked)], TABLE, PARTITION), target)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
