"""The cleanup of one vacuum, top to bottom: its claims and readiness checked, then (ready) its table
and location looked up and checked (rules 3, 4 and 8, :mod:`acidclean.consumers.rules`), the obsolete
directories computed again from the current listing, announced by a ``CleanupStarted`` the broker
must acknowledge before the first delete, deleted exactly as listed (rule 9,
:mod:`acidclean.consumers.remover`), and reported by ``CleanupDone`` (file counts, bytes). Not ready,
or anything that cannot be asked: the vacuum is parked (a delay envelope, fail closed). Anything unsafe
or invalid: dead-lettered, nothing deleted. A table dropped meanwhile: a ``CleanupDone`` with nothing
removed and the reason.

In a batch, cleanups are planned here, then announced together and deleted by :meth:`Cleanup.run_prepared`.
"""

from __future__ import annotations

import logging
from datetime import datetime

from acidclean.consumers.batch_tables import BatchTables, TableKey
from acidclean.consumers.delete_pool import DeletePool
from acidclean.consumers.logs import log
from acidclean.consumers.outcome_batch import OutcomeBatch, PreparedCleanup
from acidclean.consumers.publishing import OutcomePublisher
from acidclean.consumers.remover import Removal
from acidclean.consumers.rules.obsolete import CleanupPlan, check_claims, check_markers, plan_cleanup
from acidclean.consumers.rules.paths import check_location
from acidclean.consumers.rules.readiness import (
    COMMIT_MARGIN,
    Readiness,
    lock_scope,
    locks_missing_from_snapshot,
    not_checked,
)
from acidclean.consumers.rules.verdicts import NotYet, Refusal
from acidclean.consumers.scheduling import vacuum_of
from acidclean.consumers.shared_directory import directory_locks
from acidclean.consumers.table_check import TableLockCheck
from acidclean.consumers.vacuums_table import not_the_vacuums_table
from acidclean.consumers.work import CleanerContext, CleanerMetastore, Outcome, StorageLocationLike, Work
from acidclean.schemas.events import DelayEnvelope, VacuumCommitted
from acidclean.shared.acid.id_lists import cleaner_ids
from acidclean.shared.errors import MetastoreError, TableNotFoundError
from acidclean.shared.lock_entries import snapshot_entry
from acidclean.shared.metastore import TableIdentity, TableInfo
from acidclean.shared.storage import FileSystem, StorageError
from acidclean.shared.vacuum_marker import VACUUM_MARKER, VacuumMarker

LOGGER = logging.getLogger("acidclean.cleaner")


