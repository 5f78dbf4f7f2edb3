"""What the cleaner logs and counts once the broker has an outcome: a vacuum parked (alone, in a group,
carried on unread), handed back from its group, announced, cleaned, or dead-lettered; and which
vacuums were seen stuck (waiting past the max wait) lately, for the stuck gauge.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from acidclean.consumers.logs import log
from acidclean.consumers.outcome_batch import StillWaiting, UnchangedGroup
from acidclean.consumers.rules.readiness import Readiness
from acidclean.consumers.waiting import GroupOut, vacuum_id_of
from acidclean.consumers.work import CleanerContext, OutcomeKind
from acidclean.schemas.events import CleanupDone, CleanupRejected, CleanupStarted, DelayEnvelope, VacuumCommitted

LOGGER = logging.getLogger("acidclean.cleaner")


class OutcomeNotes:
    """Logs and metrics of acknowledged outcomes, and the recently stuck vacuums. Thread-safe."""

    def __init__(self, context: CleanerContext) -> None:
        self._context = context
        self._stuck: dict[str, float] = {}
        self._stuck_lock = threading.Lock()

    def dead_lettered(self, rejected: CleanupRejected) -> None:
        self._context.metrics.dead_letters.labels(rejected.reason_code).inc()
        self._context.metrics.events.labels("dead_lettered").inc()
        log(
            LOGGER,
            logging.WARNING,
            "dead-lettered",
            outcome="dead_lettered",
            reason_code=rejected.reason_code,
            reason=rejected.reason,
            table=rejected.table,
            partition=rejected.partition,
            event_id=rejected.causation_id,
            vacuum_id=rejected.correlation_id,
            source_topic=rejected.source.topic,
            source_offset=rejected.source.offset,
            dry_run=self._context.config.dry_run or None,
        )

    def reported(self, processed: VacuumCommitted | DelayEnvelope, done: CleanupDone, kind: OutcomeKind) -> None:
        self._context.metrics.events.labels(kind).inc()
        self._context.metrics.wait_seconds.observe(done.time_waited_ms / 1000)
        log(
            LOGGER,
            logging.INFO,
            "cleaned" if kind != "dry_run" else "dry run: would remove",
            outcome=kind,
            event_id=processed.event_id,
            vacuum_id=done.correlation_id,
            table=done.table,
            partition=done.partition,
            attempt=done.attempts,
            removed=[item.name for item in done.directories_removed],
            bytes=done.bytes_freed,
            waited_ms=done.time_waited_ms,
            note=done.note,
        )

    def announced(self, processed: VacuumCommitted | DelayEnvelope, started: CleanupStarted) -> None:
        log(
            LOGGER,
            logging.INFO,
            "cleanup started",
            event_id=processed.event_id,
            vacuum_id=started.correlation_id,
            table=started.table,
            partition=started.partition,
            attempt=started.attempt,
            to_remove=sorted(directory.name for directory in started.directories_to_remove),
            bytes=started.bytes_to_free,
        )

    def delays_published(
        self, pending: Sequence[tuple[VacuumCommitted | DelayEnvelope, Readiness, DelayEnvelope]]
    ) -> None:
        for processed, readiness, envelope in pending:
            now = envelope.occurred_at
            self._context.metrics.requeues.inc()
            self._context.metrics.events.labels("delayed").inc()
            if readiness.check_error is not None:
                self._context.metrics.check_errors.inc()
            vacuum = envelope.vacuum
            fields = dict(
                outcome="delayed",
                event_id=processed.event_id,
                vacuum_id=vacuum.event_id,
                table=vacuum.table,
                partition=vacuum.partition,
                attempt=envelope.attempt,
                due_at=envelope.due_at.isoformat(),
                locks_held=[entry.lock_id for entry in envelope.locks_held],
                check_error=readiness.check_error,
                dry_run=self._context.config.dry_run or None,
            )
            if envelope.stuck:
                self._context.metrics.stuck_checks.inc()
                with self._stuck_lock:
                    self._stuck[str(vacuum.event_id)] = time.time()
                log(
                    LOGGER,
                    logging.WARNING,
                    f"vacuum waiting for {(now - vacuum.occurred_at).total_seconds():.0f} s, longer than the max wait "
                    f"{self._context.config.max_wait_s:g} s; still waiting for "
                    f"{readiness.describe_held() or 'the metastore'}",
                    stuck=True,
                    stuck_since=envelope.stuck_since,
                    holders=[
                        {"lock_id": e.lock_id, "user": e.user, "host": e.host, "txn_id": e.txn_id}
                        for e in envelope.locks_held
                    ],
                    **fields,
                )
            else:
                # The first wait at INFO, later re-checks at DEBUG (as for DelayedVacuums): a busy cluster
                # re-checks tens of thousands an interval, and the delay topic and the metrics record each.
                log(LOGGER, logging.INFO if envelope.attempt == 1 else logging.DEBUG, "not ready; delayed", **fields)

    def group_published(self, out: GroupOut, members: Sequence[StillWaiting]) -> None:
        self._context.metrics.requeues.inc(len(members))
        self._context.metrics.events.labels("delayed").inc(len(members))
        errors = sum(1 for item in members if item.entry.check_error is not None)
        if errors:
            self._context.metrics.check_errors.inc(errors)
        event = out.event
        stuck = [item for item in members if item.entry.stuck]
        if stuck:
            self._context.metrics.stuck_checks.inc(len(stuck))
            with self._stuck_lock:
                for item in stuck:
                    self._stuck[item.vacuum_id] = time.time()
        for item in stuck:
            if item.newly_stuck:
                log(
                    LOGGER,
                    logging.WARNING,
                    f"vacuum waiting longer than the max wait {self._context.config.max_wait_s:g} s; still waiting",
                    stuck=True,
                    vacuum_id=item.vacuum_id,
                    table=event.table,
                    partition=event.partition,
                    attempt=item.entry.attempt,
                    stuck_since=item.entry.stuck_since,
                )
        # A vacuum's first wait is logged at INFO; its later re-checks (tens of thousands an interval
        # in a busy cluster) at DEBUG: the delay topic and the metrics record every one.
        first = any(item.entry.attempt == 1 for item in members)
        log(
            LOGGER,
            logging.INFO if first else logging.DEBUG,
            f"not ready; {len(members)} vacuum(s) delayed together",
            outcome="delayed",
            event_id=event.event_id,
            table=event.table,
            partition=event.partition,
            vacuums=len(members),
            due_at=event.due_at.isoformat(),
            dry_run=self._context.config.dry_run or None,
        )

    def carried_published(self, out: GroupOut, unread: UnchangedGroup) -> None:
        count = len(out.entries) if unread.vacuums is None else unread.vacuums
        self._context.metrics.requeues.inc(count)
        self._context.metrics.events.labels("delayed").inc(count)
        self._context.metrics.events.labels("carried_unread").inc(count)
        stuck = [entry for entry in out.entries if entry.stuck]
        if stuck:
            self._context.metrics.stuck_checks.inc(len(stuck))
            seen = time.time()
            with self._stuck_lock:
                for entry in stuck:
                    self._stuck[vacuum_id_of(entry)] = seen
        log(
            LOGGER,
            logging.DEBUG,
            f"not ready; every lock its {count} vacuum(s) wait on still listed: carried on unread",
            outcome="delayed",
            event_id=out.event.event_id,
            table=out.event.table,
            partition=out.event.partition,
            vacuums=count,
            due_at=unread.due_at.isoformat(),
            dry_run=self._context.config.dry_run or None,
        )

    def single_carried(self, envelope: DelayEnvelope) -> None:
        self._context.metrics.requeues.inc()
        self._context.metrics.events.labels("delayed").inc()
        self._context.metrics.events.labels("carried_unread").inc()
        log(
            LOGGER,
            logging.DEBUG,
            "not ready; every lock it waits on still listed: carried on in its bundle",
            outcome="delayed",
            event_id=envelope.event_id,
            table=envelope.table,
            partition=envelope.partition,
            attempt=envelope.attempt,
            due_at=envelope.due_at.isoformat(),
        )

    def left_group(self, envelope: DelayEnvelope) -> None:
        self._context.metrics.events.labels("ready_in_group").inc()
        # DEBUG: "cleaned" follows at INFO for each of these; at 100,000 released vacuums this line was
        # a third of the 256,000 INFO lines, and the metric and the delay topic record it anyway.
        log(
            LOGGER,
            logging.DEBUG,
            "ready; handed back from its group to be cleaned",
            event_id=envelope.causation_id,
            vacuum_id=envelope.correlation_id,
            table=envelope.table,
            partition=envelope.partition,
            attempt=envelope.attempt,
        )

    def stuck_count(self, within_s: float) -> int:
        horizon = time.time() - within_s
        with self._stuck_lock:
            for key in [key for key, seen in self._stuck.items() if seen < horizon]:
                del self._stuck[key]
            return len(self._stuck)
