"""The ledger topic read back: each cleanup's ``CleanupLedger`` chunks and its ``CleanupUndone``
reports, for ``acidclean undo`` and ``acidclean audit``; and :func:`undo_cleanups`, which plans (and,
asked to, applies) the undo of the cleanups selected and publishes a ``CleanupUndone`` for each one
that put anything back.
"""

from __future__ import annotations

import getpass
import logging
import socket
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING

from acidclean.consumers.ledger import IncompleteLedgerError, Ledger, assemble
from acidclean.consumers.undo import UndoPlan, UndoResult, apply_undo, plan_undo
from acidclean.schemas.common import derived_event_id, utc_now
from acidclean.schemas.ledger import CleanupLedger, CleanupUndone
from acidclean.shared.bus.codec import CE_TYPE, decode
from acidclean.shared.bus.kafka_errors import KafkaAccessDeniedError
from acidclean.shared.bus.protocol import EventBus
from acidclean.shared.bus.reader import LogReader
from acidclean.shared.bus.records import RawRecord, raw_record
from acidclean.shared.errors import AcidCleanError
from acidclean.shared.metastore import TableInfo
from acidclean.shared.settings import Settings
from acidclean.shared.storage import StorageLocation, open_location

if TYPE_CHECKING:
    from acidclean.consumers.audit import AuditRow


LOGGER = logging.getLogger("acidclean.audit")


class UndoRefusedError(AcidCleanError):
    """``acidclean undo`` cannot do what was asked (no such cleanup, or its ledger is incomplete)."""


@dataclass
class LedgerLog:
    """What the ledger topic holds: chunks by cleanup id, and undos by cleanup id."""

    chunks: dict[str, list[CleanupLedger]] = field(default_factory=dict)
    undone: dict[str, list[CleanupUndone]] = field(default_factory=dict)

    def add(self, event: object) -> None:
        if isinstance(event, CleanupLedger):
            self.chunks.setdefault(str(event.cleanup_id), []).append(event)
        elif isinstance(event, CleanupUndone):
            self.undone.setdefault(str(event.cleanup_id), []).append(event)

    def undone_vacuums(self) -> dict[str, CleanupUndone]:
        """The latest undo of each vacuum (by its correlation id), for ``audit``."""
        latest: dict[str, CleanupUndone] = {}
        for undos in self.undone.values():
            for undo in undos:
                key = str(undo.correlation_id)
                if key not in latest or undo.occurred_at > latest[key].occurred_at:
                    latest[key] = undo
        return latest


def read_ledger_log(settings: Settings, since_ms: int | None = None) -> LedgerLog:
    """The ledger topic from its beginning (or ``since_ms``) to its current end."""
    reader = LogReader(settings.kafka, [settings.topic("cleanup_ledger")], since_ms=since_ms)
    return ledger_log_of((raw_record(message) for message in reader), settings.tenant)


def ledger_log_of(records: Iterable[RawRecord], tenant: str) -> LedgerLog:
    log = LedgerLog()
    for record in records:
        log.add(decode(record, rejected_by="acidclean-undo", tenant=tenant, expected=(CleanupLedger, CleanupUndone)))
    return log


def select_cleanups(
    log: LedgerLog, cleanup_id: str | None, table: str | None, since: datetime | None
) -> list[list[CleanupLedger]]:
    """The chunks of each cleanup asked for: by the id of its ``CleanupDone`` or of its vacuum, or all
    of a table's (``since`` a time), oldest first."""
    selected = []
    for chunks in log.chunks.values():
        first = chunks[0]
        if cleanup_id is not None and cleanup_id not in (str(first.cleanup_id), str(first.correlation_id)):
            continue
        if table is not None and first.table != table:
            continue
        if since is not None and first.occurred_at < since:
            continue
        selected.append(chunks)
    if cleanup_id is not None and not selected:
        raise UndoRefusedError(
            f"no ledger of cleanup {cleanup_id} on the ledger topic: give the event_id of its CleanupDone or of its "
            "vacuum (acidclean audit --format json shows vacuum_id); cleanups older than the topic's retention or "
            "made before the ledger existed cannot be undone"
        )
    return sorted(selected, key=lambda chunks: chunks[0].occurred_at)


