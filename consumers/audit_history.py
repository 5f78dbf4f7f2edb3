"""One vacuum's history, joined from its events as they stream by (a request's events too, by the
request id), and the row it shows: its state, reason, directories removed and times.

Every choice is by (time, event id), so neither arrival order nor duplicates change the row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from acidclean.consumers.audit_events import (
    AnyDelay,
    AnyDone,
    AnyFailed,
    AnyRejected,
    AnyRequested,
    AnyRunning,
    AnyStarted,
    AnyVacuum,
    AuditEvent,
    Order,
    lock_models,
    order_of,
)
from acidclean.consumers.audit_rows import (
    EPOCH,
    AuditRow,
    AuditState,
    cleaned_reason,
    new_row,
    overdue_reason,
    started_reason,
    time_waited,
    utc_seconds,
    waiting_reason,
)

_E = TypeVar("_E")


def _earlier(candidate: _E, order: Order, current: tuple[Order, _E] | None) -> tuple[Order, _E]:
    return (order, candidate) if current is None or order < current[0] else current


@dataclass(slots=True)  # one per vacuum: slots make it smaller and its attributes faster
class History:
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
        # Runs once per event: order_of and _earlier inlined (a call costs as much as the comparison).
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
        self, now: datetime | None = None, overdue_after: timedelta | None = None, request: History | None = None
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
        dones = sorted(self.dones.values(), key=order_of) if len(self.dones) > 1 else list(self.dones.values())
        starts = sorted(self.starts.values(), key=order_of) if len(self.starts) > 1 else list(self.starts.values())
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
            state, reason = "cleaned", cleaned_reason(dones[0], len(removed) - reported)
        elif rejection is not None:
            state, reason = "rejected", f"{rejection.reason_code}: {rejection.reason}"
        elif not committed and failure is not None:
            state, reason = "failed", f"{failure.reason_code}: {failure.message}"
        elif not committed and running is not None:
            state, reason = "running", f"running on {running.vacuum_service_id} since {utc_seconds(running.started_at)}"
        elif not committed and requested is not None:
            state, reason = "requested", requested.reason
        elif started is not None:
            state, reason = "waiting", started_reason(started)
        elif (overdue := overdue_reason(vacuum, latest, now, overdue_after)) is not None:
            state, reason = "overdue", overdue
        elif latest is not None and latest.stuck:
            state, reason = "stuck", waiting_reason(latest)
        elif latest is not None:
            state, reason = "waiting", waiting_reason(latest)
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
        return new_row(
            vacuum_id=str(first.correlation_id) if first.correlation_id and not only_requested else None,
            tenant=identified.tenant,
            table=identified.table,
            partition=identified.partition,
            compaction_type=vacuum.compaction_type if vacuum else (requested.compaction_type if requested else None),
            vacuum_time=vacuum.occurred_at if vacuum else None,
            new_directories=tuple(vacuum.new_directories) if vacuum else (),
            state=state,
            attempts=attempts,
            time_waited_ms=time_waited(vacuum, started or latest, dones, state),
            directories_removed=tuple(removed),
            bytes_freed=sum(removed.values()),
            cleaner_id=dones[0].cleaner_id if dones else (started.cleaner_id if started else None),
            reason=reason,
            locks_held=lock_models(latest.locks_held) if latest and pending else (),
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
    if current is None or order_of(event) < order_of(current):
        kept[str(event.event_id)] = event


def _rank(started: AnyStarted) -> tuple[int, datetime, str]:
    return (started.attempt, *order_of(started))
