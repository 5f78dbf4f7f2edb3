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
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from functools import partial
from typing import Any, Literal, TypeVar

import msgspec

from acidclean.consumers.audit_wire import (
    WireCleanupDone,
    WireCleanupRejected,
    WireCleanupStarted,
    WireDelayedVacuums,
    WireDelayEnvelope,
    WireEvent,
    WireLock,
    WireVacuumCommitted,
    WireVacuumFailed,
    WireVacuumRequested,
    WireVacuumStarted,
    decoders_for,
    fast_decode,
)
from acidclean.schemas.common import PARTITION_PATTERN, TABLE_PATTERN, EventBase, LockSnapshotEntry, utc_now
from acidclean.schemas.events import (
    CleanupDone,
    CleanupRejected,
    CleanupStarted,
    DelayedVacuums,
    DelayEnvelope,
    Event,
    VacuumCommitted,
    VacuumFailed,
    VacuumRequested,
    VacuumStarted,
)
from acidclean.shared.acid.partition_names import may_be_same_partition
from acidclean.shared.bus.bundle import BUNDLE_KEY_SUFFIX, is_bundle, unpack
from acidclean.shared.bus.codec import decode, header_due_at_ms
from acidclean.shared.bus.reader import LogReader
from acidclean.shared.bus.records import MessageLike, RawRecord, raw_record
from acidclean.shared.gc_tuning import cyclic_gc_paused
from acidclean.shared.settings import Settings

AuditState = Literal[
    "requested", "running", "failed", "committed", "waiting", "cleaned", "rejected", "stuck", "overdue"
]
# The settings.topics fields read by the audit, with the events each may hold.
AUDIT_TOPICS: dict[str, tuple[type[EventBase], ...]] = {
    "vacuum_committed": (VacuumCommitted,),
    "cleanup_delay": (DelayEnvelope, DelayedVacuums),
    "cleanup_done": (CleanupStarted, CleanupDone),
    "dead_letter": (CleanupRejected,),
    "vacuum_requests": (VacuumRequested, VacuumStarted, VacuumFailed),
}
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
READER_ID = "acidclean-audit"
_TABLE_KEY = re.compile(TABLE_PATTERN.encode())
_PARTITION_KEY = re.compile(PARTITION_PATTERN)
# A waiting vacuum is re-checked within milliseconds of its due time while a cleaner keeps up; one
# not checked this long after it (ten intervals, at least a minute, so a cleaner restart or a
# rebalance does not count) is shown as overdue.
OVERDUE_INTERVALS = 10
OVERDUE_FLOOR_MS = 60_000


@dataclass(frozen=True)
class AuditRow:
    """One vacuum's history. Times are UTC; ``time_waited_ms`` is None until the first check."""

    vacuum_id: str | None
    tenant: str
    table: str | None
    partition: str | None
    compaction_type: str | None
    vacuum_time: datetime | None
    new_directories: tuple[str, ...]
    state: AuditState
    attempts: int
    time_waited_ms: int | None
    directories_removed: tuple[str, ...]
    bytes_freed: int
    cleaner_id: str | None
    reason: str | None = None
    locks_held: tuple[LockSnapshotEntry, ...] = ()
    stuck_since: datetime | None = None
    next_check_at: datetime | None = None
    last_event_at: datetime = EPOCH
    request_id: str | None = None
    requested_at: datetime | None = None
    vacuum_service_id: str | None = None
    hive_compaction_id: int | None = None  # the entry of Hive's compaction queue it served

    def to_json(self) -> dict[str, Any]:
        """The row as JSON-ready values (ISO 8601 times), for ``audit --format json``."""
        return {
            "vacuum_id": self.vacuum_id,
            "tenant": self.tenant,
            "table": self.table,
            "partition": self.partition,
            "compaction_type": self.compaction_type,
            "vacuum_time": _iso(self.vacuum_time),
            "new_directories": list(self.new_directories),
            "state": self.state,
            "attempts": self.attempts,
            "time_waited_ms": self.time_waited_ms,
            "directories_removed": list(self.directories_removed),
            "bytes_freed": self.bytes_freed,
            "cleaner_id": self.cleaner_id,
            "reason": self.reason,
            "locks_held": [lock.model_dump(mode="json") for lock in self.locks_held],
            "stuck_since": _iso(self.stuck_since),
            "next_check_at": _iso(self.next_check_at),
            "last_event_at": _iso(self.last_event_at),
            "request_id": self.request_id,
            "requested_at": _iso(self.requested_at),
            "vacuum_service_id": self.vacuum_service_id,
            "hive_compaction_id": self.hive_compaction_id,
        }


