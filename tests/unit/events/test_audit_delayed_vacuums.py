"""The audit folds a DelayedVacuums as the delay envelopes it stands for: one per waiting vacuum."""

from __future__ import annotations

import json
import random
from datetime import timedelta
from typing import Any

from acidclean.consumers.audit import AuditRow, FastDecoder, decode_records, fold
from acidclean.consumers.timeline import build_timeline
from acidclean.consumers.waiting import build_groups, entry_of_envelope
from acidclean.schemas.events import TOPIC_FIELD, DelayedVacuums, RemovedDirectory, WaitingVacuum
from acidclean.shared.bus.codec import encode
from acidclean.shared.bus.records import RawRecord
from acidclean.shared.settings import load_settings

from .factories import T0, delay, delayed_vacuums, done, lock, unchanged_vacuums, vacuum

NOW = T0 + timedelta(hours=3)
OVERDUE = timedelta(minutes=30)
SETTINGS = load_settings(environ={}, overrides={"topic_prefix": "p."})


def _two_of_one_key() -> tuple[Any, Any]:
    first = vacuum(table="sales.orders", partition="ds=1", occurred_at=T0, lock_snapshot=[lock(1), lock(2)])
    second = vacuum(table="sales.orders", partition="ds=1", occurred_at=T0 + timedelta(minutes=1))
    return first, second


def _each_alone(envelope: DelayedVacuums) -> list[Any]:
    """The DelayEnvelopes the cleaner would have written instead, one per waiting vacuum."""
    return [
        delay(
            item.vacuum,
            item.attempt,
            occurred_at=envelope.occurred_at,
            due_at=envelope.due_at,
            locks_held=item.locks_held,
            check_error=item.check_error,
            stuck=item.stuck,
            stuck_since=item.stuck_since,
        )
        for item in envelope.waiting
    ]


def _shown(rows: list[AuditRow]) -> list[dict[str, Any]]:
    return [row.to_json() for row in rows]


def _mixed_envelope(first: Any, second: Any, **changes: Any) -> DelayedVacuums:
    return delayed_vacuums(
        first,
        second,
        waiting=[
            WaitingVacuum(
                vacuum=first, attempt=4, locks_held=[lock(2)], stuck=True, stuck_since=T0 + timedelta(hours=1)
            ),
            WaitingVacuum(vacuum=second, attempt=1, locks_held=[], check_error="thrift://hms:9083 timed out"),
        ],
        **changes,
    )


def test_a_vacuum_seen_only_through_a_delayed_vacuums_gets_its_row() -> None:
    first, second = _two_of_one_key()
    envelope = delayed_vacuums(first, second, attempt=3)
    rows = fold([envelope])
    assert [(row.vacuum_id, row.state, row.attempts) for row in rows] == [
        (str(first.event_id), "waiting", 3),
        (str(second.event_id), "waiting", 3),
    ]
    assert rows[0].vacuum_time == first.occurred_at and rows[0].new_directories == tuple(first.new_directories)
    assert rows[0].locks_held == (lock(1), lock(2)) and rows[1].locks_held == tuple(second.lock_snapshot)
    assert {row.next_check_at for row in rows} == {envelope.due_at}
    assert all(row.table == "sales.orders" and row.partition == "ds=1" for row in rows)


def test_each_waiting_vacuum_shows_what_its_own_delay_envelope_would_show() -> None:
    first, second = _two_of_one_key()
    envelope = _mixed_envelope(first, second)
    for now in (None, NOW, envelope.due_at + timedelta(seconds=1)):
        merged = fold([first, second, envelope], now=now, overdue_after=OVERDUE)
        alone = fold([first, second, *_each_alone(envelope)], now=now, overdue_after=OVERDUE)
        assert _shown(merged) == _shown(alone)
    rows = fold([first, second, envelope], now=NOW, overdue_after=OVERDUE)
    assert [row.state for row in rows] == ["overdue", "overdue"]
    rows = fold([first, second, envelope])
    assert [(row.state, row.attempts) for row in rows] == [("stuck", 4), ("waiting", 1)]
    assert rows[0].locks_held == (lock(2),) and rows[0].stuck_since == T0 + timedelta(hours=1)
    assert rows[1].reason == "metastore did not answer: thrift://hms:9083 timed out"


