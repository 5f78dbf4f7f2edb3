"""The delete pool: lists and deletes a cleanup's directories in the cleaner's delete threads, exactly
as the check listed them (rule 9, :mod:`acidclean.consumers.remover`), and counts what it removed. It
decides nothing: the directories come from a checked plan (:mod:`acidclean.consumers.cleanup`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import TypeVar

from acidclean.consumers.outcome_batch import PreparedCleanup
from acidclean.consumers.remover import (
    CheckedCleanup,
    CheckedDirectory,
    PlannedRemoval,
    Removal,
    TablesNow,
    checked_directory,
    remove_all,
)
from acidclean.consumers.replication_check import ReplicationCheck
from acidclean.consumers.rules.readiness import lock_scope
from acidclean.consumers.scheduling import vacuum_of
from acidclean.consumers.trash_expiry import TrashExpiry
from acidclean.consumers.work import CleanerContext, StorageLocationLike
from acidclean.schemas.events import RemovedDirectory
from acidclean.shared.metastore import TableIdentity, TableInfo
from acidclean.shared.storage.trash import Disposal, PrefixTrash, disposal_for

_Item = TypeVar("_Item")
_Result = TypeVar("_Result")


class DeletePool:
    """Lists and deletes directories (a share of them per pool thread). Thread-safe."""

    def __init__(self, context: CleanerContext, delete_pool: Executor | None, delete_threads: int) -> None:
        self._context = context
        self._delete_pool = delete_pool
        self._delete_threads = delete_threads
        self._trash_expiry = TrashExpiry()
        self._replication = ReplicationCheck()

    def in_chunks(self, function: Callable[[_Item], _Result], items: Sequence[_Item]) -> list[_Result]:
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

    def listed(self, storage: StorageLocationLike, name: str) -> CheckedDirectory:
        """Directory ``name``'s files with identity and size (in the delete pool): what the deletes
        compare against (rule 9), and what ``CleanupStarted`` announces."""
        return checked_directory(storage.fs, storage.child(name), name)

    def remove_checked(self, cleanups: Sequence[PreparedCleanup]) -> dict[int, Removal]:
        """Each cleanup's deletes (by ``id()``): exactly what its check listed (rule 9)."""
        keys = [lock_scope(vacuum_of(item.processed).table) for item in cleanups]
        tables = TablesNow(self._context.metastore(), keys, self.count_metastore_call)
        planned = [self._planned_removal(item, key, tables) for item, key in zip(cleanups, keys, strict=True)]
        removals = remove_all(planned, self.in_chunks, lambda: self._context.crash.reached("mid-delete"))
        return {id(item): removal for item, removal in zip(cleanups, removals, strict=True)}

    def _planned_removal(self, item: PreparedCleanup, key: tuple[str, str], tables: TablesNow) -> PlannedRemoval:
        vacuum = vacuum_of(item.processed)
        partition = vacuum.partition
        return PlannedRemoval(
            CheckedCleanup(item.table or TableIdentity(None, None, vacuum.location), item.checked),
            item.storage.fs,
            item.storage.child,
            lambda: tables.reread(key, partition),
            {"event_id": item.processed.event_id, "table": vacuum.table, "partition": partition},
            lambda table: self._disposal(item, table),
        )

    def _disposal(self, item: PreparedCleanup, table: TableInfo) -> Disposal:
        """Hive's choice for this cleanup's files, by the table as read just before the deletes."""
        is_versioned = getattr(item.storage.fs, "versioned", None)  # S3 only: the bucket keeps versions
        versioned = bool(is_versioned(item.storage.path)) if is_versioned is not None else False
        self._replication.note(self._context.metastore(), table.db)
        now = self._context.clock.now()
        policy = self._context.config.trash
        disposal = disposal_for(item.storage.fs, policy, table.parameters, now, versioned=versioned)
        if isinstance(disposal, PrefixTrash):
            self._trash_expiry.expire(disposal.fs, disposal.root, now, policy.interval_min)
        return disposal

    def count_metastore_call(self, call: str) -> None:
        self._context.metrics.metastore_calls.labels(call).inc()

    def count_removed(self, removed: Sequence[RemovedDirectory]) -> None:
        self._context.metrics.deleted_directories.inc(len(removed))
        self._context.metrics.deleted_files.inc(sum(item.file_count for item in removed))
        self._context.metrics.deleted_bytes.inc(sum(item.bytes for item in removed))
