"""The check of parked vacuums read back as a group (a ``DelayedVacuums``, or a ``DelayEnvelope`` read
without the event models): every vacuum still waiting goes to its key's next record (merged at the
batch's end, :mod:`acidclean.consumers.batch_writer`); each one found ready leaves the group as a
``DelayEnvelope`` due at once, to be checked again and cleaned alone by :mod:`acidclean.consumers.cleanup`.
A group whose locks are all still listed is carried on unread. Nothing here cleans anything.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from acidclean.consumers.outcome_batch import UnchangedGroup, still_waiting_entry
from acidclean.consumers.outcome_notes import OutcomeNotes
from acidclean.consumers.publishing import OutcomePublisher
from acidclean.consumers.rules.readiness import older_snapshots_skip_output
from acidclean.consumers.table_check import TableLockCheck
from acidclean.consumers.waiting import (
    Member,
    UnreadableGroup,
    WaitingGroup,
    empty_group_shell,
    group_of_model,
    unchanged_now,
)
from acidclean.consumers.work import CleanerContext, Outcome, Work
from acidclean.schemas.common import EventBase, derived_event_id
from acidclean.schemas.events import CleanupRejected, DelayedVacuums, DelayEnvelope, VacuumCommitted
from acidclean.shared.bus.codec import decode, reject


class ParkedGroups:
    """Checks a group of parked vacuums of one key. Thread-safe."""

    def __init__(
        self,
        context: CleanerContext,
        publisher: OutcomePublisher,
        notes: OutcomeNotes,
        dispatch: Callable[[Work, TableLockCheck], Outcome],
    ) -> None:
        self._context = context
        self._publisher = publisher
        self._notes = notes
        # A lone parked vacuum that may be ready is read again by the models and handled as its kind.
        self._dispatch = dispatch

    def check_group(self, work: Work, group: WaitingGroup, locks: TableLockCheck) -> Outcome:
        """One check of every vacuum of a DelayedVacuums, without the event models: the ones still
        waiting go to the key's next DelayedVacuums (at flush_batch, with the batch's other delays of
        the key), each one found ready leaves as a DelayEnvelope due at once, to be checked again and
        cleaned alone and in order by the usual path. A group whose ``unchanged`` locks are all still
        listed is carried on unread."""
        now = self._context.clock.now()
        due = locks.due(now, self._context.config.interval_ms)
        if group.may_carry_unread:
            listed = locks.held_lock_ids()
            if not isinstance(listed, str) and unchanged_now(group, listed, now, self._context.config.max_wait_s):
                locks.unchanged.append(UnchangedGroup(group, now, due, listed))
                return Outcome("delayed", self._group_outcome(group, due), deferred=True)
        try:
            members = group.members
        except UnreadableGroup:
            event = decode(
                work.record,
                rejected_by=self._context.config.cleaner_id,
                tenant=self._context.config.tenant,
                expected=(DelayedVacuums,),
                now=self._context.clock.now,
            )
            if isinstance(event, CleanupRejected):
                return self._publisher.dead_letter(event, locks)
            assert isinstance(event, DelayedVacuums)
            group = group_of_model(event)
            members = group.members
        held = locks.held_lock_ids(every_lock=self.txn_rule(members))
        table_error = held if isinstance(held, str) else None
        held_ids = None if isinstance(held, str) else held
        outcome_id = str(group.event_id)
        ready: list[Member] = []
        if group.single and not self._waits_on(members[0], locks, held_ids, table_error):
            # A DelayEnvelope that may be ready: the models' path checks and cleans it (in full).
            return self._dispatch(self._as_envelope(work), locks)
        for member in members:
            view = member.view
            error = table_error
            open_txns: tuple[int, ...] = ()
            if error is None and held_ids is not None:
                visibility_commit = older_snapshots_skip_output(view.new_directories)
                txn_rule = (
                    self._context.config.wait_for_open_txns or visibility_commit
                ) and view.next_txn_id is not None
                if txn_rule:
                    assert view.next_txn_id is not None
                    answer = locks.open_before(view.next_txn_id, visibility_commit)
                    if isinstance(answer, str):
                        error = answer
                    else:
                        open_txns = answer
                if error is None and not open_txns and not any(lock_id in held_ids for lock_id in member.lock_ids):
                    ready.append(member)
                    continue
            locks.waiting.append(
                still_waiting_entry(
                    group, member, outcome_id, held_ids, error, open_txns, now, due, self._context.config.max_wait_s
                )
            )
        for member in ready:
            self._leave_group(work, group, member, now, locks)
        return Outcome("delayed", self._group_outcome(group, due), deferred=True)

    def _leave_group(
        self, work: Work, group: WaitingGroup, member: Member, now: datetime, locks: TableLockCheck
    ) -> None:
        """A vacuum found ready in a group: its own DelayEnvelope, due now (validated by the models here,
        once; a vacuum they refuse is dead-lettered with the group's record)."""
        wire = member.wire
        try:
            vacuum = VacuumCommitted.model_validate_json(bytes(wire.vacuum))
            envelope = DelayEnvelope(
                event_id=derived_event_id(group.event_id, f"ready:{member.vacuum_id}"),
                tenant=vacuum.tenant,
                table=vacuum.table,
                partition=vacuum.partition,
                occurred_at=now,
                causation_id=group.event_id,
                correlation_id=vacuum.event_id,
                vacuum=vacuum,
                attempt=wire.attempt + group.checks + 1,
                due_at=now,
                locks_held=[],
                stuck=wire.stuck,
                stuck_since=None if wire.stuck_since is None else datetime.fromisoformat(wire.stuck_since),
            )
        except ValueError as error:  # pydantic's ValidationError is one
            # The record goes to the dead letters whole (nothing lost); its other vacuums wait on.
            rejected = reject(
                work.record,
                "invalid_event",
                f"vacuum {member.vacuum_id} of DelayedVacuums {group.event_id} is not a valid VacuumCommitted: {error}",
                rejected_by=self._context.config.cleaner_id,
                tenant=self._context.config.tenant,
                now=self._context.clock.now,
            )
            self._publisher.dead_letter(rejected, locks)
            published: EventBase = rejected
        else:
            self._publisher.emit(
                self._context.config.topics.cleanup_delay, envelope, lambda: self._notes.left_group(envelope), locks
            )
            published = envelope
        if locks.batch is not None:
            locks.batch.carry(published, group.event_id)

    @staticmethod
    def _group_outcome(group: WaitingGroup, due: datetime) -> DelayedVacuums:
        """The outcome of a group's check, for the loop's logs (the records it causes are built at flush)."""
        return empty_group_shell(
            group.event_id, group.tenant, group.table, group.partition, group.occurred_at, None, due
        )

    def txn_rule(self, members: Sequence[Member]) -> bool:
        return self._context.config.wait_for_open_txns and any(
            member.view.next_txn_id is not None for member in members
        )

    def may_leave(self, member: Member, locks: TableLockCheck) -> bool:
        """Whether a lone waiting vacuum's check may find it ready (asks the table's locks, as its
        handling would, with the same answer)."""
        held = locks.held_lock_ids(every_lock=self.txn_rule([member]))
        if isinstance(held, str):
            return False
        return not self._waits_on(member, locks, held, None)

    def _waits_on(
        self, member: Member, locks: TableLockCheck, held_ids: set[int] | None, table_error: str | None
    ) -> bool:
        """Whether the check certainly finds ``member`` not ready: a snapshot lock still listed, or the
        metastore did not answer (fail closed)."""
        if table_error is not None or held_ids is None:
            return True
        return any(lock_id in held_ids for lock_id in member.lock_ids)

    def _as_envelope(self, work: Work) -> Work:
        """The work of a DelayEnvelope read without the models, read again by them."""
        event = decode(
            work.record,
            rejected_by=self._context.config.cleaner_id,
            tenant=self._context.config.tenant,
            expected=(DelayEnvelope,),
            now=self._context.clock.now,
        )
        assert isinstance(event, DelayEnvelope | CleanupRejected)
        return Work(work.record, event, work.generation, work.due_ms, work.received_ms)
