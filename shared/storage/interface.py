"""What acidclean needs of storage: the :class:`FileSystem` protocol and its plain values.

Nothing here touches storage or imports pyarrow or a backend; the cleaner's rules and the unit tests'
fakes use these types alone. :mod:`acidclean.shared.storage.arrow` implements the protocol over
``pyarrow.fs`` (locally), :mod:`~acidclean.shared.storage.hdfs` and :mod:`~acidclean.shared.storage.s3`
extend it, and :mod:`~acidclean.shared.storage.registry` chooses one by a location's URI scheme.

A file's name says nothing about which file it is now: the cleaner records, at its check, every file
of an obsolete directory with its storage identity and size (:class:`ListedFile`) and compares them
again just before it deletes (rule 9, :func:`file_difference`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from acidclean.shared.errors import AcidCleanError


@dataclass(frozen=True)
class ListedFile:
    """One file under a directory, as a listing saw it.

    ``identity`` is what tells this file from another of the same name and size on its storage:
    ``ino=..,dev=..,mtime_ns=..`` on a local file system; ``etag=..,modified=..`` (and ``version=..``
    when the bucket is versioned) on S3; ``mtime_ns=..`` on HDFS, whose client does not expose the
    file id (a file written again with the same size in the same millisecond is not told apart).
    """

    path: str  # relative to the directory listed, "/"-separated
    size: int
    identity: str


def file_difference(checked: ListedFile | None, now: ListedFile) -> str | None:
    """Why the file listed ``now`` is not the one listed at the check, or None when it is."""
    if checked is None:
        return "not listed at the check"
    if checked.size != now.size:
        return f"size changed from {checked.size} to {now.size}"
    if checked.identity != now.identity:
        return f"another file now ({now.identity}, checked {checked.identity})"
    return None


@dataclass(frozen=True)
class Entry:
    """One child of a directory."""

    name: str
    is_dir: bool
    size: int
    is_symlink: bool = False


@dataclass(frozen=True)
class TreeSize:
    files: int
    bytes: int


class FileSystem(Protocol):
    """The storage operations of acidclean, on absolute paths of one file system."""

    def list_dir(self, path: str) -> list[Entry]: ...

    def exists(self, path: str) -> bool: ...

    def tree_size(self, path: str) -> TreeSize: ...

    def delete_dir(self, path: str) -> None: ...

    def rename(self, source: str, target: str) -> None: ...

    def make_dirs(self, path: str) -> None: ...

    def real_path(self, path: str) -> str: ...

    def read_file(self, path: str) -> bytes | None:
        """A small file's bytes, or None if it does not exist."""
        ...

    def list_files(self, path: str) -> list[ListedFile]:
        """Every file under ``path`` (recursively), with its identity and size, listed now (never from
        a cached listing); empty when ``path`` does not exist."""
        ...

    def delete_files(self, path: str, names: list[str]) -> None:
        """Delete exactly these files under ``path`` (relative names); one already gone is deleted."""
        ...

    def delete_empty_dir(self, path: str) -> bool:
        """Remove ``path`` and its subdirectories only if no file is left under them; True when it is
        gone (or was), False when a file is still there (then nothing of it is removed)."""
        ...


class StorageError(AcidCleanError):
    """A storage call failed."""
