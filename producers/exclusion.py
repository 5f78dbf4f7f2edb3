"""One vacuum per table or partition at a time, across hosts and restarts (issue 10, build item 5).

Two vacuums of one partition would race for the same target names, and the loser's commit marker
and outbox draft would then fail every later vacuum on its host. Hive's compaction queue refuses a
second compaction of a partition; acidclean has no queue, so it uses the metastore's lock manager:
before it plans, a vacuum takes an EXCLUSIVE lock on a resource only vacuums lock,
``<db>.<table>__acidclean_vacuum`` with the partition's name (the table itself for an unpartitioned
table). Readers lock the real table, so the lock never waits for a reader nor holds one up, never
appears in a vacuum's lock snapshot (that lists the real table's locks) and never holds a cleanup
(the lock belongs to no transaction). Different partitions of one table have different resources,
unless they share a directory: a vacuum then locks every name of it in one request (rule 8).

The lock is heartbeated while the vacuum runs and released when it ends, however it ends. A vacuum
that was killed leaves its lock behind; the metastore's housekeeping times it out (``hive.txn.timeout``,
300 s by default), and a lock silent for longer than ``vacuum_lock_stale_s`` by one clock (the
metastore's, :mod:`.takeover`) is released by the next vacuum that finds it, for metastores that run no
housekeeping. A vacuum that was only paused may then wake up without its lock: the heartbeat records
the loss, and :meth:`VacuumLock.ensure_held`, the last step before the commit, refuses to commit
(fencing, docs/design.md section 7, rule 7).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from acidclean.producers.takeover import TakeoverJudge
from acidclean.shared.acid.partition_names import lock_covers_partition
from acidclean.shared.errors import MetastoreError, VacuumBusyError, VacuumFencedError
from acidclean.shared.metastore import LockInfo, LockRequestComponent, LockType, Metastore, Operation

LOGGER = logging.getLogger("acidclean.vacuum")

VACUUM_LOCK_SUFFIX = "__acidclean_vacuum"
# A vacuum that commits through a transaction T registers T here (a read lock inside T, which blocks
# nobody), so the vacuum that takes over its stale lock can abort T: commit_txn of an aborted T fails,
# which closes the transaction commit's window between the last lock check and the commit.
VACUUM_TXN_SUFFIX = "__acidclean_vacuum_txn"


@dataclass(frozen=True)
class ExclusionSettings:
    wait_s: float = 10.0  # how long to wait for another vacuum of the same partition to finish
    stale_s: float = 300.0  # a holder silent this long is a dead vacuum: its lock is released
    heartbeat_s: float = 30.0
    poll_s: float = 0.2


def vacuum_lock_component(db: str, table: str, partition: str | None) -> LockRequestComponent:
    """The lock only vacuums of ``db.table`` (``partition``) take."""
    return LockRequestComponent(
        db,
        f"{table}{VACUUM_LOCK_SUFFIX}",
        partition,
        lock_type=LockType.EXCLUSIVE,
        operation=Operation.NO_TXN,
        transactional=False,
    )


def vacuum_txn_component(db: str, table: str, partition: str | None) -> LockRequestComponent:
    """The resource a vacuum's transaction T is registered on (see ``VACUUM_TXN_SUFFIX``)."""
    return LockRequestComponent(
        db, f"{table}{VACUUM_TXN_SUFFIX}", partition, LockType.SHARED_READ, Operation.SELECT, transactional=False
    )


def register_vacuum_txn(metastore: Metastore, held: VacuumLock, txn_id: int) -> None:
    """Register transaction ``txn_id`` as the running vacuum's, on every name its vacuum lock holds,
    so that a takeover through any of them aborts it (only the holder of a name's vacuum lock can
    have registered on that name). Best effort: without it the last lock check still fences the
    commit, with the window it leaves."""
    components = [
        vacuum_txn_component(c.db, (c.table or "").removesuffix(VACUUM_LOCK_SUFFIX), c.partition)
        for c in held.components
    ]
    try:
        metastore.lock(components, txn_id=txn_id)
    except MetastoreError as error:
        LOGGER.warning("could not register the vacuum's transaction %s for takeovers: %s", txn_id, error)


