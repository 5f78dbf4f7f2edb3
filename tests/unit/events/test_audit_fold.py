"""The audit rebuilds each vacuum's history from events exactly, whatever order they are read in."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import click
import pytest

from acidclean.cli.audit import format_bytes, format_duration, parse_since, render_json, render_table
from acidclean.consumers.audit import decode_records, fold, select
from acidclean.schemas.events import RemovedDirectory
from acidclean.shared.bus.codec import encode
from acidclean.shared.bus.records import RawRecord
from acidclean.shared.settings import load_settings

from .factories import T0, delay, delta, done, lock, rejected, requested, started, vacuum, vacuum_failed, vacuum_started


def history() -> list[Any]:
    """A scripted history: one cleaned after two waits, one waiting, one stuck, one rejected, one garbage."""
    cleaned = vacuum(table="sales.orders", partition="ds=1", occurred_at=T0)
    waiting = vacuum(
        table="sales.orders",
        partition="ds=2",
        occurred_at=T0 + timedelta(minutes=1),
        compaction_type="MAJOR",
        new_directories=["base_0000009"],
    )
    stuck = vacuum(table="hr.people", partition=None, occurred_at=T0 + timedelta(minutes=2))
    refused = vacuum(table="hr.people", partition=None, occurred_at=T0 + timedelta(minutes=3))
    return [
        cleaned,
        delay(cleaned, 1),
        delay(cleaned, 2),
        done(
            cleaned,
            attempts=3,
            time_waited_ms=6000,
            directories_removed=[
                RemovedDirectory(name="delta_0000001_0000001_0000", file_count=1, bytes=1000),
                RemovedDirectory(name="delta_0000002_0000002_0000", file_count=1, bytes=2048),
            ],
        ),
        waiting,
        delay(waiting, 1, locks_held=[lock(5, "bob", "etl-1")]),
        stuck,
        delay(stuck, 7, stuck=True, stuck_since=T0 + timedelta(days=1), locks_held=[lock(9, "eve", "bi-3")]),
        refused,
        rejected(refused, occurred_at=refused.occurred_at + timedelta(seconds=1)),
        rejected(None, occurred_at=T0 + timedelta(minutes=4), reason_code="not_json", reason="not JSON"),
        delta(),
    ]


def test_each_vacuum_gets_one_row_with_its_state() -> None:
    rows = fold(history())
    assert [(r.table, r.partition, r.state) for r in rows] == [
        ("sales.orders", "ds=1", "cleaned"),
        ("sales.orders", "ds=2", "waiting"),
        ("hr.people", None, "stuck"),
        ("hr.people", None, "rejected"),
        (None, None, "rejected"),
    ]


def test_cleaned_row_says_what_was_removed_by_whom_after_how_long() -> None:
    row = fold(history())[0]
    assert (row.compaction_type, row.vacuum_time, row.new_directories) == ("MINOR", T0, ("delta_0000001_0000003",))
    assert (row.attempts, row.time_waited_ms, row.cleaner_id) == (3, 6000, "cleaner-1")
    assert row.directories_removed == ("delta_0000001_0000001_0000", "delta_0000002_0000002_0000")
    assert row.bytes_freed == 3048 and row.locks_held == () and row.next_check_at is None


def test_waiting_row_names_the_locks_and_the_next_check() -> None:
    events = history()
    row = fold(events)[1]
    assert (row.compaction_type, row.attempts, row.time_waited_ms) == ("MAJOR", 1, 2000)
    assert row.reason == "held by lock 5 (SHARED_READ, txn 3) by bob@etl-1"
    assert [lock.user for lock in row.locks_held] == ["bob"]
    assert row.next_check_at == events[5].due_at


def test_stuck_row_names_who_holds_it_and_since_when() -> None:
    row = fold(history())[2]
    assert row.stuck_since == T0 + timedelta(days=1) and row.attempts == 7
    assert row.reason == "held by lock 9 (SHARED_READ, txn 3) by eve@bi-3"


def test_rejected_row_gives_the_reason() -> None:
    rows = fold(history())
    assert rows[3].reason == "unsafe_path: '../etc' is not a child of the location"
    assert rows[3].time_waited_ms is None and rows[3].compaction_type == "MINOR"
    assert (rows[4].vacuum_id, rows[4].reason, rows[4].tenant) == (None, "not_json: not JSON", "acme")


def test_the_order_events_are_read_in_does_not_change_the_rows() -> None:
    events = history()
    expected = fold(events)
    rng = random.Random(3)
    for _ in range(50):
        rng.shuffle(events)
        assert fold(events) == expected


def test_duplicate_deliveries_are_counted_once() -> None:
    events = history()
    assert fold(events + events[:5]) == fold(events)


def test_a_second_cleanup_that_removed_nothing_changes_nothing() -> None:
    events = history()
    cleaned = events[0]
    again = done(
        cleaned, occurred_at=T0 + timedelta(minutes=10), directories_removed=[], cleaner_id="cleaner-2", attempts=1
    )
    row = fold([*events, again])[0]
    assert row == replace(fold(events)[0], last_event_at=again.occurred_at)


def test_cleaned_wins_over_a_later_rejection_of_a_redelivery() -> None:
    events = history()
    late = rejected(events[0], occurred_at=T0 + timedelta(hours=1))
    assert fold([*events, late])[0].state == "cleaned"


def test_vacuum_event_missing_from_the_log_is_recovered_from_its_delay_envelope() -> None:
    events = history()
    row = fold(events[1:])[0]
    assert (row.table, row.vacuum_time, row.state, row.compaction_type) == ("sales.orders", T0, "cleaned", "MINOR")


def test_metastore_outage_is_shown_as_the_reason_for_waiting() -> None:
    v = vacuum()
    row = fold([v, delay(v, check_error="thrift://hms:9083 timed out")])[0]
    assert (row.state, row.reason) == ("waiting", "metastore did not answer: thrift://hms:9083 timed out")


def test_a_dry_run_is_marked_as_such() -> None:
    v = vacuum()
    assert fold([v, done(v, dry_run=True)])[0].reason == "dry run: nothing deleted"


def test_a_vacuum_not_yet_checked_is_committed_with_no_time_waited() -> None:
    row = fold([vacuum()])[0]
    assert (row.state, row.attempts, row.time_waited_ms, row.reason) == ("committed", 0, None, None)


D1, D2, D3 = (f"delta_000000{i}_000000{i}_0000" for i in (1, 2, 3))
SECOND = timedelta(seconds=1)


def directories(*names: str) -> list[RemovedDirectory]:
    return [RemovedDirectory(name=name, file_count=1, bytes=100 * int(name[6:13])) for name in names]


def crash_after_delete() -> list[Any]:
    """A cleaner announced and deleted three directories, then died before reporting; its successor
    found nothing left and reported an empty CleanupDone."""
    v = vacuum(table="sales.orders", partition="ds=9", occurred_at=T0 + timedelta(minutes=5))
    return [
        v,
        delay(v, 1),
        started(v, attempt=2, directories_to_remove=directories(D1, D2, D3), occurred_at=v.occurred_at + SECOND * 4),
        done(v, attempts=2, directories_removed=[], cleaner_id="cleaner-2", occurred_at=v.occurred_at + SECOND * 9),
    ]


def test_directories_deleted_before_a_crash_are_listed_from_the_announcement() -> None:
    [row] = fold(crash_after_delete())
    assert row.state == "cleaned"
    assert row.directories_removed == (D1, D2, D3) and row.bytes_freed == 600
    assert row.cleaner_id == "cleaner-2" and row.attempts == 2
    assert row.reason == (
        "3 directories removed before a cleaner restart or retry (announced by CleanupStarted, not listed by "
        "CleanupDone)"
    )


def test_an_announcement_reported_in_full_adds_nothing_and_no_note() -> None:
    v = vacuum()
    events = [
        v,
        started(v, directories_to_remove=directories(D1, D2)),
        done(v, directories_removed=directories(D1, D2)),
    ]
    [row] = fold(events)
    assert (row.state, row.directories_removed, row.bytes_freed, row.reason) == ("cleaned", (D1, D2), 300, None)
    assert fold(events[::2]) == [row]  # the same row as without the announcement


def test_an_announcement_without_a_report_is_waiting_and_removes_nothing_yet() -> None:
    v = vacuum()
    first_check = delay(v, 1)
    [row] = fold([v, first_check, started(v, attempt=2, directories_to_remove=directories(D1, D2))])
    assert row.state == "waiting" and row.directories_removed == () and row.bytes_freed == 0
    assert row.reason == "cleaning started by cleaner-1 (2 directories announced), not yet reported"
    assert row.cleaner_id == "cleaner-1" and row.attempts == 2 and row.time_waited_ms == 4000
    assert row.locks_held == () and row.next_check_at is None  # the delay before it is over


def test_a_delete_that_failed_after_the_announcement_shows_the_delay_again() -> None:
    v = vacuum()
    announced = started(v, attempt=1, occurred_at=v.occurred_at + SECOND)
    retry = delay(v, 1, occurred_at=v.occurred_at + SECOND * 2, check_error="delete failed: denied")
    [row] = fold([v, announced, retry])
    assert (row.state, row.reason) == ("waiting", "metastore did not answer: delete failed: denied")
    assert row.next_check_at == retry.due_at


def test_a_restart_in_the_middle_of_deleting_lists_both_announcements() -> None:
    v = vacuum()
    events = [
        v,
        started(v, attempt=1, directories_to_remove=directories(D1, D2, D3)),
        # The restart finds D1 gone and announces (with another id) and reports the other two.
        started(v, attempt=1, directories_to_remove=directories(D2, D3), occurred_at=v.occurred_at + SECOND * 9),
        done(v, attempts=1, directories_removed=directories(D2, D3), occurred_at=v.occurred_at + SECOND * 10),
    ]
    [row] = fold(events)
    assert row.directories_removed == (D2, D3, D1) and row.bytes_freed == 600
    assert row.reason is not None and row.reason.startswith("1 directory removed before a cleaner restart")


def test_a_replayed_report_sharing_the_id_of_the_first_does_not_hide_what_it_listed() -> None:
    v = vacuum()
    first = done(v, directories_removed=directories(D1, D2))
    replay = first.model_copy(update={"occurred_at": first.occurred_at + SECOND * 60, "directories_removed": []})
    assert fold([v, replay, first]) == fold([v, first, replay])
    assert fold([v, replay, first])[0].directories_removed == (D1, D2)


def test_announcements_keep_the_fold_order_independent_and_duplicate_safe() -> None:
    events = history() + crash_after_delete()
    expected = fold(events)
    rng = random.Random(5)
    for _ in range(50):
        rng.shuffle(events)
        assert fold(events) == expected
        assert fold(events + events[::3]) == expected


def test_a_dry_run_report_does_not_confirm_an_announcement() -> None:
    v = vacuum()
    [row] = fold([v, started(v), done(v, dry_run=True, directories_removed=[])])
    assert row.directories_removed == () and row.reason == "dry run: nothing deleted"


def test_select_keeps_one_table_partition_and_time_window() -> None:
    rows = fold(history())
    assert [r.partition for r in select(rows, table="sales.orders")] == ["ds=1", "ds=2"]
    assert [r.partition for r in select(rows, table="sales.orders", partition="ds=2")] == ["ds=2"]
    assert [r.state for r in select(rows, since=T0 + timedelta(minutes=2, seconds=30))] == ["rejected", "rejected"]


def test_table_format_is_one_aligned_line_per_vacuum() -> None:
    text = render_table(fold(history()))
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["TABLE", "PARTITION", "TYPE"]
    assert len(lines) == 6
    assert lines[1].split() == [
        "sales.orders",
        "ds=1",
        "MINOR",
        "-",
        "2025-03-14T09:00:00Z",
        "delta_0000001_0000003",
        "cleaned",
        "3",
        "6.0s",
        "delta_0000001_0000001_0000,delta_0000002_0000002_0000",
        "3.0",
        "KiB",
        "cleaner-1",
    ]
    assert lines[5].split()[:3] == ["?", "-", "?"]
    state_column = lines[0].index("STATE")
    assert [line[state_column:].split()[0] for line in lines[1:]] == [
        "cleaned",
        "waiting",
        "stuck",
        "rejected",
        "rejected",
    ]


def test_json_format_is_an_array_with_every_field() -> None:
    data = json.loads(render_json(fold(history())))
    assert [row["state"] for row in data] == ["cleaned", "waiting", "stuck", "rejected", "rejected"]
    assert data[0]["vacuum_time"] == "2025-03-14T09:00:00Z" and data[0]["bytes_freed"] == 3048
    assert data[2]["locks_held"][0]["user"] == "eve" and data[2]["stuck_since"] == "2025-03-15T09:00:00Z"


def test_unreadable_records_become_rejections_dated_by_the_record() -> None:
    settings = load_settings(environ={}, overrides={"topic_prefix": "p."})
    good = encode(vacuum())
    records = [
        RawRecord("p.acid.vacuum.committed", 0, 0, good.key, good.value, good.headers, 1_700_000_000_000),
        RawRecord("p.acid.vacuum.committed", 0, 1, b"k", b"junk", (), 1_700_000_000_500),
        RawRecord("p.acid.cleanup.done", 0, 0, good.key, good.value, good.headers, 1_700_000_000_900),
    ]
    announced = encode(started(vacuum()))
    records.append(RawRecord("p.acid.cleanup.done", 0, 1, announced.key, announced.value, announced.headers, 1))
    events = list(decode_records(records, settings))
    assert type(events[0]).__name__ == "VacuumCommitted"
    assert type(events[3]).__name__ == "CleanupStarted"  # belongs on the done topic
    assert events[1].occurred_at == datetime.fromtimestamp(1_700_000_000.5, timezone.utc)
    assert events[2].reason_code == "unknown_event_type"  # a vacuum event does not belong on the done topic
    assert list(decode_records(records, settings)) == events


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2h", T0 - timedelta(hours=2)),
        ("7d", T0 - timedelta(days=7)),
        ("2025-03-01", datetime(2025, 3, 1, tzinfo=timezone.utc)),
        ("2025-03-01T10:00:00+02:00", datetime(2025, 3, 1, 8, tzinfo=timezone.utc)),
    ],
)
def test_since_accepts_iso_times_and_ages(text: str, expected: datetime) -> None:
    assert parse_since(text, T0) == expected


def test_since_refuses_anything_else() -> None:
    with pytest.raises(click.BadParameter, match="neither an ISO 8601 time"):
        parse_since("yesterday", T0)


def test_durations_and_sizes_read_like_an_operator_would_write_them() -> None:
    assert [format_duration(v) for v in (None, 1500, 125_000, 7_500_000, 90_000_000)] == [
        "-",
        "1.5s",
        "2m05s",
        "2h05m",
        "1d01h",
    ]
    assert [format_bytes(v) for v in (0, 1023, 1536, 5 * 1024**3)] == ["0 B", "1023 B", "1.5 KiB", "5.0 GiB"]


def test_rows_are_values() -> None:
    row = fold(history())[0]
    with pytest.raises(AttributeError):
        row.state = "waiting"  # type: ignore[misc]
    assert replace(row, state="waiting") != row


# -- requests (issue 13): requested, running, failed, then the vacuum's own states ---------------------


def request_story() -> tuple[Any, Any, Any]:
    """A request, its start on a vacuum service, and the vacuum it committed."""
    asked = requested(occurred_at=T0 - timedelta(minutes=1), requested_at=T0 - timedelta(minutes=1))
    running = vacuum_started(asked, occurred_at=T0 - timedelta(seconds=50), started_at=T0 - timedelta(seconds=50))
    answer = vacuum(occurred_at=T0, request_id=asked.event_id)
    return asked, running, answer


def test_a_request_alone_is_requested_with_its_reason() -> None:
    asked, _, _ = request_story()
    [row] = fold([asked])
    assert (row.state, row.reason) == ("requested", "12 deltas >= hive.compactor.delta.num.threshold 10")
    assert (row.request_id, row.vacuum_id, row.requested_at) == (str(asked.event_id), None, asked.requested_at)
    assert (row.table, row.partition, row.compaction_type, row.vacuum_time) == (
        "sales.orders",
        "ds=2025-03-14",
        "MINOR",
        None,
    )


def test_a_started_request_is_running_on_its_vacuum_service() -> None:
    asked, running, _ = request_story()
    [row] = fold([running, asked])
    assert row.state == "running" and row.vacuum_service_id == "vacuum-service-1"
    assert row.reason == "running on vacuum-service-1 since 2025-03-14T08:59:10Z"


def test_a_failed_request_says_why() -> None:
    asked, running, _ = request_story()
    failed = vacuum_failed(asked, reason_code="table_gone", message="sales.orders was dropped")
    [row] = fold([asked, running, failed])
    assert (row.state, row.reason) == ("failed", "table_gone: sales.orders was dropped")
    [row] = fold([asked, vacuum_failed(asked, reason_code="nothing_to_vacuum", message="1 delta, nothing to do")])
    assert (row.state, row.reason) == ("failed", "nothing_to_vacuum: 1 delta, nothing to do")


def test_a_committed_vacuum_shows_its_request_on_one_row() -> None:
    asked, running, answer = request_story()
    [row] = fold([asked, running, answer])
    assert (row.state, row.vacuum_id, row.request_id) == ("committed", str(answer.event_id), str(asked.event_id))
    assert (row.requested_at, row.vacuum_service_id, row.vacuum_time) == (asked.requested_at, "vacuum-service-1", T0)


def test_a_requested_vacuum_goes_on_to_wait_and_to_be_cleaned() -> None:
    asked, running, answer = request_story()
    [row] = fold([asked, running, answer, delay(answer, 1)])
    assert row.state == "waiting" and row.request_id == str(asked.event_id)
    [row] = fold([asked, running, answer, delay(answer, 1), done(answer)])
    assert row.state == "cleaned" and row.request_id == str(asked.event_id)


def test_a_vacuum_known_only_from_its_delay_still_finds_its_request() -> None:
    asked, running, answer = request_story()
    [row] = fold([asked, running, delay(answer, 1)])
    assert row.state == "waiting" and row.request_id == str(asked.event_id)


def test_a_vacuum_whose_request_was_not_read_keeps_the_request_id() -> None:
    _, _, answer = request_story()
    [row] = fold([answer])
    assert row.request_id == str(answer.request_id) and row.requested_at is None


def test_requests_keep_the_fold_order_independent_and_duplicate_safe() -> None:
    asked, running, answer = request_story()
    later = T0 + timedelta(minutes=7)
    other = requested(table="hr.people", partition=None, occurred_at=later, requested_at=later)
    events = [*history(), asked, running, answer, delay(answer, 1), other, vacuum_failed(other)]
    expected = fold(events)
    assert [row.state for row in expected if row.request_id] == ["waiting", "failed"]
    rng = random.Random(11)
    for _ in range(30):
        rng.shuffle(events)
        assert fold(events) == expected
        assert fold(events + events[::4]) == expected


def test_request_rows_print_and_select_like_the_others() -> None:
    asked, running, answer = request_story()
    rows = fold([asked, running, answer, requested(table="hr.people", partition=None)])
    text = render_table(rows)
    assert "REQUESTED" in text.splitlines()[0]
    assert [row.state for row in select(rows, table="hr.people")] == ["requested"]
    data = json.loads(render_json(rows))
    assert {row["request_id"] for row in data} == {str(asked.event_id), str(rows[0].request_id)}
    assert data[1]["requested_at"] == "2025-03-14T08:59:00Z"