def _new_row(**fields: Any) -> AuditRow:
    """``AuditRow(**fields)`` given every field, built in a third of the time.

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``: for 21 fields
    that was 40% of the cost of a row, and the audit builds one per vacuum.
    """
    row = object.__new__(AuditRow)
    row.__dict__.update(fields)
    return row


ROW_FIELDS = tuple(AuditRow.__dataclass_fields__)


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat().replace("+00:00", "Z")


# The fold reads events decoded either way: validated models, or the fast decoder's structs, which
# carry the same field names (ids as canonical text instead of UUIDs; str() makes both text).
AnyVacuum = VacuumCommitted | WireVacuumCommitted
AnyDelayed = DelayedVacuums | WireDelayedVacuums


class WaitingDelay:
    """One vacuum of a ``DelayedVacuums``, read as the ``DelayEnvelope`` the cleaner writes for a vacuum
    that waits alone: the vacuum and its own attempt, locks held, check error and stuck state, with
    the envelope's check time, due time, event id and causation. Its flow is the vacuum's.

    Its ``attempt`` is the checks made so far: the entry's attempt plus the envelope's
    ``unchanged.checks``, since a check that found every lock still listed re-publishes the entries
    as they were and counts itself there only."""

    __slots__ = (
        "attempt",
        "causation_id",
        "check_error",
        "correlation_id",
        "due_at",
        "event_id",
        "locks_held",
        "occurred_at",
        "open_txns",
        "partition",
        "stuck",
        "stuck_since",
        "table",
        "tenant",
        "vacuum",
    )

    def __init__(self, envelope: AnyDelayed, item: Any) -> None:
        vacuum: AnyVacuum = item.vacuum
        self.tenant: str = envelope.tenant
        self.table: str = envelope.table
        self.partition: str | None = envelope.partition
        self.occurred_at: datetime = envelope.occurred_at
        self.event_id: Any = envelope.event_id
        self.causation_id: Any = envelope.causation_id
        self.correlation_id: Any = vacuum.event_id
        self.vacuum = vacuum
        unchanged = envelope.unchanged
        self.attempt: int = item.attempt if unchanged is None else item.attempt + unchanged.checks
        self.due_at: datetime = envelope.due_at
        self.locks_held: Sequence[LockSnapshotEntry | WireLock] = item.locks_held
        self.check_error: str | None = item.check_error
        self.stuck: bool = item.stuck
        self.stuck_since: datetime | None = item.stuck_since
        self.open_txns: list[int] = item.open_txns


def waiting_delays(envelope: AnyDelayed) -> list[WaitingDelay]:
    """The vacuums of a ``DelayedVacuums``, each as its own delay envelope."""
    return [WaitingDelay(envelope, item) for item in envelope.waiting]


