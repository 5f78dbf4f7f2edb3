"""What the audit's fold reads: each event decoded either way (the event models, or the fast decoder's
structs of :mod:`acidclean.consumers.audit_wire`, which carry the same field names), its kind, the order
of two events, and the vacuums of a ``DelayedVacuums`` each read as its own delay envelope.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from acidclean.consumers.audit_wire import (
    WireCleanupDone,
    WireCleanupRejected,
    WireCleanupStarted,
    WireDelayedVacuums,
    WireDelayEnvelope,
    WireLock,
    WireVacuumCommitted,
    WireVacuumFailed,
    WireVacuumRequested,
    WireVacuumStarted,
)
from acidclean.schemas.common import LockSnapshotEntry
from acidclean.schemas.events import (
    CleanupDone,
    CleanupRejected,
    CleanupStarted,
    DelayedVacuums,
    DelayEnvelope,
    VacuumCommitted,
    VacuumFailed,
    VacuumRequested,
    VacuumStarted,
)

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
KIND: dict[type[Any], str] = {
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


def order_of(event: AuditEvent) -> tuple[datetime, str]:
    return (event.occurred_at, str(event.event_id))


Order = tuple[datetime, str]


def lock_models(locks: Iterable[LockSnapshotEntry | WireLock]) -> tuple[LockSnapshotEntry, ...]:
    return tuple(lock.model() if isinstance(lock, WireLock) else lock for lock in locks)
