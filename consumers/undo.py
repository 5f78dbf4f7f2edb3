"""``acidclean undo``: put the files of one cleanup back from the trash, by its ledger
(:mod:`acidclean.consumers.ledger`), never over anything and never into another table.

:func:`plan_undo` decides, file by file, before anything moves: the table must be the same table the
cleaner confirmed before deleting (rule 9's identity: id, or create time and location), else nothing
is put back; a directory that exists again is left alone whole (something wrote it since: a file
put back beside new ones would mix two histories); a file already deleted outright (``gone``: the
table's ``auto.purge``, or no trash) cannot be put back; a trash file that is no longer there (the
trash was emptied or expired) or is another file now (size or identity), or an S3 version no longer
kept, is refused. :func:`apply_undo` then renames each planned file back (an S3 version: copies it to
its key), refusing any whose place was taken meanwhile (an HDFS rename is refused by the NameNode
when the target exists; an S3 copy is checked just before).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import dataclass

from acidclean.consumers.ledger import Ledger
from acidclean.consumers.remover import RemovedFile
from acidclean.shared.errors import TableNotFoundError
from acidclean.shared.metastore import TableIdentity, TableInfo, table_difference
from acidclean.shared.storage import FileSystem, ListedFile, StorageError
from acidclean.shared.storage.trash import GONE


@dataclass(frozen=True)
class Restore:
    """A file to rename from the trash back to where the cleanup took it from."""

    file: RemovedFile
    source: str
    target: str


@dataclass(frozen=True)
class Refused:
    file: RemovedFile
    reason: str


@dataclass(frozen=True)
class UndoPlan:
    ledger: Ledger
    restores: tuple[Restore, ...]
    refused: tuple[Refused, ...]
    table_refusal: str | None = None  # the table is not the same table: nothing is put back

    def summary(self) -> str:
        """One line: what would be (or was) put back, and why the rest is not."""
        if self.table_refusal is not None:
            return f"nothing put back: {self.table_refusal}"
        restored = sum(item.file.size for item in self.restores)
        line = f"{len(self.restores)} file(s), {restored} bytes to put back"
        if self.refused:
            reasons = sorted({item.reason for item in self.refused})
            line += f"; {len(self.refused)} refused: " + "; ".join(reasons[:3])
        return line


@dataclass(frozen=True)
class UndoResult:
    restored: tuple[Restore, ...]
    refused: tuple[Refused, ...]


def table_refusal(ledger: Ledger, reread: Callable[[], TableInfo]) -> str | None:
    """Why the table now is not the one the cleanup removed files from, or None when it is."""
    try:
        now = reread()
    except TableNotFoundError as error:
        return f"the table no longer exists ({error}); nothing to put back into"
    difference = table_difference(ledger.identity, TableIdentity.of(now))
    if difference is None:
        return None
    return f"the table is not the one cleaned ({difference}); undo never puts files into another table"


def plan_undo(ledger: Ledger, fs: FileSystem, location_path: str, reread: Callable[[], TableInfo]) -> UndoPlan:
    """What undoing ``ledger`` would do now (nothing moves). ``location_path``: the location's path on ``fs``."""
    refusal = table_refusal(ledger, reread)
    if refusal is not None:
        return UndoPlan(ledger, (), tuple(Refused(item, refusal) for item in ledger.files), refusal)
    root = location_path.rstrip("/")
    directories_back = {item.directory for item in ledger.files if fs.exists(f"{root}/{item.directory}")}
    trash_listings: dict[str, dict[str, ListedFile]] = {}
    restores: list[Restore] = []
    refused: list[Refused] = []
    for item in ledger.files:
        target = f"{root}/{item.directory}/{item.path}"
        reason = _why_not(item, target, directories_back, fs, trash_listings)
        if reason is None:
            restores.append(Restore(item, item.went.removeprefix("trash:"), target))  # or "version:<id>"
        else:
            refused.append(Refused(item, reason))
    return UndoPlan(ledger, tuple(restores), tuple(refused))


def _why_not(
    item: RemovedFile,
    target: str,
    directories_back: set[str],
    fs: FileSystem,
    trash_listings: dict[str, dict[str, ListedFile]],
) -> str | None:
    if item.went == GONE:
        return "deleted outright (auto.purge=true, no trash on the storage, or no trash root): nothing to put back"
    if not item.went.startswith(("trash:", "version:")):
        return f"unknown destination {item.went!r} in the ledger"
    if item.directory in directories_back:
        return (
            f"directory {item.directory} exists again (written since the cleanup); undo never mixes files into it: "
            "move it away first if its files are to be replaced"
        )
    if fs.exists(target):
        return f"{target} exists; undo never overwrites a file"
    if item.went.startswith("version:"):
        return _why_not_version(item, target, fs)
    source = item.went.removeprefix("trash:")
    parent, name = posixpath.split(source)
    listing = trash_listings.get(parent)
    if listing is None:
        try:
            listing = {file.path: file for file in fs.list_files(parent) if "/" not in file.path}
        except (StorageError, OSError):
            listing = {}
        trash_listings[parent] = listing
    found = listing.get(name)
    if found is None:
        return "no longer in the trash (emptied, or expired after its interval): it cannot be put back"
    if found.size != item.size or not _same_identity(item.identity, found.identity):
        return f"the trash holds another file at {source} now (size or identity changed); left where it is"
    return None


def _why_not_version(item: RemovedFile, target: str, fs: FileSystem) -> str | None:
    has_version = getattr(fs, "has_version", None)
    if has_version is None:
        return "the ledger names an S3 version but this storage keeps none"
    if not has_version(target, item.went.removeprefix("version:")):
        return "its S3 version is no longer kept (expired by a lifecycle rule, or deleted): it cannot be put back"
    return None


def _same_identity(recorded: str, now: str) -> bool:
    """A rename keeps HDFS's modification time and a local file's inode; an S3 copy into the trash
    keeps the ETag but not the modification time, so only the ETag is compared there."""
    if "etag=" in recorded:
        return _field(recorded, "etag") == _field(now, "etag")
    return recorded == now


def _field(identity: str, name: str) -> str | None:
    for part in identity.split(","):
        key, _, value = part.partition("=")
        if key == name:
            return value
    return None


def apply_undo(plan: UndoPlan, fs: FileSystem) -> UndoResult:
    """Rename each planned file back; one whose place was taken meanwhile stays in the trash."""
    restored: list[Restore] = []
    refused = list(plan.refused)
    made: set[str] = set()
    for item in plan.restores:
        parent = posixpath.dirname(item.target)
        try:
            if parent not in made:
                fs.make_dirs(parent)
                made.add(parent)
            if fs.exists(item.target):
                refused.append(Refused(item.file, f"{item.target} appeared before undo reached it; not overwritten"))
                continue
            if item.source.startswith("version:"):
                restore_version = getattr(fs, "restore_version", None)
                if restore_version is None:
                    raise StorageError("this storage keeps no versions")
                restore_version(item.target, item.source.removeprefix("version:"))
            else:
                # S3 has no rename: the file is copied whole (never over an object), then deleted.
                move = getattr(fs, "move_file", None) or fs.rename
                move(item.source, item.target)
        except StorageError as error:
            refused.append(Refused(item.file, f"not put back: {error}"))
            continue
        restored.append(item)
    return UndoResult(tuple(restored), tuple(refused))