def test_a_delay_then_a_delayed_vacuums_then_a_cleanup_done() -> None:
    first, second = _two_of_one_key()
    alone = delay(first, 1, locks_held=[lock(1)])
    merged = delayed_vacuums(first, second, attempt=2, occurred_at=alone.occurred_at + timedelta(seconds=2))
    cleaned = done(
        first,
        attempts=3,
        time_waited_ms=9000,
        occurred_at=merged.occurred_at + timedelta(seconds=3),
        directories_removed=[RemovedDirectory(name="delta_0000001_0000001_0000", file_count=1, bytes=700)],
    )
    events = [first, alone, merged, cleaned]
    waiting = fold(events[:3])
    assert [(row.vacuum_id, row.state, row.attempts) for row in waiting] == [
        (str(first.event_id), "waiting", 2),
        (str(second.event_id), "waiting", 2),
    ]
    assert waiting[0].next_check_at == merged.due_at and waiting[0].locks_held == (lock(1), lock(2))
    for order in range(5):  # any order, and a redelivery, give the same rows
        shuffled = [*events, merged]
        random.Random(order).shuffle(shuffled)
        rows = fold(shuffled)
        assert [(row.vacuum_id, row.state, row.attempts) for row in rows] == [
            (str(first.event_id), "cleaned", 3),
            (str(second.event_id), "waiting", 2),
        ]
        assert rows[0].bytes_freed == 700 and rows[0].next_check_at is None and rows[0].locks_held == ()
        assert rows[0].last_event_at == cleaned.occurred_at and rows[1].last_event_at == merged.occurred_at


def test_the_latest_attempt_wins_between_a_delay_and_a_delayed_vacuums() -> None:
    first, second = _two_of_one_key()
    later = delay(first, 5, locks_held=[lock(2)], occurred_at=T0 + timedelta(minutes=9))
    merged = delayed_vacuums(first, second, attempt=2)
    rows = fold([merged, later])
    assert [(row.attempts, row.locks_held, row.next_check_at) for row in rows] == [
        (5, (lock(2),), later.due_at),
        (2, tuple(second.lock_snapshot), merged.due_at),
    ]


def test_the_timeline_marks_a_wait_for_each_waiting_vacuum() -> None:
    first, second = _two_of_one_key()
    envelope = _mixed_envelope(first, second)
    merged = build_timeline([first, second, envelope, envelope], "sales.orders", "ds=1")
    alone = build_timeline([first, second, *_each_alone(envelope)], "sales.orders", "ds=1")
    assert merged == alone
    assert [mark.label for mark in merged.marks if mark.kind == "wait"] == ["wait #4: 1 lock(s)", "wait #1: 0 lock(s)"]
    assert build_timeline([envelope], "hr.people").marks == ()


def test_the_cleaners_own_delayed_vacuums_bytes_take_the_fast_path_and_give_the_validated_rows() -> None:
    """The cleaner writes DelayedVacuums without the models (acidclean.consumers.waiting): the audit's
    fast decoder reads those bytes itself, and folds them as the models do."""
    first, second = _two_of_one_key()
    stuck = delay(first, 6, locks_held=[lock(2)], stuck=True, stuck_since=T0 + timedelta(hours=1))
    failing = delay(second, 2, locks_held=[], check_error="thrift://hms:9083 timed out")
    checked = second.occurred_at + timedelta(seconds=9)
    [out] = build_groups(
        tenant=first.tenant,
        table=first.table,
        partition=first.partition,
        entries=[entry_of_envelope(stuck), entry_of_envelope(failing)],
        sources=[stuck.event_id, failing.event_id],
        checked_at=checked,
        due_at=checked + timedelta(seconds=2),
    )
    settings = load_settings(environ={}, overrides={"topic_prefix": "p."})
    records = []
    for offset, event in enumerate([first, out.event]):
        record = encode(event)
        topic = settings.topic(TOPIC_FIELD[type(event)])
        records.append(RawRecord(topic, 0, offset, record.key, record.value, record.headers, 1_700_000_000_000))
    decoder = FastDecoder(settings)
    fast = fold(decoder.records(records), now=NOW, overdue_after=OVERDUE)
    assert decoder.fallbacks == 0
    validated = fold(decode_records(records, settings), now=NOW, overdue_after=OVERDUE)
    assert _shown(fast) == _shown(validated)
    assert [(row.vacuum_id, row.state, row.attempts) for row in fast] == [
        (str(first.event_id), "overdue", 6),
        (str(second.event_id), "overdue", 2),
    ]
    assert fast[0].stuck_since == T0 + timedelta(hours=1) and fast[1].vacuum_time == second.occurred_at


