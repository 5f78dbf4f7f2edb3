"""Delete exactly what the check listed (docs/design.md section 7, rule 9), like Hive's ``FSRemover``.

Between the check of a cleanup and its deletes the cleaner waits for the broker to acknowledge
``CleanupStarted``, which may take seconds. Meanwhile the table may be dropped and created again
under the same name: same location, and, as write ids restart at 1, the same directory names. So
names are not enough. At the check the cleaner records the table's identity and every file of each
obsolete directory (:func:`checked_directory`); just before deleting, :func:`confirm_table` reads
the table again from the metastore (one call), and :func:`remove_directory` lists each directory
again and deletes, file by file, only the files whose identity and size are those listed at the
check, then the directory only if nothing is left in it. A table that is not the same table deletes
nothing. Whatever differs is left where it is and reported (:class:`Removal`), never retried: a
file that was not there at the check is not this vacuum's to delete.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from acidclean.consumers.logs import log
from acidclean.schemas.events import RemovedDirectory
from acidclean.shared.errors import AcidCleanError, MetastoreError, TableNotFoundError
from acidclean.shared.metastore import TableIdentity, TableInfo, table_difference
from acidclean.shared.storage import FileSystem, ListedFile, StorageError, file_difference
from acidclean.shared.storage.trash import Delete, Disposal

LOGGER = logging.getLogger("acidclean.cleaner")


@dataclass(frozen=True)
class CheckedDirectory:
    """An obsolete directory and its files as listed at the check."""

    name: str
    files: tuple[ListedFile, ...]

    def measured(self) -> RemovedDirectory:
        """What ``CleanupStarted`` announces for it."""
        return RemovedDirectory(name=self.name, file_count=len(self.files), bytes=sum(f.size for f in self.files))


@dataclass(frozen=True)
class CheckedCleanup:
    """A cleanup as checked: the table it was checked against and its obsolete directories."""

    table: TableIdentity
    directories: tuple[CheckedDirectory, ...]


@dataclass(frozen=True)
class LeftBehind:
    """Something the remover did not delete, and why."""

    directory: str
    path: str | None  # a file under ``directory``; None for the directory itself
    reason: str


@dataclass(frozen=True)
class RemovedFile:
    """One file a cleanup removed, as its ledger records it: where it was and where it went
    (``trash:<path>``, ``version:<id>`` or ``gone``, :mod:`acidclean.shared.storage.trash`)."""

    directory: str
    path: str  # under ``directory``
    size: int
    identity: str
    went: str


@dataclass(frozen=True)
class DirectoryRemoval:
    """One directory's deletes: what went (None if nothing did), what stayed, a storage error."""

    removed: RemovedDirectory | None
    left: tuple[LeftBehind, ...] = ()
    error: str | None = None
    files: tuple[RemovedFile, ...] = ()


@dataclass(frozen=True)
class Removal:
    """The result of one cleanup's deletes."""

    removed: tuple[RemovedDirectory, ...]
    left: tuple[LeftBehind, ...]
    errors: tuple[str, ...]  # storage or metastore failures: the cleanup is checked again later
    files: tuple[RemovedFile, ...] = ()  # the ledger: each file removed and where it went

    @property
    def bytes(self) -> int:
        return sum(directory.bytes for directory in self.removed)

    def note(self) -> str | None:
        """One line on what was left, for ``CleanupDone.note``."""
        if not self.left:
            return None
        shown = "; ".join(_describe(item) for item in self.left[:5])
        more = f" (and {len(self.left) - 5} more)" if len(self.left) > 5 else ""
        return f"left {len(self.left)} item(s) that changed since the check: {shown}{more}"


def checked_directory(fs: FileSystem, path: str, name: str) -> CheckedDirectory:
    """The files of directory ``name`` (at ``path``) now, to be compared just before the delete.

    A listing that fails records no file, so nothing of that directory will be deleted."""
    try:
        return CheckedDirectory(name, tuple(fs.list_files(path)))
    except (OSError, AcidCleanError):
        return CheckedDirectory(name, ())


