"""Where a cleanup's files go: Hive's ``FileUtils.moveToTrash`` semantics, per storage.

Hive's cleaner (``FSRemover``) does not delete obsolete directories outright: it moves them to the
trash unless the table says ``auto.purge=true`` or the trash is off. acidclean does the same, file by
file, only with the files rule 9 confirmed (docs/design.md section 7, rule 9: check, then move):

- HDFS: the owner's ``/user/<user>/.Trash/Current/<original path>``, by hdfs-native's ``trash()``, which
  follows Hadoop's default trash policy and its ``fs.trash.interval`` as the NameNode reports it (a
  NameNode whose own value is 0 has no trash, whatever the client's configuration says: then the file
  is deleted, as Hive's ``moveToTrash`` deletes when ``Trash.moveToAppropriateTrash`` declines). The
  NameNode's trash emptier expires it.
- S3, versioned bucket: deleted; the bucket keeps the file as a noncurrent version (the ledger records
  its version id). Unversioned: copied under the configured trash root and deleted (S3 has no
  rename), else deleted outright.
- Local storage: moved under the configured trash root, else deleted outright.

acidclean's own trash (local and S3) is written as Hadoop writes checkpoints: each cleanup's files go
under ``<root>/<checkpoint>/<original path>``, the checkpoint named by the time (``yyMMddHHmmss``);
:func:`expired_checkpoints` names those older than the interval, which the cleaner removes.

Each disposal returns where each file went, as the ledger records it: ``trash:<path>``,
``version:<id>`` or ``gone``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from acidclean.shared.storage.interface import FileSystem, ListedFile, StorageError

AUTO_PURGE = "auto.purge"  # Hive's table property: delete, never trash
REPLICATION_SOURCE = "repl.source.for"  # Hive's database parameter of a replication source
GONE = "gone"
CHECKPOINT_FORMAT = "%y%m%d%H%M%S"  # Hadoop's TrashPolicyDefault checkpoint names
_CHECKPOINT = re.compile(r"^\d{12}$")
_VERSION = re.compile(r"(?:^|,)version=([^,]+)")


@dataclass(frozen=True)
class TrashPolicy:
    """The cleaner's trash settings.

    ``enabled``: Hive's semantics (trash unless ``auto.purge``); off deletes everything outright.
    ``root``: where local and S3 files go (a path or URI on the table's storage); none deletes them
    (a versioned S3 bucket keeps versions either way). ``interval_min``: how long acidclean's own
    trash keeps them (Hadoop's ``fs.trash.interval``; HDFS uses its NameNode's own value).
    """

    enabled: bool = True
    root: str | None = None
    interval_min: int = 1440


def purge_requested(parameters: Mapping[str, str]) -> bool:
    """Whether the table's ``auto.purge`` asks for deletes that skip the trash (Hive's ``isPurge``)."""
    return parameters.get(AUTO_PURGE, "").strip().lower() == "true"


def replication_note(database_parameters: Mapping[str, str]) -> str | None:
    """One line when the database is a replication source: Hive's cleaner also recycles its files
    through the replication change manager (``ReplChangeManager``); acidclean does not."""
    source = database_parameters.get(REPLICATION_SOURCE, "").strip()
    if not source:
        return None
    return (
        f"the database is a replication source ({REPLICATION_SOURCE}={source}): acidclean does not copy removed "
        "files to Hive's change manager (cmroot); run Hive's own compactor on tables a replication policy "
        "still needs, or re-bootstrap the replica after a cleanup"
    )


def version_of(identity: str) -> str | None:
    """The S3 version id of a listed file (``version=..`` in its identity), if the bucket is versioned."""
    match = _VERSION.search(identity)
    return match.group(1) if match else None


class Disposal(Protocol):
    """Removes confirmed files from their directory; says where each went (in order)."""

    def dispose(self, directory: str, files: Sequence[ListedFile]) -> list[str]: ...


@dataclass(frozen=True)
class Delete:
    """Delete outright (``auto.purge``, trash off, no trash root); a versioned S3 bucket keeps versions."""

    fs: FileSystem

    def dispose(self, directory: str, files: Sequence[ListedFile]) -> list[str]:
        self.fs.delete_files(directory, [item.path for item in files])
        return [_where_deleted(item) for item in files]


@dataclass(frozen=True)
class S3Versions:
    """Delete in a versioned S3 bucket: each object stays as a noncurrent version, whose id (read just
    before the delete, one listing of the directory's versions) the ledger records."""

    fs: Any  # an S3FileSystem: current_versions, delete_files

    def dispose(self, directory: str, files: Sequence[ListedFile]) -> list[str]:
        versions: dict[str, str] = self.fs.current_versions(directory)
        self.fs.delete_files(directory, [item.path for item in files])
        return [f"version:{versions[item.path]}" if item.path in versions else GONE for item in files]


def _where_deleted(item: ListedFile) -> str:
    version = version_of(item.identity)
    return GONE if version is None else f"version:{version}"


@dataclass(frozen=True)
class HdfsTrash:
    """Hadoop's default trash policy through hdfs-native's ``Client.trash`` (one rename per file into
    the user's ``.Trash/Current``, a time suffix when the name is taken there). ``native`` is the
    client; ``fs`` deletes when the NameNode has no trash."""

    native: Any
    fs: FileSystem

    def dispose(self, directory: str, files: Sequence[ListedFile]) -> list[str]:
        went: list[str] = []
        for item in files:
            full = f"{directory.rstrip('/')}/{item.path}"
            try:
                target = self.native.trash(full)
            except FileNotFoundError:
                went.append(GONE)
                continue
            except Exception as error:
                if not trash_disabled(error):
                    raise StorageError(f"cannot move {full} to the HDFS trash: {error}") from error
                self.fs.delete_files(directory, [item.path])
                went.append(GONE)
                continue
            went.append(GONE if target is None else f"trash:{target}")
        return went


def trash_disabled(error: BaseException) -> bool:
    """Whether hdfs-native refused ``trash()`` because the NameNode's ``fs.trash.interval`` is 0 (its
    ``TrashNotEnabledError``, which is no ``OSError``: it passes the client's error translation as is)."""
    return type(error).__name__ == "TrashNotEnabledError" or "trash is not enabled" in str(error).lower()


@dataclass(frozen=True)
class PrefixTrash:
    """acidclean's own trash on local storage and S3: each file renamed to
    ``<root>/<checkpoint>/<original path>``; a name taken there gets a time suffix (never overwritten)."""

    fs: FileSystem
    root: str
    checkpoint: str

    def dispose(self, directory: str, files: Sequence[ListedFile]) -> list[str]:
        went: list[str] = []
        made: set[str] = set()
        for item in files:
            source = f"{directory.rstrip('/')}/{item.path}"
            target = trash_path(self.root, self.checkpoint, source)
            parent = target.rsplit("/", 1)[0]
            if parent not in made:
                self.fs.make_dirs(parent)
                made.add(parent)
            suffix = 0
            while self.fs.exists(target):
                suffix += 1
                target = f"{trash_path(self.root, self.checkpoint, source)}.{suffix}"
            # S3 has no rename: a file is copied whole, then deleted (move_file); elsewhere one rename.
            move = getattr(self.fs, "move_file", None) or self.fs.rename
            try:
                move(source, target)
            except StorageError:
                if not self.fs.exists(source):
                    went.append(GONE)  # removed by someone else meanwhile: nothing of ours went anywhere
                    continue
                raise
            went.append(f"trash:{target}")
        return went


def trash_path(root: str, checkpoint: str, source: str) -> str:
    """Where ``source`` goes in the trash checkpoint ``checkpoint`` under ``root``."""
    return f"{root.rstrip('/')}/{checkpoint}/{source.lstrip('/')}"


def checkpoint_name(now: datetime) -> str:
    return now.astimezone(timezone.utc).strftime(CHECKPOINT_FORMAT)


def expired_checkpoints(names: Sequence[str], now: datetime, interval_min: int) -> list[str]:
    """The checkpoint directories among ``names`` older than ``interval_min`` at ``now`` (others,
    ``Current`` and anything not named as a checkpoint, are kept)."""
    limit = now.astimezone(timezone.utc) - timedelta(minutes=interval_min)
    expired = []
    for name in names:
        if not _CHECKPOINT.match(name):
            continue
        made = datetime.strptime(name, CHECKPOINT_FORMAT).replace(tzinfo=timezone.utc)
        if made < limit:
            expired.append(name)
    return sorted(expired)


def disposal_for(
    fs: FileSystem, policy: TrashPolicy, table_parameters: Mapping[str, str], now: datetime, *, versioned: bool
) -> Disposal:
    """How the files of one cleanup go: Hive's choice (purge or trash) by storage (see the module)."""
    if not policy.enabled or purge_requested(table_parameters):
        return Delete(fs)
    native = getattr(fs, "native", None)
    if native is not None and hasattr(native, "trash"):
        return HdfsTrash(native, fs)
    if versioned:
        return S3Versions(fs)
    if policy.root is None:
        return Delete(fs)
    return PrefixTrash(fs, policy.root, checkpoint_name(now))