class Cleanup:
    """Checks a vacuum (fresh, or a due delay envelope) and cleans it once ready. Thread-safe."""

    def __init__(self, context: CleanerContext, publisher: OutcomePublisher, deletes: DeletePool) -> None:
        self._context = context
        self._publisher = publisher
        self._deletes = deletes

    def check_and_clean(self, work: Work, processed: VacuumCommitted | DelayEnvelope, locks: TableLockCheck) -> Outcome:
        """readyToClean for one vacuum: refused if its claims are invalid, parked if not ready, else cleaned."""
        refusal = check_claims(vacuum_of(processed))
        if refusal is not None:
            return self._publisher.refuse(work, processed, refusal, locks)
        readiness = locks.readiness(processed, work.fresh_read_ms)
        if not readiness.ready:
            return self._publisher.delay(processed, readiness, locks)
        return self._clean(work, processed, readiness, locks)

    def _clean(
        self, work: Work, processed: VacuumCommitted | DelayEnvelope, readiness: Readiness, locks: TableLockCheck
    ) -> Outcome:
        vacuum = vacuum_of(processed)
        db, name = lock_scope(vacuum.table)
        metastore = self._context.metastore()
        known = locks.batch.known if locks.batch is not None else None
        try:
            table = self._table_of(metastore, known, (db, name), vacuum.partition)
        except TableNotFoundError as error:
            return self._table_gone(work, processed, error, locks)
        except MetastoreError as error:
            return self._fail_closed(processed, f"metastore get_table failed: {error}", locks)
        recreated = not_the_vacuums_table(vacuum, table)  # rule 9: dropped and created again since the vacuum
        if recreated is not None:
            log(LOGGER, logging.WARNING, recreated, event_id=processed.event_id, table=vacuum.table)
            done = self._publisher.done(processed, (), recreated)
            return self._publisher.report_done(processed, done, "table_dropped", locks)
        try:
            storage = self._context.open_storage(table.location)
            real = storage.fs.real_path(storage.path)
        except StorageError as error:
            return self._fail_closed(processed, f"storage: {error}", locks)
        refusal = check_location(
            vacuum, table.location, table.location if real == storage.path else real, self._context.roots
        )
        if refusal is not None:
            return self._publisher.refuse(work, processed, refusal, locks)
        try:
            txns = locks.transactions()
        except MetastoreError as error:
            return self._fail_closed(processed, f"metastore get_open_txns_info failed: {error}", locks)
        # The write ids in the snapshot of the transaction list the plan uses (none asked on Hive 2).
        txn_list = txns.to_string()
        ids_text = known.write_ids((db, name), txn_list) if known is not None else None
        try:
            if ids_text is None:
                self._context.metrics.metastore_calls.labels("valid_write_ids").inc()
                ids_text = metastore.valid_write_ids_of([(db, name)], txn_list)[0]
            ids = cleaner_ids(metastore.kind, ids_text, vacuum.highest_write_id)
        except MetastoreError as error:
            return self._fail_closed(processed, f"metastore valid_write_ids failed: {error}", locks)
        try:
            children = storage.fs.list_dir(storage.path)
        except StorageError as error:
            if not _exists(storage.fs, storage.path):
                done = self._publisher.done(
                    processed, (), f"the location {table.location} no longer exists; nothing to remove"
                )
                return self._publisher.report_done(processed, done, "cleaned", locks)
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
            return self._publisher.refuse(work, processed, refusal, locks)
        committed_by = _committed_by(vacuum, markers)
        try:  # rule 8: the directory's other names and their locks
            shared = directory_locks(
                metastore, table, vacuum, locks.current_locks, committed_by, self._deletes.count_metastore_call
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
            return self._publisher.delay(processed, Readiness(False, held, reason), locks)
        plan = plan_cleanup(vacuum, children, ids, txns)
        if isinstance(plan, Refusal):
            return self._publisher.refuse(work, processed, plan, locks)
        if isinstance(plan, NotYet):
            return self._publisher.delay(processed, Readiness(False, readiness.locks_held, plan.reason), locks)
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
            self._context.metrics.metastore_calls.labels("get_table").inc()
            return metastore.get_table(key[0], key[1], partition)
        if partition is None:
            return fetched
        self._context.metrics.metastore_calls.labels("get_partition").inc()
        return metastore.partition_info(fetched, partition)

    def _fail_closed(self, processed: VacuumCommitted | DelayEnvelope, reason: str, locks: TableLockCheck) -> Outcome:
        """Rule 1's fail-closed answer: something could not be asked or listed, so nothing is deleted
        and the vacuum waits one more interval."""
        return self._publisher.delay(processed, not_checked(vacuum_of(processed).lock_snapshot, (), reason), locks)

    def _table_gone(
        self, work: Work, processed: VacuumCommitted | DelayEnvelope, error: TableNotFoundError, locks: TableLockCheck
    ) -> Outcome:
        """The metastore does not know the table (or partition). If its directory is gone too, it was
        dropped (Hive removes a managed table's data): report done. If the directory still exists,
        the event names a table this metastore never had: refuse it and touch nothing."""
        vacuum = vacuum_of(processed)
        refusal = check_location(vacuum, vacuum.location, vacuum.location, self._context.roots)
        if refusal is not None:
            return self._publisher.refuse(work, processed, refusal, locks)
        try:
            storage = self._context.open_storage(vacuum.location)
            exists = _exists(storage.fs, storage.path)
        except StorageError as storage_error:
            return self._fail_closed(processed, f"storage: {storage_error}", locks)
        what = f"{vacuum.table}" + (f" partition {vacuum.partition}" if vacuum.partition else "")
        if exists:
            return self._publisher.refuse(
                work,
                processed,
                Refusal(
                    "unknown_table",
                    f"the metastore has no {what} ({error}) but {vacuum.location} exists; refusing to touch a "
                    "location no table owns",
                ),
                locks,
            )
        done = self._publisher.done(
            processed,
            (),
            f"{what} was dropped (the metastore does not know it and its location is gone); nothing to remove",
        )
        return self._publisher.report_done(processed, done, "table_dropped", locks)

    def _delete_and_report(
        self,
        processed: VacuumCommitted | DelayEnvelope,
        storage: StorageLocationLike,
        plan: CleanupPlan,
        locks: TableLockCheck,
        table: TableIdentity,
    ) -> Outcome:
        if plan.delete and locks.batch is not None and not self._context.config.dry_run:
            # Measured, announced with the rest of the batch (one acknowledgement), then deleted: run_prepared.
            cleanup = PreparedCleanup(processed, storage, plan, (), locks, table)
            locks.batch.prepared.append(cleanup)
            return Outcome("cleaned", processed, deferred=True, prepared=cleanup)
        checked = self._deletes.in_chunks(lambda name: self._deletes.listed(storage, name), plan.delete)
        planned = [directory.measured() for directory in checked]
        if self._context.config.dry_run:
            return self._publisher.report_done(
                processed, self._publisher.done(processed, planned, plan.note()), "dry_run", locks
            )
        if planned:
            # Acknowledged before the first delete: if this process dies before its CleanupDone is
            # acknowledged, the restarted cleaner finds these gone and only this event says what was deleted.
            self._publisher.announce(processed, planned)
        self._context.crash.reached("before-delete")
        single = PreparedCleanup(processed, storage, plan, tuple(planned), locks, table, tuple(checked))
        removal = self._deletes.remove_checked([single])[id(single)]
        return self._after_deletes(processed, plan, removal, locks, crash=True, prepared=single)

    def _after_deletes(
        self,
        processed: VacuumCommitted | DelayEnvelope,
        plan: CleanupPlan,
        removal: Removal,
        locks: TableLockCheck,
        *,
        crash: bool = False,
        prepared: PreparedCleanup | None = None,
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
            self._deletes.count_removed(removed)
            return self._publisher.delay(
                processed,
                Readiness(False, (), "delete failed: " + "; ".join(errors)),
                locks,
            )
        if crash:
            self._context.crash.reached("after-delete")
        removed.sort(key=lambda item: item.name)
        self._deletes.count_removed(removed)
        note = "; ".join(part for part in (plan.note(), removal.note()) if part) or None
        done = self._publisher.done(processed, removed, note)
        if prepared is not None:
            self._publisher.record_ledger(done, vacuum.location, prepared, removal.files, locks)
        outcome = self._publisher.report_done(processed, done, "cleaned", locks)
        if not outcome.deferred:
            self._context.crash.reached("after-done")
        return outcome

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
            listed = self._deletes.in_chunks(lambda pair: self._deletes.listed(*pair), names)
            start = 0
            for item in prepared:
                item.checked = tuple(listed[start : start + len(item.plan.delete)])
                item.planned = tuple(directory.measured() for directory in item.checked)
                start += len(item.plan.delete)
            refused = self._publisher.announce_many(prepared)
        except BaseException as error:  # nothing was deleted: each event is retried or dead-lettered
            return {id(item): error for item in prepared}
        for item in prepared:
            if id(item) in refused:  # not announced, so not deleted: its partition is rewound
                outcomes[id(item)] = refused[id(item)]
        prepared = [item for item in prepared if id(item) not in refused]
        if not prepared:
            return outcomes
        self._context.crash.reached("before-delete")
        removals = self._deletes.remove_checked(prepared)
        self._context.crash.reached("after-delete")
        for item in prepared:
            try:
                outcomes[id(item)] = self._after_deletes(
                    item.processed, item.plan, removals[id(item)], item.locks, prepared=item
                )
            except Exception as error:
                outcomes[id(item)] = error
        return outcomes


def _committed_by(vacuum: VacuumCommitted, markers: dict[str, bytes | None]) -> datetime:
    """A time by which the vacuum's rename had certainly happened: its snapshot time, or its markers'
    time if later (an event cannot forge the marker the vacuum wrote), plus the commit margin."""
    latest = vacuum.occurred_at
    for data in markers.values():
        written = VacuumMarker.parse(data).written() if data else None
        if written is not None and written > latest:
            latest = written
    return latest + COMMIT_MARGIN


def _exists(fs: FileSystem, path: str) -> bool:
    try:
        return fs.exists(path)
    except OSError:
        return True  # cannot tell: assume it exists, which never leads to reporting a drop
