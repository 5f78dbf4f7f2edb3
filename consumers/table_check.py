"""The lock check of one table (one lane of a batch): its locks and the metastore's transaction list,
asked for at most once and shared by every event of the lane, and readyToClean for each of them.
It also holds what the lane parks for the batch's end (delay envelopes, vacuums still waiting).
"""

from __future__ import annotations

from datetime import datetime

from acidclean.consumers.lock_views import LockViews, SharedCheck
from acidclean.consumers.outcome_batch import OutcomeBatch, PendingEnvelope, StillWaiting, UnchangedGroup
from acidclean.consumers.rules.readiness import (
    Readiness,
    not_checked,
    older_snapshots_skip_output,
    open_transactions_before,
    ready_to_clean,
    table_locks,
)
from acidclean.consumers.scheduling import next_due, vacuum_of
from acidclean.schemas.events import DelayEnvelope, VacuumCommitted
from acidclean.shared.acid.write_ids import ValidTxnList
from acidclean.shared.errors import MetastoreError
from acidclean.shared.metastore import LockInfo


class TableLockCheck:
    """The lock list of one table (and the metastore's transaction list), asked for at most once and
    shared by every event of a lane group.

    Reusing them for later events of the group is safe: lock ids are never reused, so a snapshot lock
    absent from an earlier list is still released; one present may have been released since, which
    only makes the answer more cautious. The same holds for open transactions, and a transaction
    list read earlier only sees fewer ``_vT`` directories as committed.
    """

    def __init__(self, views: LockViews, table: str, batch: OutcomeBatch | None = None) -> None:
        self._views = views
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
        self.pending: list[PendingEnvelope] = []
        # Vacuums of DelayedVacuums records still waiting after this check, merged by key at flush_batch.
        self.waiting: list[StillWaiting] = []
        self.unchanged: list[UnchangedGroup] = []
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
            return self._views.show_locks(None)
        locks = shared.all_locks()
        self._noted(shared)
        return locks

    def transactions(self) -> ValidTxnList:
        """The metastore's transaction list (raises ``MetastoreError``)."""
        if self._txns is None:
            shared = self._shared()
            if shared is None:
                self._txns = self._views.valid_txns()
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
            self._own_check = SharedCheck(self._views, read_ms)
        self._views.note_renewed_answer()

    def _readiness(self, processed: VacuumCommitted | DelayEnvelope) -> Readiness:
        vacuum = vacuum_of(processed)
        # A base or _vT output waits for every transaction open at its commit whatever the setting says:
        # a reader whose snapshot is older skips that output even when it locks, and Hive's Driver takes
        # its snapshot before it locks (docs/design.md section 7, rule 2; docs/safety.md).
        visibility_commit = older_snapshots_skip_output(vacuum.new_directories)
        txn_rule = (self._views.config.wait_for_open_txns or visibility_commit) and vacuum.next_txn_id is not None
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
                    self._all_locks = self._views.show_locks(None)
                    self._locks = table_locks(self._all_locks, self._table)
                else:
                    self._locks = self._views.show_locks(self._table)
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
                    self._locks = self._views.show_locks(self._table)
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
