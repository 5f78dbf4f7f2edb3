"""The remover: measures and deletes a cleanup's directories through the delete pool, and counts
what it removed. It decides nothing: the directories come from a checked plan
(:mod:`acidclean.consumers.cleanup`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import TypeVar

from acidclean.consumers.work import CleanerContext, StorageLocationLike
from acidclean.schemas.events import RemovedDirectory
from acidclean.shared.errors import AcidCleanError
from acidclean.shared.filesystem import StorageError, TreeSize

_Item = TypeVar("_Item")
_Result = TypeVar("_Result")


class Remover:
    """Deletes directories (a share of them per pool thread), measuring them first. Thread-safe."""

    def __init__(self, context: CleanerContext, delete_pool: Executor | None, delete_threads: int) -> None:
        self._context = context
        self._delete_pool = delete_pool
        self._delete_threads = delete_threads

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

    def size(self, storage: StorageLocationLike, name: str) -> TreeSize:
        try:
            return storage.fs.tree_size(storage.child(name))
        except (OSError, AcidCleanError):
            return TreeSize(0, 0)

    def measure(self, storage: StorageLocationLike, names: Sequence[str]) -> list[RemovedDirectory]:
        """File count and bytes of each directory (in the delete pool: a big tree takes a while to walk)."""
        sizes = self.in_chunks(lambda name: self.size(storage, name), names)
        return [
            RemovedDirectory(name=name, file_count=size.files, bytes=size.bytes)
            for name, size in zip(names, sizes, strict=True)
        ]

    def remove(self, storage: StorageLocationLike, directory: RemovedDirectory) -> RemovedDirectory:
        storage.fs.delete_dir(storage.child(directory.name))
        self._context.crash.reached("mid-delete")
        return directory

    def try_remove(self, storage: StorageLocationLike, directory: RemovedDirectory) -> RemovedDirectory | str:
        try:
            return self.remove(storage, directory)
        except (StorageError, OSError) as error:
            return f"{directory.name}: {error}"

    def count_removed(self, removed: Sequence[RemovedDirectory]) -> None:
        self._context.metrics.deleted_directories.inc(len(removed))
        self._context.metrics.deleted_files.inc(sum(item.file_count for item in removed))
        self._context.metrics.deleted_bytes.inc(sum(item.bytes for item in removed))