def confirm_table(checked: TableIdentity, reread: Callable[[], TableInfo]) -> str | None:
    """Why the table is no longer the one checked, or None when it is. Raises ``MetastoreError``
    when the metastore cannot tell (then nothing is deleted and the cleanup is checked again)."""
    try:
        now = reread()
    except TableNotFoundError as error:
        return f"the table no longer exists ({error})"
    difference = table_difference(checked, TableIdentity.of(now))
    return None if difference is None else f"the table is not the one checked: {difference}"


def remove_directory(
    fs: FileSystem, path: str, checked: CheckedDirectory, disposal: Disposal | None = None
) -> DirectoryRemoval:
    """Delete (or move to the trash, by ``disposal``), under ``path``, the files listed at the check
    that are still the same files; then the directory, when nothing is left in it."""
    try:
        now = fs.list_files(path)
    except (OSError, AcidCleanError) as error:
        return DirectoryRemoval(None, error=f"{checked.name}: {error}")
    listed = {item.path: item for item in checked.files}
    doomed: list[ListedFile] = []
    left: list[LeftBehind] = []
    for item in now:
        reason = file_difference(listed.get(item.path), item)
        if reason is None:
            doomed.append(item)
        else:
            left.append(LeftBehind(checked.name, item.path, reason))
    try:
        went = (disposal or Delete(fs)).dispose(path, doomed)
        if not left and not fs.delete_empty_dir(path):
            left.append(LeftBehind(checked.name, None, "a file appeared in it while its files were deleted"))
    except (StorageError, OSError) as error:
        return DirectoryRemoval(None, tuple(left), f"{checked.name}: {error}")
    removed = None
    if doomed or not left:
        removed = RemovedDirectory(name=checked.name, file_count=len(doomed), bytes=sum(f.size for f in doomed))
    files = tuple(
        RemovedFile(checked.name, item.path, item.size, item.identity, where)
        for item, where in zip(doomed, went, strict=True)
    )
    return DirectoryRemoval(removed, tuple(left), files=files)


def not_the_same_table(cleanup: CheckedCleanup, reason: str) -> Removal:
    """A cleanup whose table changed: every directory stays."""
    return Removal((), tuple(LeftBehind(d.name, None, reason) for d in cleanup.directories), ())


def removal_of(results: Sequence[DirectoryRemoval]) -> Removal:
    return Removal(
        tuple(result.removed for result in results if result.removed is not None),
        tuple(item for result in results for item in result.left),
        tuple(result.error for result in results if result.error is not None),
        tuple(item for result in results for item in result.files),
    )


def metastore_failure(error: MetastoreError) -> Removal:
    return Removal((), (), (f"metastore get_table before the delete failed: {error}",))


def log_left(removal: Removal, **fields: object) -> None:
    """One log line when anything was left (rule 9's refusals are rare and worth an operator's look)."""
    if removal.left:
        log(
            LOGGER,
            logging.WARNING,
            "left what changed since the check (rule 9)",
            left=[_describe(item) for item in removal.left],
            removed=[directory.name for directory in removal.removed],
            bytes=removal.bytes,
            **fields,
        )


class TableSource(Protocol):
    """The metastore calls the confirmation makes."""

    def get_tables(self, db: str, tables: Sequence[str]) -> dict[str, TableInfo]: ...

    def get_table(self, db: str, table: str, partition: str | None = None) -> TableInfo: ...

    def partition_info(self, table: TableInfo, partition: str | None) -> TableInfo: ...