def _abort_registered_txns(metastore: Metastore, component: LockRequestComponent, where: str) -> None:
    """Abort the transactions the vacuum being taken over registered (before its lock is released, so
    no other vacuum can have registered one meanwhile)."""
    resource = f"{component.table}".removesuffix(VACUUM_LOCK_SUFFIX) + VACUUM_TXN_SUFFIX
    for lock in metastore.show_locks(component.db, resource):
        if lock.txn_id and lock_covers_partition(lock.partition, component.partition):
            LOGGER.warning("aborting transaction %s of the vacuum of %s being taken over", lock.txn_id, where)
            try:
                metastore.abort_txn(lock.txn_id)
            except MetastoreError as error:  # already aborted or committed: nothing to fence
                LOGGER.warning("could not abort transaction %s: %s", lock.txn_id, error)


def _holders(metastore: Metastore, component: LockRequestComponent, own: int) -> list[LockInfo]:
    """The locks other than ``own`` that hold ``component``'s resource."""
    return [
        lock
        for lock in metastore.show_locks(component.db, component.table)
        if lock.lock_id != own
        and lock.state == "ACQUIRED"
        and (lock.table or "").lower() == (component.table or "").lower()
        and lock_covers_partition(lock.partition, component.partition)
    ]


def _all_holders(metastore: Metastore, components: Sequence[LockRequestComponent], own: int) -> list[LockInfo]:
    """The locks other than ``own`` holding any of ``components``, one per lock id."""
    found: dict[int, LockInfo] = {}
    for component in components:
        for lock in _holders(metastore, component, own):
            found.setdefault(lock.lock_id, lock)
    return list(found.values())


def _describe(lock: LockInfo) -> str:
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(lock.acquired_at_ms / 1000)) if lock.acquired_at_ms else "?"
    return f"lock {lock.lock_id} by {lock.user}@{lock.host} since {since}"


def _metastore_now_ms(metastore: Metastore, component: LockRequestComponent, own: int) -> int | None:
    """A time the metastore stamped just now: its heartbeat stamp of our own waiting lock, renewed.
    None when it gives none (the taker's monotonic clock then judges, :class:`TakeoverJudge`)."""
    try:
        metastore.heartbeat(lock_id=own)
        locks = metastore.show_locks(component.db, component.table)
    except MetastoreError as error:
        LOGGER.debug("no metastore time from our waiting lock %s: %s", own, error)
        return None
    return next((lock.last_heartbeat_ms or None for lock in locks if lock.lock_id == own), None)


def _release_stale(
    metastore: Metastore, components: Sequence[LockRequestComponent], own: int, judge: TakeoverJudge, where: str
) -> bool:
    """Release holders silent for longer than the stale limit by one clock (:mod:`.takeover`); True if
    any was released."""
    released = False
    now_ms = _metastore_now_ms(metastore, components[0], own)
    for component in components:
        released = _release_stale_of(metastore, component, own, judge, now_ms, where) or released
    return released


def _release_stale_of(
    metastore: Metastore,
    component: LockRequestComponent,
    own: int,
    judge: TakeoverJudge,
    now_ms: int | None,
    where: str,
) -> bool:
    holders = _holders(metastore, component, own)
    released = False
    for silence in judge.stale(holders, now_ms, time.monotonic()):
        LOGGER.warning(
            "releasing the vacuum lock of %s: %s sent no heartbeat for %.0f s (by the %s clock)",
            where,
            _describe(silence.lock),
            silence.seconds,
            silence.clock,
        )
        try:
            _abort_registered_txns(metastore, component, where)
            metastore.unlock(silence.lock.lock_id)
            released = True
        except MetastoreError as error:
            LOGGER.warning("could not release stale lock %s: %s", silence.lock.lock_id, error)
    return released


def _acquire(
    metastore: Metastore, components: Sequence[LockRequestComponent], settings: ExclusionSettings, where: str
) -> int:
    result = metastore.lock(components)
    deadline = time.monotonic() + settings.wait_s
    judge = TakeoverJudge(settings.stale_s)
    while not result.acquired:
        if result.state != "WAITING":
            raise MetastoreError(f"the vacuum lock of {where} was not granted: state {result.state}")
        if not _release_stale(metastore, components, result.lock_id, judge, where) and time.monotonic() > deadline:
            holders = _all_holders(metastore, components, result.lock_id)
            metastore.unlock(result.lock_id)  # leave nothing behind
            who = "; ".join(_describe(lock) for lock in holders) or "another vacuum"
            raise VacuumBusyError(
                f"another vacuum of {where} is running ({who}): only one vacuum per table or partition runs "
                "at a time; try again when it has finished"
            )
        time.sleep(settings.poll_s)
        result = metastore.check_lock(result.lock_id)
    return result.lock_id


