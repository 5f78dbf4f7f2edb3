"""What acidclean needs of storage: the :class:`FileSystem` protocol and its plain values.

Nothing here touches storage or imports pyarrow; the cleaner's rules and the unit tests' fakes use
these types alone. :mod:`acidclean.shared.arrow_filesystem` implements the protocol over
``pyarrow.fs`` for local paths, HDFS and S3.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from acidclean.shared.errors import AcidCleanError
from acidclean.shared.identity import ListedFile


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
