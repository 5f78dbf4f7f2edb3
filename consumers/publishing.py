"""Publishing the outcomes of checks: a vacuum's delay, its cleanup's announcement and report, a
dead letter. Inside a batch an outcome is queued for the batch's one ``publish_many``
(:mod:`acidclean.consumers.batch_writer`); alone, it is published now and returns once acknowledged
(a ``BusError`` propagates: the caller must not commit the input offset). What is logged and counted
once the broker has it is :mod:`acidclean.consumers.outcome_notes`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from acidclean.consumers.bundles import WaitingBundle
from acidclean.consumers.ledger import ledger_records
from acidclean.consumers.outcome_batch import Outgoing, PreparedCleanup
from acidclean.consumers.outcome_notes import OutcomeNotes
from acidclean.consumers.remover import RemovedFile
from acidclean.consumers.rules.readiness import Readiness
from acidclean.consumers.rules.verdicts import Refusal
from acidclean.consumers.scheduling import delay_envelope, vacuum_of
from acidclean.consumers.table_check import TableLockCheck
from acidclean.consumers.waiting import WaitingGroup
from acidclean.consumers.work import CleanerContext, Outcome, OutcomeKind, Work
from acidclean.schemas.common import EventBase, derived_event_id
from acidclean.schemas.events import (
    CleanupDone,
    CleanupRejected,
    CleanupStarted,
    DelayEnvelope,
    RemovedDirectory,
    VacuumCommitted,
)
from acidclean.shared.bus.bundle import PrebuiltRecord
from acidclean.shared.bus.codec import fit_field, reject
from acidclean.shared.errors import BusError

ISOLATION_GIVE_UP_S = 1.0  # an event retried alone that fails slower than this: the broker is away


class OutcomePublisher:
    """Builds and publishes outcomes (now, or queued in the lane's batch). Thread-safe."""

    def __init__(self, context: CleanerContext, notes: OutcomeNotes) -> None:
        self._context = context
        self._notes = notes

    def publish(self, topic: str, event: EventBase) -> None:
        if self._context.config.dry_run and not isinstance(event, CleanupDone):
            return  # a dry run reports what it would do in its logs; only CleanupDone(dry_run) is published
        self._context.bus().publish(topic, event)

    def emit(self, topic: str, event: EventBase, after: Callable[[], None], locks: TableLockCheck | None) -> bool:
        """Publish now and run ``after``, or, inside a batch, queue both for :meth:`flush_batch`;
        ``True`` when deferred (the outcome is not acknowledged yet)."""
        if locks is not None and locks.batch is not None:
            locks.batch.outbox.append(Outgoing(topic, event, after))
            return True
        self.publish(topic, event)
        after()
        return False

    def publish_isolating(self, items: Sequence[tuple[str, EventBase | PrebuiltRecord]]) -> dict[str, BusError]:
        """``publish_many(items)``; if the broker refuses the batch, each item again on its own: the
        ``BusError`` of each one it still does not take, by event id."""
        if not items:
            return {}
        try:
            self._context.bus().publish_many(items)
            return {}
        except BusError as error:
            if len(items) == 1:
                return {str(items[0][1].event_id): error}
        failed: dict[str, BusError] = {}
        for index, (topic, event) in enumerate(items):
            started = time.monotonic()
            try:
                self._context.bus().publish_many([(topic, event)])
            except BusError as error:
                failed[str(event.event_id)] = error
                if time.monotonic() - started > ISOLATION_GIVE_UP_S:
                    # Not one event refused (a refusal is quick) but a broker that does not answer:
                    # waiting out the timeout for each of the others would only stall the batch.
                    failed.update({str(rest.event_id): error for _, rest in items[index + 1 :]})
                    break
        return failed

    def dead_letter(self, rejected: CleanupRejected, locks: TableLockCheck | None = None) -> Outcome:
        deferred = self.emit(
            self._context.config.topics.dead_letter, rejected, lambda: self._notes.dead_lettered(rejected), locks
        )
        return Outcome("dead_lettered", rejected, deferred=deferred)

    def dead_letter_error(self, work: Work, error: BaseException, tries: int) -> Outcome:
        """Dead-letter an event whose handling failed ``tries`` times with ``error`` (not a ``BusError``):
        the rejection names the event and the error. Returns once acknowledged (raises ``BusError`` if not)."""
        event = work.event
        processed = None if isinstance(event, CleanupRejected | WaitingGroup | WaitingBundle) else event
        what = (
            "the dead letter of a refused record"
            if isinstance(event, CleanupRejected)
            else f"{event.event_type} {event.event_id}"
        )
        reason = f"handling {what} failed {tries} time(s): {type(error).__name__}: {error}"
        rejected = reject(
            work.record,
            "other",
            reason,
            rejected_by=self._context.config.cleaner_id,
            tenant=self._context.config.tenant,
            event=processed,
            now=self._context.clock.now,
        )
        return self.dead_letter(rejected)

    def refuse(
        self,
        work: Work,
        processed: VacuumCommitted | DelayEnvelope,
        refusal: Refusal,
        locks: TableLockCheck | None = None,
    ) -> Outcome:
        rejected = reject(
            work.record,
            refusal.code,
            refusal.reason,
            rejected_by=self._context.config.cleaner_id,
            tenant=self._context.config.tenant,
            event=processed,
            now=self._context.clock.now,
        )
        return self.dead_letter(rejected, locks)

    def delay(self, processed: VacuumCommitted | DelayEnvelope, readiness: Readiness, locks: TableLockCheck) -> Outcome:
        now = self._context.clock.now()
        envelope = delay_envelope(
            processed,
            readiness,
            now=now,
            interval_ms=self._context.config.interval_ms,
            max_wait_s=self._context.config.max_wait_s,
            due=locks.due(now, self._context.config.interval_ms),
        )
        locks.pending.append((processed, readiness, envelope))
        return Outcome("delayed", envelope, deferred=True)

    def flush_delays(self, locks: TableLockCheck) -> None:
        """Publish the group's delay envelopes in one batch; returns once the broker has them all."""
        pending, locks.pending = locks.pending, []
        if not pending:
            return
        if not self._context.config.dry_run:
            self._context.bus().publish_many(
                [(self._context.config.topics.cleanup_delay, envelope) for _, _, envelope in pending]
            )
        self._notes.delays_published(pending)

    def done(
        self, processed: VacuumCommitted | DelayEnvelope, removed: Sequence[RemovedDirectory], note: str | None
    ) -> CleanupDone:
        vacuum = vacuum_of(processed)
        now = self._context.clock.now()
        action = "cleanup-dry-run" if self._context.config.dry_run else "cleanup-done"
        return CleanupDone(
            event_id=derived_event_id(vacuum.event_id, action),
            tenant=vacuum.tenant,
            table=vacuum.table,
            partition=vacuum.partition,
            occurred_at=now,
            causation_id=processed.event_id,
            correlation_id=vacuum.event_id,
            directories_removed=list(removed),
            time_waited_ms=max(0, int((now - vacuum.occurred_at).total_seconds() * 1000)),
            attempts=attempt_of(processed),
            cleaner_id=self._context.config.cleaner_id,
            dry_run=self._context.config.dry_run,
            note=None if note is None else fit_field(CleanupDone, "note", note),
        )

    def record_ledger(
        self,
        done: CleanupDone,
        location: str,
        prepared: PreparedCleanup,
        files: Sequence[RemovedFile],
        locks: TableLockCheck | None,
    ) -> None:
        """Queue (or publish) the cleanup's ledger on the ledger topic, ahead of its ``CleanupDone``."""
        for record in ledger_records(done, location, prepared.storage.path, prepared.table, files):
            self.emit(self._context.config.topics.cleanup_ledger, record, lambda: None, locks)

    def report_done(
        self,
        processed: VacuumCommitted | DelayEnvelope,
        done: CleanupDone,
        kind: OutcomeKind,
        locks: TableLockCheck | None = None,
    ) -> Outcome:
        deferred = self.emit(
            self._context.config.topics.cleanup_done, done, lambda: self._notes.reported(processed, done, kind), locks
        )
        return Outcome(kind, done, tuple(done.directories_removed), deferred=deferred)

    def announce(self, processed: VacuumCommitted | DelayEnvelope, planned: Sequence[RemovedDirectory]) -> None:
        """Publish the CleanupStarted of ``planned``; returns once the broker has it (raises ``BusError`` if not)."""
        started = self.started(processed, planned)
        self.publish(self._context.config.topics.cleanup_done, started)
        self._notes.announced(processed, started)

    def announce_many(self, prepared: Sequence[PreparedCleanup]) -> dict[int, BusError]:
        """The CleanupStarted of every prepared cleanup in one batch, acknowledged; returns the ones the
        broker did not take (by ``id()`` of the prepared cleanup), which must delete nothing."""
        started = [self.started(item.processed, item.planned) for item in prepared]
        failed = self.publish_isolating([(self._context.config.topics.cleanup_done, event) for event in started])
        refused: dict[int, BusError] = {}
        for item, event in zip(prepared, started, strict=True):
            error = failed.get(str(event.event_id))
            if error is not None:
                refused[id(item)] = error
            else:
                self._notes.announced(item.processed, event)
        return refused

    def started(
        self, processed: VacuumCommitted | DelayEnvelope, planned: Sequence[RemovedDirectory]
    ) -> CleanupStarted:
        vacuum = vacuum_of(processed)
        names = sorted(directory.name for directory in planned)
        return CleanupStarted(
            # A replay of the same event announcing the same directories gets the same id.
            event_id=derived_event_id(processed.event_id, "cleanup-started:" + "/".join(names)),
            tenant=vacuum.tenant,
            table=vacuum.table,
            partition=vacuum.partition,
            occurred_at=self._context.clock.now(),
            causation_id=processed.event_id,
            correlation_id=vacuum.event_id,
            directories_to_remove=list(planned),
            attempt=attempt_of(processed),
            cleaner_id=self._context.config.cleaner_id,
        )


def attempt_of(processed: VacuumCommitted | DelayEnvelope) -> int:
    """The readyToClean check this is (a vacuum's first, or one more than its envelope's)."""
    return (processed.attempt if isinstance(processed, DelayEnvelope) else 0) + 1