AnyDelay = DelayEnvelope | WireDelayEnvelope | WaitingDelay
AnyStarted = CleanupStarted | WireCleanupStarted
AnyDone = CleanupDone | WireCleanupDone
AnyRejected = CleanupRejected | WireCleanupRejected
AnyRequested = VacuumRequested | WireVacuumRequested
AnyRunning = VacuumStarted | WireVacuumStarted
AnyFailed = VacuumFailed | WireVacuumFailed
AuditEvent = (
    AnyVacuum | AnyDelay | AnyDelayed | AnyStarted | AnyDone | AnyRejected | AnyRequested | AnyRunning | AnyFailed
)
_KIND: dict[type[Any], str] = {
    VacuumCommitted: "vacuum",
    WireVacuumCommitted: "vacuum",
    DelayEnvelope: "delay",
    WireDelayEnvelope: "delay",
    DelayedVacuums: "delayed",
    WireDelayedVacuums: "delayed",
    CleanupStarted: "started",
    WireCleanupStarted: "started",
    CleanupDone: "done",
    WireCleanupDone: "done",
    CleanupRejected: "rejected",
    WireCleanupRejected: "rejected",
    VacuumRequested: "requested",
    WireVacuumRequested: "requested",
    VacuumStarted: "running",
    WireVacuumStarted: "running",
    VacuumFailed: "failed",
    WireVacuumFailed: "failed",
}


def _order(event: AuditEvent) -> tuple[datetime, str]:
    return (event.occurred_at, str(event.event_id))


_E = TypeVar("_E")


Order = tuple[datetime, str]


def _earlier(candidate: _E, order: Order, current: tuple[Order, _E] | None) -> tuple[Order, _E]:
    return (order, candidate) if current is None or order < current[0] else current


def _lock_models(locks: Iterable[LockSnapshotEntry | WireLock]) -> tuple[LockSnapshotEntry, ...]:
    return tuple(lock.model() if isinstance(lock, WireLock) else lock for lock in locks)


