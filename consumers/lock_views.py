"""The metastore's lock and transaction lists, shared by the batches of one cleaner process.

An unfiltered ``show_locks`` (every lock) and the transaction list, asked at most once per
:class:`LockView` and only when a check needs them, answer every batch that starts while they are
fresh; a slow list (thousands of locks) is renewed in the background on one long-lived thread.
:class:`SharedCheck` is one batch's door to them; :class:`LockViews` keeps the newest and decides
which one may answer a batch whose events were read by a given millisecond.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from acidclean.consumers.rules.readiness import lock_scope
from acidclean.consumers.work import CleanerContext, CleanerMetastore, HandlerConfig, Work
from acidclean.schemas.events import VacuumCommitted
from acidclean.shared.acid.write_ids import ValidTxnList
from acidclean.shared.errors import MetastoreError
from acidclean.shared.metastore import LockInfo

LOGGER = logging.getLogger("acidclean.cleaner")

_Result = TypeVar("_Result")

# An unfiltered show_locks slower than this (a metastore holding thousands of locks) is renewed ahead
# of need in the background (LockViews.lock_view).
SLOW_SHOW_LOCKS_MS = 50


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

    def __init__(self, views: LockViews, asked_ms: int, renewal: bool = False) -> None:
        self._views = views
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
                    self._locks = self._views.show_locks(None, renewal=self._renewal)
                except MetastoreError:
                    self._views.forget_lock_view(self)
                    raise
                self._views.lock_view_answered(self)
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
                    self._txns = self._views.valid_txns()
                except MetastoreError:
                    self._views.forget_lock_view(self)
                    raise
            return self._txns


class SharedCheck:
    """The metastore's answers shared by every table of one batch: a :class:`LockView` made after every
    event of the batch was read (so after each vacuum committed), shared with other batches while it
    is fresh (:meth:`LockViews.lock_view`). A failed call fails the same way for every table of
    the batch."""

    def __init__(self, views: LockViews, read_by_ms: int = 0) -> None:
        self._views = views
        self.read_by_ms = read_by_ms
        self._view: LockView | None = None
        self._locks_error: MetastoreError | None = None
        self._txns_error: MetastoreError | None = None

    def _answers(self) -> LockView:
        if self._view is None:
            self._view = self._views.lock_view(self.read_by_ms)
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


class LockViews:
    """The shared lock lists of one cleaner process (the newest, the newest answered, the renewal
    under way) and the metastore calls behind them, retried a bounded number of times. Thread-safe."""

    def __init__(self, context: CleanerContext) -> None:
        self._context = context
        self.lock_call_costs = LockCallCosts()
        # A lock list shared by the batches that start while it is fresh (see lock_view_max_age_ms).
        self._base_view_age_ms = min(context.config.interval_ms // 4, 1000)
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

    def now_ms(self) -> int:
        return self._context.now_ms()

    @property
    def config(self) -> HandlerConfig:
        return self._context.config

    def lock_view(self, read_by_ms: int) -> LockView:
        """The newest :class:`LockView` if it was asked for after ``read_by_ms`` (in a later millisecond
        than when the batch's last event was read, or than this process's own check that wrote it) and
        is at most :attr:`lock_view_max_age_ms` old (twice that while its renewal is under way in the
        background), else the renewal under way if it was asked after ``read_by_ms``, else a new one
        (one thread asks; the others wait for its answer). Raises ``MetastoreError`` (a failed answer
        is not kept)."""
        with self._view_lock:
            view = self._view
            now = self._context.now_ms()
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
        return max(max_age_ms // 4, max_age_ms - cost_ms - self._context.config.interval_ms // 8)

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
            return min(self._context.config.interval_ms // 2, max(self._base_view_age_ms, 8 * cost))
        return self._context.config.interval_ms

    def _unfiltered_ms(self) -> int:
        measured = self.lock_call_costs.unfiltered_s
        return 0 if measured is None else int(measured * 1000)

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
        self._context.metrics.events.labels("ready_asked_again").inc()

    @property
    def current_lock_view(self) -> LockView | None:
        """The newest shared lock list (asked for, perhaps not answered yet)."""
        return self._view

    def has_lock_view(self, read_by_ms: int) -> bool:
        """Whether :meth:`lock_view` would answer without a call of its own (a fresh list, or the
        renewal under way)."""
        view, renewing, now = self._view, self._renewing, self._context.now_ms()
        if renewing is not None and self._renewal_serves(renewing, read_by_ms, now):
            return True
        return view is not None and view.asked_ms > read_by_ms and self._serves(view, now)

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
        self._context.metrics.lock_lists.labels(asked).inc()
        return locks

    def valid_txns(self) -> ValidTxnList:
        """The metastore's transaction list (open and aborted transactions), retried like show_locks."""
        text = self._retried("get_open_txns_info", lambda metastore: metastore.valid_txn_list())
        return ValidTxnList.from_string(text)

    def _retried(self, call: str, operation: Callable[[CleanerMetastore], _Result]) -> _Result:
        retrying = Retrying(
            stop=stop_after_attempt(self._context.config.lock_check_attempts),
            wait=wait_exponential(
                multiplier=self._context.config.lock_retry_wait_s, max=10 * self._context.config.lock_retry_wait_s
            ),
            retry=retry_if_exception(lambda error: isinstance(error, MetastoreError)),
            reraise=True,
        )
        for attempt in retrying:
            with attempt:
                self._context.metrics.metastore_calls.labels(call).inc()
                return operation(self._context.metastore())
        raise AssertionError("unreachable")
