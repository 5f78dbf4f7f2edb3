"""One cleaner step for one event: check, then wait, clean or refuse, and publish the outcome.

:class:`CleanupHandler` takes a consumed event (a ``VacuumCommitted``, a due ``DelayEnvelope`` or a
record the decoder already refused) and returns only once its outcome is acknowledged by the broker:

* locks of the snapshot still held, or the metastore unreachable (fail closed): a delay envelope;
* ready: the obsolete directories are computed again from the current listing, checked against
  rules 3 and 4 (:mod:`acidclean.consumers.rules`), announced by a ``CleanupStarted`` that the
  broker must acknowledge before the first delete, deleted with the delete pool, and
  ``CleanupDone`` lists them (file counts, bytes); a table dropped meanwhile gives a ``CleanupDone``
  with nothing removed and the reason;
* anything unsafe or invalid: ``CleanupRejected`` on the dead-letter topic, nothing deleted.

Everything it touches is reached through small protocols (metastore, storage, bus, clock), so unit
tests run it against fakes. It is called from several worker threads at once: the metastore and bus
factories return one client per thread. A ``BusError`` (outcome not acknowledged) propagates: the
caller must not commit the input offset.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from typing import Literal, Protocol, TypeVar

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from acidclean.consumers.batch_tables import BatchTables, TableKey
from acidclean.consumers.bundles import WaitingBundle
from acidclean.consumers.crash_points import CrashPoints, NoCrashes
from acidclean.consumers.logs import log
from acidclean.consumers.metrics import CleanerMetrics
from acidclean.consumers.remover import (
    CheckedCleanup,
    CheckedDirectory,
    PlannedRemoval,
    Removal,
    TablesNow,
    checked_directory,
    remove_all,
)
from acidclean.consumers.rules.obsolete import CleanupPlan, check_claims, check_markers, plan_cleanup
from acidclean.consumers.rules.paths import TenantRoots, check_location
from acidclean.consumers.rules.readiness import (
    COMMIT_MARGIN,
    Readiness,
    committed_through_transaction,
    lock_scope,
    locks_missing_from_snapshot,
    not_checked,
    open_transactions_before,
    ready_to_clean,
    table_locks,
)
from acidclean.consumers.rules.verdicts import NotYet, Refusal
from acidclean.consumers.scheduling import (
    BUNDLE_COHORT_MIN,
    BUNDLE_DUE_SPREAD_MS,
    cohorts_by_carries,
    delay_envelope,
    next_due,
    runs_due_together,
    vacuum_of,
)
from acidclean.consumers.shared_directory import directory_locks
from acidclean.consumers.waiting import (
    EntryFacts,
    GroupOut,
    Member,
    UnreadableGroup,
    WaitingGroup,
    WireUnchanged,
    WireWaiting,
    build_envelope,
    build_groups,
    carry_envelope_on,
    carry_on_unread,
    carry_unchanged,
    counting_prior_checks,
    empty_group_shell,
    entry_of_envelope,
    group_of_model,
    read_envelope,
    read_group,
    still_waiting,
    unchanged_checks_limit,
    unchanged_now,
    vacuum_id_of,
)
from acidclean.schemas.common import EventBase, derived_event_id
from acidclean.schemas.events import (
    MAX_UNCHANGED_CHECKS,
    MAX_WAITING_PER_ENVELOPE,
    CleanupDone,
    CleanupRejected,
    CleanupStarted,
    DelayedVacuums,
    DelayEnvelope,
    RemovedDirectory,
    VacuumCommitted,
)
from acidclean.shared.acid.id_lists import MetastoreKind, cleaner_ids
from acidclean.shared.acid.write_ids import ValidTxnList
from acidclean.shared.bus.bundle import (
    BUNDLE_TYPE,
    MAX_BUNDLE_RECORDS,
    Bundle,
    BundleSummary,
    CarriedBundle,
    PrebuiltRecord,
    Republished,
    bundles_of,
    carried_on,
    republished,
    summary_of_members,
    whole_carry_refused,
)
from acidclean.shared.bus.codec import decode, due_at_ms, fit_field, header_due_at_ms, reject
from acidclean.shared.bus.protocol import EventBus
from acidclean.shared.bus.records import RawRecord
from acidclean.shared.errors import BusError, MetastoreError, TableNotFoundError
from acidclean.shared.lock_entries import snapshot_entry
from acidclean.shared.metastore import LockInfo, TableIdentity, TableInfo
from acidclean.shared.storage import FileSystem, StorageError
from acidclean.shared.vacuum_marker import VACUUM_MARKER, VacuumMarker

LOGGER = logging.getLogger("acidclean.cleaner")

_Item = TypeVar("_Item")
_Result = TypeVar("_Result")

# An unfiltered show_locks slower than this (a metastore holding thousands of locks) is renewed ahead
# of need in the background (CleanupHandler.lock_view).
SLOW_SHOW_LOCKS_MS = 50
ISOLATION_GIVE_UP_S = 1.0  # an event retried alone that fails slower than this: the broker is away

# "rejoined": a fresh vacuum that rode with its table's bundle and was not absorbed by its check: the
# loop hands it back to its table's lane, to be checked there in full (nothing was published for it).
OutcomeKind = Literal["cleaned", "delayed", "dead_lettered", "table_dropped", "dry_run", "dropped", "rejoined"]


class CleanerMetastore(Protocol):
    """The metastore calls the cleaner makes (a subset of :class:`acidclean.shared.metastore.Metastore`)."""

    @property
    def kind(self) -> MetastoreKind: ...

    def get_table(self, db: str, table: str, partition: str | None = None) -> TableInfo: ...

    def get_tables(self, db: str, tables: Sequence[str]) -> dict[str, TableInfo]: ...

    def partition_info(self, table: TableInfo, partition: str | None) -> TableInfo: ...

    def partitions_located(self, table: TableInfo, names: Sequence[str]) -> dict[str, str]: ...

    def partition_locations(self, table: TableInfo) -> dict[str, str]: ...

    def valid_write_ids_of(self, tables: Sequence[tuple[str, str]], txn_list: str) -> list[str]: ...

    def valid_txn_list(self) -> str: ...

    def show_locks(
        self, db: str | None = None, table: str | None = None, partition: str | None = None
    ) -> list[LockInfo]: ...


class StorageLocationLike(Protocol):
    """What :func:`acidclean.shared.arrow_filesystem.open_location` returns."""

    @property
    def fs(self) -> FileSystem: ...

    @property
    def path(self) -> str: ...

    def child(self, name: str) -> str: ...


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    """Wall-clock time, UTC."""

    def now(self) -> datetime:
        return datetime.now(timezone.utc)


@dataclass(frozen=True)
class CleanerTopics:
    vacuum_committed: str
    cleanup_delay: str
    cleanup_done: str
    dead_letter: str


@dataclass(frozen=True)
class HandlerConfig:
    tenant: str
    cleaner_id: str
    interval_ms: int
    max_wait_s: float
    topics: CleanerTopics
    dry_run: bool = False
    lock_check_attempts: int = 3
    lock_retry_wait_s: float = 0.05  # before a metastore call's second attempt, doubled each time (10x at most)
    wait_for_open_txns: bool = True
    # Waiting tables' DelayedVacuums carried on unread go on in bundles (one Kafka record for many
    # tables of one delay partition) once a batch has at least bundle_min of one partition.
    bundle_min: int = 8
    bundle_max: int = MAX_BUNDLE_RECORDS
    bundle_spread_ms: int = BUNDLE_DUE_SPREAD_MS  # one bundle only of records due within this of each other
    bundle_compressed: bool = True  # bundles' members compressed (acidclean.shared.bus.bundle)


@dataclass(frozen=True)
class Work:
    """One consumed record the loop handed over: its event (or the decoder's refusal) and position."""

    record: RawRecord
    event: VacuumCommitted | DelayEnvelope | WaitingGroup | WaitingBundle | CleanupRejected
    generation: int = 0
    due_ms: int = 0
    received_ms: int = 0  # when the loop read it (for the lateness breakdown in debug logs)

    @property
    def partition(self) -> tuple[str, int]:
        return (self.record.topic, self.record.partition)

    @property
    def offset(self) -> int:
        return self.record.offset

    @property
    def lane(self) -> str:
        """Works of one lane run one after the other; one table's events share a lane."""
        if isinstance(self.event, CleanupRejected):
            return "\x00dead-letters"
        if isinstance(self.event, WaitingBundle):
            return self.event.lane  # its own: each member goes on in its table's lane if it must be read
        return f"{self.event.tenant}/{self.event.table.lower()}"


@dataclass(frozen=True)
class Outcome:
    """What handling an event published (already acknowledged by the broker, unless a dry run)."""

    kind: OutcomeKind
    event: EventBase
    removed: tuple[RemovedDirectory, ...] = ()
    deferred: bool = False  # published later with its group (CleanupHandler.flush_delays / flush_batch)
    # A cleanup planned and waiting for its batch's announcement (CleanupHandler.run_prepared), not an outcome yet.
    prepared: PreparedCleanup | None = None


@dataclass(eq=False)
class PreparedCleanup:
    """A cleanup checked and planned, whose ``CleanupStarted`` is published with its batch's before any
    delete; ``planned`` (the directories with their sizes) is measured with the batch's, by run_prepared."""

    processed: VacuumCommitted | DelayEnvelope
    storage: StorageLocationLike
    plan: CleanupPlan
    planned: tuple[RemovedDirectory, ...]
    locks: TableLockCheck
    table: TableIdentity | None = None  # the table checked; confirmed again just before the deletes (rule 9)
    checked: tuple[CheckedDirectory, ...] = ()  # each directory's files as listed with the batch's measure


def _by_table(locks: Sequence[LockInfo]) -> dict[tuple[str, str], list[LockInfo]]:
    """Locks by (database, table), lower-cased as :func:`lock_scope` names them."""
    index: dict[tuple[str, str], list[LockInfo]] = {}
    for lock in locks:
        index.setdefault((lock.db.lower(), (lock.table or "").lower()), []).append(lock)
    return index


def _lock_ids(locks: Sequence[LockInfo]) -> frozenset[int]:
    return frozenset(lock.lock_id for lock in locks)


class LockView:
    """One unfiltered ``show_locks`` and one transaction list, each asked at most once and only when a
    check needs it, made at or after ``asked_ms``: shared by every batch that starts while it is fresh.

    Reusing an answer is safe for the reasons :class:`TableLockCheck` gives (lock ids are never reused:
    a snapshot lock absent from a list taken after the vacuum was read is released for good; one still
    listed may have been released since, which only makes the answer more cautious; the same holds for
    open transactions), provided the list was asked for after every event it answers was read."""

    def __init__(self, handler: CleanupHandler, asked_ms: int, renewal: bool = False) -> None:
        self._handler = handler
        self.asked_ms = asked_ms
        self._renewal = renewal
        self._locks: list[LockInfo] | None = None
        self._by_table: dict[tuple[str, str], list[LockInfo]] | None = None
        self._ids: frozenset[int] | None = None
        self._txns: ValidTxnList | None = None
        self._guard = threading.Lock()
        self.served = 0  # tables answered

    def all_locks(self) -> list[LockInfo]:
        """Every lock (raises ``MetastoreError``; a failed call is not kept, the next check asks again)."""
        with self._guard:
            if self._locks is None:
                try:
                    self._locks = self._handler.show_locks(None, renewal=self._renewal)
                except MetastoreError:
                    self._handler.forget_lock_view(self)
                    raise
                self._handler.lock_view_answered(self)
            return self._locks

    @property
    def answered(self) -> bool:
        """Whether its lock list has come back."""
        return self._locks is not None

    def lock_ids(self) -> frozenset[int]:
        """The ids of every lock, as a set built once (each bundle's check asks for it)."""
        locks = self.all_locks()
        with self._guard:
            if self._ids is None:
                self._ids = _lock_ids(locks)
            return self._ids

    def table_locks(self, table: str) -> list[LockInfo]:
        """One table's locks, by an index built once (a scan per table would cost tables x locks)."""
        locks = self.all_locks()
        with self._guard:
            self.served += 1
            if self._by_table is None:
                self._by_table = _by_table(locks)
            return list(self._by_table.get(lock_scope(table), ()))

    def index(self) -> None:
        """Ask for the list, and build its per-table index and id set now, off any batch's path: the
        background renewal does this before the list is shared, so the first batch on a 10,000-lock
        list does not build them while the others wait on its guard."""
        locks = self.all_locks()
        by_table, ids = _by_table(locks), _lock_ids(locks)
        with self._guard:
            if self._by_table is None:
                self._by_table = by_table
            if self._ids is None:
                self._ids = ids

    def transactions(self) -> ValidTxnList:
        with self._guard:
            if self._txns is None:
                try:
                    self._txns = self._handler.valid_txns()
                except MetastoreError:
                    self._handler.forget_lock_view(self)
                    raise
            return self._txns


class SharedCheck:
    """The metastore's answers shared by every table of one batch: a :class:`LockView` made after every
    event of the batch was read (so after each vacuum committed), shared with other batches while it
    is fresh (:meth:`CleanupHandler.lock_view`). A failed call fails the same way for every table of
    the batch."""

    def __init__(self, handler: CleanupHandler, read_by_ms: int = 0) -> None:
        self._handler = handler
        self.read_by_ms = read_by_ms
        self._view: LockView | None = None
        self._locks_error: MetastoreError | None = None
        self._txns_error: MetastoreError | None = None

    def _answers(self) -> LockView:
        if self._view is None:
            self._view = self._handler.lock_view(self.read_by_ms)
        return self._view

    @property
    def covers_ms(self) -> int | None:
        """Its lists were asked after every event this process read up to this millisecond: up to the
        batch's ``read_by_ms`` (the view was asked in a later millisecond, or for it), or up to the
        millisecond before the view was asked. None before its first answer."""
        if self._view is None:
            return None
        return max(self.read_by_ms, self._view.asked_ms - 1)

    def table_locks(self, table: str) -> list[LockInfo]:
        self.all_locks()
        return self._answers().table_locks(table)

    def all_locks(self) -> list[LockInfo]:
        """Every lock (raises ``MetastoreError``, the same one for every table of the batch)."""
        if self._locks_error is None:
            try:
                return self._answers().all_locks()
            except MetastoreError as error:
                self._locks_error = error
        raise self._locks_error

    def lock_ids(self) -> frozenset[int]:
        """The ids of :meth:`all_locks` (raises as it does)."""
        self.all_locks()
        return self._answers().lock_ids()

    def transactions(self) -> ValidTxnList:
        if self._txns_error is None:
            try:
                return self._answers().transactions()
            except MetastoreError as error:
                self._txns_error = error
        raise self._txns_error


class LockCallCosts:
    """Moving averages of how long an unfiltered and a table-filtered ``show_locks`` take, to choose
    for a batch of n tables between one unfiltered call and n filtered ones by the numbers."""

    WEIGHT = 0.2

    def __init__(self) -> None:
        self.unfiltered_s: float | None = None
        self.filtered_s: float | None = None

    def record(self, unfiltered: bool, seconds: float) -> None:
        previous = self.unfiltered_s if unfiltered else self.filtered_s
        value = seconds if previous is None else previous + self.WEIGHT * (seconds - previous)
        if unfiltered:
            self.unfiltered_s = value
        else:
            self.filtered_s = value

    def prefer_unfiltered(self, tables: int) -> bool:
        """Whether one unfiltered call should answer ``tables`` tables (yes until both were measured)."""
        if self.unfiltered_s is None or self.filtered_s is None:
            return True
        return self.unfiltered_s <= tables * self.filtered_s


@dataclass(frozen=True)
class _Outgoing:
    topic: str
    event: EventBase | PrebuiltRecord
    after: Callable[[], None]  # metrics and the log line, once the broker has it


class OutcomeBatch:
    """The tables one worker handles together: their shared metastore answers, the cleanups whose
    announcements go out together (:meth:`CleanupHandler.run_prepared`) and every outcome, published in
    one ``publish_many`` with one wait for the acknowledgements (:meth:`CleanupHandler.flush_batch`)."""

    def __init__(self, handler: CleanupHandler, tables: int, read_by_ms: int = 0) -> None:
        # One table alone keeps the table-filtered show_locks; several share one unfiltered call unless
        # the calls measured so far say one call per table costs less (a metastore holding many locks),
        # or a lock list fresh enough for this batch is at hand anyway.
        fresh = handler.has_lock_view(read_by_ms)
        # An unfiltered list serves every batch while it is fresh: weigh it by the tables the last one
        # served, or the current one so far (a list answering fresh vacuums it keeps waiting lives long).
        current = handler.current_lock_view
        served = max(tables, handler.tables_per_lock_view, current.served if current is not None else 0)
        self.per_table = not fresh and not (served > 1 and handler.lock_call_costs.prefer_unfiltered(served))
        # Asked only when used: for every table unless per_table, else for the transaction rule's tables.
        self.check = SharedCheck(handler, read_by_ms)
        self.tables: list[TableLockCheck] = []
        self.prepared: list[PreparedCleanup] = []
        self.known = BatchTables()  # the tables about to be cleaned, asked for together (prefetch)
        self.outbox: list[_Outgoing] = []
        # Published event id -> ids of the outcomes it carries (a group's delays, a group's ready vacuums).
        self.carried_by: dict[str, set[str]] = {}
        self.bundles: list[_BundleCheck] = []  # the checks of the bundles of this batch
        # Keys with records in more than one work of the batch (two bundles, a bundle and a record):
        # a bundle with one of them is checked member by member, so the table goes on in one bundle.
        self.shared_keys: set[bytes] = set()

    def close(self) -> None:
        """Let go of everything the batch holds, once its outcomes are flushed. Each table's check
        refers back to its batch: without this, every batch (its outcomes, the bundles it wrote, up to
        512 KB each) lived until the cyclic collector found it, and its full collections of that much
        held the interpreter for 0.4-0.7 s every 15 s at 100,000 parked vacuums."""
        self.tables, self.prepared, self.outbox, self.bundles = [], [], [], []
        self.known = BatchTables()
        self.carried_by, self.shared_keys = {}, set()

    def carry(self, published: EventBase | PrebuiltRecord, outcome_id: object) -> None:
        """``published`` carries (part of) the outcome whose event id is ``outcome_id``."""
        self.carried_by.setdefault(str(published.event_id), set()).add(str(outcome_id))

    def carry_all(self, published: EventBase | PrebuiltRecord, outcome_ids: Iterable[str]) -> None:
        """``published`` carries (part of) each of the outcomes ``outcome_ids``."""
        self.carried_by.setdefault(str(published.event_id), set()).update(outcome_ids)


# A delay envelope built for a vacuum and not yet published: (the event checked, the answer, the envelope).
_Pending = tuple[VacuumCommitted | DelayEnvelope, Readiness, DelayEnvelope]


OWN_CHECKS_KEPT_INTERVALS = 30
# A bundle's member that a check would carry on unread with fewer checks than this left before its
# entries must be read is read in full by that check instead. A bundle is carried on whole only as
# many checks as its nearest member has left, and its members' limits are spread over 16-31 by key:
# without this, some member of a large bundle would always be about to reach its limit, and nearly
# every check of the bundle would go member by member.
READ_IN_FULL_WITHIN = MAX_UNCHANGED_CHECKS // 4  # how long a delay record's check time is kept for its re-check


@dataclass(frozen=True)
class _Waiting:
    """A vacuum of a DelayedVacuums still waiting after a check, for the key's next DelayedVacuums."""

    source: uuid.UUID  # the record it came in
    key: tuple[str, str, str | None]  # tenant, table, partition
    entry: WireWaiting
    checked_at: datetime
    due_at: datetime
    newly_stuck: bool
    outcome_id: str  # the id of the Outcome event of the work it came from
    vacuum_id: str
    facts: EntryFacts  # for the next record's unchanged summary
    single: bool = False  # read from a DelayEnvelope: written back as one while it waits alone


@dataclass(frozen=True)
class _Unchanged:
    """A DelayedVacuums a check left unchanged (every lock it waits on still listed): written on unread,
    unless other vacuums of its key wait in the same batch (then its vacuums are read and merged)."""

    group: WaitingGroup
    checked_at: datetime
    due_at: datetime
    held_ids: AbstractSet[int]  # the table's locks the check listed
    vacuums: int | None = None  # how many it carries, when its entries were not read (else theirs)


@dataclass(frozen=True)
class _BundleCheck:
    """One bundle's check: the groups it carries on unread (each with its next record) and the members
    it publishes again on their own, to be read in full by their tables' lanes."""

    partition: int  # the delay partition it was read from, where its members' keys belong
    outcome_id: str
    carried: list[_DelayOut]  # the members carried on, each as its next record
    spilled: list[Republished]
    absorbed: int = 0  # members that took their tables' fresh vacuums in (their records are the tables')
    whole: CarriedBundle | None = None  # the bundle carried on whole (nothing else then)
    keys: tuple[str, ...] = ()  # its members' keys, when carried on whole


@dataclass(frozen=True)
class _DelayOut:
    """One delay record a batch writes: its event, the outcomes it carries besides its own, the delay
    partition its key's records are read from (None: not known), when its check started, its oldest
    vacuum's commit, and what to do once the broker has it (metrics and logs)."""

    event: DelayedVacuums | DelayEnvelope
    outcome_ids: tuple[str, ...]
    read_from: int | None
    checked_at: datetime
    oldest_commit: datetime
    published: Callable[[], None]
    # When its vacuums wait on snapshot locks alone: those locks, and how many more checks may carry
    # it on unread (what it adds to its bundle's summary).
    whole: _WholePart | None = None


@dataclass(frozen=True)
class _WholePart:
    lock_ids: Sequence[int]
    carries_left: int


def _whole_part(key: str, unchanged: WireUnchanged | None) -> _WholePart | None:
    """What a group with this summary adds to its bundle's summary."""
    if unchanged is None:
        return None
    return _WholePart(unchanged.lock_ids, unchanged_checks_limit(key) - unchanged.checks)


class TableLockCheck:
    """The lock list of one table (and the metastore's transaction list), asked for at most once and
    shared by every event of a lane group.

    Reusing them for later events of the group is safe: lock ids are never reused, so a snapshot lock
    absent from an earlier list is still released; one present may have been released since, which
    only makes the answer more cautious. The same holds for open transactions, and a transaction
    list read earlier only sees fewer ``_vT`` directories as committed.
    """

    def __init__(self, handler: CleanupHandler, table: str, batch: OutcomeBatch | None = None) -> None:
        self._handler = handler
        self._table = table
        self.batch = batch
        if batch is not None:
            batch.tables.append(self)
        self._locks: list[LockInfo] | None = None
        self._error: str | None = None
        self._txns: ValidTxnList | None = None
        self._all_locks: list[LockInfo] | None = None
        self._due: datetime | None = None
        # Envelopes of this group, published together by CleanupHandler.flush_delays (one ack).
        self.pending: list[tuple[VacuumCommitted | DelayEnvelope, Readiness, DelayEnvelope]] = []
        # Vacuums of DelayedVacuums records still waiting after this check, merged by key at flush_batch.
        self.waiting: list[_Waiting] = []
        self.unchanged: list[_Unchanged] = []
        self._readers: set[int] | None = None
        # The delay partition this table's records were read from (its key's): where its next delay
        # records may go on in a bundle. None while its records came from the vacuum topic only.
        self.read_from: int | None = None
        # Outcomes (a bundle's) that this table's delay records carry besides their own.
        self.carries_for: tuple[str, ...] = ()
        # A bundle's lane only: the fresh vacuums riding with it that its check took in, by event id,
        # each with its table's check (any other work of the lane goes back to its own table's lane).
        self.riders: dict[str, TableLockCheck] | None = None
        # Up to when the events read are covered by every shared list behind the answers so far (None:
        # only calls made for this check, after every event of its lane was read), and the lists asked
        # for this check alone once an answer needed newer ones (see readiness).
        self._lists_cover_ms: int | None = None
        self._own_check: SharedCheck | None = None

    @property
    def current_locks(self) -> list[LockInfo]:
        """The table's locks as last listed (empty before the first check)."""
        return list(self._locks or [])

    def _shared(self) -> SharedCheck | None:
        """The lists shared with the batch (or asked for this check alone after a renewal)."""
        if self._own_check is not None:
            return self._own_check
        return self.batch.check if self.batch is not None else None

    def _noted(self, shared: SharedCheck) -> None:
        covers = shared.covers_ms
        if covers is not None and (self._lists_cover_ms is None or covers < self._lists_cover_ms):
            self._lists_cover_ms = covers

    def _all_listed(self) -> list[LockInfo]:
        shared = self._shared()
        if shared is None:
            return self._handler.show_locks(None)
        locks = shared.all_locks()
        self._noted(shared)
        return locks

    def transactions(self) -> ValidTxnList:
        """The metastore's transaction list (raises ``MetastoreError``)."""
        if self._txns is None:
            shared = self._shared()
            if shared is None:
                self._txns = self._handler.valid_txns()
            else:
                self._txns = shared.transactions()
                self._noted(shared)
        return self._txns

    def readiness(self, processed: VacuumCommitted | DelayEnvelope, read_ms: int | None = None) -> Readiness:
        """readyToClean for ``processed``. ``read_ms``: when this process read it, if its batch's lists
        may be older (a fresh vacuum left out of the batch's ``read_by``, see ``CleanerLoop``). A list
        asked before then answers "wait" safely (a lock it lists was held when the vacuum committed or
        later, and only delays), but never "ready": a lock or transaction its snapshot waits for may
        have begun after that list was asked. A "ready" from such lists is asked again, from lists
        asked after ``read_ms``."""
        answer = self._readiness(processed)
        stale = self._lists_cover_ms is not None and read_ms is not None and read_ms > self._lists_cover_ms
        if answer.ready and stale:
            assert read_ms is not None
            self._renew_after(read_ms)
            answer = self._readiness(processed)
        return answer

    def _renew_after(self, read_ms: int) -> None:
        """Forget every answer: the next ones come from lists asked after ``read_ms``."""
        self._locks = self._all_locks = self._txns = None
        self._readers = None
        self._error = None
        self._lists_cover_ms = None
        if self.batch is not None:
            self._own_check = SharedCheck(self._handler, read_ms)
        self._handler.note_renewed_answer()

    def _readiness(self, processed: VacuumCommitted | DelayEnvelope) -> Readiness:
        vacuum = vacuum_of(processed)
        # A transaction commit is waited for whatever the setting says: a reader whose snapshot is older
        # than T skips the _vT output even when it locks (docs/safety.md, rule 2).
        visibility_commit = committed_through_transaction(vacuum.new_directories)
        txn_rule = (self._handler.config.wait_for_open_txns or visibility_commit) and vacuum.next_txn_id is not None
        batch = self.batch
        shared = self._shared() if batch is not None and (txn_rule or not batch.per_table) else None
        if self._locks is None and self._error is None:
            try:
                if shared is not None:
                    self._all_locks = shared.all_locks()
                    self._locks = shared.table_locks(self._table)
                    self._noted(shared)
                elif txn_rule:
                    # One unfiltered call: the table's locks, and which transactions read with locks.
                    self._all_locks = self._handler.show_locks(None)
                    self._locks = table_locks(self._all_locks, self._table)
                else:
                    self._locks = self._handler.show_locks(self._table)
            except MetastoreError as error:
                self._error = f"metastore show_locks failed: {error}"
        open_before: tuple[int, ...] = ()
        if self._locks is not None and txn_rule:
            try:
                if self._all_locks is None:
                    self._all_locks = self._all_listed()
                open_ids = self.transactions().open_ids
                open_before = open_transactions_before(
                    vacuum.next_txn_id,
                    open_ids,
                    self._all_locks,
                    visibility_commit=visibility_commit,
                )
            except MetastoreError as error:
                self._error = f"metastore check of open transactions failed: {error}"
                self._locks = None
        if self._locks is None:
            last = processed.locks_held if isinstance(processed, DelayEnvelope) else None
            return not_checked(vacuum.lock_snapshot, last, self._error or "no answer")
        return ready_to_clean(vacuum.lock_snapshot, self._locks, open_before)

    def held_lock_ids(self, every_lock: bool = False) -> set[int] | str:
        """The ids of the table's locks now listed, or why the metastore could not answer (fail closed).
        ``every_lock``: the open-transaction rule will need the unfiltered list anyway."""
        if self._locks is None and self._error is None:
            batch = self.batch
            shared = self._shared()
            try:
                if batch is not None and shared is not None and (every_lock or not batch.per_table):
                    self._locks = shared.table_locks(self._table)
                    self._noted(shared)
                else:
                    self._locks = self._handler.show_locks(self._table)
            except MetastoreError as error:
                self._error = f"metastore show_locks failed: {error}"
        if self._locks is None:
            return self._error or "no answer"
        return {lock.lock_id for lock in self._locks}

    def open_before(self, next_txn_id: int, visibility_commit: bool) -> tuple[int, ...] | str:
        """:func:`open_transactions_before` for one vacuum, with the list of transactions that read
        with locks computed once for the group; or why the metastore could not answer."""
        try:
            if self._all_locks is None:
                self._all_locks = self._all_listed()
            open_ids = self.transactions().open_ids
        except MetastoreError as error:
            return f"metastore check of open transactions failed: {error}"
        if visibility_commit:
            return tuple(sorted(txn for txn in open_ids if txn < next_txn_id))
        if self._readers is None:
            self._readers = {lock.txn_id for lock in self._all_locks if lock.lock_type == "SHARED_READ" and lock.txn_id}
        readers = self._readers
        return tuple(sorted(txn for txn in open_ids if txn < next_txn_id and txn not in readers))

    def due(self, now: datetime, interval_ms: int) -> datetime:
        """One due time for every envelope of this group, so they are checked together again (a new
        one if a long cleanup earlier in the group outlasted the interval)."""
        if self._due is None or self._due <= now:
            self._due = next_due(now, interval_ms)
        return self._due


class CleanupHandler:
    """Decides and carries out the outcome of one event. Thread-safe."""

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
        self.config = config
        self._metastore = metastore
        self._bus = bus
        self._open_storage = open_storage
        self._roots = roots
        self._metrics = metrics
        self._delete_pool = delete_pool
        self._delete_threads = delete_threads
        self._clock = clock or SystemClock()
        self._crash = crash_points or NoCrashes()
        self._stuck: dict[str, float] = {}
        self._stuck_lock = threading.Lock()
        self.lock_call_costs = LockCallCosts()
        # A lock list shared by the batches that start while it is fresh (see lock_view_max_age_ms).
        self._base_view_age_ms = min(config.interval_ms // 4, 1000)
        self._view: LockView | None = None
        self._answered: LockView | None = None  # the newest view whose lock list has come back
        self._view_lock = threading.Lock()
        self._refreshing = False
        self._renewing: LockView | None = None  # the renewal under way in the background, if any
        # Renewals run one after another on one long-lived thread: the cleaner gives each thread its
        # own metastore client, and a thread per renewal opened (and kept) a connection per renewal.
        self._renewals: queue.SimpleQueue[LockView] = queue.SimpleQueue()
        self._renewer: threading.Thread | None = None
        self.tables_per_lock_view = 0  # tables the last replaced lock list answered
        # Delay records this process wrote, by event id: its own clock's time of the check that wrote
        # them. Any lock of their snapshots was taken before that check, so a lock list asked after it
        # may answer them (a record another process wrote only counts from when this one read it).
        self._own_checks: dict[str, int] = {}
        # Bundles whose check's records the broker acknowledged (id -> when): a copy read again (a
        # replay, a rewind) is not checked twice, or its members would go on twice, interval after interval.
        self._bundles_checked: dict[str, int] = {}
        self._own_checks_lock = threading.Lock()
        self._pruned_ms = 0
        # Key -> due time (epoch ms) of the last delay record published for it: the loop lets a fresh
        # vacuum of a key that has waiting vacuums join their next check (one record per key, not one
        # per vacuum). Written by the workers after the broker acknowledged, read by the loop.
        self.chain_due: dict[str, int] = {}

    # -- entry points ------------------------------------------------------------------------------

    def lock_check(self, work: Work, batch: OutcomeBatch | None = None) -> TableLockCheck:
        table = work.event.table if not isinstance(work.event, CleanupRejected) else None
        check = TableLockCheck(self, table or "", batch)
        if isinstance(work.event, WaitingBundle):
            check.riders = {}
        return check

    def lock_view(self, read_by_ms: int) -> LockView:
        """The newest :class:`LockView` if it was asked for after ``read_by_ms`` (in a later millisecond
        than when the batch's last event was read, or than this process's own check that wrote it) and
        is at most :attr:`lock_view_max_age_ms` old (twice that while its renewal is under way in the
        background), else the renewal under way if it was asked after ``read_by_ms``, else a new one
        (one thread asks; the others wait for its answer). Raises ``MetastoreError`` (a failed answer
        is not kept)."""
        with self._view_lock:
            view = self._view
            now = self._now_ms()
            if view is not None and view.asked_ms > read_by_ms and self._serves(view, now):
                answered = self._answered
                if (
                    not view.answered
                    and answered is not None
                    and answered.asked_ms > read_by_ms
                    and self._serves(answered, now)
                ):
                    # The newest list is still being asked for (a batch of events read after the last
                    # one came back): a batch that the last one answers does not wait for it.
                    return answered
                max_age, cost = self.lock_view_max_age_ms, self._unfiltered_ms()
                renew = cost >= SLOW_SHOW_LOCKS_MS and now - view.asked_ms > self._renew_at_ms(max_age, cost)
                if renew and not self._refreshing:
                    # A slow show_locks (thousands of locks) is asked for in the background, so no
                    # batch waits for it: this list serves until it is replaced. A quick one is asked
                    # for by the batch that needs it (no call when nothing is checked).
                    self._refreshing = True
                    renewal = LockView(self, now, renewal=True)
                    self._renewing = renewal
                    self._start_renewal(renewal)
                return view
            renewing = self._renewing
            if renewing is not None and self._renewal_serves(renewing, read_by_ms, now):
                # Events read before the renewal under way was asked: they wait for its answer rather
                # than ask for a list of their own (the same call twice, both waited for).
                return renewing
            if view is not None:
                self.tables_per_lock_view = view.served
            view = LockView(self, now)
            self._view = view
            return view

    def _renewal_serves(self, renewal: LockView, read_by_ms: int, now_ms: int) -> bool:
        """Whether a batch whose events were read by ``read_by_ms`` may wait for ``renewal`` (under way):
        asked after them, and not under way longer than a list may be old (a hung call is not waited
        for; the batch asks for itself)."""
        return renewal.asked_ms > read_by_ms and now_ms - renewal.asked_ms <= self.lock_view_max_age_ms

    def _serves(self, view: LockView, now_ms: int) -> bool:
        """Whether ``view`` is young enough to answer a batch now. While its renewal is under way it
        serves up to twice its age limit: under load a 10,000-lock renewal took 270 ms where 130 ms was
        planned, and every batch then waited for a call of its own (p99 lateness 150-420 ms at 100,000
        parked). An older list only answers "still held" more often, never "released" wrongly."""
        age, max_age = now_ms - view.asked_ms, self.lock_view_max_age_ms
        return age <= max_age or (self._refreshing and age <= 2 * max_age)

    def _renew_at_ms(self, max_age_ms: int, cost_ms: int) -> int:
        """How old the shared list is when its background renewal is asked for: so that the renewal is
        back an eighth of an interval before the list reaches its age limit. A record re-checked one
        interval after its own check needs a list asked after that check (:func:`_read_by_ms`), so
        renewal period plus call time must stay under an interval; within that, every renewal less
        saves a 10,000-lock list (15% of the interpreter at two an interval, with its per-table
        index another 8%). A batch the renewal would be late for waits for it, not for a call of
        its own (:meth:`lock_view`)."""
        return max(max_age_ms // 4, max_age_ms - cost_ms - self.config.interval_ms // 8)

    def _start_renewal(self, renewal: LockView) -> None:
        """Hand ``renewal`` to the renewal thread (started on first use; called under ``_view_lock``)."""
        if self._renewer is None:
            self._renewer = threading.Thread(target=self._renew_forever, name="lock-view", daemon=True)
            self._renewer.start()
        self._renewals.put(renewal)

    def _renew_forever(self) -> None:
        while True:
            renewal = self._renewals.get()
            try:
                self._refresh_lock_view(renewal)
            except Exception as error:  # a bug, not the metastore (that one is expected): the next one runs
                LOGGER.error("renewing the shared lock list failed (report this: it is a bug)", exc_info=error)

    def _refresh_lock_view(self, view: LockView) -> None:
        try:
            try:
                view.index()
            except MetastoreError:
                return  # the batches ask again themselves once the current list is too old
            with self._view_lock:
                current = self._view
                if current is None or current.asked_ms < view.asked_ms:
                    if current is not None:
                        self.tables_per_lock_view = current.served
                    self._view = view
        finally:
            with self._view_lock:
                self._renewing = None
            self._refreshing = False

    @property
    def lock_view_max_age_ms(self) -> int:
        """How old a shared lock list may be: a quarter interval (at most 1 s) or eight times what an
        unfiltered show_locks takes, up to half an interval; when that call is slow (thousands of
        locks), one interval, so the list is renewed in the background about once an interval. Each
        re-check needs only a list asked after its own previous check, an interval earlier: renewing
        more often only costs the interpreter (at 10,000 locks a renewal held it for about 40 ms, and
        renewing four to five times an interval took over a quarter of the cleaner's time). A lock
        released just before a renewal so delays its cleanup by at most one interval more: a stale
        list only ever answers "still held"."""
        cost = self._unfiltered_ms()
        if cost < SLOW_SHOW_LOCKS_MS:
            return min(self.config.interval_ms // 2, max(self._base_view_age_ms, 8 * cost))
        return self.config.interval_ms

    def _unfiltered_ms(self) -> int:
        measured = self.lock_call_costs.unfiltered_s
        return 0 if measured is None else int(measured * 1000)

    def take_checked_at_ms(self, event_id: uuid.UUID) -> int | None:
        """When this process made the check that wrote delay record ``event_id`` (None if it did not),
        forgotten once asked: a record is checked once, and one read again (a rewind, a replay) is
        answered as any record read now, which only asks for a newer lock list."""
        with self._own_checks_lock:
            return self._own_checks.pop(str(event_id), None)

    def _remember_checks(self, written: Sequence[tuple[EventBase | PrebuiltRecord, datetime]]) -> None:
        now = self._now_ms()
        # Records are normally taken back within an interval or two; a cleaner behind its delay
        # partitions reads them later (each then forgotten when taken), and without its check time a
        # record needs a lock list asked after it was read: every batch would wait for one.
        horizon = now - OWN_CHECKS_KEPT_INTERVALS * self.config.interval_ms
        with self._own_checks_lock:
            for event, checked in written:
                self._own_checks[str(event.event_id)] = int(checked.timestamp() * 1000)
            if now - self._pruned_ms > self.config.interval_ms and len(self._own_checks) > 1000:
                self._pruned_ms = now
                self._own_checks = {key: at for key, at in self._own_checks.items() if at >= horizon}
                self._bundles_checked = {key: at for key, at in self._bundles_checked.items() if at >= horizon}
                # Keys whose last record is long past (cleaned, or now another process's) are dropped too.
                self.chain_due = {key: due for key, due in self.chain_due.items() if due >= horizon}

    def note_chain_due(self, dues: Iterable[tuple[str, int | None]]) -> None:
        """Record the due time of each key's newest delay record (None: forget the key). Written by
        the threads whose records the broker acknowledged, and pruned by :meth:`_remember_checks`
        under the same lock: a write during the prune's pass over the dict failed the pass
        ("dictionary changed size during iteration"), and with it the batch whose acknowledgement was
        being recorded, whose records were then dead-lettered though their successors were out."""
        with self._own_checks_lock:
            for key, due in dues:
                if due is None:
                    self.chain_due.pop(key, None)
                else:
                    self.chain_due[key] = due

    def forget_lock_view(self, view: LockView) -> None:
        """Drop ``view`` (one of its calls failed): the next batch asks again."""
        if self._view is view:
            self._view = None

    def lock_view_answered(self, view: LockView) -> None:
        """``view``'s lock list came back: it answers batches while a newer one is asked for."""
        with self._view_lock:
            if self._answered is None or self._answered.asked_ms <= view.asked_ms:
                self._answered = view

    def kept_waiting_by_last_list(self, work: Work) -> bool:
        """Whether the newest lock list that came back still lists a lock of ``work``'s snapshot (a fresh
        vacuum's): any list then answers it "wait" (a listed lock only delays), so its batch need not
        wait for a list asked after it was read (at 10,000 locks, an unfiltered call of 400-500 ms or
        a table-filtered one of 80 ms per table). Should the batch's lists say "ready", it is asked
        again from newer ones (:meth:`TableLockCheck.readiness`)."""
        event = work.event
        view = self._answered
        if not isinstance(event, VacuumCommitted) or not event.lock_snapshot or view is None or not view.answered:
            return False
        listed = view.lock_ids()
        return any(entry.lock_id in listed for entry in event.lock_snapshot)

    def note_renewed_answer(self) -> None:
        """A fresh vacuum that older lists answered "ready" was asked again from newer ones."""
        self._metrics.events.labels("ready_asked_again").inc()

    @property
    def current_lock_view(self) -> LockView | None:
        """The newest shared lock list (asked for, perhaps not answered yet)."""
        return self._view

    def has_lock_view(self, read_by_ms: int) -> bool:
        """Whether :meth:`lock_view` would answer without a call of its own (a fresh list, or the
        renewal under way)."""
        view, renewing, now = self._view, self._renewing, self._now_ms()
        if renewing is not None and self._renewal_serves(renewing, read_by_ms, now):
            return True
        return view is not None and view.asked_ms > read_by_ms and self._serves(view, now)

    def _now_ms(self) -> int:
        return int(self._clock.now().timestamp() * 1000)

    def batch(self, tables: int, read_by_ms: int = 0) -> OutcomeBatch:
        """A batch for ``tables`` lanes: pass it to :meth:`lock_check`; outcomes of its lanes are deferred
        until :meth:`flush_batch`, cleanups until :meth:`run_prepared`."""
        return OutcomeBatch(self, tables, read_by_ms)

    def handle(self, work: Work, locks: TableLockCheck) -> Outcome:
        """Handle one work item; returns once its outcome is acknowledged (raises ``BusError`` if not),
        except a delay envelope: that one is ``deferred`` until :meth:`flush_delays` of the group."""
        return self._handle_work(work, locks)

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
                # A vacuum waiting alone whose snapshot locks are gone goes on to clean (_handle_group).
                if event.single and self._may_leave(event.members[0], locks):
                    keys.append(lock_scope(event.table))
                continue
            if not isinstance(event, VacuumCommitted | DelayEnvelope):
                continue
            vacuum = vacuum_of(event)
            if check_claims(vacuum) is None and locks.readiness(event, _fresh_read_ms(work)).ready:
                keys.append(lock_scope(vacuum.table))
        if len(keys) < 2:
            return
        try:
            txn_list: str | None = batch.check.transactions().to_string()
        except MetastoreError:
            txn_list = None
        metastore = self._metastore()
        self._metrics.metastore_calls.labels("get_tables").inc()
        batch.known.fetch(metastore, keys, txn_list)

    def _handle_work(self, work: Work, locks: TableLockCheck) -> Outcome:
        event = work.event
        if locks.riders is not None and not isinstance(event, WaitingBundle):
            return self._ride(work, locks.riders)
        if work.record.topic == self.config.topics.cleanup_delay and not isinstance(event, WaitingBundle):
            locks.read_from = work.record.partition
        if isinstance(event, CleanupRejected):
            return self._dead_letter(event, locks)
        if isinstance(event, WaitingGroup):
            return self._handle_group(work, event, locks)
        if isinstance(event, WaitingBundle):
            return self._handle_bundle(work, event, locks)
        vacuum = vacuum_of(event)
        refusal = check_claims(vacuum)
        if refusal is not None:
            return self._refuse(work, event, refusal, locks)
        readiness = locks.readiness(event, _fresh_read_ms(work))
        if not readiness.ready:
            return self._delay(event, readiness, locks)
        return self._clean(work, event, readiness, locks)

    def warm_up(self, metastore: bool = True) -> None:
        """Create this thread's producer and (with ``metastore``) its metastore client, and connect,
        before work arrives."""
        self._bus()
        if metastore:
            _ = self._metastore().kind

    def show_locks(self, table: str | None, *, renewal: bool = False) -> list[LockInfo]:
        """One table-level show_locks (every lock with ``None``; ``renewal``: asked in the background
        to replace the shared list), retried a bounded number of times (then fail closed)."""
        started = time.perf_counter()
        if table is None:
            locks = self._retried("show_locks", lambda metastore: metastore.show_locks())
        else:
            db, name = lock_scope(table)
            locks = self._retried("show_locks", lambda metastore: metastore.show_locks(db, name))
        self.lock_call_costs.record(table is None, time.perf_counter() - started)
        asked = "table" if table is not None else "renewal" if renewal else "batch"
        self._metrics.lock_lists.labels(asked).inc()
        return locks

    def valid_txns(self) -> ValidTxnList:
        """The metastore's transaction list (open and aborted transactions), retried like show_locks."""
        text = self._retried("get_open_txns_info", lambda metastore: metastore.valid_txn_list())
        return ValidTxnList.from_string(text)

    def _retried(self, call: str, operation: Callable[[CleanerMetastore], _Result]) -> _Result:
        retrying = Retrying(
            stop=stop_after_attempt(self.config.lock_check_attempts),
            wait=wait_exponential(multiplier=self.config.lock_retry_wait_s, max=10 * self.config.lock_retry_wait_s),
            retry=retry_if_exception(lambda error: isinstance(error, MetastoreError)),
            reraise=True,
        )
        for attempt in retrying:
            with attempt:
                self._metrics.metastore_calls.labels(call).inc()
                return operation(self._metastore())
        raise AssertionError("unreachable")

    def stuck_count(self, within_s: float) -> int:
        horizon = time.time() - within_s
        with self._stuck_lock:
            for key in [key for key, seen in self._stuck.items() if seen < horizon]:
                del self._stuck[key]
            return len(self._stuck)

    # -- outcomes ----------------------------------------------------------------------------------

    def _publish(self, topic: str, event: EventBase) -> None:
        if self.config.dry_run and not isinstance(event, CleanupDone):
            return  # a dry run reports what it would do in its logs; only CleanupDone(dry_run) is published
        self._bus().publish(topic, event)

    def _emit(self, topic: str, event: EventBase, after: Callable[[], None], locks: TableLockCheck | None) -> bool:
        """Publish now and run ``after``, or, inside a batch, queue both for :meth:`flush_batch`;
        ``True`` when deferred (the outcome is not acknowledged yet)."""
        if locks is not None and locks.batch is not None:
            locks.batch.outbox.append(_Outgoing(topic, event, after))
            return True
        self._publish(topic, event)
        after()
        return False

    def flush_batch(self, batch: OutcomeBatch) -> dict[str, BusError]:
        """Publish every deferred outcome of ``batch`` (delay envelopes, CleanupDone, dead letters) in one
        ``publish_many`` and wait for the acknowledgements. Returns the outcomes the broker did not take,
        by event id (empty when it took them all): if the batch fails, each is published on its own, so
        one event Kafka refuses for good does not hold back the others' partitions."""
        outgoing, batch.outbox = batch.outbox, []
        outs: list[_DelayOut] = []
        for locks in batch.tables:
            outs.extend(self._delay_outs(locks))
        checks, batch.bundles = batch.bundles, []
        for check in checks:
            outs.extend(check.carried)
        items: list[tuple[str, EventBase | PrebuiltRecord]] = [
            (item.topic, item.event)
            for item in outgoing
            if not self.config.dry_run or isinstance(item.event, CleanupDone)
        ]
        alone, bundles = (outs, []) if self.config.dry_run else self._bundled(outs, checks)
        if not self.config.dry_run:
            items += [(self.config.topics.cleanup_delay, out.event) for out in alone]
            items += [(self.config.topics.cleanup_delay, bundle) for bundle, _ in bundles]
            items += [(self.config.topics.cleanup_delay, spill) for check in checks for spill in check.spilled]
            items += [(self.config.topics.cleanup_delay, check.whole) for check in checks if check.whole is not None]
        for out in alone:
            batch.carry_all(out.event, out.outcome_ids)
        for bundle, packed in bundles:
            batch.carry_all(bundle, (i for out in packed for i in (str(out.event.event_id), *out.outcome_ids)))
        for check in checks:
            for spill in check.spilled:
                batch.carry(spill, check.outcome_id)
            if check.whole is not None:
                batch.carry(check.whole, check.outcome_id)
        failed = self._publish_isolating(items)
        try:
            self._note_published(batch, outgoing, alone, bundles, checks, failed)
        except Exception as note_error:
            # The broker has the records: this process's own notes of them (metrics, logs, due times
            # for joiners) are all that is lost. Raised, the loop took the batch for never publishable
            # and dead-lettered its source records although their successors were out.
            self._metrics.events.labels("notes_failed").inc()
            LOGGER.error(
                "the batch's records were acknowledged but noting them failed; they stay published "
                "and their sources are committed (report this: it is a bug)",
                exc_info=note_error,
            )
        # An outcome that went out inside another record fails with it: a work is finished only once
        # every record carrying its outcome was acknowledged.
        for published, outcome_ids in batch.carried_by.items():
            error = failed.get(published)
            if error is not None:
                for outcome_id in outcome_ids:
                    failed.setdefault(outcome_id, error)
        batch.carried_by.clear()
        if any(isinstance(item.event, CleanupDone) and str(item.event.event_id) not in failed for item in outgoing):
            self._crash.reached("after-done")
        return failed

    def _note_published(
        self,
        batch: OutcomeBatch,
        outgoing: Sequence[_Outgoing],
        alone: Sequence[_DelayOut],
        bundles: Sequence[tuple[Bundle, list[_DelayOut]]],
        checks: Sequence[_BundleCheck],
        failed: dict[str, BusError],
    ) -> None:
        """After the broker answered: log, count and remember what it took."""
        for item in outgoing:
            if str(item.event.event_id) not in failed:
                item.after()
        for out in alone:
            if str(out.event.event_id) not in failed:
                self._delay_published(out)
                self._remember_checks([(out.event, out.checked_at)])
        for bundle, packed in bundles:
            if str(bundle.event_id) not in failed:
                for out in packed:
                    self._delay_published(out)  # a fresh vacuum of its table waits for it (the loop's joiners)
                self._metrics.events.labels("bundled").inc(len(packed))
                self._remember_checks([(bundle, min(out.checked_at for out in packed))])
        for check in checks:
            if check.whole is not None and str(check.whole.event_id) not in failed:
                self._carried_whole(check.whole, check.keys)
            for spill in check.spilled:
                if str(spill.event_id) not in failed:
                    self._spill_published(spill)
        self._bundles_acknowledged(checks, failed, batch)
        spilled = sum(len(check.spilled) for check in checks if check.outcome_id not in failed)
        if spilled:
            self._metrics.events.labels("bundle_spilled").inc(spilled)

    def _delay_outs(self, locks: TableLockCheck) -> list[_DelayOut]:
        """One lane's delay records of this batch (its table's vacuums still waiting), merged by key."""
        classic, merged, unread_groups = self._merge_delays(locks.pending, locks.waiting, locks.unchanged)
        locks.pending, locks.waiting, locks.unchanged = [], [], []
        outs = [
            _DelayOut(
                envelope,
                (),
                locks.read_from,
                envelope.occurred_at,
                envelope.vacuum.occurred_at,
                partial(self._delays_published, [entry]),
            )
            for entry in classic
            for envelope in (entry[2],)
        ]
        outs += [
            _DelayOut(
                out.event,
                tuple(member.outcome_id for member in members),
                locks.read_from,
                min(member.checked_at for member in members),
                min(member.facts.committed_at for member in members),
                partial(self._group_published, out, members),
                _whole_part(out.event.key, out.unchanged),
            )
            for out, members in merged
        ]
        outs += [
            _DelayOut(
                out.event,
                (str(unread.group.event_id),),
                unread.group.read_from,
                unread.checked_at,
                unread.group.oldest_commit,
                partial(self._carried_published, out, unread),
                _whole_part(out.event.key, out.unchanged),
            )
            for out, unread in unread_groups
        ]
        if locks.carries_for:
            outs = [dataclasses.replace(out, outcome_ids=out.outcome_ids + locks.carries_for) for out in outs]
        return outs

    def _carried_whole(self, whole: CarriedBundle, keys: Sequence[str]) -> None:
        """A bundle carried on whole is acknowledged: its tables' next records are in it (a fresh vacuum
        of one of them joins it), and the loop may answer it with a lock list asked after this check."""
        self.note_chain_due([(key, whole.due_at_ms) for key in keys])
        self._remember_checks([(whole, whole.occurred_at)])
        self._metrics.events.labels("bundle_carried_whole").inc()
        self._metrics.events.labels("bundled").inc(len(keys))
        log(
            LOGGER,
            logging.DEBUG,
            f"not ready; every lock its {len(keys)} records wait on still listed: bundle carried on whole",
            outcome="delayed",
            event_id=whole.event_id,
            causation_id=whole.previous,
            due_at=datetime.fromtimestamp(whole.due_at_ms / 1000, timezone.utc).isoformat(),
        )

    def _spill_published(self, spill: Republished) -> None:
        """A bundle's member published again on its own is its table's latest record, due as it was
        packed (in the past: a bundle carried on whole keeps its members' bytes): a record of its table
        read before it waits for no later one."""
        due = header_due_at_ms(spill.record)
        self.note_chain_due([(spill.record.key.decode("utf-8", "replace"), due)])

    def _delay_published(self, out: _DelayOut) -> None:
        out.published()
        self.note_chain_due([(out.event.key, due_at_ms(out.event.due_at))])

    def _bundles_acknowledged(
        self, checks: Sequence[_BundleCheck], failed: dict[str, BusError], batch: OutcomeBatch
    ) -> None:
        """Remember the bundles whose every record the broker took: a copy read again is skipped."""
        if not checks:
            return
        refused = {
            outcome_id for published, ids in batch.carried_by.items() if published in failed for outcome_id in ids
        }
        now = self._now_ms()
        with self._own_checks_lock:
            for check in checks:
                if check.outcome_id not in refused and check.outcome_id not in failed:
                    self._bundles_checked[check.outcome_id] = now

    def _bundled(
        self, outs: list[_DelayOut], checks: Sequence[_BundleCheck]
    ) -> tuple[list[_DelayOut], list[tuple[Bundle, list[_DelayOut]]]]:
        """The delay records that go on in bundles, by the delay partition their keys' records were read
        from (at least ``bundle_min`` of one partition, or any carried by a bundle's check, at most
        ``bundle_max`` a bundle), and those that go on alone (their partition unknown: a table seen only
        on the vacuum topic so far, or too few of one partition). The same record twice (two copies of
        one bundle, a forged one) goes on once, carrying the outcomes of both."""
        by_partition: dict[int, dict[str, _DelayOut]] = {}
        alone: list[_DelayOut] = []
        for out in outs:
            if out.read_from is None:
                alone.append(out)
                continue
            packed = by_partition.setdefault(out.read_from, {})
            key = str(out.event.event_id)
            known = packed.get(key)
            packed[key] = (
                out if known is None else dataclasses.replace(known, outcome_ids=known.outcome_ids + out.outcome_ids)
            )
        from_bundles = {check.partition for check in checks if check.carried or check.absorbed}
        bundles: list[tuple[Bundle, list[_DelayOut]]] = []
        for partition, by_id in by_partition.items():
            partition_outs = list(by_id.values())
            if len(partition_outs) < max(1, self.config.bundle_min) and partition not in from_bundles:
                alone.extend(partition_outs)
                continue
            # A bundle is due when its last member is: one per run of records due together, so the
            # records of a batch are not all due (and checked next) when its last checked one is; and
            # one per cohort of records with about as many carries left, so its whole carries end
            # when most of its members are due to be read, not when the first of them is.
            for packed_outs in (
                cohort
                for run in runs_due_together(
                    partition_outs,
                    lambda out: due_at_ms(out.event.due_at),
                    self.config.bundle_spread_ms,
                    key=lambda out: out.event.key,
                )
                for cohort in cohorts_by_carries(
                    run,
                    _carries_left,
                    lambda out: out.event.key,
                    width=READ_IN_FULL_WITHIN,
                    min_size=max(BUNDLE_COHORT_MIN, self.config.bundle_min),
                )
            ):
                made = bundles_of(
                    [out.event for out in packed_outs],
                    tenant=self.config.tenant,
                    partition=partition,
                    source_id=packed_outs[0].event.event_id,
                    occurred_at=min(out.checked_at for out in packed_outs),
                    oldest_commit=min(out.oldest_commit for out in packed_outs),
                    max_records=max(1, self.config.bundle_max),
                    compressed=self.config.bundle_compressed,
                )
                start = 0
                for bundle in made:
                    chunk = packed_outs[start : start + len(bundle.members)]
                    bundles.append((dataclasses.replace(bundle, summary=_summary_of(chunk)), chunk))
                    start += len(bundle.members)
        return alone, bundles

    def _publish_isolating(self, items: Sequence[tuple[str, EventBase | PrebuiltRecord]]) -> dict[str, BusError]:
        """``publish_many(items)``; if the broker refuses the batch, each item again on its own: the
        ``BusError`` of each one it still does not take, by event id."""
        if not items:
            return {}
        try:
            self._bus().publish_many(items)
            return {}
        except BusError as error:
            if len(items) == 1:
                return {str(items[0][1].event_id): error}
        failed: dict[str, BusError] = {}
        for index, (topic, event) in enumerate(items):
            started = time.monotonic()
            try:
                self._bus().publish_many([(topic, event)])
            except BusError as error:
                failed[str(event.event_id)] = error
                if time.monotonic() - started > ISOLATION_GIVE_UP_S:
                    # Not one event refused (a refusal is quick) but a broker that does not answer:
                    # waiting out the timeout for each of the others would only stall the batch.
                    failed.update({str(rest.event_id): error for _, rest in items[index + 1 :]})
                    break
        return failed

    def run_prepared(self, batch: OutcomeBatch) -> dict[int, Outcome | BaseException]:
        """Announce every prepared cleanup of ``batch`` in one ``publish_many`` (acknowledged before the
        first delete), then delete them all through the delete pool (directories of different tables
        overlap) and queue each one's ``CleanupDone`` (or, if a delete failed, its delay) in the batch.
        Returns each prepared cleanup's outcome or error, by ``id()`` of its :class:`PreparedCleanup`."""
        prepared, batch.prepared = batch.prepared, []
        if not prepared:
            return {}
        outcomes: dict[int, Outcome | BaseException] = {}
        try:
            names = [(item.storage, name) for item in prepared for name in item.plan.delete]
            listed = self._in_chunks(lambda pair: self._listed(*pair), names)
            start = 0
            for item in prepared:
                item.checked = tuple(listed[start : start + len(item.plan.delete)])
                item.planned = tuple(directory.measured() for directory in item.checked)
                start += len(item.plan.delete)
            refused = self._announce_many(prepared)
        except BaseException as error:  # nothing was deleted: each event is retried or dead-lettered
            return {id(item): error for item in prepared}
        for item in prepared:
            if id(item) in refused:  # not announced, so not deleted: its partition is rewound
                outcomes[id(item)] = refused[id(item)]
        prepared = [item for item in prepared if id(item) not in refused]
        if not prepared:
            return outcomes
        self._crash.reached("before-delete")
        removals = self._remove_checked(prepared)
        self._crash.reached("after-delete")
        for item in prepared:
            try:
                outcomes[id(item)] = self._after_deletes(item.processed, item.plan, removals[id(item)], item.locks)
            except Exception as error:
                outcomes[id(item)] = error
        return outcomes

    def _dead_letter(self, rejected: CleanupRejected, locks: TableLockCheck | None = None) -> Outcome:
        deferred = self._emit(self.config.topics.dead_letter, rejected, lambda: self._dead_lettered(rejected), locks)
        return Outcome("dead_lettered", rejected, deferred=deferred)

    def _dead_lettered(self, rejected: CleanupRejected) -> None:
        self._metrics.dead_letters.labels(rejected.reason_code).inc()
        self._metrics.events.labels("dead_lettered").inc()
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
            dry_run=self.config.dry_run or None,
        )

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
            rejected_by=self.config.cleaner_id,
            tenant=self.config.tenant,
            event=processed,
            now=self._clock.now,
        )
        return self._dead_letter(rejected)

    def _refuse(
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
            rejected_by=self.config.cleaner_id,
            tenant=self.config.tenant,
            event=processed,
            now=self._clock.now,
        )
        return self._dead_letter(rejected, locks)

    def _delay(
        self, processed: VacuumCommitted | DelayEnvelope, readiness: Readiness, locks: TableLockCheck
    ) -> Outcome:
        now = self._clock.now()
        envelope = delay_envelope(
            processed,
            readiness,
            now=now,
            interval_ms=self.config.interval_ms,
            max_wait_s=self.config.max_wait_s,
            due=locks.due(now, self.config.interval_ms),
        )
        locks.pending.append((processed, readiness, envelope))
        return Outcome("delayed", envelope, deferred=True)

    def _handle_group(self, work: Work, group: WaitingGroup, locks: TableLockCheck) -> Outcome:
        """One check of every vacuum of a DelayedVacuums, without the event models: the ones still
        waiting go to the key's next DelayedVacuums (at flush_batch, with the batch's other delays of
        the key), each one found ready leaves as a DelayEnvelope due at once, to be checked again and
        cleaned alone and in order by the usual path. A group whose ``unchanged`` locks are all still
        listed is carried on unread."""
        now = self._clock.now()
        due = locks.due(now, self.config.interval_ms)
        if group.may_carry_unread:
            listed = locks.held_lock_ids()
            if not isinstance(listed, str) and unchanged_now(group, listed, now, self.config.max_wait_s):
                locks.unchanged.append(_Unchanged(group, now, due, listed))
                return Outcome("delayed", self._group_outcome(group, due), deferred=True)
        try:
            members = group.members
        except UnreadableGroup:
            event = decode(
                work.record,
                rejected_by=self.config.cleaner_id,
                tenant=self.config.tenant,
                expected=(DelayedVacuums,),
                now=self._clock.now,
            )
            if isinstance(event, CleanupRejected):
                return self._dead_letter(event, locks)
            assert isinstance(event, DelayedVacuums)
            group = group_of_model(event)
            members = group.members
        held = locks.held_lock_ids(every_lock=self._txn_rule(members))
        table_error = held if isinstance(held, str) else None
        held_ids = None if isinstance(held, str) else held
        outcome_id = str(group.event_id)
        ready: list[Member] = []
        if group.single and not self._waits_on(members[0], locks, held_ids, table_error):
            # A DelayEnvelope that may be ready: the models' path checks and cleans it (in full).
            return self._handle_work(self._as_envelope(work), locks)
        for member in members:
            view = member.view
            error = table_error
            open_txns: tuple[int, ...] = ()
            if error is None and held_ids is not None:
                visibility_commit = any("_v" in name for name in view.new_directories) and (
                    committed_through_transaction(view.new_directories)
                )
                txn_rule = (self.config.wait_for_open_txns or visibility_commit) and view.next_txn_id is not None
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
            locks.waiting.append(self._still_waiting(group, member, outcome_id, held_ids, error, open_txns, now, due))
        for member in ready:
            self._leave_group(work, group, member, now, locks)
        return Outcome("delayed", self._group_outcome(group, due), deferred=True)

    def _handle_bundle(self, work: Work, bundle: WaitingBundle, locks: TableLockCheck) -> Outcome:
        """One check of a bundle of waiting tables. A bundle with a summary whose locks are all still
        listed, and no fresh vacuum of its tables waiting to join it, is carried on whole, its members
        unread (:func:`acidclean.shared.bus.bundle.carried_on`). Otherwise every member group whose
        ``unchanged`` locks are all still listed is carried on unread into the next bundle of this
        partition; every other member (a lock gone, its summary's check limit reached, about to be
        stuck, unreadable, not a group, or a metastore that does not answer) is published again on its
        own, due at once, to be read and checked in full by its table's lane. Nothing here cleans or
        refuses anything."""
        now = self._clock.now()
        due = locks.due(now, self.config.interval_ms)
        shell = empty_group_shell(bundle.event_id, bundle.tenant, "", None, bundle.occurred_at, None, due)
        with self._own_checks_lock:
            replayed = str(bundle.event_id) in self._bundles_checked
            # Taken at every check (a bundle is checked once; kept, it would wait for the prune).
            checked = self._own_checks.pop(str(bundle.event_id), None)
        if replayed:
            self._metrics.events.labels("bundle_replayed").inc()
            log(LOGGER, logging.DEBUG, "bundle already checked, its records acknowledged: skipped", **_ids(bundle))
            return Outcome("delayed", shell)
        own_batch = locks.batch is None
        batch = self.batch(1) if locks.batch is None else locks.batch
        held: frozenset[int] | None
        try:
            held = batch.check.lock_ids()
        except MetastoreError:
            held = None  # fail closed: each member is checked in full, which records why it waits
        carried: list[_DelayOut] = []
        spilled: list[Republished] = []
        absorbing: list[tuple[TableLockCheck, Sequence[VacuumCommitted]]] = []
        source = (str(bundle.event_id),)
        partition = work.record.partition
        whole = None
        max_wait = self.config.max_wait_s
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
            self._metrics.bundles_by_member.labels(refused).inc()
        if whole is not None:
            keys = whole.keys
            batch.bundles.append(_BundleCheck(partition, source[0], [], [], whole=whole, keys=keys))
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
        batch.bundles.append(_BundleCheck(partition, source[0], carried, spilled, len(absorbing)))
        # A spilled member's vacuums all committed before the check that wrote the bundle: a lock list
        # asked after that check may answer it (this check's own list may be older: it only keeps
        # vacuums waiting, see acidclean.consumers.loop._read_by_ms).
        if spilled:
            required = work.received_ms if checked is None else min(work.received_ms, checked)
            read_by = datetime.fromtimestamp(max(batch.check.read_by_ms, required) / 1000, timezone.utc)
            self._remember_checks([(item, read_by) for item in spilled])
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
            rejected_by=self.config.cleaner_id,
            tenant=self.config.tenant,
            rejected_event_type=BUNDLE_TYPE,
            now=self._clock.now,
        )
        return self._dead_letter(rejected, locks)

    def _bundle_checked(self, batch: OutcomeBatch, own_batch: bool, shell: DelayedVacuums) -> Outcome:
        """A bundle's check done: its records go out with the batch's, or now if it has none."""
        if not own_batch:
            return Outcome("delayed", shell, deferred=True)
        failed = self.flush_batch(batch)
        if failed:
            raise next(iter(failed.values()))
        return Outcome("delayed", shell)

    def _carry_member(
        self, member: RawRecord, held: AbstractSet[int], now: datetime, due: datetime, prior_checks: int
    ) -> _DelayOut | None:
        """A bundle member's next record if a check now leaves it waiting as it was (its locks all still
        listed), else None: it must be read and checked in full, on its own. ``prior_checks``: checks
        that carried its bundle on whole since it was written."""
        tenant, max_wait = self.config.tenant, self.config.max_wait_s
        ce_type = _ce_type(member)
        if ce_type == _ENVELOPE_TYPE:
            single = carry_envelope_on(member, tenant, held, now, max_wait, due, prior_checks)
            if single is None:
                return None
            envelope = single.envelope
            alone = _WholePart(single.lock_ids, unchanged_checks_limit(envelope.key))
            published = partial(self._single_carried, envelope)
            return _DelayOut(envelope, (), None, now, single.committed_at, published, alone)
        if ce_type != _GROUP_TYPE:
            return None
        fast = carry_on_unread(member, tenant, held, now, max_wait, due, prior_checks)
        if fast is not None:
            fast_part = _whole_part(fast.group.key, fast.out.unchanged)
            if fast_part is None or fast_part.carries_left < READ_IN_FULL_WITHIN:
                return None  # read in full now, with the other members of its bundle near their limits
            unread = _Unchanged(fast.group, now, due, held, fast.vacuums)
            published = partial(self._carried_published, fast.out, unread)
            return _DelayOut(fast.out.event, (), None, now, fast.group.oldest_commit, published, fast_part)
        # Its entries must be read: still unchanged (a vacuum stuck meanwhile), or out on its own.
        group = read_group(member, tenant)
        if group is None:
            return None
        group = counting_prior_checks(group, prior_checks)
        if not unchanged_now(group, held, now, max_wait):
            return None
        out = carry_unchanged(group, checked_at=now, due_at=due)
        part = _whole_part(group.key, out.unchanged)
        if part is None or part.carries_left < READ_IN_FULL_WITHIN:
            return None
        unread = _Unchanged(group, now, due, held)
        published = partial(self._carried_published, out, unread)
        return _DelayOut(out.event, (), None, now, group.oldest_commit, published, part)

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
        max_wait = self.config.max_wait_s
        for member in members:
            ce_type = _ce_type(member)
            if ce_type == _GROUP_TYPE:
                group = read_group(member, self.config.tenant)
            elif ce_type == _ENVELOPE_TYPE:
                group = read_envelope(member, self.config.tenant)
            else:
                return None
            if group is None:
                return None
            group = counting_prior_checks(group, prior_checks)
            if table is None:
                key = group.key
                if any(rider.key != key for rider in riders):
                    return None
                table = TableLockCheck(self, group.table)
                table.batch, table.read_from, table.carries_for = batch, partition, outcome_ids
                table._due = due
                listed = table.held_lock_ids(every_lock=True)  # the batch's unfiltered list: no call of its own
                if isinstance(listed, str):
                    return None
            elif group.key != key:
                return None
            assert not isinstance(listed, str)
            if not group.single and unchanged_now(group, listed, now, max_wait) and not _near_its_limit(group):
                table.unchanged.append(_Unchanged(group, now, due, listed))
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
                self._still_waiting(group, vacuum, outcome_id, listed, None, (), now, due) for vacuum in read
            )
            if not group.single:
                self._metrics.events.labels("bundle_read_in_full").inc()
        if table is None:
            return None
        for rider in riders:
            if check_claims(rider) is not None or table.readiness(rider).ready:
                return None
        if len(members) > 1:
            self._metrics.events.labels("bundle_merged").inc(len(members) - 1)
        return table

    def _waits_on_a_listed_lock(self, member: Member, listed: set[int]) -> bool:
        """Whether a full check finds ``member`` not ready, for a reason a bundle's check can write: a
        lock of its snapshot listed (rule 1), and no open-transaction rule to apply (that one is
        left to the table's lane, which records the transactions it waits for)."""
        view = member.view
        if view.next_txn_id is not None and (
            self.config.wait_for_open_txns or committed_through_transaction(view.new_directories)
        ):
            return False
        return any(lock_id in listed for lock_id in member.lock_ids)

    def _ride(self, work: Work, riders: dict[str, TableLockCheck]) -> Outcome:
        """A work of a bundle's lane other than the bundle: a fresh vacuum of a bundled table. Delayed
        into its table's next record if the bundle's check took it in (:meth:`_kept_in_bundle`), else
        handed back to its table's lane: a bundle's lane checks nothing in full."""
        event = work.event
        if not isinstance(event, VacuumCommitted):
            raise AssertionError(f"only fresh vacuums ride in a bundle's lane, not {type(event).__name__}")
        table = riders.pop(str(event.event_id), None)
        readiness = None if table is None else table.readiness(event)  # the lists the bundle's check asked
        if table is None or readiness is None or readiness.ready:
            self._metrics.events.labels("rejoined").inc()
            return Outcome("rejoined", event)
        self._metrics.events.labels("joined_in_bundle").inc()
        return self._delay(event, readiness, table)

    def _single_carried(self, envelope: DelayEnvelope) -> None:
        self._metrics.requeues.inc()
        self._metrics.events.labels("delayed").inc()
        self._metrics.events.labels("carried_unread").inc()
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

    def _still_waiting(
        self,
        group: WaitingGroup,
        member: Member,
        outcome_id: str,
        held_ids: AbstractSet[int] | None,
        error: str | None,
        open_txns: tuple[int, ...],
        now: datetime,
        due: datetime,
    ) -> _Waiting:
        """A member a check found not ready, for the key's next record."""
        entry = still_waiting(
            member,
            held_ids=None if error is not None else held_ids,
            check_error=None if error is None else fit_field(DelayEnvelope, "check_error", error),
            open_txns=open_txns,
            now=now,
            max_wait_s=self.config.max_wait_s,
            checks=group.checks,
        )
        held = () if error is not None or held_ids is None else tuple(i for i in member.lock_ids if i in held_ids)
        return _Waiting(
            group.event_id,
            (group.tenant, group.table, group.partition),
            entry,
            now,
            due,
            entry.stuck and not member.wire.stuck,
            outcome_id,
            member.vacuum_id,
            EntryFacts(held, member.view.occurred_at),
            group.single,
        )

    def _unchanged_members(self, item: _Unchanged) -> list[_Waiting] | None:
        """An unchanged group's vacuums as the check found them (all still waiting), to be merged with
        the other vacuums of their key; None if they do not read (the group is then carried on unread
        alone, and the models decide at its next full check)."""
        group = item.group
        try:
            members = group.members
        except UnreadableGroup:
            return None
        outcome_id = str(group.event_id)
        return [
            self._still_waiting(group, member, outcome_id, item.held_ids, None, (), item.checked_at, item.due_at)
            for member in members
        ]

    @staticmethod
    def _group_outcome(group: WaitingGroup, due: datetime) -> DelayedVacuums:
        """The outcome of a group's check, for the loop's logs (the records it causes are built at flush)."""
        return empty_group_shell(
            group.event_id, group.tenant, group.table, group.partition, group.occurred_at, None, due
        )

    def _txn_rule(self, members: Sequence[Member]) -> bool:
        return self.config.wait_for_open_txns and any(member.view.next_txn_id is not None for member in members)

    def _may_leave(self, member: Member, locks: TableLockCheck) -> bool:
        """Whether a lone waiting vacuum's check may find it ready (asks the table's locks, as its
        handling would, with the same answer)."""
        held = locks.held_lock_ids(every_lock=self._txn_rule([member]))
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
            rejected_by=self.config.cleaner_id,
            tenant=self.config.tenant,
            expected=(DelayEnvelope,),
            now=self._clock.now,
        )
        assert isinstance(event, DelayEnvelope | CleanupRejected)
        return Work(work.record, event, work.generation, work.due_ms, work.received_ms)

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
                rejected_by=self.config.cleaner_id,
                tenant=self.config.tenant,
                now=self._clock.now,
            )
            self._dead_letter(rejected, locks)
            published: EventBase = rejected
        else:
            self._emit(self.config.topics.cleanup_delay, envelope, lambda: self._left_group(envelope), locks)
            published = envelope
        if locks.batch is not None:
            locks.batch.carry(published, group.event_id)

    def _left_group(self, envelope: DelayEnvelope) -> None:
        self._metrics.events.labels("ready_in_group").inc()
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

    def _merge_delays(
        self,
        pending: list[_Pending],
        waiting: list[_Waiting],
        unchanged: list[_Unchanged],
    ) -> tuple[list[_Pending], list[tuple[GroupOut, list[_Waiting]]], list[tuple[GroupOut, _Unchanged]]]:
        """One batch's delays of one lane: a key with a single waiting vacuum keeps its DelayEnvelope;
        the vacuums of a key with several (or of a DelayedVacuums) go out in DelayedVacuums records. A
        DelayedVacuums a check left unchanged is written on unread when it is its key's only delay."""
        by_key: dict[tuple[str, str, str | None], list[_Waiting]] = {}
        for item in waiting:
            by_key.setdefault(item.key, []).append(item)
        unchanged_keys: Counter[tuple[str, str, str | None]] = Counter()
        if unchanged:
            unchanged_keys.update((item.group.tenant, item.group.table, item.group.partition) for item in unchanged)
        classic_by_key: dict[tuple[str, str, str | None], list[_Pending]] = {}
        for entry in pending:
            envelope = entry[2]
            classic_by_key.setdefault((envelope.tenant, envelope.table, envelope.partition), []).append(entry)
        classic: list[_Pending] = []
        for key, entries in classic_by_key.items():
            if len(entries) == 1 and key not in by_key and key not in unchanged_keys:
                classic.extend(entries)
                continue
            for processed, _, envelope in entries:
                source = processed.event_id
                by_key.setdefault(key, []).append(
                    _Waiting(
                        source,
                        key,
                        entry_of_envelope(envelope),
                        envelope.occurred_at,
                        envelope.due_at,
                        envelope.stuck and not (isinstance(processed, DelayEnvelope) and processed.stuck),
                        str(envelope.event_id),
                        str(envelope.vacuum.event_id),
                        EntryFacts(tuple(lock.lock_id for lock in envelope.locks_held), envelope.vacuum.occurred_at),
                    )
                )
        carried: list[tuple[GroupOut, _Unchanged]] = []
        for unread in unchanged:
            key = (unread.group.tenant, unread.group.table, unread.group.partition)
            expanded = None
            if unchanged_keys[key] > 1 or key in by_key:
                expanded = self._unchanged_members(unread)
            if expanded is None:
                out = carry_unchanged(unread.group, checked_at=unread.checked_at, due_at=unread.due_at)
                carried.append((out, unread))
            else:
                by_key.setdefault(key, []).extend(expanded)
        merged: list[tuple[GroupOut, list[_Waiting]]] = []
        for (tenant, table, partition), items in by_key.items():
            # One vacuum may come twice (a record delivered again with its own earlier outcome): it is
            # written once, and each copy's outcome is carried by the record that carries it.
            kept: dict[str, _Waiting] = {}
            for item in sorted(items, key=lambda item: (item.checked_at, -item.entry.attempt)):
                kept.setdefault(item.vacuum_id, item)
            unique = list(kept.values())
            if len(unique) == 1 and unique[0].single:
                item = unique[0]
                envelope = build_envelope(
                    tenant=tenant,
                    table=table,
                    partition=partition,
                    entry=item.entry,
                    source=item.source,
                    checked_at=item.checked_at,
                    due_at=item.due_at,
                )
                merged.append((GroupOut(envelope, (item.entry,)), items))
                continue
            outs = build_groups(
                tenant=tenant,
                table=table,
                partition=partition,
                entries=[item.entry for item in unique],
                vacuum_ids=[item.vacuum_id for item in unique],
                facts=[item.facts for item in unique],
                sources=list(dict.fromkeys(item.source for item in items)),
                checked_at=min(item.checked_at for item in unique),
                due_at=max(item.due_at for item in unique),
            )
            chunk_of = {item.vacuum_id: index // MAX_WAITING_PER_ENVELOPE for index, item in enumerate(unique)}
            for index, out in enumerate(outs):
                merged.append((out, [item for item in items if chunk_of[item.vacuum_id] == index]))
        return classic, merged, carried

    def _group_published(self, out: GroupOut, members: Sequence[_Waiting]) -> None:
        self._metrics.requeues.inc(len(members))
        self._metrics.events.labels("delayed").inc(len(members))
        errors = sum(1 for item in members if item.entry.check_error is not None)
        if errors:
            self._metrics.check_errors.inc(errors)
        event = out.event
        stuck = [item for item in members if item.entry.stuck]
        if stuck:
            self._metrics.stuck_checks.inc(len(stuck))
            with self._stuck_lock:
                for item in stuck:
                    self._stuck[item.vacuum_id] = time.time()
        for item in stuck:
            if item.newly_stuck:
                log(
                    LOGGER,
                    logging.WARNING,
                    f"vacuum waiting longer than the max wait {self.config.max_wait_s:g} s; still waiting",
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
            dry_run=self.config.dry_run or None,
        )

    def _carried_published(self, out: GroupOut, unread: _Unchanged) -> None:
        count = len(out.entries) if unread.vacuums is None else unread.vacuums
        self._metrics.requeues.inc(count)
        self._metrics.events.labels("delayed").inc(count)
        self._metrics.events.labels("carried_unread").inc(count)
        stuck = [entry for entry in out.entries if entry.stuck]
        if stuck:
            self._metrics.stuck_checks.inc(len(stuck))
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
            dry_run=self.config.dry_run or None,
        )

    def flush_delays(self, locks: TableLockCheck) -> None:
        """Publish the group's delay envelopes in one batch; returns once the broker has them all."""
        pending, locks.pending = locks.pending, []
        if not pending:
            return
        if not self.config.dry_run:
            self._bus().publish_many([(self.config.topics.cleanup_delay, envelope) for _, _, envelope in pending])
        self._delays_published(pending)

    def _delays_published(
        self, pending: Sequence[tuple[VacuumCommitted | DelayEnvelope, Readiness, DelayEnvelope]]
    ) -> None:
        for processed, readiness, envelope in pending:
            now = envelope.occurred_at
            self._metrics.requeues.inc()
            self._metrics.events.labels("delayed").inc()
            if readiness.check_error is not None:
                self._metrics.check_errors.inc()
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
                dry_run=self.config.dry_run or None,
            )
            if envelope.stuck:
                self._metrics.stuck_checks.inc()
                with self._stuck_lock:
                    self._stuck[str(vacuum.event_id)] = time.time()
                log(
                    LOGGER,
                    logging.WARNING,
                    f"vacuum waiting for {(now - vacuum.occurred_at).total_seconds():.0f} s, longer than the max wait "
                    f"{self.config.max_wait_s:g} s; still waiting for {readiness.describe_held() or 'the metastore'}",
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

    def _done(
        self, processed: VacuumCommitted | DelayEnvelope, removed: Sequence[RemovedDirectory], note: str | None
    ) -> CleanupDone:
        vacuum = vacuum_of(processed)
        now = self._clock.now()
        action = "cleanup-dry-run" if self.config.dry_run else "cleanup-done"
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
            attempts=_attempt(processed),
            cleaner_id=self.config.cleaner_id,
            dry_run=self.config.dry_run,
            note=None if note is None else fit_field(CleanupDone, "note", note),
        )

    # -- cleaning ----------------------------------------------------------------------------------

    def _clean(
        self, work: Work, processed: VacuumCommitted | DelayEnvelope, readiness: Readiness, locks: TableLockCheck
    ) -> Outcome:
        vacuum = vacuum_of(processed)
        db, name = lock_scope(vacuum.table)
        metastore = self._metastore()
        known = locks.batch.known if locks.batch is not None else None
        try:
            table = self._table_of(metastore, known, (db, name), vacuum.partition)
        except TableNotFoundError as error:
            return self._table_gone(work, processed, error, locks)
        except MetastoreError as error:
            return self._fail_closed(processed, f"metastore get_table failed: {error}", locks)
        try:
            storage = self._open_storage(table.location)
            real = storage.fs.real_path(storage.path)
        except StorageError as error:
            return self._fail_closed(processed, f"storage: {error}", locks)
        refusal = check_location(vacuum, table.location, table.location if real == storage.path else real, self._roots)
        if refusal is not None:
            return self._refuse(work, processed, refusal, locks)
        try:
            txns = locks.transactions()
        except MetastoreError as error:
            return self._fail_closed(processed, f"metastore get_open_txns_info failed: {error}", locks)
        # The write ids in the snapshot of the transaction list the plan uses (none asked on Hive 2).
        txn_list = txns.to_string()
        ids_text = known.write_ids((db, name), txn_list) if known is not None else None
        try:
            if ids_text is None:
                self._metrics.metastore_calls.labels("valid_write_ids").inc()
                ids_text = metastore.valid_write_ids_of([(db, name)], txn_list)[0]
            ids = cleaner_ids(metastore.kind, ids_text, vacuum.highest_write_id)
        except MetastoreError as error:
            return self._fail_closed(processed, f"metastore valid_write_ids failed: {error}", locks)
        try:
            children = storage.fs.list_dir(storage.path)
        except StorageError as error:
            if not _exists(storage.fs, storage.path):
                done = self._done(processed, (), f"the location {table.location} no longer exists; nothing to remove")
                return self._report_done(processed, done, "cleaned", locks)
            return self._fail_closed(processed, f"storage: {error}", locks)
        try:
            markers = {
                name: storage.fs.read_file(storage.child(f"{name}/{VACUUM_MARKER}"))
                for name in vacuum.new_directories
                if any(entry.name == name and entry.is_dir for entry in children)
            }
        except StorageError as error:
            return self._fail_closed(processed, f"storage: {error}", locks)
        refusal = check_markers(vacuum, markers)
        if refusal is not None:
            return self._refuse(work, processed, refusal, locks)
        committed_by = _committed_by(vacuum, markers)
        try:  # rule 8: the directory's other names and their locks
            shared = directory_locks(
                metastore, table, vacuum, locks.current_locks, committed_by, self._count_metastore_call
            )
        except MetastoreError as error:
            return self._fail_closed(
                processed, f"metastore lookup of the directory's other names failed: {error}", locks
            )
        unlisted = locks_missing_from_snapshot(
            vacuum.lock_snapshot,
            locks.current_locks,
            vacuum.partition,
            committed_by,
            shared_locks=shared.locks,
            sharers=shared.sharers,
        )
        if unlisted:
            # Never expected: a snapshot that misses a reader is a bug or a bad event. Wait for it.
            held = tuple(snapshot_entry(lock) for lock in unlisted)
            reason = (
                f"lock(s) {', '.join(str(lock.lock_id) for lock in unlisted)} acquired before the vacuum committed "
                "are missing from its lock snapshot, or are on another name of its directory; waiting for them too"
            )
            log(
                LOGGER,
                logging.WARNING,
                reason,
                event_id=processed.event_id,
                table=vacuum.table,
                partition=vacuum.partition,
            )
            return self._delay(processed, Readiness(False, held, reason), locks)
        plan = plan_cleanup(vacuum, children, ids, txns)
        if isinstance(plan, Refusal):
            return self._refuse(work, processed, plan, locks)
        if isinstance(plan, NotYet):
            return self._delay(processed, Readiness(False, readiness.locks_held, plan.reason), locks)
        return self._delete_and_report(processed, storage, plan, locks, TableIdentity.of(table))

    def _table_of(
        self, metastore: CleanerMetastore, known: BatchTables | None, key: TableKey, partition: str | None
    ) -> TableInfo:
        """The vacuum's table, or partition: from its batch's lookup when that has it (then one call for a
        partition, none for a table), else asked now. Raises ``TableNotFoundError``, ``MetastoreError``."""
        fetched = known.table(key) if known is not None else None
        if fetched is None and known is not None and known.absent(key):
            raise TableNotFoundError(f"{key[0]}.{key[1]}: no such table")
        if fetched is None:
            self._metrics.metastore_calls.labels("get_table").inc()
            return metastore.get_table(key[0], key[1], partition)
        if partition is None:
            return fetched
        self._metrics.metastore_calls.labels("get_partition").inc()
        return metastore.partition_info(fetched, partition)

    def _count_metastore_call(self, call: str) -> None:
        self._metrics.metastore_calls.labels(call).inc()

    def _fail_closed(self, processed: VacuumCommitted | DelayEnvelope, reason: str, locks: TableLockCheck) -> Outcome:
        """Rule 1's fail-closed answer: something could not be asked or listed, so nothing is deleted
        and the vacuum waits one more interval."""
        return self._delay(processed, not_checked(vacuum_of(processed).lock_snapshot, (), reason), locks)

    def _table_gone(
        self, work: Work, processed: VacuumCommitted | DelayEnvelope, error: TableNotFoundError, locks: TableLockCheck
    ) -> Outcome:
        """The metastore does not know the table (or partition). If its directory is gone too, it was
        dropped (Hive removes a managed table's data): report done. If the directory still exists,
        the event names a table this metastore never had: refuse it and touch nothing."""
        vacuum = vacuum_of(processed)
        refusal = check_location(vacuum, vacuum.location, vacuum.location, self._roots)
        if refusal is not None:
            return self._refuse(work, processed, refusal, locks)
        try:
            storage = self._open_storage(vacuum.location)
            exists = _exists(storage.fs, storage.path)
        except StorageError as storage_error:
            return self._fail_closed(processed, f"storage: {storage_error}", locks)
        what = f"{vacuum.table}" + (f" partition {vacuum.partition}" if vacuum.partition else "")
        if exists:
            return self._refuse(
                work,
                processed,
                Refusal(
                    "unknown_table",
                    f"the metastore has no {what} ({error}) but {vacuum.location} exists; refusing to touch a "
                    "location no table owns",
                ),
                locks,
            )
        done = self._done(
            processed,
            (),
            f"{what} was dropped (the metastore does not know it and its location is gone); nothing to remove",
        )
        return self._report_done(processed, done, "table_dropped", locks)

    def _delete_and_report(
        self,
        processed: VacuumCommitted | DelayEnvelope,
        storage: StorageLocationLike,
        plan: CleanupPlan,
        locks: TableLockCheck,
        table: TableIdentity,
    ) -> Outcome:
        if plan.delete and locks.batch is not None and not self.config.dry_run:
            # Measured, announced with the rest of the batch (one acknowledgement), then deleted: run_prepared.
            cleanup = PreparedCleanup(processed, storage, plan, (), locks, table)
            locks.batch.prepared.append(cleanup)
            return Outcome("cleaned", processed, deferred=True, prepared=cleanup)
        checked = self._in_chunks(lambda name: self._listed(storage, name), plan.delete)
        planned = [directory.measured() for directory in checked]
        if self.config.dry_run:
            return self._report_done(processed, self._done(processed, planned, plan.note()), "dry_run", locks)
        if planned:
            # Acknowledged before the first delete: if this process dies before its CleanupDone is
            # acknowledged, the restarted cleaner finds these gone and only this event says what was deleted.
            self._announce(processed, planned)
        self._crash.reached("before-delete")
        single = PreparedCleanup(processed, storage, plan, tuple(planned), locks, table, tuple(checked))
        return self._after_deletes(processed, plan, self._remove_checked([single])[id(single)], locks, crash=True)

    def _after_deletes(
        self,
        processed: VacuumCommitted | DelayEnvelope,
        plan: CleanupPlan,
        removal: Removal,
        locks: TableLockCheck,
        *,
        crash: bool = False,
    ) -> Outcome:
        """The outcome once the deletes ran: ``CleanupDone``, or a delay if any delete failed."""
        vacuum = vacuum_of(processed)
        removed, errors = list(removal.removed), list(removal.errors)
        if errors:
            log(
                LOGGER,
                logging.ERROR,
                "some deletes failed; will check again",
                event_id=processed.event_id,
                vacuum_id=vacuum.event_id,
                table=vacuum.table,
                partition=vacuum.partition,
                removed=[item.name for item in removed],
                errors=errors,
            )
            self._count_removed(removed)
            return self._delay(
                processed,
                Readiness(False, (), "delete failed: " + "; ".join(errors)),
                locks,
            )
        if crash:
            self._crash.reached("after-delete")
        removed.sort(key=lambda item: item.name)
        self._count_removed(removed)
        note = "; ".join(part for part in (plan.note(), removal.note()) if part) or None
        outcome = self._report_done(processed, self._done(processed, removed, note), "cleaned", locks)
        if not outcome.deferred:
            self._crash.reached("after-done")
        return outcome

    def _announce(self, processed: VacuumCommitted | DelayEnvelope, planned: Sequence[RemovedDirectory]) -> None:
        """Publish the CleanupStarted of ``planned``; returns once the broker has it (raises ``BusError`` if not)."""
        started = self._started(processed, planned)
        self._publish(self.config.topics.cleanup_done, started)
        self._announced(processed, started)

    def _announce_many(self, prepared: Sequence[PreparedCleanup]) -> dict[int, BusError]:
        """The CleanupStarted of every prepared cleanup in one batch, acknowledged; returns the ones the
        broker did not take (by ``id()`` of the prepared cleanup), which must delete nothing."""
        started = [self._started(item.processed, item.planned) for item in prepared]
        failed = self._publish_isolating([(self.config.topics.cleanup_done, event) for event in started])
        refused: dict[int, BusError] = {}
        for item, event in zip(prepared, started, strict=True):
            error = failed.get(str(event.event_id))
            if error is not None:
                refused[id(item)] = error
            else:
                self._announced(item.processed, event)
        return refused

    def _started(
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
            occurred_at=self._clock.now(),
            causation_id=processed.event_id,
            correlation_id=vacuum.event_id,
            directories_to_remove=list(planned),
            attempt=_attempt(processed),
            cleaner_id=self.config.cleaner_id,
        )

    def _announced(self, processed: VacuumCommitted | DelayEnvelope, started: CleanupStarted) -> None:
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

    def _report_done(
        self,
        processed: VacuumCommitted | DelayEnvelope,
        done: CleanupDone,
        kind: OutcomeKind,
        locks: TableLockCheck | None = None,
    ) -> Outcome:
        deferred = self._emit(
            self.config.topics.cleanup_done, done, lambda: self._reported(processed, done, kind), locks
        )
        return Outcome(kind, done, tuple(done.directories_removed), deferred=deferred)

    def _reported(self, processed: VacuumCommitted | DelayEnvelope, done: CleanupDone, kind: OutcomeKind) -> None:
        self._metrics.events.labels(kind).inc()
        self._metrics.wait_seconds.observe(done.time_waited_ms / 1000)
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

    def _count_removed(self, removed: Sequence[RemovedDirectory]) -> None:
        self._metrics.deleted_directories.inc(len(removed))
        self._metrics.deleted_files.inc(sum(item.file_count for item in removed))
        self._metrics.deleted_bytes.inc(sum(item.bytes for item in removed))

    def _listed(self, storage: StorageLocationLike, name: str) -> CheckedDirectory:
        """Directory ``name``'s files with identity and size (in the delete pool): what the deletes
        compare against (rule 9), and what ``CleanupStarted`` announces."""
        return checked_directory(storage.fs, storage.child(name), name)

    def _in_chunks(self, function: Callable[[_Item], _Result], items: Sequence[_Item]) -> list[_Result]:
        """``function`` of every item, in order: in the delete pool, one task per pool thread, each
        running its share in turn. A task per directory cost more in futures and wake-ups than a
        local delete of a small directory takes; a share per thread still overlaps remote calls."""
        if self._delete_pool is None or len(items) < 2:
            return [function(item) for item in items]
        chunks = max(1, min(self._delete_threads, len(items)))
        size = -(-len(items) // chunks)
        shares = [items[start : start + size] for start in range(0, len(items), size)]
        results: list[_Result] = []
        for share in self._delete_pool.map(lambda part: [function(item) for item in part], shares):
            results.extend(share)
        return results

    def _remove_checked(self, cleanups: Sequence[PreparedCleanup]) -> dict[int, Removal]:
        """Each cleanup's deletes (by ``id()``): exactly what its check listed (rule 9, consumers/remover.py)."""
        keys = [lock_scope(vacuum_of(item.processed).table) for item in cleanups]
        tables = TablesNow(self._metastore(), keys, lambda call: self._metrics.metastore_calls.labels(call).inc())
        planned = [self._planned_removal(item, key, tables) for item, key in zip(cleanups, keys, strict=True)]
        removals = remove_all(planned, self._in_chunks, lambda: self._crash.reached("mid-delete"))
        return {id(item): removal for item, removal in zip(cleanups, removals, strict=True)}

    def _planned_removal(self, item: PreparedCleanup, key: TableKey, tables: TablesNow) -> PlannedRemoval:
        vacuum = vacuum_of(item.processed)
        partition = vacuum.partition
        return PlannedRemoval(
            CheckedCleanup(item.table or TableIdentity(None, None, vacuum.location), item.checked),
            item.storage.fs,
            item.storage.child,
            lambda: tables.reread(key, partition),
            {"event_id": item.processed.event_id, "table": vacuum.table, "partition": partition},
        )


def _committed_by(vacuum: VacuumCommitted, markers: dict[str, bytes | None]) -> datetime:
    """A time by which the vacuum's rename had certainly happened: its snapshot time, or its markers'
    time if later (an event cannot forge the marker the vacuum wrote), plus the commit margin."""
    latest = vacuum.occurred_at
    for data in markers.values():
        written = VacuumMarker.parse(data).written() if data else None
        if written is not None and written > latest:
            latest = written
    return latest + COMMIT_MARGIN


_GROUP_TYPE = DelayedVacuums.event_type.encode()
_ENVELOPE_TYPE = DelayEnvelope.event_type.encode()


def _fresh_read_ms(work: Work) -> int | None:
    """When the loop read a fresh vacuum (its batch's lists may be older, see
    :meth:`CleanupHandler.kept_waiting_by_last_list`); None for a delay record, whose batch's lists are
    always new enough for it."""
    return work.received_ms if isinstance(work.event, VacuumCommitted) else None


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


def _near_its_limit(group: WaitingGroup) -> bool:
    """Whether a group carried on unread now would have fewer than READ_IN_FULL_WITHIN checks left: read
    in full now instead, with the other members of its bundle near their limits (its bundle would
    otherwise be read member by member again within a few checks, for its sake)."""
    assert group.unchanged is not None
    return unchanged_checks_limit(group.key) - group.unchanged.checks - 1 < READ_IN_FULL_WITHIN


def _carries_left(out: _DelayOut) -> int | None:
    return None if out.whole is None else out.whole.carries_left


def _summary_of(outs: Sequence[_DelayOut]) -> BundleSummary | None:
    """The summary of a bundle of these records when each waits on snapshot locks alone (its next check
    may carry the bundle on whole), else None: also when a table has two records in it, which its
    next check merges into one."""
    parts = [out.whole for out in outs if out.whole is not None]
    if len(parts) != len(outs) or len({out.event.key for out in outs}) != len(outs):
        return None
    return summary_of_members(
        [part.lock_ids for part in parts], [part.carries_left for part in parts], [out.oldest_commit for out in outs]
    )


def _ids(bundle: WaitingBundle) -> dict[str, object]:
    return {"event_id": bundle.event_id, "members": bundle.count}


def _ce_type(record: RawRecord) -> bytes | None:
    for name, value in record.headers:
        if name == "ce_type":
            return value
    return None


def _attempt(processed: VacuumCommitted | DelayEnvelope) -> int:
    """The readyToClean check this is (a vacuum's first, or one more than its envelope's)."""
    return (processed.attempt if isinstance(processed, DelayEnvelope) else 0) + 1


def _exists(fs: FileSystem, path: str) -> bool:
    try:
        return fs.exists(path)
    except OSError:
        return True  # cannot tell: assume it exists, which never leads to reporting a drop