@dataclass(slots=True)  # one per vacuum: slots make it smaller and its attributes faster
class _History:
    """What one vacuum's row needs, updated as its events stream by.

    Only the events the row shows are kept (the first vacuum event, the latest delay envelope, the
    started and done events, the first rejection), so memory grows with the number of vacuums, not
    of events. Every choice is by (time, event id), so neither arrival order nor duplicates change
    the row; of two events sharing an id (a replay), the earlier one counts.
    """

    first: tuple[Order, AuditEvent] | None = None
    first_with_table: tuple[Order, AuditEvent] | None = None
    vacuum: tuple[Order, AnyVacuum] | None = None
    latest_delay: tuple[tuple[int, datetime, str], AnyDelay] | None = None
    starts: dict[str, AnyStarted] = field(default_factory=dict)
    dones: dict[str, AnyDone] = field(default_factory=dict)
    rejection: tuple[Order, AnyRejected] | None = None
    requested: tuple[Order, AnyRequested] | None = None
    running: tuple[Order, AnyRunning] | None = None
    failure: tuple[Order, AnyFailed] | None = None
    last_event_at: datetime = EPOCH

    def add(self, event: AuditEvent, kind: str) -> None:
        # Runs once per event: _order and _earlier inlined (a call costs as much as the comparison).
        moment = event.occurred_at
        order = (moment, str(event.event_id))
        first = self.first
        if first is None or order < first[0]:
            self.first = (order, event)
        if event.table is not None:
            first = self.first_with_table
            if first is None or order < first[0]:
                self.first_with_table = (order, event)
        if moment > self.last_event_at:
            self.last_event_at = moment
        # ``kind`` says which of the union it is (typing.cast would cost a call per event).
        typed: Any = event
        if kind == "delay":
            rank = (typed.attempt, moment, order[1])
            if self.latest_delay is None or rank > self.latest_delay[0]:
                self.latest_delay = (rank, typed)
        elif kind == "vacuum":
            if self.vacuum is None or order < self.vacuum[0]:
                self.vacuum = (order, typed)
        elif kind == "done":
            _keep_earliest(self.dones, typed)
        elif kind == "started":
            _keep_earliest(self.starts, typed)
        elif kind == "rejected":
            self.rejection = _earlier(typed, order, self.rejection)
        elif kind == "requested":
            self.requested = _earlier(typed, order, self.requested)
        elif kind == "running":
            if self.running is None or order > self.running[0]:  # a restarted service starts it again
                self.running = (order, typed)
        elif kind == "failed":
            self.failure = _earlier(typed, order, self.failure)

    def has_vacuum(self) -> bool:
        """A vacuum committed: its own event, or one carried by a delay, or its cleaner's reports."""
        return bool(self.vacuum or self.latest_delay or self.starts or self.dones)

    def has_request(self) -> bool:
        return bool(self.requested or self.running or self.failure)

    def request_id(self) -> str | None:
        """The request the vacuum answered (VacuumCommitted.request_id), if any."""
        vacuum = self.vacuum[1] if self.vacuum else (self.latest_delay[1].vacuum if self.latest_delay else None)
        return None if vacuum is None or vacuum.request_id is None else str(vacuum.request_id)

    def row(
        self, now: datetime | None = None, overdue_after: timedelta | None = None, request: _History | None = None
    ) -> AuditRow:
        """The row; ``request`` is the history of the request the vacuum answered, when it was read."""
        assert self.first is not None, "a history exists only once an event was added"
        first = self.first[1]
        asked = request or self
        requested = asked.requested[1] if asked.requested else None
        running = asked.running[1] if asked.running else None
        failure = asked.failure[1] if asked.failure else None
        committed = bool(self.vacuum or self.latest_delay or self.starts or self.dones)  # has_vacuum(), inlined
        latest = self.latest_delay[1] if self.latest_delay else None
        rejection = self.rejection[1] if self.rejection else None
        dones = sorted(self.dones.values(), key=_order) if len(self.dones) > 1 else list(self.dones.values())
        starts = sorted(self.starts.values(), key=_order) if len(self.starts) > 1 else list(self.starts.values())
        vacuum = self.vacuum[1] if self.vacuum else (latest.vacuum if latest else None)
        identified = vacuum or requested or (self.first_with_table[1] if self.first_with_table else first)
        # The latest start, unless a delay followed it (a delete that failed is delayed after its start).
        started = max(starts, key=_rank) if starts else None
        if started is not None and self.latest_delay is not None and _rank(started) < self.latest_delay[0]:
            started = None

        removed: dict[str, int] = {}
        confirmed = False  # a CleanupDone that is not a dry run exists
        for done in dones:
            confirmed = confirmed or not done.dry_run
            for directory in done.directories_removed:
                removed.setdefault(directory.name, directory.bytes)
        reported = len(removed)
        if confirmed:
            # Once a CleanupDone exists the cleanup finished: everything announced is gone, either deleted
            # then or found gone later (after a restart, or by a retry of a delete that failed).
            for start in starts:
                for directory in start.directories_to_remove:
                    removed.setdefault(directory.name, directory.bytes)
        state: AuditState
        if dones:
            state, reason = "cleaned", _cleaned_reason(dones[0], len(removed) - reported)
        elif rejection is not None:
            state, reason = "rejected", f"{rejection.reason_code}: {rejection.reason}"
        elif not committed and failure is not None:
            state, reason = "failed", f"{failure.reason_code}: {failure.message}"
        elif not committed and running is not None:
            state, reason = "running", f"running on {running.vacuum_service_id} since {_seconds(running.started_at)}"
        elif not committed and requested is not None:
            state, reason = "requested", requested.reason
        elif started is not None:
            state, reason = "waiting", _started_reason(started)
        elif (overdue := _overdue_reason(vacuum, latest, now, overdue_after)) is not None:
            state, reason = "overdue", overdue
        elif latest is not None and latest.stuck:
            state, reason = "stuck", _waiting_reason(latest)
        elif latest is not None:
            state, reason = "waiting", _waiting_reason(latest)
        else:
            state, reason = "committed", None  # no cleaner has checked it yet
        only_requested = not committed and self.has_request()  # its correlation id is the request's, not a vacuum's
        if committed:
            request_id = self.request_id()
        else:
            request_id = str(first.correlation_id) if only_requested and first.correlation_id else None
        pending = latest is not None and started is None and state in ("waiting", "stuck", "overdue")
        attempts = latest.attempt if latest else 0
        for start in starts:
            attempts = max(attempts, start.attempt)
        for done in dones:
            attempts = max(attempts, done.attempts)
        return _new_row(
            vacuum_id=str(first.correlation_id) if first.correlation_id and not only_requested else None,
            tenant=identified.tenant,
            table=identified.table,
            partition=identified.partition,
            compaction_type=vacuum.compaction_type if vacuum else (requested.compaction_type if requested else None),
            vacuum_time=vacuum.occurred_at if vacuum else None,
            new_directories=tuple(vacuum.new_directories) if vacuum else (),
            state=state,
            attempts=attempts,
            time_waited_ms=_time_waited(vacuum, started or latest, dones, state),
            directories_removed=tuple(removed),
            bytes_freed=sum(removed.values()),
            cleaner_id=dones[0].cleaner_id if dones else (started.cleaner_id if started else None),
            reason=reason,
            locks_held=_lock_models(latest.locks_held) if latest and pending else (),
            stuck_since=latest.stuck_since if latest and state in ("stuck", "overdue") else None,
            next_check_at=latest.due_at if latest and pending else None,
            last_event_at=max(self.last_event_at, request.last_event_at) if request else self.last_event_at,
            request_id=request_id,
            requested_at=requested.requested_at if requested else None,
            vacuum_service_id=running.vacuum_service_id if running else None,
            hive_compaction_id=requested.hive_compaction_id if requested else None,
        )


