"""The audit log: each vacuum's history, rebuilt from the event topics (SHOW COMPACTIONS for acidclean).

:func:`fold` is pure: it groups events by the flow they belong to (``correlation_id``: a request's
events by the request id, a vacuum's by the vacuum's id) and derives one :class:`AuditRow` per
vacuum, whatever order the events arrive in (the topics have no order between them) and however
often one is delivered (duplicates share an ``event_id``). A vacuum that answered a request
(``VacuumCommitted.request_id``) shows the request on its row; a request no vacuum answered (yet)
gets a row of its own: ``failed`` once a ``VacuumFailed`` exists, else ``running`` once a
``VacuumStarted`` does, else ``requested``. The state of a vacuum is ``cleaned`` once a
``CleanupDone`` exists, else ``rejected`` once it was dead-lettered, else ``overdue`` when the fold
is given a clock and the vacuum is due well past its due time (its latest delay envelope's, or its
commit time if it was never checked) with no later check: no cleaner is checking it (a stalled
partition, or no cleaner running), else ``stuck`` when its latest delay envelope says so, else
``waiting`` (also while a ``CleanupStarted`` awaits its ``CleanupDone``), else ``committed`` (no
cleaner has checked it yet).

A cleaned vacuum's directories removed are those its ``CleanupDone`` events list and those its
``CleanupStarted`` events announced: a cleaner that died between deleting and reporting leaves a
``CleanupDone`` from its successor that lists nothing, because nothing was left to remove.

:func:`read_audit` reads the requests, vacuum, delay, done and dead-letter topics from the
beginning to their current end without joining a consumer group, in ``consume`` batches, decodes
every record with the fast decoder of ``acidclean.consumers.audit_wire`` (or, with ``validate``,
with the event models; an unreadable record becomes a rejection row, as the cleaner would have it,
either way) and folds them.

The parts, one job each: ``audit_reading`` (the topics and the decoding), ``audit_events`` (what the
fold reads), ``audit_history`` (one vacuum's events joined, and its row), ``audit_rows`` (the row and
its reasons); this module folds and selects.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from acidclean.consumers.audit_events import KIND, WaitingDelay, waiting_delays
from acidclean.consumers.audit_history import History
from acidclean.consumers.audit_reading import (
    AUDIT_TOPICS,
    READER_ID,
    FastDecoder,
    WholeCarry,
    bundle_members,
    decode_records,
)
from acidclean.consumers.audit_rows import EPOCH, ROW_FIELDS, AuditRow, AuditState
from acidclean.consumers.audit_wire import WireEvent
from acidclean.consumers.undo_log import read_undos, with_undos
from acidclean.schemas.common import utc_now
from acidclean.schemas.events import Event
from acidclean.shared.acid.partition_names import may_be_same_partition
from acidclean.shared.bus.reader import LogReader
from acidclean.shared.bus.records import raw_record
from acidclean.shared.gc_tuning import cyclic_gc_paused
from acidclean.shared.settings import Settings

# The audit's names, importable from here as before the module was split.
__all__ = [
    "AUDIT_TOPICS",
    "EPOCH",
    "READER_ID",
    "ROW_FIELDS",
    "AuditRow",
    "AuditState",
    "FastDecoder",
    "WaitingDelay",
    "WholeCarry",
    "bundle_members",
    "decode_records",
    "fold",
    "overdue_after",
    "read_audit",
    "select",
    "waiting_delays",
]

# A waiting vacuum is re-checked within milliseconds of its due time while a cleaner keeps up; one
# not checked this long after it (ten intervals, at least a minute, so a cleaner restart or a
# rebalance does not count) is shown as overdue.
OVERDUE_INTERVALS = 10
OVERDUE_FLOOR_MS = 60_000


def _row_time(row: AuditRow) -> datetime:
    return row.vacuum_time or row.requested_at or row.last_event_at


def _sort_key(row: AuditRow) -> tuple[datetime, str, str, str, str]:
    return (
        _row_time(row),
        row.table or "",
        row.partition or "",
        row.vacuum_id or "",
        row.reason or "",
    )


def overdue_after(interval_ms: int) -> timedelta:
    """How long past its due time a pending vacuum must be unchecked to show as overdue."""
    return timedelta(milliseconds=max(OVERDUE_FLOOR_MS, OVERDUE_INTERVALS * interval_ms))


def fold(
    events: Iterable[Event | WireEvent], *, now: datetime | None = None, overdue_after: timedelta | None = None
) -> list[AuditRow]:
    """One row per vacuum, oldest first; a rejection that names no vacuum gets a row of its own.

    Given ``now`` and ``overdue_after``, a pending vacuum not checked for ``overdue_after`` past its
    due time is ``overdue``; without them the rows depend on the events alone. The events may be the
    validated models or the fast decoder's structs (``acidclean.consumers.audit_wire``), mixed."""
    histories: dict[str, History] = {}
    for event in events:
        kind = KIND.get(type(event))
        if kind is None:
            continue  # DeltaCommitted and others are not part of a vacuum's history
        audited: Any = event  # an AuditEvent, as its kind says
        if kind == "delayed":  # several vacuums' delays in one record: each joins its vacuum's history
            for delayed in waiting_delays(audited):
                group = str(delayed.correlation_id)
                history = histories.get(group)
                if history is None:
                    history = histories[group] = History()
                history.add(delayed, "delay")
            continue
        correlation = audited.correlation_id
        group = str(correlation) if correlation is not None else f"event:{audited.event_id}"
        history = histories.get(group)
        if history is None:
            history = histories[group] = History()
        history.add(audited, kind)
    # A vacuum that answered a request shows the request on its own row; the request has no row then.
    request_ids = {group: history.request_id() for group, history in histories.items()}
    answered = set(request_ids.values())
    rows = []
    for group, history in histories.items():
        if group in answered and not history.has_vacuum():
            continue
        request_id = request_ids[group]
        rows.append(history.row(now, overdue_after, histories.get(request_id) if request_id else None))
    return sorted(rows, key=_sort_key)


def select(
    rows: Iterable[AuditRow],
    *,
    table: str | None = None,
    partition: str | None = None,
    since: datetime | None = None,
) -> list[AuditRow]:
    """Rows of one table (and partition), whose vacuum ran at or after ``since``."""
    return [
        row
        for row in rows
        if (table is None or row.table == table)
        and (partition is None or may_be_same_partition(row.partition, partition))
        and (since is None or _row_time(row) >= since)
    ]


def read_audit(
    settings: Settings,
    *,
    table: str | None = None,
    partition: str | None = None,
    since: datetime | None = None,
    validate: bool = False,
) -> tuple[list[AuditRow], LogReader]:
    """Read the audit topics to their current end and fold them; returns the rows and the reader used.

    The reader tells which topics were missing and how many records were read. By default records are
    read by the fast decoder (the same rows, see ``acidclean.consumers.audit_wire``); ``validate``
    decodes every record with the event models instead.
    """
    reader = LogReader(settings.kafka, [settings.topic(name) for name in AUDIT_TOPICS])
    events: Iterable[Event | WireEvent]
    if validate:
        events = decode_records((raw_record(message) for message in reader), settings)
    else:
        events = FastDecoder(settings, table=table, partition=partition).messages(reader.batches())
    with cyclic_gc_paused():
        rows = fold(events, now=utc_now(), overdue_after=overdue_after(settings.cleanup_interval_ms))
    rows = with_undos(rows, read_undos(settings))  # cleanups undone, from the ledger topic (issue 54)
    return select(rows, table=table, partition=partition, since=since), reader
