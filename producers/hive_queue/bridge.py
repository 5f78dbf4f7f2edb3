"""``acidclean hive-queue``: serve Hive 4's compaction queue, one round at a time.

A round (every ``hive_queue_poll_interval_s``):

1. reads the queue (``show_compact``) and, when acidclean has entries in it, the event log since the
   oldest of them (:class:`~.progress.QueueLog`);
2. publishes the request of every entry this worker took but whose ``VacuumRequested`` is not on the
   log (a crash between the take and the publish);
3. moves each of acidclean's entries to the state the log proves (:func:`~.progress.next_steps`);
4. takes every ``initiated`` entry of its pool the way Hive's Worker does (``find_next_compact2``: the
   metastore moves it to ``working`` under this worker's id in one transaction, so no other worker,
   Hive's or another replica, holds it) and publishes its ``VacuumRequested``, whose id is derived
   from the compaction id (:func:`~.progress.request_id_of`).

The event log stays the source of truth: the vacuum service and the cleaner never wait for the queue.
A round that cannot reach the metastore or the broker changes nothing and the next round does it.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone

from acidclean import __version__
from acidclean.producers.hive_queue.own_requests import entered_request
from acidclean.producers.hive_queue.progress import QueueLog, Step, next_steps, request_id_of
from acidclean.schemas.common import EventBase, utc_now
from acidclean.schemas.events import (
    CleanupRejected,
    RequestedBy,
    VacuumFigures,
    VacuumRequested,
    VacuumThresholds,
)
from acidclean.shared.bus.codec import decode
from acidclean.shared.bus.protocol import EventBus
from acidclean.shared.bus.reader import LogReader
from acidclean.shared.bus.records import raw_record
from acidclean.shared.errors import AcidCleanError, TableNotFoundError
from acidclean.shared.hive4_queue.queue import WORKER_PREFIX, HiveCompactionQueue, QueueEntry
from acidclean.shared.logs import log as log_fields
from acidclean.shared.settings import Settings

LOGGER = logging.getLogger(__name__)
ACTIVE = ("working", "ready for cleaning")
# Records of a request are looked for from a little before its entry was queued (clocks differ).
LOOKBACK_MS = 10 * 60 * 1000
LOG_TOPICS = ("vacuum_requests", "vacuum_committed", "cleanup_done", "dead_letter")

LogRead = Callable[[int], Iterable[EventBase]]


def worker_id_of(name: str) -> str:
    """The worker id acidclean takes entries under: Hive prints it in SHOW COMPACTIONS."""
    return f"{WORKER_PREFIX}-{name}"


@dataclass
class RoundReport:
    """What one round did, for logs and tests."""

    taken: list[int] = field(default_factory=list)
    republished: list[int] = field(default_factory=list)
    moved: list[tuple[int, str]] = field(default_factory=list)
    error: str | None = None


class HiveQueueBridge:
    """One replica of the bridge; replicas need distinct ``name`` (the worker id names them)."""

    def __init__(
        self,
        settings: Settings,
        queue: HiveCompactionQueue,
        bus: EventBus,
        *,
        name: str | None = None,
        pool: str | None = None,
        read_log: LogRead | None = None,
        observe: Callable[[RoundReport], None] | None = None,
    ) -> None:
        self.settings = settings
        self.queue = queue
        self.bus = bus
        self.worker_id = worker_id_of(name or socket.gethostname())
        self.pool = pool
        self._read_log = read_log or self._log_since
        self._stop = threading.Event()
        self._observe = observe  # told each round's report (metrics, liveness)

    # the loop -------------------------------------------------------------------------------------

    def run(self, interval_s: float) -> None:
        while not self._stop.is_set():
            report = self.run_once()
            if self._observe is not None:
                self._observe(report)
            self._stop.wait(interval_s)

    def stop(self) -> None:
        self._stop.set()

    def run_once(self) -> RoundReport:
        report = RoundReport()
        try:
            self._round(report)
        except AcidCleanError as error:
            # The log holds the truth; the queue catches up next round.
            report.error = str(error)
            log_fields(LOGGER, logging.WARNING, "hive queue round failed; retried next round", error=str(error))
        return report

    def _round(self, report: RoundReport) -> None:
        entries = [e for e in self.queue.entries() if e.state in ACTIVE]
        if entries:
            since = min(e.enqueued_at_ms or e.started_at_ms or 0 for e in entries) - LOOKBACK_MS
            folded = QueueLog().fold(self._read_log(max(0, since)))
            for entry in entries:
                progress = folded.by_compaction.get(entry.compaction_id)
                if progress is None and entry.state == "working" and entry.worker_id == self.worker_id:
                    self._publish_request(entry)  # taken, then the publish was lost: it is made now
                    report.republished.append(entry.compaction_id)
                    continue
                if entry.state == "working" and not (entry.worker_id or "").startswith(WORKER_PREFIX):
                    # Handed back and retaken by Hive's Worker (revokeTimedoutWorkers, after
                    # hive.compactor.worker.timeout): Hive's now, whatever acidclean's vacuum did.
                    continue
                for step in next_steps(progress, entry.state):
                    self._apply(entry, step)
                    report.moved.append((entry.compaction_id, step.name))
        while True:
            taken = self.queue.take_next(self.worker_id, __version__, self.pool)
            if taken is None:
                return
            report.taken.append(taken.compaction_id)
            self._publish_request(taken)

    # one entry ------------------------------------------------------------------------------------

    def _publish_request(self, entry: QueueEntry) -> None:
        if entry.compaction_type not in ("MAJOR", "MINOR"):
            self.queue.mark_refused(entry, f"acidclean does not do {entry.compaction_type} compactions")
            return
        try:
            location = self.queue.metastore.get_table(entry.db, entry.table, entry.partition).location
        except TableNotFoundError as error:
            self.queue.mark_failed(entry, f"acidclean table_gone: {error}")
            return
        entered = entered_request(entry)  # by acidclean's own initiator
        if entered is not None:
            self._publish(entered, entry)
            return
        # The time the entry was taken, the same in every copy of the request (the vacuum service looks
        # for an earlier answer from there).
        taken_ms = entry.started_at_ms or _now_ms()
        requested_at = datetime.fromtimestamp(taken_ms / 1000, timezone.utc)
        request = VacuumRequested(
            event_id=request_id_of(self.settings.tenant, entry.compaction_id),
            tenant=self.settings.tenant,
            table=f"{entry.db}.{entry.table}",
            partition=entry.partition,
            occurred_at=utc_now(),
            location=location,
            compaction_type="MAJOR" if entry.compaction_type == "MAJOR" else "MINOR",
            reason=f"ALTER TABLE ... COMPACT '{entry.compaction_type.lower()}' (Hive compaction "
            f"{entry.compaction_id}, by {entry.run_as or 'unknown'})",
            figures=VacuumFigures(delta_count=0, delete_delta_count=0, delta_bytes=0, base_bytes=0, aborted_txns=0),
            thresholds=VacuumThresholds(
                delta_num=self.settings.compactor_delta_num_threshold,
                delta_pct=self.settings.compactor_delta_pct_threshold,
                aborted_txns=self.settings.compactor_abortedtxn_threshold,
            ),
            requested_by=RequestedBy(initiator_id=self.worker_id, trigger="hive_queue"),
            requested_at=requested_at,
            hive_compaction_id=entry.compaction_id,
        )
        self._publish(request, entry)

    def _publish(self, request: VacuumRequested, entry: QueueEntry) -> None:
        self.bus.publish(self.settings.topic("vacuum_requests"), request)
        log_fields(
            LOGGER,
            logging.INFO,
            "vacuum requested from Hive's queue",
            event_id=str(request.event_id),
            hive_compaction_id=entry.compaction_id,
            table=request.table,
            partition=entry.partition,
        )

    def _apply(self, entry: QueueEntry, step: Step) -> None:
        if step.name == "mark_compacted":
            self.queue.mark_compacted(entry)
        elif step.name == "mark_cleaned":
            self.queue.mark_cleaned(entry, step.highest_write_id)
        elif step.name == "mark_failed":
            self.queue.mark_failed(entry, step.message or "acidclean: failed")
        else:
            self.queue.mark_refused(entry, step.message or "acidclean: nothing to compact")
        log_fields(LOGGER, logging.INFO, f"hive queue {step.name}", hive_compaction_id=entry.compaction_id)

    # the log --------------------------------------------------------------------------------------

    def _log_since(self, since_ms: int) -> Iterator[EventBase]:
        topics = {self.settings.topic(name): name for name in LOG_TOPICS}
        for message in LogReader(self.settings.kafka, list(topics), since_ms=since_ms):
            event = decode(raw_record(message), rejected_by=self.worker_id, tenant=self.settings.tenant)
            # A record that does not decode is refused as a CleanupRejected: only the dead-letter
            # topic's own rejections say something about a cleanup.
            if isinstance(event, CleanupRejected) and topics[str(message.topic())] != "dead_letter":
                continue
            yield event


def _now_ms() -> int:
    return int(utc_now().timestamp() * 1000)