_Reported = TypeVar("_Reported", AnyStarted, AnyDone)


def _keep_earliest(kept: dict[str, _Reported], event: _Reported) -> None:
    """Keep one event per id, the earliest: a replay after a crash reuses the id but may list less."""
    current = kept.get(str(event.event_id))
    if current is None or _order(event) < _order(current):
        kept[str(event.event_id)] = event


def _rank(started: AnyStarted) -> tuple[int, datetime, str]:
    return (started.attempt, *_order(started))


def _cleaned_reason(done: AnyDone, unreported: int) -> str | None:
    if done.dry_run:
        return "dry run: nothing deleted" + (f"; {done.note}" if done.note else "")
    if unreported:
        restart = (
            f"{unreported} director{'y' if unreported == 1 else 'ies'} removed before a cleaner restart or retry "
            "(announced by CleanupStarted, not listed by CleanupDone)"
        )
        return restart + (f"; {done.note}" if done.note else "")
    return done.note


def _started_reason(started: AnyStarted) -> str:
    count = len(started.directories_to_remove)
    return (
        f"cleaning started by {started.cleaner_id} ({count} director{'y' if count == 1 else 'ies'} announced), "
        "not yet reported"
    )


def _waiting_reason(latest: AnyDelay) -> str:
    if latest.check_error:
        return f"metastore did not answer: {latest.check_error}"
    holders = "; ".join(lock.describe() for lock in _lock_models(latest.locks_held)) or "no lock listed"
    return f"held by {holders}"


def _overdue_reason(
    vacuum: AnyVacuum | None,
    latest: AnyDelay | None,
    now: datetime | None,
    overdue_after: timedelta | None,
) -> str | None:
    """Why a pending vacuum is overdue (no check well past its due time), or None when it is not."""
    if now is None or overdue_after is None:
        return None
    if latest is not None:
        if now - latest.due_at <= overdue_after:
            return None
        last = f"last check at {_seconds(latest.occurred_at)}: {_waiting_reason(latest)}"
        return f"overdue: due at {_seconds(latest.due_at)}, not checked since; {last}"
    if vacuum is not None and now - vacuum.occurred_at > overdue_after:
        return f"overdue: due at {_seconds(vacuum.occurred_at)}, never checked"
    return None


