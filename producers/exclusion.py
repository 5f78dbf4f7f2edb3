"""One vacuum per table or partition at a time, across hosts and restarts (issue 10, build item 5).

Two vacuums of one partition would race for the same target names, and the loser's commit marker
and outbox draft would then fail every later vacuum on its host. Hive's compaction queue refuses a
second compaction of a partition; acidclean has no queue, so it uses the metastore's lock manager:
before it plans, a vacuum takes an EXCLUSIVE lock on a resource only vacuums lock,
``<db>.<table>__acidclean_vacuum`` with the partition's name (the table itself for an unpartitioned
table). Readers lock the real table, so the lock never waits for a reader nor holds one up, never
appears in a vacuum's lock snapshot (that lists the real table's locks) and never holds a cleanup
(the lock belongs to no transaction). Different partitions of one table have different resources.

The lock is heartbeated while the vacuum runs and released when it ends, however it ends. A vacuum
that was killed leaves its lock behind; the metastore's housekeeping times it out (``hive.txn.timeout``,
300 s by default), and a lock whose last heartbeat is older than ``vacuum_lock_stale_s`` is released by
the next vacuum that finds it, for metastores that run no housekeeping.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from acidclean.shared.acid.partition_names import lock_covers_partition
from acidclean.shared.errors import MetastoreError, VacuumBusyError
from acidclean.shared.metastore import LockInfo, LockRequestComponent, LockType, Metastore, Operation

LOGGER = logging.getLogger("acidclean.vacuum")

VACUUM_LOCK_SUFFIX = "__acidclean_vacuum"


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


def _holders(metastore: Metastore, components: Sequence[LockRequestComponent], own: int) -> list[LockInfo]:
    found: dict[int, LockInfo] = {}
    for db, table in dict.fromkeys((component.db, component.table) for component in components):
        for lock in metastore.show_locks(db, table):
            if (
                lock.lock_id != own
                and lock.state == "ACQUIRED"
                and (lock.table or "").lower() == (table or "").lower()
                and any(
                    (component.table or "").lower() == (table or "").lower()
                    and lock_covers_partition(lock.partition, component.partition)
                    for component in components
                )
            ):
                found.setdefault(lock.lock_id, lock)
    return list(found.values())


def _describe(lock: LockInfo) -> str:
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(lock.acquired_at_ms / 1000)) if lock.acquired_at_ms else "?"
    return f"lock {lock.lock_id} by {lock.user}@{lock.host} since {since}"


def _release_stale(metastore: Metastore, holders: list[LockInfo], stale_s: float, where: str) -> bool:
    """Release holders whose last heartbeat is older than ``stale_s``; True if any was released."""
    now_ms = time.time() * 1000
    released = False
    for lock in holders:
        beat = lock.last_heartbeat_ms or lock.acquired_at_ms or 0
        if now_ms - beat > stale_s * 1000:
            LOGGER.warning(
                "releasing the vacuum lock of %s: %s sent no heartbeat for %.0f s",
                where,
                _describe(lock),
                (now_ms - beat) / 1000,
            )
            try:
                metastore.unlock(lock.lock_id)
                released = True
            except MetastoreError as error:
                LOGGER.warning("could not release stale lock %s: %s", lock.lock_id, error)
    return released


def _acquire(
    metastore: Metastore, components: Sequence[LockRequestComponent], settings: ExclusionSettings, where: str
) -> int:
    result = metastore.lock(components)
    deadline = time.monotonic() + settings.wait_s
    stale_checked = False
    while not result.acquired:
        if result.state != "WAITING":
            raise MetastoreError(f"the vacuum lock of {where} was not granted: state {result.state}")
        holders = _holders(metastore, components, result.lock_id)
        if not stale_checked and _release_stale(metastore, holders, settings.stale_s, where):
            stale_checked = True
        elif time.monotonic() > deadline:
            metastore.unlock(result.lock_id)  # leave nothing behind
            who = "; ".join(_describe(lock) for lock in holders) or "another vacuum"
            raise VacuumBusyError(
                f"another vacuum of {where} is running ({who}): only one vacuum per table or partition runs "
                "at a time; try again when it has finished"
            )
        time.sleep(settings.poll_s)
        result = metastore.check_lock(result.lock_id)
    return result.lock_id


@contextmanager
def exclusive_vacuum(
    metastore: Metastore,
    db: str,
    table: str,
    partition: str | None,
    settings: ExclusionSettings | None = None,
    also: Sequence[LockRequestComponent] = (),
    where_also: str = "",
) -> Iterator[int]:
    """Hold the vacuum lock of ``db.table`` (``partition``), and ``also`` in the same request (the other
    names of its directory, :mod:`acidclean.producers.shared_locations`), for the ``with`` block; yields
    its id. Raises :class:`VacuumBusyError` (a refusal) naming the holder when another vacuum keeps it past the wait."""
    settings = settings or ExclusionSettings()
    where = f"{db}.{table}" + (f" partition {partition}" if partition else "") + where_also
    lock_id = _acquire(metastore, [vacuum_lock_component(db, table, partition), *also], settings, where)
    stop = threading.Event()

    # Beat well within the stale limit, or a live vacuum's lock would look dead to the next one.
    every_s = min(settings.heartbeat_s, settings.stale_s / 3)

    def beat() -> None:
        while not stop.wait(every_s):
            try:
                metastore.heartbeat(lock_id=lock_id)
            except MetastoreError as error:
                LOGGER.warning("heartbeat of the vacuum lock %s failed: %s", lock_id, error)

    heartbeat = threading.Thread(target=beat, name="vacuum-lock-heartbeat", daemon=True)
    heartbeat.start()
    try:
        yield lock_id
    finally:
        stop.set()
        heartbeat.join(5)
        try:
            metastore.unlock(lock_id)
        except MetastoreError as error:  # it times out in the metastore; the next vacuum may release it
            LOGGER.warning("could not release the vacuum lock %s of %s: %s", lock_id, where, error)