def _lock_is_gone(error: MetastoreError) -> bool:
    """The metastore says the lock does not exist (released by a takeover, or timed out)."""
    text = str(error).lower()
    return "no such lock" in text or "nosuchlock" in text


class VacuumLock:
    """A held vacuum lock, and the fence of the vacuum's commit: :meth:`ensure_held` is the last step
    before a vacuum makes its output visible (docs/design.md section 7, rule 7)."""

    def __init__(
        self, metastore: Metastore, lock_id: int, where: str, components: Sequence[LockRequestComponent] = ()
    ) -> None:
        self.metastore = metastore
        self.lock_id = lock_id
        self.where = where
        self.components = tuple(components)  # every name the lock holds: the vacuum's own first
        self._lost: str | None = None

    @property
    def lost(self) -> str | None:
        """Why the lock is known to be gone, or None while it is not known to be."""
        return self._lost

    def record_loss(self, reason: str) -> None:
        if self._lost is None:
            self._lost = reason
            LOGGER.error(
                "the vacuum lock %s of %s is gone (%s): this vacuum will not commit", self.lock_id, self.where, reason
            )

    def beat(self) -> None:
        """Renew the lock; a metastore that says it is gone makes the loss permanent."""
        try:
            self.metastore.heartbeat(lock_id=self.lock_id)
        except MetastoreError as error:
            if _lock_is_gone(error):
                self.record_loss(str(error))
            raise

    def metastore_now_ms(self) -> int | None:
        """A time the metastore stamped just now (this lock's heartbeat), or None when it gives none."""
        return _metastore_now_ms(self.metastore, self.components[0], self.lock_id) if self.components else None

    def ensure_held(self, before: str) -> None:
        """Raise :class:`VacuumFencedError` unless the lock is still this vacuum's, confirmed by the
        metastore now (a heartbeat: lock ids are never reused, so an answer means it is ours and held).
        Fails closed: a lock that cannot be confirmed counts as lost."""
        if self._lost is None:
            try:
                self.beat()
            except MetastoreError as error:
                if self._lost is None:
                    raise VacuumFencedError(
                        f"the vacuum of {self.where} did not {before}: its vacuum lock {self.lock_id} could not be "
                        f"confirmed ({error}); nothing was made visible, try again"
                    ) from error
        if self._lost is not None:
            raise VacuumFencedError(
                f"the vacuum of {self.where} did not {before}: it lost its vacuum lock {self.lock_id} "
                f"({self._lost}), so another vacuum may have taken over; nothing was made visible"
            )


@contextmanager
def exclusive_vacuum(
    metastore: Metastore,
    db: str,
    table: str,
    partition: str | None,
    settings: ExclusionSettings | None = None,
    also: Sequence[LockRequestComponent] = (),
    where_also: str = "",
) -> Iterator[VacuumLock]:
    """Hold the vacuum lock of ``db.table`` (``partition``), and ``also`` in the same request (the other
    names of its directory, :mod:`acidclean.producers.shared_locations`), for the ``with`` block;
    yields it (its :meth:`VacuumLock.ensure_held` fences the commit). Raises :class:`VacuumBusyError`
    (a refusal) naming the holder when another vacuum keeps it past the wait."""
    settings = settings or ExclusionSettings()
    where = f"{db}.{table}" + (f" partition {partition}" if partition else "") + where_also
    components = [vacuum_lock_component(db, table, partition), *also]
    lock_id = _acquire(metastore, components, settings, where)
    held = VacuumLock(metastore, lock_id, where, components)
    stop = threading.Event()

    # Beat well within the stale limit, or a live vacuum's lock would look dead to the next one.
    every_s = min(settings.heartbeat_s, settings.stale_s / 3)

    def beat() -> None:
        while not stop.wait(every_s) and held.lost is None:
            try:
                held.beat()
            except MetastoreError as error:
                if held.lost is None:
                    LOGGER.warning("heartbeat of the vacuum lock %s failed: %s", held.lock_id, error)

    heartbeat = threading.Thread(target=beat, name="vacuum-lock-heartbeat", daemon=True)
    heartbeat.start()
    try:
        yield held
    finally:
        stop.set()
        heartbeat.join(5)
        if held.lost is None:
            try:
                metastore.unlock(held.lock_id)
            except MetastoreError as error:  # it times out in the metastore; the next vacuum may release it
                LOGGER.warning("could not release the vacuum lock %s of %s: %s", held.lock_id, where, error)