def _seconds(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _time_waited(
    vacuum: AnyVacuum | None,
    latest: AnyDelay | AnyStarted | None,
    dones: list[AnyDone],
    state: AuditState,
) -> int | None:
    if dones:
        return dones[0].time_waited_ms
    if state in ("waiting", "stuck", "overdue") and vacuum is not None and latest is not None:
        return max(0, round((latest.occurred_at - vacuum.occurred_at).total_seconds() * 1000))
    return None


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
    histories: dict[str, _History] = {}
    for event in events:
        kind = _KIND.get(type(event))
        if kind is None:
            continue  # DeltaCommitted and others are not part of a vacuum's history
        audited: Any = event  # an AuditEvent, as its kind says
        if kind == "delayed":  # several vacuums' delays in one record: each joins its vacuum's history
            for delayed in waiting_delays(audited):
                group = str(delayed.correlation_id)
                history = histories.get(group)
                if history is None:
                    history = histories[group] = _History()
                history.add(delayed, "delay")
            continue
        correlation = audited.correlation_id
        group = str(correlation) if correlation is not None else f"event:{audited.event_id}"
        history = histories.get(group)
        if history is None:
            history = histories[group] = _History()
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


def _record_time(record: RawRecord) -> datetime:
    # A rejection made while reading is dated by its record, so the same log always folds the same way.
    return EPOCH if record.timestamp_ms is None else datetime.fromtimestamp(record.timestamp_ms / 1000, timezone.utc)


def decode_records(records: Iterable[RawRecord], settings: Settings, reader_id: str = READER_ID) -> Iterator[Event]:
    """Decode records read from the audit topics with the event models; unreadable ones become rejections."""
    expected = _expected_classes(settings)
    for read in records:
        members, carry = bundle_members(read)
        for record in members:
            event = decode(
                record,
                rejected_by=reader_id,
                tenant=settings.tenant,
                expected=expected.get(record.topic),
                now=partial(_record_time, record),
            )
            yield event if carry is None else carry.applied(event)


@dataclass(frozen=True)
class WholeCarry:
    """A bundle carried on whole (its members' bytes as they were written): each member was checked
    again when the bundle was, ``carried`` checks since it was written (counted in its summary's
    checks, or in its attempt when it waits alone), and is due when it is."""

    carried: int
    checked_at: datetime
    due_at: datetime

    def applied(self, event: _Decoded) -> _Decoded:
        """``event`` (a member) as the check that carried its bundle on left it."""
        unchanged = getattr(event, "unchanged", None)
        if isinstance(event, DelayedVacuums) and unchanged is not None:
            counted = unchanged.model_copy(update={"checks": unchanged.checks + self.carried})
            update = {"occurred_at": self.checked_at, "due_at": self.due_at, "unchanged": counted}
            return event.model_copy(update=update)
        if isinstance(event, WireDelayedVacuums) and event.unchanged is not None:
            wire_counted = msgspec.structs.replace(event.unchanged, checks=event.unchanged.checks + self.carried)
            return msgspec.structs.replace(
                event, occurred_at=self.checked_at, due_at=self.due_at, unchanged=wire_counted
            )
        # A vacuum waiting alone counts its checks in its attempt.
        if isinstance(event, DelayEnvelope):
            update = {"occurred_at": self.checked_at, "due_at": self.due_at, "attempt": event.attempt + self.carried}
            return event.model_copy(update=update)
        if isinstance(event, WireDelayEnvelope):
            return msgspec.structs.replace(
                event, occurred_at=self.checked_at, due_at=self.due_at, attempt=event.attempt + self.carried
            )
        return event


_Decoded = TypeVar("_Decoded")


def bundle_members(record: RawRecord) -> tuple[Sequence[RawRecord], WholeCarry | None]:
    """A bundle's records, each read as if it had been published alone (the cleaner packs many waiting
    tables' delay records in one), or the record itself (also when it is not a well-formed bundle: the
    models then refuse it); and how the check that carried the bundle on whole changed its members."""
    if record.key is None or not record.key.endswith(_BUNDLE_KEY_END):
        return (record,), None
    bundle = unpack(record) if is_bundle(record.headers) else None
    try:
        members = () if bundle is None else bundle.members
    except ValueError:  # members that do not read: the record as it is
        bundle = None
    if bundle is None:
        return (record,), None
    due = header_due_at_ms(record)
    if bundle.summary is None or bundle.summary.carried <= 0 or due is None:
        return members, None
    due_at = datetime.fromtimestamp(due / 1000, timezone.utc)
    return members, WholeCarry(bundle.summary.carried, bundle.occurred_at, due_at)


_BUNDLE_KEY_END = b"/" + BUNDLE_KEY_SUFFIX.encode()


def _expected_classes(settings: Settings) -> dict[str, tuple[type[EventBase], ...]]:
    return {settings.topic(name): classes for name, classes in AUDIT_TOPICS.items()}


class FastDecoder:
    """Decodes audit records with the fast decoder, and with the models whatever it leaves.

    Given a table (and partition), a record whose key names another table (or partition) is skipped
    unread: the key of every event is its table and partition, and a vacuum's events all carry its
    table's key. A record whose key is not a table's key is decoded as usual.
    """

    def __init__(self, settings: Settings, *, table: str | None = None, partition: str | None = None) -> None:
        self._settings = settings
        self._expected = _expected_classes(settings)
        self._decoders = {
            topic: decoders_for({cls.event_type: cls.__name__ for cls in classes})
            for topic, classes in self._expected.items()
        }
        self._table = None if table is None else table.encode()
        self._partition = partition
        self._valid_keys: set[str] = set()
        self.fallbacks = 0
        self.skipped = 0

    def records(self, records: Iterable[RawRecord]) -> Iterator[Event | WireEvent]:
        """Events of records already read (tests, and any caller that holds RawRecords)."""
        for record in records:
            members, carry = bundle_members(record)
            for member in members:
                event = self._event(member)
                if event is not None:
                    yield event if carry is None else carry.applied(event)

    def messages(self, batches: Iterable[Sequence[MessageLike]]) -> Iterator[Event | WireEvent]:
        """Events of batches of consumed ``confluent_kafka.Message`` objects."""
        # The loop of _event, inlined: it runs once per record, and a call costs as much as a check.
        table, decoders_of, valid_keys = self._table, self._decoders, self._valid_keys
        for batch in batches:
            for message in batch:
                key = message.key()
                if key is not None and key.endswith(_BUNDLE_KEY_END):  # type: ignore[arg-type]
                    yield from self.records((raw_record(message),))
                    continue
                if table is not None and self._other_table(key):  # type: ignore[arg-type]
                    self.skipped += 1
                    continue
                decoders = decoders_of.get(message.topic() or "")
                event = None
                if decoders is not None:
                    value, headers = message.value(), message.headers()
                    event = fast_decode(key, value, headers, decoders, valid_keys)  # type: ignore[arg-type]
                yield event if event is not None else self._validated(raw_record(message))

    def _event(self, record: RawRecord) -> Event | WireEvent | None:
        key = record.key
        if self._table is not None and self._other_table(key):
            self.skipped += 1
            return None
        decoders = self._decoders.get(record.topic)
        if decoders is not None:
            event = fast_decode(key, record.value, record.headers, decoders, self._valid_keys)
            if event is not None:
                return event
        return self._validated(record)

    def _validated(self, record: RawRecord) -> Event:
        """The record decoded by the event models, as :func:`decode_records` decodes it."""
        self.fallbacks += 1
        return decode(
            record,
            rejected_by=READER_ID,
            tenant=self._settings.tenant,
            expected=self._expected.get(record.topic),
            now=partial(_record_time, record),
        )

    def _other_table(self, key: bytes | None) -> bool:
        """The key names a table (and partition) other than the one asked for."""
        if key is None:
            return False
        parts = key.split(b"/", 2)
        if len(parts) < 2 or not _TABLE_KEY.fullmatch(parts[1]):
            return False
        if parts[1] != self._table:
            return True
        if self._partition is None:
            return False
        if len(parts) < 3:
            return True
        try:
            partition = parts[2].decode("utf-8")
        except UnicodeDecodeError:
            return False
        return _PARTITION_KEY.fullmatch(partition) is not None and not may_be_same_partition(partition, self._partition)


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
    return select(rows, table=table, partition=partition, since=since), reader