@dataclass(frozen=True)
class CleanupUndo:
    """One cleanup's undo: the plan, and the result when applied."""

    plan: UndoPlan
    result: UndoResult | None = None
    published: CleanupUndone | None = None


def undo_cleanups(
    selected: list[list[CleanupLedger]],
    reread: Callable[[Ledger], TableInfo],
    *,
    apply: bool,
    bus: EventBus | None,
    topic: str,
    opener: Callable[[str], StorageLocation] = open_location,
) -> list[CleanupUndo]:
    """Plan the undo of each selected cleanup (newest first, so an older cleanup's files are put back
    after the newer ones they preceded); with ``apply``, rename the files back and publish ``CleanupUndone``."""
    undos = []
    for chunks in reversed(selected):
        location = opener(chunks[0].location)
        try:
            ledger = assemble(chunks, location.path)
        except IncompleteLedgerError as error:
            raise UndoRefusedError(f"{error}; the cleanup cannot be undone from the log") from error
        plan = plan_undo(ledger, location.fs, location.path, partial(reread, ledger))
        if not apply or plan.table_refusal is not None:
            undos.append(CleanupUndo(plan))
            continue
        result = apply_undo(plan, location.fs)
        event = None
        if bus is not None:
            event = undone_event(ledger, result, chunks[0])
            bus.publish(topic, event)
        undos.append(CleanupUndo(plan, result, event))
    return undos


def undone_event(ledger: Ledger, result: UndoResult, first: CleanupLedger) -> CleanupUndone:
    reasons = sorted({item.reason for item in result.refused})
    note = "; ".join(reasons)[:4096] or None
    return CleanupUndone(
        event_id=derived_event_id(uuid.UUID(ledger.cleanup_id), f"undone-{uuid.uuid4()}"),
        tenant=first.tenant,
        table=first.table,
        partition=first.partition,
        occurred_at=utc_now(),
        causation_id=uuid.UUID(ledger.cleanup_id),
        correlation_id=first.correlation_id,
        cleanup_id=first.cleanup_id,
        restored_files=len(result.restored),
        restored_bytes=sum(item.file.size for item in result.restored),
        refused_files=len(result.refused),
        undone_by=f"{getpass.getuser()}@{socket.gethostname()}",
        note=note,
    )


def read_undos(settings: Settings) -> dict[str, CleanupUndone]:
    """The latest ``CleanupUndone`` of each vacuum (by its id) on the ledger topic; the ledger chunks
    themselves are skipped unread (by their ``ce_type`` header), so the audit pays little for them."""
    reader = LogReader(settings.kafka, [settings.topic("cleanup_ledger")])
    wanted = CleanupUndone.event_type.encode()
    records = (record for record in map(raw_record, reader) if (CE_TYPE, wanted) in record.headers)
    try:
        return ledger_log_of(records, settings.tenant).undone_vacuums()
    except KafkaAccessDeniedError as error:
        # The history itself does not depend on it: an audit without Read on the ledger topic still runs.
        LOGGER.warning("undone cleanups are not shown: %s", error)
        return {}


def with_undos(rows: list[AuditRow], undos: dict[str, CleanupUndone]) -> list[AuditRow]:
    """Audit rows whose cleanup was undone say so in their detail (the state stays what the cleaner did)."""
    if not undos:
        return rows
    marked = []
    for row in rows:
        undo = undos.get(row.vacuum_id or "")
        if undo is None:
            marked.append(row)
            continue
        when = undo.occurred_at.isoformat().replace("+00:00", "Z")
        line = (
            f"undone {when} by {undo.undone_by}: {undo.restored_files} file(s) put back, {undo.refused_files} refused"
        )
        marked.append(replace(row, reason=f"{row.reason}; {line}" if row.reason else line))
    return marked
