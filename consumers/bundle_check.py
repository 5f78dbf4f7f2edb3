"""The check of a bundle of parked tables' records (one Kafka record for many tables of one delay
partition, :mod:`acidclean.shared.bus.bundle`). A bundle whose summary's locks are all still listed,
and no fresh vacuum of its tables waiting to join it, is carried on whole, its members unread;
otherwise each member is carried on unread into the next bundle, kept in the bundle's lane with its
table's fresh vacuums (the riders), or published again on its own, due at once, to be read and
checked in full by its table's lane. Only ever "still waiting": nothing here cleans or refuses a vacuum.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from datetime import datetime, timezone
from functools import partial

from acidclean.consumers.bundles import WaitingBundle
from acidclean.consumers.lock_views import LockViews
from acidclean.consumers.logs import log
from acidclean.consumers.outcome_batch import (
    READ_IN_FULL_WITHIN,
    BundleCheck,
    DelayOut,
    OutcomeBatch,
    UnchangedGroup,
    WholePart,
    still_waiting_entry,
    whole_part,
)
from acidclean.consumers.outcome_notes import OutcomeNotes
from acidclean.consumers.own_checks import OwnChecks
from acidclean.consumers.publishing import OutcomePublisher
from acidclean.consumers.rules.obsolete import check_claims
from acidclean.consumers.rules.readiness import older_snapshots_skip_output
from acidclean.consumers.table_check import TableLockCheck
from acidclean.consumers.waiting import (
    Member,
    UnreadableGroup,
    WaitingGroup,
    carry_envelope_on,
    carry_on_unread,
    carry_unchanged,
    counting_prior_checks,
    empty_group_shell,
    read_envelope,
    read_group,
    unchanged_checks_limit,
    unchanged_now,
)
from acidclean.consumers.work import CleanerContext, Outcome, Work
from acidclean.schemas.events import DelayedVacuums, DelayEnvelope, VacuumCommitted
from acidclean.shared.bus.bundle import (
    BUNDLE_TYPE,
    Republished,
    carried_on,
    republished,
    whole_carry_refused,
)
from acidclean.shared.bus.codec import due_at_ms, reject
from acidclean.shared.bus.records import RawRecord
from acidclean.shared.errors import BusError, MetastoreError

LOGGER = logging.getLogger("acidclean.cleaner")

_GROUP_TYPE = DelayedVacuums.event_type.encode()
_ENVELOPE_TYPE = DelayEnvelope.event_type.encode()


class BundleChecker:
    """Checks a bundle of parked tables, and the fresh vacuums riding in its lane. Thread-safe."""

    def __init__(
        self,
        context: CleanerContext,
        views: LockViews,
        publisher: OutcomePublisher,
        notes: OutcomeNotes,
        own_checks: OwnChecks,
        new_batch: Callable[[int], OutcomeBatch],
        flush: Callable[[OutcomeBatch], dict[str, BusError]],
    ) -> None:
        self._context = context
        self._views = views
        self._publisher = publisher
        self._notes = notes
        self._own_checks = own_checks
        # A bundle checked outside a batch gets one of its own, flushed at once.
        self._new_batch = new_batch
        self._flush = flush

    def check_bundle(self, work: Work, bundle: WaitingBundle, locks: TableLockCheck) -> Outcome:
        """One check of a bundle of waiting tables. A bundle with a summary whose locks are all still
        listed, and no fresh vacuum of its tables waiting to join it, is carried on whole, its members
        unread (:func:`acidclean.shared.bus.bundle.carried_on`). Otherwise every member group whose
        ``unchanged`` locks are all still listed is carried on unread into the next bundle of this
        partition; every other member (a lock gone, its summary's check limit reached, about to be
        stuck, unreadable, not a group, or a metastore that does not answer) is published again on its
        own, due at once, to be read and checked in full by its table's lane. Nothing here cleans or
        refuses anything."""
        now = self._context.clock.now()
        due = locks.due(now, self._context.config.interval_ms)
        shell = empty_group_shell(bundle.event_id, bundle.tenant, "", None, bundle.occurred_at, None, due)
        replayed, checked = self._own_checks.take_bundle(bundle.event_id)
        if replayed:
            self._context.metrics.events.labels("bundle_replayed").inc()
            log(LOGGER, logging.DEBUG, "bundle already checked, its records acknowledged: skipped", **_ids(bundle))
            return Outcome("delayed", shell)
        own_batch = locks.batch is None
        batch = self._new_batch(1) if locks.batch is None else locks.batch
        held: frozenset[int] | None
        try:
            held = batch.check.lock_ids()
        except MetastoreError:
            held = None  # fail closed: each member is checked in full, which records why it waits
        carried: list[DelayOut] = []
        spilled: list[Republished] = []
        absorbing: list[tuple[TableLockCheck, Sequence[VacuumCommitted]]] = []
        source = (str(bundle.event_id),)
        partition = work.record.partition
        whole = None
        max_wait = self._context.config.max_wait_s
        refused = self._batch_refuses_whole_carry(bundle, batch, held)
        if refused is None:
            assert held is not None
            due_ms = due_at_ms(due)
            whole = carried_on(
                bundle, partition=partition, held_ids=held, checked_at=now, due_at_ms=due_ms, max_wait_s=max_wait
            )
            if whole is None:  # asked only when refused: a whole carry checks its summary once
                refused = whole_carry_refused(bundle, held_ids=held, checked_at=now, max_wait_s=max_wait)
        if refused is not None:
            self._context.metrics.bundles_by_member.labels(refused).inc()
        if whole is not None:
            keys = whole.keys
            batch.bundles.append(BundleCheck(partition, source[0], [], [], whole=whole, keys=keys))
            return self._bundle_checked(batch, own_batch, shell)
        try:
            members_read = bundle.members
        except ValueError as error:  # read lazily (it has a summary): refused whole, as unpack refuses one
            return self._refuse_unread_bundle(work, locks, error)
        prior = bundle.carried
        by_key: dict[bytes, list[RawRecord]] = {}
        for member in members_read:
            by_key.setdefault(member.key or b"", []).append(member)
        for key, members in by_key.items():
            riders = bundle.riders.get(key, ())
            if held is not None and not own_batch and (riders or len(members) > 1) and key not in bundle.spill:
                table = self._kept_in_bundle(members, riders, held, now, due, batch, partition, source, prior)
                if table is not None:
                    absorbing.append((table, riders))
                    continue
            for member in members:
                out = None
                if held is not None and key not in bundle.spill:
                    out = self._carry_member(member, held, now, due, prior)
                if out is not None:
                    carried.append(dataclasses.replace(out, outcome_ids=source, read_from=partition))
                    continue
                table = None
                if held is not None and not own_batch and key not in bundle.spill and len(members) == 1:
                    table = self._kept_in_bundle(members, (), held, now, due, batch, partition, source, prior)
                if table is None:
                    spilled.append(republished(member))
                else:
                    absorbing.append((table, ()))
        # Only now, once the whole check is done (a retried check starts again from nothing).
        batch.tables.extend(table for table, _ in absorbing)
        if locks.riders is not None:
            locks.riders.update((str(rider.event_id), table) for table, riders in absorbing for rider in riders)
        batch.bundles.append(BundleCheck(partition, source[0], carried, spilled, len(absorbing)))
        # A spilled member's vacuums all committed before the check that wrote the bundle: a lock list
        # asked after that check may answer it (this check's own list may be older: it only keeps
        # vacuums waiting, see acidclean.consumers.loop._read_by_ms).
        if spilled:
            required = work.received_ms if checked is None else min(work.received_ms, checked)
            read_by = datetime.fromtimestamp(max(batch.check.read_by_ms, required) / 1000, timezone.utc)
            self._own_checks.remember([(item, read_by) for item in spilled], self._context.now_ms())
        return self._bundle_checked(batch, own_batch, shell)

    @staticmethod
    def _batch_refuses_whole_carry(
        bundle: WaitingBundle, batch: OutcomeBatch, held: frozenset[int] | None
    ) -> str | None:
        """Why this check must read ``bundle``'s members one by one whatever its summary says (None:
        :func:`carried_on` decides): no lock list, members its table's lanes wait to check with them
        (``spill``), fresh vacuums riding with it (``riders``), a table the batch also sees in another
        record (``shared_keys``)."""
        if held is None:
            return "no_lock_list"
        if bundle.spill:
            return "spill"
        if bundle.riders:
            return "riders"
        if batch.shared_keys & bundle.listed_member_keys():
            return "shared_keys"
        return None

    def _refuse_unread_bundle(self, work: Work, locks: TableLockCheck, error: ValueError) -> Outcome:
        """Dead-letter a bundle whose members do not read, with its raw bytes: nothing of it is carried on
        or cleaned (its members cannot be told apart)."""
        rejected = reject(
            work.record,
            "invalid_event",
            f"a bundle whose members do not read: {error}",
            rejected_by=self._context.config.cleaner_id,
            tenant=self._context.config.tenant,
            rejected_event_type=BUNDLE_TYPE,
            now=self._context.clock.now,
        )
        return self._publisher.dead_letter(rejected, locks)

    def _bundle_checked(self, batch: OutcomeBatch, own_batch: bool, shell: DelayedVacuums) -> Outcome:
        """A bundle's check done: its records go out with the batch's, or now if it has none."""
        if not own_batch:
            return Outcome("delayed", shell, deferred=True)
        failed = self._flush(batch)
        if failed:
            raise next(iter(failed.values()))
        return Outcome("delayed", shell)

    def _carry_member(
        self, member: RawRecord, held: AbstractSet[int], now: datetime, due: datetime, prior_checks: int
    ) -> DelayOut | None:
        """A bundle member's next record if a check now leaves it waiting as it was (its locks all still
        listed), else None: it must be read and checked in full, on its own. ``prior_checks``: checks
        that carried its bundle on whole since it was written."""
        tenant, max_wait = self._context.config.tenant, self._context.config.max_wait_s
        if "unread" in self._context.config.parts_off:
            return None  # measured off: every member read and checked in full (_kept_in_bundle)
        ce_type = _ce_type(member)
        if ce_type == _ENVELOPE_TYPE:
            single = carry_envelope_on(member, tenant, held, now, max_wait, due, prior_checks)
            if single is None:
                return None
            envelope = single.envelope
            alone = WholePart(single.lock_ids, unchanged_checks_limit(envelope.key))
            published = partial(self._notes.single_carried, envelope)
            return DelayOut(envelope, (), None, now, single.committed_at, published, alone)
        if ce_type != _GROUP_TYPE:
            return None
        fast = carry_on_unread(member, tenant, held, now, max_wait, due, prior_checks)
        if fast is not None:
            fast_part = whole_part(fast.group.key, fast.out.unchanged)
            if fast_part is None or fast_part.carries_left < READ_IN_FULL_WITHIN:
                return None  # read in full now, with the other members of its bundle near their limits
            unread = UnchangedGroup(fast.group, now, due, held, fast.vacuums)
            published = partial(self._notes.carried_published, fast.out, unread)
            return DelayOut(fast.out.event, (), None, now, fast.group.oldest_commit, published, fast_part)
        # Its entries must be read: still unchanged (a vacuum stuck meanwhile), or out on its own.
        group = read_group(member, tenant)
        if group is None:
            return None
        group = counting_prior_checks(group, prior_checks)
        if not unchanged_now(group, held, now, max_wait):
            return None
        out = carry_unchanged(group, checked_at=now, due_at=due)
        part = whole_part(group.key, out.unchanged)
        if part is None or part.carries_left < READ_IN_FULL_WITHIN:
            return None
        unread = UnchangedGroup(group, now, due, held)
        published = partial(self._notes.carried_published, out, unread)
        return DelayOut(out.event, (), None, now, group.oldest_commit, published, part)

    def _kept_in_bundle(
        self,
        members: Sequence[RawRecord],
        riders: Sequence[VacuumCommitted],
        held: AbstractSet[int],
        now: datetime,
        due: datetime,
        batch: OutcomeBatch,
        partition: int,
        outcome_ids: tuple[str, ...],
        prior_checks: int = 0,
    ) -> TableLockCheck | None:
        """One check of a bundled table's records, in the bundle's lane, that writes them on in one
        record with the table's fresh vacuums (``riders``) taken in: when the table's vacuums were
        parked by separate checks or processes (several records), when fresh vacuums of it ride with
        the bundle, or when a record cannot be carried on unread (its summary's check limit, a vacuum
        near the max wait, a lone vacuum with an old check error). None when any of its vacuums may be
        ready, a record does not read, or a rider may be ready or has refused claims: each record then
        goes on, or out to its table's lane, as any other, and the riders go back to their lane.

        A group whose summary's locks are all listed is kept as it is (read and merged only when the
        table has other records or riders); any other record is read in full and kept only if every
        vacuum of it waits on a listed lock of its snapshot, with no open-transaction rule to apply,
        and written as the table's lane writes it (:meth:`_still_waiting`). Each rider is delayed when
        its own work runs next in this bundle's lane (:meth:`_ride`); the table's delay records,
        merged and written at flush_batch, carry the bundle's outcome too: its offset moves only once
        they are acknowledged. Only ever "still waiting"."""
        table: TableLockCheck | None = None
        listed: set[int] | str = ""
        key = ""
        max_wait = self._context.config.max_wait_s
        for member in members:
            ce_type = _ce_type(member)
            if ce_type == _GROUP_TYPE:
                group = read_group(member, self._context.config.tenant)
            elif ce_type == _ENVELOPE_TYPE:
                group = read_envelope(member, self._context.config.tenant)
            else:
                return None
            if group is None:
                return None
            group = counting_prior_checks(group, prior_checks)
            if table is None:
                key = group.key
                if any(rider.key != key for rider in riders):
                    return None
                table = TableLockCheck(self._views, group.table)
                table.batch, table.read_from, table.carries_for = batch, partition, outcome_ids
                table._due = due
                listed = table.held_lock_ids(every_lock=True)  # the batch's unfiltered list: no call of its own
                if isinstance(listed, str):
                    return None
            elif group.key != key:
                return None
            assert not isinstance(listed, str)
            if not group.single and unchanged_now(group, listed, now, max_wait) and not _near_its_limit(group):
                table.unchanged.append(UnchangedGroup(group, now, due, listed))
                continue
            # Read in full: kept only if every vacuum of it certainly waits, and written on as the
            # table's lane would write it (attempts, stuck state and a new summary).
            try:
                read = group.members
            except UnreadableGroup:
                return None
            if not all(self._waits_on_a_listed_lock(vacuum, listed) for vacuum in read):
                return None
            outcome_id = str(group.event_id)
            table.waiting.extend(
                still_waiting_entry(group, vacuum, outcome_id, listed, None, (), now, due, max_wait) for vacuum in read
            )
            if not group.single:
                self._context.metrics.events.labels("bundle_read_in_full").inc()
        if table is None:
            return None
        for rider in riders:
            if check_claims(rider) is not None or table.readiness(rider).ready:
                return None
        if len(members) > 1:
            self._context.metrics.events.labels("bundle_merged").inc(len(members) - 1)
        return table

    def _waits_on_a_listed_lock(self, member: Member, listed: set[int]) -> bool:
        """Whether a full check finds ``member`` not ready, for a reason a bundle's check can write: a
        lock of its snapshot listed (rule 1), and no open-transaction rule to apply (that one is
        left to the table's lane, which records the transactions it waits for)."""
        view = member.view
        if view.next_txn_id is not None and (
            self._context.config.wait_for_open_txns or older_snapshots_skip_output(view.new_directories)
        ):
            return False
        return any(lock_id in listed for lock_id in member.lock_ids)

    def ride(self, work: Work, riders: dict[str, TableLockCheck]) -> Outcome:
        """A work of a bundle's lane other than the bundle: a fresh vacuum of a bundled table. Delayed
        into its table's next record if the bundle's check took it in (:meth:`_kept_in_bundle`), else
        handed back to its table's lane: a bundle's lane checks nothing in full."""
        event = work.event
        if not isinstance(event, VacuumCommitted):
            raise AssertionError(f"only fresh vacuums ride in a bundle's lane, not {type(event).__name__}")
        table = riders.pop(str(event.event_id), None)
        readiness = None if table is None else table.readiness(event)  # the lists the bundle's check asked
        if table is None or readiness is None or readiness.ready:
            self._context.metrics.events.labels("rejoined").inc()
            return Outcome("rejoined", event)
        self._context.metrics.events.labels("joined_in_bundle").inc()
        return self._publisher.delay(event, readiness, table)


def _near_its_limit(group: WaitingGroup) -> bool:
    """Whether a group carried on unread now would have fewer than READ_IN_FULL_WITHIN checks left: read
    in full now instead, with the other members of its bundle near their limits (its bundle would
    otherwise be read member by member again within a few checks, for its sake)."""
    assert group.unchanged is not None
    return unchanged_checks_limit(group.key) - group.unchanged.checks - 1 < READ_IN_FULL_WITHIN


def _ids(bundle: WaitingBundle) -> dict[str, object]:
    return {"event_id": bundle.event_id, "members": bundle.count}


def _ce_type(record: RawRecord) -> bytes | None:
    for name, value in record.headers:
        if name == "ce_type":
            return value
    return None
