"""Valid events for the unit tests, built in one place so each test states only what it varies."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

from acidclean.schemas.common import LockSnapshotEntry, derived_event_id
from acidclean.schemas.events import (
    CleanupDone,
    CleanupRejected,
    CleanupStarted,
    DelayedVacuums,
    DelayEnvelope,
    DeltaCommitted,
    RawHeader,
    RemovedDirectory,
    RequestedBy,
    SourceRecord,
    UnchangedWaiting,
    VacuumCommitted,
    VacuumFailed,
    VacuumFigures,
    VacuumRequested,
    VacuumStarted,
    VacuumThresholds,
    WaitingVacuum,
)
from acidclean.schemas.ledger import CleanupLedger, CleanupUndone

T0 = datetime(2025, 3, 14, 9, 0, 0, tzinfo=timezone.utc)


def lock(lock_id: int = 7, user: str = "alice", host: str = "reader-1") -> LockSnapshotEntry:
    return LockSnapshotEntry(
        lock_id=lock_id,
        txn_id=3,
        lock_type="SHARED_READ",
        state="ACQUIRED",
        user=user,
        host=host,
        acquired_at=T0 - timedelta(minutes=1),
    )


def vacuum(**changes: Any) -> VacuumCommitted:
    fields: dict[str, Any] = {
        "tenant": "acme",
        "table": "sales.orders",
        "partition": "ds=2025-03-14",
        "occurred_at": T0,
        "location": "/warehouse/sales.db/orders/ds=2025-03-14",
        "compaction_type": "MINOR",
        "new_directories": ["delta_0000001_0000003"],
        "highest_write_id": 3,
        "obsolete_directories": ["delta_0000001_0000001_0000"],
        "lock_snapshot": [lock()],
        "vacuum_job_id": "job-1",
    }
    fields.update(changes)
    fields.setdefault("locks_observed", len(fields["lock_snapshot"]))
    return VacuumCommitted(**fields)


def delay(of: VacuumCommitted, attempt: int = 1, **changes: Any) -> DelayEnvelope:
    checked = of.occurred_at + timedelta(seconds=2 * attempt)
    fields: dict[str, Any] = {
        "tenant": of.tenant,
        "table": of.table,
        "partition": of.partition,
        "occurred_at": checked,
        "causation_id": of.event_id,
        "correlation_id": of.event_id,
        "vacuum": of,
        "attempt": attempt,
        "due_at": checked + timedelta(seconds=2),
        "locks_held": list(of.lock_snapshot),
    }
    fields.update(changes)
    return DelayEnvelope(**fields)


def delayed_vacuums(*of: VacuumCommitted, attempt: int = 1, **changes: Any) -> DelayedVacuums:
    """One envelope carrying every vacuum of ``of`` (all of one key), checked ``attempt`` times."""
    first = of[0]
    checked = max(v.occurred_at for v in of) + timedelta(seconds=2 * attempt)
    fields: dict[str, Any] = {
        "tenant": first.tenant,
        "table": first.table,
        "partition": first.partition,
        "occurred_at": checked,
        "causation_id": first.event_id,
        "due_at": checked + timedelta(seconds=2),
        "waiting": [WaitingVacuum(vacuum=v, attempt=attempt, locks_held=list(v.lock_snapshot)) for v in of],
        "merged_from": [v.event_id for v in of],
    }
    fields.update(changes)
    return DelayedVacuums(**fields)


def unchanged(waiting: list[WaitingVacuum], checks: int = 0, **changes: Any) -> UnchangedWaiting:
    """The ``unchanged`` summary that matches ``waiting`` (every vacuum waiting on locks alone)."""
    unstuck = [item.vacuum.occurred_at for item in waiting if not item.stuck]
    fields: dict[str, Any] = {
        "lock_ids": sorted({held.lock_id for item in waiting for held in item.locks_held}),
        "checks": checks,
        "oldest_commit": min(item.vacuum.occurred_at for item in waiting),
        "oldest_unstuck_commit": min(unstuck) if unstuck else None,
    }
    fields.update(changes)
    return UnchangedWaiting(**fields)


def unchanged_vacuums(*of: VacuumCommitted, attempt: int = 1, checks: int = 0, **changes: Any) -> DelayedVacuums:
    """``delayed_vacuums(*of)`` with the ``unchanged`` summary of its entries, ``checks`` checks on."""
    entries = delayed_vacuums(*of, attempt=attempt, **changes).waiting
    return delayed_vacuums(*of, attempt=attempt, **{"unchanged": unchanged(entries, checks), **changes})


def done(of: VacuumCommitted, **changes: Any) -> CleanupDone:
    fields: dict[str, Any] = {
        "tenant": of.tenant,
        "table": of.table,
        "partition": of.partition,
        "occurred_at": of.occurred_at + timedelta(seconds=5),
        "causation_id": of.event_id,
        "correlation_id": of.event_id,
        "directories_removed": [RemovedDirectory(name="delta_0000001_0000001_0000", file_count=2, bytes=300)],
        "time_waited_ms": 5000,
        "attempts": 2,
        "cleaner_id": "cleaner-1",
    }
    fields.update(changes)
    return CleanupDone(**fields)


def started(of: VacuumCommitted, **changes: Any) -> CleanupStarted:
    """The announcement made just before the deletes that ``done(of)`` reports."""
    fields: dict[str, Any] = {
        "tenant": of.tenant,
        "table": of.table,
        "partition": of.partition,
        "occurred_at": of.occurred_at + timedelta(seconds=4),
        "causation_id": of.event_id,
        "correlation_id": of.event_id,
        "directories_to_remove": [RemovedDirectory(name="delta_0000001_0000001_0000", file_count=2, bytes=300)],
        "attempt": 2,
        "cleaner_id": "cleaner-1",
    }
    fields.update(changes)
    return CleanupStarted(**fields)


def source_record(**changes: Any) -> SourceRecord:
    fields: dict[str, Any] = {
        "topic": "acid.vacuum.committed",
        "partition": 0,
        "offset": 12,
        "timestamp_ms": 1,
        "key_b64": "YQ==",
        "value_b64": "e30=",
        "headers": [RawHeader(name="h", value_b64=None)],
    }
    fields.update(changes)
    return SourceRecord(**fields)


def rejected(of: VacuumCommitted | None = None, **changes: Any) -> CleanupRejected:
    fields: dict[str, Any] = {
        "tenant": "acme",
        "occurred_at": T0 + timedelta(seconds=1),
        "reason_code": "unsafe_path",
        "reason": "'../etc' is not a child of the location",
        "rejected_by": "cleaner-1",
        "source": source_record(),
    }
    if of is not None:
        fields.update(
            tenant=of.tenant,
            table=of.table,
            partition=of.partition,
            causation_id=of.event_id,
            correlation_id=of.event_id,
            rejected_event_type=VacuumCommitted.event_type,
        )
    fields.update(changes)
    return CleanupRejected(**fields)


def delta(**changes: Any) -> DeltaCommitted:
    fields: dict[str, Any] = {
        "tenant": "acme",
        "table": "sales.orders",
        "partition": "ds=2025-03-14",
        "occurred_at": T0 - timedelta(minutes=2),
        "location": "/warehouse/sales.db/orders/ds=2025-03-14",
        "delta_directory": "delta_0000004_0000004_0000",
        "write_id": 4,
        "bytes": 512,
    }
    fields.update(changes)
    return DeltaCommitted(**fields)


def requested(**changes: Any) -> VacuumRequested:
    fields: dict[str, Any] = {
        "tenant": "acme",
        "table": "sales.orders",
        "partition": "ds=2025-03-14",
        "occurred_at": T0 - timedelta(minutes=1),
        "location": "/warehouse/sales.db/orders/ds=2025-03-14",
        "compaction_type": "MINOR",
        "reason": "12 deltas >= hive.compactor.delta.num.threshold 10",
        "figures": VacuumFigures(delta_count=12, delete_delta_count=0, delta_bytes=6000, base_bytes=0, aborted_txns=0),
        "thresholds": VacuumThresholds(delta_num=10, delta_pct=0.1, aborted_txns=1000),
        "requested_by": RequestedBy(initiator_id="initiator-1", trigger="event"),
        "requested_at": T0 - timedelta(minutes=1),
    }
    fields.update(changes)
    return VacuumRequested(**fields)


def vacuum_started(of: VacuumRequested, **changes: Any) -> VacuumStarted:
    fields: dict[str, Any] = {
        "tenant": of.tenant,
        "table": of.table,
        "partition": of.partition,
        "occurred_at": of.occurred_at + timedelta(seconds=1),
        "causation_id": of.event_id,
        "correlation_id": of.event_id,
        "vacuum_service_id": "vacuum-service-1",
        "started_at": of.occurred_at + timedelta(seconds=1),
    }
    fields.update(changes)
    return VacuumStarted(**fields)


def vacuum_failed(of: VacuumRequested, **changes: Any) -> VacuumFailed:
    fields: dict[str, Any] = {
        "tenant": of.tenant,
        "table": of.table,
        "partition": of.partition,
        "occurred_at": of.occurred_at + timedelta(seconds=2),
        "causation_id": of.event_id,
        "correlation_id": of.event_id,
        "reason_code": "error",
        "message": "Spark job failed",
        "failed_at": of.occurred_at + timedelta(seconds=2),
    }
    fields.update(changes)
    return VacuumFailed(**fields)


def ledger(of: VacuumCommitted, **changes: Any) -> CleanupLedger:
    """The one-chunk ledger of ``of``'s cleanup: two files moved to the HDFS trash."""
    from acidclean.consumers.ledger import ledger_records
    from acidclean.consumers.remover import RemovedFile

    path = "/" + of.location.split("://", 1)[-1].split("/", 1)[-1]
    trash = f"/user/hive/.Trash/Current{path}"
    files = [
        RemovedFile(name, "bucket_00000", 100, "mtime_ns=1", f"trash:{trash}/{name}/bucket_00000")
        for name in of.obsolete_directories
    ]
    [record] = ledger_records(
        done(of, event_id=derived_event_id(of.event_id, "cleanup-done")), of.location, path, None, files
    )
    return record.model_copy(update=changes)


def undone(of: VacuumCommitted, **changes: Any) -> CleanupUndone:
    fields: dict[str, Any] = {
        "tenant": of.tenant,
        "table": of.table,
        "partition": of.partition,
        "occurred_at": of.occurred_at + timedelta(hours=1),
        "correlation_id": of.event_id,
        "cleanup_id": derived_event_id(of.event_id, "cleanup-done"),
        "restored_files": 2,
        "restored_bytes": 200,
        "refused_files": 0,
        "undone_by": "ops@host",
    }
    fields.update(changes)
    return CleanupUndone(**fields)


def one_of_each() -> list[Any]:
    """One valid event of every type, linked as one vacuum's history."""
    r = requested()
    v = vacuum(request_id=r.event_id)
    return [
        r,
        vacuum_started(r),
        v,
        delay(v),
        delayed_vacuums(v, vacuum(table=v.table, partition=v.partition)),
        unchanged_vacuums(v, vacuum(table=v.table, partition=v.partition), attempt=2, checks=3),
        started(v),
        done(v),
        rejected(v),
        delta(),
        rejected(None, event_id=uuid.uuid4()),
        vacuum_failed(requested()),
        ledger(v),
        undone(v),
    ]
