"""A table's timeline from its events: how many delta directories it had, and when a vacuum was
requested, ran, failed or committed, was made to wait and was cleaned. Pure: events in, points and
marks out; ``plot`` draws it.

The count starts at zero with the first event read, so it is exact for a table whose whole history
is on the topics (the topics keep vacuum and cleanup events forever; ingest events follow the broker's
retention) and a lower bound otherwise.

As in the audit, a cleanup removes what its ``CleanupDone`` lists and what the vacuum's
``CleanupStarted`` events announced (a cleaner restarted between deleting and reporting lists
nothing); the count falls when the ``CleanupDone`` arrives, not at the announcement. A
``DelayedVacuums`` marks a wait for each vacuum it carries, as one ``DelayEnvelope`` each would.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from acidclean.schemas.events import (
    CleanupDone,
    CleanupStarted,
    DelayedVacuums,
    DelayEnvelope,
    DeltaCommitted,
    VacuumCommitted,
    VacuumFailed,
    VacuumRequested,
    VacuumStarted,
)
from acidclean.shared.acid.partition_names import may_be_same_partition

MarkKind = Literal["requested", "running", "failed", "vacuum", "wait", "cleanup"]
TimelineEvent = (
    DeltaCommitted
    | VacuumRequested
    | VacuumStarted
    | VacuumFailed
    | VacuumCommitted
    | DelayEnvelope
    | DelayedVacuums
    | CleanupStarted
    | CleanupDone
)


@dataclass(frozen=True)
class Mark:
    at: datetime
    kind: MarkKind
    label: str


@dataclass(frozen=True)
class Timeline:
    table: str
    partition: str | None
    points: tuple[tuple[datetime, int], ...]  # (time, delta directories present from then on)
    marks: tuple[Mark, ...]


def is_delta_directory(name: str) -> bool:
    return name.startswith(("delta_", "delete_delta_"))


def _matches(event: TimelineEvent, table: str, partition: str | None) -> bool:
    """The event is of ``table`` and of ``partition`` in any spelling (events carry the metastore's
    escaped name; an operator may type it unescaped)."""
    if isinstance(event, DelayEnvelope):
        event = event.vacuum
    return event.table == table and may_be_same_partition(event.partition, partition)


def _event_time(event: TimelineEvent) -> datetime:
    return event.occurred_at


def build_timeline(events: Iterable[TimelineEvent], table: str, partition: str | None = None) -> Timeline:
    """The delta-directory count over time and the vacuum, wait and cleanup marks of one table."""
    ordered = sorted((e for e in events if _matches(e, table, partition)), key=_event_time)
    announced: dict[str, set[str]] = {}  # vacuum id -> directories its CleanupStarted events named
    for event in ordered:
        if isinstance(event, CleanupStarted):
            announced.setdefault(str(event.correlation_id), set()).update(d.name for d in event.directories_to_remove)
    present: set[str] = set()
    seen_events: set[str] = set()
    points: list[tuple[datetime, int]] = []
    marks: list[Mark] = []
    for event in ordered:
        if str(event.event_id) in seen_events:
            continue  # at-least-once delivery: a duplicate changes nothing
        seen_events.add(str(event.event_id))
        if isinstance(event, CleanupStarted):
            continue  # counted when its CleanupDone arrives
        if isinstance(event, VacuumRequested):
            by_hive = f" (Hive compaction {event.hive_compaction_id})" if event.hive_compaction_id else ""
            marks.append(
                Mark(event.occurred_at, "requested", f"{event.compaction_type.lower()} vacuum requested{by_hive}")
            )
            continue  # requests and runs change no directory: a mark, no point
        if isinstance(event, VacuumStarted):
            marks.append(Mark(event.started_at, "running", f"vacuum running on {event.vacuum_service_id}"))
            continue
        if isinstance(event, VacuumFailed):
            marks.append(Mark(event.failed_at, "failed", f"vacuum failed: {event.reason_code}"))
            continue
        if isinstance(event, DeltaCommitted):
            present.add(event.delta_directory)
        elif isinstance(event, VacuumCommitted):
            present.update(name for name in event.new_directories if is_delta_directory(name))
            marks.append(Mark(event.occurred_at, "vacuum", f"{event.compaction_type.lower()} vacuum"))
        elif isinstance(event, DelayEnvelope):
            marks.append(Mark(event.occurred_at, "wait", f"wait #{event.attempt}: {len(event.locks_held)} lock(s)"))
        elif isinstance(event, DelayedVacuums):  # the marks and points of one DelayEnvelope per waiting vacuum
            # A check that found every lock still listed counts itself in unchanged.checks, not in the attempts.
            checks = event.unchanged.checks if event.unchanged is not None else 0
            for item in event.waiting:
                attempt = item.attempt + checks
                marks.append(Mark(event.occurred_at, "wait", f"wait #{attempt}: {len(item.locks_held)} lock(s)"))
                points.append((event.occurred_at, len(present)))
            continue
        else:
            removed = {d.name for d in event.directories_removed}
            if not event.dry_run:
                removed |= announced.get(str(event.correlation_id), set())
            present.difference_update(name for name in removed if is_delta_directory(name))
            marks.append(Mark(event.occurred_at, "cleanup", f"cleanup: {len(removed)} removed"))
        points.append((event.occurred_at, len(present)))
    return Timeline(table, partition, tuple(points), tuple(marks))
