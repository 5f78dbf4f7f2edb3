"""One cleaner step for one event: the dispatcher that hands each kind of work to the part that handles it.

:class:`CleanupHandler` takes a consumed event and returns only once its outcome is acknowledged by the
broker (or, in a batch, queues it for the batch's one ``publish_many``). The kind of each work is decided
once, where its record is decoded (:class:`acidclean.consumers.work.WorkKind`); the handlers, by kind:

* a fresh vacuum or a due delay envelope: :class:`acidclean.consumers.cleanup.Cleanup` (check, then
  clean, park or refuse);
* a due group of parked vacuums: :class:`acidclean.consumers.parked.ParkedGroups`;
* a due bundle of parked tables: :class:`acidclean.consumers.bundle_check.BundleChecker`;
* a record the decoder refused: its dead letter (:class:`acidclean.consumers.publishing.OutcomePublisher`).

The shared lock lists are :mod:`acidclean.consumers.lock_views`; the end of a batch (merging, bundling,
publishing) is :mod:`acidclean.consumers.batch_writer`. It is called from several worker threads at
once: the metastore and bus factories return one client per thread. A ``BusError`` (outcome not
acknowledged) propagates: the caller must not commit the input offset.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor

from acidclean.consumers.batch_tables import TableKey
from acidclean.consumers.batch_writer import BatchWriter
from acidclean.consumers.bundle_check import BundleChecker
from acidclean.consumers.bundles import WaitingBundle
from acidclean.consumers.cleanup import Cleanup
from acidclean.consumers.crash_points import CrashPoints, NoCrashes
from acidclean.consumers.delete_pool import DeletePool
from acidclean.consumers.lock_views import LockCallCosts, LockView, LockViews
from acidclean.consumers.metrics import CleanerMetrics
from acidclean.consumers.outcome_batch import OutcomeBatch
from acidclean.consumers.outcome_notes import OutcomeNotes
from acidclean.consumers.own_checks import OwnChecks
from acidclean.consumers.parked import ParkedGroups
from acidclean.consumers.publishing import OutcomePublisher
from acidclean.consumers.rules.obsolete import check_claims
from acidclean.consumers.rules.paths import TenantRoots
from acidclean.consumers.rules.readiness import lock_scope
from acidclean.consumers.scheduling import vacuum_of
from acidclean.consumers.table_check import TableLockCheck
from acidclean.consumers.waiting import WaitingGroup
from acidclean.consumers.work import (
    CleanerContext,
    CleanerMetastore,
    Clock,
    HandlerConfig,
    Outcome,
    StorageLocationLike,
    SystemClock,
    Work,
    WorkKind,
)
from acidclean.schemas.events import CleanupRejected, DelayEnvelope, VacuumCommitted
from acidclean.shared.bus.protocol import EventBus
from acidclean.shared.errors import BusError, MetastoreError
from acidclean.shared.metastore import LockInfo

_Handler = Callable[[Work, TableLockCheck], Outcome]


class CleanupHandler:
    """Hands each work to the handler of its kind, and gives the loop its batches. Thread-safe."""

    def __init__(
        self,
        config: HandlerConfig,
        *,
        metastore: Callable[[], CleanerMetastore],
        bus: Callable[[], EventBus],
        open_storage: Callable[[str], StorageLocationLike],
        roots: TenantRoots,
        metrics: CleanerMetrics,
        delete_pool: Executor | None = None,
        delete_threads: int = 4,
        clock: Clock | None = None,
        crash_points: CrashPoints | None = None,
    ) -> None:
        self.context = CleanerContext(
            config, metastore, bus, open_storage, roots, metrics, clock or SystemClock(), crash_points or NoCrashes()
        )
        self.lock_views = LockViews(self.context)
        self.own_checks = OwnChecks(config.interval_ms)
        self.notes = OutcomeNotes(self.context)
        self.publisher = OutcomePublisher(self.context, self.notes)
        self.cleanup = Cleanup(self.context, self.publisher, DeletePool(self.context, delete_pool, delete_threads))
        self.parked = ParkedGroups(self.context, self.publisher, self.notes, self._handle_work)
        self.bundles = BundleChecker(
            self.context, self.lock_views, self.publisher, self.notes, self.own_checks, self.batch, self.flush_batch
        )
        self.writer = BatchWriter(self.context, self.publisher, self.notes, self.own_checks)
        # The handler of each kind of work (a bundle's lane hands its riders to the bundle's check first).
        self._handlers: dict[WorkKind, _Handler] = {
            WorkKind.VACUUM: self._check_vacuum,
            WorkKind.ENVELOPE: self._check_vacuum,
            WorkKind.GROUP: self._check_group,
            WorkKind.BUNDLE: self._check_bundle,
            WorkKind.REFUSED: self._dead_letter_refused,
        }

    @property
    def config(self) -> HandlerConfig:
        return self.context.config

    @config.setter
    def config(self, config: HandlerConfig) -> None:
        self.context.config = config

    # -- entry points ------------------------------------------------------------------------------

    def lock_check(self, work: Work, batch: OutcomeBatch | None = None) -> TableLockCheck:
        table = work.event.table if work.kind is not WorkKind.REFUSED else None
        check = TableLockCheck(self.lock_views, table or "", batch)
        if work.kind is WorkKind.BUNDLE:
            check.riders = {}
        return check

    def batch(self, tables: int, read_by_ms: int = 0) -> OutcomeBatch:
        """A batch for ``tables`` lanes: pass it to :meth:`lock_check`; outcomes of its lanes are deferred
        until :meth:`flush_batch`, cleanups until :meth:`run_prepared`."""
        return OutcomeBatch(self.lock_views, tables, read_by_ms)

    def handle(self, work: Work, locks: TableLockCheck) -> Outcome:
        """Handle one work item; returns once its outcome is acknowledged (raises ``BusError`` if not),
        except a delay envelope: that one is ``deferred`` until :meth:`flush_delays` of the group."""
        return self._handle_work(work, locks)

    def _handle_work(self, work: Work, locks: TableLockCheck) -> Outcome:
        if locks.riders is not None and work.kind is not WorkKind.BUNDLE:
            return self.bundles.ride(work, locks.riders)
        if work.record.topic == self.config.topics.cleanup_delay and work.kind is not WorkKind.BUNDLE:
            locks.read_from = work.record.partition
        return self._handlers[work.kind](work, locks)

    def _check_vacuum(self, work: Work, locks: TableLockCheck) -> Outcome:
        assert isinstance(work.event, VacuumCommitted | DelayEnvelope)
        return self.cleanup.check_and_clean(work, work.event, locks)

    def _check_group(self, work: Work, locks: TableLockCheck) -> Outcome:
        assert isinstance(work.event, WaitingGroup)
        return self.parked.check_group(work, work.event, locks)

    def _check_bundle(self, work: Work, locks: TableLockCheck) -> Outcome:
        assert isinstance(work.event, WaitingBundle)
        return self.bundles.check_bundle(work, work.event, locks)

    def _dead_letter_refused(self, work: Work, locks: TableLockCheck) -> Outcome:
        assert isinstance(work.event, CleanupRejected)
        return self.publisher.dead_letter(work.event, locks)

    def prefetch(self, batch: OutcomeBatch, firsts: Sequence[tuple[Work, TableLockCheck]]) -> None:
        """Ask together for the tables of the lanes whose first vacuum is ready to clean now (their
        lock lists are asked for here, once, as handling them would), and for their write id lists in
        the batch's transaction list: one call per database and one for the write ids instead of two
        or three per cleanup (a partition is then one call of its own)."""
        batch.shared_keys = _keys_in_two(work.event for work, locks in firsts if locks.batch is batch)
        keys: list[TableKey] = []
        for work, locks in firsts:
            event = work.event
            if locks.batch is not batch:
                continue
            if isinstance(event, WaitingGroup):
                # A vacuum waiting alone whose snapshot locks are gone goes on to clean (check_group).
                if event.single and self.parked.may_leave(event.members[0], locks):
                    keys.append(lock_scope(event.table))
                continue
            if not isinstance(event, VacuumCommitted | DelayEnvelope):
                continue
            vacuum = vacuum_of(event)
            if check_claims(vacuum) is None and locks.readiness(event, work.fresh_read_ms).ready:
                keys.append(lock_scope(vacuum.table))
        if len(keys) < 2:
            return
        try:
            txn_list: str | None = batch.check.transactions().to_string()
        except MetastoreError:
            txn_list = None
        metastore = self.context.metastore()
        self.context.metrics.metastore_calls.labels("get_tables").inc()
        batch.known.fetch(metastore, keys, txn_list)

    def run_prepared(self, batch: OutcomeBatch) -> dict[int, Outcome | BaseException]:
        """Announce and run the batch's planned cleanups (:meth:`Cleanup.run_prepared`)."""
        return self.cleanup.run_prepared(batch)

    def flush_batch(self, batch: OutcomeBatch) -> dict[str, BusError]:
        """Publish the batch's outcomes and records (:meth:`BatchWriter.flush_batch`); the ones the
        broker did not take, by event id."""
        return self.writer.flush_batch(batch)

    def flush_delays(self, locks: TableLockCheck) -> None:
        """Publish the group's delay envelopes in one batch; returns once the broker has them all."""
        self.publisher.flush_delays(locks)

    def dead_letter_error(self, work: Work, error: BaseException, tries: int) -> Outcome:
        """Dead-letter an event whose handling failed ``tries`` times (:meth:`OutcomePublisher.dead_letter_error`)."""
        return self.publisher.dead_letter_error(work, error, tries)

    def warm_up(self, metastore: bool = True) -> None:
        """Create this thread's producer and (with ``metastore``) its metastore client, and connect,
        before work arrives."""
        self.context.bus()
        if metastore:
            _ = self.context.metastore().kind

    def stuck_count(self, within_s: float) -> int:
        return self.notes.stuck_count(within_s)

    # -- the shared lock lists and this process's own checks, as the loop and the tests ask them ----

    def lock_view(self, read_by_ms: int) -> LockView:
        return self.lock_views.lock_view(read_by_ms)

    def has_lock_view(self, read_by_ms: int) -> bool:
        return self.lock_views.has_lock_view(read_by_ms)

    @property
    def current_lock_view(self) -> LockView | None:
        return self.lock_views.current_lock_view

    @property
    def lock_view_max_age_ms(self) -> int:
        return self.lock_views.lock_view_max_age_ms

    @property
    def lock_call_costs(self) -> LockCallCosts:
        return self.lock_views.lock_call_costs

    def kept_waiting_by_last_list(self, work: Work) -> bool:
        return self.lock_views.kept_waiting_by_last_list(work)

    def show_locks(self, table: str | None, *, renewal: bool = False) -> list[LockInfo]:
        return self.lock_views.show_locks(table, renewal=renewal)

    def take_checked_at_ms(self, event_id: uuid.UUID) -> int | None:
        return self.own_checks.take_checked_at_ms(event_id)

    def note_chain_due(self, dues: Iterable[tuple[str, int | None]]) -> None:
        self.own_checks.note_chain_due(dues)

    @property
    def chain_due(self) -> dict[str, int]:
        """Key -> due time of the newest delay record published for it (:class:`OwnChecks`)."""
        return self.own_checks.chain_due


def _keys_in_two(events: Iterable[object]) -> set[bytes]:
    """The keys that more than one of ``events`` (a bundle: each of its members') has records of."""
    seen: set[bytes] = set()
    twice: set[bytes] = set()
    for event in events:
        if isinstance(event, WaitingBundle):
            keys = event.listed_member_keys()
        elif isinstance(event, WaitingGroup | VacuumCommitted | DelayEnvelope):
            keys = {event.key.encode()}
        else:
            continue
        twice |= seen & keys
        seen |= keys
    return twice