def _records(events: list[Any]) -> list[RawRecord]:
    records = []
    for offset, event in enumerate(events):
        out = encode(event)
        topic = SETTINGS.topic(TOPIC_FIELD[type(event)])
        records.append(RawRecord(topic, 0, offset, out.key, out.value, out.headers, 1_700_000_000_000 + offset))
    return records


def _fast_and_validated(records: list[RawRecord]) -> tuple[list[AuditRow], list[AuditRow], int]:
    """The rows folded by the fast decoder and by the models, and how many records the fast one left them."""
    decoder = FastDecoder(SETTINGS)
    fast = fold(decoder.records(records))
    return fast, fold(decode_records(records, SETTINGS)), decoder.fallbacks


def test_a_vacuum_carried_on_unchanged_counts_the_checks_of_its_summary() -> None:
    """An unchanged re-check writes each entry as it was (attempt 2) and counts itself in unchanged.checks."""
    first, second = _two_of_one_key()
    carried = unchanged_vacuums(first, second, attempt=2, checks=5)
    assert [item.attempt for item in carried.waiting] == [2, 2]
    fast, validated, fallbacks = _fast_and_validated(_records([first, carried]))
    assert fallbacks == 0  # read by the fast decoder, not left to the models
    assert _shown(fast) == _shown(validated)
    assert [(row.vacuum_id, row.state, row.attempts) for row in fast] == [
        (str(first.event_id), "waiting", 7),
        (str(second.event_id), "waiting", 7),
    ]
    assert [row.attempts for row in fold([first, carried])] == [7, 7]
    marks = build_timeline([first, second, carried], "sales.orders", "ds=1").marks
    assert [mark.label for mark in marks if mark.kind == "wait"] == ["wait #7: 2 lock(s)", "wait #7: 1 lock(s)"]


def test_a_later_unchanged_record_with_more_checks_is_the_latest() -> None:
    first, second = _two_of_one_key()
    written = unchanged_vacuums(first, second, attempt=2, checks=0)
    later = unchanged_vacuums(
        first,
        second,
        attempt=2,
        checks=1,
        occurred_at=written.occurred_at + timedelta(seconds=2),
        due_at=written.due_at + timedelta(seconds=2),
        causation_id=written.event_id,
        merged_from=[written.event_id],
    )
    for events in ([written, later], [later, written]):
        fast, validated, _ = _fast_and_validated(_records(events))
        assert _shown(fast) == _shown(validated)
        assert [(row.attempts, row.next_check_at) for row in fast] == [(3, later.due_at), (3, later.due_at)]


def test_checks_carried_unchanged_outrank_a_delay_with_fewer_checks() -> None:
    """The latest check is chosen by checks made first (cleaners' clocks may disagree): 2 + 5 beats 6."""
    first, second = _two_of_one_key()
    carried = unchanged_vacuums(first, second, attempt=2, checks=5)
    skewed = delay(first, 6, locks_held=[lock(2)], occurred_at=carried.occurred_at + timedelta(minutes=1))
    fast, validated, _ = _fast_and_validated(_records([carried, skewed]))
    assert _shown(fast) == _shown(validated)
    assert [(row.vacuum_id, row.attempts, row.next_check_at) for row in fast] == [
        (str(first.event_id), 7, carried.due_at),
        (str(second.event_id), 7, carried.due_at),
    ]


def test_a_summary_that_does_not_match_its_entries_is_a_rejection_row_both_ways() -> None:
    first, second = _two_of_one_key()
    carried = unchanged_vacuums(first, second, attempt=2, checks=5)
    [vacuum_record, record] = _records([first, carried])
    body = json.loads(record.value or b"")
    body["unchanged"]["lock_ids"] = [1, 2]  # the second vacuum's lock 7 left out
    damaged = RawRecord(record.topic, 0, 1, record.key, json.dumps(body).encode(), record.headers, record.timestamp_ms)
    fast, validated, fallbacks = _fast_and_validated([vacuum_record, damaged])
    assert fallbacks == 1  # the fast decoder leaves it to the models, which refuse it
    assert _shown(fast) == _shown(validated)
    [committed, refused] = sorted(fast, key=lambda row: row.state)
    assert (committed.vacuum_id, committed.state, committed.attempts) == (str(first.event_id), "committed", 0)
    assert refused.state == "rejected" and refused.table == "sales.orders"
    assert "unchanged does not match the waiting vacuums: lock_ids must be [1, 2, 7]" in (refused.reason or "")