class TablesNow:
    """The tables of a batch of cleanups as the metastore has them now: one ``get_tables`` per
    database for all of them (asked at the first :meth:`reread`), one more call per partition; when
    the metastore refuses ``get_tables``, one ``get_table`` per cleanup, as the check does then."""

    def __init__(
        self, source: TableSource, keys: Sequence[tuple[str, str]], count: Callable[[str], None] = lambda call: None
    ) -> None:
        self._source = source
        self._keys = keys
        self._count = count  # each metastore call made, by name (the cleaner's metrics)
        self._found: dict[tuple[str, str], TableInfo] | MetastoreError | None = None

    def reread(self, key: tuple[str, str], partition: str | None) -> TableInfo:
        """Raises ``TableNotFoundError`` (no such table now) or ``MetastoreError``."""
        if self._found is None:
            self._found = self._ask()
        if isinstance(self._found, MetastoreError):
            self._count("get_table")
            return self._source.get_table(key[0], key[1], partition)
        table = self._found.get((key[0], key[1].lower()))
        if table is None:
            raise TableNotFoundError(f"{key[0]}.{key[1]}: no such table")
        if partition is None:
            return table
        self._count("get_partition")
        return self._source.partition_info(table, partition)

    def _ask(self) -> dict[tuple[str, str], TableInfo] | MetastoreError:
        by_db: dict[str, set[str]] = {}
        for db, name in self._keys:
            by_db.setdefault(db, set()).add(name)
        found: dict[tuple[str, str], TableInfo] = {}
        try:
            for db, names in by_db.items():
                self._count("get_tables")
                found.update({(db, name): table for name, table in self._source.get_tables(db, sorted(names)).items()})
        except MetastoreError as error:
            return error
        return found


@dataclass(frozen=True)
class PlannedRemoval:
    """A checked cleanup ready to delete: where its directories are and how to read its table again."""

    cleanup: CheckedCleanup
    fs: FileSystem
    path_of: Callable[[str], str]  # a directory name -> its path on ``fs``
    reread: Callable[[], TableInfo]  # the table (or partition) from the metastore now
    log_fields: dict[str, object]
    # How the files go, by the table as read just before the deletes (auto.purge): Hive's trash semantics.
    disposal: Callable[[TableInfo], Disposal] | None = None


InPool = Callable[
    [
        Callable[[tuple[PlannedRemoval, CheckedDirectory]], DirectoryRemoval],
        list[tuple[PlannedRemoval, CheckedDirectory]],
    ],
    list[DirectoryRemoval],
]


def remove_all(
    planned: Sequence[PlannedRemoval], in_pool: InPool, after_directory: Callable[[], None]
) -> list[Removal]:
    """Each cleanup's deletes, in order of ``planned``: its table confirmed (one metastore call each,
    in turn), then the directories of the confirmed ones through ``in_pool`` (deletes of different
    tables overlap); ``after_directory`` runs after each directory (the crash points of rule 5)."""
    removals: dict[int, Removal] = {}
    confirmed: list[PlannedRemoval] = []
    disposals: dict[int, Disposal | None] = {}
    for item in planned:
        if not item.cleanup.directories:
            removals[id(item)] = Removal((), (), ())  # nothing to delete: no call to confirm the table
            continue
        seen: list[TableInfo] = []
        try:
            reason = confirm_table(item.cleanup.table, partial(_kept, seen, item.reread))
        except MetastoreError as error:
            removals[id(item)] = metastore_failure(error)
            continue
        if reason is None:
            try:
                disposals[id(item)] = None if item.disposal is None else item.disposal(seen[-1])
            except (StorageError, OSError) as error:  # e.g. a bucket's versioning could not be read
                removals[id(item)] = Removal((), (), (f"choosing where the files go failed: {error}",))
                continue
            confirmed.append(item)
        else:
            removals[id(item)] = not_the_same_table(item.cleanup, reason)

    def remove(pair: tuple[PlannedRemoval, CheckedDirectory]) -> DirectoryRemoval:
        result = remove_directory(pair[0].fs, pair[0].path_of(pair[1].name), pair[1], disposals[id(pair[0])])
        after_directory()
        return result

    pairs = [(item, directory) for item in confirmed for directory in item.cleanup.directories]
    results = in_pool(remove, pairs)
    for item in confirmed:
        removals[id(item)] = removal_of(
            [result for (owner, _), result in zip(pairs, results, strict=True) if owner is item]
        )
    for item in planned:
        log_left(removals[id(item)], **item.log_fields)
    return [removals[id(item)] for item in planned]


def _kept(seen: list[TableInfo], reread: Callable[[], TableInfo]) -> TableInfo:
    """``reread()``, kept in ``seen``: the table as read just before the deletes decides their disposal."""
    table = reread()
    seen.append(table)
    return table


def _describe(item: LeftBehind) -> str:
    where = item.directory if item.path is None else f"{item.directory}/{item.path}"
    return f"{where}: {item.reason}"
